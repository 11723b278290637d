#!/bin/sh
# Prolog/Epilog/EpilogSlurmctld for the lab: record the environment Slurm gives the
# script, one file per job and context, in the `out` directory next to this script.
# Slurm sets no PATH for these scripts; dash falls back to its default search path.
out="$(dirname "$0")/out"
env | LC_ALL=C sort > "$out/${SLURM_JOB_ID:-nojob}.${SLURM_SCRIPT_CONTEXT:-unknown}.env"
exit 0
