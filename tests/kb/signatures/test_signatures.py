"""Signature layer: normalisation, categories, fingerprints and excerpt handling.

Cases are written in the real formats of Slurm 22.05/23.02, Lmod, glibc, gcc, PyTorch,
NCCL and Open MPI. Strings marked "real-slurm" are copied verbatim from our own cluster's
job outputs (data/samples provenance: ../shared/reference/real-slurm/jobs).
"""

from __future__ import annotations

import hashlib
import itertools
import subprocess
import sys

import pytest

from hpcmem.kb.errors import ConfigError
from hpcmem.kb.signatures.fingerprint import (
    UNKNOWN,
    FailureSignature,
    categorize,
    fingerprint,
    load_rules,
    normalize,
    signature_of_block,
)

# --------------------------------------------------------------------------- real-slurm
# Copied verbatim from real-slurm/jobs/*.out|*.err and variants/ (our own cluster).

REAL_TIMEOUT_1 = """sleeping forever
slurmstepd-localhost: error: *** JOB 1 ON localhost CANCELLED AT 2026-11-30T00:05:46 DUE TO TIME LIMIT ***
"""
REAL_FASTTIMEOUT_7 = (
    "slurmstepd-localhost: error: *** JOB 7 ON localhost CANCELLED AT 2026-11-30T00:04:46 "
    "DUE TO TIME LIMIT ***\n"
)
REAL_OOM_4 = """allocating 300MB in 10MB steps
allocated 10 MB
allocated 20 MB
allocated 30 MB
allocated 40 MB
/tmp/slurm-lab/spool/slurmd/job00004/slurm_script: line 14:  1394 Killed                  python3 -c '
import time
chunks = []
for i in range(30):
    chunks.append(b"\\x01" * (10 * 1024 * 1024))
    print("allocated", (i + 1) * 10, "MB", flush=True)
    time.sleep(0.3)
'
slurmstepd-localhost: error: Detected 1 oom-kill event(s) in StepId=4.batch. Some of your processes may have been killed by the cgroup out-of-memory handler.
"""
REAL_OOM_4_NODBD = REAL_OOM_4.replace("  1394 Killed", " 32559 Killed")
REAL_OOM_4_NOCGROUP = """allocating 300MB in 10MB steps
allocated 10 MB
allocated 20 MB
allocated 30 MB
allocated 40 MB
slurmstepd-localhost: error: StepId=4.batch exceeded memory limit (53354496 > 52428800), being killed
slurmstepd-localhost: error: Exceeded job memory limit
slurmstepd-localhost: error: *** JOB 4 ON localhost CANCELLED AT 2026-11-30T00:00:36 ***
slurmstepd-localhost: error: StepId=4.batch exceeded memory limit (53354496 > 52428800), being killed
slurmstepd-localhost: error: Exceeded job memory limit
"""
REAL_FAIL_3_ERR = """Traceback (most recent call last):
  File "/home/alice/jobs/train.py", line 14, in <module>
    main()
  File "/home/alice/jobs/train.py", line 10, in main
    load_batch(i)
  File "/home/alice/jobs/train.py", line 5, in load_batch
    return data["missing_key_%d" % i]
           ~~~~^^^^^^^^^^^^^^^^^^^^^^
KeyError: 'missing_key_0'
"""
REAL_STEPFAIL_5 = """step 0
srun: error: localhost: task 0: Exited with exit code 3
Traceback (most recent call last):
  File "/home/alice/jobs/train.py", line 14, in <module>
    main()
  File "/home/alice/jobs/train.py", line 10, in main
    load_batch(i)
  File "/home/alice/jobs/train.py", line 5, in load_batch
    return data["missing_key_%d" % i]
           ~~~~^^^^^^^^^^^^^^^^^^^^^^
KeyError: 'missing_key_0'
srun exit code 3
"""
REAL_SBATCH_NOSUCH = """$ sbatch -p nosuch ok.sh
sbatch: error: invalid partition specified: nosuch
sbatch: error: Batch job submission failed: Invalid partition name specified
exit=1
"""
REAL_EPILOG_8 = "[2026-11-30T00:06:04.773] error: [job 8] epilog failed status=7:0"

# --------------------------------------------------------------------------- same-failure pairs
# (failure id, expected category, instance A, instance B). A and B are two occurrences of
# one failure that differ in ids, nodes, paths, users, numbers, times or surrounding noise:
# they must share a fingerprint. Different failure ids must not.

