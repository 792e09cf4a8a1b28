"""Documented forms of round 11 (issue #30): the AMD GPU stack's failure messages, mapped the way
their CUDA/NVIDIA equivalents are.

- HIP runtime (hipError_t names and hipGetErrorString strings): a missing code object for the
  GPU's architecture (hipErrorNoBinaryForGpu "Unable to find code object for all current
  devices", hipErrorInvalidDeviceFunction "invalid device function"), an insufficient driver, an
  invalid device are an install/config mismatch; hipErrorIllegalAddress / hipErrorLaunchFailure
  a kernel fault; hipErrorECCNotCorrectable a memory ECC error.
- ROCr (HSA runtime): "Memory access fault by GPU node-N (Agent handle: 0x...) on address 0x....
  Reason: <reason>." is a kernel fault unless the reason is ECC (memory) or hang recovery (GPU);
  HSA_STATUS_ERROR_* queue errors; "HW Exception by GPU node-N ... reason :GPU Hang|ECC".
- amdgpu kernel driver: ring timeouts, SMU not answering, failed resets, uncorrectable RAS errors
  by block (umc: memory ECC; xgmi_wafl: the GPU-to-GPU link; others: the GPU), poison
  consumption, bad-page retirement past its threshold, GPU page faults (as XID 31), and the
  start of a GPU reset (a consequence, non-fatal).
- amd-smi `metric --ecc` uncorrectable counts; RCCL's "HIP failure '...'" and "unhandled hip
  error".

The lines are written from the documented message formats (the sources' printf formats and
string tables), not copied from any corpus. Each must be claimed by the named rule; the
look-alikes must not be.
"""

from __future__ import annotations

from pathlib import Path

from rule_forms import form_tests, scan_lines

DEV = "amdgpu 0000:c1:00.0: amdgpu: "
KERN = "Mar  3 04:12:55 node7 kernel: [ 5123.456789] "
QUEUE = (":0:rocdevice.cpp            :2984: 1208571983214 us: [pid:5512  tid:0x7f2b4dfff640] "
         "Callback: Queue 0x7f2a88600000 aborting with error : ")
NCCL = "node7:5512:5600 [3] NCCL WARN "

ARCH = ("cuda_arch_or_driver_mismatch", "cuda_software_bug", "fix_config")
FAULT = ("cuda_illegal_address", "cuda_software_bug", "fix_code")
ECC = ("cuda_uncorrectable_ecc", "gpu_memory_ecc", "reset_gpu")
AMD_GPU = ("amdgpu_gpu_fault", "gpu_hardware", "reset_gpu")

