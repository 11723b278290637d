"""Job-log scanner: error kinds on real and written samples, bounded reads, hostile input."""

from __future__ import annotations

import builtins
import io
import os
import shutil
from pathlib import Path

import pytest

from hpcmem.ingest import logscan
from hpcmem.ingest.logscan import (
    EXCERPT_LIMIT,
    HEAD_LIMIT,
    LINE_LIMIT,
    TAIL_LIMIT,
    iter_log_paths,
    job_id_from_filename,
    scan_log,
)
from hpcmem.kb.errors import InputError

LOGS = Path(__file__).resolve().parents[2] / "data" / "samples" / "logs"

# -------------------------------------------------------------------- samples

# (file, job id, kinds in order of appearance, lines the excerpt must contain)
CASES = [
    ("timeout-1.out", "1", ("time_limit",),
     ["slurmstepd-localhost: error: *** JOB 1 ON localhost CANCELLED AT 2026-11-30T00:05:46 DUE TO TIME LIMIT ***"]),
    ("fasttimeout-7.out", "7", ("time_limit",), ["*** JOB 7 ON localhost CANCELLED AT 2026-11-30T00:04:46"]),
    ("oom-4.out", "4", ("killed", "oom"),
     ["/tmp/slurm-lab/spool/slurmd/job00004/slurm_script: line 14:  1394 Killed                  python3 -c '",
      "slurmstepd-localhost: error: Detected 1 oom-kill event(s) in StepId=4.batch."]),
    ("nocgroup/oom-4.out", "4", ("oom", "job_cancelled"),
     ["StepId=4.batch exceeded memory limit (53354496 > 52428800), being killed",
      "*** JOB 4 ON localhost CANCELLED AT 2026-11-30T00:00:36 ***"]),
    ("fail-3.err", "3", ("python_exception",), ["KeyError: 'missing_key_0'"]),
    ("stepfail-5.out", "5", ("srun_error", "python_exception"),
     ["srun: error: localhost: task 0: Exited with exit code 3", "KeyError: 'missing_key_0'"]),
    ("slurm-4410231.out", "4410231", ("python_exception", "cuda_oom", "srun_error"),
     ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.53 GiB.",
      "srun: error: gpu-a100-07: task 0: Exited with exit code 1"]),
    ("ddp-4410388.err", "4410388", ("nccl", "abort", "python_exception", "srun_error", "job_cancelled"),
     ["Watchdog caught collective operation timeout: WorkNCCL(SeqNum=48213, OpType=ALLREDUCE",
      "terminate called after throwing an instance of 'c10::DistBackendError'",
      "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
      "slurmstepd: error: *** STEP 4410388.0 ON gpu-h100-11 CANCELLED AT 2026-11-12T10:35:04 ***"]),
    ("slurm-4410502.out", "4410502", ("error_message", "mpi"),
     ["ERROR: Lost atoms: original 32000 current 31994 (src/thermo.cpp:494)",
      "MPI_ABORT was invoked on rank 17 in communicator MPI_COMM_WORLD\nwith errorcode 1."]),
    ("slurm-4410577.err", "4410577", ("shared_library_missing", "srun_error"),
     ["/home/mlopez/lbm/bin/lbm_cuda: error while loading shared libraries: libcudart.so.11.0: "
      "cannot open shared object file: No such file or directory"]),
    ("slurm-4410600.err", "4410600", ("library_version_mismatch", "srun_error"),
     ["version `GLIBCXX_3.4.29' not found", "version `CXXABI_1.3.13' not found"]),
    ("slurm-4410613.out", "4410613", ("lmod_error", "command_not_found"),
     ['Lmod has detected the following error:  The following module(s) are unknown:\n"cuda/11.0"',
      "line 15: pmemd.cuda: command not found"]),
    ("slurm-4410620.out", "4410620", ("module_command_missing", "command_not_found"),
     ["environment: line 17: /usr/share/lmod/lmod/libexec/lmod: No such file or directory",
      "line 9: module: command not found", "line 13: Rscript: command not found"]),
    ("slurm-4410655.out", "4410655", ("illegal_instruction",),
     ["line 14: 1702233 Illegal instruction     (core dumped) ./lmp_avx512 -in in.lj"]),
    ("slurm-4410671.out", "4410671", ("segfault", "srun_error", "job_cancelled", "killed"),
     ["Caught signal 11 (Segmentation fault: address not mapped to object at address 0x7f1c00000008)",
      "srun: error: cn125: task 7: Segmentation fault (core dumped)",
      "srun: error: cn125: tasks 0-6,8-31: Killed"]),
    ("slurm-4410689.err", "4410689", ("disk_quota", "python_exception"),
     ["cp: cannot create regular file '/home/jwu/assembly/S0412/final.contigs.fa': Disk quota exceeded",
      "OSError: [Errno 122] Disk quota exceeded: '/home/jwu/assembly/S0412/report.json'"]),
    ("slurm-4410702.err", "4410702", ("python_exception",),
     ["CondaError: Run 'conda init' before 'conda activate'",
      "    import pandas as pd\nModuleNotFoundError: No module named 'pandas'"]),
    ("build-4410715.out", "4410715", ("compiler_error", "build_failed"),
     ["/home/akhan/heat/src/heat.c:57:25: error: 'nx_local' undeclared (first use in this function); "
      "did you mean 'ny_local'?\n   57 |     for (int i = 0; i < nx_local; i++) {\n"
      "      |                         ^~~~~~~~",
      "/home/akhan/heat/src/io.c:3:10: fatal error: hdf5.h: No such file or directory\n"
      "    3 | #include <hdf5.h>",
      "make: *** [Makefile:91: all] Error 2"]),
    ("build-4410716.out", "4410716", ("link_error", "build_failed"),
     ["io.c:(.text+0x1a4): undefined reference to `H5Fcreate'",
      "collect2: error: ld returned 1 exit status"]),
    ("slurm-4410730.out", "4410730", ("time_limit",),
     ["slurmstepd: error: *** STEP 4410730.0 ON cn033 CANCELLED AT 2026-11-13T04:00:17 DUE TO TIME LIMIT ***",
      "slurmstepd: error: *** JOB 4410730 ON cn033 CANCELLED AT 2026-11-13T04:00:17 DUE TO TIME LIMIT ***"]),
    ("slurm-4410760.out", "4410760", ("ucx", "mpi", "pmix", "srun_error"),
     ["UCX  ERROR ibv_create_cq(cqe=4096) failed: Cannot allocate memory",
      "[cn201:2283341] *** An error occurred in MPI_Init",
      "[cn201:2283350] PMIX ERROR: UNREACHABLE in file server/pmix_server.c at line 2198"]),
    ("slurm-4410771.out", "4410771", ("python_exception", "no_space", "bus_error"),
     ["OSError: [Errno 28] No space left on device",
      "line 18: 3391 Bus error               (core dumped) ./regrid --mmap /dev/shm/fields_4410771.bin"]),
]


