"""When the answer is ``unknown``: the two most likely categories, how sure, and why.

No signature explains an ``unknown`` incident, but its lines still carry generic words that
lean one way: "timed out" next to "NCCL", "killed" next to "memory", "save" next to
"checkpoint". :data:`CUES` are such words (general ones, not the signatures' phrasings). How
each cue co-occurs with each category was counted on the development corpus
(``tests/data/realworld/``: every case's event lines, labelled with the thread's diagnosis) and
is stored in ``data/alternatives.json``, written by ``scripts/calibrate_alternatives.py``.

Scoring is a Bernoulli naive Bayes over the cues (Laplace-smoothed counts), which ranks
categories well but is over-confident. The confidence reported is therefore *calibrated*: the
raw probabilities of the top two categories of every development case, each computed with that
case left out of the counts (leave-one-out), are binned, and a bin's confidence is how often its
categories were right (smoothed, made monotone). "checkpoint 0.45" means that, on the
development corpus, about 45% of the alternatives given with that confidence were right.

    >>> from trainguard.evidence.alternatives import cues_in
    >>> sorted(cues_in("RuntimeError: failed to save checkpoint"))[:2]
    ['checkpoint', 'python']
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from trainguard.evidence.events import CUE_CHARS, EvidenceLine
from trainguard.evidence.rules import Pattern, compile_re2
from trainguard.taxonomy import SUPERVISOR_CATEGORIES, Category

ALTERNATIVES_SHOWN = 2
LINES_PER_ALTERNATIVE = 3

CUES: tuple[tuple[str, str], ...] = (
    ("timeout", r"time[- ]?out|timed out|watchdog|\bhang|\bhung\b|stuck|deadline"),
    ("collective", r"\bnccl|processgroup|all_?reduce|all_?gather|reduce_?scatter|broadcast|"
                   r"barrier|collective|\bc10d\b|\brccl\b"),
    ("network", r"socket|connection|network|infiniband|\bib\b|mlx5|rdma|\bibv|\btcp\b|\bpeer\b|"
                r"unreachable|refused|rendezvous|\bstore\b|\bport\b"),
    ("killed", r"killed|sigkill|signal 9\b|exit ?(?:code|status)?[:= ]*(?:137|-9)\b"),
    ("memory", r"memory|\boom\b|\brss\b|malloc|\balloc|swap"),
    ("gpu_device", r"\bgpu\b|nvidia|nvrm|nvml|\bxid\b|\bpci"),
    ("ecc", r"\becc\b|remap|uncorrect|\bdbe\b|\bsbe\b|retired page"),
    ("cuda", r"\bcuda|cudnn|cublas|\bkernel\b|triton|device-side"),
    ("checkpoint", r"checkpoint|ckpt|state_dict|safetensors|\.pth?\b|orbax|distcp|torch\.save|"
                   r"torch\.load|pretrained"),
    ("save_load", r"\bsav(?:e|ed|ing)\b|\bload(?:ed|ing)?\b|restor|resum"),
    ("storage", r"\bdisk|file ?system|\bmount|\bnfs\b|lustre|gpfs|quota|\bi/o\b|errno|"
                r"no such file|permission denied|read-only|\bs3\b|bucket|space left"),
    ("scheduler", r"\bnode\b|slurm|srun|sbatch|kubelet|\bpod\b|preempt|drain|evict|cancel+ed|"
                  r"\bjob\b"),
    ("python", r"traceback|error:|exception|line \d+, in|\.py\b"),
    ("numeric", r"\bnan\b|\binf\b|overflow|diverg|\bloss\b"),
    ("nvlink", r"nvlink|nvswitch|fabric ?manager|\bsxid\b"),
    ("exit1", r"exit ?(?:code|status)?[:= ]*1\b"),
    ("native_crash", r"segmentation|sigsegv|core dumped|sigabrt|\babort"),
    ("config", r"version|mismatch|not found|no module|\bimport|invalid|unsupported|argument"),
)
"""(name, RE2 source matched case-insensitively): generic words that lean towards categories."""

_CUE_RX: tuple[tuple[str, Pattern], ...] = tuple(
    (name, compile_re2(src, ignore_case=True)) for name, src in CUES)
CATEGORIES: tuple[Category, ...] = tuple(
    c for c in Category if c is not Category.UNKNOWN and c not in SUPERVISOR_CATEGORIES)


@dataclass(frozen=True, slots=True)
class Alternative:
    """A category an ``unknown`` incident may be, how sure, and the lines that say so."""

    category: Category
    confidence: float
    lines: tuple[EvidenceLine, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"category": self.category.value, "confidence": round(self.confidence, 3),
                "lines": [e.to_dict() for e in self.lines]}


@dataclass(frozen=True, slots=True)
class CueCounts:
    """How often each cue occurred in cases of each category (the naive Bayes' counts)."""

    cases: Mapping[str, int]
    """category -> number of cases."""
    with_cue: Mapping[str, Mapping[str, int]]
    """cue -> category -> cases of that category whose lines have the cue."""

    def without(self, cues: frozenset[str], category: str) -> CueCounts:
        """These counts with one case (its cues and category) taken out: leave-one-out."""
        cases = dict(self.cases)
        cases[category] = cases.get(category, 0) - 1
        with_cue = {k: {c: n - (c == category and k in cues) for c, n in per.items()}
                    for k, per in self.with_cue.items()}
        return CueCounts(cases, with_cue)


@dataclass(frozen=True, slots=True)
class Calibration:
    """Cue counts plus the map from the raw probability to a calibrated confidence."""

    counts: CueCounts
    bins: tuple[tuple[float, float], ...]
    """(upper edge of the raw probability, calibrated confidence), edges ascending."""

    def confidence(self, raw: float) -> float:
        for edge, conf in self.bins:
            if raw <= edge:
                return conf
        return self.bins[-1][1] if self.bins else 0.0


def cues_in(text: str) -> frozenset[str]:
    """The cues a line (or text) carries."""
    line = text[:CUE_CHARS]
    return frozenset(name for name, rx in _CUE_RX if rx.search(line) is not None)


def raw_probabilities(counts: CueCounts, cues: frozenset[str]) -> dict[str, float]:
    """Bernoulli naive Bayes: category -> posterior over the cue set (uncalibrated)."""
    total = sum(max(0, n) for n in counts.cases.values())
    logs: dict[str, float] = {}
    for cat in (c.value for c in CATEGORIES):
        n_c = max(0, counts.cases.get(cat, 0))
        score = math.log((n_c + 1) / (total + len(CATEGORIES)))
        for name, _ in CUES:
            n_kc = max(0, counts.with_cue.get(name, {}).get(cat, 0))
            p = (n_kc + 1) / (n_c + 2)
            score += math.log(p if name in cues else 1 - p)
        logs[cat] = score
    top = max(logs.values())
    weights = {c: math.exp(v - top) for c, v in logs.items()}
    norm = sum(weights.values())
    return {c: w / norm for c, w in weights.items()}


def count_cues(samples: Iterable[tuple[frozenset[str], str]]) -> CueCounts:
    """Counts from (cues of a case, its category) samples."""
    cases: dict[str, int] = {}
    with_cue: dict[str, dict[str, int]] = {name: {} for name, _ in CUES}
    for cues, cat in samples:
        cases[cat] = cases.get(cat, 0) + 1
        for k in cues:
            if k in with_cue:
                with_cue[k][cat] = with_cue[k].get(cat, 0) + 1
    return CueCounts(cases, with_cue)


BIN_EDGES: tuple[float, ...] = (0.1, 0.25, 0.45, 0.7, 0.9, 1.0)


def loo_predictions(samples: Sequence[tuple[frozenset[str], str]]
                    ) -> list[tuple[float, bool]]:
    """(raw probability, right?) of each sample's top two categories, its case left out."""
    counts = count_cues(samples)
    out: list[tuple[float, bool]] = []
    for cues, cat in samples:
        probs = raw_probabilities(counts.without(cues, cat), cues)
        for c, p in sorted(probs.items(), key=lambda kv: -kv[1])[:ALTERNATIVES_SHOWN]:
            out.append((p, c == cat))
    return out


def fit(samples: Sequence[tuple[frozenset[str], str]]) -> Calibration:
    """Counts and a monotone binned calibration from labelled development samples."""
    preds = loo_predictions(samples)
    stats: list[list[float]] = []
    lo = 0.0
    for edge in BIN_EDGES:
        inside = [right for p, right in preds if lo < p <= edge or (lo == 0.0 and p == 0.0)]
        stats.append([edge, sum(inside) + 0.5, len(inside) + 1.0])
        lo = edge
    # Pool adjacent violators: a higher raw probability never gets a lower confidence.
    blocks: list[list[Any]] = []
    for edge, right, n in stats:
        blocks.append([[edge], right, n])
        while len(blocks) > 1 and blocks[-2][1] / blocks[-2][2] > blocks[-1][1] / blocks[-1][2]:
            last = blocks.pop()
            blocks[-1][0] += last[0]
            blocks[-1][1] += last[1]
            blocks[-1][2] += last[2]
    bins = tuple((edge, round(right / n, 3)) for edges, right, n in blocks for edge in edges)
    return Calibration(count_cues(samples), bins)


def to_json(cal: Calibration, source: str) -> str:
    doc = {"source": source, "cases": dict(sorted(cal.counts.cases.items())),
           "with_cue": {k: dict(sorted(v.items())) for k, v in cal.counts.with_cue.items()},
           "bins": [list(b) for b in cal.bins]}
    return json.dumps(doc, indent=1, sort_keys=False) + "\n"


def from_json(text: str) -> Calibration:
    doc = json.loads(text)
    return Calibration(CueCounts(doc["cases"], doc["with_cue"]),
                       tuple((float(e), float(c)) for e, c in doc["bins"]))


@cache
def builtin_calibration() -> Calibration:
    text = resources.files("trainguard.evidence").joinpath("data/alternatives.json").read_text()
    return from_json(text)


def alternatives(lines: Sequence[EvidenceLine], cal: Calibration | None = None
                 ) -> tuple[Alternative, ...]:
    """The :data:`ALTERNATIVES_SHOWN` most likely categories for these lines, with calibrated
    confidence and the lines (at most :data:`LINES_PER_ALTERNATIVE`) whose cues favour each
    (when none does, the first lines: the ranking rests on the cues they lack)."""
    cal = cal or builtin_calibration()
    per_line = [(line, cues_in(line.program_text)) for line in lines]
    if not per_line:
        return ()
    cues = frozenset().union(*(c for _, c in per_line))
    probs = raw_probabilities(cal.counts, cues)
    best = sorted(probs.items(), key=lambda kv: -kv[1])[:ALTERNATIVES_SHOWN]
    return tuple(Alternative(Category(cat), cal.confidence(p), _lines_for(cal.counts, cat,
                                                                          per_line))
                 for cat, p in best)


def _lines_for(counts: CueCounts, cat: str,
               per_line: Sequence[tuple[EvidenceLine, frozenset[str]]]
               ) -> tuple[EvidenceLine, ...]:
    """The lines with a cue more frequent in ``cat``'s cases than overall, strongest first."""
    total = sum(max(0, n) for n in counts.cases.values())
    n_c = max(0, counts.cases.get(cat, 0))

    def lift(k: str) -> float:
        per = counts.with_cue.get(k, {})
        in_cat = (per.get(cat, 0) + 1) / (n_c + 2)
        overall = (sum(per.values()) + 1) / (total + 2)
        return math.log(in_cat / overall)

    scored = [(max((lift(k) for k in cues), default=0.0), i, line)
              for i, (line, cues) in enumerate(per_line)]
    ranked = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], s[1]))
    if not ranked:  # no line leans this way: the ranking rests on what the lines lack
        return tuple(line for line, _ in per_line[:LINES_PER_ALTERNATIVE])
    return tuple(line for _, _, line in ranked[:LINES_PER_ALTERNATIVE])


__all__ = ["ALTERNATIVES_SHOWN", "BIN_EDGES", "CATEGORIES", "CUES", "Alternative", "Calibration",
           "CueCounts", "alternatives", "builtin_calibration", "count_cues", "cues_in", "fit",
           "from_json", "loo_predictions", "raw_probabilities", "to_json"]