DOCUMENTED = [
    # HIP runtime: kernels not built for this GPU / driver / device.
    ("RuntimeError: HIP error: invalid device function", *ARCH),
    ('"hipErrorNoBinaryForGpu: Unable to find code object for all current devices!"', *ARCH),
    ("error: 'driver version is insufficient for runtime version'(35) at train.cpp:88", *ARCH),
    ("hipSetDevice(7) failed with hipErrorInvalidDevice", *ARCH),
    ("HSA_STATUS_ERROR_INVALID_ISA: The instruction set architecture is invalid.", *ARCH),
    # Kernel faults.
    ("Memory access fault by GPU node-2 (Agent handle: 0x55d0c0a1b2c0) on address "
     "0x7f3a2c000000. Reason: Page not present or supervisor privilege.", *FAULT),
    ("Memory access fault by GPU node-4 (Agent handle: 0x5612aa0b9e40) on address "
     "0x7ee1c0200000(may not be exact address). Reason: Write access to a read-only page.",
     *FAULT),
    (QUEUE + "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted to access memory "
     "beyond the largest legal address. code: 0x29", *FAULT),
    (QUEUE + "HSA_STATUS_ERROR_EXCEPTION: An HSAIL operation resulted in a hardware exception. "
     "code: 0x1016", *FAULT),
    ("HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION: The agent attempted to execute an illegal shader "
     "instruction.", *FAULT),
    ("hipStreamSynchronize(stream) returned hipErrorIllegalAddress", *FAULT),
    ("hipModuleLaunchKernel returned hipErrorLaunchFailure", *FAULT),
    # GPU memory (ECC, poison, bad pages).
    ("Memory access fault by GPU node-2 (Agent handle: 0x55d0c0a1b2c0) on address "
     "0x7f3a2c000000. Reason: DRAM ECC failure.", *ECC),
    ("HW Exception by GPU node-1 (Agent handle: 0x5633e5d2a8b0) reason :ECC", *ECC),
    ("hipMemcpyDtoH returned hipErrorECCNotCorrectable", *ECC),
    (KERN + DEV + "2 uncorrectable hardware errors detected in umc block", *ECC),
    (KERN + DEV + "{12} socket: 0, die: 1, 1 new uncorrectable hardware errors detected in umc "
     "block", *ECC),
    (KERN + DEV + "poison is consumed by client 12, kick off gpu reset flow", *ECC),
    (KERN + DEV + "RAS records:512 exceed threshold:496, GPU will not be initialized. Replace "
     "this GPU or increase the threshold", "row_remap_failure", "gpu_memory_ecc", "reset_gpu"),
    (KERN + DEV + "Saved bad pages 497 reaches threshold value 496", "row_remap_failure",
     "gpu_memory_ecc", "reset_gpu"),
    ("        TOTAL_UNCORRECTABLE_COUNT: 3", "ecc_uncorrectable_counter", "gpu_memory_ecc",
     "reset_gpu"),
    ('{"gpu": 0, "ecc": {"total_correctable_count": 12, "total_uncorrectable_count": 2, '
     '"total_deferred_count": 0}}', "ecc_uncorrectable_counter", "gpu_memory_ecc", "reset_gpu"),
    # XGMI, the GPU-to-GPU link.
    (KERN + DEV + "4 uncorrectable hardware errors detected in xgmi_wafl block", "nvlink_error",
     "nvlink_interconnect", "reboot_node"),
    # The GPU itself: hangs, firmware, failed resets, RAS of the other blocks.
    ("HW Exception by GPU node-1 (Agent handle: 0x5633e5d2a8b0) reason :GPU Hang", *AMD_GPU),
    (KERN + DEV + "1 uncorrectable hardware errors detected in gfx block", *AMD_GPU),
    (KERN + "[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx_0.0.0 timeout, signaled "
     "seq=40512, emitted seq=40514", *AMD_GPU),
    (KERN + "amdgpu 0000:c1:00.0: [drm] *ERROR* ring sdma0 timeout, signaled seq=881, emitted "
     "seq=883", *AMD_GPU),
    (KERN + DEV + "SMU: I'm not done with your previous command: SMN_C2PMSG_66:0x0000001E "
     "SMN_C2PMSG_82:0x00000000", *AMD_GPU),
    (KERN + DEV + "GPU reset(2) failed", *AMD_GPU),
    ("Memory access fault by GPU node-3 (Agent handle: 0x5612aa0b9e40) on address "
     "0x7ee1c0200000. Reason: Generic hang recovery.", *AMD_GPU),
    (KERN + DEV + "GPU reset begin!", "amdgpu_gpu_reset", "gpu_hardware", "reset_gpu"),
    # The driver's side of a bad address in a kernel (as XID 31).
    (KERN + DEV + "[gfxhub] page fault (src_id:0 ring:24 vmid:3 pasid:32773, for process "
     "python3 pid 5512 thread python3 pid 5512)", "amdgpu_vm_fault", "cuda_software_bug",
     "fix_code"),
    (KERN + DEV + "[mmhub0] no-retry page fault (src_id:0 ring:0 vmid:8 pasid:32770)",
     "amdgpu_vm_fault", "cuda_software_bug", "fix_code"),
    (KERN + DEV + "GCVM_L2_PROTECTION_FAULT_STATUS:0x00301031", "amdgpu_vm_fault",
     "cuda_software_bug", "fix_code"),
    # RCCL and other generic HIP/HSA errors.
    (NCCL + "HIP failure 'out of memory'", "cuda_oom", "oom_gpu", "fix_config"),
    (NCCL + "HIP failure 'invalid resource handle' at /src/rccl/src/misc/utils.cc:120",
     "cuda_error_generic", "cuda_software_bug", "fix_code"),
    ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled "
     "hip error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5",
     "nccl_unhandled_cuda_error", "cuda_software_bug", "fix_code"),
    (QUEUE + "HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate the necessary "
     "resources.", "cuda_error_generic", "cuda_software_bug", "fix_code"),
]

