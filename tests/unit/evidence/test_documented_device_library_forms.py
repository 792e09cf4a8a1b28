"""Documented forms of round 12 (issue #30): device memory refused by RAPIDS' memory manager
(RMM's ``rmm::out_of_memory``, whose message reads "std::bad_alloc: out_of_memory: RMM failure
at: ...: Maximum pool size exceeded", or "No room in arena" for its arena resource); the NVLink
fabric state the driver caches falling out of sync (NVRM's ``NV_ERR_FABRIC_STATE_OUT_OF_SYNC``,
0x87, when multicast/NVLS memory is mapped); NVSHMEM's InfiniBand transports skipped because
GPUDirect RDMA is unavailable ("neither nv_peer_mem, or nvidia_peermem detected").

The lines are written from the libraries' source strings and the driver's status table, not
copied from any corpus. Each must be claimed by the named rule; the look-alikes must not be.
"""

from __future__ import annotations

from pathlib import Path

from rule_forms import form_tests, scan_lines

DOCUMENTED = [
    ("distributed.worker - ERROR - std::bad_alloc: out_of_memory: RMM failure at:/opt/conda/"
     "include/rmm/mr/device/pool_memory_resource.hpp:196: Maximum pool size exceeded",
     "cuda_oom", "oom_gpu", "fix_config"),
    ("MemoryError: std::bad_alloc: out_of_memory: CUDA error at: /opt/conda/include/rmm/mr/"
     "device/cuda_memory_resource.hpp:70: cudaErrorMemoryAllocation out of memory",
     "cuda_oom", "oom_gpu", "fix_config"),
    ("terminate called after throwing an instance of 'rmm::out_of_memory'", "cuda_oom",
     "oom_gpu", "fix_config"),
    ("RMM failure at: /usr/include/rmm/mr/device/arena_memory_resource.hpp:171: Maximum pool "
     "size exceeded (failed to allocate 2.000000 GiB): No room in arena.", "cuda_oom", "oom_gpu",
     "fix_config"),
    ("[  812.314159] NVRM: nvCheckOkFailedNoLog: Check failed: NVLink fabric state cached by the "
     "driver is out of sync [NV_ERR_FABRIC_STATE_OUT_OF_SYNC] (0x00000087) returned from status "
     "@ mem_multicast_fabric.c:1210", "nvlink_error", "nvlink_interconnect", "reboot_node"),
    ("kernel: NVRM: GPU 0000:18:00.0: nvlink fabric probe: NV_ERR_NVLINK_FABRIC_FAILURE",
     "nvlink_error", "nvlink_interconnect", "reboot_node"),
    ("/opt/nvshmem/src/modules/transport/ibrc/ibrc.cpp:nvshmemt_init:1790: neither nv_peer_mem, "
     "or nvidia_peermem detected. Skipping transport.", "gpudirect_rdma_missing", "network_ib",
     "fix_config"),
]

NOT_CLAIMED = [
    # The host's allocator, not RMM's device memory.
    ("terminate called after throwing an instance of 'std::bad_alloc'", "cuda_oom"),
    # An RMM setting rejected, not memory refused.
    ("RMM failure at: pool_memory_resource_impl.cpp:40: Error, Initial pool size required to be "
     "a multiple of 256 bytes", "cuda_oom"),
    # The driver naming a fabric state that is fine.
    ("NVLink fabric state: Completed, Status: Success", "nvlink_error"),
    # The module loaded: NVSHMEM says which one it uses.
    ("NVSHMEM: using nvidia_peermem for GPUDirect RDMA", "gpudirect_rdma_missing"),
]


test_documented_line_is_claimed, test_look_alike_is_not_claimed = form_tests(DOCUMENTED,
                                                                             NOT_CLAIMED)


def test_a_dask_worker_traceback_ending_in_rmm_is_device_memory(tmp_path: Path) -> None:
    """The worker logs the error, then the traceback of its plugin; both read as GPU memory."""
    _, incidents = scan_lines(tmp_path, [
        "distributed.utils - ERROR - std::bad_alloc: out_of_memory: RMM failure at:/env/include/"
        "rmm/mr/device/pool_memory_resource.hpp:183: Maximum pool size exceeded",
        "Traceback (most recent call last):",
        '  File "/env/lib/python3.10/site-packages/distributed/worker.py", line 3283, in '
        "plugin_add",
        "    result = plugin.setup(worker=self)",
        "MemoryError: std::bad_alloc: out_of_memory: RMM failure at:/env/include/rmm/mr/device/"
        "pool_memory_resource.hpp:183: Maximum pool size exceeded",
    ])
    assert incidents and incidents[0].category.value == "oom_gpu"
