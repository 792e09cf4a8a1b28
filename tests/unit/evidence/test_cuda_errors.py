"""The CUDA error catalog (cuda_errors.py): one reading per error, whichever form a line uses."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from rule_forms import first_answer

from trainguard.evidence.cuda_errors import catalog, identify, reading
from trainguard.taxonomy import Action, Category


def test_catalog_rows_are_consistent() -> None:
    rows = catalog()
    assert len(rows) > 120
    names = Counter(n for e in rows for n in {e.runtime_name, e.driver_name} if n)
    codes_by_name = {n: {e.code for e in rows if n in (e.runtime_name, e.driver_name)}
                     for n in names}
    assert all(len(c) == 1 for c in codes_by_name.values())
    texts = Counter(e.message.lower() for e in rows if e.message)
    # 300 (invalid source) prints the same text as 200 (invalid kernel image): one meaning.
    assert {t for t, n in texts.items() if n > 1} == {"device kernel image is invalid"}
    assert reading(next(e for e in rows if e.code == 300)) == \
        reading(next(e for e in rows if e.code == 200))


ROWS = [e for e in catalog() if e.message and e.runtime_name]


@pytest.mark.parametrize("error", ROWS, ids=lambda e: f"{e.code}-{e.runtime_name}")
def test_an_error_reads_the_same_by_name_driver_name_text_and_number(
        tmp_path: Path, error: object) -> None:
    e = error
    assert hasattr(e, "message")
    by_text = first_answer(tmp_path, [f"RuntimeError: CUDA error: {e.message}"])
    forms = [f"terminate called: what(): {e.runtime_name}",
             f"GPUassert: {e.message} kernel.cu 88"]
    if e.driver_name:
        forms.append(f"failed call to cuInit: {e.driver_name}")
    if e.code >= 100:
        forms.append(f"CUDA error {e.code} at kernel.cu:88")
    for form in forms:
        assert first_answer(tmp_path, [form])[:2] == by_text[:2], form
    assert by_text[0] is not Category.UNKNOWN


@pytest.mark.parametrize(("line", "code"), [
    ("CUDA error 217 at ggml-cuda.cu:6292: peer access is not supported between these two "
     "devices", 217),
    ("F0319 16:42:04.865949 3385 roi_pooling_layer.cu:91] Check failed: error == cudaSuccess "
     "(8 vs. 0)  invalid device function", 98),
    ("Check failed: e == cudaSuccess (803 vs. 0)", 803),
    ("THCudaCheck FAIL file=/pytorch/aten/src/THC/THCGeneral.cpp line=74 error=46 : all "
     "CUDA-capable devices are busy or unavailable", 46),
    ("CUDA error at main.cu:57 code=701(cudaErrorLaunchOutOfResources) \"k<<<g, b>>>()\"", 701),
    ("[TensorRT] ERROR: CUDA failure 804", 804),
    ("CUDA_ERROR_CONTAINED: Invalid access of peer GPU memory over nvlink or a hardware error",
     226),
    ("RuntimeError: CUDA error: unspecified launch failure in prior launch", 53),
])
def test_identify_reads_the_forms_libraries_print(line: str, code: int) -> None:
    error = identify(line)
    assert error is not None and error.code == code


@pytest.mark.parametrize("line", [
    "ValueError: invalid argument",  # a short text on a line that names no CUDA
    "error: file not found: config.yaml",
    "unknown error",
    "cuda runtime error (8) : ",  # pre-10.1 numbering: 8 is ambiguous, not read by number
    "CUDA error 4",
    "step 217: loss 2.31 code=217",
])
def test_identify_leaves_what_it_cannot_be_sure_of(line: str) -> None:
    assert identify(line) is None


@pytest.mark.parametrize(("line", "category", "action"), [
    ("GPUassert: all CUDA-capable devices are busy or unavailable main.cu 20",
     Category.GPU_HARDWARE, Action.REBOOT_NODE),
    ("[TensorRT-LLM][ERROR] CUDA runtime error in error: peer access is not supported between "
     "these two devices", Category.CUDA_SOFTWARE_BUG, Action.FIX_CONFIG),
    ("cudaErrorInvalidDeviceFunction", Category.CUDA_SOFTWARE_BUG, Action.FIX_CONFIG),
    ("RuntimeError: CUDA error: too many resources requested for launch",
     Category.CUDA_SOFTWARE_BUG, Action.FIX_CODE),
])
def test_a_catalog_error_is_read_where_no_rule_named_it(tmp_path: Path, line: str,
                                                        category: Category,
                                                        action: Action) -> None:
    got = first_answer(tmp_path, [line])
    assert got == (category, action, "cuda_error_code")


def test_an_unknown_cuda_error_still_falls_back_to_the_generic_rule(tmp_path: Path) -> None:
    assert first_answer(tmp_path, ["RuntimeError: CUDA error: unrecognized error code"])[2] == \
        "cuda_error_generic"