PAIRS = [
    ("time_limit_job", "time_limit", REAL_TIMEOUT_1, REAL_FASTTIMEOUT_7),
    (
        "time_limit_job",
        "time_limit",
        "slurmstepd: error: *** JOB 5120931 ON gpu-a100-03 CANCELLED AT 2024-03-02T11:40:17 DUE TO TIME LIMIT ***",
        "slurmstepd-cn0412: error: *** JOB 88123_7 ON cn0412 CANCELLED AT 2023-12-30T23:59:01 DUE TO TIME LIMIT ***",
    ),
    (
        "time_limit_step",
        "time_limit",
        "slurmstepd: error: *** STEP 88123.0 ON cn0412 CANCELLED AT 2023-12-30T23:59:01 DUE TO TIME LIMIT ***",
        "slurmstepd: error: *** STEP 7.2 ON holy8a24101 CANCELLED AT 2025-01-04T08:00:00 DUE TO TIME LIMIT ***",
    ),
    ("host_oom", "host_oom", REAL_OOM_4, REAL_OOM_4_NODBD),
    ("host_oom", "host_oom", REAL_OOM_4_NOCGROUP, "slurmstepd: error: StepId=90211.0 exceeded memory limit (8490123264 > 8388608000), being killed"),
    (
        "host_oom",
        "host_oom",
        "slurmstepd: error: Detected 1 oom_kill event in StepId=7781234.batch. Some of the step tasks have been OOM Killed.",
        "slurmstepd: error: Detected 3 oom_kill events in StepId=55.0. Some of the step tasks have been OOM Killed.",
    ),
    (
        "host_oom",
        "host_oom",
        "slurmstepd: error: Detected 3 oom-kill event(s) in step 998877.batch cgroup.",
        "slurmstepd: error: Detected 1 oom-kill event(s) in step 12.0 cgroup. Some of your processes may have been killed by the cgroup out-of-memory handler.",
    ),
    (
        "host_oom",
        "host_oom",
        "slurmstepd: error: Detected 1 oom_kill event in StepId=6021.0. Some of the step tasks have been OOM Killed.\nsrun: error: gpu-b07: task 0: Out Of Memory",
        "srun: error: d09n08s02: task 3: Out Of Memory",
    ),
    (
        "host_oom_killed",
        "host_oom",
        "srun: error: node017: task 2: Killed\nsrun: Force Terminated StepId=4410.0",
        "srun: error: a100-gpu-12: task 0: Killed\nsrun: Force Terminated StepId=98.0",
    ),
    (
        "dataloader_killed",
        "host_oom",
        "Traceback (most recent call last):\n  File \"/home/alice/t.py\", line 50, in <module>\n"
        "RuntimeError: DataLoader worker (pid 12345) is killed by signal: Killed.",
        "RuntimeError: DataLoader worker (pid 998) is killed by signal: Killed.",
    ),
    (
        "cuda_oom",
        "cuda_oom",
        "Traceback (most recent call last):\n  File \"/home/alice/llm/train.py\", line 88, in <module>\n    loss.backward()\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.06 GiB is free. "
        "Including non-PyTorch memory, this process has 78.08 GiB memory in use.",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 3 has a total capacity of 39.39 GiB of which 120.56 MiB is free. "
        "Process 41122 has 12.00 GiB memory in use. Including non-PyTorch memory, this process has 27.1 GiB memory in use.",
    ),
    (
        "cuda_oom",
        "cuda_oom",
        "RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported at some other API call",
        "2024-05-01 10:11:12.000123: W tensorflow/core/common_runtime/bfc_allocator.cc:479] OOM when allocating tensor with shape[64,1024,1024]",
    ),
    (
        "missing_libmkl",
        "missing_shared_library",
        "./bin/solver: error while loading shared libraries: libmkl_rt.so.2: cannot open shared object file: No such file or directory",
        "/home/bob/app/solver2: error while loading shared libraries: libmkl_rt.so.2: cannot open shared object file: No such file or directory",
    ),
    (
        "missing_libcudnn",
        "missing_shared_library",
        "Traceback (most recent call last):\n  File \"/home/alice/x.py\", line 1, in <module>\n    import tensorflow\n"
        "ImportError: libcudnn.so.8: cannot open shared object file: No such file or directory",
        "OSError: libcudnn.so.8: cannot open shared object file: No such file or directory",
    ),
    (
        "glibcxx_3_4_29",
        "symbol_version_not_found",
        "/home/alice/bin/vasp_std: /lib64/libstdc++.so.6: version `GLIBCXX_3.4.29' not found (required by /home/alice/bin/vasp_std)",
        "samtools: /usr/lib64/libstdc++.so.6: version `GLIBCXX_3.4.29' not found (required by samtools)",
    ),
    (
        "glibc_2_34",
        "symbol_version_not_found",
        "python3: /lib64/libc.so.6: version `GLIBC_2.34' not found (required by /scratch/u1/env/lib/libfoo.so)",
        "/opt/apps/tool: /lib64/libc.so.6: version `GLIBC_2.34' not found (required by /opt/apps/tool)",
    ),
    (
        "cxxabi_1_3_13",
        "symbol_version_not_found",
        "./mdrun: /lib64/libstdc++.so.6: version `CXXABI_1.3.13' not found (required by ./mdrun)",
        "gmx: /lib64/libstdc++.so.6: version `CXXABI_1.3.13' not found (required by /home/x/lib/libgromacs.so.8)",
    ),
    (
        "undefined_nccl_symbol",
        "undefined_symbol",
        "ImportError: /home/alice/.local/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so: undefined symbol: ncclCommRegister",
        "ImportError: /scratch/bob/venv/lib/python3.10/site-packages/torch/lib/libtorch_cuda.so: undefined symbol: ncclCommRegister",
    ),
    (
        "undefined_ref_mpi_init",
        "linker_error",
        "/usr/bin/ld: /tmp/ccA1b2C3.o: in function `main':\nmain.c:(.text+0x2a): undefined reference to `MPI_Init'\ncollect2: error: ld returned 1 exit status",
        "/usr/bin/ld: /tmp/cc9ZzQ01.o: in function `main':\nsolver.c:(.text+0x1e4): undefined reference to `MPI_Init'\ncollect2: error: ld returned 1 exit status",
    ),
    (
        "missing_lcudart",
        "linker_error",
        "/usr/bin/ld: cannot find -lcudart: No such file or directory\ncollect2: error: ld returned 1 exit status",
        "ld: cannot find -lcudart",
    ),
    (
        "missing_hdf5_header",
        "compiler_error",
        "src/io.c:3:10: fatal error: hdf5.h: No such file or directory\n    3 | #include <hdf5.h>\ncompilation terminated.",
        "kernels/reader.cu:12:10: fatal error: hdf5.h: No such file or directory\ncompilation terminated.",
    ),
    (
        "gcc_undeclared_foo",
        "compiler_error",
        "src/main.cpp:42:5: error: ‘foo’ was not declared in this scope",
        "src/main.cpp:97:13: error: ‘foo’ was not declared in this scope",
    ),
    (
        "nvcc_undefined_identifier",
        "compiler_error",
        'kernels/main.cu(12): error: identifier "foo" is undefined',
        'kernels/main.cu(240): error: identifier "foo" is undefined',
    ),
    (
        "lmod_missing",
        "lmod_not_available",
        "/var/spool/slurmd/job4471/slurm_script: line 9: module: command not found",
        "/var/spool/slurm/slurmd/job00981/slurm_script: line 9: module: command not found",
    ),
    (
        "unknown_cuda_13",
        "unknown_module",
        'Lmod has detected the following error:  The following module(s) are unknown: "cuda/13.0"\n\n'
        'Please check the spelling or version number. Also try "module spider ..."\n'
        "It is also possible your cache file is out-of-date; it may help to try:\n"
        '  $ module --ignore_cache load "cuda/13.0"\n',
        'step 1 of 12\nLmod has detected the following error:  The following module(s) are unknown: "cuda/13.0"\n',
    ),
    (
        # Lmod wraps at the terminal width, so the name may sit on the next line
        "unknown_conda",
        "unknown_module",
        'Lmod has detected the following error: The following module(s) are unknown:\n"conda"\n\n'
        'Please check the spelling or version number. Also try "module spider ..."\n',
        'Lmod has detected the following error:  The following module(s) are unknown: "conda"\n',
    ),
    (
        "unknown_two_modules",
        "unknown_module",
        'Lmod has detected the following error:  The following module(s) are unknown: "gcc-native/14.2"\n'
        '                                     "cray-hdf5-parallel/1.14.3.5"\n',
        'The following module(s) are unknown: "gcc-native/14.2" "cray-hdf5-parallel/1.14.3.5"',
    ),
    (
        "not_loadable_cuda",
        "module_not_loadable",
        'Lmod has detected the following error:  These module(s) or extension(s) exist but cannot be loaded as requested: "cuda/12.4"\n'
        '   Try: "module spider cuda/12.4" to see how to load the module(s).',
        'Lmod has detected the following error: These module(s) or extension(s) exist but cannot be loaded as requested:\n"cuda/12.4"\n'
        '   Try: "module spider cuda/12.4" to see how to load the module(s).',
    ),
    (
        "fastqc_missing",
        "command_not_found",
        "/var/spool/slurmd/job123/slurm_script: line 14: fastqc: command not found",
        "/var/spool/slurmd/job70044/slurm_script: line 14: fastqc: command not found",
    ),
    (
        "python_missing_execve",
        "command_not_found",
        "slurmstepd: error: execve(): python: No such file or directory\nsrun: error: cn0201: task 0: Exited with exit code 2",
        "slurmstepd-gpu17: error: execve(): python: No such file or directory\nsrun: error: gpu17: task 3: Exited with exit code 2",
    ),
    (
        "no_module_torch",
        "python_import_error",
        "Traceback (most recent call last):\n  File \"/home/alice/proj/train.py\", line 3, in <module>\n    import torch\nModuleNotFoundError: No module named 'torch'",
        "Traceback (most recent call last):\n  File \"/scratch/bob/run/main.py\", line 12, in <module>\n    import torch\nModuleNotFoundError: No module named 'torch'",
    ),
    ("keyerror_missing_key", "python_exception", REAL_FAIL_3_ERR, REAL_STEPFAIL_5),
    (
        "sigill",
        "illegal_instruction",
        "srun: error: cn0231: task 0: Illegal instruction (core dumped)",
        "srun: error: sky-14: task 5: Illegal instruction (core dumped)",
    ),
    (
        "sigill_bash",
        "illegal_instruction",
        "/var/spool/slurmd/job2713947/slurm_script: line 12: 265387 Illegal instruction     (core dumped) ./a.out",
        "/var/spool/slurmd/job99/slurm_script: line 12: 4011 Illegal instruction (core dumped) ./a.out",
    ),
    (
        "sigsegv",
        "segfault",
        "srun: error: cn125: task 0: Segmentation fault (core dumped)",
        "srun: error: holy7c22501: task 31: Segmentation fault (core dumped)",
    ),
    (
        "sigbus",
        "bus_error",
        "srun: error: n12: task 0: Bus error",
        "srun: error: gpu-a-07: task 9: Bus error",
    ),
    (
        "sigfpe",
        "floating_point_exception",
        "srun: error: cn3: task 1: Floating point exception",
        "srun: error: c5-1: task 0: Floating point exception",
    ),
    (
        "bad_alloc",
        "cpp_exception",
        "terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc\n"
        "/var/spool/slurmd/job55/slurm_script: line 7: 12345 Aborted (core dumped) ./sim",
        "terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc",
    ),
    (
        "nccl_system_error",
        "nccl_error",
        "gpu-a01:1733:1801 [0] include/socket.h:403 NCCL WARN Net : Connection closed by remote peer 10.0.3.17<42101>\n"
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
        "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3",
        "node-b12:99120:99190 [3] include/socket.h:403 NCCL WARN Net : Connection closed by remote peer 10.0.9.2<53311>\n"
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
        "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3",
    ),
    (
        "mpi_abort",
        "mpi_error",
        "--------------------------------------------------------------------------\n"
        "MPI_ABORT was invoked on rank 3 in communicator MPI_COMM_WORLD\nwith errorcode 1.\n",
        "MPI_ABORT was invoked on rank 117 in communicator MPI_COMM_WORLD\nwith errorcode 1.\n",
    ),
    (
        "mpirun_noticed_sigsegv",
        "mpi_error",
        "mpirun noticed that process rank 0 with PID 12345 on node cn01 exited on signal 11 (Segmentation fault).",
        "mpirun noticed that process rank 12 with PID 871 on node holy2a0811 exited on signal 11 (Segmentation fault).",
    ),
    (
        "ucx_cq",
        "ucx_error",
        "[1678886400.123456] [node01:12345:0]        ib_iface.c:746  UCX  ERROR ibv_create_cq(cqe=4096) failed: Cannot allocate memory",
        "[1700000000.987654] [gpu-c3:881:0]        ib_iface.c:746  UCX  ERROR ibv_create_cq(cqe=4096) failed: Cannot allocate memory",
    ),
    (
        "pmix_not_found",
        "pmix_error",
        "[cn0101:23456] PMIX ERROR: NOT-FOUND in file server/pmix_server.c at line 229",
        "It looks like pmix_init failed for some reason\n[gpu-3:7] PMIX ERROR: NOT-FOUND in file server/pmix_server.c at line 229",
    ),
    (
        "no_cuda_device",
        "cuda_error",
        "RuntimeError: CUDA error: no CUDA-capable device is detected\nCUDA kernel errors might be asynchronously reported",
        "Traceback (most recent call last):\n  File \"/home/u/a.py\", line 2, in <module>\nRuntimeError: CUDA error: no CUDA-capable device is detected",
    ),
    (
        "cuda_driver_too_old",
        "cuda_error",
        "cudaGetDeviceCount returned 35\n-> CUDA driver version is insufficient for CUDA runtime version",
        "cudaGetDeviceCount returned 35\n-> CUDA driver version is insufficient for CUDA runtime version\nResult = FAIL",
    ),
    (
        "ecc",
        "gpu_unavailable",
        "RuntimeError: CUDA error: uncorrectable ECC error encountered",
        "Traceback (most recent call last):\n  File \"/home/z/t.py\", line 9\nRuntimeError: CUDA error: uncorrectable ECC error encountered",
    ),
    (
        "no_kernel_image",
        "cuda_arch_mismatch",
        "RuntimeError: CUDA error: no kernel image is available for execution on the device",
        "Traceback (most recent call last):\n  File \"/home/q/m.py\", line 40, in f\nRuntimeError: CUDA error: no kernel image is available for execution on the device",
    ),
    (
        "quota_oserror",
        "disk_quota",
        "OSError: [Errno 122] Disk quota exceeded: '/scratch/alice/run1/out.h5'",
        "OSError: [Errno 122] Disk quota exceeded: '/home/bob/results/epoch_0017.ckpt'",
    ),
    (
        "quota_cp",
        "disk_quota",
        "cp: cannot create regular file ‘run_0042.log’: Disk quota exceeded",
        "cp: cannot create regular file ‘summary.txt’: Disk quota exceeded",
    ),
    (
        "enospc",
        "disk_full",
        "cp: error writing '/tmp/job123/data.bin': No space left on device",
        "cp: error writing '/tmp/slurm.88/input_7.bin': No space left on device",
    ),
    (
        "permission_script",
        "permission_denied",
        "/var/spool/slurmd/job11/slurm_script: line 4: /home/alice/run.sh: Permission denied",
        "/var/spool/slurmd/job90210/slurm_script: line 4: /home/bob/bin/run.sh: Permission denied",
    ),
    (
        "missing_input",
        "file_not_found",
        "python3: can't open file '/home/alice/jobs/train.py': [Errno 2] No such file or directory",
        "python3: can't open file '/scratch/bob/exp7/train.py': [Errno 2] No such file or directory",
    ),
    (
        "node_fail",
        "node_failure",
        "slurmstepd: error: *** JOB 123 ON cn12 CANCELLED AT 2024-02-02T02:02:02 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***",
        "slurmstepd: error: *** JOB 987654 ON gpu-h100-1 CANCELLED AT 2025-07-01T10:00:00 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***",
    ),
    (
        "preemption",
        "preempted",
        "slurmstepd: error: *** JOB 778 ON gpu03 CANCELLED AT 2024-06-01T00:00:01 DUE TO PREEMPTION ***",
        "slurmstepd: error: *** JOB 1201 ON a100-07 CANCELLED AT 2024-06-11T15:40:59 DUE TO PREEMPTION ***",
    ),
    ("invalid_partition_nosuch", "invalid_partition", REAL_SBATCH_NOSUCH, "sbatch: error: invalid partition specified: nosuch"),
    (
        "invalid_qos",
        "invalid_qos",
        "sbatch: error: Batch job submission failed: Invalid qos specification",
        "$ sbatch --qos=urgent job.sh\nsbatch: error: Batch job submission failed: Invalid qos specification\nexit=1",
    ),
    (
        "invalid_account",
        "invalid_account",
        "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified",
        "Submitting 12 jobs\nsbatch: error: Batch job submission failed: Invalid account or account/partition combination specified",
    ),
    (
        "time_over_partition",
        "time_limit_exceeds_partition",
        "sbatch: error: Batch job submission failed: Requested time limit is invalid (missing or exceeds some limit)",
        "$ sbatch -t 7-00:00:00 run.sh\nsbatch: error: Batch job submission failed: Requested time limit is invalid (missing or exceeds some limit)",
    ),
    (
        "mem_too_large",
        "memory_request_too_large",
        "sbatch: error: Memory specification can not be satisfied\nsbatch: error: Batch job submission failed: Requested node configuration is not available",
        "sbatch: error: Memory specification can not be satisfied",
    ),
    (
        "task_launch_failed",
        "step_launch_failure",
        "srun: error: Task launch for StepId=1234.0 failed on node cn07: Communication connection failure",
        "srun: error: Task launch for StepId=77.3 failed on node gpu-b2: Communication connection failure",
    ),
    (
        "bind_29500",
        "address_in_use",
        "RuntimeError: The server socket has failed to listen on any local network address. The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).",
        "RuntimeError: The server socket has failed to listen on any local network address. The server socket has failed to bind to [::]:29512 (errno: 98 - Address already in use).",
    ),
    (
        "hf_unreachable",
        "network_error",
        "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', port=443): Max retries exceeded with url: /api/models/gpt2 "
        "(Caused by NewConnectionError('<urllib3.connection.HTTPSConnection object at 0x7f2b1c3d4e50>: Failed to establish a new connection: [Errno 101] Network is unreachable'))",
        "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', port=443): Max retries exceeded with url: /api/models/gpt2 "
        "(Caused by NewConnectionError('<urllib3.connection.HTTPSConnection object at 0x7fa90011ce10>: Failed to establish a new connection: [Errno 101] Network is unreachable'))",
    ),
    (
        "exit_code",
        "nonzero_exit",
        "srun: error: cn01: task 0: Exited with exit code 2",
        "srun: error: gpu-77: task 15: Exited with exit code 1",
    ),
    (
        "scancel",
        "job_cancelled",
        "slurmstepd-localhost: error: *** JOB 4 ON localhost CANCELLED AT 2026-11-30T00:00:36 ***",
        "slurmstepd: error: *** JOB 991 ON c12 CANCELLED AT 2025-03-03T03:03:03 ***",
    ),
    ("epilog", "prolog_epilog_failure", REAL_EPILOG_8, "[2025-01-15T09:12:44.101] error: [job 31337] epilog failed status=1:0"),
    (
        "unkillable",
        "kill_task_failed",
        "slurmstepd: error: *** JOB 42 STEPD TERMINATED ON cn9 AT 2024-01-01T00:00:00 DUE TO JOB NOT ENDING WITH SIGNALS ***",
        "slurmstepd: error: *** JOB 50911 STEPD TERMINATED ON gpu-x-1 AT 2024-09-09T09:09:09 DUE TO JOB NOT ENDING WITH SIGNALS ***",
    ),
    (
        "stale_handle",
        "stale_file_handle",
        "cat: /home/alice/data/part-0001.csv: Stale file handle",
        "cat: /home/bob/data/part-0099.csv: Stale file handle",
    ),
    (
        "mystery",
        UNKNOWN,
        "solver: residual diverged at iteration 4411 (norm 3.2e+19)",
        "solver: residual diverged at iteration 17 (norm 8.1e+22)",
    ),
]

