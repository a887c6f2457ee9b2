"""Whole-job runs under torchrun or Slurm: the launcher's environment, the fleet view, the job.

`launcher` reads the environment a launcher sets (no torch); `fleet` turns what every rank sent
into the report's `cluster` section (nodes, collectives by scope, outliers); `job` is one rank's
run: join the job's process group (trials.distributed), do this rank's work, gather on rank 0.
"""
