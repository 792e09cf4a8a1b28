"""Malformed checkpoint JSON (manifest, tensor table) makes that checkpoint unreadable with a
reason: never a RecursionError or other traceback."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from trainguard.ckpt import MANIFEST_NAME, CheckpointDir
from trainguard.ckpt import manifest as manifest_mod
from trainguard.ckpt.jsonread import nesting_depth, parse_json
from trainguard.errors import CheckpointError

DEEP = 200_000  # far past the interpreter's recursion limit


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(("text", "depth"), [
    ("{}", 1),
    ("1", 0),
    ('{"a": [1, {"b": 2}]}', 3),
    ('{"a": "[[[{{{"}', 1),
    ('{"a": "quote \\" then [[[", "b": [[]]}', 3),
    ('["\\\\", ["\\\\"]]', 2),
    (_deep(50), 50),
])
def test_nesting_depth_ignores_brackets_in_strings(text: str, depth: int) -> None:
    assert nesting_depth(text) == depth
    json.loads(text)  # each case is valid JSON


def test_parse_json_bounds_depth_and_size() -> None:
    assert parse_json('{"a": [[1]]}', "x.json") == {"a": [[1]]}
    with pytest.raises(CheckpointError, match=r"unparsable x\.json: nested more than 32 levels"):
        parse_json(_deep(DEEP), "x.json")
    with pytest.raises(CheckpointError, match=r"unparsable x\.json: 11 bytes, more than the 10"):
        parse_json(b'"abcdefghi"', "x.json", max_bytes=10)
    with pytest.raises(CheckpointError, match=r"unparsable x\.json: .*utf-8"):
        parse_json(b'"\xff"', "x.json")
    with pytest.raises(CheckpointError, match=r"unparsable x\.json: Expecting"):
        parse_json("{", "x.json")


def _save_two(root: Path) -> CheckpointDir:
    ckpts = CheckpointDir(root, keep_last=5)
    ckpts.save_bytes(10, {"model.bin": b"ten"})
    ckpts.save_bytes(20, {"model.bin": b"twenty"})
    return ckpts


@pytest.mark.parametrize("where", ["top", "meta", "files"])
def test_deeply_nested_manifest_is_an_unreadable_checkpoint(tmp_path: Path, where: str) -> None:
    ckpts = _save_two(tmp_path)
    path = tmp_path / "step-00000020" / MANIFEST_NAME
    data = json.loads(path.read_text())
    data.pop("manifest_sha256")
    text = json.dumps(data)
    nested = _deep(DEEP)
    if where == "top":
        text = nested
    elif where == "meta":
        text = text[:-1] + f', "meta": {{"x": {nested}}}}}'
    else:
        text = text.replace('"files": {', f'"files": {{"deep": {nested}, ', 1)
    path.write_text(text)
    infos = ckpts.list()  # listing falls back to the directory: no traceback either
    assert [i.step for i in infos] == [10, 20]
    reason = ckpts.validate(infos[1])
    assert reason == "unparsable manifest.json: nested more than 32 levels deep"
    info, skipped = ckpts.latest_valid()
    assert info is not None and info.step == 10
    assert [(s.step, s.reason) for s in skipped] == [(20, reason)]


def test_oversized_manifest_is_an_unreadable_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpts = _save_two(tmp_path)
    path = tmp_path / "step-00000020" / MANIFEST_NAME
    monkeypatch.setattr(manifest_mod, "MAX_JSON_BYTES", path.stat().st_size - 1)
    reason = ckpts.validate(ckpts.list()[1])
    assert reason == f"unparsable manifest.json: larger than {path.stat().st_size - 1:,} bytes"


def test_deeply_nested_tensor_table_is_an_unreadable_checkpoint(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from trainguard.ckpt.engine import Checkpointer

    ckpt = Checkpointer(tmp_path, keep_last=5, stripe_bytes=4096)
    ckpt.save(10, {"w": torch.ones(10)}).wait()
    ckpt.save(20, {"w": torch.ones(20)}).wait()
    step_dir = tmp_path / "step-00000020"
    table = _deep(DEEP).encode()
    (step_dir / "rank00000-tensors.json").write_bytes(table)
    manifest = json.loads((step_dir / MANIFEST_NAME).read_text())
    manifest.pop("manifest_sha256")
    manifest["files"]["rank00000-tensors.json"] = {
        "size": len(table), "sha256": hashlib.sha256(table).hexdigest()}
    (step_dir / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match=r"unparsable rank00000-tensors\.json: nested"):
        ckpt.load(step_dir)
    state, info, skipped = ckpt.load_latest()
    assert info is not None and info.step == 10 and torch.equal(state["w"], torch.ones(10))
    assert [s.step for s in skipped] == [20]
