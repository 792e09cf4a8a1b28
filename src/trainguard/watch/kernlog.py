"""Follow the kernel logs of cluster nodes and classify their new lines as evidence.

``trainguard watch --kernel-log SPEC`` reads, per poll, what was appended to each log since the
last one and runs it through the evidence classifier. A spec is ``NODE=PATH`` (that file is
NODE's kernel log), a file (node from its name: ``logs/node03.log``; from each line's host for a
generic name like ``kern.log``) or a directory (each regular file directly in it, files appearing
later included). ``journal:`` before a spec, or a name ending in ``.export``, marks the output of
``journalctl -o export``, which :class:`JournalExportReader` turns into one text line per message.

The service saves :meth:`KernelLogTailer.position` and restores it after a restart, so lines it
already reported are not reported again and lines written while it was down are not lost:

1. each file resumes at the byte after the last line (text) or entry (journal) it classified;
2. a file replaced or truncated meanwhile (rotation) is read from its start;
3. in a directory, a rotated file under its new name (``kern.log`` -> ``kern.log.1``: same inode)
   resumes where the old name stopped instead of being read again; compressed and hidden files
   are never read.

Delivery is at-least-once: events of a poll whose position was not saved come again.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from trainguard.errors import ConfigError
from trainguard.evidence.events import FailureEvent
from trainguard.evidence.rules import RuleSet
from trainguard.evidence.scanner import host_from_path, scan_bytes
from trainguard.filetail import FileTail, read_position

log = logging.getLogger(__name__)

LogFormat = Literal["text", "journal-export"]

READ_MAX_BYTES = 4 << 20
"""Bytes read from one file per poll: a huge backlog arrives over several polls instead of
blocking the service loop."""
MAX_FIELD_BYTES = 16 << 20
"""A journal field longer than this is taken for garbage (journald caps entries far below)."""

_JOURNAL_PREFIX = "journal:"
_EXPORT_NAME = re.compile(r"\.export(?:\.\d+)?$")  # node03.export, rotated: node03.export.1
_COMPRESSED = (".gz", ".bz2", ".xz", ".zst", ".lz4", ".zip")
_NODE_OK = re.compile(r"^[A-Za-z0-9][\w.-]{0,252}$")
_FIELD_NAME = re.compile(rb"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_RECENT_WARNINGS = 50


@dataclass(frozen=True, slots=True)
class LogSource:
    """One ``--kernel-log`` spec, parsed.

        >>> LogSource(Path("logs/node03.log"), "node03").format
        'text'
    """

    path: Path
    node: str | None = None
    """The node whose kernel log this is (every event gets it); None: each line's own host."""
    format: LogFormat = "text"
    """``text`` or ``journal-export``; for a directory, ``text`` decides per file by its name."""
    directory: bool = False
    """Follow every regular file directly in ``path``, including ones created later."""

    def __post_init__(self) -> None:
        if self.format not in ("text", "journal-export"):
            raise ValueError(f"kernel_log.format must be 'text' or 'journal-export', "
                             f"got {self.format!r}")
        if self.node is not None and not _NODE_OK.match(self.node):
            raise ValueError(f"kernel_log.node is not a host name: {self.node!r}")


def parse_sources(specs: Sequence[str]) -> list[LogSource]:
    """Parse ``--kernel-log`` specs; a malformed one raises :class:`ConfigError`.

    A file that does not exist yet is accepted with a warning (it is read once it appears); a
    spec ending in ``/`` must be an existing directory.

        >>> [(s.node, s.format) for s in parse_sources(["node03=/var/log/kern.log"])]
        [('node03', 'text')]
    """
    sources: list[LogSource] = []
    seen: set[str] = set()
    for spec in specs:
        source = _parse_spec(spec)
        key = os.path.abspath(source.path)
        if key in seen:
            raise ConfigError(f"kernel log {str(source.path)!r} is listed twice")
        seen.add(key)
        sources.append(source)
    return sources


