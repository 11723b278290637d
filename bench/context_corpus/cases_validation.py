"""The submissions that make the context corpus's validation collection
(data/corpus/context-validation/), written after the first collection and the context rules.

The same failure families as ``cases.py``, made again with other programs (numpy in a
project venv, a C grid solver that mallocs and fills its planes, ``dd`` and ``head | tail``
pipes, a C heat loop, ``srun`` steps), other amounts (OOM at 150, 300 and 600 MB per node),
another user (``bob``: default account ``imaging``, account ``research`` on partition
``debug`` only), other projects and job names, other forms of the request (``#SBATCH`` lines
or arguments, ``--mem-per-cpu``, ``--gpus``/``--gres``/``--gpus-per-task``, ``-t H:MM:SS``)
and another library behind modules (``libhpcblas.so.1``/``.so.2``, ``hpcblas/1.0``/``2.0``).
Class causes and fixes are in ``classes_validation.jsonl`` (classes that ``classes.jsonl``
already defines are reused with the same cause and fix). Every instance is in one part,
``validation``: no split is drawn.

Within each phase the driver submits in this order, so the 2-minute partition-limit jobs
are queued before the 1-minute ones.
"""

from __future__ import annotations

from cases import BOB, HEAT, STEN, Case

FEAT = ("features_np.py",)
BLAS = ("dgemm_bench", "eigsolve", "blas_check.py")
NP = ("numpy",)

