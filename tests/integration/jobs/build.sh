#!/bin/bash
#SBATCH --job-name=build
#SBATCH --time=2
#SBATCH --mem=100M
#SBATCH --output=%x-%j.out
# The agent-loop test's module job: it loads a module version the lab's tree does not
# have (gcc 12.2.0 and 13.1.0 exist), so Lmod refuses and the job fails. The test edits
# the version to fix it, and loads cuda/13.0 (no such version) for a different failure.
set -e
export MODULEPATH="$HPCMEM_LAB_MODULES"
source "$HPCMEM_LAB_LMOD_INIT"
module load gcc/14.2.0
echo "building with gcc $HPCMEM_GCC_VERSION"
