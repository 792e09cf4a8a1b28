"""Documented forms of rounds 9 and 10 (issue #30): a GPU allocation refused by the stream-ordered
CUDA allocator (`cuMemAllocAsync failed to allocate N bytes`, as XLA and TensorFlow print it) or
by a CUDA library for its workspace (`*_ALLOC_FAILED`, cuDNN/cuSOLVER/cuSPARSE/cuFFT status
codes); an object-store transfer that libcurl aborted (error 28, "Timeout was reached"; the
low-speed abort "Operation too slow. Less than N bytes/sec transferred the last N seconds", from
CURLOPT_LOW_SPEED_LIMIT/TIME), as clients built on libcurl print them; a CUDA library a framework
could not load itself (jaxlib's "Unable to load NCCL library"); a NaN loss printed as a quoted
value of a metrics dict (`'loss': 'nan'`).

The lines are written from the documented message formats, not copied from any corpus. Each must
be claimed by the named rule; the look-alikes must not be.
"""

from __future__ import annotations

from pathlib import Path

from rule_forms import form_tests, scan_lines

GLOG = "E0303 04:12:55.123456  41233 "

DOCUMENTED = [
    ("ERROR: LoadError: cudnnConvolutionBackwardFilter: 2: CUDNN_STATUS_ALLOC_FAILED",
     "cuda_oom", "oom_gpu", "fix_config"),
    (GLOG + "cusolver_context.cc:82] CUSOLVER_STATUS_ALLOC_FAILED in cusolverDnCreate",
     "cuda_oom", "oom_gpu", "fix_config"),
    ("RuntimeError: cuFFT error: CUFFT_ALLOC_FAILED", "cuda_oom", "oom_gpu", "fix_config"),
    (GLOG + "nccl_api.cc:41] NCCL operation ncclCommInitRank failed: Unable to load NCCL "
     "library. Multi-GPU collectives will not work.", "cuda_library_load_failed",
     "cuda_software_bug", "fix_config"),
    ("RuntimeError: Unable to load cuDNN library: check that it is installed",
     "cuda_library_load_failed", "cuda_software_bug", "fix_config"),
    ("2026-03-03 04:12:55,123 - INFO - step 420 {'loss': 'nan', 'lr': 0.0002, 'epoch': 1.3}",
     "nan_loss", "numerical_nan", "fix_config"),
    ('epoch 2 iter 880 "loss_bbox": "NaN", "loss": "nan"', "nan_loss", "numerical_nan",
     "fix_config"),
    (GLOG + "gpu_cudamallocasync_allocator.cc:290] cuMemAllocAsync failed to allocate "
     "4294967296 bytes", "cuda_oom", "oom_gpu", "fix_config"),
    ("cuMemAllocAsync failed to allocate 17,179,869,184 bytes (16.00 GiB)", "cuda_oom",
     "oom_gpu", "fix_config"),
    ("[ERROR] 2026-03-03 04:12:55.123 CurlHttpClient [140234] Curl returned error code 28 - "
     "Timeout was reached", "object_store_error", "storage_io", "check_storage"),
    (GLOG + "http_transport.cc:101] CURL error [28]: Timeout was reached while uploading "
     "gs://bucket/run/step-1000/array.zarr", "object_store_error", "storage_io", "check_storage"),
    ("Operation too slow. Less than 1024 bytes/sec transferred the last 60 seconds",
     "object_store_error", "storage_io", "check_storage"),
    (GLOG + "upload of s3://bucket/ckpt/shard-3 failed: Operation too slow. Less than 1 "
     "bytes/sec transferred the last 30 seconds", "object_store_error", "storage_io",
     "check_storage"),
]

NOT_CLAIMED = [
    # git over HTTPS at start-up: a clone, not the job's storage.
    ("fatal: unable to access 'https://github.com/org/repo.git/': Operation too slow. Less than "
     "1000 bytes/sec transferred the last 30 seconds", "object_store_error"),
    # A timeout that is not libcurl's.
    ("Timeout was reached while waiting for rank 3 at the barrier", "object_store_error"),
    # The allocator refusing for another reason than memory.
    ("cuMemAllocAsync failed: CUDA error: invalid argument", "cuda_oom"),
    ("CUDNN_STATUS_EXECUTION_FAILED in cudnnConvolutionForward", "cuda_oom"),
    # A metric named after the loss whose value is a string that merely starts with nan.
    ("step 5 {'loss': 'nanometers', 'unit': 'x'}", "nan_loss"),
]


test_documented_line_is_claimed, test_look_alike_is_not_claimed = form_tests(DOCUMENTED,
                                                                             NOT_CLAIMED)


def test_allocator_refusal_with_its_detail_line_is_one_gpu_oom(tmp_path: Path) -> None:
    _, incidents = scan_lines(tmp_path, [
        GLOG + "gpu_cudamallocasync_allocator.cc:290] cuMemAllocAsync failed to allocate "
        "8,589,934,592 bytes (8.00 GiB)",
        "Free memory/Total: 1,073,741,824 / 85,899,345,920",
    ])
    assert [i.category.value for i in incidents][:1] == ["oom_gpu"]


def test_stalled_upload_is_storage_not_unknown(tmp_path: Path) -> None:
    _, incidents = scan_lines(tmp_path, [
        GLOG + "curl_transport.cc:512] CURL error [28]: Timeout was reached",
        "Operation too slow. Less than 512 bytes/sec transferred the last 120 seconds",
        "I0303 04:14:01.000000 41233 checkpoint.py:88] waiting at barrier for process 7",
    ])
    assert incidents and incidents[0].category.value == "storage_io"
