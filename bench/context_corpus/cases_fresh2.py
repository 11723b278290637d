"""The submissions that make the context corpus's second fresh collection
(data/corpus/context-fresh2/), written after the first, validation and fresh collections,
without looking at how recall treats any of them.

Mostly the Slurm families, again with variations no earlier collection has: OOM at 90, 160,
250, 350 and 700 MB per node (``--mem`` as an argument or in ``#SBATCH`` lines, ``--mem-per-cpu``
x ``-c``, a mix of both; programs that grow in Python, in C 10 MB or 20 MB at a time, in dd's one
buffer or tail's pipe buffer; steps killed under ``srun``), memory, CPU, GPU-count and GPU-type
requests no node has, the job's own 1-minute limit against the partition's MaxTime and QOS
short's cap and against cancellation (by the user, by root) and preemption, account/partition
pairs, unknown accounts and QOS; and a few module/library cases. Other programs, job names and
projects, both users (``alice``; ``bob`` as in the validation collection). Classes that an
earlier collection already defines are reused with the same record; new ones are in
``classes_fresh2.jsonl``. Every instance is in one part, ``fresh2``: no split is drawn.
"""

from __future__ import annotations

from cases import BOB, FFT, GROW, HEAT, MEMB, SIM, STEN, Case

CASES: tuple[Case, ...] = (
    # -- out of memory at five requests per node -----------------------------------------------
    Case("g-oom90-script", "slurm.oom_at_90M", "tally_py.sh", (), ("150",), "agro", stage=GROW, expect="OUT_OF_MEMORY"),
    Case("g-oom90-percpu", "slurm.oom_at_90M", "pack_native.sh", ("--mem-per-cpu=45M", "-c", "2"), ("140",), "robotics", user=BOB, stage=MEMB, expect="OUT_OF_MEMORY"),
    Case("g-oom90-srun", "slurm.oom_at_90M", "step_stencil.sh", ("--mem", "90M", "-J", "relax-grid"), ("140",), "quantum", stage=STEN, expect="OUT_OF_MEMORY"),
    Case("g-oom160-mix", "slurm.oom_at_160M", "plane_mix.sh", ("--mem-per-cpu=80M",), ("260",), "agro", stage=STEN, expect="OUT_OF_MEMORY"),
    Case("g-oom160-srun-py", "slurm.oom_at_160M", "ingest_srun.sh", ("--mem=160M", "-p", "debug"), ("250",), "linguistics", user=BOB, stage=GROW, expect="OUT_OF_MEMORY"),
    Case("g-oom160-pipe", "slurm.oom_at_160M", "tail_buf.sh", (), ("240",), "epidemics", expect="OUT_OF_MEMORY"),
    Case("g-oom250-dd", "slurm.oom_at_250M", "block_dd.sh", ("--mem=250M",), ("400",), "robotics", user=BOB, expect="OUT_OF_MEMORY"),
    Case("g-oom250-script", "slurm.oom_at_250M", "reduce_native.sh", (), ("390",), "quantum", stage=MEMB, expect="OUT_OF_MEMORY"),
    Case("g-oom250-percpu-srun", "slurm.oom_at_250M", "step_stencil.sh", ("--mem-per-cpu=125M", "--cpus-per-task=2"), ("380",), "linguistics", user=BOB, stage=STEN, expect="OUT_OF_MEMORY"),
    Case("g-oom350-py", "slurm.oom_at_350M", "embed_py.sh", ("--mem=350M", "-J", "embed-docs"), ("540",), "linguistics", stage=GROW, expect="OUT_OF_MEMORY"),
    Case("g-oom350-srun", "slurm.oom_at_350M", "align_srun.sh", (), ("530",), "epidemics", user=BOB, stage=MEMB, expect="OUT_OF_MEMORY"),
    Case("g-oom350-percpu", "slurm.oom_at_350M", "plane_mix.sh", ("--mem-per-cpu=175M", "-J", "canopy-fine"), ("540",), "agro", stage=STEN, expect="OUT_OF_MEMORY"),
    Case("g-oom700-script", "slurm.oom_at_700M", "assemble_big.sh", (), ("1040",), "quantum", stage=STEN, expect="OUT_OF_MEMORY"),
    Case("g-oom700-pipe", "slurm.oom_at_700M", "stream_keep.sh", ("--mem", "700M"), ("1000",), "robotics", user=BOB, expect="OUT_OF_MEMORY"),
    Case("g-oom700-srun-py", "slurm.oom_at_700M", "ingest_srun.sh", ("--mem=700M", "-J", "ingest-full"), ("1050",), "linguistics", stage=GROW, expect="OUT_OF_MEMORY"),
    # -- requests no node can satisfy ----------------------------------------------------------
    Case("g-ncmem-3G", "slurm.node_config_mem", "pack_native.sh", ("--mem=3G",), ("100",), "agro"),
    Case("g-ncmem-percpu", "slurm.node_config_mem", "step_stencil.sh", ("--mem-per-cpu=1500M", "-c", "2"), ("100",), "robotics", user=BOB),
    Case("g-ncmem-script", "slurm.node_config_mem", "wgs_call.sh", (), (), "epidemics"),
    Case("g-nccpu-c3", "slurm.node_config_cpus", "embed_py.sh", ("-c", "3", "--mem=100M"), ("100",), "linguistics", user=BOB),
    Case("g-nccpu-script", "slurm.node_config_cpus", "mpi_sweep.sh", (), (), "quantum"),
    Case("g-nccpu-mix", "slurm.node_config_cpus", "omp_wide.sh", ("--ntasks-per-node=2",), (), "agro"),
    Case("g-ncgpu-gres3", "slurm.node_config_gpu_count", "embed_py.sh", ("--gres=gpu:3", "--mem=100M"), ("100",), "linguistics"),
    Case("g-ncgpu-script", "slurm.node_config_gpu_count", "finetune_llm.sh", (), (), "linguistics", user=BOB),
    Case("g-ncgpu-pertask", "slurm.node_config_gpu_count", "pack_native.sh", ("-n", "2", "--gpus-per-task=2", "--mem=100M"), ("100",), "quantum"),
    Case("g-gtype-l40s", "slurm.node_config_gpu_type", "step_stencil.sh", ("--gres=gpu:l40s:1", "--mem=100M"), ("100",), "robotics", user=BOB),
    Case("g-gtype-script", "slurm.node_config_gpu_type", "segment_gpu.sh", (), (), "agro"),
    Case("g-gtype-t4-debug", "slurm.node_config_gpu_type", "embed_py.sh", ("--gres=gpu:t4:2", "-p", "debug", "-t", "2", "--mem=100M"), ("100",), "linguistics"),
    # -- accounts, QOS, partitions -------------------------------------------------------------
    Case("g-acctpart-script", "slurm.account_not_on_partition", "course_grade.sh", (), (), "course"),
    Case("g-acctpart-mix", "slurm.account_not_on_partition", "tutorial.sh", ("--partition=debug",), (), "course"),
    Case("g-acctpart-long", "slurm.account_not_on_partition", "pack_native.sh", ("--account", "teaching", "--partition", "debug", "--time", "2", "--mem=100M"), ("100",), "agro"),
    Case("g-acctdbg-args", "slurm.account_only_on_debug", "embed_py.sh", ("-A", "research", "--mem=100M"), ("100",), "linguistics", user=BOB),
    Case("g-acctdbg-script", "slurm.account_only_on_debug", "recon_main.sh", (), (), "robotics", user=BOB),
    Case("g-acctdbg-long", "slurm.account_only_on_debug", "step_stencil.sh", ("--account=research", "-p", "main", "--mem=100M"), ("100",), "epidemics", user=BOB),
    Case("g-acct-imaging", "slurm.account_unknown", "embed_py.sh", ("-A", "imaging", "--mem=100M"), ("100",), "linguistics"),
    Case("g-acct-typo", "slurm.account_unknown", "typo_acct.sh", (), (), "robotics", user=BOB),
    Case("g-acct-astro", "slurm.account_unknown", "pack_native.sh", ("--account=astro-lab", "--mem=100M"), ("100",), "quantum"),
    Case("g-qos-debug", "slurm.qos_unknown", "embed_py.sh", ("--qos=debug", "--mem=100M"), ("100",), "linguistics"),
    Case("g-qos-premium", "slurm.qos_unknown", "step_stencil.sh", ("-q", "premium", "--mem=100M"), ("100",), "robotics", user=BOB),
    Case("g-qos-script", "slurm.qos_unknown", "qos_gpulong.sh", (), (), "quantum"),
    # -- modules and shared libraries ----------------------------------------------------------
    Case("g-modver-cuda122", "lmod.module_version_unknown", "kernels_make.sh", (), ("cuda/12.2",), "quantum", expect="FAILED"),
    Case("g-modver-gcc103", "lmod.module_version_unknown", "kernels_make.sh", ("-J", "kernels-old"), ("gcc/10.3.0",), "robotics", user=BOB, expect="FAILED"),
    Case("g-modver-cuda117", "lmod.module_version_unknown", "nvcc_build.sh", (), ("cuda/11.7",), "agro", expect="FAILED"),
    Case("g-fft-none", "loader.hpcfft_module_not_loaded", "spectrum.sh", (), (), "quantum", stage=FFT, expect="FAILED"),
    Case("g-fft-cuda-bob", "loader.hpcfft_module_not_loaded", "spectrum.sh", ("-J", "spectrum-gpu"), ("cuda/11.8",), "robotics", user=BOB, stage=FFT, expect="FAILED"),
    Case("g-fft-py-pre", "loader.hpcfft_module_not_loaded", "fft_ctypes.sh", (), (), "epidemics", premodules=("gcc/12.2.0",), stage=FFT, expect="FAILED"),
    # -- the job ended early: cancelled (by its owner or root), preempted ----------------------
    Case("g-cancel-user", "slurm.cancelled", "relax_long.sh", ("--time=10",), (), "quantum", stage=SIM, expect="CANCELLED", action="cancel"),
    Case("g-cancel-bob-srun", "slurm.cancelled", "heat_step.sh", ("-t", "10"), (), "robotics", user=BOB, stage=HEAT, expect="CANCELLED", action="cancel"),
    Case("g-cancel-root", "slurm.cancelled", "heat_step.sh", ("--time=5", "-J", "heat-night"), (), "agro", stage=HEAT, expect="CANCELLED", action="cancel_admin"),
    Case("g-preempt-args", "slurm.preempted", "relax_long.sh", ("-c", "2", "--time=10"), (), "quantum", stage=SIM, expect="PREEMPTED", action="preempt"),
    Case("g-preempt-bob", "slurm.preempted", "wide_hold.sh", (), (), "epidemics", user=BOB, expect="PREEMPTED", action="preempt"),
    Case("g-preempt-srun-debug", "slurm.preempted", "heat_step.sh", ("-c", "2", "-p", "debug", "--time=2"), (), "agro", stage=HEAT, expect="PREEMPTED", action="preempt"),
    # -- time limits: the job's own (1 min), the partition's MaxTime (2 min), the QOS's cap ------
    Case("g-timeout-args", "slurm.timeout_own_limit_1min", "relax_long.sh", ("--time=1",), (), "quantum", stage=SIM, expect="TIMEOUT"),
    Case("g-timeout-script-bob", "slurm.timeout_own_limit_1min", "watch_1m.sh", (), (), "robotics", user=BOB, expect="TIMEOUT"),
    Case("g-timeout-srun-bob", "slurm.timeout_own_limit_1min", "heat_step.sh", ("--time", "0:01:00"), (), "epidemics", user=BOB, stage=HEAT, expect="TIMEOUT"),
    Case("g-timeoutq-args", "slurm.timeout_qos_short_cap", "relax_long.sh", ("--qos=short",), (), "agro", stage=SIM, expect="TIMEOUT"),
    Case("g-timeoutq-script-bob", "slurm.timeout_qos_short_cap", "quick_check.sh", (), (), "linguistics", user=BOB, expect="TIMEOUT"),
    Case("g-timeoutq-srun", "slurm.timeout_qos_short_cap", "heat_step.sh", ("-q", "short", "-J", "heat-short"), (), "quantum", stage=HEAT, expect="TIMEOUT"),
    Case("g-partmax-args-bob", "slurm.timeout_partition_max_debug", "relax_long.sh", ("-p", "debug"), (), "robotics", user=BOB, stage=SIM, expect="TIMEOUT"),
    Case("g-partmax-script", "slurm.timeout_partition_max_debug", "dbg_heat.sh", (), (), "epidemics", stage=HEAT, expect="TIMEOUT"),
    Case("g-partmax-srun", "slurm.timeout_partition_max_debug", "heat_step.sh", ("--partition=debug", "-J", "heat-dbg"), (), "agro", stage=HEAT, expect="TIMEOUT"),
)
