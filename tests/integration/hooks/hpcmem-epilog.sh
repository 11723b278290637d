#!/bin/sh
# Epilog / EpilogSlurmctld wrapper of the real-Slurm end-to-end test, modelled on the
# site wrapper in docs/site-epilog.md. Slurm gives it no PATH, and it must exit 0
# whatever happens: a failing epilog drains the node.
#
# Beside it in the lab's hooks directory (written by tests/integration/test_epilog_e2e.py):
#   chained-hook.sh      the hook it stands in for (the lab's record-env.sh), run first
#   hpcmem-epilog.conf   NODE_PYTHON, CTLD_PYTHON, PYLIB, NODE_SPOOL, CTLD_SPOOL, LAB_SLURM_CONF,
#                        SPOOL_GROUP (empty: events readable by the job's user only)
here=$(dirname "$0")
if [ -x "$here/chained-hook.sh" ]; then
    "$here/chained-hook.sh" "$@"
fi
[ -r "$here/hpcmem-epilog.conf" ] || exit 0
. "$here/hpcmem-epilog.conf"
case "${SLURM_SCRIPT_CONTEXT:-}" in
    epilog_slurmd)
        # root on the node: the project's virtualenv Python, the light entry point
        # --group: the site's ingest group may read and drain the events (docs/site-epilog.md)
        "$NODE_PYTHON" -I -m hpcmem.ingest.epilog --spool "$NODE_SPOOL" ${SPOOL_GROUP:+--group "$SPOOL_GROUP"}
        ;;
    epilog_slurmctld)
        # SlurmUser on the controller: it cannot read root's virtualenv here, but the
        # epilog needs only the standard library, so the system Python runs a copy.
        # slurmctld passes no SLURM_CONF; scontrol needs it for a non-default path.
        SLURM_CONF="$LAB_SLURM_CONF"; export SLURM_CONF
        "$CTLD_PYTHON" -I -c "import sys; sys.path.insert(0, '$PYLIB'); from hpcmem.ingest.epilog import main; main()" \
            --spool "$CTLD_SPOOL" ${SPOOL_GROUP:+--group "$SPOOL_GROUP"}
        ;;
esac
exit 0
