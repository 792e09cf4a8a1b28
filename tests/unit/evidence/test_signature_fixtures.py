"""Architecture test: every signature has at least one fixture line in a realistic format.

``tests/data/fixtures/signatures/<id>.log`` holds a few lines as the real software prints them
(syslog/dmesg prefixes for kernel lines, ``[rankN]:`` and glog prefixes for PyTorch, NCCL's
``host:pid:tid [dev]``...). Scanning a fixture must attribute its first matching line to that
signature, and the first incident must carry the signature's category.
"""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path

import pytest

from trainguard.evidence import ScanOptions, correlate, load_rules, scan_paths
from trainguard.taxonomy import Category, Severity

FIXTURES = Path(__file__).resolve().parents[2] / "data" / "fixtures" / "signatures"

# Signatures produced by code (xid.py / classify.py / cuda_errors.py) rather than by a [[rule]]
# in the TOML.
CODE_SIGNATURES: dict[str, Category] = {
    "xid": Category.GPU_HARDWARE,  # the fixture is XID 79
    "xid_fallen_off_bus": Category.GPU_HARDWARE,
    "nvswitch_sxid": Category.NVLINK_INTERCONNECT,
    "loss_scale_run": Category.NUMERICAL_NAN,  # context.py: a run of overflows
    "failure_words": Category.UNKNOWN,  # suspicion.py: no rule, failure words
    "cuda_error_code": Category.CUDA_SOFTWARE_BUG,  # cuda_errors.py: the catalog's rule
}
# Signatures a run of lines produces: the fixture's first line is a different (benign) event.
RUN_SIGNATURES = frozenset({"loss_scale_run"})
SUSPICIOUS = ScanOptions(suspicious_lines=True)


def _toml_rules() -> list[dict[str, object]]:
    text = resources.files("trainguard.evidence").joinpath("data/signatures.toml").read_text()
    rules: list[dict[str, object]] = tomllib.loads(text)["rule"]
    return rules


TOML_RULES = {str(r["id"]): r for r in _toml_rules()}
ALL_IDS = sorted([*TOML_RULES, *CODE_SIGNATURES])


# Rules of category `unknown` whose fixture names a signal by its exit status: the event reads
# the signal (signals.py), the fixture's 137 is a SIGKILL.
READ_BY_SIGNAL = {"exit_status": Category.OOM_HOST}


def _expected(sig: str) -> tuple[Category, Severity]:
    if sig == "failure_words":
        return Category.UNKNOWN, Severity.INFO
    if sig in READ_BY_SIGNAL:
        return READ_BY_SIGNAL[sig], Severity(TOML_RULES[sig]["severity"])
    if sig in CODE_SIGNATURES:
        return CODE_SIGNATURES[sig], Severity.FATAL
    rule = TOML_RULES[sig]
    return Category(rule["category"]), Severity(rule.get("severity", "fatal"))


def test_every_signature_has_a_fixture() -> None:
    missing = [sig for sig in ALL_IDS if not (FIXTURES / f"{sig}.log").is_file()]
    assert missing == []


def test_every_fixture_names_a_known_signature() -> None:
    orphans = sorted(p.stem for p in FIXTURES.glob("*.log") if p.stem not in ALL_IDS)
    assert orphans == []


def test_toml_and_code_signature_ids_do_not_collide() -> None:
    assert not set(TOML_RULES) & set(CODE_SIGNATURES)


@pytest.mark.parametrize("sig", ALL_IDS)
def test_fixture_is_classified_as_its_signature(sig: str) -> None:
    path = FIXTURES / f"{sig}.log"
    lines = path.read_text(encoding="utf-8").splitlines()
    assert 1 <= len(lines) <= 15, "keep fixtures small"
    rules = load_rules()

    events, stats = scan_paths([str(path)], rules,
                               SUSPICIOUS if sig == "failure_words" else ScanOptions())

    assert stats.warnings == []
    assert events, f"{path.name}: no event"
    first = min((e for e in events if sig not in RUN_SIGNATURES or e.signature == sig),
                key=lambda e: e.evidence[0].line_no)
    category, severity = _expected(sig)
    assert first.signature == sig
    assert first.category is category
    assert first.severity is severity
    assert first.evidence[0].path == str(path)

    incidents = correlate(events, rules, include_info=True, learned=False)
    assert incidents[0].category is category
    if sig == "failure_words":
        # No rule explains it: an unknown incident that shows its lines, with a low confidence.
        unknown = correlate(events, rules, learned=False)
        assert [i.category for i in unknown] == [Category.UNKNOWN]
        assert unknown[0].suspicious_lines and unknown[0].root_cause.confidence < 0.5
    elif severity is Severity.INFO:
        # Benign look-alikes must not surface as incidents by default.
        assert correlate(events, rules) == []


@pytest.mark.parametrize(
    ("sig", "attr", "expected"),
    [
        ("xid", "xid", 79),
        ("xid", "gpu_pci", "0000:3b:00.0"),
        ("xid", "host", "node7"),
        ("xid_fallen_off_bus", "gpu_pci", "0000:b3:00.0"),
        ("nvswitch_sxid", "gpu_pci", "0000:04:00.0"),
        ("nccl_ib_completion_error", "host", "node7"),
        ("nccl_ib_completion_error", "gpu_index", 1),
        ("nccl_watchdog_timeout", "rank", 3),
        ("cuda_oom", "rank", 0),
        ("cuda_oom", "gpu_index", 0),
        ("slurm_node_failure", "host", "node7"),
        ("slurm_task_exit", "host", "node7"),
        ("slurm_task_exit", "rank", 3),
        ("elastic_child_failed", "host", "node7"),
        ("elastic_child_failed", "rank", 3),
        # nvidia-smi writes "for GPU0000:3B:00.0: Unknown Error"; the colon after the bus id
        # belongs to the sentence, not to the address.
        ("nvml_gpu_lost", "gpu_pci", "0000:3b:00.0"),
    ],
)
def test_fixture_first_event_carries_location(sig: str, attr: str, expected: object) -> None:
    events, _ = scan_paths([str(FIXTURES / f"{sig}.log")], load_rules())
    first = min(events, key=lambda e: e.evidence[0].line_no)
    assert getattr(first, attr) == expected


@pytest.mark.parametrize(
    ("sig", "field", "expected"),
    [
        ("nccl_watchdog_timeout", "op", "ALLREDUCE"),
        ("nccl_watchdog_timeout", "seq", "1580"),
        ("nccl_watchdog_timeout", "timeout_ms", "600000"),
        ("nccl_watchdog_timeout", "ran_ms", "600060"),
        ("nccl_ib_completion_error", "status", "12"),
        ("elastic_child_failed", "exit_code", "3"),
        ("elastic_child_failed", "local_rank", "3"),
        ("slurm_task_exit", "exit_code", "3"),
        ("nfs_not_responding", "server", "fs01.cluster.local"),
        ("python_exception", "exc_type", "KeyError"),
    ],
)
def test_fixture_first_event_extracts_fields(sig: str, field: str, expected: str) -> None:
    events, _ = scan_paths([str(FIXTURES / f"{sig}.log")], load_rules())
    first = min(events, key=lambda e: e.evidence[0].line_no)
    assert first.field_value(field) == expected
