"""The machine: the processes cockpit starts, finds and tells apart, and its event loops."""