def _parse_spec(spec: str) -> LogSource:
    text = spec.strip()
    journal = False
    if text.startswith(_JOURNAL_PREFIX):
        journal, text = True, text[len(_JOURNAL_PREFIX):].strip()
    node: str | None = None
    head, sep, rest = text.partition("=")
    if sep and "/" not in head:  # NODE=PATH; a path with '=' in it needs a '/' before the '='
        node, text = head.strip(), rest.strip()
        if not node:
            raise ConfigError(f"kernel log spec {spec!r}: empty node name before '='")
        if not _NODE_OK.match(node):
            raise ConfigError(f"kernel log spec {spec!r}: {node!r} is not a host name")
        if text.startswith(_JOURNAL_PREFIX):
            journal, text = True, text[len(_JOURNAL_PREFIX):].strip()
    if not text:
        raise ConfigError(f"kernel log spec {spec!r}: no path (use NODE=PATH, PATH or DIR)")
    path = Path(text).expanduser()
    fmt: LogFormat = "journal-export" if journal else "text"
    if path.is_dir():
        return LogSource(path, node, fmt, directory=True)
    if text.endswith("/"):
        raise ConfigError(f"kernel log directory {text!r} does not exist")
    if path.exists() and not path.is_file():
        raise ConfigError(f"kernel log {text!r} is not a regular file")
    if not path.exists():
        log.warning("kernel log %s does not exist (yet); it is read once it appears", path)
    if _EXPORT_NAME.search(path.name):
        fmt = "journal-export"
    return LogSource(path, node if node is not None else _node_from_name(path), fmt)


def _node_from_name(path: Path) -> str | None:
    """``node03.log`` -> ``node03``; a generic name (``kern.log``) names no node."""
    name = _EXPORT_NAME.sub("", path.name)
    if not name:
        return None
    node = host_from_path(str(path.with_name(name)), str(path.parent))
    return node if node is not None and _NODE_OK.match(node) else None