NOT_CLAIMED = [
    # Correctable or zero counts are no failure.
    (KERN + DEV + "3 correctable hardware errors detected in umc block", "cuda_uncorrectable_ecc"),
    (KERN + DEV + "3 correctable hardware errors detected in gfx block", "amdgpu_gpu_fault"),
    (KERN + DEV + "0 uncorrectable hardware errors detected in gfx block", "amdgpu_gpu_fault"),
    ("        TOTAL_UNCORRECTABLE_COUNT: 0", "ecc_uncorrectable_counter"),
    ('{"gpu": 1, "ecc": {"total_uncorrectable_count": "N/A"}}', "ecc_uncorrectable_counter"),
    # The driver recovered the ring itself, or the reset succeeded.
    (KERN + "amdgpu 0000:c1:00.0: [drm] *ERROR* ring gfx_0.0.0 timeout, but soft recovered",
     "amdgpu_gpu_fault"),
    (KERN + DEV + "GPU reset(2) succeeded!", "amdgpu_gpu_fault"),
    (KERN + DEV + "GPU reset(2) succeeded!", "amdgpu_gpu_reset"),
    # A fault status register that reads zero.
    (KERN + DEV + "GCVM_L2_PROTECTION_FAULT_STATUS:0x00000000", "amdgpu_vm_fault"),
    # A page-not-present fault is the program's, not the memory's.
    ("Memory access fault by GPU node-2 (Agent handle: 0x55d0c0a1b2c0) on address "
     "0x7f3a2c000000. Reason: Page not present or supervisor privilege.",
     "cuda_uncorrectable_ecc"),
    # Another hipError name that begins like hipErrorInvalidDevice.
    ("hipFree returned hipErrorInvalidDevicePointer", "cuda_arch_or_driver_mismatch"),
    # An XGMI RAS block that counts only correctable errors.
    (KERN + DEV + "7 correctable hardware errors detected in xgmi_wafl block", "nvlink_error"),
]


test_documented_line_is_claimed, test_look_alike_is_not_claimed = form_tests(DOCUMENTED,
                                                                             NOT_CLAIMED)


def test_ring_timeout_then_reset_is_one_gpu_hardware_incident(tmp_path: Path) -> None:
    _, incidents = scan_lines(tmp_path, [
        KERN + "amdgpu 0000:c1:00.0: [drm] *ERROR* ring gfx_0.0.0 timeout, signaled seq=40512, "
        "emitted seq=40514",
        KERN + "amdgpu 0000:c1:00.0: [drm] *ERROR* Process information: process python3 pid "
        "5512 thread python3 pid 5512",
        KERN + DEV + "GPU reset begin!",
    ])
    assert incidents and incidents[0].category.value == "gpu_hardware"
    assert incidents[0].root_cause.signature == "amdgpu_gpu_fault"


def test_memory_access_fault_with_the_driver_page_fault_is_a_code_fault(tmp_path: Path) -> None:
    _, incidents = scan_lines(tmp_path, [
        KERN + DEV + "[gfxhub] page fault (src_id:0 ring:24 vmid:3 pasid:32773)",
        KERN + DEV + "GCVM_L2_PROTECTION_FAULT_STATUS:0x00301031",
        "Memory access fault by GPU node-2 (Agent handle: 0x55d0c0a1b2c0) on address "
        "0x7f3a2c000000. Reason: Page not present or supervisor privilege.",
        "Aborted (core dumped)",
    ])
    assert incidents and incidents[0].category.value == "cuda_software_bug"
    assert incidents[0].root_cause.signature == "cuda_illegal_address"
