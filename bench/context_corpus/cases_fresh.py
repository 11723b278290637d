"""The submissions that make the context corpus's fresh collection (data/corpus/context-fresh/),
written after the first collection and the validation collection, without looking at how recall
treats either.

The same failure families again, with variations neither earlier collection has: OOM at 120,
200, 450 and 800 MB per node (``--mem`` as an argument, as ``--mem 120M``, in ``#SBATCH`` lines,
or ``--mem-per-cpu`` x ``-c``), memory, CPU and GPU requests no node has (``--mem=5G``,
``--mem-per-cpu=1G -c 2``, ``--ntasks-per-node=3``, ``-n 2 -c 2``, ``--gpus-per-node=4``), other
account/partition pairs, unknown accounts and QOS, unknown versions of other modules (cuda/12.0,
gcc/8.5.0, cuda/11.4, and of the hpcfft module: 1.5, 3.0, 1.1), the missing ``libhpcfft.so.1``
with no module, other modules, or the wrong version loaded, ``module: command not found`` (also
after ``module use``), and jobs cancelled, preempted and timed out in other ways; other programs,
job names and projects, both users (``alice``; ``bob`` as in the validation collection).
Classes that ``classes.jsonl`` or ``classes_validation.jsonl`` already define are reused with
the same cause and fix; new ones are in ``classes_fresh.jsonl``. Every instance is in one part,
``fresh``: no split is drawn.
"""

from __future__ import annotations

from cases import BOB, FFT, GROW, HEAT, MEMB, SIM, STEN, Case

