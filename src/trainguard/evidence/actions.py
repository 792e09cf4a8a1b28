"""Is this failure fixed by changing a setting? A learned override of a rule's action.

A signature names what broke and, with it, a default next step: a watchdog timeout says
``restart_job``, a Python error ``fix_code``, a lost GPU ``reboot_node``. People who diagnosed
real failures often ended elsewhere: the job needed an environment variable, a library of the
right version, a larger limit (``fix_config``). The words that say so are generic: an
``NCCL_*`` variable, "version mismatch", "not supported", "cannot open shared object",
"exceeded", "--flag". :data:`CUES` are such words.

The model is a Bernoulli naive Bayes for one question, *fix_config or the rule's action*,
over the cues of the root cause's evidence lines, with the incident's category as the prior
(each category's rate of ``fix_config`` among cases whose rule says otherwise, shrunk towards
the overall rate). Its counts and the probability above which it overrides a rule
(:attr:`ConfigModel.threshold`) are fitted on the labelled corpora by
``scripts/calibrate_actions.py`` into ``data/actions.json``; the threshold is the one that
never lost an action in cross-validation (``actfit.py``).

    >>> sorted(cues_in("ImportError: libcudnn.so.8: cannot open shared object file"))
    ['import_env', 'python_error']
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from trainguard.evidence.events import CUE_CHARS
from trainguard.evidence.rules import Pattern, compile_re2
from trainguard.taxonomy import Action

PRIOR_WEIGHT = 2.0
"""How many cases' worth the overall ``fix_config`` rate weighs in a category's prior."""
NEVER = 1.01
"""A threshold no probability reaches: the model never overrides."""
KEEPS = frozenset({Action.FIX_CONFIG, Action.NONE})
"""Rule actions the model leaves alone: already a setting, or nothing to do."""

CUES: tuple[tuple[str, str], ...] = (
    ("env_var", r"\b(?:NCCL|CUDA|TORCH|PYTORCH|OMP|NVIDIA|XLA|TF|HF|LD|MASTER|GLOO|UCX|FI)_"
                r"[A-Za-z0-9_]{2,}"),
    ("flag", r"(?:^|\s)--[a-z][a-z0-9_-]+"),
    ("limit", r"limit|exceed|maximum|\bmax_|too (?:large|many|small|long)|insufficient|"
              r"not enough"),
    ("version", r"version|mismatch|incompatib|compiled|built (?:with|for)|upgrade|downgrade|"
                r"compute capabilit|\bsm_\d+|\barch\b"),
    ("unsupported", r"not supported|unsupported|no kernel image|not available|"
                    r"invalid device function|not compiled"),
    ("invalid", r"invalid|illegal value|bad value|unrecognized|unknown (?:option|argument)"),
    ("shm", r"\bshm\b|shared memory|--ipc|/dev/shm|memlock"),
    ("setting", r"config|setting|environment|\benv\b|option|parameter|argument|export |setenv"),
    ("advice", r"\bincrease|\bset (?:the|it|to|your)|\btry (?:setting|to|using)|\breduce|"
               r"batch.?size|consider"),
    ("requested", r"request(?:ed)?\b.*\b(?:but|only)|only \d+|available"),
    ("hardware", r"\bxid\b|\becc\b|fallen off|\bnvrm\b|hardware|faulty|remap|thermal|\bpower\b|"
                 r"\bbus\b|\bpcie?\b"),
    ("traceback", r"traceback|file \".*\", line \d+|line \d+, in "),
    ("python_error", r"(?:attribute|type|key|index|value|name|import|assertion|runtime|"
                     r"zerodivision)error"),
    ("node", r"\bnode\b|drain|kernel:|\bhost\b"),
    ("oom_kill", r"oom.?kill|killed process|cgroup|memory pressure"),
    ("storage", r"\bdisk|quota|no space|\bnfs\b|lustre|\bmount|permission denied|read-only|"
                r"i/o error"),
    ("timeout", r"time[d ]?[- ]?out|watchdog|\bhang|stuck"),
    ("network", r"connection|socket|refused|unreachable|\bib\b|mlx|\bport\b|interface|ifname"),
    ("driver", r"driver|firmware|\bgsp\b|fabric ?manager|nvidia-smi"),
    ("init", r"initiali[sz]|not yet|startup|failed to init|setup"),
    ("numeric", r"\bnan\b|\binf\b|overflow|diverg"),
    ("not_found", r"not found|no such|no module|cannot find|could not find|missing"),
    ("native_crash", r"segmentation|sigsegv|core dumped|illegal (?:memory|instruction)"),
    ("transient", r"retry|transient|temporar|intermittent|again"),
    ("import_env", r"importerror|modulenotfound|no module named|cannot open shared object|"
                   r"undefined symbol|failed to import|\.so(?:\.\d+)*:"),
    ("checkpoint", r"checkpoint|\.pth?\b|safetensors|state_dict|torch\.load|pickle"),
)
"""(name, RE2 source matched case-insensitively): words that say what kind of fix a failure
needs (a setting, the hardware, the code)."""

_CUE_RX: tuple[tuple[str, Pattern], ...] = tuple(
    (name, compile_re2(src, ignore_case=True)) for name, src in CUES)


@dataclass(frozen=True, slots=True)
class ActionSample:
    """One labelled case: its root lines' cues, category and rule action, the right action."""

    cues: frozenset[str]
    category: str
    rule_action: str
    action: str