REQUIRED_CATEGORIES = {
    "host_oom", "time_limit", "cuda_oom", "missing_shared_library", "symbol_version_not_found",
    "undefined_symbol", "unknown_module", "lmod_not_available", "command_not_found",
    "python_import_error", "python_exception", "illegal_instruction", "segfault", "bus_error",
    "nccl_error", "mpi_error", "ucx_error", "pmix_error", "cuda_error", "gpu_unavailable",
    "disk_quota", "disk_full", "permission_denied", "file_not_found", "node_failure",
    "invalid_partition", "invalid_qos", "invalid_account", "time_limit_exceeds_partition",
    "memory_request_too_large", "step_launch_failure", "preempted", "compiler_error",
    "linker_error", "network_error",
}


def _pair_id(case):
    return f"{case[0]}-{PAIRS.index(case)}"


@pytest.mark.parametrize("case", PAIRS, ids=_pair_id)
def test_same_failure_same_fingerprint(case):
    _, category, first, second = case
    a, b = fingerprint(first), fingerprint(second)
    assert a.category == category, a
    assert b.category == category, b
    assert a.fingerprint == b.fingerprint, (a.template, b.template)
    assert a.template == b.template


def test_there_are_enough_pairs_and_they_cover_the_required_classes():
    assert len(PAIRS) >= 40
    covered = {category for _, category, _, _ in PAIRS}
    assert REQUIRED_CATEGORIES <= covered, REQUIRED_CATEGORIES - covered


