"""A host check in words: each host's figures with floor and verdict, its link rates, the
floors-only note, and a summary line that names the failed probe and floor."""

from __future__ import annotations

from trainguard.check.checker import CheckReport
from trainguard.check.floors import Floors
from trainguard.check.judge import judge, summarize
from trainguard.check.model import Figure, Finding, Level, ProbeResult, Status
from trainguard.check.summary import (
    evidence_lines,
    figure_lines,
    link_line,
    notes,
    summary_line,
)


def gemm(host: str, gflops: float) -> ProbeResult:
    return ProbeResult("cpu_gemm", host, Status.OK, (Figure("gemm_gflops", gflops, "GFLOP/s"),))


def make_report(gflops: dict[str, float], floors: dict[str, float] | None = None,
                links: tuple[tuple[str, str, float | None], ...] = (),
                extra: tuple[Finding, ...] = ()) -> CheckReport:
    floor = Floors.from_mapping(floors or {})
    results = tuple(gemm(h, v) for h, v in gflops.items())
    findings = (*judge(results, floor), *extra)
    verdicts = {h: Level.PASS for h in gflops}
    verdicts.update(summarize(findings))
    return CheckReport(tuple(gflops), results, findings, verdicts, 1, 0.0, 5.0, links,
                       dict(floor.limits))


def test_every_figure_is_shown_with_its_floor_and_verdict() -> None:
    report = make_report({"a": 812.0, "b": 1500.0}, {"gemm_gflops": 1000})
    assert figure_lines(report, "a") == ["gemm_gflops 812 GFLOP/s: FAIL, < floor 1,000"]
    assert figure_lines(report, "b") == ["gemm_gflops 1,500 GFLOP/s: pass (floor 1,000)"]
    unfloored = make_report({"a": 48.2, "b": 50.0})
    assert figure_lines(unfloored, "a") == ["gemm_gflops 48.2 GFLOP/s: pass (no floor)"]


def test_a_comparison_shows_the_ratio_to_the_others_median() -> None:
    hosts = {f"n{i}": 50.0 for i in range(1, 8)}
    hosts["n8"] = 10.0
    report = make_report(hosts, {"gemm_gflops": 5})
    (line,) = figure_lines(report, "n8")
    assert line == "gemm_gflops 10.0 GFLOP/s: slow (0.20x the others' median 50.0; floor 5.00)"
    assert report.flagged() == ("n8",)


def test_link_rates_are_listed_per_peer_in_order() -> None:
    report = make_report({"a": 50.0, "b": 50.0, "c": 50.0},
                         links=(("a", "b", 950.0), ("c", "a", None), ("a", "b", 2100.0)))
    assert link_line(report, "a") == "links: 950 then 2,100 MB/s with b, no data MB/s with c"
    assert link_line(report, "b") == "links: 950 then 2,100 MB/s with a"
    assert link_line(make_report({"a": 1.0}), "a") is None


def test_fewer_than_five_hosts_get_the_floors_only_note() -> None:
    (note,) = notes(make_report({"a": 50.0, "b": 51.0, "c": 49.0}))
    assert "3 host(s) measured gemm_gflops" in note and "floors only" in note
    assert "no floor set for gemm_gflops" in note
    (floored,) = notes(make_report({"a": 50.0, "b": 51.0}, {"gemm_gflops": 20}))
    assert "no floor set" not in floored
    assert notes(make_report({f"n{i}": 50.0 for i in range(5)})) == []


def test_two_linked_hosts_get_the_link_floor_note() -> None:
    report = make_report({f"n{i}": 50.0 for i in range(5)}, links=(("n0", "n1", 900.0),))
    (note,) = notes(report)
    assert "link is compared with the floor only" in note


def test_when_every_host_fails_the_summary_names_the_probe_and_floor() -> None:
    report = make_report({"a": 812.0, "b": 640.0, "c": 700.0, "d": 90.0}, {"gemm_gflops": 1000})
    assert summary_line(report) == ("all 4 host(s) failed: cpu_gemm gemm_gflops at most "
                                    "812 GFLOP/s < floor 1,000")


def test_a_summary_of_mixed_causes_names_whose_they_are() -> None:
    storage = Finding("d", "host", Level.FAIL, "storage", "storage: error: fsync: EIO")
    report = make_report({"a": 500.0, "b": 400.0, "c": 300.0, "d": 2000.0},
                         {"gemm_gflops": 1000}, extra=(storage,))
    line = summary_line(report)
    assert line.startswith("all 4 host(s) failed: cpu_gemm gemm_gflops at most 500 GFLOP/s "
                           "< floor 1,000 (a, b, c); storage: error: fsync: EIO (d)"), line


def test_summary_when_some_or_none_fail() -> None:
    assert summary_line(make_report({"a": 50.0, "b": 50.0})) == "all 2 host(s) passed"
    line = summary_line(make_report({"a": 50.0, "b": 5.0}, {"gemm_gflops": 20}))
    assert line == ("1 of 2 host(s) flagged: b (fail): cpu_gemm gemm_gflops 5.00 GFLOP/s "
                    "< floor 20.0")


def test_evidence_lists_problems_skips_and_confirmed_links() -> None:
    confirmed = Finding("a<->b", "link", Level.PASS, "link",
                        "link a<->b: 900 MB/s in round 1 (slow), re-measured in round 3 ...")
    skipped = Finding("a", "host", Level.SKIPPED, "gpu", "gpu: skipped: no GPU")
    report = make_report({"a": 50.0, "b": 50.0}, extra=(confirmed, skipped))
    assert evidence_lines(report, "a") == [
        "all probes passed", "skipped: gpu (gpu: skipped: no GPU)", confirmed.reason]
