"""Documented forms of round 14 (issue #30): ptxas (the PTX assembler JIT compilers run) refusing a
feature the GPU's architecture lacks; trainers that catch GPU memory errors and print their own
words (fairseq's "ran out of memory, skipping batch"); the CUDA math libraries' failures in words
(jaxlib's "cuSolver internal error"); a per-step metric that became NaN where the loop does not
call it a loss (a value column, a named value). Round 15: a compiled extension that was never built
(an op torch's JIT build left missing, a package's CUDA module not importable) and NVML's library
not found by the device plugin are the environment's CUDA stack, like a library that cannot load.
Round 16: a CUDA library's ``.so`` not found in any wrapper, and a torch custom op whose library
was never loaded (``'_OpNamespace' object has no attribute``); XLA giving up rematerialization and
a CUDA-check macro's "cudaMalloc(...) failed" under "Could not allocate memory" are GPU memory; a
CUDA call "failed with error" is a CUDA error; the IOMMU refusing a device's DMA (Intel VT-d,
AMD-Vi) is the host's setting blocking GPU peer-to-peer; gRPC's message size limit is a setting.

The lines are written from the tools' and libraries' source strings, not copied from any corpus.
Each must be claimed by the named rule; the look-alikes must not be.
"""

from __future__ import annotations

from rule_forms import form_tests

DOCUMENTED = [
    ("ptxas /tmp/compile-ptx-src-1f2e3d, line 88; error   : Feature '.bf16' requires .target "
     "sm_80 or higher", "cuda_arch_or_driver_mismatch", "cuda_software_bug", "fix_config"),
    ("ptxas fatal   : Ptx assembly aborted due to errors", "cuda_arch_or_driver_mismatch",
     "cuda_software_bug", "fix_config"),
    ("2024-02-01 10:00:01 | WARNING | fairseq.trainer | OOM: Ran out of memory with exception: "
     "CUDA out of memory.", "cuda_oom", "oom_gpu", "fix_config"),
    ("| WARNING: ran out of memory, skipping batch", "cuda_oom", "oom_gpu", "fix_config"),
    ("WARNING: ran out of memory in backward pass, skipping batch", "cuda_oom", "oom_gpu",
     "fix_config"),
    ("RuntimeError: jaxlib/gpu/solver_kernels.cc:52: operation gpusolverDnCreate(&handle) "
     "failed: cuSolver internal error", "cublas_cudnn_error", "cuda_software_bug", "fix_code"),
    ("RuntimeError: cuBLAS execution failed in gemm", "cublas_cudnn_error", "cuda_software_bug",
     "fix_code"),
    ("  12000   nan", "metric_nonfinite", "numerical_nan", "fix_config"),
    ("Epoch 7 | perplexity: nan | tokens/s 41200", "metric_nonfinite", "numerical_nan",
     "fix_config"),
    ("val/dice=nan, val/iou=0.000", "metric_nonfinite", "numerical_nan", "fix_config"),
    ("ImportError: /root/.cache/torch_extensions/py311_cu124/fused_adam/fused_adam.so: cannot "
     "open shared object file: No such file or directory", "cuda_library_load_failed",
     "cuda_software_bug", "fix_config"),
    ("ModuleNotFoundError: No module named 'selective_scan_cuda'", "cuda_library_load_failed",
     "cuda_software_bug", "fix_config"),
    ("ModuleNotFoundError: No module named 'mmcv._ext'", "cuda_library_load_failed",
     "cuda_software_bug", "fix_config"),
    ("E0115 nvidia-device-plugin: Failed to start nvml with error: could not load NVML library",
     "cuda_library_load_failed", "cuda_software_bug", "fix_config"),
    ("OSError: libcublasLt.so.12: cannot open shared object file: No such file or directory",
     "cuda_library_load_failed", "cuda_software_bug", "fix_config"),
    ("AttributeError: '_OpNamespace' 'fbgemm' object has no attribute 'jagged_to_padded_dense'",
     "cuda_library_load_failed", "cuda_software_bug", "fix_config"),
    ("AttributeError: '_OpNamespace' object has no attribute 'bounds_check_indices'",
     "cuda_library_load_failed", "cuda_software_bug", "fix_config"),
    ("W external/xla/xla/service/hlo_rematerialization.cc:3005] Can't reduce memory use below "
     "10.50GiB (11274289152 bytes) by rematerialization; only reduced to 17.20GiB", "cuda_oom",
     "oom_gpu", "fix_config"),
    ("ERROR Uncaught exception: Could not allocate memory: tiny-cuda-nn/gpu_memory.h:112 "
     "cudaMalloc(&rawptr, n_bytes+DEBUG_GUARD_SIZE*2) failed with error out of memory",
     "cuda_oom", "oom_gpu", "fix_config"),
    ("Uncaught exception: src/testbed.cu:88 cudaStreamSynchronize(stream) failed with error "
     "unspecified launch failur", "cuda_error_generic", "cuda_software_bug", "fix_code"),
    ("[ 51.2] DMAR: [DMA Read NO_PASID] Request device [c1:00.0] fault addr 0x3ffff000 [fault "
     "reason 0x06] PTE Read access is not set", "iommu_dma_fault", "nccl_timeout_hang",
     "fix_config"),
    ("kernel: iommu ivhd0: AMD-Vi: Event logged [IO_PAGE_FAULT device=c1:00.0 domain=0x000e "
     "address=0xfee00000 flags=0x0020]", "iommu_dma_fault", "nccl_timeout_hang", "fix_config"),
    ("\tdetails = \"Received message larger than max (268435456 vs. 4194304)\"",
     "grpc_message_too_large", "user_code_error", "fix_config"),
]

NOT_CLAIMED = [
    # Memory in another sense.
    ("we ran out of memory budget in the planning doc", "cuda_oom"),
    # ptxas reporting what it did, not refusing.
    ("ptxas info    : Used 32 registers, 384 bytes cmem[0]", "cuda_arch_or_driver_mismatch"),
    # NaN as a name, not a value.
    ("x = torch.nan_to_num(x, nan=0.0)", "metric_nonfinite"),
    ("Setting detect_anomaly to catch nan gradients", "metric_nonfinite"),
    # A missing pure-Python package is the user's environment, not a CUDA build.
    ("ModuleNotFoundError: No module named 'transformers'", "cuda_library_load_failed"),
    ("ModuleNotFoundError: No module named 'my_context'", "cuda_library_load_failed"),
    # The IOMMU enabled, reported at boot: no fault.
    ("DMAR: IOMMU enabled", "iommu_dma_fault"),
    ("AMD-Vi: Interrupt remapping enabled", "iommu_dma_fault"),
    # A size that fits.
    ("grpc: max message size set to 104857600", "grpc_message_too_large"),
]


test_documented_line_is_claimed, test_look_alike_is_not_claimed = form_tests(DOCUMENTED,
                                                                             NOT_CLAIMED)
