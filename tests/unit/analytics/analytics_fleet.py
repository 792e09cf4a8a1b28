"""A small fleet history written through the real Store API (fixtures in conftest.py).

Session A (supervised, 4 nodes): crash on n3 -> exclude n3 and retry -> hang -> retry -> success,
with startup phases, checkpoints and ``failed_at``.
Session B (supervised, 2 nodes): NaN loss -> retry -> crash -> gave up; no checkpoints.
Session C (imported from Slurm): two manual submissions, the first failed (NODE_FAIL), no phases.
Session D: still running.
"""

from __future__ import annotations

from typing import Any

from trainguard.store import Store

T0 = 1_000_000.0
NOW = T0 + 50_000.0
PHASES_A = [
    {"launch": 5.0, "imports": 10.0, "dist_init": 15.0, "first_step": 20.0},
    {"launch": 5.0, "imports": 10.0, "dist_init": 15.0, "ckpt_load": 30.0, "first_step": 20.0},
    {"launch": 5.0, "imports": 10.0, "dist_init": 15.0, "ckpt_load": 25.0, "first_step": 20.0},
]


def _failure(kind: str, category: str, culprits: list[str], node_fault: bool = False,
             **extra: Any) -> dict[str, Any]:
    return {"failure": {"kind": kind, "category": category, "summary": f"{kind} on {culprits}",
                        "culprit_nodes": culprits, "culprit_rank": 0, "node_fault": node_fault,
                        "step": 100, "evidence": []},
            "decision": {"verdict": "retry"}, "last_step": 100, "last_loss": 2.0,
            "faults": [], "skipped_checkpoints": [], **extra}


