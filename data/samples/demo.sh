#!/usr/bin/env bash
# The demo behind `make demo`: hpcmem's main job on the bundled samples, in a store under
# $HPCMEM_HOME (the Makefile points it at .hpcmem-demo/ in the checkout). Idempotent:
# ingesting the same samples again changes nothing.
set -euo pipefail
HPCMEM="${1:-hpcmem}"
SAMPLES="$(cd "$(dirname "$0")" && pwd)"
export HPCMEM_HOME="${HPCMEM_HOME:-$(mktemp -d)}"
export HPCMEM_DISABLE_LOCAL_CONFIG=1
export HPCMEM_CLUSTER=lab

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "store stack (creates and migrates the default user store)"
"$HPCMEM" stores

step "ingest a week of a lab cluster's sacct (failures, resubmissions) and learn from it"
"$HPCMEM" ingest sacct "$SAMPLES/sacct/lab-week.psv" --tz UTC

step "ingest real job logs: failure excerpts refine the signatures"
"$HPCMEM" ingest logs "$SAMPLES/logs"

step "an agent records what fixed a missing CUDA runtime"
"$HPCMEM" record --source agent \
    --error "python3: error while loading shared libraries: libcudart.so.11.0: cannot open shared object file: No such file or directory" \
    --cause "the job's environment has no CUDA 11 runtime: the cuda module was not loaded in the batch script" \
    --fix "load the CUDA 11.8 module in the job script before starting python" \
    --action "module load cuda/11.8" --module cuda/11.8 --partition gpu >/dev/null
echo "recorded"

step "before resubmitting, an agent recalls: job 52004 ran out of memory"
"$HPCMEM" recall --job 52004 --limit 2

step "the same OOM seen on another node, another day (exit status 0: a lesson was found)"
"$HPCMEM" recall "slurmstepd: error: Detected 2 oom-kill event(s) in StepId=88123.batch. Some of your processes may have been killed by the cgroup out-of-memory handler." --partition cpu --limit 1 --json \
    | python3 -c 'import json,sys; d=json.load(sys.stdin); m=d["matches"][0]; print(d["query"]["category"], "->", m["match_kind"], m["fix"])'

step "a loader error from a different program: recalled by its fingerprint"
"$HPCMEM" recall "/home/bob/bin/solver: error while loading shared libraries: libcudart.so.11.0: cannot open shared object file: No such file or directory" --limit 1

step "something never seen: hpcmem says so (exit status 1)"
set +e
"$HPCMEM" recall "frobnicate: quantum flux capacitor misaligned on rank 3" --no-model
echo "exit status: $?"
