"""CUDA runtime and driver API errors: the catalog, what each means, and reading one from a line.

Every library that calls CUDA reports a failed call in its own words around the same
vocabulary: the error's runtime name (``cudaErrorPeerAccessUnsupported``), its driver name
(``CUDA_ERROR_PEER_ACCESS_UNSUPPORTED``), the text ``cudaGetErrorString`` returns ("peer access is
not supported between these two devices") or its number (``CUDA error 217 at ggml-cuda.cu:6292``,
``code=217(...)``, ``THCudaCheck FAIL ... error=46``, ``Check failed: ... (803 vs. 0)``). The
catalog (``data/cuda_errors.csv``, see ``data/CUDA_ERRORS_SOURCE.md``) lists every error of CUDA
12.x with a *kind*, and each kind one failure category and action, so an error reads the same
whichever of its forms a line uses and whatever wraps it (a Python traceback, a glog ``Check
failed``, a C++ macro, a Rust or Go binding).

A number is read only where it cannot be mistaken: before CUDA 10.1 the runtime numbered its
errors differently (4 was a launch failure, 8 an invalid device function); three-digit codes and
2, 35 and 46 mean the same in every release. A short, common text ("invalid argument", "unknown
error") counts only on a line that names CUDA; a long one ("too many resources requested for
launch") is CUDA's own wherever it appears.

    >>> identify("CUDA error 217 at ggml-cuda.cu:6292: peer access is not supported").code
    217
    >>> reading(identify("GPUassert: all CUDA-capable devices are busy or unavailable")).category
    <Category.GPU_HARDWARE: 'gpu_hardware'>
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from trainguard.errors import ConfigError
from trainguard.evidence.re2util import Pattern, compile_re2
from trainguard.taxonomy import Action, Category

RULE_ID = "cuda_error_code"
"""The signature of an event read by this catalog (placed just before ``cuda_error_generic``)."""
GENERIC_RULE_ID = "cuda_error_generic"


@dataclass(frozen=True, slots=True)
class Reading:
    """What one kind of CUDA error means for an operator."""

    category: Category
    action: Action
    confidence: float


_KINDS: dict[str, Reading] = {
    # The same readings as the signature rules that read these errors by other words.
    "out_of_memory": Reading(Category.OOM_GPU, Action.FIX_CONFIG, 0.85),
    "ecc": Reading(Category.GPU_MEMORY_ECC, Action.RESET_GPU, 0.85),
    "nvlink": Reading(Category.NVLINK_INTERCONNECT, Action.REBOOT_NODE, 0.8),
    "fabric_not_ready": Reading(Category.NVLINK_INTERCONNECT, Action.FIX_CONFIG, 0.8),
    "no_device": Reading(Category.GPU_HARDWARE, Action.REBOOT_NODE, 0.6),
    "build_mismatch": Reading(Category.CUDA_SOFTWARE_BUG, Action.FIX_CONFIG, 0.8),
    # A device set up so that the call cannot work: peer access between GPUs that have none, an
    # ordinal that is not there, a compute mode or MPS daemon that refuses, a licence missing.
    "device_setup": Reading(Category.CUDA_SOFTWARE_BUG, Action.FIX_CONFIG, 0.7),
    "kernel_fault": Reading(Category.CUDA_SOFTWARE_BUG, Action.FIX_CODE, 0.7),
    "device_assert": Reading(Category.USER_CODE_ERROR, Action.FIX_CONFIG, 0.7),
    "launch_config": Reading(Category.CUDA_SOFTWARE_BUG, Action.FIX_CODE, 0.6),
    "api_error": Reading(Category.CUDA_SOFTWARE_BUG, Action.FIX_CODE, 0.5),
}
BASE_READING = _KINDS["api_error"]
"""The catalog rule's own category and action (an error it cannot identify: none reach it)."""
_STABLE_SMALL_CODES = frozenset({2, 35, 46})
"""Codes under 100 that kept their number across CUDA 10.1's renumbering."""
_SHORT_TEXT = 30
"""A text shorter than this counts only on a line that names CUDA."""
_CUDA_CONTEXT = r"(?i:cuda|cudnn|cublas|THCudaCheck|GPUassert)"


@dataclass(frozen=True, slots=True)
class CudaError:
    """One catalog row."""

    code: int
    runtime_name: str
    driver_name: str
    message: str
    kind: str

    @property
    def name(self) -> str:
        return self.runtime_name or self.driver_name


def reading(error: CudaError) -> Reading:
    """The category, action and confidence of ``error``'s kind."""
    return _KINDS[error.kind]


