"""Infrastructure error forms from vendor and project documentation (issue #30, round 6): Slurm
drain reasons and refused requests (slurmctld sources, slurm_errno.c, sinfo/scontrol man pages,
Slurm FAQ, LBNL NHC), NVIDIA Fabric Manager and the CUDA "system not ready" error, nvidia-smi's
Fabric block, RDMA verbs under a low locked-memory limit (NCCL, UCX, Open MPI FAQ), libibverbs
load warnings, Open MPI's "no active ports", mlx4/mlx5 firmware messages, PyTorch shared-memory
files, framework NaN/inf wordings.

The lines are written from the documented message formats (with the prefixes the tools print),
not copied from any corpus. Each must be claimed by the named rule; the look-alikes below them
must not be.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rule_forms import assert_claimed, assert_not_claimed, scan_lines

from trainguard.evidence import load_rules

NCCL = "gpu-07:41233:41290 [3] "
KERN = "Mar  3 04:12:55 gpu-07 kernel: [123456.789012] "
CTLD = "[2026-03-03T04:12:55.123] "
SYSLOG = "Mar 03 04:12:55 gpu-07 "
AT = " [slurm@2026-03-03T04:12:55]"

DOCUMENTED = [
    # Slurm: the node registered with less than slurm.conf / gres.conf declares.
    ("   Reason=Low RealMemory" + AT, "slurm_node_config_mismatch", "scheduler_node_failure",
     "fix_config"),
    ("   Reason=Low RealMemory (reported:257000 < 100.00% of configured:515000)" + AT,
     "slurm_node_config_mismatch", "scheduler_node_failure", "fix_config"),
    ("Low socket*core*thread count, Low CPUs  slurm     2026-03-03T04:12:55 gpu-07",
     "slurm_node_config_mismatch", "scheduler_node_failure", "fix_config"),
    ("   Reason=Low TmpDisk" + AT, "slurm_node_config_mismatch", "scheduler_node_failure",
     "fix_config"),
    (CTLD + "error: Node gpu-07 has low socket*core*thread count (48 < 96)",
     "slurm_node_config_mismatch", "scheduler_node_failure", "fix_config"),
    (CTLD + "debug:  Node gpu-07 has low real_memory size (257000 / 515000) < 100.00%",
     "slurm_node_config_mismatch", "scheduler_node_failure", "fix_config"),
    (CTLD + "error: Node gpu-07 has low cpu count (48 < 96)", "slurm_node_config_mismatch",
     "scheduler_node_failure", "fix_config"),
    ("   Reason=gres/gpu count reported lower than configured (3 < 4)" + AT,
     "slurm_node_config_mismatch", "scheduler_node_failure", "fix_config"),
    ("NodeName=gpu-07 State=DOWN+DRAIN+INVALID_REG Partitions=gpu Reason=gres/gpu count reported "
     "lower than configured (3 < 4)" + AT, "slurm_node_config_mismatch",
     "scheduler_node_failure", "fix_config"),
    ("gpu          up 14-00:00:0      2  inval gpu-[07-08]", "slurm_node_config_mismatch",
     "scheduler_node_failure", "fix_config"),
    # Slurm: drain reasons that name a fault on the node itself.
    ("   Reason=Prolog error" + AT, "slurm_node_state", "scheduler_node_failure", "exclude_node"),
    ("Prolog error         slurm     2026-03-03T04:12:55 gpu-07", "slurm_node_state",
     "scheduler_node_failure", "exclude_node"),
    ("   Reason=Job env setup error" + AT, "slurm_node_state", "scheduler_node_failure",
     "exclude_node"),
    (CTLD + "error: validate_node_specs: Prolog or job env setup failure on node gpu-07, "
     "draining the node", "slurm_node_state", "scheduler_node_failure", "exclude_node"),
    ("   Reason=Epilog error" + AT, "slurm_node_state", "scheduler_node_failure", "exclude_node"),
    (CTLD + "error: _job_epilog_complete: JobId=1234 epilog error on gpu-07, draining the node",
     "slurm_node_state", "scheduler_node_failure", "exclude_node"),
    ("   Reason=batch job complete failure" + AT, "slurm_node_state", "scheduler_node_failure",
     "exclude_node"),
    ("   Reason=Node unexpectedly rebooted boot_time=1772511175 last response=1772510000" + AT,
     "slurm_node_state", "scheduler_node_failure", "exclude_node"),
    (CTLD + "error: validate_node_specs: Node gpu-07 unexpectedly rebooted boot_time=1772511175 "
     "last response=1772510000", "slurm_node_state", "scheduler_node_failure", "exclude_node"),
    ("   Reason=NHC: check_fs_mount:  /scratch not mounted [root@2026-03-03T04:12:55]",
     "slurm_node_state", "scheduler_node_failure", "exclude_node"),
    ("NHC: check_ps_service:  Service sshd (process sshd) owned by root not running  root  "
     "2026-03-03T04:12:55 gpu-07", "slurm_node_state", "scheduler_node_failure", "exclude_node"),
    ("ERROR:  nhc:  Health check failed:  check_hw_ib:  No IB port mlx5_0:1 is ACTIVE (LinkUp "
     "200 Gb/sec).", "slurm_node_state", "scheduler_node_failure", "exclude_node"),
    # Slurm: requests slurmctld refuses (slurm_errno.c).
    ("sbatch: error: Batch job submission failed: Invalid generic resource (gres) specification",
     "slurm_request_rejected", "scheduler_node_failure", "fix_config"),
    ("srun: error: Unable to allocate resources: Requested node configuration is not available",
     "slurm_request_rejected", "scheduler_node_failure", "fix_config"),
    ("srun: Requested partition configuration not available now", "slurm_request_rejected",
     "scheduler_node_failure", "fix_config"),
    ("srun: error: Memory specification can not be satisfied", "slurm_request_rejected",
     "scheduler_node_failure", "fix_config"),
    ("srun: error: CPU count per node can not be satisfied", "slurm_request_rejected",
     "scheduler_node_failure", "fix_config"),
    ("srun: error: Unable to allocate resources: Invalid account or account/partition "
     "combination specified", "slurm_request_rejected", "scheduler_node_failure", "fix_config"),
    ("sbatch: error: Batch job submission failed: Job violates accounting/QOS policy (job submit "
     "limit, user's size and/or time limits)", "slurm_request_rejected",
     "scheduler_node_failure", "fix_config"),
    ("sbatch: error: Batch job submission failed: Requested time limit is invalid (missing or "
     "exceeds some limit)", "slurm_request_rejected", "scheduler_node_failure", "fix_config"),
    ("sbatch: error: Batch job submission failed: Node count specification invalid",
     "slurm_request_rejected", "scheduler_node_failure", "fix_config"),
    ("sbatch: error: Batch job submission failed: More processors requested than permitted",
     "slurm_request_rejected", "scheduler_node_failure", "fix_config"),
    ("sbatch: error: Batch job submission failed: Invalid partition name specified",
     "slurm_request_rejected", "scheduler_node_failure", "fix_config"),
    # NVIDIA Fabric Manager and CUDA's "system not ready" (Fabric Manager user guide, CUDA API).
    (SYSLOG + "nv-fabricmanager[104230]: fabric manager NVIDIA GPU driver interface version "
     "550.127.05 don't match with driver version 550.120. Please update with matching NVIDIA "
     "driver package.", "fabric_manager_not_running", "nvlink_interconnect", "fix_config"),
    (SYSLOG + 'nvidia-fabricmanager-start.sh[104220]: "/usr/bin/nv-fabricmanager -c '
     '/usr/share/nvidia/nvswitch/fabricmanager.cfg" failed! Exit code: 1',
     "fabric_manager_not_running", "nvlink_interconnect", "fix_config"),
    (SYSLOG + "systemd[1]: nvidia-fabricmanager.service: Control process exited, code=exited, "
     "status=1/FAILURE", "fabric_manager_not_running", "nvlink_interconnect", "fix_config"),
    (SYSLOG + "systemd[1]: Failed to start NVIDIA fabric manager service.",
     "fabric_manager_not_running", "nvlink_interconnect", "fix_config"),
    ("RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions "
     "before calling NumCudaDevices() that might have already set an error? Error 802: system not"
     " yet initialized", "fabric_manager_not_running", "nvlink_interconnect", "fix_config"),
    ("RuntimeError: CUDA error: system not yet initialized", "fabric_manager_not_running",
     "nvlink_interconnect", "fix_config"),
    # RDMA verbs under a low locked-memory limit (NCCL, UCX, Open MPI FAQ).
    (NCCL + "NCCL WARN Call to ibv_create_cq failed with error Cannot allocate memory",
     "ib_memlock_limit", "network_ib", "fix_config"),
    (NCCL + "NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory",
     "ib_memlock_limit", "network_ib", "fix_config"),
    (NCCL + "NCCL WARN Call to ibv_create_qp failed with error Cannot allocate memory",
     "ib_memlock_limit", "network_ib", "fix_config"),
    ("[1736959004.001121] [gpu-07:29714:0]        ib_iface.c:1060 UCX  ERROR "
     "ibv_create_cq(cqe=4096) failed: Cannot allocate memory : Please set max locked memory "
     "(ulimit -l) to 'unlimited' (current: 64 kbytes)", "ib_memlock_limit", "network_ib",
     "fix_config"),
    ("[1736959004.001121] [gpu-07:29714:0]          ib_md.c:293  UCX  ERROR ibv_reg_mr(address="
     "0x7f1c00000000, length=1073741824, access=0xf) failed: Cannot allocate memory",
     "ib_memlock_limit", "network_ib", "fix_config"),
    ("The OpenFabrics (openib) BTL failed to initialize while trying to allocate some locked "
     "memory.  This typically can indicate that the memlock limits are set too low.",
     "ib_memlock_limit", "network_ib", "fix_config"),
    ("libibverbs: Warning: no userspace device-specific driver found for "
     "/sys/class/infiniband_verbs/uverbs0", "ib_userspace_setup", "network_ib", "fix_config"),
    ("libibverbs: Warning: couldn't load driver 'libmlx5-rdmav34.so': libmlx5-rdmav34.so: cannot "
     "open shared object file: No such file or directory", "ib_userspace_setup", "network_ib",
     "fix_config"),
    ("libibverbs: Warning: RLIMIT_MEMLOCK is 32768 bytes.", "ib_userspace_setup", "network_ib",
     "fix_config"),
    ("but there are no active ports detected (or Open MPI was unable to use", "ib_port_state_down",
     "network_ib", "check_network"),
    # HCA firmware and driver (kernel mlx4/mlx5).
    (KERN + "mlx4_core 0000:05:00.0: Installed FW has unsupported command interface revision 2",
     "ib_firmware_unsupported", "network_ib", "fix_config"),
    (KERN + "mlx4_core 0000:05:00.0: This driver version supports only revisions 3 to 3",
     "ib_firmware_unsupported", "network_ib", "fix_config"),
    (KERN + "mlx5_core 0000:3b:00.0: mlx5_cmd_init:2031:(pid 1): Driver cmdif rev(5) differs "
     "from firmware's(4)", "ib_firmware_unsupported", "network_ib", "fix_config"),
    (KERN + "mlx5_core 0000:61:00.0: mlx5_function_enable:1479:(pid 1): Firmware over 120000 MS "
     "in pre-initializing state, aborting", "ib_link_down", "network_ib", "check_network"),
    (KERN + "mlx5_core 0000:61:00.0: probe_one:1637:(pid 1): mlx5_init_one failed with error "
     "code -110", "ib_link_down", "network_ib", "check_network"),
    # PyTorch's shared-memory files: /dev/shm full, not a disk.
    ("RuntimeError: unable to write to file </torch_41233_1234567890_0>: No space left on device "
     "(28)", "shm_or_dataloader_killed", "oom_host", "fix_config"),
    ("RuntimeError: unable to mmap 1048576 bytes from file </torch_41233_1234567890_0>: Cannot "
     "allocate memory (12)", "shm_or_dataloader_killed", "oom_host", "fix_config"),
    # Loss NaN/inf as the frameworks word it.
    ("Batch 1200: Invalid loss, terminating training", "nan_loss", "numerical_nan", "fix_config"),
    ("ValueError: epoch: 1 step: 12. Invalid loss, terminating training.", "nan_loss",
     "numerical_nan", "fix_config"),
    ("ValueError: Rank 3: found NaN in local forward loss calculation. Device: 3, node: gpu-07",
     "nan_loss", "numerical_nan", "fix_config"),
    ("RuntimeError: The total norm of order 2.0 for gradients from `parameters` is non-finite, so"
     " it cannot be clipped. To disable this error and scale the gradients by the non-finite norm"
     " anyway, set `error_if_nonfinite=False`", "nan_loss", "numerical_nan", "fix_config"),
    (" iteration     1200/  500000 | consumed samples:       153600 | learning rate: 1.234E-04 | "
     "global batch size:   128 | loss scale: 1.0 | grad norm: 1.234 | number of skipped "
     "iterations:   0 | number of nan iterations:   3 |", "nan_loss", "numerical_nan",
     "fix_config"),
    ("FloatingPointError: Minimum loss scale reached (0.0001). Your loss is probably exploding. "
     "Try lowering the learning rate, using gradient clipping or increasing the batch size.",
     "loss_scale_collapse", "numerical_nan", "fix_config"),
]

# The same words where they do not mean the documented failure: (line, rule it must not be).
LOOK_ALIKES = [
    (SYSLOG + "nv-fabricmanager[104230]: Successfully configured all the available NVSwitches "
     "to route GPU NVLink traffic.", "fabric_manager_not_running"),
    (SYSLOG + "systemd[1]: Started NVIDIA fabric manager service.", "fabric_manager_not_running"),
    (NCCL + "NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.7<0>",
     "ib_memlock_limit"),
    ("ibv_reg_mr failed: Bad address", "ib_memlock_limit"),
    (KERN + "mlx5_core 0000:3b:00.0: firmware version: 16.35.2000", "ib_firmware_unsupported"),
    ("srun: job 1234 queued and waiting for resources", "slurm_request_rejected"),
    ("   Reason=None" + AT, "slurm_node_state"),
    ("   State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A",
     "slurm_node_config_mismatch"),
    ("   RealMemory=1031000 AllocMem=0 FreeMem=1012345 Sockets=2 Boards=1",
     "slurm_node_config_mismatch"),
    ("gpu          up 14-00:00:0      6   idle gpu-[01-06]", "slurm_node_config_mismatch"),
    (CTLD + "Node gpu-07 now responding", "slurm_node_state"),
    ("OSError: [Errno 28] No space left on device: '/scratch/ckpt/model.pt'",
     "shm_or_dataloader_killed"),
    ("Batch 1200: loss 2.3104", "nan_loss"),
    (" iteration     1200/  500000 | lm loss: 2.104E+00 | loss scale: 1.0 | number of skipped "
     "iterations:   0 | number of nan iterations:   0 |", "nan_loss"),
    ("libibverbs: Warning: couldn't open config directory '/etc/libibverbs.d'.",
     "ib_userspace_setup"),
    ("  min_loss_scale: 0.0001", "loss_scale_collapse"),
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


def test_a_full_disk_is_still_storage() -> None:
    m = load_rules().match("OSError: [Errno 28] No space left on device: '/scratch/ckpt/model.pt'")
    assert m is not None and m.rule.id == "no_space_left"


# Multi-line reports: nvidia-smi -q's Fabric block and ibstat's port block.
FABRIC = ["    Fabric", "        State                             : Completed",
          "        Status                            : {status}",
          "        CliqueId                          : 0"]


def _incidents(tmp_path: Path, lines: list[str]) -> list[tuple[str, str, str]]:
    events, incidents = scan_lines(tmp_path, lines)
    return [(e.signature, e.category.value, e.action.value) for e in events] + [
        ("incident", i.category.value, i.action.value) for i in incidents]


@pytest.mark.parametrize("status", ["Timeout", "Insufficient Resources", "Unknown Error"])
def test_a_fabric_registration_failure_is_the_nvlink_fabric(tmp_path: Path, status: str) -> None:
    lines = [line.format(status=status) for line in FABRIC]
    assert ("nvidia_smi_fabric_state", "nvlink_interconnect", "reboot_node") in _incidents(
        tmp_path, lines)


@pytest.mark.parametrize(("state", "status"), [("Completed", "Success"),
                                               ("Not Supported", "N/A"),
                                               ("In Progress", "N/A")])
def test_a_registered_or_unsupported_fabric_is_no_event(tmp_path: Path, state: str,
                                                       status: str) -> None:
    lines = [line.format(status=status).replace("Completed", state) for line in FABRIC]
    assert _incidents(tmp_path, lines) == []


def test_an_ib_port_without_a_subnet_manager_is_reported(tmp_path: Path) -> None:
    lines = ["CA 'mlx5_0'", "\tPort 1:", "\t\tState: Initializing", "\t\tPhysical state: LinkUp",
             "\t\tRate: 200"]
    assert ("ib_port_state_down", "network_ib", "check_network") in _incidents(tmp_path, lines)


def test_an_invalid_registration_is_a_config_fix_not_a_node_to_exclude(tmp_path: Path) -> None:
    lines = [
        "NodeName=gpu-07 Arch=x86_64 CoresPerSocket=48",
        "   Gres=gpu:h100:4",
        "   State=IDLE+DRAIN+INVALID_REG ThreadsPerCore=1 TmpDisk=0 Weight=1",
        "   Reason=gres/gpu count reported lower than configured (3 < 4)" + AT,
    ]
    found = _incidents(tmp_path, lines)
    assert ("incident", "scheduler_node_failure", "fix_config") in found
    assert all(sig != "slurm_node_state" for sig, _, _ in found)
