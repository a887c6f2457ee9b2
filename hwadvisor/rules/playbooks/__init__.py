"""The playbooks: the rules as TOML data, their schema, conditions, facts, metrics and planners."""
