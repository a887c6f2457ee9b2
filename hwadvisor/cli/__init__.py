"""The command line: typer app, shared options, rich rendering, one module per command."""
