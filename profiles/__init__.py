"""Datasheet profiles, one TOML file per device (shipped as package data)."""
