"""cockpit: a terminal experiment cockpit for serving LLMs on multi-GPU boxes."""

__version__ = "0.1.0"
