"""The text model: what an incident's words say its category and fix are, learned from threads.

The rules read one line at a time, in the phrasings someone wrote down; on logs from stacks
nobody wrote rules for they abstain (``unknown``) or read the loudest line. The text model reads
every word of the incident's lines and their neighbours (the scanner keeps five lines either
side of each event, ``FailureEvent.context``) and weighs them as the labelled threads did.

It is a linear model over the lines' words, word pairs and the parts of compound identifiers
(``fused_layer_norm_cuda``, ``CUDAMismatchException``: a name nobody labelled still shares
``cuda`` and ``mismatch`` with the threads that were): a TF-IDF vector (sublinear term
frequency, smoothed inverse document frequency, L2-normalised) scored by a multinomial logistic
regression, one *head* for the category and one for the action. ``scripts/fit_text_model.py``
fits it on every labelled corpus in ``tests/data/realworld*/`` and writes
``data/textmodel.json``; scoring here is plain Python.

    >>> tokens("NCCL watchdog timed out after 0x1f ms: ProcessGroupNCCL.cpp:1234")
    ['nccl', 'watchdog', 'timed', 'out', 'after', 'ms', 'processgroupnccl', 'cpp']
    >>> features(["cuda", "error", "oom"])
    ['cuda', 'error', 'oom', 'cuda error', 'error oom']
    >>> parts("DeepSpeedCPUAdam has no attribute ds_opt_adam")
    ['deep', 'speed', 'cpu', 'adam', 'ds', 'opt', 'adam']
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from itertools import pairwise
from typing import Any

import re2

from trainguard.evidence.events import CUE_CHARS
from trainguard.evidence.tracebacks import shape

# RE2 like every pattern that reads log lines (linear time); these three need finditer and sub,
# which the rules' Pattern protocol leaves out.
_WORD = re2.compile(r"[a-z][a-z0-9_]+")
_HEXLIKE = re2.compile(r"^[a-f0-9]{6,}$")
_IDENT = re2.compile(r"[A-Za-z][A-Za-z0-9_]+")
_HEX = re2.compile(r"0[xX][0-9a-fA-F]+")

TEXT_LINES = 400
"""At most this many lines of an incident are read (its evidence lines and their neighbours)."""


def tokens(text: str) -> list[str]:
    """Lower-case words of two or more characters; hex numbers and hex-like ids dropped."""
    low = _HEX.sub(" ", text).lower()
    return [w for w in (m.group(0) for m in _WORD.finditer(low))
            if _HEXLIKE.search(w) is None]


def features(words: Sequence[str]) -> list[str]:
    """The words and each pair of adjacent words (``"cuda error"``)."""
    return [*words, *(f"{a} {b}" for a, b in pairwise(words))]


def _split_case(word: str) -> list[str]:
    """``word`` cut where its case or its kind (letter, digit) changes: ``CUDAMismatch`` gives
    ``CUDA`` and ``Mismatch``, ``sm80`` gives ``sm`` and ``80``."""
    out: list[str] = []
    start = 0
    for i in range(1, len(word)):
        prev, ch = word[i - 1], word[i]
        nxt = word[i + 1] if i + 1 < len(word) else ""
        if (prev.islower() and ch.isupper()) or (prev.isdigit() != ch.isdigit()) or \
                (prev.isupper() and ch.isupper() and nxt.islower()):
            out.append(word[start:i])
            start = i
    out.append(word[start:])
    return out


def parts(text: str) -> list[str]:
    """The parts of each compound identifier (cut at ``_`` and at changes of case or kind),
    lower-case, of two or more letters; a word of one part gives none (it is a word already)."""
    out: list[str] = []
    for m in _IDENT.finditer(_HEX.sub(" ", text)):
        cut = [p.lower() for chunk in m.group(0).split("_") for p in _split_case(chunk)]
        kept = [p for p in cut if len(p) >= 2 and not p.isdigit() and _HEXLIKE.search(p) is None]
        if len(kept) > 1:
            out.extend(kept)
    return out


def read_features(text: str) -> list[str]:
    """What the model reads of a text: its words, adjacent pairs and identifier parts."""
    return [*features(tokens(text)), *parts(text)]


def without_shared_prefix(lines: Sequence[str]) -> list[str]:
    """``lines`` without the prefix all of them share, digits aside, up to its last space: a
    collector's column (docker compose's ``trainer-1  | ``, Ray's worker tag) or a time stamp
    on every line. Its words are the collector's, not the program's, and the same log read bare
    or through a collector must weigh the same.

        >>> without_shared_prefix(["12:00:01 trainer-1 | Killed", "12:00:02 trainer-1 | oom"])
        ['Killed', 'oom']
        >>> without_shared_prefix(["Killed", "oom-kill"])
        ['Killed', 'oom-kill']
    """
    if len(lines) < 2:
        return list(lines)
    shapes = [shape(line) for line in lines]  # one character for one: same length
    shortest, longest = min(shapes), max(shapes)
    common = next((i for i, (a, b) in enumerate(zip(shortest, longest, strict=False)) if a != b),
                  len(shortest))
    cut = shortest.rfind(" ", 0, common) + 1
    return [line[cut:] for line in lines] if cut else list(lines)


def text_features(lines: Sequence[str]) -> list[str]:
    """The features of an incident's lines (each line cut at :data:`CUE_CHARS`, the prefix they
    all share dropped: :func:`without_shared_prefix`)."""
    read = without_shared_prefix([line[:CUE_CHARS] for line in lines[:TEXT_LINES]])
    return read_features("\n".join(read))


@dataclass(frozen=True, slots=True)
class Head:
    """One multinomial logistic regression over the shared features."""

    classes: tuple[str, ...]
    weights: tuple[tuple[float, ...], ...]
    """Per feature, its weight for each class (feature-major: a text touches few features)."""
    intercept: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class Prediction:
    """A head's classes, most likely first, with their probabilities."""

    ranked: tuple[tuple[str, float], ...]

    @property
    def label(self) -> str:
        return self.ranked[0][0]

    @property
    def probability(self) -> float:
        return self.ranked[0][1]