@dataclass(frozen=True, slots=True)
class ConfigModel:
    """Counts over the cases whose rule action is not ``fix_config`` (the candidates)."""

    cases: Mapping[str, tuple[int, int]]
    """category -> (candidate cases, those labelled fix_config)."""
    with_cue: Mapping[str, tuple[int, int]]
    """cue -> (candidates labelled fix_config with the cue, the others with it)."""
    threshold: float = NEVER
    """Override the rule's action when the probability is at least this."""

    @property
    def totals(self) -> tuple[int, int]:
        """(fix_config candidates, other candidates)."""
        pos = sum(p for _, p in self.cases.values())
        return pos, sum(n for n, _ in self.cases.values()) - pos


@dataclass(frozen=True, slots=True)
class InferredAction:
    """The model's action where it overrides a rule's, how sure, and the cues behind it."""

    action: Action
    rule_action: Action
    confidence: float
    cues: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.action.value, "rule_action": self.rule_action.value,
                "confidence": round(self.confidence, 3), "cues": list(self.cues)}


def cues_in(text: str) -> frozenset[str]:
    """The action cues a line (or text) carries."""
    line = text[:CUE_CHARS]
    return frozenset(name for name, rx in _CUE_RX if rx.search(line) is not None)


def cues_of(lines: Iterable[str]) -> frozenset[str]:
    return frozenset().union(*(cues_in(t) for t in lines))


def is_candidate(sample: ActionSample) -> bool:
    return sample.rule_action not in {a.value for a in KEEPS}


def count(samples: Iterable[ActionSample], threshold: float = NEVER) -> ConfigModel:
    """The model's counts from labelled samples (non-candidates ignored)."""
    cases: dict[str, list[int]] = {}
    with_cue: dict[str, list[int]] = {name: [0, 0] for name, _ in CUES}
    for s in samples:
        if not is_candidate(s):
            continue
        pos = s.action == Action.FIX_CONFIG.value
        per = cases.setdefault(s.category, [0, 0])
        per[0] += 1
        per[1] += pos
        for k in s.cues:
            if k in with_cue:
                with_cue[k][0 if pos else 1] += 1
    return ConfigModel({c: (n, p) for c, (n, p) in cases.items()},
                       {k: (p, n) for k, (p, n) in with_cue.items()}, threshold)


def _cue_rates(model: ConfigModel, name: str) -> tuple[float, float] | tuple[None, None]:
    """(P(cue | fix_config), P(cue | other)), Laplace-smoothed; (None, None) for a cue no
    candidate had (smoothing alone would make it lean towards the smaller class)."""
    pos, neg = model.totals
    k_pos, k_neg = model.with_cue.get(name, (0, 0))
    if k_pos + k_neg == 0:
        return None, None
    return (k_pos + 1) / (pos + 2), (k_neg + 1) / (neg + 2)


def config_probability(model: ConfigModel, cues: frozenset[str], category: str) -> float:
    """P(fix_config | cues, category) for a case whose rule says something else."""
    pos, neg = model.totals
    if pos == 0 or neg == 0:
        return 0.0 if pos == 0 else 1.0
    overall = pos / (pos + neg)
    n_c, p_c = model.cases.get(category, (0, 0))
    prior = (p_c + PRIOR_WEIGHT * overall) / (n_c + PRIOR_WEIGHT)
    log_odds = math.log(prior / (1 - prior))
    for name, _ in CUES:
        p_yes, p_no = _cue_rates(model, name)
        if p_yes is None or p_no is None:  # never seen in a candidate: no evidence either way
            continue
        log_odds += math.log(p_yes / p_no) if name in cues else \
            math.log((1 - p_yes) / (1 - p_no))
    return 1 / (1 + math.exp(-max(-50.0, min(50.0, log_odds))))


def infer_action(model: ConfigModel, category: str, rule_action: Action,
                 lines: Sequence[str]) -> InferredAction | None:
    """``fix_config`` instead of the rule's action when the model is sure enough, else None."""
    if rule_action in KEEPS or not lines:
        return None
    cues = cues_of(lines)
    p = config_probability(model, cues, category)
    if p < model.threshold:
        return None

    def lift(k: str) -> float:
        p_yes, p_no = _cue_rates(model, k)
        return 0.0 if p_yes is None or p_no is None else math.log(p_yes / p_no)

    why = tuple(k for k in sorted(cues, key=lambda k: -lift(k)) if lift(k) > 0)
    return InferredAction(Action.FIX_CONFIG, rule_action, p, why)


def to_json(model: ConfigModel, source: str, answer_threshold: float) -> str:
    doc = {"source": source, "threshold": model.threshold,
           "answer_threshold": answer_threshold,
           "cases": {c: list(v) for c, v in sorted(model.cases.items())},
           "with_cue": {k: list(v) for k, v in model.with_cue.items()}}
    return json.dumps(doc, indent=1) + "\n"


def from_json(text: str) -> tuple[ConfigModel, float]:
    """The model and the answer threshold (``inference.py``) stored with it."""
    doc = json.loads(text)
    model = ConfigModel({c: (int(n), int(p)) for c, (n, p) in doc["cases"].items()},
                        {k: (int(p), int(n)) for k, (p, n) in doc["with_cue"].items()},
                        float(doc["threshold"]))
    return model, float(doc["answer_threshold"])


@cache
def builtin_model() -> tuple[ConfigModel, float]:
    text = resources.files("trainguard.evidence").joinpath("data/actions.json").read_text()
    return from_json(text)


__all__ = ["CUES", "KEEPS", "NEVER", "ActionSample", "ConfigModel", "InferredAction",
           "builtin_model", "config_probability", "count", "cues_in", "cues_of", "from_json",
           "infer_action", "is_candidate", "to_json"]
