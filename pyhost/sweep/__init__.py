"""Experiment matrices (``pvperf sweep``): workloads x PMU models x smp x
QEMU settings, each cell a `pvperf stat --json` run, in parallel on Ray,
collected in one table.

  matrix   the TOML matrix: parse, check, expand into cells
  runner   run the unfinished cells on Ray; cell state on disk; the
           CSV/Parquet table
"""