def test_different_failures_get_different_fingerprints():
    by_failure: dict[str, set[str]] = {}
    for failure, _, first, second in PAIRS:
        by_failure.setdefault(failure, set()).update(
            {fingerprint(first).fingerprint, fingerprint(second).fingerprint}
        )
    for (f1, prints1), (f2, prints2) in itertools.combinations(by_failure.items(), 2):
        assert not prints1 & prints2, f"{f1} and {f2} share a fingerprint"
    # each failure collapses to exactly one fingerprint
    assert all(len(prints) == 1 for prints in by_failure.values())


# --------------------------------------------------------------------------- keep list


@pytest.mark.parametrize(
    ("first", "second", "kept"),
    [
        (
            "./app: error while loading shared libraries: libcudart.so.11.0: cannot open shared object file: No such file or directory",
            "./app: error while loading shared libraries: libcudart.so.12: cannot open shared object file: No such file or directory",
            ("libcudart.so.11.0", "libcudart.so.12"),
        ),
        (
            "prog: /lib64/libc.so.6: version `GLIBC_2.29' not found (required by prog)",
            "prog: /lib64/libc.so.6: version `GLIBC_2.34' not found (required by prog)",
            ("GLIBC_2.29", "GLIBC_2.34"),
        ),
        (
            "prog: /lib64/libstdc++.so.6: version `GLIBCXX_3.4.29' not found (required by prog)",
            "prog: /lib64/libstdc++.so.6: version `GLIBCXX_3.4.30' not found (required by prog)",
            ("GLIBCXX_3.4.29", "GLIBCXX_3.4.30"),
        ),
        (
            'Lmod has detected the following error:  The following module(s) are unknown: "cuda/11.8"',
            'Lmod has detected the following error:  The following module(s) are unknown: "cuda/12.4"',
            ("cuda/11.8", "cuda/12.4"),
        ),
        (
            'Lmod has detected the following error:  The following module(s) are unknown: "gcc/12.2.0"',
            'Lmod has detected the following error:  The following module(s) are unknown: "gcc/13.1.0"',
            ("gcc/12.2.0", "gcc/13.1.0"),
        ),
        (
            "ModuleNotFoundError: No module named 'torch'",
            "ModuleNotFoundError: No module named 'numpy'",
            ("'torch'", "'numpy'"),
        ),
        (
            "ModuleNotFoundError: No module named 'h5py'",
            "ModuleNotFoundError: No module named 'h5py2'",
            ("'h5py'", "'h5py2'"),
        ),
        (
            "sbatch: error: invalid partition specified: gpu",
            "sbatch: error: invalid partition specified: gpu_test",
            ("specified: gpu", "specified: gpu_test"),
        ),
        (
            "sbatch: error: invalid partition specified: a100",
            "sbatch: error: invalid partition specified: h100",
            ("a100", "h100"),
        ),
        (
            "/var/spool/slurmd/job1/slurm_script: line 3: python3: command not found",
            "/var/spool/slurmd/job1/slurm_script: line 3: python2: command not found",
            ("python3: command", "python2: command"),
        ),
        (
            "RuntimeError: CUDA error: no kernel image is available for execution on the device (sm_80)",
            "RuntimeError: CUDA error: no kernel image is available for execution on the device (sm_90)",
            ("sm_80", "sm_90"),
        ),
        (
            "nvcc fatal   : Unsupported gpu architecture 'compute_90'",
            "nvcc fatal   : Unsupported gpu architecture 'compute_100'",
            ("compute_90", "compute_100"),
        ),
        (
            "ImportError: /x/libtorch_cuda.so: undefined symbol: _ZN3c104cuda9SetDeviceEi",
            "ImportError: /x/libtorch_cuda.so: undefined symbol: _ZN3c104cuda9GetDeviceEPi",
            ("_ZN3c104cuda9SetDeviceEi", "_ZN3c104cuda9GetDeviceEPi"),
        ),
        (
            "/usr/bin/ld: cannot find -lcudart",
            "/usr/bin/ld: cannot find -lcublas",
            ("-lcudart", "-lcublas"),
        ),
        (
            "main.c:1:10: fatal error: hdf5.h: No such file or directory",
            "main.c:1:10: fatal error: netcdf.h: No such file or directory",
            ("hdf5.h", "netcdf.h"),
        ),
        ("KeyError: 'lr'", "IndexError: list index out of range", ("KeyError", "IndexError")),
        (
            "module load cuda/11.8 gcc/12.2.0 openmpi/4.1.5 && ./run failed",
            "module load cuda/12.4 gcc/12.2.0 openmpi/4.1.5 && ./run failed",
            ("cuda/11.8", "cuda/12.4"),
        ),
    ],
)
def test_fix_relevant_tokens_are_kept(first, second, kept):
    a, b = fingerprint(first), fingerprint(second)
    assert kept[0] in a.template, a.template
    assert kept[1] in b.template, b.template
    assert a.fingerprint != b.fingerprint


