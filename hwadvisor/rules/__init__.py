"""The rules engine, and the goal playbooks A/B/C as TOML data files next to it."""
