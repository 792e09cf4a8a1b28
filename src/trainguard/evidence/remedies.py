"""The fix the evidence itself names, where a rule's default action would send the operator the
wrong way. Three documented cases, all ``fix_config``:

1. **A hang before training started.** PyTorch numbers the collectives of a process group from
   1 and its watchdog prints the number of the one that timed out (``WorkNCCL(SeqNum=3, ...)``,
   or ``... detected by watchdog at work: 3``). Setting up DDP, FSDP or DeepSpeed and a
   ``barrier()`` take only the first few. A timeout among them means the ranks never reached
   the training loop together: one rank was still doing single-rank work (tokenizing or
   downloading a dataset, an evaluation pass, loading a file) while the others waited, or the
   timeout is set shorter than that work. Restarting replays the same start-up and hangs again;
   the fix is a setting (a longer ``timeout`` for the process group, e.g. ``ddp_timeout``, or
   preparing the data before the group is created). Every timeout line in the incident has to
   name an early collective: one later number means training had been running.

   Likewise a watchdog whose own line says it was set far below PyTorch's defaults (``WorkNCCL(...,
   Timeout(ms)=60000)``, Gloo's ``Timed out waiting 60000ms``; the defaults are 10 minutes for
   NCCL and 30 for other back ends): a rank that validates, caches a dataset or consolidates a
   checkpoint alone for a minute or two trips it, and a rerun trips it again. Every timeout line
   that names its limit has to name one under :data:`SHORT_TIMEOUT_MS`.
2. **The installation does not match the hardware or itself.** The dynamic loader's
   ``cannot open shared object file`` and ``undefined symbol:`` / ``version `GLIBCXX_...' not
   found``, CUDA's ``invalid device function`` and ``no kernel image is available`` (the kernels
   were not built for this GPU's architecture), ``CUDA driver version is insufficient``, NVML's
   ``Driver/library version mismatch`` and PyTorch's ``... is not compatible with the current
   PyTorch installation`` all say that a library, a build or a driver is of the wrong version.
   Where the rule blames the code (``fix_code``), the fix is to install or build the right
   versions instead: a setting of the environment, not a change to the program.
3. **A network that was never set up.** NCCL's return codes split a failed *system call* or
   *internal check* (``ncclSystemError`` "unhandled system error", ``ncclInternalError``
   "internal error") from a failed *transfer* (an IB work completion with an error status, an
   async port event, a connection reset or timed out mid-run, ``ncclRemoteError``). NCCL's
   troubleshooting guide says an interface that is up but cannot reach the other nodes makes
   NCCL "fail during the init functions", and points at ``NCCL_SOCKET_IFNAME``. Three more
   forms name the setting outright: a peer at a loopback address (``connect [127.0.1.1]:...
   Connection refused``: the host name resolves to loopback, set ``GLOO_SOCKET_IFNAME`` /
   ``NCCL_SOCKET_IFNAME``), a RoCE GID that is link-local (``localGid fe80::...``: not routed
   between subnets, set ``NCCL_IB_GID_INDEX``), and no usable socket interface at all. Where
   the rule says ``check_network``, such evidence with no failed transfer beside it is
   ``fix_config``: the fabric was never used, the settings chose the wrong path.

All functions are pure.

    >>> evidence_remedy(Category.NCCL_TIMEOUT_HANG, Action.RESTART_JOB,
    ...     ["Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE)"])
    Remedy(action=<Action.FIX_CONFIG: 'fix_config'>, reason='early_collective_timeout')
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from trainguard.evidence.events import CUE_CHARS
from trainguard.evidence.rules import Pattern, compile_re2
from trainguard.taxonomy import Action, Category

EARLY_COLLECTIVES = 5
"""Collectives a process group issues while being set up (parameter checks and broadcasts of
DDP/FSDP/DeepSpeed, a first barrier): a timeout at or below this number came before training."""
SHORT_TIMEOUT_MS = 300_000
"""A collective timeout set below this (half the shortest default PyTorch has used, 10 minutes
for NCCL) is shorter than ordinary single-rank work between collectives takes."""
EARLY_TIMEOUT = "early_collective_timeout"
SHORT_TIMEOUT = "short_collective_timeout"
INSTALL_MISMATCH = "install_mismatch"
NETWORK_SETUP = "network_setup"

_SEQ = compile_re2(r"WorkNCCL\(\s*SeqNum=(\d+)|detected by watchdog at work: (\d+)")
_LIMIT = compile_re2(r"Timeout\(ms\)=(\d+)|[Tt]imed out waiting (\d+) ?ms\b")
_MISMATCH = compile_re2(
    r"cannot open shared object file|undefined symbol: |version `[A-Z_]+[0-9.]*' not found|"
    r"invalid device function|no kernel image is available|"
    r"driver version is insufficient for (?:the )?CUDA runtime|"
    r"Driver/library version mismatch|is not compatible with the current PyTorch installation",
    ignore_case=True)
_SETUP_CODE = compile_re2(
    r"ncclSystemError|ncclInternalError|unhandled system error|"
    r"NCCL[^\n]*\binternal error\b|Internal check failed", ignore_case=True)
_NAMED_SETTING = compile_re2(
    r"(?:connect\w*|remote|peer)\W[^\n]{0,40}?\b127\.\d{1,3}\.\d{1,3}\.\d{1,3}\b|"
    r"\b(?:local|remote)Gids?\s*[:=]?\s*fe80:|no socket interface found|"
    r"No usable listening interface|Socket creation failed|is neither AF_INET",
    ignore_case=True)
_TRANSFER_FAILED = compile_re2(
    r"Got completion from peer|Got async (?:error )?event|vendor err \d+|ncclRemoteError|"
    r"remote process exited|Connection reset by peer|Connection timed out|"
    r"Network is unreachable|No route to host", ignore_case=True)


@dataclass(frozen=True, slots=True)
class Remedy:
    """The action the evidence names and which of the cases above says so."""

    action: Action
    reason: str


def _numbers(rx: Pattern, lines: Iterable[str]) -> list[int]:
    """The number each line's first match of ``rx`` names (its first group that matched), in
    line order; lines without a match are skipped."""
    out: list[int] = []
    for text in lines:
        m = rx.search(text[:CUE_CHARS])
        if m is not None:
            out.append(int(m.group(1) or m.group(2)))
    return out


def timeout_sequence_numbers(lines: Iterable[str]) -> list[int]:
    """The collective numbers the watchdog timeout lines name, in line order."""
    return _numbers(_SEQ, lines)


def early_timeout(lines: Iterable[str]) -> bool:
    """Some timeout line names its collective and every one named is a set-up collective."""
    seqs = timeout_sequence_numbers(lines)
    return bool(seqs) and max(seqs) <= EARLY_COLLECTIVES


def timeout_limits_ms(lines: Iterable[str]) -> list[int]:
    """The limits (ms) the collective timeout lines say they were set to, in line order."""
    return _numbers(_LIMIT, lines)


def short_timeout(lines: Iterable[str]) -> bool:
    """Some timeout line names its limit and every limit named is under SHORT_TIMEOUT_MS."""
    limits = timeout_limits_ms(lines)
    return bool(limits) and max(limits) < SHORT_TIMEOUT_MS


def install_mismatch(lines: Iterable[str]) -> bool:
    """A line says a library, a build or a driver is of the wrong version."""
    return any(_MISMATCH.search(text[:CUE_CHARS]) is not None for text in lines)


def network_setup(lines: Iterable[str]) -> bool:
    """A line names a network setting (loopback peer, link-local GID, no socket interface), or
    NCCL failed a system call or internal check while no transfer failed (case 3 above)."""
    texts = [text[:CUE_CHARS] for text in lines]
    if any(_NAMED_SETTING.search(t) is not None for t in texts):
        return True
    return any(_SETUP_CODE.search(t) is not None for t in texts) and \
        not any(_TRANSFER_FAILED.search(t) is not None for t in texts)


def evidence_remedy(category: Category, action: Action, lines: Sequence[str]) -> Remedy | None:
    """``fix_config`` when the incident's ``lines`` name one of the cases above and the rule's
    ``action`` for ``category`` says otherwise; else None."""
    if action is Action.FIX_CONFIG:
        return None
    if category is Category.NCCL_TIMEOUT_HANG and early_timeout(lines):
        return Remedy(Action.FIX_CONFIG, EARLY_TIMEOUT)
    if category is Category.NCCL_TIMEOUT_HANG and short_timeout(lines):
        return Remedy(Action.FIX_CONFIG, SHORT_TIMEOUT)
    if action is Action.FIX_CODE and install_mismatch(lines):
        return Remedy(Action.FIX_CONFIG, INSTALL_MISMATCH)
    if action is Action.CHECK_NETWORK and network_setup(lines):
        return Remedy(Action.FIX_CONFIG, NETWORK_SETUP)
    return None


__all__ = ["EARLY_COLLECTIVES", "EARLY_TIMEOUT", "INSTALL_MISMATCH", "NETWORK_SETUP",
           "SHORT_TIMEOUT", "SHORT_TIMEOUT_MS", "Remedy", "early_timeout", "evidence_remedy",
           "install_mismatch", "network_setup", "short_timeout", "timeout_limits_ms",
           "timeout_sequence_numbers"]