def test_errno_names_decide_the_category():
    assert categorize("write failed: ENOSPC") == "disk_full"
    assert categorize("write failed: EDQUOT") == "disk_quota"
    assert fingerprint("write failed: ENOSPC").template == "write failed: ENOSPC"


def test_exception_class_with_module_path_is_kept():
    sig = fingerprint("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB")
    assert sig.category == "cuda_oom"
    sig = fingerprint("jax.errors.ConcretizationTypeError: Abstract tracer value encountered")
    assert sig.template.startswith("jax.errors.ConcretizationTypeError:")


def test_shared_library_basename_survives_path_masking():
    sig = fingerprint("app: /home/alice/miniconda3/lib/libstdc++.so.6: version `GLIBCXX_3.4.32' not found (required by app)")
    # the directory's kind stays: the library comes from a conda installation
    assert sig.template == "<ENV_PATH>/libstdc++.so.6: version `GLIBCXX_3.4.32' not found"
    assert sig.category == "symbol_version_not_found"


# --------------------------------------------------------------------------- masking


@pytest.mark.parametrize(
    ("text", "template"),
    [
        (
            "slurmstepd: error: *** JOB 4191701 ON c5-1 CANCELLED AT 2021-08-17T15:09:00 DUE TO TIME LIMIT ***",
            "slurmstepd: error: *** JOB <JOBID> ON <NODE> CANCELLED AT <TIME> DUE TO TIME LIMIT ***",
        ),
        (
            "slurmstepd-phoenix-07: error: *** JOB 1449736 ON phoenix-07 CANCELLED AT 2023-12-03T12:47:09 DUE TO TIME LIMIT ***",
            "slurmstepd: error: *** JOB <JOBID> ON <NODE> CANCELLED AT <TIME> DUE TO TIME LIMIT ***",
        ),
        ("srun: error: holy8a24101: task 0: Exited with exit code 3", "srun: error: <NODE>: task <NUM>: Exited with exit code <NUM>"),
        ("srun: Force Terminated StepId=120.0", "srun: Force Terminated StepId=<JOBID>"),
        ("waiting for nodes d09n08s[01-02] and cs[100,101,102]", "waiting for nodes <NODE> and <NODE>"),
        ("allocating 300MB, peak 44064K of 2.00 GiB", "allocating <SIZE>, peak <SIZE> of <SIZE>"),
        ("connect to 10.31.4.7:6818 failed", "connect to <HOST> failed"),
        ("checkpoint 3f2a9c1e-7b5d-4e0f-9a11-0c2b3d4e5f60 saved at 0x7f3a2b10", "checkpoint <UUID> saved at <HEX>"),
        ("reading /home/alice/data/x.csv then /scratch/bob/y.h5 and /tmp/tmp.Ab12/z", "reading <PATH> then <PATH> and <PATH>"),
        ("session opened for user alice by (uid=1001)", "session opened for user <USER> by (uid=<NUM>)"),
        ("[2026-11-30T00:04:15.718] error: Could not open job state file", "[<TIME>] error: Could not open job state file"),
        ("Jul 10 03:12:31 rank 4 of 16 done", "<TIME> rank <NUM> of <NUM> done"),
        ("pid 265387 exited after 12.5 s", "pid <PID> exited after <NUM> s"),
    ],
)
def test_normalize_masks_what_varies(text, template):
    assert normalize(text) == template


