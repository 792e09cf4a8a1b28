"""What the text model changes in an incident's answer, after the rules and the cue models.

The rules' answer stands unless the text model (``textmodel.py``), reading the incident's lines
and their neighbours, is sure enough of another; each threshold was chosen by
``scripts/fit_text_model.py`` on the labelled corpora, leaving each corpus out in turn and
replaying the answers the rules gave *before* that corpus was collected (so the figure is what
a fresh route would see, not what rules tuned on it say):

* **an ``unknown``** that stands on failure words alone takes the model's category when its
  probability reaches ``thresholds["answer"]``;
* **a rule's category** gives way when the model names another with probability at least
  ``thresholds["category"]``, and **the action** when the action head names another with
  probability at least ``thresholds["action"]`` -- but only where
  - the rule itself is unsure (its confidence below :data:`FIRM`: a generic reading such as a
    bare exception or a socket error, never a form documented to mean one cause);
  - the rules read one cause only (when they read several, the root was chosen by the order of
    events across ranks and by precedence, which words cannot see);
  - the reading does not rest on a number the model's words drop (an XID, a signal read from an
    exit status, a CUDA error by its code) or on where a line stands among the others (an
    exception raised inside a checkpoint library's frames);
  - the model read more than the rules' own evidence lines;
* **the action alone** of any rule, sure ones included, gives way when both it and the action
  head's choice are actions a person takes (change the code or the configuration, check the
  network or the storage, restart), never a node's, and the head's probability reaches
  ``thresholds["soft_action"]`` -- under the same limits as above but the rule's confidence:
  a rule's confidence is in the cause it read, and the same cause is fixed in the code in one
  job and in its configuration in another;
* where the category changed, the action is the model's, unless the lines already named one (a
  remedy or the config model, ``inference.py``).

A guess never takes a node or a GPU out of service: when the model's action is to exclude,
reboot or reset and the rules' was not, the action is ``restart_job`` (``answered_action``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from trainguard.evidence.actions import InferredAction
from trainguard.evidence.context import CONTEXT_FIELD
from trainguard.evidence.cuda_errors import RULE_ID as CUDA_RULE_ID
from trainguard.evidence.events import EvidenceLine, FailureEvent
from trainguard.evidence.inference import NODE_ACTIONS, Inference, InferredCategory
from trainguard.evidence.signals import SIGNAL_FIELD
from trainguard.evidence.textmodel import Prediction, TextModel, builtin_text_model, text_features
from trainguard.taxonomy import DEFAULT_ACTION, Action, Category, Severity

TEXT_CUE = "text model"
NEVER = 1.01
"""A threshold no probability reaches (a doubt the replay found to cost more than it gains)."""
FIRM = 0.7
"""A rule at least this sure never has its category second-guessed (its action only between a
person's fixes, ``thresholds["soft_action"]``). The rules' own confidence bands say what this
means: below it sit the generic readings (a bare Python exception, a segfault, a socket error, a
launcher's summary), at or above it the forms documented to mean one cause."""


@dataclass(frozen=True, slots=True)
class TextDecision:
    """The answer after the text model: what changed and how sure the model was."""

    category: Category
    action: Action
    category_changed: bool
    action_changed: bool
    category_confidence: float
    action_confidence: float


def decide(category: Category, action: Action, by_category: Prediction, by_action: Prediction,
           thresholds: Mapping[str, float], *, may_answer: bool, read_by_number: bool,
           rule_confidence: float, beyond_evidence: bool = True, contested: bool = False
           ) -> TextDecision:
    """The (category, action) once the text model's predictions are weighed against the
    answer so far (pure: ``scripts/fit_text_model.py`` replays it on past answers);
    ``rule_confidence`` is the root cause's own (a rule at least :data:`FIRM` sure is never
    second-guessed but for its action between a person's fixes), ``read_by_number`` whether
    that reading rests on a number (:func:`read_by_number`), ``beyond_evidence`` whether the
    model read any line besides the rules' evidence (on the evidence alone, the rule's reading
    of its own line stands), ``contested`` whether the rules read the incident's events as more
    than one cause (then the root was chosen by their order across ranks and by precedence,
    which words cannot see); all but the first limit hold for the action doubt between a
    person's fixes (``thresholds["soft_action"]``) too."""
    top = Category(by_category.label)
    new_category = category
    readable = beyond_evidence and not contested and not read_by_number
    open_to_doubt = readable and rule_confidence < FIRM
    if category is Category.UNKNOWN:
        if may_answer and by_category.probability >= thresholds["answer"]:
            new_category = top
    elif open_to_doubt and top is not category and top is not Category.UNKNOWN and \
            by_category.probability >= thresholds["category"]:
        new_category = top
    cat_changed = new_category is not category
    new_action = action
    if new_category is not Category.UNKNOWN:
        proposed = Action(by_action.label)
        other = proposed is not action
        soft = readable and action not in NODE_ACTIONS and proposed not in NODE_ACTIONS
        doubted = other and (
            (open_to_doubt and by_action.probability >= thresholds["action"])
            or (soft and by_action.probability >= thresholds.get("soft_action", NEVER)))
        if cat_changed or doubted:
            new_action = proposed
        if new_action in NODE_ACTIONS and action not in NODE_ACTIONS:
            new_action = Action.RESTART_JOB
        if cat_changed and new_action is Action.NONE:
            new_action = DEFAULT_ACTION[new_category]
    return TextDecision(new_category, new_action, cat_changed, new_action is not action,
                        by_category.probability, by_action.probability)


def beyond_evidence(inc_lines: Sequence[EvidenceLine], text_lines: Sequence[EvidenceLine]
                    ) -> bool:
    """Whether the text holds a line that is not the rules' evidence (lines compared by where
    they are, not by text: a neighbour's copy of a line may be cut)."""
    seen = {(line.path, line.line_no) for line in inc_lines}
    return any((line.path, line.line_no) not in seen for line in text_lines)


def read_by_number(root: FailureEvent) -> bool:
    """Whether the rules' reading rests on a number, which the model's words drop (an XID, a
    signal read from an exit status, a CUDA error by its code), or on where a line stands among
    the others, which a bag of words cannot see (an exception raised inside a checkpoint
    library's frames, ``context.py``)."""
    return root.xid is not None or root.field_value(SIGNAL_FIELD) is not None or \
        root.signature == CUDA_RULE_ID or root.field_value(CONTEXT_FIELD) is not None


def contested(root: FailureEvent, related: Sequence[FailureEvent]) -> bool:
    """Whether the rules read the incident's events as more than one known cause."""
    return len({e.category for e in (root, *related)
                if e.category is not Category.UNKNOWN and e.severity is not Severity.INFO}) > 1


def read_text(found: Inference, root: FailureEvent, lines: Sequence[EvidenceLine],
              may_answer: bool, evidence: Sequence[EvidenceLine] = (),
              related: Sequence[FailureEvent] = (), model: TextModel | None = None
              ) -> Inference:
    """``found`` (the cue and config models' decisions) with the text model's on top;
    ``lines`` are what the model reads (``Incident.text_lines``), ``evidence`` the incident's
    evidence lines among them."""
    if not lines:
        return found
    model = model or builtin_text_model()
    texts = [line.program_text for line in lines]
    feats = text_features(texts)
    heads = model.predictions(feats)
    by_category, by_action = heads["category"], heads["action"]
    category, action = found.applied(root.category, root.action)
    d = decide(category, action, by_category, by_action, model.thresholds,
               may_answer=may_answer, read_by_number=read_by_number(root),
               rule_confidence=root.confidence,
               beyond_evidence=beyond_evidence(evidence, lines),
               contested=contested(root, related))
    out = found
    if d.category_changed:
        lean = model.leaning("category", d.category.value, texts)
        threshold = model.thresholds["answer" if category is Category.UNKNOWN else "category"]
        out = replace(out, category=InferredCategory(
            d.category, d.category_confidence, threshold, tuple(lines[i] for i in lean),
            rule_category=root.category, model="text"))
    if (d.category_changed or d.action_changed) and found.action is None:
        # A changed category's action is always the one decided here (``Inference.applied``
        # would otherwise give the category's answered action); an action the lines already
        # named (a remedy, the config model) stands.
        out = replace(out, action=InferredAction(d.action, action, d.action_confidence,
                                                 (TEXT_CUE,)))
    return out


__all__ = ["FIRM", "NEVER", "TEXT_CUE", "TextDecision", "beyond_evidence", "contested", "decide",
           "read_by_number", "read_text"]