CASES: tuple[Case, ...] = (
    # -- out of memory at three new requests --------------------------------------------------
    Case("v-oom150-np", "slurm.oom_at_150M", "features.sh", (), ("250",), "climate", stage=FEAT, venv=True, packages=NP, expect="OUT_OF_MEMORY"),
    Case("v-oom150-stencil", "slurm.oom_at_150M", "stencil.sh", ("--mem=150M",), ("220",), "seismic", user=BOB, stage=STEN, expect="OUT_OF_MEMORY"),
    Case("v-oom150-dd-percpu", "slurm.oom_at_150M", "scratch_dd.sh", ("--mem-per-cpu=150M",), ("260",), "astro", user=BOB, expect="OUT_OF_MEMORY"),
    Case("v-oom150-srun", "slurm.oom_at_150M", "features_srun.sh", ("--mem=150M", "-p", "debug"), ("240",), "climate", stage=FEAT, venv=True, packages=NP, expect="OUT_OF_MEMORY"),
    Case("v-oom300-np", "slurm.oom_at_300M", "features.sh", ("--mem=300M", "-J", "embed-np"), ("450",), "astro", user=BOB, stage=FEAT, venv=True, packages=NP, expect="OUT_OF_MEMORY"),
    Case("v-oom300-stencil", "slurm.oom_at_300M", "stencil.sh", (), ("420",), "proteomics", stage=STEN, expect="OUT_OF_MEMORY"),
    Case("v-oom300-pipe", "slurm.oom_at_300M", "scratch_pipe.sh", ("--mem=300M",), ("480",), "climate", expect="OUT_OF_MEMORY"),
    Case("v-oom300-percpu", "slurm.oom_at_300M", "stencil_srun.sh", ("--mem-per-cpu=150M", "-c", "2"), ("400",), "seismic", user=BOB, stage=STEN, expect="OUT_OF_MEMORY"),
    Case("v-oom600-np", "slurm.oom_at_600M", "features.sh", ("--mem=600M",), ("900",), "proteomics", stage=FEAT, venv=True, packages=NP, expect="OUT_OF_MEMORY"),
    Case("v-oom600-srun", "slurm.oom_at_600M", "stencil_srun.sh", ("--mem=600M",), ("850",), "seismic", user=BOB, stage=STEN, expect="OUT_OF_MEMORY"),
    Case("v-oom600-dd", "slurm.oom_at_600M", "scratch_dd.sh", ("--mem=600M", "-J", "stage-block"), ("950",), "climate", expect="OUT_OF_MEMORY"),
    # -- requests no node can satisfy --------------------------------------------------------
    Case("v-ncmem-script", "slurm.node_config_mem", "bigsort.sh", (), (), "proteomics"),
    Case("v-ncmem-2048", "slurm.node_config_mem", "features.sh", ("--mem=2048M",), ("100",), "astro", user=BOB),
    Case("v-ncmem-percpu", "slurm.node_config_mem", "stencil_srun.sh", ("--mem-per-cpu=1100M", "-c", "2"), ("100",), "seismic", user=BOB),
    Case("v-ncmem-percpu3000", "slurm.node_config_mem", "scratch_pipe.sh", ("--mem-per-cpu=3000M",), ("100",), "climate"),
    Case("v-nccpu-n3", "slurm.node_config_cpus", "heat.sh", ("-n", "3"), (), "climate"),
    Case("v-nccpu-tpn4", "slurm.node_config_cpus", "features_srun.sh", ("--ntasks-per-node=4",), ("100",), "astro", user=BOB),
    Case("v-nccpu-script16", "slurm.node_config_cpus", "mdrun.sh", (), (), "proteomics"),
    Case("v-nccpu-mincpus3", "slurm.node_config_cpus", "stencil.sh", ("--mincpus=3",), ("100",), "seismic", user=BOB),
    Case("v-nctopo-cps4", "slurm.node_config_topology", "heat.sh", ("--cores-per-socket=4",), (), "climate"),
    Case("v-nctopo-tpc4", "slurm.node_config_topology", "stencil.sh", ("--threads-per-core=4",), ("100",), "seismic", user=BOB),
    Case("v-nctopo-spn2cps2", "slurm.node_config_topology", "features_srun.sh", ("--sockets-per-node=2", "--cores-per-socket=2"), ("100",), "proteomics"),
    Case("v-ncgpu-script3", "slurm.node_config_gpu_count", "train_ddp.sh", (), (), "proteomics"),
    Case("v-ncgpu-G4", "slurm.node_config_gpu_count", "heat.sh", ("-G", "4"), (), "climate"),
    Case("v-ncgpu-pertask3", "slurm.node_config_gpu_count", "features_srun.sh", ("--gpus-per-task=3", "-n", "1"), ("100",), "astro", user=BOB),
    Case("v-ncgpu-pernode8", "slurm.node_config_gpu_count", "stencil.sh", ("--gpus-per-node=8",), ("100",), "seismic", user=BOB),
    Case("v-gtype-h100", "slurm.node_config_gpu_type", "features_srun.sh", ("--gres=gpu:h100:1",), ("100",), "climate"),
    Case("v-gtype-a40", "slurm.node_config_gpu_type", "stencil.sh", ("--gpus=a40:2",), ("100",), "seismic", user=BOB),
    Case("v-gtype-script", "slurm.node_config_gpu_type", "render.sh", (), (), "imaging-ml"),
    Case("v-gname-mps", "slurm.gres_name_invalid", "heat.sh", ("--gres=mps:50",), (), "climate"),
    Case("v-gname-shard", "slurm.gres_name_invalid", "features_srun.sh", ("--gres=shard:1",), ("100",), "astro", user=BOB),
    Case("v-gname-nvme", "slurm.gres_name_invalid", "stencil.sh", ("--gres=nvme:1",), ("100",), "seismic", user=BOB),
    # -- accounts, QOS and partition limits ---------------------------------------------------
    Case("v-acctpart-script", "slurm.account_not_on_partition", "course_lab.sh", (), (), "teaching-lab"),
    Case("v-acctpart-args", "slurm.account_not_on_partition", "heat.sh", ("--account", "teaching", "-p", "debug"), (), "climate"),
    Case("v-acctpart-mixed", "slurm.account_not_on_partition", "debug_run.sh", ("-A", "teaching"), (), "proteomics"),
    Case("v-acctdbg-args", "slurm.account_only_on_debug", "heat.sh", ("-A", "research"), (), "astro", user=BOB),
    Case("v-acctdbg-main", "slurm.account_only_on_debug", "stencil.sh", ("--account=research", "--partition=main"), ("100",), "seismic", user=BOB),
    Case("v-acctdbg-script", "slurm.account_only_on_debug", "calib.sh", (), (), "astro", user=BOB),
    Case("v-acct-imaging", "slurm.account_unknown", "heat.sh", ("-A", "imaging"), (), "climate"),
    Case("v-acct-typo", "slurm.account_unknown", "stencil.sh", ("--account=reserch",), ("100",), "proteomics"),
    Case("v-acct-astro", "slurm.account_unknown", "features_srun.sh", ("--account", "astro-lab"), ("100",), "climate"),
    Case("v-qos-debug", "slurm.qos_unknown", "heat.sh", ("--qos=debug",), (), "climate"),
    Case("v-qos-standby", "slurm.qos_unknown", "stencil.sh", ("-q", "standby"), ("100",), "seismic", user=BOB),
    Case("v-qos-script", "slurm.qos_unknown", "ingest.sh", (), (), "proteomics"),
    Case("v-qoswall-2", "slurm.qos_wall_exceeded", "heat_notime.sh", ("--qos=short", "--time=2"), (), "climate"),
    Case("v-qoswall-hms", "slurm.qos_wall_exceeded", "stencil.sh", ("-q", "short", "-t", "00:10:00"), ("100",), "seismic", user=BOB),
    Case("v-qoswall-script", "slurm.qos_wall_exceeded", "longfit.sh", (), (), "proteomics"),
    Case("v-parttime-3", "slurm.partition_time_exceeded", "heat_notime.sh", ("-p", "debug", "--time=3"), (), "climate"),
    Case("v-parttime-hms", "slurm.partition_time_exceeded", "features_srun.sh", ("-p", "debug", "-t", "1:00:00"), ("100",), "astro", user=BOB),
    Case("v-parttime-script", "slurm.partition_time_exceeded", "nightly.sh", (), (), "proteomics"),
    # -- modules and shared libraries ---------------------------------------------------------
    Case("v-modver-cuda117", "lmod.module_version_unknown", "build_cuda.sh", (), ("cuda/11.7",), "climate", expect="FAILED"),
    Case("v-modver-gcc103", "lmod.module_version_unknown", "build_cuda.sh", ("-J", "build-gcc"), ("gcc/10.3.0",), "seismic", user=BOB, expect="FAILED"),
    Case("v-modver-pair", "lmod.module_version_unknown", "build_cuda.sh", ("-p", "debug"), ("gcc/13.1.0", "cuda/12.2"), "proteomics", expect="FAILED"),
    Case("v-blasver-30", "lmod.hpcblas_version_unknown", "blas_setup.sh", (), ("3.0",), "climate", stage=BLAS, expect="FAILED"),
    Case("v-blasver-12", "lmod.hpcblas_version_unknown", "blas_setup.sh", ("-J", "blas-setup-old"), ("1.2",), "astro", user=BOB, stage=BLAS, expect="FAILED"),
    Case("v-blasver-noexit", "lmod.hpcblas_version_unknown", "blas_run.sh", (), ("hpcblas/2.1",), "proteomics", stage=BLAS, expect="FAILED"),
    Case("v-nolmod-blas", "lmod.module_command_not_found", "nolmod_run.sh", (), ("hpcblas/1.0",), "climate", stage=BLAS, expect="FAILED"),
    Case("v-nolmod-purge", "lmod.module_command_not_found", "nolmod_purge.sh", (), ("gcc/13.1.0",), "seismic", user=BOB, expect="FAILED"),
    Case("v-nolmod-pair", "lmod.module_command_not_found", "nolmod_run.sh", ("-p", "debug"), ("cuda/12.4", "gcc/13.1.0"), "astro", user=BOB, stage=BLAS, expect="FAILED"),
    Case("v-blas-bare", "loader.hpcblas_module_not_loaded", "blas_run.sh", (), (), "climate", stage=BLAS, expect="FAILED"),
    Case("v-blas-srun-gcc", "loader.hpcblas_module_not_loaded", "blas_srun.sh", (), ("gcc/13.1.0",), "seismic", user=BOB, stage=BLAS, expect="FAILED"),
    Case("v-blas-py", "loader.hpcblas_module_not_loaded", "blas_py.sh", (), ("libhpcblas.so.1",), "astro", user=BOB, stage=BLAS, expect="FAILED"),
    Case("v-blas-fft", "loader.hpcblas_module_not_loaded", "blas_run.sh", ("-J", "blas-run-fft"), (), "proteomics", premodules=("hpcfft/1.0",), stage=BLAS, expect="FAILED"),
    Case("v-blasv-run", "loader.hpcblas_wrong_module_version", "blas_run.sh", (), ("hpcblas/2.0",), "climate", stage=BLAS, expect="FAILED"),
    Case("v-blasv-py", "loader.hpcblas_wrong_module_version", "blas_py.sh", (), ("libhpcblas.so.1",), "astro", user=BOB, premodules=("hpcblas/2.0",), stage=BLAS, expect="FAILED"),
    Case("v-blasv-srun", "loader.hpcblas_wrong_module_version", "blas_srun.sh", ("-p", "debug"), ("hpcblas/2.0",), "proteomics", stage=BLAS, expect="FAILED"),
    Case("v-eig-run", "loader.hpcblas_so2_old_module_loaded", "eig.sh", (), ("hpcblas/1.0",), "climate", stage=BLAS, expect="FAILED"),
    Case("v-eig-py", "loader.hpcblas_so2_old_module_loaded", "blas_py.sh", ("-J", "blas-py2"), ("libhpcblas.so.2",), "proteomics", premodules=("hpcblas/1.0",), stage=BLAS, expect="FAILED"),
    Case("v-eig-srun", "loader.hpcblas_so2_old_module_loaded", "eig_srun.sh", (), ("hpcblas/1.0", "gcc/13.1.0"), "seismic", user=BOB, stage=BLAS, expect="FAILED"),
    # -- the job ended early: cancelled (by its owner or root), preempted ---------------------
    Case("v-cancel-heat", "slurm.cancelled", "heat.sh", ("--time=5",), (), "climate", stage=HEAT, expect="CANCELLED", action="cancel"),
    Case("v-cancel-bob", "slurm.cancelled", "watch.sh", ("--time=5",), (), "astro", user=BOB, expect="CANCELLED", action="cancel"),
    Case("v-cancel-admin", "slurm.cancelled", "heat_srun.sh", ("--time=5",), (), "seismic", user=BOB, stage=HEAT, expect="CANCELLED", action="cancel_admin"),
    Case("v-preempt-heat", "slurm.preempted", "heat_notime.sh", ("-c", "2", "--time=5"), (), "climate", stage=HEAT, expect="PREEMPTED", action="preempt"),
    Case("v-preempt-watch", "slurm.preempted", "watch.sh", ("-c", "2", "--time=5"), (), "astro", user=BOB, expect="PREEMPTED", action="preempt"),
    Case("v-preempt-srun", "slurm.preempted", "heat_srun.sh", ("-c", "2", "--time=2", "-p", "debug"), (), "proteomics", stage=HEAT, expect="PREEMPTED", action="preempt"),
    # -- time limits: the partition's MaxTime (2 min), the job's own (1 min), the QOS's cap ----
    Case("v-partmax-heat", "slurm.timeout_partition_max_debug", "heat_notime.sh", ("-p", "debug"), (), "climate", stage=HEAT, expect="TIMEOUT"),
    Case("v-partmax-script", "slurm.timeout_partition_max_debug", "debug_run.sh", (), (), "astro", user=BOB, expect="TIMEOUT"),
    Case("v-partmax-srun", "slurm.timeout_partition_max_debug", "heat_srun.sh", ("--partition=debug",), (), "proteomics", stage=HEAT, expect="TIMEOUT"),
    Case("v-timeout-heat", "slurm.timeout_own_limit_1min", "heat.sh", (), (), "climate", stage=HEAT, expect="TIMEOUT"),
    Case("v-timeout-watch", "slurm.timeout_own_limit_1min", "watch.sh", ("--time=1",), (), "astro", user=BOB, expect="TIMEOUT"),
    Case("v-timeout-srun", "slurm.timeout_own_limit_1min", "heat_srun.sh", ("-t", "1", "-p", "debug"), (), "proteomics", stage=HEAT, expect="TIMEOUT"),
    Case("v-timeoutq-script", "slurm.timeout_qos_short_cap", "qc_short.sh", (), (), "climate", stage=HEAT, expect="TIMEOUT"),
    Case("v-timeoutq-watch", "slurm.timeout_qos_short_cap", "watch.sh", ("--qos=short",), (), "astro", user=BOB, expect="TIMEOUT"),
    Case("v-timeoutq-srun", "slurm.timeout_qos_short_cap", "heat_srun.sh", ("-q", "short"), (), "seismic", user=BOB, stage=HEAT, expect="TIMEOUT"),
)