def test_an_address_and_its_optional_resolved_name_are_one_field():
    with_name = normalize("connection from 10.1.2.3 (login2.cluster.example.org) at 03:12:31")
    without = normalize("connection from 172.16.0.9 () at 11:00:02")
    assert with_name == without == "connection from <HOST> (<HOST>) at <TIME>"


def test_interpreter_name_is_kept_in_the_template():
    sig = fingerprint("python3: can't open file '/home/alice/jobs/train.py': [Errno 2] No such file or directory")
    assert sig.template == "python3: can't open file '<FILE>': [Errno <NUM>] No such file or directory"


def test_normalize_is_deterministic_and_whitespace_insensitive():
    text = "srun: error:   cn01: task 0:\tSegmentation fault (core dumped)"
    assert normalize(text) == normalize(text) == "srun: error: <NODE>: task <NUM>: Segmentation fault (core dumped)"


def test_normalize_equals_fingerprint_template():
    for _, _, first, _ in PAIRS:
        assert normalize(first) == fingerprint(first).template


# --------------------------------------------------------------------------- signature shape


def test_signature_is_a_frozen_dataclass_with_a_16_hex_fingerprint():
    sig = fingerprint(REAL_FASTTIMEOUT_7)
    assert isinstance(sig, FailureSignature)
    assert len(sig.fingerprint) == 16 and int(sig.fingerprint, 16) >= 0
    expected = hashlib.sha256(f"{sig.category}\n{sig.template}".encode()).hexdigest()[:16]
    assert sig.fingerprint == expected
    with pytest.raises(AttributeError):
        sig.category = "other"  # type: ignore[misc]


def test_same_template_different_category_gives_different_fingerprints():
    # host_oom and job_cancelled lines never share a fingerprint even if masked alike
    a = fingerprint("slurmstepd: error: *** JOB 4 ON localhost CANCELLED AT 2026-11-30T00:00:36 ***")
    b = fingerprint("slurmstepd: error: *** JOB 4 ON localhost CANCELLED AT 2026-11-30T00:00:36 DUE TO TIME LIMIT ***")
    assert (a.category, b.category) == ("job_cancelled", "time_limit")
    assert a.fingerprint != b.fingerprint


# --------------------------------------------------------------------------- excerpts


def test_block_picks_the_final_exception_not_the_srun_exit_line():
    sig = signature_of_block(REAL_STEPFAIL_5)
    assert sig.category == "python_exception"
    assert sig.template == "KeyError: '<ID>'"


def test_block_prefers_slurm_oom_verdict_over_the_shell_killed_line():
    sig = signature_of_block(REAL_OOM_4)
    assert sig.category == "host_oom"
    assert sig == signature_of_block(REAL_OOM_4_NOCGROUP)


def test_block_of_chained_exceptions_uses_the_last_one():
    text = (
        "Traceback (most recent call last):\n  File \"a.py\", line 2, in <module>\n"
        "KeyError: 'x'\n\nDuring handling of the above exception, another exception occurred:\n\n"
        "Traceback (most recent call last):\n  File \"a.py\", line 4, in <module>\n"
        "ValueError: bad config value\n"
    )
    sig = signature_of_block(text)
    assert sig.category == "python_exception"
    assert sig.template == "ValueError: bad config value"


def test_block_signature_ignores_unrelated_noise():
    core = REAL_FAIL_3_ERR
    noisy = "epoch 1/10 loss=0.9312 lr=3e-4\n\x1b[32mINFO\x1b[0m loaded 51234 samples from /data/x\n" + core
    progress = "100%|##########| 500/500 [00:31<00:00, 15.9it/s]\r 12%|#         | 60/500\n" + core
    assert signature_of_block(noisy) == signature_of_block(core) == signature_of_block(progress)


def test_block_with_time_limit_beats_earlier_program_errors():
    text = "warning: Connection refused, retrying\n" + REAL_TIMEOUT_1
    assert signature_of_block(text).category == "time_limit"


def test_block_without_a_rule_uses_the_last_error_like_line():
    text = "step 1 ok\nERROR: solver failed to converge after 311 iterations\nwriting partial output\n"
    sig = signature_of_block(text)
    assert sig.category == UNKNOWN
    assert sig.template == "ERROR: solver failed to converge after <NUM> iterations"


def test_fingerprint_of_multiline_text_is_the_block_signature():
    assert fingerprint(REAL_STEPFAIL_5) == signature_of_block(REAL_STEPFAIL_5)


def test_lmod_missing_outranks_the_command_it_breaks():
    text = (
        "environment: line 17: /usr/share/lmod/lmod/libexec/lmod: No such file or directory\n"
        "/var/spool/slurm/slurmd/job00040/slurm_script: line 14: samtools: command not found\n"
    )
    assert categorize(text) == "lmod_not_available"


def test_empty_text_is_unknown():
    sig = fingerprint("")
    assert sig.category == UNKNOWN and sig.template == ""


# --------------------------------------------------------------------------- rules


def test_builtin_rules_cover_at_least_30_categories_including_the_required_ones():
    categories = {rule.category for rule in load_rules()}
    assert len(categories) >= 30
    assert REQUIRED_CATEGORIES <= categories, REQUIRED_CATEGORIES - categories


def test_load_rules_is_cached():
    assert load_rules() is load_rules()