class JournalExportReader:
    """Incremental parser of the journal export format (``journalctl -o export``).

    Entries are separated by an empty line; a field is ``KEY=value\\n`` or, for binary or
    multi-line values, ``KEY\\n`` + 64-bit little-endian length + the bytes + ``\\n``. Bytes are
    fed as they arrive; a partial entry waits for the rest. Garbage (a field line neither
    ``KEY=value`` nor followed by a plausible length) is logged, counted in :attr:`garbage` and
    skipped to the next empty line; it never raises.

        >>> r = JournalExportReader()
        >>> r.feed(b"MESSAGE=hi\\n_HOSTNAME=n1\\nDATA\\n\\x03\\0\\0\\0\\0\\0\\0\\0a\\nb\\n")
        []
        >>> r.feed(b"\\n")
        [{'MESSAGE': b'hi', '_HOSTNAME': b'n1', 'DATA': b'a\\nb'}]
    """

    def __init__(self, *, where: str = "<journal>", offset: int = 0, skipping: bool = False,
                 max_field_bytes: int = MAX_FIELD_BYTES) -> None:
        self.where = where
        """Name for warnings (the file)."""
        self.garbage = 0
        """Stretches of malformed data skipped so far."""
        self._buf = bytearray()
        self._base = offset  # stream offset of _buf[0], for warnings
        self._pos = 0  # where the next field starts in _buf
        self._fields: dict[str, bytes] = {}
        self._skipping = skipping
        self._max_field = max_field_bytes

    @property
    def pending(self) -> int:
        """Bytes fed that belong to no complete entry yet (they are kept for the next feed)."""
        return len(self._buf)

    @property
    def skipping(self) -> bool:
        """Between garbage (or a start mid-entry) and the next empty line."""
        return self._skipping

    def feed(self, data: bytes) -> list[dict[str, bytes]]:
        """Append ``data``; return the entries it completed, in order."""
        self._buf += data
        entries: list[dict[str, bytes]] = []
        while self._skip() if self._skipping else self._step(entries):
            pass
        return entries

    def _consume(self, end: int) -> None:
        """Forget ``_buf[:end]`` (a finished entry or skipped garbage)."""
        del self._buf[:end]
        self._base += end
        self._pos = 0

    def _skip(self) -> bool:
        """Drop bytes up to and including the next empty line; False: wait for more."""
        i = self._buf.find(b"\n\n", self._pos)
        if i < 0:
            # A trailing newline is kept: with the next byte it may be the empty line.
            self._consume(len(self._buf) - (1 if self._buf.endswith(b"\n") else 0))
            return False
        self._consume(i + 2)
        self._skipping = False
        return True

    def _bad(self, why: str) -> bool:
        self.garbage += 1
        log.warning("%s: malformed journal export data at byte %d (%s); skipped to the next "
                    "entry", self.where, self._base + self._pos, why)
        self._fields = {}
        self._skipping = True
        return True

    def _step(self, entries: list[dict[str, bytes]]) -> bool:
        """Parse one field or entry end at ``_pos``; False: wait for more data."""
        buf, pos = self._buf, self._pos
        nl = buf.find(b"\n", pos)
        if nl < 0:
            if len(buf) - pos > self._max_field + 64:
                return self._bad("line without end")
            return False
        if nl == pos:  # the empty line that ends an entry
            if self._fields:
                entries.append(self._fields)
                self._fields = {}
            self._consume(nl + 1)
            return True
        eq = buf.find(b"=", pos, nl)
        name = bytes(buf[pos:eq if eq >= 0 else nl])
        if not _FIELD_NAME.match(name):
            return self._bad(f"not a field: {bytes(buf[pos:min(nl, pos + 40)])!r}")
        if eq >= 0:
            self._fields.setdefault(name.decode("ascii"), bytes(buf[eq + 1:nl]))
            self._pos = nl + 1
            return True
        if len(buf) < nl + 9:
            return False
        size = int.from_bytes(buf[nl + 1:nl + 9], "little")
        if size > self._max_field:
            return self._bad(f"field {name.decode('ascii')} of {size} bytes")
        end = nl + 9 + size
        if len(buf) <= end:
            return False
        if buf[end] != ord("\n"):
            return self._bad(f"field {name.decode('ascii')} not followed by a newline")
        self._fields.setdefault(name.decode("ascii"), bytes(buf[nl + 9:end]))
        self._pos = end + 1
        return True


def entry_lines(entry: Mapping[str, bytes]) -> list[str]:
    """One journal entry as ``journalctl -o short-iso-precise``-like lines, one per line of its
    MESSAGE, so the classifier's prefix parser reads the time (UTC) and host.

        >>> entry_lines({"__REALTIME_TIMESTAMP": b"1714557600123456", "_HOSTNAME": b"node07",
        ...              "MESSAGE": b"NVRM: Xid 79"})
        ['2024-05-01T10:00:00.123456+00:00 node07 kernel: NVRM: Xid 79']
    """
    host = _token(entry.get("_HOSTNAME")) or "-"  # "-": no host for the prefix parser
    ident = _token(entry.get("SYSLOG_IDENTIFIER")) or "kernel"
    prefix = f"{host} {ident}: "
    stamp = _iso_utc(entry.get("__REALTIME_TIMESTAMP"))
    if stamp is not None:
        prefix = f"{stamp} {prefix}"
    message = entry.get("MESSAGE", b"").decode("utf-8", "replace").removesuffix("\n")
    return [prefix + line.removesuffix("\r") for line in message.split("\n")]


def _token(value: bytes | None) -> str:
    """A header word: no whitespace, or the line's prefix would not parse."""
    if not value:
        return ""
    return "_".join(value.decode("utf-8", "replace").split())


def _iso_utc(value: bytes | None) -> str | None:
    """``__REALTIME_TIMESTAMP`` (microseconds since the epoch) as ISO-8601 UTC."""
    if value is None or not value.isdigit():
        return None
    try:
        dt = _EPOCH + timedelta(microseconds=int(value))
    except OverflowError:
        return None
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%f") + "+00:00"


