"""Make text safe to hand to Slurm: drain reasons, node names, job names.

Every value reaches the Slurm tools as one argv element (never through a shell), so these functions
are a second line of defence: a drain reason is read back by operators in ``sinfo -R``, pasted into
shells and parsed by scripts, and Slurm's own text formats (``scontrol show``, the jobcomp file,
``sacct -c``) split on whitespace and ``=``.

    >>> sanitize_reason('xid 79; rm -rf / $(reboot) "quoted"\\nnext')
    'xid 79, rm -rf / (reboot) quoted next'
    >>> validate_node_name("gpu-017")
    'gpu-017'
    >>> job_name("llama 70b / run #3")
    'llama_70b_run_3'
"""

from __future__ import annotations

import re
import unicodedata

from trainguard.errors import ConfigError
from trainguard.recover.nodename import node_name_problem

DEFAULT_REASON = "trainguard"
"""The reason used when nothing printable is left."""

# Characters a shell or Slurm's key=value formats could misread, and what replaces them: quotes,
# backticks and ``$`` become spaces; the rest a look-alike so the reason still reads naturally.
_SUBSTITUTES = {
    '"': " ",
    "'": " ",
    "`": " ",
    "$": " ",
    ";": ",",
    "|": "/",
    "&": "+",
    "<": "(",
    ">": ")",
    "\\": "/",
}
# Any node Slurm may know (``trainguard nodes ... --slurm`` names nodes trainguard never ran on),
# so longer than a job's own node names (:mod:`trainguard.recover.nodename`), same characters.
_NODE_NAME_MAX = 255
_JOB_NAME_MAX = 100


def sanitize_reason(text: str, limit: int = 200) -> str:
    """A drain/down reason that is printable ASCII, one line, at most ``limit`` characters.

    1. Fold accented letters to ASCII (``é`` -> ``e``); other non-ASCII becomes a space.
    2. Newlines, tabs and control characters become spaces; shell/Slurm metacharacters are
       replaced (:data:`_SUBSTITUTES`).
    3. Runs of whitespace collapse to one space; the ends are stripped.
    4. Longer than ``limit``: cut and end with ``...``. Nothing left: ``"trainguard"``.
    """
    if limit < 4:
        raise ValueError("sanitize_reason: limit must be >= 4")
    folded = unicodedata.normalize("NFKD", text)
    chars: list[str] = []
    for ch in folded:
        if unicodedata.combining(ch):
            continue  # the accent of a decomposed letter
        if not (ch.isascii() and ch.isprintable()):
            chars.append(" ")
        else:
            chars.append(_SUBSTITUTES.get(ch, ch))
    reason = " ".join("".join(chars).split())
    if len(reason) > limit:
        reason = reason[: limit - 3].rstrip() + "..."
    return reason or DEFAULT_REASON


def validate_node_name(name: str) -> str:
    """``name`` unchanged if it is a valid Slurm node name, else :class:`ConfigError`.

    Allowed: ASCII letters, digits, ``-``, ``_`` and ``.``, starting with a letter or digit (a
    leading ``-`` could read as an option), at most 255 characters.
    """
    if node_name_problem(name, _NODE_NAME_MAX) is not None:
        raise ConfigError(
            f"invalid Slurm node name {name!r}: use letters, digits, '-', '_' and '.'"
        )
    return name


def job_name(text: str) -> str:
    """A safe ``sbatch --job-name``: letters, digits, ``-``, ``_`` and ``.`` only.

    Anything else (spaces included: the jobcomp file and ``sacct -c`` split on them) becomes one
    ``_``; at most 100 characters; never empty (``"trainguard"``).
    """
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    # never an option-looking ("-x") or hidden-file-looking (".x") name
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", folded).lstrip("_.-").rstrip("_")
    return name[:_JOB_NAME_MAX].rstrip("_") or DEFAULT_REASON


__all__ = ["DEFAULT_REASON", "job_name", "sanitize_reason", "validate_node_name"]
