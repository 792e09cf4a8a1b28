"""Parse the prefix of one log line: its time, host, rank and GPU.

Handles the formats that GPU-cluster logs arrive in:

1. syslog RFC 3164 / journalctl short:  ``Nov 21 12:01:02 node17 kernel: ...`` (no year)
2. syslog RFC 5424:                     ``<3>1 2026-11-21T12:01:02.1Z node17 kernel - - - ...``
3. ISO-8601 (rsyslog, journalctl -o short-iso, Python logging):
                                        ``2026-11-21T12:01:02.123+00:00 node17 kernel: ...``
                                        ``[2026-11-21 12:01:02,123] torch.distributed...``
4. ``dmesg -T``:                        ``[Sat Nov 21 12:01:02 2026] NVRM: ...``
5. ``dmesg`` (seconds since boot):      ``[ 1234.567890] NVRM: ...``  -> kept relative
6. glog (PyTorch C++):                  ``[rank3]:[E1121 12:01:02.123456 1234 file.cpp:10] ...``

and the rank / host markers that launchers prepend (``[rank3]:``, ``[default3]:``, ``3: `` from
``srun -l``, ``[1,3]<stderr>:`` from mpirun, NCCL's ``host:pid:tid [dev]``).

Only lines that already matched a failure signature are parsed, so clarity beats speed here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from trainguard.evidence.events import TimeKind

_MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}


@dataclass(frozen=True, slots=True)
class LinePrefix:
    """What the prefix of a line says about where and when it was written."""

    time: float | None = None
    time_kind: TimeKind = TimeKind.NONE
    host: str | None = None
    rank: int | None = None
    gpu_index: int | None = None


_RFC5424 = re.compile(
    r"^(?:<\d{1,3}>)?\d{1,2} (?P<ts>\d{4}-\d\d-\d\dT[\d:.]+(?:Z|[+-]\d\d:?\d\d)?) (?P<host>\S+) ")
_ISO = re.compile(
    r"^\[?(?P<ts>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)\]?"
    r"(?: (?P<host>[A-Za-z][\w.-]*) (?=\S+?(?:\[\d+\])?: ))?")
_RFC3164 = re.compile(
    r"^(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(?P<day>\d{1,2}) "
    r"(?P<hms>\d\d:\d\d:\d\d)(?:\.(?P<frac>\d+))? (?P<host>\S+) ")
_DMESG_T = re.compile(
    r"^\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?P<mon>\w{3}) +(?P<day>\d{1,2}) "
    r"(?P<hms>\d\d:\d\d:\d\d) (?P<year>\d{4})\]")
_DMESG_REL = re.compile(r"^\[ *(?P<sec>\d+\.\d+)\]")
# glog / c10 logging: "E1121 12:01:02.123456 1234 file.cpp:10]"; PyTorch >= 2.4 prints
# "E321 02:07:08.408271257 file.cpp:607]" (unpadded month, nanoseconds, no thread id).
_GLOG = re.compile(
    r"\[?[IWEF](?P<md>\d{3,4}) (?P<hms>\d\d:\d\d:\d\d)(?:\.(?P<frac>\d+))?"
    r"(?: +\d+)? [\w./-]+:\d+\]")

_RANK_PREFIXES = (
    re.compile(r"^\[(?:rank|Rank |RANK )(?P<rank>\d+)\]:?"),
    re.compile(r"^\[default(?P<rank>\d+)\]:"),
    re.compile(r"^\[\d+,(?P<rank>\d+)\]<std(?:out|err)>:"),
    re.compile(r"^(?P<rank>\d{1,5}): "),
)
_NCCL_HOST = re.compile(
    r"(?:^|\s|\]:?)(?P<host>[A-Za-z][\w.-]*):\d+:\d+ \[(?P<dev>\d+)\] (?:[\w/.-]+:\d+ )?NCCL ")
# torchrun's prefix after a collector's timestamp: "2026-...Z [rank5]: ..."
_RANK_PREFIX_INNER = re.compile(r"(?:^|\s)\[(?:rank|default)(?P<rank>\d+)\]:")
_RANK_ANYWHERE = re.compile(r"\[(?:Rank|rank) (?P<rank>\d+)\]|\brank(?:=| )(?P<rank2>\d+)\b")


_PREFIX_SEARCH_CHARS = 2048
_FRACTION = re.compile(r"(\.\d{6})\d+")


def _tz_or_utc(ts: str) -> str:
    ts = ts.replace(",", ".").replace(" ", "T", 1)
    ts = _FRACTION.sub(r"\1", ts)  # nanoseconds (kubectl, journald) -> microseconds
    if ts.endswith("Z"):
        return ts[:-1] + "+00:00"
    # "+0000" -> "+00:00" for fromisoformat on 3.11
    m = re.search(r"([+-]\d\d)(\d\d)$", ts)
    if m and ts[-5] in "+-":
        return ts[:-5] + m.group(1) + ":" + m.group(2)
    return ts


def parse_iso(ts: str) -> float | None:
    """ISO-8601 to unix seconds; naive times are taken as UTC."""
    try:
        dt = datetime.fromisoformat(_tz_or_utc(ts))
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def _from_parts(year: int, mon: int, day: int, hms: str, frac: str | None) -> float | None:
    try:
        h, m, s = (int(x) for x in hms.split(":"))
        dt = datetime(year, mon, day, h, m, s, tzinfo=UTC)
    except ValueError:
        return None
    extra = float("0." + frac) if frac else 0.0
    return dt.timestamp() + extra


def parse_prefix(line: str, year: int) -> LinePrefix:
    """Parse time, host, rank and GPU index from one line.

    ``year`` fills in formats that carry none (RFC 3164, glog); callers pass the file's year.
    """
    time: float | None = None
    kind = TimeKind.NONE
    host: str | None = None
    rank: int | None = None
    gpu_index: int | None = None

    rest = line
    for rx in _RANK_PREFIXES:
        m = rx.match(rest)
        if m:
            rank = int(m.group("rank"))
            rest = rest[m.end():].lstrip()
            break

    if m5 := _RFC5424.match(rest):
        time, host = parse_iso(m5.group("ts")), m5.group("host")
    elif mi := _ISO.match(rest):
        time, host = parse_iso(mi.group("ts")), mi.group("host")
    elif m3 := _RFC3164.match(rest):
        time = _from_parts(year, _MONTHS[m3.group("mon")], int(m3.group("day")),
                           m3.group("hms"), m3.group("frac"))
        host = m3.group("host")
    elif mt := _DMESG_T.match(rest):
        mon = _MONTHS.get(mt.group("mon"))
        if mon:
            time = _from_parts(int(mt.group("year")), mon, int(mt.group("day")),
                               mt.group("hms"), None)
    elif mr := _DMESG_REL.match(rest):
        return LinePrefix(float(mr.group("sec")), TimeKind.RELATIVE, None, rank, None)
    if time is None and (mg := _GLOG.search(rest[:200])):
        md = mg.group("md")
        time = _from_parts(year, int(md[:-2]), int(md[-2:]), mg.group("hms"),
                           (mg.group("frac") or "")[:6] or None)
    if time is not None:
        kind = TimeKind.ABSOLUTE
    if host is not None and (host.endswith(":") or not _valid_host(host)):
        host = None

    if rank is None and (mp := _RANK_PREFIX_INNER.search(line[:160])):
        rank = int(mp.group("rank"))
    # NCCL's "host:pid:tid [dev]" and "[Rank N]" sit near the start: looking at a bounded head
    # keeps the cost per line flat however long the line is.
    head = line[:_PREFIX_SEARCH_CHARS]
    if mn := _NCCL_HOST.search(head):
        host = host or mn.group("host")
        gpu_index = int(mn.group("dev"))
    if rank is None and (mr2 := _RANK_ANYWHERE.search(head)):
        rank = int(mr2.group("rank") or mr2.group("rank2"))
    return LinePrefix(time, kind, host, rank, gpu_index)


_HOST_OK = re.compile(r"^[A-Za-z0-9][\w.-]{0,252}$")


def _valid_host(host: str) -> bool:
    return bool(_HOST_OK.match(host)) and not host.isdigit()


def utc_year_of(ts: float) -> int:
    return datetime.fromtimestamp(ts, tz=UTC).year


def shift_year_if_future(ts: float, reference: float) -> float:
    """RFC 3164 lines carry no year: a December line read in January belongs to last year."""
    if ts - reference > timedelta(days=31).total_seconds():
        dt = datetime.fromtimestamp(ts, tz=UTC)
        try:
            return dt.replace(year=dt.year - 1).timestamp()
        except ValueError:  # Feb 29
            return ts
    return ts


__all__ = ["LinePrefix", "parse_iso", "parse_prefix", "shift_year_if_future", "utc_year_of"]
