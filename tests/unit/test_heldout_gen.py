"""Held-out cluster generator (benchmarks/heldout/gen.py): determinism, format, label sanity."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from script_module import load_script

SMALL: dict[str, Any] = {"nodes": 6, "gpus": 2, "days": 0.5, "interval_s": 120, "workers": 1,
                         "failure_rate": 80.0}
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (-?[0-9.]+) ([0-9]{10})$")


def _gen() -> ModuleType:
    return load_script("benchmarks/heldout/gen.py", "heldout_gen")


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    return _gen()


@pytest.fixture(scope="module")
def datasets(gen: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for style in ("a", "b", "c"):
        d = tmp_path_factory.mktemp(f"heldout_{style}")
        gen.generate(d, seed=3, style=style, **SMALL)
        out[style] = d
    return out


def _digest(d: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(d.rglob("*")):
        if p.is_file() and p.name != "summary.json":
            h.update(p.relative_to(d).as_posix().encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def _parse(path: Path) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """Strict-ish OpenMetrics check; returns family -> series -> [(ts, value)]."""
    text = path.read_text()
    assert text.endswith("# EOF\n")
    t0 = int(path.name.split(".")[0])
    fams: dict[str, dict[str, list[tuple[int, float]]]] = {}
    cur, ctype = "", ""
    done_series: set[str] = set()
    last_series = ""
    for line in text.splitlines()[:-1]:
        if line.startswith(("# TYPE ", "# HELP ")):
            # a family's metadata, TYPE and HELP in either order, before its samples
            name = line.split(" ")[2]
            if name != cur:
                assert name not in fams, f"family {name} interleaved"
                cur, ctype = name, ""
                fams[name] = {}
            if line.startswith("# TYPE "):
                ctype = line.split(" ")[3]
            continue
        m = SAMPLE.match(line)
        assert m, line
        name, labels, value, ts = m.group(1), m.group(2) or "", m.group(3), int(m.group(4))
        assert name == (cur + "_total" if ctype == "counter" else cur), line
        key = name + labels
        if key != last_series:
            assert key not in done_series, f"series {key} not contiguous"
            if last_series:
                done_series.add(last_series)
            last_series = key
        samples = fams[cur].setdefault(key, [])
        assert not samples or samples[-1][0] < ts, "samples out of time order"
        assert t0 <= ts < t0 + 7200
        samples.append((ts, float(value)))
    return fams


def test_deterministic(gen: ModuleType, datasets: dict[str, Path], tmp_path: Path) -> None:
    again = tmp_path / "again"
    gen.generate(again, seed=3, style="a", **SMALL)
    assert _digest(again) == _digest(datasets["a"])
    other = tmp_path / "other"
    gen.generate(other, seed=4, style="a", **SMALL)
    assert _digest(other) != _digest(datasets["a"])


def test_openmetrics_format_and_styles(datasets: dict[str, Path]) -> None:
    names: dict[str, set[str]] = {}
    for style, d in datasets.items():
        files = sorted((d / "metrics").glob("*.om"))
        assert len(files) == 6  # 12 h in 2 h windows
        assert all(int(f.name[:-3]) % 7200 == 0 for f in files)
        fams = _parse(files[2])
        names[style] = set(fams)
        assert "DCGM_FI_DEV_XID_ERRORS" in fams
        series = " ".join(fams["DCGM_FI_DEV_GPU_TEMP"])
        if style == "b":
            assert "Hostname" not in series and 'instance="10.' in series
            assert 'gpu="' not in series
        else:
            assert "Hostname=" in series
    assert len(names["c"]) > len(names["a"]) + 30
    assert any(n.startswith("acme_") for n in names["c"])
    assert "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL" in names["a"] - names["c"]


def test_labels_consistent(datasets: dict[str, Path]) -> None:
    d = datasets["a"]
    labels = [json.loads(x) for x in (d / "labels.jsonl").read_text().splitlines()]
    failures = [x for x in labels if x["type"] == "failure"]
    assert failures, "failure_rate=80 should give failures"
    t_min = min(int(f.name[:-3]) for f in (d / "metrics").glob("*.om"))
    for f in failures:
        assert f["failure_type"] == f"xid{f['xid']}"
        assert 0 <= f["gpu"] < SMALL["gpus"]
        assert t_min <= f["time"] < t_min + SMALL["days"] * 86400
        log = (d / "kernel" / f"{f['node']}.log").read_text()
        assert re.search(rf"{f['node']} kernel: NVRM: Xid \(PCI:[0-9a-f:]+\): {f['xid']}, ", log)
        # the XID gauge of that GPU shows the XID within a few scrapes after the event
        win = int(f["time"]) // 7200 * 7200
        shown = False
        for w in (win, win + 7200):
            p = d / "metrics" / f"{w}.om"
            if not p.exists():
                continue
            for key, samples in _parse(p)["DCGM_FI_DEV_XID_ERRORS"].items():
                if f["uuid"] in key:
                    shown |= any(f["time"] < ts < f["time"] + 600 and v == f["xid"]
                                 for ts, v in samples)
        if f["time"] + 2 * SMALL["interval_s"] < t_min + SMALL["days"] * 86400:
            assert shown, f
    for m in (x for x in labels if x["type"] == "maintenance"):
        assert m["start"] < m["end"]
    for a in (x for x in labels if x["type"] == "app_xid"):
        assert a["xid"] in (13, 31, 43)
        assert f": {a['xid']}, pid=" in (d / "kernel" / f"{a['node']}.log").read_text()


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_promtool_accepts(datasets: dict[str, Path], tmp_path: Path) -> None:
    for style in ("b", "c"):
        f = sorted((datasets[style] / "metrics").glob("*.om"))[1]
        r = subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(f),
                            str(tmp_path / style)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]


def test_style_d_shapes_and_look_alikes(gen: ModuleType, tmp_path: Path) -> None:
    """Style d: intermittent/slow precursors (remap ramps hours ahead) and benign storms."""
    d = tmp_path / "d"
    gen.generate(d, seed=5, style="d", **{**SMALL, "days": 1.0})
    labels = [json.loads(x) for x in (d / "labels.jsonl").read_text().splitlines()]
    failures = [x for x in labels if x["type"] == "failure"]
    assert failures
    known = {"clock_jitter", "replay_bursts", "proc_stalls", "remap_ramp"}
    assert all(set(f["precursors"]) <= known for f in failures)
    for f in failures:
        if "remap_ramp" in f["precursors"]:
            assert f["lead_s"] >= 3 * 3600
        elif f["precursors"]:
            assert 0 < f["lead_s"] <= 3 * 3600
    storms = [x for x in labels if x["type"] == "app_xid" and x.get("storm")]
    assert len(storms) >= 3, "an application-XID storm repeats its XID"
    fams = _parse(sorted((d / "metrics").glob("*.om"))[2])
    assert "DCGM_FI_DEV_FAN_SPEED" in fams and 'device="nvidia' in " ".join(
        fams["DCGM_FI_DEV_GPU_TEMP"])
    again = tmp_path / "again"
    gen.generate(again, seed=5, style="d", **{**SMALL, "days": 1.0})
    assert _digest(again) == _digest(d)
