"""The rules engine and the goal playbooks (training-throughput, inference-latency,
memory-footprint) as TOML data files next to it."""
