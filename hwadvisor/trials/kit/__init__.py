"""What the trials share: timing, shapes, the blocks they time, quantisation ops, torch facts.

A trial module imports from here; nothing here is a trial (trials/registry.py lists those).
"""
