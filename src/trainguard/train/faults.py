"""The SDK side of fault injection: which injected faults are due, and the CUDA error text.

Pure decisions (`is_due`, `sdk_faults`) and the CUDA error text; the `Session` applies them
(the checkpoint damage itself is `trainguard.ckpt.corrupt_checkpoint`).
"""

from __future__ import annotations

from collections.abc import Iterable

from trainguard.faultspec import SDK_KINDS, FaultSpec

__all__ = ["cuda_error_text", "is_due", "sdk_faults"]


def sdk_faults(
    specs: Iterable[FaultSpec], attempt: int, rank: int | None, node: str | None
) -> tuple[FaultSpec, ...]:
    """The specs this process fires itself: SDK kinds that target this attempt, rank and node."""
    return tuple(
        spec for spec in specs if spec.kind in SDK_KINDS and spec.applies_to(attempt, rank, node)
    )


def is_due(spec: FaultSpec, step: int, now: float, launch_time: float) -> bool:
    """Whether `spec` has been reached: at or past its step, and its delay after launch."""
    if spec.step is not None and step < spec.step:
        return False
    return spec.after_s is None or now >= launch_time + spec.after_s


def cuda_error_text(script: str, step: int) -> str:
    """A traceback shaped like the one PyTorch prints for an asynchronous CUDA fault."""
    return (
        "Traceback (most recent call last):\n"
        f'  File "{script}", line 1, in <module>\n'
        "    loss.backward()\n"
        '  File "/usr/local/lib/python3.11/site-packages/torch/_tensor.py", line 626, in backward\n'
        "    torch.autograd.backward(\n"
        '  File "/usr/local/lib/python3.11/site-packages/torch/autograd/__init__.py", line 347, '
        "in backward\n"
        "    _engine_run_backward(\n"
        '  File "/usr/local/lib/python3.11/site-packages/torch/autograd/graph.py", line 823, '
        "in _engine_run_backward\n"
        "    return Variable._execution_engine.run_backward(  # Calls into the C++ engine\n"
        "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, so the "
        "stacktrace below might be incorrect.\n"
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
        f"[trainguard: injected cuda_error at step {step}]\n"
    )