@pytest.mark.parametrize(("name", "job_id", "kinds", "expected"), CASES, ids=[c[0] for c in CASES])
def test_sample_logs(name: str, job_id: str, kinds: tuple[str, ...], expected: list[str]) -> None:
    path = LOGS / name
    result = scan_log(path)
    assert result.path == str(path)
    assert result.job_id == job_id
    assert result.kinds == kinds
    for text in expected:
        assert text in result.excerpt
    assert result.first_error is not None and result.first_error in result.excerpt
    size = path.stat().st_size
    assert result.file_size == size
    assert result.bytes_read == size  # small files are read whole, once
    assert result.lines_scanned == path.read_bytes().count(b"\n")
    assert not result.truncated
    assert len(result.excerpt.encode()) <= EXCERPT_LIMIT


@pytest.mark.parametrize("name", ["ok-2.out", "fail-3.out"])
def test_logs_without_error_give_an_empty_excerpt(name: str) -> None:
    result = scan_log(LOGS / name)
    assert result.excerpt == ""
    assert result.first_error is None
    assert result.kinds == ()
    assert not result.has_error
    assert result.lines_scanned == (LOGS / name).read_bytes().count(b"\n")


def test_first_error_is_the_first_error_line() -> None:
    assert scan_log(LOGS / "stepfail-5.out").first_error == "srun: error: localhost: task 0: Exited with exit code 3"
    assert scan_log(LOGS / "fail-3.err").first_error == "KeyError: 'missing_key_0'"
    assert scan_log(LOGS / "slurm-4410613.out").first_error == (
        "Lmod has detected the following error:  The following module(s) are unknown:")