def populate(store: Store) -> dict[str, int]:
    ids: dict[str, int] = {}
    # -- session A ---------------------------------------------------------------------------
    a = ids["A"] = store.create_session("llama", backend="local", started=T0)
    a0 = ids["A0"] = store.create_attempt(a, index=0, nodes=["n1", "n2", "n3", "n4"],
                                          started=T0 + 60)
    store.add_checkpoint(session_id=a, attempt_id=a0, step=100, path="c100", created=T0 + 1110,
                         size_bytes=10_000_000_000, save_s=10.0)
    store.add_checkpoint(session_id=a, attempt_id=a0, step=200, path="c200", created=T0 + 2110,
                         size_bytes=12_000_000_000, save_s=12.0, blocking_s=4.0)
    store.finish_attempt(a0, ended=T0 + 2630, status="failed", failure_category="gpu_hardware",
                         decision="exclude_and_retry", excluded_nodes=["n3"],
                         startup_phases=PHASES_A[0],
                         detail=_failure("crash", "gpu_hardware", ["n3"], True,
                                         failed_at=T0 + 2600, detection_s=15.0))
    store.add_exclusion("n3", reason="XID 79", created=T0 + 2630, session_id=a, attempt_id=a0)
    a1 = ids["A1"] = store.create_attempt(a, index=1, nodes=["n1", "n2", "n4", "n5"],
                                          started=T0 + 2650, resumed_from_step=200)
    store.add_checkpoint(session_id=a, attempt_id=a1, step=300, path="c300", created=T0 + 3500,
                         size_bytes=12_000_000_000, save_s=5.0, blocking_s=5.0)
    store.finish_attempt(a1, ended=T0 + 4020, status="failed",
                         failure_category="nccl_timeout_hang", decision="retry",
                         startup_phases=PHASES_A[1],
                         detail=_failure("hang", "nccl_timeout_hang", ["n5"],
                                         failed_at=T0 + 4000, hang_for_s=300.0))
    a2 = ids["A2"] = store.create_attempt(a, index=2, nodes=["n1", "n2", "n4", "n5"],
                                          started=T0 + 4050, resumed_from_step=300)
    store.add_checkpoint(session_id=a, attempt_id=a2, step=400, path="c400", created=T0 + 5000,
                         size_bytes=8_000_000_000, save_s=20.0, blocking_s=6.0)
    store.add_checkpoint(session_id=a, attempt_id=a2, step=500, path="c500", created=T0 + 6000,
                         size_bytes=8_000_000_000, save_s=20.0, blocking_s=6.0)
    store.add_checkpoint(session_id=a, attempt_id=a2, step=450, path="bad", created=T0 + 5500,
                         size_bytes=1, save_s=1.0, ok=False)
    store.finish_attempt(a2, ended=T0 + 6010, status="succeeded", startup_phases=PHASES_A[2],
                         detail={"failure": None, "decision": None, "last_step": 500})
    store.finish_session(a, status="succeeded", ended=T0 + 6010)
    # -- session B ---------------------------------------------------------------------------
    b = ids["B"] = store.create_session("gpt", backend="local", started=T0 + 10_000)
    b0 = ids["B0"] = store.create_attempt(b, index=0, nodes=["m1", "m2"], started=T0 + 10_000)
    store.finish_attempt(b0, ended=T0 + 11_000, status="failed", failure_category="numerical_nan",
                         decision="retry", startup_phases={"launch": 5.0, "first_step": 10.0},
                         detail=_failure("nonfinite", "numerical_nan", []))
    b1 = ids["B1"] = store.create_attempt(b, index=1, nodes=["m1", "m2"], started=T0 + 11_100)
    store.finish_attempt(b1, ended=T0 + 11_200, status="failed",
                         failure_category="gpu_memory_ecc", decision="stop",
                         startup_phases={"launch": 5.0},
                         detail=_failure("crash", "gpu_memory_ecc", ["m2"], True))
    store.add_exclusion("m2", reason="ECC", created=T0 + 11_200, session_id=b, attempt_id=b1)
    store.finish_session(b, status="failed", ended=T0 + 11_200)
    # -- session C: Slurm history, resubmitted by hand ---------------------------------------
    c = ids["C"] = store.create_session("slurm-77", backend="slurm", started=T0 + 19_000,
                                        external_id="77")
    c0 = ids["C0"] = store.create_attempt(c, index=0, nodes=["s1", "s2", "s3"],
                                          started=T0 + 20_000, automatic=False)
    store.finish_attempt(c0, ended=T0 + 23_600, status="failed", failure_category="unknown",
                         exit_codes={"job": 1}, detail={"slurm_state": "NODE_FAIL"})
    c1 = ids["C1"] = store.create_attempt(c, index=1, nodes=["s1", "s2", "s3"],
                                          started=T0 + 24_200, automatic=False)
    store.finish_attempt(c1, ended=T0 + 30_000, status="succeeded", exit_codes={"job": 0},
                         detail={"slurm_state": "COMPLETED"})
    store.finish_session(c, status="succeeded", ended=T0 + 30_000)
    # -- session D: running ------------------------------------------------------------------
    d = ids["D"] = store.create_session("running", backend="local", started=T0 + 40_000)
    ids["D0"] = store.create_attempt(d, index=0, nodes=["n1"], started=T0 + 40_010)
    # -- fleet: operator exclusions and detector alerts ---------------------------------------
    store.add_exclusion("n3", reason="operator", created=T0 + 7000, source="operator")
    store.add_exclusion("n5", reason="operator", created=T0 + 7100, source="operator")
    store.add_exclusion("s2", reason="operator", created=T0 + 7200, source="operator")
    store.add_exclusion("s2", reason="operator", created=T0 + 7300, source="operator")
    store.add_alert(node="n3", start=T0 + 2600 - 3600, end=T0 + 100, peak_score=5.0,
                    kind="predictive")
    store.add_alert(node="n3", start=T0 - 200_000, end=T0 - 190_000, peak_score=4.0,
                    kind="predictive")  # more than 24 h before the failure: unrelated
    store.add_alert(node="n5", start=T0 + 3900, end=None, peak_score=9.0, kind="hard")
    store.add_alert(node="m2", start=T0 + 11_300, end=None, peak_score=3.0,
                    kind="predictive")  # after the failure: no lead
    store.add_alert(node="n1", start=T0 + 2000, end=None, peak_score=3.0,
                    kind="predictive")  # not a culprit
    return ids