class JournalTail:
    """Incremental reader of one journal export file; the same contract as :class:`FileTail`.

    :meth:`read` returns the text lines of the entries completed since the last read (see
    :func:`entry_lines`), numbered consecutively from the first line this tail produced; the
    position is the byte after the last complete entry.

        >>> JournalTail(Path("/nonexistent")).read()
        (b'', 1)
    """

    def __init__(self, path: Path, *, from_end: bool = False) -> None:
        self.path = path
        self._inode: int | None = None
        self._offset = 0  # byte after the last complete entry (or skipped garbage)
        self._next_line = 1
        self._reader = JournalExportReader(where=str(path))
        self._garbage_before = 0  # garbage counted by readers replaced since
        if from_end:
            self._skip_existing()

    def _skip_existing(self) -> None:
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                size = st.st_size
                f.seek(max(0, size - 2))
                last = f.read(2)
        except OSError:
            return
        self._inode = st.st_ino
        # Ending mid-entry: skip the rest of that entry; a final newline may begin the empty
        # line that ends it, so it is read again.
        mid_entry = size > 0 and last != b"\n\n" and not (size == 1 and last == b"\n")
        self._offset = size - (1 if mid_entry and last.endswith(b"\n") else 0)
        self._reader = JournalExportReader(where=str(self.path), offset=self._offset,
                                           skipping=mid_entry)

    @property
    def garbage(self) -> int:
        """Stretches of malformed data skipped in this file."""
        return self._garbage_before + self._reader.garbage

    def _restart(self, offset: int, *, skipping: bool) -> None:
        self._garbage_before += self._reader.garbage
        self._offset = offset
        self._reader = JournalExportReader(where=str(self.path), offset=offset,
                                           skipping=skipping)

    def position(self) -> dict[str, int]:
        """Where the next read starts, as JSON-ready ints for :meth:`restore`; ``skip`` is 1
        while skipping to the end of a malformed (or, after ``from_end``, cut) entry."""
        return {"inode": self._inode or 0, "offset": self._offset, "line": self._next_line,
                "skip": int(self._reader.skipping)}

    def restore(self, position: Mapping[str, object]) -> None:
        """Resume from a saved :meth:`position`; a file replaced or shorter since is read from its
        start on the next :meth:`read`. Raises ValueError for a malformed position."""
        inode, offset, line, skip = read_position(position, "skip")
        self._inode = inode or None
        self._next_line = line
        self._restart(offset, skipping=bool(skip))

    def read(self, max_bytes: int = READ_MAX_BYTES) -> tuple[bytes, int]:
        """Text lines (joined, each ending in ``\\n``) of newly completed entries, and the number
        of the first."""
        read_from = self._offset + self._reader.pending
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                if (self._inode is not None and st.st_ino != self._inode) \
                        or st.st_size < read_from:
                    log.debug("%s was truncated or replaced; reading it from the start",
                              self.path)
                    self._restart(0, skipping=False)
                    self._next_line, read_from = 1, 0
                self._inode = st.st_ino
                if st.st_size == read_from:
                    return b"", self._next_line
                f.seek(read_from)
                data = f.read(max_bytes)
        except OSError:
            return b"", self._next_line
        entries = self._reader.feed(data)
        self._offset = read_from + len(data) - self._reader.pending
        lines = [line for entry in entries for line in entry_lines(entry)]
        first = self._next_line
        self._next_line += len(lines)
        return "".join(f"{line}\n" for line in lines).encode(), first


_Tail = FileTail | JournalTail


@dataclass(slots=True)
class _Followed:
    """One file being read, and the source it belongs to."""

    source: LogSource
    format: LogFormat
    node: str | None
    tail: _Tail