def test_traceback_keeps_the_innermost_three_frames() -> None:
    excerpt = scan_log(LOGS / "slurm-4410231.out").excerpt
    lines = excerpt.split("\n")
    start = lines.index("Traceback (most recent call last):")  # a line of its own: bar removed
    assert lines[start + 1] == "  [... 6 earlier frames omitted ...]"
    frames = [line for line in lines if line.startswith('  File "')]
    assert [f.rsplit(" in ", 1)[1] for f in frames] == ["forward_features", "forward", "forward"]
    assert frames[-1].startswith('  File "/home/bkim/.venvs/vit/lib/python3.11/site-packages/torch/nn/'
                                 'modules/activation.py"')
    assert "\r" not in excerpt and "it/s" not in excerpt


def test_lmod_block_stops_at_the_blank_line() -> None:
    excerpt = scan_log(LOGS / "slurm-4410613.out").excerpt
    assert '"cuda/11.0"' in excerpt
    assert "Please check the spelling" not in excerpt


# One line of each kind, in the wordings programs print (own text).
ONE_LINE = {
    "time_limit": "slurmstepd: error: *** JOB 88 ON cn1 CANCELLED AT 2026-01-02T03:04:05 DUE TO TIME LIMIT ***",
    "job_cancelled": "slurmstepd: error: *** JOB 88 ON cn1 CANCELLED AT 2026-01-02T03:04:05 DUE TO PREEMPTION ***",
    "oom": "srun: error: cn1: task 0: Out Of Memory",
    "cuda_oom": "RuntimeError: CUDA error: out of memory",
    "cuda": "CUDA driver version is insufficient for CUDA runtime version",
    "nccl": "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error",
    "mpi": "mpirun noticed that process rank 3 with PID 0 on node cn04 exited on signal 9 (Killed).",
    "ucx": "[1700000000.123456] [cn1:4711:0]     ucp_worker.c:1783 UCX  ERROR failed to create worker",
    "pmix": "[cn1:4711] PMIX ERROR: NOT-FOUND in file server/pmix_server.c at line 229",
    "shared_library_missing": "./a.out: error while loading shared libraries: libmpi.so.40: cannot open shared "
                              "object file: No such file or directory",
    "library_version_mismatch": "python: /lib64/libc.so.6: version `GLIBC_2.34' not found (required by python)",
    "link_error": "/usr/bin/ld: cannot find -lhdf5: No such file or directory",
    "compiler_error": 'kernel.cu(42): error: identifier "blockDimx" is undefined',
    "build_failed": "make: *** [Makefile:12: all] Error 2",
    "lmod_error": "Lmod has detected the following error:  These module(s) or extension(s) exist but cannot be "
                  'loaded as requested: "openmpi/4.1.6"',
    "module_command_missing": "/var/spool/slurmd/job88/slurm_script: line 5: module: command not found",
    "command_not_found": "sh: 1: nvidia-smi: not found",
    "killed": "Killed",
    "abort": "Aborted (core dumped)",
    "segfault": "Segmentation fault (core dumped)",
    "bus_error": "Bus error (core dumped)",
    "illegal_instruction": "Illegal instruction (core dumped)",
    "disk_quota": "tar: out/x.bin: Cannot write: Disk quota exceeded",
    "no_space": "write error: No space left on device",
    "python_exception": "ValueError: could not convert string to float: 'nan%'",
    "error_message": "ERROR: Could not find a version that satisfies the requirement torch==9.9",
    "file_not_found": "python3: can't open file '/home/a/x.py': [Errno 2] No such file or directory",
    "slurmstepd_error": "slurmstepd: error: Unable to create TMPDIR [/tmp/job88]: Permission denied",
    "srun_error": "srun: error: Unable to create step for job 88: Invalid generic resource (gres) specification",
}


