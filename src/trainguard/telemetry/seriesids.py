"""Series ids for the rows of long-format record batches, with whole-column operations.

A long-format source (Parquet) holds one row per sample; a week of a 500-GPU cluster is a billion
rows and about 50,000 series. `SeriesIds` numbers each distinct (metric, labels) key once per
source: a batch's dictionary codes are combined into one integer per row (`_combine`), its
distinct values mapped to global value ids and looked up in a sorted table of known keys. Python
runs once per *new* series or label value, never per row.

    >>> ids = SeriesIds(["Hostname", "gpu"])                          # doctest: +SKIP
    >>> sid = ids.ids([(metric_codes, metric_values), (host_codes, hosts),  # doctest: +SKIP
    ...                (gpu_codes, gpus)])
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from trainguard.telemetry.frame import Entity, IntArray
from trainguard.telemetry.identity import IdentityConfig, identify

__all__ = ["SeriesIds"]

_KEY_BITS = 62
"""Bits of the int64 series key; beyond them new keys are matched in Python (many labels)."""
_LUT_MAX = 1 << 22
"""Largest batch-local code space mapped with a lookup table instead of a sort."""


class SeriesIds:
    """Series ids for the rows of long-format batches: `ids(columns)` per batch.

    `columns` are (codes, values) per key column, metric name first: int codes per row into
    `values` (a column's distinct values; None = label absent).
    """

    def __init__(self, label_names: Sequence[str], identity: IdentityConfig | None = None
                 ) -> None:
        self.label_names = list(label_names)
        self.identity = identity or IdentityConfig()
        n_cols = 1 + len(self.label_names)
        self._value_ids: list[dict[str | None, int]] = [{} for _ in range(n_cols)]
        self._values: list[list[str | None]] = [[] for _ in range(n_cols)]
        self._bits = [4] * n_cols
        self._gids = np.zeros((0, n_cols), dtype=np.int64)
        self._keys = np.zeros(0, dtype=np.int64)
        self._order = np.zeros(0, dtype=np.int64)
        self._by_tuple: dict[tuple[int, ...], int] = {}
        self.names: list[str | None] = []
        self.entities: list[Entity | None] = []
        self.dims: list[tuple[tuple[str, str], ...]] = []
        self.jobs: list[str | None] = []
        self.labels: list[dict[str, str]] = []
        self._has_node = np.zeros(0, dtype=bool)
        self._named = np.zeros(0, dtype=bool)

    def __len__(self) -> int:
        return len(self.names)

    @property
    def named(self) -> npt.NDArray[np.bool_]:
        """Per series id: it has a metric name."""
        if self._named.size != len(self.names):
            self._named = np.array([n is not None for n in self.names], dtype=bool)
        return self._named

    @property
    def has_node(self) -> npt.NDArray[np.bool_]:
        """Per series id: it has a metric name and a node (it can be placed)."""
        if self._has_node.size != len(self.names):
            self._has_node = np.array([e is not None and n is not None
                                       for e, n in zip(self.entities, self.names, strict=True)],
                                      dtype=bool)
        return self._has_node

    def ids(self, columns: Sequence[tuple[np.ndarray, Sequence[str | None]]]) -> IntArray:
        """The series id of every row."""
        codes, local = _combine([c for c, _ in columns], [max(len(v), 1) for _, v in columns])
        gids = np.empty_like(local)
        for c, (_, values) in enumerate(columns):
            table = np.array([self._value_id(c, v) for v in values] or [0], dtype=np.int64)
            gids[:, c] = table[local[:, c]]
        return self._lookup(gids)[codes]

    def _value_id(self, col: int, value: str | None) -> int:
        ids = self._value_ids[col]
        found = ids.get(value)
        if found is None:
            found = ids[value] = len(ids)
            self._values[col].append(value)
        return found

    def _encode(self, gids: IntArray) -> IntArray:
        key = np.zeros(gids.shape[0], dtype=np.int64)
        for c, bits in enumerate(self._bits):
            key = (key << bits) | gids[:, c]
        return key

    def _lookup(self, gids: IntArray) -> IntArray:
        """Series ids of distinct global value-id rows, registering new ones."""
        grown = False
        for c, ids in enumerate(self._value_ids):
            while len(ids) >= 1 << self._bits[c]:
                self._bits[c] += 2
                grown = True
        if sum(self._bits) > _KEY_BITS:
            return self._lookup_slow(gids)
        if grown:
            self._keys = self._encode(self._gids)
            self._order = np.argsort(self._keys)
        key = self._encode(gids)
        sorted_keys = self._keys[self._order]
        pos = np.searchsorted(sorted_keys, key)
        pos_c = np.minimum(pos, max(sorted_keys.size - 1, 0))
        known = (pos < sorted_keys.size) & (sorted_keys[pos_c] == key) if sorted_keys.size \
            else np.zeros(key.size, dtype=bool)
        sids = np.where(known, self._order[pos_c] if sorted_keys.size else 0, -1)
        new = np.flatnonzero(~known)
        if new.size:
            # Distinct keys only (a dictionary may repeat a value, or hold a null).
            fresh, which = np.unique(key[new], return_index=True, return_inverse=True)[1:]
            first = len(self.names)
            for i in new[fresh].tolist():
                self._register(tuple(gids[i].tolist()))
            sids[new] = first + which.reshape(-1)
            self._gids = np.concatenate([self._gids, gids[new[fresh]]])
            self._keys = np.concatenate([self._keys, key[new[fresh]]])
            self._order = np.argsort(self._keys, kind="stable")
        return sids

    def _lookup_slow(self, gids: IntArray) -> IntArray:
        out = np.empty(gids.shape[0], dtype=np.int64)
        for i, row in enumerate(map(tuple, gids.tolist())):
            sid = self._by_tuple.get(row)
            if sid is None:
                sid = self._register(row)
                self._gids = np.concatenate([self._gids, np.array([row], dtype=np.int64)])
            out[i] = sid
        return out

    def _register(self, gid_row: tuple[int, ...]) -> int:
        sid = len(self.names)
        self._by_tuple[gid_row] = sid
        decoded = [self._values[c][g] for c, g in enumerate(gid_row)]
        name = decoded[0] or None
        labels = {k: v for k, v in zip(self.label_names, decoded[1:], strict=True) if v}
        self.names.append(name)
        self.labels.append(labels)
        if name is None:  # a row without a metric name cannot be placed
            self.entities.append(None)
            self.dims.append(())
            self.jobs.append(None)
        else:
            ident = identify(name, labels, self.identity)
            self.entities.append(ident.entity)
            self.dims.append(ident.dims)
            self.jobs.append(ident.job)
        return sid


def _combine(columns: Sequence[np.ndarray], sizes: Sequence[int]) -> tuple[IntArray, IntArray]:
    """Rows' codes in several columns -> (a dense id per row, the column codes of each id).

    A mixed-radix integer per row, renumbered densely whenever its range would outgrow a lookup
    table (a sort only when a single step does), so any number of label columns fits in int64.
    """
    code = np.zeros(len(columns[0]), dtype=np.int64)
    radix = 1
    prefix = np.zeros((1, 0), dtype=np.int64)
    pending: list[int] = []

    def compact() -> None:
        nonlocal code, radix, prefix, pending
        if radix <= _LUT_MAX:
            code, uniq = _dense(code, radix)
        else:
            uniq, code = np.unique(code, return_inverse=True)
            code = code.reshape(-1)
        rest = uniq
        parts = []
        for size in reversed(pending):
            parts.append(rest % size)
            rest = rest // size
        prefix = np.column_stack([prefix[rest], *reversed(parts)]) if parts else prefix[rest]
        radix, pending = uniq.size, []

    for col, size in zip(columns, sizes, strict=True):
        if radix * size > _LUT_MAX and pending:
            compact()
        code *= size  # in place: one pass, no temporary per column
        code += col
        radix *= size
        pending.append(size)
    compact()
    return code, prefix


def _dense(code: IntArray, radix: int) -> tuple[IntArray, IntArray]:
    """`code` (values below `radix`, at most `_LUT_MAX`) renumbered 0..k-1 in increasing order,
    and the k distinct values: a lookup table instead of a sort."""
    seen = np.zeros(radix, dtype=bool)
    seen[code] = True
    uniq = np.flatnonzero(seen)
    lut = np.empty(radix, dtype=np.int64)
    lut[uniq] = np.arange(uniq.size)
    return lut[code], uniq
