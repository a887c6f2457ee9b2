"""Kernel trials: the only code that imports torch (lazily, inside run())."""
