"""What a person meets: the command line, the prompt grammar, the screen, the web face, headless runs."""