class KernelLogTailer:
    """New failure evidence in the kernel logs of :func:`parse_sources`, poll by poll::

        tailer = KernelLogTailer(parse_sources(["node03=/var/log/kern.log"]), load_rules(),
                                 from_end=True)
        tailer.restore(json.loads(state.read_text()))  # after a restart
        while running:
            handle(tailer.poll())
            state.write_text(json.dumps(tailer.position()))

    ``from_end``: a file with no restored position that exists at the first :meth:`poll` starts
    at its end there (a first start does not report years of history); files appearing later are
    read whole. Restored files resume exactly where they stopped.
    """

    def __init__(self, sources: Sequence[LogSource], rules: RuleSet, *, from_end: bool = False,
                 max_bytes_per_poll: int = READ_MAX_BYTES) -> None:
        if max_bytes_per_poll <= 0:
            raise ValueError("kernel_log.max_bytes_per_poll must be > 0")
        keys = [os.path.abspath(s.path) for s in sources]
        if len(set(keys)) != len(keys):
            raise ValueError("kernel log sources must not repeat a path")
        self._sources = tuple(sources)
        self._explicit = frozenset(os.path.abspath(s.path) for s in sources if not s.directory)
        self._rules = rules
        self._from_end = from_end
        self._max_bytes = max_bytes_per_poll
        self._files: dict[str, _Followed] = {}  # by absolute path
        self._started = False
        self._unlistable: set[str] = set()
        self.warnings = 0
        """Problems seen so far (malformed journal data, unreadable directories, positions
        that could not be restored); each is also logged."""
        self.recent_warnings: deque[str] = deque(maxlen=_RECENT_WARNINGS)
        """The latest of them, as one-line messages."""
        self._garbage_seen = 0

    @property
    def files(self) -> list[Path]:
        """The files followed now (directory members included)."""
        return [f.tail.path for f in self._files.values()]

    def _warn(self, message: str) -> None:
        log.warning("%s", message)
        self.warnings += 1
        self.recent_warnings.append(message)

    def _format_of(self, source: LogSource, path: Path) -> LogFormat:
        if source.directory and _EXPORT_NAME.search(path.name):
            return "journal-export"
        return source.format

    def _follow(self, source: LogSource, path: Path, *, from_end: bool) -> _Followed:
        fmt = self._format_of(source, path)
        node = source.node
        if source.directory and node is None:
            node = _node_from_name(path)
        tail: _Tail = JournalTail(path, from_end=from_end) if fmt == "journal-export" \
            else FileTail(path, from_end=from_end)
        return _Followed(source, fmt, node, tail)

    def _source_of(self, key: str) -> LogSource | None:
        """The source a file (absolute path) belongs to: listed itself, or in a directory."""
        parent = os.path.dirname(key)
        for source in self._sources:
            if os.path.abspath(source.path) == key and not source.directory:
                return source
        for source in self._sources:
            if source.directory and os.path.abspath(source.path) == parent \
                    and _is_member(os.path.basename(key)):
                return source
        return None

    def poll(self) -> list[FailureEvent]:
        """Events in the lines written since the last poll, across all sources (file order)."""
        first, self._started = not self._started, True
        start_at_end = first and self._from_end
        for source in self._sources:
            if source.directory:
                self._list_directory(source, start_at_end)
            else:
                key = os.path.abspath(source.path)
                if key not in self._files:
                    self._files[key] = self._follow(source, source.path, from_end=start_at_end)
        events: list[FailureEvent] = []
        for followed in self._files.values():
            data, first_line = followed.tail.read(self._max_bytes)
            if not data:
                continue
            node = followed.node
            found = scan_bytes(data, self._rules, path=str(followed.tail.path),
                               first_line=first_line, host_hint=node)
            # The file *is* that node's kernel log, whatever host a line names.
            events.extend(replace(ev, host=node) if node is not None else ev for ev in found)
        self._count_garbage()
        return events

    def _count_garbage(self) -> None:
        total = sum(f.tail.garbage for f in self._files.values()
                    if isinstance(f.tail, JournalTail))
        if total > self._garbage_seen:
            # JournalExportReader has logged each one already.
            self.warnings += total - self._garbage_seen
            self.recent_warnings.append(f"{total - self._garbage_seen} malformed journal "
                                        "export stretch(es) skipped")
        self._garbage_seen = total

    def _list_directory(self, source: LogSource, start_at_end: bool) -> None:
        """Follow new files of a directory, drop vanished ones, and let a rotated file keep its
        position under its new name.

        1. list the regular, uncompressed, visible files and their inodes;
        2. a name not followed yet, or now holding another inode, whose inode a followed file
           last had (``kern.log`` renamed ``kern.log.1``) resumes from that file's position;
        3. other new names start at their end on the first poll with ``from_end``, else at 0;
        4. followed names gone from the directory are dropped.
        """
        root = os.path.abspath(source.path)
        try:
            listing = _regular_files(root)
        except OSError as exc:
            if root not in self._unlistable:
                self._unlistable.add(root)
                self._warn(f"cannot list kernel log directory {root}: "
                           f"{exc.strerror or exc}")
            return
        self._unlistable.discard(root)
        mine = {k: f for k, f in self._files.items() if f.source is source}
        last = {k: f.tail.position() for k, f in mine.items()}
        by_inode = {pos["inode"]: (mine[k].format, pos) for k, pos in last.items()
                    if pos["inode"]}
        for key, inode in listing.items():
            if key in self._explicit:
                continue
            path = Path(key)
            fmt = self._format_of(source, path)
            moved = by_inode.get(inode)
            if moved is not None and moved[0] != fmt:
                moved = None
            if key in mine and last[key]["inode"] in (0, inode):
                continue
            if key in mine and moved is None:
                continue  # replaced in place: its tail reads the new file from the start
            new = self._follow(source, path, from_end=start_at_end and moved is None)
            if moved is not None:
                new.tail.restore(moved[1])
            self._files[key] = new
        for key in mine:
            if key not in listing:
                del self._files[key]

    def position(self) -> dict[str, Any]:
        """Where each followed file's next read starts, JSON-ready, keyed by absolute path."""
        return {key: {"format": f.format, **f.tail.position()} for key, f in self._files.items()}

    def restore(self, position: Mapping[str, Any]) -> None:
        """Resume from a saved :meth:`position`. Entries for files no source covers, of another
        format, or malformed are ignored with a warning; this never raises."""
        if not isinstance(position, Mapping):
            self._warn(f"kernel log position is not a mapping ({type(position).__name__}); "
                       "ignored")
            return
        for key, saved in position.items():
            source = self._source_of(os.path.abspath(str(key)))
            if source is None:
                self._warn(f"kernel log position for {key!r}: no --kernel-log source covers it; "
                           "ignored")
                continue
            path = Path(os.path.abspath(str(key)))
            fmt = self._format_of(source, path)
            if not isinstance(saved, Mapping) or saved.get("format", fmt) != fmt:
                self._warn(f"kernel log position for {key!r}: not a {fmt} position; ignored")
                continue
            followed = self._follow(source, path, from_end=False)
            try:
                followed.tail.restore(saved)
            except ValueError as exc:
                self._warn(f"kernel log position for {key!r}: {exc}; ignored")
                continue
            self._files[str(path)] = followed


def _is_member(name: str) -> bool:
    """A directory entry worth following: not hidden, not a compressed (rotated) archive."""
    return not name.startswith(".") and not name.lower().endswith(_COMPRESSED)


def _regular_files(root: str) -> dict[str, int]:
    """Absolute path -> inode of the regular files directly in ``root`` that are followed."""
    found: dict[str, int] = {}
    with os.scandir(root) as it:
        for entry in it:
            if not _is_member(entry.name):
                continue
            try:
                st = entry.stat()  # follows symlinks, like reading the file does
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                found[os.path.join(root, entry.name)] = st.st_ino
    return dict(sorted(found.items()))


__all__ = [
    "MAX_FIELD_BYTES",
    "READ_MAX_BYTES",
    "JournalExportReader",
    "JournalTail",
    "KernelLogTailer",
    "LogFormat",
    "LogSource",
    "entry_lines",
    "parse_sources",
]
