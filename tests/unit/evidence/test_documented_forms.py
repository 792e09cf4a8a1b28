"""Error forms from vendor and project documentation (issue #30): NCCL result codes and proxy
warnings, CUDA runtime error strings, systemd-oomd and batch-system limit kills (PBS, LSF
termination reasons, HTCondor), kubelet evictions, errno and kernel storage messages, corrupt
checkpoint formats, NVRM lines, nvidia-smi and DCGM health/diagnostic output.

The lines are written from the documented message formats (with the prefixes the tools print),
not copied from any corpus. Each must be claimed by the named rule; the look-alikes below them
(the same words in a benign or different context) must not be.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rule_forms import assert_claimed, assert_not_claimed, scan_lines

from trainguard.evidence import load_rules

NCCL = "gpu-07:41233:41290 [3] "
KERN = "Mar  3 04:12:55 gpu-07 kernel: [123456.789012] "

DOCUMENTED = [
    # NCCL (ncclResult_t, troubleshooting): invalid argument/usage are programming errors.
    ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
     "NCCLUtils.hpp:219, invalid argument (run with NCCL_DEBUG=WARN for details), NCCL version "
     "2.18.1", "nccl_invalid_usage", "user_code_error", "fix_code"),
    (NCCL + "NCCL WARN Message truncated : received 4096 bytes instead of 2048",
     "nccl_invalid_usage", "user_code_error", "fix_code"),
    (NCCL + "NCCL WARN Bootstrap Root : mismatch in rank count from procs 8 : 16",
     "nccl_invalid_usage", "user_code_error", "fix_code"),
    (NCCL + "NCCL WARN [Proxy Service 3] Failed to execute operation Connect from rank 3, "
     "retcode 3", "nccl_socket_connect_failed", "network_ib", "check_network"),
    (NCCL + "NCCL WARN [Service thread] Error encountered progressing operation=Connect, res=3, "
     "closing connection", "nccl_socket_connect_failed", "network_ib", "check_network"),
    # CUDA runtime API (cudaError_t).
    ("RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions "
     "before calling NumCudaDevices() that might have already set an error? Error 803: system "
     "has unsupported display driver / cuda driver combination",
     "cuda_arch_or_driver_mismatch", "cuda_software_bug", "fix_config"),
    ("RuntimeError: CUDA error: invalid device ordinal",
     "cuda_arch_or_driver_mismatch", "cuda_software_bug", "fix_config"),
    (KERN + "NVRM: API mismatch: the client has the version 550.54.15, but this kernel module has "
     "the version 535.129.03.", "cuda_arch_or_driver_mismatch", "cuda_software_bug",
     "fix_config"),
    ("RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable",
     "cuda_gpu_not_available", "gpu_hardware", "reboot_node"),
    # Host memory: systemd-oomd / systemd, PBS, LSF, HTCondor.
    ("Mar  3 04:12:55 gpu-07 systemd-oomd[812]: Killed /system.slice/train.service due to memory "
     "pressure for /system.slice being 71.25% > 50.00% for > 20s with reclaim activity",
     "host_oom_killer", "oom_host", "fix_config"),
    ("Mar  3 04:12:55 gpu-07 systemd-oomd[812]: Killed /user.slice/user-1000.slice/session-4.scope"
     " due to memory used (130541256704) / total (135089287168) and swap used (7340032000) / "
     "total (8589930496) being more than 90.00%", "host_oom_killer", "oom_host", "fix_config"),
    ("Mar  3 04:12:55 gpu-07 systemd[1]: train.service: A process of this unit has been killed "
     "by the OOM killer.", "host_oom_killer", "oom_host", "fix_config"),
    ("Mar  3 04:12:56 gpu-07 systemd[1]: train.service: Failed with result 'oom-kill'.",
     "host_oom_killer", "oom_host", "fix_config"),
    ("=>> PBS: job killed: mem 137438953472b exceeded limit 134217728000b",
     "host_oom_killer", "oom_host", "fix_config"),
    ("=>> PBS: job killed: vmem 150gb exceeded limit 128gb", "host_oom_killer", "oom_host",
     "fix_config"),
    ("TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.",
     "host_oom_killer", "oom_host", "fix_config"),
    ("TERM_SWAP: job killed after reaching LSF swap usage limit.",
     "host_oom_killer", "oom_host", "fix_config"),
    ("Hold reason: Error from slot2_5@wn-031.example.edu: Docker job has gone over memory "
     "limit of 8192 Mb", "host_oom_killer", "oom_host", "fix_config"),
    ("Error from slot1_2@wn-031.example.edu: Job has encountered an out-of-memory event.",
     "host_oom_killer", "oom_host", "fix_config"),
    ("job 884120 exceeded MEM usage hard limit (40960 > 32768)", "host_oom_killer", "oom_host",
     "fix_config"),
    # A port the launch needs is taken (c10d TCPStore, Python's socket).
    ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
     "network address. The server socket has failed to bind to [::]:29400 (errno: 98 - Address "
     "already in use).", "port_in_use", "user_code_error", "fix_config"),
    ("OSError: [Errno 98] Address already in use", "port_in_use", "user_code_error",
     "fix_config"),
    # Building a CUDA extension against another toolkit than torch's (cpp_extension, DeepSpeed).
    ("RuntimeError: The detected CUDA version (12.4) mismatches the version that was used to "
     "compile", "cuda_arch_or_driver_mismatch", "cuda_software_bug", "fix_config"),
    ("deepspeed.ops.op_builder.builder.CUDAMismatchException: >- DeepSpeed Op Builder: Installed "
     "CUDA version 11.8 does not match the version torch was compiled with 12.4, unable to "
     "compile cuda/cpp extensions without a matching cuda version.",
     "cuda_arch_or_driver_mismatch", "cuda_software_bug", "fix_config"),
    ("Error from slot1_1@gpu-12.example.org: Job has gone over cgroup memory limit of 32768 "
     "megabytes. Last measured usage: 32790 megabytes.  Consider resubmitting with a higher "
     "request_memory.", "host_oom_killer", "oom_host", "fix_config"),
    # Scheduler limits, preemption, eviction.
    ("=>> PBS: job killed: walltime 86430 exceeded limit 86400",
     "slurm_time_limit", "scheduler_node_failure", "restart_job"),
    ("TERM_RUNLIMIT: job killed after reaching LSF run time limit.",
     "slurm_time_limit", "scheduler_node_failure", "restart_job"),
    ("TERM_PREEMPT: job killed after preemption.", "preemption", "scheduler_node_failure",
     "restart_job"),
    ("004 (1234.000.000) 03/03 04:12:55 Job was evicted.", "preemption",
     "scheduler_node_failure", "restart_job"),
    ("  Warning  Evicted  3m  kubelet  Pod ephemeral local storage usage exceeds the total limit "
     "of containers 10Gi.", "k8s_eviction_resource", "scheduler_node_failure", "fix_config"),
    ('  Warning  Evicted  3m  kubelet  Usage of EmptyDir volume "dshm" exceeds the limit "8Gi".',
     "k8s_eviction_resource", "scheduler_node_failure", "fix_config"),
    ("  Warning  Evicted  40s  kubelet  The node was low on resource: ephemeral-storage. "
     "Threshold quantity: 2Gi, available: 1488Ki.", "k8s_eviction_resource",
     "scheduler_node_failure", "fix_config"),
    ("Status: Failed  Reason: Evicted", "k8s_eviction", "scheduler_node_failure", "restart_job"),
    # Storage: errno on a mount, CIFS and NVMe kernel messages.
    ("OSError: [Errno 107] Transport endpoint is not connected: '/mnt/gcs/ckpt/step_1200'",
     "io_error", "storage_io", "check_storage"),
    ("ls: cannot access '/mnt/blob/data': Transport endpoint is not connected",
     "io_error", "storage_io", "check_storage"),
    ("OSError: [Errno 112] Host is down: '/mnt/smb/data/shard-0001.tar'",
     "io_error", "storage_io", "check_storage"),
    ("OSError: [Errno 27] File too large: '/scratch/run7/optimizer.pt'",
     "io_error", "storage_io", "check_storage"),
    (KERN + "CIFS: VFS: \\\\fs01 has not responded in 180 seconds. Reconnecting...",
     "io_error", "storage_io", "check_storage"),
    (KERN + "nvme nvme0: I/O 512 QID 7 timeout, aborting", "io_error", "storage_io",
     "check_storage"),
    (KERN + "nvme nvme0: controller is down; will reset: CSTS=0xffffffff, PCI_STATUS=0xffff",
     "io_error", "storage_io", "check_storage"),
    # Checkpoint files that are not whole when loaded.
    ("OSError: Unable to open file (truncated file: eof = 1048576, sblock->base_addr = 0, "
     "stored_eof = 4194304)", "checkpoint_unpickle", "checkpoint", "check_storage"),
    ("OSError: Unable to synchronously open file (file signature not found)",
     "checkpoint_unpickle", "checkpoint", "check_storage"),
    ("zipfile.BadZipFile: File is not a zip file", "checkpoint_unpickle", "checkpoint",
     "check_storage"),
    ("RuntimeError: storage has wrong size: expected 0 got 4096", "checkpoint_unpickle",
     "checkpoint", "check_storage"),
    ("tensorflow.python.framework.errors_impl.DataLossError: Unable to open table file "
     "/ckpt/model.ckpt-100: Data loss: not an sstable (bad magic number): perhaps your file is in"
     " a different file format and you need to use a different restore operator?",
     "checkpoint_unpickle", "checkpoint", "check_storage"),
    # NVRM, nvidia-smi, DCGM.
    (KERN + "NVRM: rm_init_adapter failed, device minor number 0", "nvrm_gpu_fault",
     "gpu_hardware", "reset_gpu"),
    (KERN + "NVRM: This PCI I/O region assigned to your NVIDIA device is invalid:",
     "nvrm_gpu_fault", "gpu_hardware", "reset_gpu"),
    ("| N/A   ERR!    P0    ERR! / 700W |  80000MiB / 81559MiB |     ERR!     Default |",
     "nvml_gpu_lost", "gpu_hardware", "reboot_node"),
    ("DCGM_FR_CORRUPT_INFOROM: A corrupt InfoROM has been detected in GPU 1.",
     "nvrm_gpu_fault", "gpu_hardware", "reset_gpu"),
    ("DCGM_FR_TEMP_VIOLATION: Temperature 95 of GPU 5 exceeded user-specified maximum allowed "
     "temperature 87", "nvrm_gpu_fault", "gpu_hardware", "reset_gpu"),
    ("|                           | Thermal system: Failure - GPU 5 is over temperature |",
     "nvrm_gpu_fault", "gpu_hardware", "reset_gpu"),
    ("DCGM_FR_PCI_REPLAY_RATE: Detected more than 8 PCIe replays per minute for GPU 2 : 12",
     "pcie_aer_corrected", "gpu_hardware", "exclude_node"),
    ("|                           | NVLink system: Failure - GPU 3's NvLink link 7 is down |",
     "nvlink_error", "nvlink_interconnect", "reboot_node"),
    ("DCGM_FR_SXID_ERROR: Detected SXid 12028", "nvlink_error", "nvlink_interconnect",
     "reboot_node"),
    ("DCGM_FR_FAULTY_MEMORY: 3 faulty memory elements detected on GPU 4",
     "dcgm_memory_health", "gpu_memory_ecc", "reset_gpu"),
    ("| Memory                    | Fail - GPU: 3                                   |",
     "dcgm_memory_health", "gpu_memory_ecc", "reset_gpu"),
    # Container runtimes, torch.distributed init, NIC drivers, filesystems, batch accounting.
    ("nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.4, please update "
     "your driver to a newer version, or use an earlier cuda container: unknown.",
     "cuda_arch_or_driver_mismatch", "cuda_software_bug", "fix_config"),
    ("AssertionError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA "
     "GPU and installed a driver from http://www.nvidia.com/Download/index.aspx",
     "cuda_gpu_not_available", "gpu_hardware", "reboot_node"),
    ("RuntimeError: Timed out initializing process group in store based barrier on rank: 3, for "
     "key: store_based_barrier_key:1 (world_size=8, worker_count=4, timeout=0:30:00)",
     "rendezvous_timeout", "network_ib", "check_network"),
    (KERN + "mlx5_core 0000:3b:00.0: Port module event[error]: module 0, Cable error, Unsupported "
     "cable", "ib_link_down", "network_ib", "check_network"),
    (KERN + "NETDEV WATCHDOG: ens1f0np0 (mlx5_core): transmit queue 12 timed out",
     "ib_link_down", "network_ib", "check_network"),
    (KERN + "ice 0000:17:00.0 ens2f0: NIC Link is Down", "ib_link_down", "network_ib",
     "check_network"),
    (KERN + "EXT4-fs (nvme0n1p1): Remounting filesystem read-only", "io_error", "storage_io",
     "check_storage"),
    (KERN + "XFS (md0): Log I/O Error Detected. Shutting down filesystem", "io_error",
     "storage_io", "check_storage"),
    (KERN + "Kernel panic - not syncing: Out of memory and no killable processes...",
     "host_oom_killer", "oom_host", "fix_config"),
    ('a1b2c3d4e5f6   trainer:latest   "torchrun --nproc"   2 hours ago   Exited (137) 3 minutes '
     "ago            trainer", "process_killed_sigkill", "oom_host", "fix_config"),
    ("      Exit Code:    137", "process_killed_sigkill", "oom_host", "fix_config"),
    ("812345       train.sh        gpu   research         64    TIMEOUT      0:0",
     "slurm_time_limit", "scheduler_node_failure", "restart_job"),
    ("812345       train.sh        gpu   research         64  PREEMPTED      0:0",
     "preemption", "scheduler_node_failure", "restart_job"),
    ("compute.instances.preempted: Instance was preempted.", "preemption",
     "scheduler_node_failure", "restart_job"),
    ("jax.errors.JaxRuntimeError: DEADLINE_EXCEEDED: Barrier timed out. Id: PjRT_Client_Connect. "
     "This usually happens when a task has died or is running very slowly.",
     "nccl_timeout_generic", "nccl_timeout_hang", "restart_job"),
    (NCCL + "NCCL WARN NET/OFI Request completed with error. RC: 21. Error: unknown error. "
     "Completed length: 0, Request: { dev: 1, size: 0, state: CREATED, direction: RECV }",
     "nccl_ib_completion_error", "network_ib", "check_network"),
    ("libfabric:451707:1708520807::efa:cq:efa_rdm_txe_handle_error():737<warn> err: 5, message: "
     "Invalid address (7)", "nccl_ib_completion_error", "network_ib", "check_network"),
    ("RuntimeError: HIP error: no ROCm-capable device is detected", "cuda_gpu_not_available",
     "gpu_hardware", "reboot_node"),
    ("OSError: Unable to open file (unable to lock file, errno = 11, error message = 'Resource "
     "temporarily unavailable')", "io_error", "storage_io", "check_storage"),
    (NCCL + "include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device",
     "shm_or_dataloader_killed", "oom_host", "fix_config"),
    ("Warning  DeadlineExceeded  2m  job-controller  Job was active longer than specified deadline",
     "slurm_time_limit", "scheduler_node_failure", "restart_job"),
    ("  Message:  Pod was terminated in response to imminent node shutdown.", "preemption",
     "scheduler_node_failure", "restart_job"),
    ("compute.instances.hostError: Instance terminated by Compute Engine due to a host error.",
     "slurm_node_failure", "scheduler_node_failure", "exclude_node"),
    (KERN + "NVRM: A GPU crash dump has been created. If possible, please run", "nvrm_gpu_fault",
     "gpu_hardware", "reset_gpu"),
    # General wording for a full filesystem.
    ("OSError: Not enough disk space. Needed: 1.20 TiB (download: 400 GiB, generated: 800 GiB)",
     "no_space_left", "storage_io", "check_storage"),
    ("ERROR: checkpoint writer: disk is full on /scratch (0 bytes free)", "no_space_left",
     "storage_io", "check_storage"),
    ("WARN filesystem full: /lustre/project/run7", "no_space_left", "storage_io", "check_storage"),
]

# The same words where they do not mean the documented failure: (line, rule it must not be).
LOOK_ALIKES = [
    # DeepSpeed's note when only the minor versions differ: it goes on building.
    ("Installed CUDA version 12.6 does not match the version torch was compiled with 12.4 but "
     "since the APIs are compatible, accepting this combination", "cuda_arch_or_driver_mismatch"),
    ("job 884120 used 2048 of its MEM usage hard limit", "host_oom_killer"),
    # c10d's bind warning alone: the other address family may still bind.
    ("[W socket.cpp:464] [c10d] The server socket has failed to bind to [::]:29400 (errno: 98 - "
     "Address already in use).", "port_in_use"),
    ("OSError: [Errno 107] Transport endpoint is not connected", "io_error"),  # a socket
    ("OSError: [Errno 112] Host is down", "io_error"),
    ("OSError: [Errno 22] Invalid argument: '/data/x'", "nccl_invalid_usage"),
    (NCCL + "NCCL INFO [Proxy Service] Device 3 CPU core 41", "nccl_socket_connect_failed"),
    ("Mar  3 04:12:55 gpu-07 systemd-oomd[812]: Considered 12 cgroups for killing, top "
     "candidates were:", "host_oom_killer"),
    ("    Resource_List.mem = 128gb", "host_oom_killer"),
    ("TERM_OWNER: job killed by owner.", "host_oom_killer"),
    ("TERM_OWNER: job killed by owner.", "slurm_time_limit"),
    ("| N/A   34C    P0    61W / 700W |  80000MiB / 81559MiB |     12%      Default |",
     "nvml_gpu_lost"),
    ("| Memory                    | Pass                                            |",
     "dcgm_memory_health"),
    ("|                           | PCIe system: Healthy                            |",
     "pcie_aer_corrected"),
    ("|                           | Thermal system: Warning - GPU 5 clocks slowed     |",
     "nvrm_gpu_fault"),
    (KERN + "nvme nvme0: 16/0/0 default/read/poll queues", "io_error"),
    (KERN + "CIFS: VFS: Autodisabling the use of server inode numbers on \\\\fs01", "io_error"),
    ("Loaded checkpoint from /ckpt/step_1200 (zip archive, 4 GiB)", "checkpoint_unpickle"),
    (KERN + "mlx5_core 0000:3b:00.0: Port module event: module 0, Cable plugged", "ib_link_down"),
    (KERN + "XFS (md0): Mounting V5 Filesystem", "io_error"),
    (KERN + "EXT4-fs (nvme0n1p1): mounted filesystem with ordered data mode.", "io_error"),
    ("      Exit Code:    0", "process_killed_sigkill"),
    ("812345.batch  batch  research  64  COMPLETED  0:0", "slurm_time_limit"),
    ("CONTAINER ID   IMAGE   COMMAND   CREATED   STATUS   PORTS   NAMES", "process_killed_sigkill"),
    (NCCL + "NCCL INFO NET/OFI Selected Provider is efa", "nccl_ib_completion_error"),
    ("google.api_core.exceptions.TooManyRequests: 429 Quota exceeded for quota metric 'Read "
     "requests'", "no_space_left"),
    ("[rank0]: GPU memory is full, lowering the batch size", "no_space_left"),
    ("Checking disk fullness: 42% used", "no_space_left"),
    ("DCGM_FR_XID_ERROR: Detected XID 13 for GPU 0", "nvrm_gpu_fault"),  # CSV action: none
]


@pytest.mark.parametrize(("line", "rule_id", "category", "action"), DOCUMENTED,
                         ids=[f"{r}-{i}" for i, (_, r, _, _) in enumerate(DOCUMENTED)])
def test_documented_form_is_claimed_by_its_rule(line: str, rule_id: str, category: str,
                                                action: str) -> None:
    assert_claimed(line, rule_id, category, action)


@pytest.mark.parametrize(("line", "rule_id"), LOOK_ALIKES,
                         ids=[f"not-{r}-{i}" for i, (_, r) in enumerate(LOOK_ALIKES)])
def test_look_alike_is_not_claimed_by_the_documented_rule(line: str, rule_id: str) -> None:
    assert_not_claimed(line, rule_id)


def _first_incident(tmp_path: Path, lines: list[str]) -> tuple[str, str]:
    _, found = scan_lines(tmp_path, lines, suspicious=True)
    incidents = [i for i in found if not i.suspicious]
    assert incidents
    return incidents[0].category.value, incidents[0].action.value


def test_a_systemd_oomd_kill_outranks_the_launcher_report(tmp_path: Path) -> None:
    lines = [
        "[rank0]: step 1200 loss 2.314",
        "Mar  3 04:12:55 gpu-07 systemd-oomd[812]: Killed /system.slice/train.service due to "
        "memory pressure for /system.slice being 71.25% > 50.00% for > 20s with reclaim activity",
        "torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) "
        "local_rank: 0 (pid: 41233) of binary: /usr/bin/python",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
    ]
    assert _first_incident(tmp_path, lines) == ("oom_host", "fix_config")


def test_a_pbs_walltime_kill_is_the_scheduler_not_the_sigterm(tmp_path: Path) -> None:
    lines = [
        "[rank0]: step 88000 loss 1.902",
        "=>> PBS: job killed: walltime 86430 exceeded limit 86400",
        "[rank0]: Received SIGTERM, shutting down",
    ]
    assert _first_incident(tmp_path, lines)[0] == "scheduler_node_failure"


def test_a_truncated_hdf5_checkpoint_is_a_checkpoint_failure(tmp_path: Path) -> None:
    lines = [
        "Traceback (most recent call last):",
        '  File "train.py", line 88, in <module>',
        "    model.load_weights(args.resume)",
        "OSError: Unable to open file (truncated file: eof = 1048576, sblock->base_addr = 0, "
        "stored_eof = 4194304)",
    ]
    assert _first_incident(tmp_path, lines) == ("checkpoint", "check_storage")


@pytest.mark.parametrize("line", [
    KERN + "Out of memory: Killed process 41233 (python) total-vm:98765432kB, anon-rss:87654321kB",
    KERN + "Memory cgroup out of memory: Killed process 41233 (python) total-vm:98765432kB",
])
def test_a_kernel_oom_kill_on_a_host_named_gpu_is_host_memory(line: str) -> None:
    # "gpu-07" stands within a few characters of "out of memory" in the syslog prefix.
    m = load_rules().match(line)
    assert m is not None and m.rule.id == "host_oom_killer"
