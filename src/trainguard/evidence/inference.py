"""What the models add to an incident: a category for an ``unknown``, a setting as the fix.

Two decisions, both pure functions of an incident's lines and the fitted models:

1. **Answering an unknown.** No signature explains the incident, but the cue model
   (``alternatives.py``) ranks its likely categories with a calibrated confidence. When the top
   one reaches the *answer threshold*, the incident takes that category (and the category's
   default action, see :func:`answered_action`), marked as inferred; both alternatives stay
   listed. The threshold was chosen
   by cross-validation on the labelled corpora (``actfit.py``): from 0.5 up (never an answer
   the model itself calls less likely right than wrong), the highest one that answers the most
   unknowns rightly, net of the wrong answers. Only incidents that stand on failure words are
   answered: a rule that says ``unknown`` (a benign look-alike, a launcher's bare exit
   summary) has read its line already.
2. **A setting as the fix.** When the rule's action is not already ``fix_config``, the config
   model (``actions.py``) may say the lines read like a setting to change; above its threshold
   the action becomes ``fix_config``, marked as inferred, with the cues behind it.
3. **The fix the evidence names.** Before the config model, the incident's lines are read for
   the cases where the evidence itself says the fix is a setting (``remedies.py``: a hang among
   a process group's first collectives, an installation of the wrong version, a network
   that was never set up); the action is
   then ``fix_config`` with confidence 1 and the case's name as its cue.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trainguard.evidence.actions import ConfigModel, InferredAction, builtin_model, infer_action
from trainguard.evidence.alternatives import Alternative
from trainguard.evidence.events import EvidenceLine
from trainguard.evidence.remedies import evidence_remedy
from trainguard.taxonomy import DEFAULT_ACTION, Action, Category


@dataclass(frozen=True, slots=True)
class InferredCategory:
    """The category a model gave an incident: the cue model for an ``unknown``, or the text
    model (``textread.py``) for an ``unknown`` or over a rule's reading."""

    category: Category
    confidence: float
    threshold: float
    lines: tuple[EvidenceLine, ...]
    """The lines whose words lean most towards the category."""
    rule_category: Category = Category.UNKNOWN
    model: str = "cues"
    """``cues`` (``alternatives.py``) or ``text`` (``textmodel.py``)."""

    @staticmethod
    def of(alternative: Alternative, threshold: float) -> InferredCategory:
        return InferredCategory(alternative.category, alternative.confidence, threshold,
                                alternative.lines)

    def to_dict(self) -> dict[str, Any]:
        return {"category": self.category.value, "rule_category": self.rule_category.value,
                "model": self.model, "confidence": round(self.confidence, 3),
                "threshold": self.threshold,
                "lines": [e.to_dict() for e in self.lines]}


@dataclass(frozen=True, slots=True)
class Inference:
    """What the models changed, if anything (``None`` parts: the rules' answer stands)."""

    category: InferredCategory | None = None
    action: InferredAction | None = None

    def applied(self, category: Category, action: Action) -> tuple[Category, Action]:
        """The rules' (category, action) with these decisions made."""
        if self.category is not None:
            category = self.category.category
            action = answered_action(category)
        if self.action is not None:
            action = self.action.action
        return category, action


NODE_ACTIONS = frozenset({Action.EXCLUDE_NODE, Action.REBOOT_NODE, Action.RESET_GPU})
"""Actions that take a node or a GPU out of service: they need evidence that names it."""


def answered_action(category: Category) -> Action:
    """The action for a category the cue model answered (no rule read the incident's lines).

    The category's default action, except where that takes a node or a GPU out of service: a
    guess from the words of a line ("CANCELLED", "requeue", "node") has no rule's reading of a
    node or GPU fault behind it, so nothing names the hardware to exclude, reboot or reset.
    Rerunning the job (``restart_job``) is the action that needs no culprit."""
    action = DEFAULT_ACTION[category]
    return Action.RESTART_JOB if action in NODE_ACTIONS else action


def answer(alternatives: Sequence[Alternative], threshold: float) -> InferredCategory | None:
    """The top alternative when its calibrated confidence reaches ``threshold``."""
    if not alternatives or alternatives[0].confidence < threshold:
        return None
    return InferredCategory.of(alternatives[0], threshold)


def infer(category: Category, action: Action, root_lines: Sequence[str],
          alternatives: Sequence[Alternative],
          models: tuple[ConfigModel, float] | None = None,
          lines: Sequence[str] = ()) -> Inference:
    """The models' decisions for an incident of this category and action whose root cause
    has these lines (``alternatives``: those of an ``unknown`` incident; ``lines``: all the
    incident's evidence lines, read for a remedy they name)."""
    model, answer_threshold = models or builtin_model()
    guess = answer(alternatives, answer_threshold) if category is Category.UNKNOWN else None
    if guess is not None:
        category, action = guess.category, answered_action(guess.category)
    if category is Category.UNKNOWN:
        return Inference()
    remedy = evidence_remedy(category, action, [*root_lines, *lines])
    if remedy is not None:
        return Inference(guess, InferredAction(remedy.action, action, 1.0, (remedy.reason,)))
    return Inference(guess, infer_action(model, category.value, action, root_lines))


__all__ = ["NODE_ACTIONS", "Inference", "InferredCategory", "answer", "answered_action", "infer"]
