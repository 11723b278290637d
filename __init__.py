"""hpcmem: a hierarchical, validated failure memory for Slurm clusters."""

__version__ = "0.1.0"