CASES: tuple[Case, ...] = (
    # -- out of memory at four requests per node ----------------------------------------------
    Case("f-oom120-script", "slurm.oom_at_120M", "fit_py.sh", (), ("200",), "hydro", stage=GROW, expect="OUT_OF_MEMORY"),
    Case("f-oom120-membench", "slurm.oom_at_120M", "native_mem.sh", ("--mem", "120M"), ("190",), "neuro", user=BOB, stage=MEMB, expect="OUT_OF_MEMORY"),
    Case("f-oom120-percpu", "slurm.oom_at_120M", "grid_srun.sh", ("--mem-per-cpu=60M", "-c", "2"), ("200",), "materials", user=BOB, stage=STEN, expect="OUT_OF_MEMORY"),
    Case("f-oom200-script", "slurm.oom_at_200M", "hold200.sh", (), ("320",), "ocean", stage=STEN, expect="OUT_OF_MEMORY"),
    Case("f-oom200-membench", "slurm.oom_at_200M", "native_mem.sh", ("--mem=200M", "--ntasks-per-node=1", "-J", "assemble-contigs"), ("330",), "neuro", user=BOB, stage=MEMB, expect="OUT_OF_MEMORY"),
    Case("f-oom200-srun", "slurm.oom_at_200M", "shard_py.sh", ("--mem=200M", "-p", "debug"), ("320",), "hydro", stage=GROW, expect="OUT_OF_MEMORY"),
    Case("f-oom450-percpu", "slurm.oom_at_450M", "grid_srun.sh", ("--mem-per-cpu=450M",), ("680",), "ocean", stage=STEN, expect="OUT_OF_MEMORY"),
    Case("f-oom450-srun", "slurm.oom_at_450M", "shard_py.sh", ("--mem", "450M", "-J", "shard-large"), ("700",), "materials", user=BOB, stage=GROW, expect="OUT_OF_MEMORY"),
    Case("f-oom450-script", "slurm.oom_at_450M", "mesh.sh", ("-J", "mesh-refine"), ("680",), "hydro", stage=MEMB, expect="OUT_OF_MEMORY"),
    Case("f-oom800-membench", "slurm.oom_at_800M", "native_mem.sh", ("--mem=800M", "-J", "assemble-big"), ("1200",), "ocean", stage=MEMB, expect="OUT_OF_MEMORY"),
    Case("f-oom800-percpu", "slurm.oom_at_800M", "grid_srun.sh", ("--mem-per-cpu=400M", "--cpus-per-task=2"), ("1160",), "neuro", user=BOB, stage=STEN, expect="OUT_OF_MEMORY"),
    Case("f-oom800-script", "slurm.oom_at_800M", "big_py.sh", (), ("1150",), "hydro", stage=GROW, expect="OUT_OF_MEMORY"),
    # -- requests no node can satisfy ----------------------------------------------------------
    Case("f-ncmem-5G", "slurm.node_config_mem", "native_mem.sh", ("--mem=5G",), ("100",), "ocean"),
    Case("f-ncmem-percpu1G", "slurm.node_config_mem", "grid_srun.sh", ("--mem-per-cpu=1G", "-c", "2"), ("100",), "materials", user=BOB),
    Case("f-ncmem-script", "slurm.node_config_mem", "bigjoin.sh", (), (), "hydro"),
    Case("f-nccpu-script", "slurm.node_config_cpus", "omp.sh", (), (), "ocean"),
    Case("f-nccpu-tpn3", "slurm.node_config_cpus", "grid_srun.sh", ("--ntasks-per-node=3", "--mem=100M"), ("100",), "neuro", user=BOB),
    Case("f-nccpu-n2c2", "slurm.node_config_cpus", "native_mem.sh", ("-n", "2", "-c", "2", "--mem=100M"), ("100",), "hydro"),
    Case("f-ncgpu-pernode4", "slurm.node_config_gpu_count", "fit_py.sh", ("--gpus-per-node=4",), ("100",), "hydro"),
    Case("f-ncgpu-script3", "slurm.node_config_gpu_count", "train_vit.sh", (), (), "vision", user=BOB),
    Case("f-ncgpu-gpus5", "slurm.node_config_gpu_count", "native_mem.sh", ("--gpus=5", "--mem=100M"), ("100",), "ocean"),
    # -- accounts, QOS, partitions -------------------------------------------------------------
    Case("f-acctpart-long", "slurm.account_not_on_partition", "fit_py.sh", ("--partition", "debug", "--account", "teaching"), ("100",), "hydro"),
    Case("f-acctpart-script", "slurm.account_not_on_partition", "lab_debug.sh", ("--account=teaching",), (), "course"),
    Case("f-acctpart-qos", "slurm.account_not_on_partition", "teach_ex.sh", ("-p", "debug"), (), "course"),
    Case("f-acctdbg-script", "slurm.account_only_on_debug", "research_job.sh", (), (), "vision", user=BOB),
    Case("f-acctdbg-long", "slurm.account_only_on_debug", "native_mem.sh", ("--account", "research", "-t", "5", "--mem=100M"), ("100",), "neuro", user=BOB),
    Case("f-acctdbg-main", "slurm.account_only_on_debug", "lab_main.sh", ("-A", "research"), (), "vision", user=BOB),
    Case("f-acct-bobteach", "slurm.account_unknown", "fit_py.sh", ("-A", "teaching"), ("100",), "materials", user=BOB),
    Case("f-acct-geo", "slurm.account_unknown", "native_mem.sh", ("--account=geophys", "--mem=100M"), ("100",), "ocean"),
    Case("f-acct-typo", "slurm.account_unknown", "acct_typo.sh", (), (), "vision", user=BOB),
    Case("f-qos-low", "slurm.qos_unknown", "fit_py.sh", ("--qos=low",), ("100",), "hydro"),
    Case("f-qos-interactive", "slurm.qos_unknown", "native_mem.sh", ("-q", "interactive", "--mem=100M"), ("100",), "neuro", user=BOB),
    Case("f-qos-script", "slurm.qos_unknown", "scav.sh", (), (), "ocean"),
    # -- modules and shared libraries ----------------------------------------------------------
    Case("f-modver-cuda120", "lmod.module_version_unknown", "build_gpu.sh", (), ("cuda/12.0",), "ocean", expect="FAILED"),
    Case("f-modver-gcc850", "lmod.module_version_unknown", "build_gpu.sh", ("-J", "build-legacy"), ("gcc/8.5.0",), "materials", user=BOB, expect="FAILED"),
    Case("f-modver-pair", "lmod.module_version_unknown", "build_gpu.sh", ("-p", "debug"), ("gcc/12.2.0", "cuda/11.4"), "hydro", expect="FAILED"),
    Case("f-fftver-15", "lmod.hpcfft_version_unknown", "fft_setup.sh", (), ("1.5",), "ocean", stage=FFT, expect="FAILED"),
    Case("f-fftver-30-noexit", "lmod.hpcfft_version_unknown", "fft_run.sh", (), ("hpcfft/3.0",), "neuro", user=BOB, stage=FFT, expect="FAILED"),
    Case("f-fftver-11-srun", "lmod.hpcfft_version_unknown", "fft_step.sh", ("-J", "fft-step-11"), ("hpcfft/1.1",), "hydro", stage=FFT, expect="FAILED"),
    Case("f-nolmod-fft", "lmod.module_command_not_found", "nolmod_fft.sh", (), ("hpcfft/1.0",), "ocean", stage=FFT, expect="FAILED"),
    Case("f-nolmod-nvcc", "lmod.module_command_not_found", "nolmod_nvcc.sh", (), (), "vision", user=BOB, expect="FAILED"),
    Case("f-nolmod-use", "lmod.module_command_not_found", "nolmod_step.sh", ("-p", "debug"), ("gcc/12.2.0", "hpcfft/1.0"), "hydro", stage=FFT, expect="FAILED"),
    Case("f-fft-srun", "loader.hpcfft_module_not_loaded", "fft_step.sh", (), (), "hydro", stage=FFT, expect="FAILED"),
    Case("f-fft-gcc-bob", "loader.hpcfft_module_not_loaded", "fft_run.sh", (), ("gcc/12.2.0",), "materials", user=BOB, stage=FFT, expect="FAILED"),
    Case("f-fft-py-cuda", "loader.hpcfft_module_not_loaded", "fft_py.sh", (), (), "ocean", premodules=("cuda/12.4",), stage=FFT, expect="FAILED"),
    Case("f-fftv-run-bob", "loader.hpcfft_wrong_module_version", "fft_run.sh", ("-J", "spectra-v2"), ("hpcfft/2.0",), "neuro", user=BOB, stage=FFT, expect="FAILED"),
    Case("f-fftv-srun-pre", "loader.hpcfft_wrong_module_version", "fft_step.sh", ("-p", "debug"), (), "ocean", premodules=("hpcfft/2.0",), stage=FFT, expect="FAILED"),
    Case("f-fftv-py-bob", "loader.hpcfft_wrong_module_version", "fft_py.sh", (), ("gcc/13.1.0", "hpcfft/2.0"), "materials", user=BOB, stage=FFT, expect="FAILED"),
    # -- the job ended early: cancelled (by its owner or root), preempted ----------------------
    Case("f-cancel-srunpy", "slurm.cancelled", "sim_step.sh", ("--time=5",), (), "ocean", stage=SIM, expect="CANCELLED", action="cancel"),
    Case("f-cancel-bob-poll", "slurm.cancelled", "poll.sh", ("-t", "5"), (), "neuro", user=BOB, expect="CANCELLED", action="cancel"),
    Case("f-cancel-admin-bob", "slurm.cancelled", "heat_job.sh", ("--time=5", "-J", "heat-admin"), (), "materials", user=BOB, stage=HEAT, expect="CANCELLED", action="cancel_admin"),
    Case("f-preempt-script", "slurm.preempted", "heat_wide.sh", (), (), "hydro", stage=HEAT, expect="PREEMPTED", action="preempt"),
    Case("f-preempt-bob", "slurm.preempted", "sim_step.sh", ("-c", "2", "--time=5"), (), "neuro", user=BOB, stage=SIM, expect="PREEMPTED", action="preempt"),
    Case("f-preempt-debug", "slurm.preempted", "poll.sh", ("-c", "2", "-t", "2", "-p", "debug"), (), "ocean", expect="PREEMPTED", action="preempt"),
    # -- time limits: the partition's MaxTime (2 min), the job's own (1 min), the QOS's cap ------
    Case("f-partmax-script", "slurm.timeout_partition_max_debug", "dbg_sim.sh", (), (), "hydro", stage=SIM, expect="TIMEOUT"),
    Case("f-partmax-bob", "slurm.timeout_partition_max_debug", "sim_step.sh", ("-p", "debug"), (), "neuro", user=BOB, stage=SIM, expect="TIMEOUT"),
    Case("f-partmax-long", "slurm.timeout_partition_max_debug", "poll.sh", ("--partition", "debug"), (), "materials", user=BOB, expect="TIMEOUT"),
    Case("f-timeout-mmss", "slurm.timeout_own_limit_1min", "poll.sh", ("--time=1:00",), (), "ocean", expect="TIMEOUT"),
    Case("f-timeout-script", "slurm.timeout_own_limit_1min", "sim_1min.sh", (), (), "vision", user=BOB, stage=SIM, expect="TIMEOUT"),
    Case("f-timeout-hms-debug", "slurm.timeout_own_limit_1min", "heat_job.sh", ("-t", "00:01:00", "-p", "debug"), (), "hydro", stage=HEAT, expect="TIMEOUT"),
    Case("f-timeoutq-script", "slurm.timeout_qos_short_cap", "qc_quick.sh", (), (), "ocean", stage=HEAT, expect="TIMEOUT"),
    Case("f-timeoutq-bob", "slurm.timeout_qos_short_cap", "heat_job.sh", ("--qos", "short"), (), "materials", user=BOB, stage=HEAT, expect="TIMEOUT"),
    Case("f-timeoutq-debug", "slurm.timeout_qos_short_cap", "poll.sh", ("-q", "short", "-p", "debug"), (), "hydro", expect="TIMEOUT"),
)
