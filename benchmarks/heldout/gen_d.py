"""Style "d" of the held-out generator: intermittent and slow precursors, and their look-alikes.

Written from issue #30's description of what the detector missed (power/clock jitter, PCIe replay
bursts, process stalls, slow row-remap ramps, failures with no precursor) and of what raised
false alarms (application-XID storms, fan degradation, maintenance reboots, job start/stop
transients), without reading the detector. `gen.py --style d` calls the three hooks below; the
workload, naming (like style a, with a `device` label) and rendering are gen.py's.

Evaluation only: never tune detector thresholds on seeds you then report as held out.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# failure shapes: each hardware XID draws one (sometimes two) of its candidates, or none
SHAPES_D: dict[int, tuple[str, ...]] = {
    48: ("remap_ramp", "remap_ramp", "clock_jitter"),
    94: ("remap_ramp", "proc_stalls"),
    95: ("remap_ramp", "clock_jitter"),
    64: ("remap_ramp",),
    92: ("remap_ramp", "replay_bursts"),
    79: ("replay_bursts", "proc_stalls", "clock_jitter"),
    74: ("replay_bursts", "proc_stalls"),
    119: ("proc_stalls", "clock_jitter"),
    62: ("clock_jitter", "proc_stalls"),
}
P_NO_PRECURSOR = 0.25
PCI_BUS_D = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")
XID63 = "Row Remapper: New row marked for remapping, reset gpu to activate."


def draw_failure(rng: np.random.Generator, xid: int, per_min: float) -> tuple[list[str], int,
                                                                            dict[str, Any]]:
    """(shapes, lead in steps, extra fields) for one hardware failure of style d."""
    shapes: list[str] = []
    if rng.random() >= P_NO_PRECURSOR:
        cand = sorted(set(SHAPES_D[xid]))
        m = 2 if (len(cand) > 1 and rng.random() < 0.3) else 1
        shapes = [str(s) for s in rng.choice(cand, size=m, replace=False)]
    short = int(np.exp(rng.uniform(np.log(12), np.log(180))) * per_min)
    lead = short
    if "remap_ramp" in shapes:
        lead = int(rng.uniform(3, 30) * 60 * per_min)
    return shapes, max(lead, 1), {"lead_short": max(short, 1)}


def _scatter(rng: np.random.Generator, a: int, b: int, n: int) -> np.ndarray:
    """n distinct-ish sorted steps in [a, b), spread evenly at random (no drift to the end)."""
    if b - a < 1:
        return np.zeros(0, dtype=int)
    return np.sort(rng.integers(a, b, size=n))


def apply_failure(shape: str, f: dict[str, Any], arr: dict[str, np.ndarray], sim: Any,
                  rng: np.random.Generator) -> None:
    """Write one precursor shape of failure f into the telemetry arrays (in place)."""
    pm = 60.0 / sim.interval
    r, k, n, g = f["row"], f["k"], f["node"], f["gpu"]
    G = sim.gpus
    bus = PCI_BUS_D[g % len(PCI_BUS_D)]
    a_short = max(0, k - f.get("lead_short", f["lead"]))
    if shape == "clock_jitter":
        # unstable supply: clock and power jump sample to sample in recurring episodes,
        # no throttle-reason bit set, no change of the mean
        for s in _scatter(rng, a_short, k, int(rng.integers(3, 10))).tolist():
            e = min(k, s + int(rng.uniform(3, 25) * pm))
            busy = arr["util"][r, s:e] > 20
            m = int(busy.sum())
            if m == 0:
                continue
            amp = rng.uniform(0.06, 0.18)
            arr["power"][r, s:e] *= np.where(busy, 1 + amp * rng.standard_normal(e - s), 1.0)
            arr["sm_clock"][r, s:e] = np.where(
                busy, np.clip(1980 - np.abs(rng.normal(0, 220, e - s)), 1100, 1980),
                arr["sm_clock"][r, s:e])
    elif shape == "replay_bursts":
        # intermittent bursts of PCIe replays, no growth: quiet for a long time, then dozens
        for s in _scatter(rng, a_short, k, int(rng.integers(2, 8))).tolist():
            for j in range(int(rng.integers(1, 4))):
                if s + j < k:
                    arr["replay_inc"][r, s + j] += int(rng.integers(2, 40))
            if rng.random() < 0.4:
                sim.log(n, sim.ts(s), f"pcieport 0000:{int(bus, 16) - 1:02x}:03.1: AER: "
                        f"Corrected error message received from 0000:{bus}:00.0")
    elif shape == "proc_stalls":
        # the training process on this GPU stops issuing work for 30 s to 2 min, a few times;
        # the other GPUs of the node sit in collectives (SM activity and power fall a little)
        for s in _scatter(rng, a_short, k, int(rng.integers(2, 9))).tolist():
            e = min(k, s + int(rng.integers(1, 5)))
            depth = rng.uniform(0.0, 0.5)
            arr["util"][r, s:e] = np.rint(arr["util"][r, s:e] * depth)
            arr["sm"][r, s:e] *= depth
            arr["power"][r, s:e] = arr["power"][r, s:e] * (0.3 + 0.5 * depth) + 25
            rows = n * G + np.arange(G)
            rows = rows[rows != r]
            arr["sm"][rows, s:e] *= 0.6
            arr["power"][rows, s:e] *= 0.8
    elif shape == "remap_ramp":
        # HBM wear: correctable-error row remaps accumulate over many hours, faster near the end
        a = max(0, k - f["lead"])
        L = k - a
        total = int(rng.integers(4, 20))
        u = np.sqrt(rng.random(total))  # rate grows linearly
        for s in np.sort(a + (u * (L - 1)).astype(int)).tolist():
            arr["remap_c_inc"][r, s] += 1
            arr["sbe_inc"][r, s] += int(rng.integers(1, 4))
            if rng.random() < 0.5:
                sim.log(n, sim.ts(s), f"NVRM: Xid (PCI:0000:{bus}:00): 63, pid="
                        f"{int(rng.integers(2000, 60000))}, name=python3, {XID63}")


def apply_benign(sim: Any, arr: dict[str, np.ndarray], rng: np.random.Generator,
                 xid: np.ndarray) -> np.ndarray:
    """False-alarm sources of style d, in place; returns a fan-speed offset array (percent)."""
    N, G, T = sim.nodes, sim.gpus, sim.steps
    pm = 60.0 / sim.interval
    days = T * sim.interval / 86400.0
    fan_off = np.zeros((N * G, T), dtype=np.float32)
    # job start transients: clocks and power settle for a few minutes; some links retrain
    for j in sim.jobs:
        if j.end - j.start < 5:
            continue
        rows = (j.nodes[:, None] * G + np.arange(G)[None, :]).ravel()
        s, e = j.start, min(j.end, j.start + int(rng.uniform(2, 10) * pm))
        shape = (rows.size, e - s)
        arr["power"][rows, s:e] += rng.normal(0, rng.uniform(20, 70), shape).astype(np.float32)
        arr["sm_clock"][rows, s:e] = np.clip(1980 - np.abs(rng.normal(0, 250, shape)), 1100, 1980)
        arr["util"][rows, s:e] = np.clip(np.rint(rng.uniform(0, 100, shape)), 0, 100)
        if rng.random() < 0.2:
            r = int(rng.choice(rows))
            arr["replay_inc"][r, s] += int(rng.integers(1, 12))
        if j.end < T and rng.random() < 0.5:  # stop transient: ragged drop over a minute or two
            ee = min(T, j.end + 1)
            sl = slice(max(j.start, j.end - int(rng.integers(1, 4))), ee)
            arr["util"][rows, sl] = np.rint(arr["util"][rows, sl] * rng.uniform(0, 1))
    # application-XID storms: one job's processes crash and restart again and again
    for _ in range(rng.poisson(1.5 * days * N / 16) + 1):
        k0 = int(rng.integers(T))
        jid = int(sim.job_of[int(rng.integers(N)), k0])
        if jid < 0:
            continue
        j = sim.jobs[jid]
        x = int(rng.choice([13, 31, 43, 45]))
        k = k0
        for _i in range(int(rng.integers(3, 9))):
            if k >= min(T, j.end):
                break
            nodes = j.nodes if rng.random() < 0.5 else j.nodes[:1]
            for n in nodes.tolist():
                gs = np.arange(G) if rng.random() < 0.6 else rng.choice(G, size=2, replace=False)
                rows = n * G + gs
                hold = min(T, k + 1 + int(rng.uniform(2, 6) * pm))
                xid[rows, k + 1:hold] = x
                dip = min(T, k + 1 + int(rng.integers(1, 4)))
                arr["util"][rows, k + 1:dip] = 0
                arr["power"][rows, k + 1:dip] *= 0.4
                t = sim.ts(k)
                sim.labels.append({"type": "app_xid", "node": sim.hostnames[n],
                                   "instance": sim.ips[n], "time": int(t), "xid": x,
                                   "job": jid, "storm": True})
                for gg in gs.tolist():
                    sim.log(n, t + gg * 0.01, f"NVRM: Xid (PCI:0000:{PCI_BUS_D[gg % 8]}:00): "
                            f"{x}, pid={4000 + jid * 13 + gg}, name=python3, "
                            "Graphics SM Warp Exception on (GPC 2, TPC 0, SM 1): Illegal Address")
            k += int(rng.uniform(1, 10) * pm)
    # fan degradation (benign): a fan loses speed over hours, its GPU runs a few degrees warmer
    for _ in range(int(rng.integers(1, 3)) * max(1, N // 16)):
        r = int(rng.integers(N * G))
        s = int(rng.integers(0, T // 2))
        ln = int(rng.uniform(6, 24) * 60 * pm)
        ramp = np.clip((np.arange(T - s) / max(ln, 1)), 0, 1).astype(np.float32)
        fan_off[r, s:] -= ramp * rng.uniform(10, 25)
        arr["temp_add"][r, s:] += ramp * rng.uniform(3, 8)
    # a healthy GPU with one or two isolated replay bursts (cable reseated, ASPM)
    for _ in range(max(1, N // 16)):
        r = int(rng.integers(N * G))
        for s in rng.integers(0, T, size=int(rng.integers(1, 3))).tolist():
            arr["replay_inc"][r, s] += int(rng.integers(3, 30))
    return fan_off
