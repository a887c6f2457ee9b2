"""hwadvisor: hardware-aware optimization advice for training and serving LLMs."""

__version__ = "0.1.0"