@dataclass(frozen=True, slots=True)
class TextModel:
    """The fitted vocabulary, IDF weights, heads and the thresholds chosen for them.

    Scoring is plain Python: a text touches a few hundred of the features, so a sparse dot
    product per class is cheaper than importing numpy into ``logs classify``."""

    vocabulary: Mapping[str, int]
    idf: tuple[float, ...]
    heads: Mapping[str, Head]
    thresholds: Mapping[str, float]
    """head -> the probability at which its answer replaces the rules' (see ``textread.py``)."""
    source: str = ""

    def vector(self, feats: Sequence[str]) -> dict[int, float]:
        """The sparse TF-IDF vector of these features (feature index -> value), L2-normalised."""
        counts = Counter(j for j in (self.vocabulary.get(f) for f in feats) if j is not None)
        vals = {j: (1.0 + math.log(n)) * self.idf[j] for j, n in counts.items()}
        norm = math.sqrt(sum(v * v for v in vals.values()))
        return {j: v / norm for j, v in vals.items()} if norm > 0 else {}

    def predict(self, head: str, feats: Sequence[str]) -> Prediction:
        """The head's classes for these features, most likely first."""
        return self._ranked(self.heads[head], self.vector(feats))

    def predictions(self, feats: Sequence[str]) -> dict[str, Prediction]:
        """Every head's prediction for these features (the vector built once)."""
        vec = self.vector(feats)
        return {name: self._ranked(h, vec) for name, h in self.heads.items()}

    @staticmethod
    def _ranked(h: Head, vec: Mapping[int, float]) -> Prediction:
        scores = list(h.intercept)
        for j, v in vec.items():
            for c, w in enumerate(h.weights[j]):
                scores[c] += w * v
        top = max(scores)
        exps = [math.exp(x - top) for x in scores]
        total = sum(exps)
        ranked = sorted(zip(h.classes, (e / total for e in exps), strict=True),
                        key=lambda kv: -kv[1])
        return Prediction(tuple(ranked))

    def leaning(self, head: str, label: str, lines: Sequence[str], limit: int = 3
                ) -> tuple[int, ...]:
        """Indices of the lines whose words most favour ``label`` (at most ``limit``): each
        feature's weight for ``label`` above its mean weight, summed over the line's vector."""
        h = self.heads[head]
        row = h.classes.index(label)
        scored = []
        read = without_shared_prefix([line[:CUE_CHARS] for line in lines[:TEXT_LINES]])
        for i, line in enumerate(read):
            vec = self.vector(read_features(line))
            lean = sum((h.weights[j][row] - sum(h.weights[j]) / len(h.classes)) * v
                       for j, v in vec.items())
            if lean > 0:
                scored.append((-lean, i))
        return tuple(i for _, i in sorted(scored)[:limit])

    def to_json(self) -> str:
        vocab = sorted(self.vocabulary, key=self.vocabulary.__getitem__)
        doc: dict[str, Any] = {
            "source": self.source,
            "thresholds": dict(self.thresholds),
            "vocabulary": vocab,
            "idf": [round(v, 5) for v in self.idf],
            "heads": {name: {"classes": list(h.classes),
                             "intercept": [round(v, 5) for v in h.intercept],
                             "coef": [[round(w[c], 4) for w in h.weights]
                                      for c in range(len(h.classes))]}
                      for name, h in self.heads.items()},
        }
        return json.dumps(doc, separators=(",", ":")) + "\n"


def head_of(classes: Sequence[str], coef: Sequence[Sequence[float]],
            intercept: Sequence[float]) -> Head:
    """A head from class-major weights (``coef[class][feature]``, as fitted and stored)."""
    return Head(tuple(classes), tuple(tuple(float(v) for v in col) for col in zip(*coef,
                                                                                  strict=True)),
                tuple(float(v) for v in intercept))


def from_json(text: str) -> TextModel:
    doc = json.loads(text)
    heads = {name: head_of(h["classes"], h["coef"], h["intercept"])
             for name, h in doc["heads"].items()}
    return TextModel({f: i for i, f in enumerate(doc["vocabulary"])},
                     tuple(float(v) for v in doc["idf"]), heads,
                     {k: float(v) for k, v in doc["thresholds"].items()}, doc.get("source", ""))


@cache
def builtin_text_model() -> TextModel:
    text = resources.files("trainguard.evidence").joinpath("data/textmodel.json").read_text()
    return from_json(text)


__all__ = ["TEXT_LINES", "Head", "Prediction", "TextModel", "builtin_text_model", "features",
           "from_json", "head_of", "parts", "read_features", "text_features", "tokens",
           "without_shared_prefix"]
