"""The validator: runs trials for advice and plans, and turns measurements into verdicts."""
