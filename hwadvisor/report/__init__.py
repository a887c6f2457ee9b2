"""Reports: reading and writing, schema, comparison, CI gates, markdown and plots."""