def test_site_rules_add_categories(tmp_path):
    site = tmp_path / "site.toml"
    site.write_text(
        "[[rule]]\n"
        'name = "license_checkout"\n'
        'description = "FlexLM license server refused a checkout"\n'
        "patterns = ['''FLEXnet Licensing error:-?\\d+''']\n"
    )
    line = "FLEXnet Licensing error:-15,570. System Error: 111 \"Connection refused\""
    assert categorize(line) == "network_error"  # built-ins alone
    assert categorize(line, rules=load_rules(str(site))) == "license_checkout"
    assert fingerprint(line, rules=load_rules(str(site))).category == "license_checkout"


def test_site_rule_with_builtin_name_replaces_it(tmp_path):
    site = tmp_path / "site.toml"
    site.write_text(
        "[[rule]]\n"
        'name = "time_limit"\n'
        'category = "walltime"\n'
        "patterns = ['''DUE TO TIME LIMIT''']\n"
    )
    rules = load_rules(str(site))
    assert [r.name for r in rules].count("time_limit") == 1
    assert categorize(REAL_TIMEOUT_1, rules=rules) == "walltime"


def test_site_rule_priority_beats_builtin_order(tmp_path):
    site = tmp_path / "site.toml"
    site.write_text(
        "[[rule]]\n"
        'name = "site_scratch_purge"\n'
        "priority = 10\n"
        "patterns = ['''/scratch/purged/''']\n"
        "[[rule]]\n"
        'name = "site_low"\n'
        "patterns = ['''No such file''']\n"
    )
    rules = load_rules(str(site))
    assert rules[0].name == "site_scratch_purge"
    assert categorize("open /scratch/purged/a.dat: No such file or directory", rules=rules) == "site_scratch_purge"
    # a priority-0 site rule still precedes built-ins of equal priority
    assert categorize("open b.dat: No such file or directory", rules=rules) == "site_low"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[[rule]]\nname = 'x'\npatterns = ['(unclosed']\n", "bad regex"),
        ("[[rule]]\nname = 'x'\n", "patterns"),
        ("[[rule]]\npatterns = ['a']\n", "name"),
        ("[[rule]]\nname = 'x'\npatterns = ['a']\npick = 'middle'\n", "pick"),
        ("[[rule]]\nname = 'x'\npatterns = ['GLIBC_[0-9.]+']\npick = 'highest'\n", "version"),
        ("[[rule]]\nname = 'x'\npatterns = ['a']\n[[rule]]\nname = 'x'\npatterns = ['b']\n", "twice"),
        ("[[rule]]\nname = 'x'\npatterns = ['a']\nmask = ['no group']\n", "named group"),
        ("this is = = not toml", "not valid TOML"),
        ("[[rule]]\nname = 'x'\npatterns = ['a']\ntemplate = 'unclosed {brace'\n", "bad template"),
    ],
)
def test_bad_site_rules_raise_config_error(tmp_path, content, message):
    site = tmp_path / "bad.toml"
    site.write_text(content)
    with pytest.raises(ConfigError, match=message):
        load_rules(str(site))


def test_missing_site_rules_file_raises_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read rules file"):
        load_rules(str(tmp_path / "absent.toml"))


def test_literal_prefilter_never_hides_a_match():
    # Each pattern carries a literal that must occur in any match; it is checked with a
    # plain substring test first, so a wrong literal would silently lose categories.
    texts = [text for _, _, first, second in PAIRS for text in (first, second)]
    checked = 0
    for rule in load_rules():
        for regex, needle in zip(rule.patterns, rule.needles):
            for text in texts:
                match = regex.search(text)
                if match and needle is not None:
                    haystack = match.group(0).lower() if needle[1] else match.group(0)
                    assert needle[0] in haystack, (rule.name, regex.pattern, needle)
                    checked += 1
    assert checked > 60


@pytest.mark.parametrize(
    ("pattern", "needle"),
    [
        (r"Stale (?:NFS )?file handle", ("file handle", False)),
        (r"(?i)Kill task failed", ("kill task failed", True)),
        (r"events?", ("event", False)),
        (r"ab{0,2}cdef", ("cdef", False)),
        (r"foo\.bar+", ("foo.bar", False)),
        (r"ECONNREFUSED|ECONNRESET", None),
        (r"caf\u00e9 crashed", None),
        (r"(?x) a b c d", None),
    ],
)
def test_required_literal_is_conservative(pattern, needle):
    from hpcmem.kb.signatures.fingerprint import _required_literal

    assert _required_literal(pattern) == needle


def test_site_template_may_use_groups_the_match_lacks(tmp_path):
    site = tmp_path / "site.toml"
    site.write_text(
        "[[rule]]\n"
        'name = "gpfs_full"\n'
        "patterns = ['mmfs: file system (?P<fs>\\w+) is full', 'GPFS is full']\n"
        'template = "GPFS file system {fs} is full"\n'
    )
    rules = load_rules(str(site))
    assert fingerprint("mmfs: file system scratch is full", rules=rules).template == "GPFS file system scratch is full"
    assert fingerprint("warning: GPFS is full", rules=rules).template == "GPFS file system is full"


def test_long_log_is_categorised_by_its_decisive_line():
    noise = "".join(f"epoch {i} loss=0.{i % 97:02d} wrote /scratch/alice/ckpt_{i}.pt\n" for i in range(20000))
    sig = signature_of_block(noise + REAL_FAIL_3_ERR)
    assert sig == signature_of_block(REAL_FAIL_3_ERR)


