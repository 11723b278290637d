#!/usr/bin/env bash
# The demo behind `make demo`: hpcmem's main job on the bundled samples, in a store under
# $HPCMEM_HOME (the Makefile points it at .hpcmem-demo/ in the checkout).
set -euo pipefail
HPCMEM="${1:-hpcmem}"
SAMPLES="$(cd "$(dirname "$0")" && pwd)"
export HPCMEM_HOME="${HPCMEM_HOME:-$(mktemp -d)}"
export HPCMEM_DISABLE_LOCAL_CONFIG=1
export HPCMEM_CLUSTER=demo

echo "== store stack (creates and migrates the default user store)"
"$HPCMEM" stores