def test_every_kind_has_a_one_line_case() -> None:
    assert set(ONE_LINE) == set(logscan.KINDS)


@pytest.mark.parametrize(("kind", "line"), sorted(ONE_LINE.items()))
def test_one_line_of_each_kind(tmp_path: Path, kind: str, line: str) -> None:
    # (a blank line after it: Lmod and MPI blocks take the lines that follow, up to one)
    path = _write(tmp_path / "slurm-88.out", b"starting\n", line.encode() + b"\n\n", b"cleanup\n")
    result = scan_log(path)
    assert kind in result.kinds
    assert result.first_error == line
    assert result.excerpt == line


@pytest.mark.parametrize("line", [
    "gpu-h100-11:3390217:3390217 [0] NCCL INFO Init COMPLETE",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING=1 NCCL_DEBUG=INFO",
    "train loss 0.13, validation error: 0.12",
    "Error rate: 0.4 %, 0 errors, 0 warnings",
    "Killed 3 stale workers before restart",
    "tokenizers: not found in cache, downloading",
    "Epoch 3: 100%|██████████| 10/10 [00:01<00:00, 9.81it/s]",
    "slurmstepd: info: job 88 completed",
    "WARNING: the CUDA_VISIBLE_DEVICES list is empty",
])
def test_ordinary_lines_are_not_errors(tmp_path: Path, line: str) -> None:
    result = scan_log(_write(tmp_path / "slurm-89.out", line.encode() + b"\n"))
    assert result.kinds == ()
    assert result.excerpt == ""


# -------------------------------------------------------------------- job ids and paths


@pytest.mark.parametrize(("name", "job_id"), [
    ("slurm-1234.out", "1234"),
    ("train-1234.err", "1234"),
    ("slurm-1234_7.out", "1234_7"),
    ("my_run.v2-88123.out", "88123"),
    ("4410231.out", "4410231"),
    ("notes.txt", None),
    ("run-2024-05-01.log", None),
    ("/home/alice/jobs/oom-4.out", "4"),
])
def test_job_id_from_filename(name: str, job_id: str | None) -> None:
    assert job_id_from_filename(name) == job_id


def test_excerpt_links_to_the_job_id_of_copied_logs(tmp_path: Path) -> None:
    for name in ("slurm-1234.out", "train-1234.err"):
        shutil.copy(LOGS / "slurm-4410702.err", tmp_path / name)
        result = scan_log(tmp_path / name)
        assert result.job_id == "1234"
        assert "ModuleNotFoundError: No module named 'pandas'" in result.excerpt