def test_import_is_stdlib_only_and_reads_rules_lazily():
    code = (
        "import sys, hpcmem.kb.signatures.fingerprint\n"
        "heavy = ('tomllib', 'sqlalchemy', 'typer', 'rich', 'numpy', 'torch')\n"
        "print(','.join(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_heuristics_can_be_left_out_for_ablations_and_come_back():
    from hpcmem.kb.signatures.fingerprint import heuristics_left_out

    line = "Accepted password for user alice from 10.1.2.3 via eth0"
    shipped = fingerprint(line).template
    assert "<USER>" in shipped and "eth0" in shipped
    with heuristics_left_out(frozenset({"user_names", "device_names"})):
        ablated = fingerprint(line).template
    assert "for user alice " in ablated  # without user_names the name stays a plain word
    assert ablated.endswith("via <ID>")  # without device_names eth0 is an id like any other
    assert fingerprint(line).template == shipped
    with pytest.raises(ValueError, match="unknown masking heuristics"):
        with heuristics_left_out(frozenset({"no_such_thing"})):
            pass
    assert fingerprint(line).template == shipped


@pytest.mark.parametrize("line, category", [
    ("srun: error: cn3: task 0: Exited with exit code 139", "segfault"),
    ("srun: error: cn3: task 0: Exited with exit code 137", "host_oom"),
    ("process exited with status 134", "aborted"),
    ("Command exited with non-zero status 136", "floating_point_exception"),
    ("srun: error: cn3: task 0: Exited with exit code 132", "illegal_instruction"),
    ("srun: error: cn3: task 0: Exited with exit code 135", "bus_error"),
    ("srun: error: cn3: task 0: Exited with exit code 1", "nonzero_exit"),
    ("srun: error: cn3: task 0: Exited with exit code 13", "nonzero_exit"),  # 13 is no 128+N
])
def test_exit_statuses_128_plus_n_in_logs_are_signals(line, category):
    assert fingerprint(line).category == category


def test_needle_prefilter_never_changes_a_template(monkeypatch):
    """_mask skips patterns whose literals are absent; with and without that shortcut every
    sample text (and the Unicode letters that IGNORECASE folds to ASCII) masks the same."""
    from hpcmem.kb.signatures import fingerprint as signatures

    patterns = set(signatures._KEEP) | {signatures._URL, signatures._PATH}
    patterns |= {entry[0] for entry in signatures._CONTEXT + signatures._GENERIC}
    assert set(signatures._NEEDLES) <= patterns  # an edited pattern must not keep stale needles
    from tests.conftest import SAMPLES as samples

    texts = [line for path in sorted(samples.rglob("*")) if path.is_file() and path.suffix in (".log", ".err", ".out", ".txt", ".psv")
             for line in path.read_text(encoding="utf-8", errors="replace").splitlines()[:400]]
    texts += ["ſtep 12 failed", "JOB 7 ſtep 3", "pİd=123 gone", "PID 44", "UTF-16 decode", "AVX512F missing",
              "ſſe4.2 needed", "libcudart.so.11.0: cannot open", "GLIBC_2.29 not found", "sm_80 on x86_64",
              "0x7ffd at 00001234", "USER=bob", "user alice", "NodeList=cpu-[01-04]", "node cn12 down",
              "slurmstepd: error: *** JOB 1000044 ON cpu-04 CANCELLED AT 2026-06-04T04:35:02 DUE TO TIME LIMIT ***"]
    assert len(texts) > 500
    shortcut = [(fingerprint(t), signatures._mask(t, None)) for t in texts]
    monkeypatch.setattr(signatures, "_PREFILTER", False)
    signatures._MASKED_TEMPLATES.clear()
    assert [(fingerprint(t), signatures._mask(t, None)) for t in texts] == shortcut


# Path kinds. Lines copied from calibration texts of data/corpus (loader-0006, -0024, -0025,
# -0026, -0010; cuda-0011, mpi-0050): the same loader message has another cause when the
# library lies inside a conda env / venv / site-packages than in a system or module tree.
@pytest.mark.parametrize(
    "line, kind",
    [
        ("/home/kevin/anaconda3/envs/pixSfM/lib/libstdc++.so.6", "<ENV_PATH>/"),
        ("/usr/local/miniconda3/envs/ktransformers/bin/../lib/libstdc++.so.6", "<ENV_PATH>/"),
        ("/opt/conda/lib/python3.7/site-packages/torch/distributed/launch.py", "<ENV_PATH>/"),
        ("/home/ubuntu/.local/lib/python3.12/site-packages/transformers/trainer.py", "<ENV_PATH>/"),
        ("/home/u/proj/.venv/lib/python3.11/site-packages/numpy/core/x.py", "<ENV_PATH>/"),
        ("/lib/x86_64-linux-gnu/libstdc++.so.6", "<PATH>/"),
        ("/lib64/libstdc++.so.6", "<PATH>/"),
        ("/soft/packaging/spack-builds/gcc-10.2.0/gcc-10.2.0-yudlyezca7twgd5o3wkkraur7wdbngdn/lib64/libstdc++.so.6",
         "<PATH>/"),
        ("/apps/gcc/12.2.0/lib64/libstdc++.so.6", "<PATH>/"),
        ("/usr/bin/env", "<PATH>"),
        # a conda-bld build tree says where torch was compiled, not where it runs
        ("/opt/conda/conda-bld/pytorch_1524586445097/work/aten/src/THC/THCGeneral.cpp", "<PATH>"),
    ],
)
def test_paths_keep_their_kind(line, kind):
    template = normalize(f"reading {line} failed")
    assert template.startswith(f"reading {kind}")
    assert kind.startswith("<ENV_PATH>") == ("<ENV_PATH>" in template)


def test_a_path_split_by_a_kept_token_has_one_kind():
    # cuda-0011: python3.10 is kept, the path around it is one environment path
    line = "/usr/local/lib/python3.10/dist-packages/torch/cuda/__init__.py:124: UserWarning: CUDA initialization"
    assert normalize(line).startswith("<ENV_PATH>/python3.10<ENV_PATH>:<NUM>: UserWarning")
    assert normalize("/usr/lib/python3.10/subprocess.py:12: error").startswith("<PATH>/python3.10<PATH>:")


def test_loader_symbol_version_template_keeps_only_an_environment_directory():
    conda = ("ImportError: /home/kevin/anaconda3/envs/pixSfM/lib/libstdc++.so.6: version `GLIBCXX_3.4.29' not found "
             "(required by /home/kevin/pixel-perfect-sfm/pixsfm/_pixsfm.cpython-38-x86_64-linux-gnu.so)")
    system = ("../build/cppsafe: /lib/x86_64-linux-gnu/libstdc++.so.6: version `GLIBCXX_3.4.29' not found "
              "(required by ../build/cppsafe)")
    bare = "version `GLIBCXX_3.4.29' not found: libstdc++.so.6: version `GLIBCXX_3.4.29' not found"
    env_sig, sys_sig = fingerprint(conda), fingerprint(system)
    assert env_sig.category == sys_sig.category == "symbol_version_not_found"
    assert env_sig.template == "<ENV_PATH>/libstdc++.so.6: version `GLIBCXX_3.4.29' not found"
    assert sys_sig.template == "libstdc++.so.6: version `GLIBCXX_3.4.29' not found"
    assert env_sig.fingerprint != sys_sig.fingerprint
    # a system directory and no directory at all are one failure
    assert fingerprint(bare).template == sys_sig.template
    # the "required by" path does not decide (loader-0008: a system libstdc++ under a conda env)
    mixed = ("ImportError: /usr/lib/x86_64-linux-gnu/libstdc++.so.6: version `GLIBCXX_3.4.29' not found (required by "
             "/opt/conda/envs/py38/lib/python3.8/site-packages/scipy/spatial/_ckdtree.cpython-38-x86_64-linux-gnu.so)")
    assert fingerprint(mixed).fingerprint == sys_sig.fingerprint


def test_environment_paths_count_as_a_word():
    from hpcmem.kb.signatures.fingerprint import words

    assert "env_path" in words("ImportError: <ENV_PATH>/libstdc++.so.6: version")
    assert not {"path", "<path>"} & set(words("ImportError: <PATH>/libstdc++.so.6: version"))