@cache
def catalog() -> tuple[CudaError, ...]:
    """The shipped catalog (``data/cuda_errors.csv``)."""
    text = resources.files("trainguard.evidence").joinpath("data/cuda_errors.csv").read_text()
    rows = []
    for i, raw in enumerate(csv.DictReader(text.splitlines()), start=2):
        kind = raw.get("kind") or ""
        code = raw.get("code") or ""
        if kind not in _KINDS or not code.isdigit():
            raise ConfigError(f"cuda_errors.csv line {i}: bad code {code!r} or kind {kind!r}")
        rows.append(CudaError(int(code), raw["runtime_name"], raw["driver_name"],
                              raw["message"], kind))
    return tuple(rows)


def _alternation(items: list[str]) -> str:
    # Longest first: RE2 takes the first alternative that matches at a position, so "unspecified
    # launch failure in prior launch" wins over "unspecified launch failure".
    return "|".join(re.escape(s) for s in sorted(set(items), key=lambda s: (-len(s), s)))


@dataclass(frozen=True, slots=True)
class _Forms:
    """The catalog's forms as RE2 sources, each with one group holding the key."""

    names: str
    long_texts: str
    short_texts: str
    numbers: str

    @property
    def union(self) -> str:
        return "|".join((self.names, self.long_texts, self.short_texts, self.numbers))


@cache
def _forms() -> _Forms:
    rows = catalog()
    names = _alternation([n for e in rows for n in (e.runtime_name, e.driver_name) if n])
    texts = [e.message for e in rows if e.message]
    codes = "|".join(str(c) for c in sorted({e.code for e in rows})
                     if c >= 100 or c in _STABLE_SMALL_CODES)
    number_forms = (
        r"(?i:cuda(?:[ _](?:runtime|driver))?[ _](?:error|failure))\s*[:=#(]?\s*",  # CUDA error 217
        r"THCudaCheck FAIL [^\n]*?error=",
        r"Check failed: [^\n]*?cudaSuccess \(",  # glog: (803 vs. 0)
    )
    return _Forms(
        names=rf"\b({names})\b",
        long_texts=rf"(?i:({_alternation([t for t in texts if len(t) >= _SHORT_TEXT])}))",
        short_texts=(rf"{_CUDA_CONTEXT}[^\n]*?(?i:\b("
                     rf"{_alternation([t for t in texts if len(t) < _SHORT_TEXT])}))\b"),
        # checkCudaErrors (the CUDA samples' helper): "code=217(cudaErrorPeerAccessUnsupported)"
        numbers=rf"(?:{'|'.join(number_forms)})({codes})\b|\bcode=({codes})\(",
    )


@cache
def _index() -> tuple[dict[str, CudaError], dict[str, CudaError], dict[int, CudaError]]:
    by_name: dict[str, CudaError] = {}
    by_text: dict[str, CudaError] = {}
    by_code: dict[int, CudaError] = {}
    for e in catalog():
        for n in (e.runtime_name, e.driver_name):
            if n:
                by_name.setdefault(n, e)
        if e.message:
            by_text.setdefault(e.message.lower(), e)
        by_code.setdefault(e.code, e)
    return by_name, by_text, by_code


@cache
def _compiled() -> tuple[Pattern, Pattern, Pattern, Pattern]:
    f = _forms()
    return (compile_re2(f.names), compile_re2(f.long_texts), compile_re2(f.short_texts),
            compile_re2(f.numbers))


def identify(text: str) -> CudaError | None:
    """The CUDA error ``text`` reports, by name, then text, then number; ``None`` if none."""
    by_name, by_text, by_code = _index()
    names, long_texts, short_texts, numbers = _compiled()
    if (m := names.search(text)) is not None:
        return by_name[m.group(1)]
    for rx in (long_texts, short_texts):
        if (m := rx.search(text)) is not None:
            return by_text[m.group(1).lower()]
    if (m := numbers.search(text)) is not None:
        return by_code[int(m.group(1) or m.group(2))]
    return None


def rule_keywords() -> tuple[str, ...]:
    """The catalog rule's prefilter keywords (``rules.with_cuda_catalog`` builds the rule)."""
    return ("cudaError[A-Z]", "CUDA_ERROR_",
            r"cuda(?:[ _](?:runtime|driver))?[ _](?:error|failure)", r"\bcode=\d{3}\(",
            "THCudaCheck", "cudaSuccess", "GPUassert", r"\bcuda[A-Z]\w*\(", _forms().long_texts)


def rule_pattern() -> str:
    """The catalog rule's pattern: the lines :func:`identify` reads."""
    return _forms().union


__all__ = ["BASE_READING", "GENERIC_RULE_ID", "RULE_ID", "CudaError", "Reading", "catalog",
           "identify", "reading", "rule_keywords", "rule_pattern"]