def test_iter_log_paths_walks_only_directory_arguments(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    for name in ("slurm-1.out", "train-2.err", "notes.txt", "sub/slurm-3.out", "sub/a.log"):
        (tmp_path / name).write_text("x\n")
    explicit = tmp_path / "sub" / "a.log"
    missing = tmp_path / "gone-9.out"
    found = list(iter_log_paths([tmp_path, explicit, missing]))
    assert found == [tmp_path / "slurm-1.out", tmp_path / "train-2.err", tmp_path / "sub" / "slurm-3.out",
                     explicit, missing]
    assert list(iter_log_paths(str(explicit))) == [explicit]


def test_missing_file_and_directory_raise_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not found"):
        scan_log(tmp_path / "slurm-9.out")
    with pytest.raises(InputError, match="directory"):
        scan_log(tmp_path)


# -------------------------------------------------------------------- bounded reading

NOISE_LINES = [
    "[2026-11-12 09:14:{s:02d},118][train][INFO] - step {i} loss=2.{i:04d} lr=3.0e-4 grad_norm=1.23",
    "gpu-h100-11:3390217:3390402 [0] NCCL INFO Channel {s:02d}/32 : 0 1 2 3 4 5 6 7",
    "smoothSolver:  Solving for Ux, Initial residual = 0.0031, Final residual = 4.2e-07, No Iterations 3",
    "\x1b[32mINFO\x1b[0m rank 0 | epoch 3 | batch {i}/10000 | 412.8 TFLOPs | mem 31.2 GiB",
]


def _noise(size: int) -> bytes:
    """About ``size`` bytes of error-free log lines, with tqdm bars rewriting a line."""
    lines = []
    for i in range(4000):
        lines.append(NOISE_LINES[i % 4].format(i=i, s=i % 60))
        if i % 500 == 0:
            bar = "\r".join(f"Epoch 3: {p:3d}%|{'█' * (p // 10):10s}| {p * 100}/10000 [01:23<01:41, 5.42it/s]"
                            for p in range(0, 101, 5))
            lines.append("\r" + bar)
    block = ("\n".join(lines) + "\n").encode()
    return block * (size // len(block) + 1)


def _write(path: Path, *parts: bytes) -> Path:
    with open(path, "wb") as out:
        for part in parts:
            out.write(part)
    return path


def test_50mb_log_reads_head_until_the_first_error_and_the_tail(tmp_path: Path) -> None:
    path = _write(tmp_path / "slurm-777.out",
                  (LOGS / "slurm-4410613.out").read_bytes(),  # Lmod error at the top
                  _noise(50 << 20),
                  (LOGS / "slurm-4410231.out").read_bytes())  # traceback at the end
    size = path.stat().st_size
    assert size > 50 << 20
    result = scan_log(path)
    # The head scan stopped at the Lmod error (in the first 64 KiB chunk) and the tail
    # is one read of TAIL_LIMIT (+1 byte to see whether it starts on a line).
    assert result.bytes_read <= logscan.CHUNK_SIZE + TAIL_LIMIT + 1
    assert result.bytes_read < size / 100
    assert result.truncated
    assert result.kinds == ("lmod_error", "command_not_found", "python_exception", "cuda_oom", "srun_error")
    assert result.first_error.startswith("Lmod has detected the following error")
    assert result.excerpt.startswith(
        'Lmod has detected the following error:  The following module(s) are unknown:\n"cuda/11.0"')
    assert result.excerpt.endswith("srun: error: gpu-a100-07: task 0: Exited with exit code 1")
    assert "torch.OutOfMemoryError: CUDA out of memory." in result.excerpt
    assert result.lines_scanned < 10_000


def test_50mb_log_without_early_error_reads_at_most_head_and_tail_limits(tmp_path: Path) -> None:
    path = _write(tmp_path / "slurm-778.out", _noise(50 << 20), (LOGS / "fail-3.err").read_bytes())
    result = scan_log(path)
    assert result.bytes_read == HEAD_LIMIT + TAIL_LIMIT + 1
    assert result.kinds == ("python_exception",)
    assert result.first_error == "KeyError: 'missing_key_0'"


def test_one_open_and_one_positioned_read_per_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path / "slurm-779.out", _noise(3 << 20), (LOGS / "oom-4.out").read_bytes())
    calls: dict[str, list] = {"os.open": [], "open": [], "pread": []}

    def counting(name, real):
        def wrapper(*args, **kwargs):
            calls[name].append(args[0] if name != "pread" else args[2])
            return real(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(os, "open", counting("os.open", os.open))
    monkeypatch.setattr(os, "pread", counting("pread", os.pread))
    monkeypatch.setattr(builtins, "open", counting("open", builtins.open))
    monkeypatch.setattr(io, "open", counting("open", io.open))
    result = scan_log(path)
    assert calls["os.open"] == [str(path)]
    assert calls["open"] == []
    assert calls["pread"] == [path.stat().st_size - TAIL_LIMIT - 1]
    assert result.kinds == ("killed", "oom")


# -------------------------------------------------------------------- hostile input


def test_nul_bytes_are_dropped(tmp_path: Path) -> None:
    path = _write(tmp_path / "slurm-12.out", b"\0" * 70_000, b"step 1\n\0\0\0",
                  b"slurmstepd: error: *** JOB 12 ON cn01 CANCELLED AT 2026-01-01T00:00:00 DUE TO TIME LIMIT ***\n",
                  b"\0" * 1000)
    result = scan_log(path)
    assert result.kinds == ("time_limit",)
    assert result.excerpt == (
        "slurmstepd: error: *** JOB 12 ON cn01 CANCELLED AT 2026-01-01T00:00:00 DUE TO TIME LIMIT ***")


def test_invalid_utf8_is_replaced(tmp_path: Path) -> None:
    path = _write(tmp_path / "slurm-13.out", b"caf\xc3 \xff\xfe done\n",
                  b"./solver \xe9t\xe9: Segmentation fault (core dumped)\n")
    result = scan_log(path)
    assert result.kinds == ("segfault",)
    assert result.excerpt == "./solver \ufffdt\ufffd: Segmentation fault (core dumped)"


def test_carriage_return_lines_keep_only_their_final_state(tmp_path: Path) -> None:
    path = _write(tmp_path / "slurm-14.out",
                  b"Killed\rloading  50%\rloading 100%\n",  # an error that was overwritten: gone
                  b" 10%|#    |\r 50%|#####|\rsrun: error: n1: task 0: Out Of Memory\r\n")
    result = scan_log(path)
    assert result.kinds == ("oom",)
    assert result.excerpt == "srun: error: n1: task 0: Out Of Memory"


def test_progress_bar_on_the_traceback_line_in_a_big_log(tmp_path: Path) -> None:
    # A tqdm line longer than the tail read, with the traceback glued to its end: the
    # tail starts inside that line, and its last \r segment must be kept.
    bar = "\r".join(f"Epoch 1: {i % 100:3d}%|#####     | {i}/90000 [12:03<3:01:12, 8.21it/s]" for i in range(6000))
    path = _write(tmp_path / "slurm-15.out", _noise(2 << 20), ("\r" + bar).encode(),
                  b"Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n"
                  b"    step()\nValueError: bad batch shape (3, 224)\n")
    assert len(bar) > TAIL_LIMIT
    result = scan_log(path)
    assert result.excerpt == ('Traceback (most recent call last):\n  File "train.py", line 9, in <module>\n'
                              "    step()\nValueError: bad batch shape (3, 224)")


def test_ansi_escapes_are_stripped(tmp_path: Path) -> None:
    path = _write(tmp_path / "slurm-16.out",
                  b"\x1b[1;31mERROR\x1b[0m: \x1b[33mCUDA error: an illegal memory access was encountered\x1b[0m\n",
                  b"\x1b[01m\x1b[Kmain.c:3:10:\x1b[m\x1b[K \x1b[01;31m\x1b[Kfatal error: \x1b[m\x1b[Kmpi.h: "
                  b"No such file or directory\n")
    result = scan_log(path)
    assert result.kinds == ("cuda", "error_message", "compiler_error")
    assert result.excerpt == ("ERROR: CUDA error: an illegal memory access was encountered\n"
                              "main.c:3:10: fatal error: mpi.h: No such file or directory")


def test_3mb_single_line_is_cut_and_the_scan_goes_on(tmp_path: Path) -> None:
    killed = b"/var/spool/slurmd/job17/slurm_script: line 3: 4242 Killed                  python3 -c '"
    path = _write(tmp_path / "slurm-17.out", killed + b"x" * (3 << 20) + b"'\n",
                  b"slurmstepd: error: Detected 1 oom-kill event(s) in StepId=17.batch.\n")
    result = scan_log(path)
    assert result.kinds == ("killed", "oom")
    first, *rest = result.excerpt.split("\n")
    assert first.startswith(killed.decode() + "xxxx") and first.endswith(" [...]")
    assert len(first) <= LINE_LIMIT
    assert rest[-1] == "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=17.batch."
    assert result.bytes_read <= HEAD_LIMIT + TAIL_LIMIT + 1


def test_chained_tracebacks_keep_the_last_one(tmp_path: Path) -> None:
    path = _write(tmp_path / "slurm-18.err", (
        'Traceback (most recent call last):\n  File "a.py", line 3, in load\n    cfg = table["lr"]\n'
        "KeyError: 'lr'\n\nDuring handling of the above exception, another exception occurred:\n\n"
        'Traceback (most recent call last):\n  File "a.py", line 5, in load\n    raise RuntimeError("no lr")\n'
        "RuntimeError: no lr\n").encode())
    result = scan_log(path)
    assert result.first_error == "KeyError: 'lr'"
    assert result.excerpt == ('Traceback (most recent call last):\n  File "a.py", line 5, in load\n'
                              '    raise RuntimeError("no lr")\nRuntimeError: no lr')


def test_rank_prefixed_tracebacks_are_untangled(tmp_path: Path) -> None:
    path = _write(tmp_path / "slurm-19.err", (
        "[rank1]: Traceback (most recent call last):\n"
        "[rank0]: step 10 loss 0.3\n"
        '[rank1]:   File "/w/train.py", line 40, in <module>\n'
        "[rank1]:     main()\n"
        "[rank0]: step 11 loss 0.3\n"
        "[rank1]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970\n").encode())
    result = scan_log(path)
    assert result.kinds == ("python_exception", "nccl")
    assert result.excerpt == (
        'Traceback (most recent call last):\n  File "/w/train.py", line 40, in <module>\n'
        "    main()\ntorch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970")


def test_repeated_errors_are_shown_once_and_the_excerpt_is_bounded(tmp_path: Path) -> None:
    lines = [f"srun: error: cn{i:03d}: task {i}: Exited with exit code 1" for i in range(600)]
    lines += ["gpu-1:2:3 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer"] * 64
    path = _write(tmp_path / "slurm-20.out", ("\n".join(lines) + "\n").encode())
    result = scan_log(path)
    assert len(result.excerpt.encode()) <= EXCERPT_LIMIT
    assert result.truncated
    assert result.excerpt.startswith("srun: error: cn000: task 0: Exited with exit code 1\n[...]\n")
    assert result.excerpt.count("NCCL WARN") == 1
    assert result.excerpt.endswith("NCCL WARN socketProgress: Connection closed by remote peer")
    assert result.kinds == ("srun_error", "nccl")


# -------------------------------------------------------------------- secrets


SAMPLE_SECRETS = [
    "hf" + "_FAKEqZxWvYtRsPoNmLkJiHgFeDcBaQwErT",
    "sk" + "-proj-FAKE3xAmpl3K3y-n0tR3al_9dQ2mVt7LpWz4RbYc8NhGs1JkU6e",
    "AK" + "IAIOSFODNN7EXAMPLE",
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "EXAMPLEKEY",
    "gh" + "p_FAKE0nly4T3sts0000xYz9Q8w7E6r5T4y3U2",
    "pg_Pa55" + "-w0rd",
    "Tr0ub4" + "dor&3",
]


def test_excerpt_of_the_secrets_log_carries_no_secret() -> None:
    path = LOGS / "slurm-4410744.out"
    raw = path.read_text()
    assert all(secret in raw for secret in SAMPLE_SECRETS)
    result = scan_log(path)
    for secret in SAMPLE_SECRETS:
        assert secret not in result.excerpt
        assert secret not in (result.first_error or "")
    for kind in ("url_credentials", "huggingface_token", "aws_access_key_id", "aws_secret_key", "cli_password"):
        assert f"[REDACTED:{kind}]" in result.excerpt
    # (the password is a GitHub token: gitleaks' rules, which run first since issue 32, name it)
    assert result.first_error == ("fatal: Authentication failed for "
                                  "'https://alice:[REDACTED:github_token]@github.com/hpc-lab/pipeline.git/'")
    assert result.excerpt.endswith("'--password=[REDACTED:cli_password]', 'runs']' returned non-zero exit status 2.")
