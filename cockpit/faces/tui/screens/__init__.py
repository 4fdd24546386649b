"""The main screen and the modal screens (confirm, quit, help, live servers)."""
