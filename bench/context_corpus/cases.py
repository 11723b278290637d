"""The submissions that make the context corpus, and the rule that splits it.

A case is one real submission on the Slurm lab: a job script from ``jobs/``, the sbatch
arguments and script arguments it is submitted with, the project directory it is submitted
from, the modules loaded in the submitting shell, and what is done to it once it runs
(cancel, preempt). Its ``cls`` is the root cause the submission was built to have; the
driver checks the outcome (rejected / the final state) and drops a case whose failure did
not happen as built. Class causes and fixes are in ``classes.jsonl``.

The split is decided here, before any run: a class's *family* (classes that share their
text and differ in cause: OOM at three requests, node configuration for memory, CPUs and
GPUs, ...) is hashed with a fixed seed, as ``bench/recall_corpus.py`` splits data/corpus/,
so confusable classes are always on the same side.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

SEED = "hpcmem-context-corpus-2026-12-05"
PARTS = ("calibration", "heldout")


def part_of_family(family: str) -> str:
    digest = hashlib.sha256(f"{SEED}\npart\n{family}".encode()).hexdigest()
    return PARTS[int(digest, 16) % 2]


@dataclass(frozen=True)
class Case:
    name: str
    cls: str
    script: str
    args: tuple[str, ...] = ()
    script_args: tuple[str, ...] = ()
    project: str = "proj"
    premodules: tuple[str, ...] = ()  # `module load` in the submitting shell
    expect: str = "REJECTED"  # or the sacct State the job or one of its steps must end in
    action: str | None = None  # "cancel" (by the user), "cancel_admin", "preempt"
    stage: tuple[str, ...] = field(default=())  # programs copied into the project dir
    # Added for the validation set (cases_validation.py); the defaults leave these cases as they were.
    user: str | None = None  # who submits (None: the lab's user, alice)
    venv: bool = False  # the project has its own venv (python3 -m venv .venv; pip installs `packages`)
    packages: tuple[str, ...] = ()  # packages whose version the job's Python reports


# The programs a case's stage copies into its project, shared by every collection's cases.
GROW = ("grow.py",)
MEMB = ("membench",)
SIM = ("simulate.py",)
FFT = ("solver", "fft_bench", "load_fft.py")
STEN = ("stencil",)
HEAT = ("heat",)
BOB = "bob"  # the later collections' second user

CASES: tuple[Case, ...] = (
    # -- out of memory at three requests (cgroup v1 enforces --mem) ------------------------
    Case("oom100-grow", "slurm.oom_at_100M", "oom_grow.sh", ("--mem=100M",), ("160",), "genomics", stage=GROW, expect="OUT_OF_MEMORY"),
    Case("oom100-membench", "slurm.oom_at_100M", "oom_membench.sh", ("--mem=100M", "-p", "debug"), ("150",), "cfd", stage=MEMB, expect="OUT_OF_MEMORY"),
    Case("oom100-srun", "slurm.oom_at_100M", "oom_srun.sh", ("--mem=100M", "-J", "tokenize-small"), ("170",), "nlp", stage=GROW, expect="OUT_OF_MEMORY"),
    Case("oom100-features", "slurm.oom_at_100M", "oom_grow.sh", ("--mem=100M", "-J", "features"), ("140",), "nlp", stage=GROW, expect="OUT_OF_MEMORY"),
    Case("oom200-grow", "slurm.oom_at_200M", "oom_grow.sh", ("--mem=200M",), ("280",), "genomics", stage=GROW, expect="OUT_OF_MEMORY"),
    Case("oom200-membench", "slurm.oom_at_200M", "oom_membench.sh", ("--mem=200M",), ("320",), "cfd", stage=MEMB, expect="OUT_OF_MEMORY"),
    Case("oom200-srun", "slurm.oom_at_200M", "oom_srun.sh", ("--mem=200M", "-p", "debug"), ("300",), "nlp", stage=GROW, expect="OUT_OF_MEMORY"),
    Case("oom400-grow", "slurm.oom_at_400M", "oom_grow.sh", ("--mem=400M",), ("600",), "genomics", stage=GROW, expect="OUT_OF_MEMORY"),
    Case("oom400-membench", "slurm.oom_at_400M", "oom_membench.sh", ("--mem=400M", "-J", "membench-large"), ("560",), "cfd", stage=MEMB, expect="OUT_OF_MEMORY"),
    Case("oom400-srun", "slurm.oom_at_400M", "oom_srun.sh", ("--mem=400M",), ("650",), "nlp", stage=GROW, expect="OUT_OF_MEMORY"),
    # -- requests no node can satisfy: rejected by sbatch, no job id -----------------------
    Case("ncmem-args", "slurm.node_config_mem", "oom_grow.sh", ("--mem=4G",), ("100",), "genomics"),
    Case("ncmem-script", "slurm.node_config_mem", "bigmem.sh", (), (), "genomics"),
    Case("ncmem-percpu", "slurm.node_config_mem", "sweep.sh", (), (), "cfd"),
    Case("ncmem-gpu", "slurm.node_config_mem", "train_gpu.sh", ("--mem=2001M",), (), "nlp"),
    Case("nccpu-mincpus", "slurm.node_config_cpus", "align.sh", ("--mincpus=4",), (), "genomics"),
    Case("nccpu-c8", "slurm.node_config_cpus", "simulate.sh", ("-c", "8"), (), "cfd"),
    Case("nccpu-n4", "slurm.node_config_cpus", "oom_grow.sh", ("-n", "4"), ("100",), "nlp"),
    Case("nccpu-mincpus16", "slurm.node_config_cpus", "train_gpu.sh", ("--mincpus=16",), (), "nlp"),
    Case("nctopo-tpc", "slurm.node_config_topology", "align.sh", ("--threads-per-core=2",), (), "genomics"),
    Case("nctopo-cps", "slurm.node_config_topology", "simulate.sh", ("--cores-per-socket=2",), (), "cfd"),
    Case("nctopo-spn", "slurm.node_config_topology", "train_gpu.sh", ("--sockets-per-node=4",), (), "nlp"),
    Case("ncgpu-gres4", "slurm.node_config_gpu_count", "train_gpu.sh", ("--gres=gpu:4",), (), "nlp"),
    Case("ncgpu-gpus3", "slurm.node_config_gpu_count", "simulate.sh", ("--gpus=3",), (), "cfd"),
    Case("ncgpu-pernode3", "slurm.node_config_gpu_count", "align.sh", ("--gpus-per-node=3",), (), "genomics"),
    Case("gtype-tesla", "slurm.node_config_gpu_type", "train_gpu.sh", ("--gres=gpu:tesla:1",), (), "nlp"),
    Case("gtype-a100", "slurm.node_config_gpu_type", "train_gpu.sh", ("--gres=gpu:a100:2", "-J", "finetune"), (), "nlp"),
    Case("gtype-v100", "slurm.node_config_gpu_type", "simulate.sh", ("--gpus=v100:1",), (), "cfd"),
    Case("gname-fpga", "slurm.gres_name_invalid", "simulate.sh", ("--gres=fpga:1",), (), "cfd"),
    Case("gname-gpus", "slurm.gres_name_invalid", "train_gpu.sh", ("--gres=gpus:1",), (), "nlp"),
    Case("gname-mic", "slurm.gres_name_invalid", "align.sh", ("--gres=mic:1",), (), "genomics"),
    # -- accounts, QOS and partition limits ------------------------------------------------
    Case("acctpart-report", "slurm.account_not_on_partition", "report.sh", ("-p", "debug"), (), "teaching"),
    Case("acctpart-sim", "slurm.account_not_on_partition", "simulate.sh", ("-A", "teaching", "-p", "debug"), (), "cfd"),
    Case("acctpart-grow", "slurm.account_not_on_partition", "oom_grow.sh", ("--account=teaching", "--partition=debug"), ("100",), "genomics"),
    Case("acct-physics", "slurm.account_unknown", "simulate.sh", ("-A", "physics"), (), "cfd"),
    Case("acct-typo", "slurm.account_unknown", "report.sh", ("-A", "reseach"), (), "teaching"),
    Case("acct-chem", "slurm.account_unknown", "oom_grow.sh", ("--account=chem-lab",), ("100",), "genomics"),
    Case("qosbad-high", "slurm.qos_unknown", "simulate.sh", ("--qos=high",), (), "cfd"),
    Case("qosbad-long", "slurm.qos_unknown", "align.sh", ("--qos=long",), (), "genomics"),
    Case("qosbad-gpu", "slurm.qos_unknown", "train_gpu.sh", ("--qos=gpu",), (), "nlp"),
    Case("qoswall-5", "slurm.qos_wall_exceeded", "simulate.sh", ("--qos=short", "--time=5"), (), "cfd"),
    Case("qoswall-script", "slurm.qos_wall_exceeded", "align.sh", ("--qos=short",), (), "genomics"),
    Case("qoswall-10", "slurm.qos_wall_exceeded", "train_gpu.sh", ("-q", "short", "--time=10"), (), "nlp"),
    Case("parttime-10", "slurm.partition_time_exceeded", "simulate.sh", ("-p", "debug", "--time=10"), (), "cfd"),
    Case("parttime-script", "slurm.partition_time_exceeded", "align.sh", ("-p", "debug"), (), "genomics"),
    Case("parttime-30", "slurm.partition_time_exceeded", "train_gpu.sh", ("-p", "debug"), (), "nlp"),
    # -- modules and shared libraries ------------------------------------------------------
    Case("modver-cuda121", "lmod.module_version_unknown", "build_kernels.sh", (), ("12.1",), "cfd", expect="FAILED"),
    Case("modver-cuda102", "lmod.module_version_unknown", "build_kernels.sh", ("-J", "kernels-old"), ("10.2",), "cfd", expect="FAILED"),
    Case("modver-gcc11", "lmod.module_version_unknown", "compile.sh", (), ("11.2.0",), "genomics", expect="FAILED"),
    Case("modver-gcc9", "lmod.module_version_unknown", "compile.sh", ("-J", "compile-legacy"), ("9.4.0",), "nlp", expect="FAILED"),
    Case("nolmod-gcc", "lmod.module_command_not_found", "nolmod.sh", (), ("gcc/13.1.0",), "genomics", expect="FAILED"),
    Case("nolmod-cuda", "lmod.module_command_not_found", "nolmod.sh", ("-J", "build"), ("cuda/11.8",), "cfd", expect="FAILED"),
    Case("nolmod-fft", "lmod.module_command_not_found", "nolmod.sh", ("-p", "debug"), ("hpcfft/1.0",), "nlp", expect="FAILED"),
    Case("lib-solver", "loader.hpcfft_module_not_loaded", "solve.sh", (), (), "cfd", stage=FFT, expect="FAILED"),
    Case("lib-bench", "loader.hpcfft_module_not_loaded", "fft_bench.sh", (), (), "genomics", stage=FFT, expect="FAILED"),
    Case("lib-py", "loader.hpcfft_module_not_loaded", "load_fft.sh", (), (), "nlp", stage=FFT, expect="FAILED"),
    Case("lib-bench-gcc", "loader.hpcfft_module_not_loaded", "fft_bench.sh", ("-J", "fft-bench-gcc"), (), "cfd", premodules=("gcc/13.1.0",), stage=FFT, expect="FAILED"),
    Case("libv-solver", "loader.hpcfft_wrong_module_version", "solve.sh", (), ("2.0",), "cfd", stage=FFT, expect="FAILED"),
    Case("libv-bench", "loader.hpcfft_wrong_module_version", "fft_bench.sh", (), (), "genomics", premodules=("hpcfft/2.0",), stage=FFT, expect="FAILED"),
    Case("libv-py", "loader.hpcfft_wrong_module_version", "load_fft.sh", (), ("2.0",), "nlp", stage=FFT, expect="FAILED"),
    # -- the job ended early: cancelled, preempted (need the node to themselves) -----------
    Case("cancel-sim", "slurm.cancelled", "simulate.sh", ("--time=5",), (), "cfd", stage=SIM, expect="CANCELLED", action="cancel"),
    Case("cancel-md", "slurm.cancelled", "md_equil.sh", ("--time=5",), (), "genomics", expect="CANCELLED", action="cancel"),
    Case("cancel-admin", "slurm.cancelled", "simulate.sh", ("--time=5", "-J", "sweep"), (), "nlp", stage=SIM, expect="CANCELLED", action="cancel_admin"),
    Case("preempt-sim", "slurm.preempted", "simulate.sh", ("-c", "2", "--time=5"), (), "cfd", stage=SIM, expect="PREEMPTED", action="preempt"),
    Case("preempt-md", "slurm.preempted", "md_equil.sh", ("-c", "2", "--time=5"), (), "genomics", expect="PREEMPTED", action="preempt"),
    Case("preempt-relax", "slurm.preempted", "relax.sh", ("-c", "2", "--time=2", "-p", "debug"), (), "nlp", stage=SIM, expect="PREEMPTED", action="preempt"),
    # -- time limits: the job's own --time vs the QOS's cap (60-90 s each) -----------------
    Case("timeout-sim", "slurm.timeout_own_limit_1min", "simulate.sh", (), (), "cfd", stage=SIM, expect="TIMEOUT"),
    Case("timeout-sim-debug", "slurm.timeout_own_limit_1min", "simulate.sh", ("-p", "debug", "-J", "relax-debug"), (), "nlp", stage=SIM, expect="TIMEOUT"),
    Case("timeout-md", "slurm.timeout_own_limit_1min", "md_equil.sh", (), (), "genomics", expect="TIMEOUT"),
    Case("timeoutq-relax", "slurm.timeout_qos_short_cap", "relax.sh", ("--qos=short",), (), "cfd", stage=SIM, expect="TIMEOUT"),
    Case("timeoutq-anneal", "slurm.timeout_qos_short_cap", "anneal.sh", ("--qos=short",), (), "genomics", expect="TIMEOUT"),
    Case("timeoutq-relax-debug", "slurm.timeout_qos_short_cap", "relax.sh", ("--qos=short", "-p", "debug", "-J", "relax-short"), (), "nlp", stage=SIM, expect="TIMEOUT"),
)
