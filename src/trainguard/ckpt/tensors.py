"""Split a state (any picklable object holding tensors) into pickled structure + raw storages.

Saving pickles the object with a ``persistent_id`` hook, as ``torch.save`` does: every tensor
is replaced by a small record (storage index, dtype, size, stride, offset, requires_grad) and
its storage is collected once, however many tensors view it (tied weights stay tied). The raw
bytes of the storages then go to the striped data files; the pickle stays small.

Loading rebuilds each tensor as a view of its storage (``Tensor.set_``), so views and shared
storages come back as they were. Supported: dense (strided) tensors and ``nn.Parameter`` of any
dtype on CPU or CUDA. Sparse, quantized, meta tensors and tensor subclasses (e.g. ``DTensor``:
save its ``to_local()`` shard with ``sharded=True``) raise `CheckpointError` naming the type.

Loading is restricted by default, like ``torch.load(weights_only=True)``: the structure may
hold tensors, builtin containers and scalars, numpy arrays and a few exact torch names (see
`trainguard.ckpt.unpickle`); any other global fails with a `CheckpointError` naming it.
``trusted=True`` unpickles anything, which runs whatever code the pickle names: only for
checkpoints whose origin you trust. torch is imported lazily.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from trainguard.ckpt.unpickle import check_global, torch_globals
from trainguard.errors import CheckpointError, ConfigError

__all__ = ["Captured", "StorageRef", "capture", "import_torch", "rebuild"]

_TAG = "trainguard.tensor/1"


def import_torch(what: str = "tensor checkpoints") -> ModuleType:
    """The torch module, or `ConfigError` naming the extra to install."""
    try:
        import torch
    except ImportError as exc:
        raise ConfigError(f"{what} need PyTorch: pip install 'trainguard[torch]'") from exc
    return torch


@dataclass(frozen=True, slots=True)
class StorageRef:
    """One storage of a captured state: its bytes (``nbytes``) on ``device``."""

    storage: Any
    """The live ``torch.UntypedStorage`` (not copied: the snapshot copies it)."""
    nbytes: int
    device: str
    """E.g. ``cpu`` or ``cuda:0``."""


@dataclass(frozen=True, slots=True)
class Captured:
    """A state split in two: the pickled structure and the storages it refers to."""

    structure: bytes
    """Pickle of the state with tensors replaced by references."""
    storages: tuple[StorageRef, ...]
    """Storages in reference order."""

    @property
    def nbytes(self) -> int:
        return sum(ref.nbytes for ref in self.storages)


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def capture(state: Any) -> Captured:
    """Pickle `state` with its tensors' storages set aside; `CheckpointError` on a tensor kind
    that cannot be saved this way or an unpicklable object."""
    torch = import_torch()
    parameter = torch.nn.Parameter
    index: dict[int, int] = {}
    refs: list[StorageRef] = []
    serials: dict[int, int] = {}  # id(tensor) -> serial: the same object comes back once
    alive: list[Any] = []  # keeps ids unique while pickling

    def persistent_id(obj: Any) -> Any:
        if isinstance(obj, torch.UntypedStorage | torch.TypedStorage):
            raise CheckpointError("cannot checkpoint a bare torch storage; save tensors instead")
        if not isinstance(obj, torch.Tensor):
            return None
        if type(obj) not in (torch.Tensor, parameter):
            raise CheckpointError(
                f"cannot checkpoint a {type(obj).__module__}.{type(obj).__name__}: only plain "
                "tensors and nn.Parameter (save a DTensor's to_local() shard, sharded=True)"
            )
        if obj.layout != torch.strided or obj.is_quantized or obj.device.type == "meta":
            raise CheckpointError(
                f"cannot checkpoint a {obj.layout} {obj.dtype} tensor on {obj.device}: only "
                "dense tensors with data"
            )
        serial = serials.setdefault(id(obj), len(serials))
        alive.append(obj)
        if obj.is_conj() or obj.is_neg():
            obj = obj.resolve_conj().resolve_neg()
        storage = obj.untyped_storage()
        key = storage._cdata
        if key not in index:
            index[key] = len(refs)
            refs.append(StorageRef(storage, storage.nbytes(), str(storage.device)))
        return (_TAG, serial, index[key], _dtype_name(obj.dtype), tuple(obj.size()),
                tuple(obj.stride()), obj.storage_offset(), bool(obj.requires_grad),
                isinstance(obj, parameter))

    buf = io.BytesIO()
    pickler = pickle.Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.persistent_id = persistent_id  # type: ignore[method-assign]
    try:
        pickler.dump(state)
    except CheckpointError:
        raise
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError) as exc:
        raise CheckpointError(f"cannot checkpoint the state: {type(exc).__name__}: {exc}") from exc
    return Captured(buf.getvalue(), tuple(refs))


def rebuild(structure: bytes, storages: Sequence[Any], *, trusted: bool = False) -> Any:
    """Unpickle `structure`, turning each tensor reference into a view of ``storages[i]``
    (``torch.UntypedStorage`` objects, already on the wanted device). Only the globals of
    `trainguard.ckpt.unpickle` are resolved unless `trusted`."""
    torch = import_torch()
    allowed = torch_globals(torch)

    built: dict[int, Any] = {}

    class _Unpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            if not trusted:
                check_global(module, name, allowed)
            return super().find_class(module, name)

        def persistent_load(self, pid: Any) -> Any:
            if not (isinstance(pid, tuple) and len(pid) == 9 and pid[0] == _TAG):
                raise CheckpointError(f"unknown reference in checkpoint: {pid!r:.80}")
            serial = pid[1]
            if serial not in built:
                built[serial] = self._tensor(pid)
            return built[serial]

        def _tensor(self, pid: tuple[Any, ...]) -> Any:
            _, _, i, dtype_name, size, stride, offset, requires_grad, is_param = pid
            if not (isinstance(i, int) and 0 <= i < len(storages)):
                raise CheckpointError(f"checkpoint refers to storage {i} of {len(storages)}")
            dtype = getattr(torch, dtype_name, None)
            if not isinstance(dtype, torch.dtype):
                raise CheckpointError(f"unknown dtype {dtype_name!r} in checkpoint")
            storage = storages[i]
            tensor = torch.empty(0, dtype=dtype, device=storage.device)
            tensor.set_(storage, offset, size, stride)
            if is_param:
                return torch.nn.Parameter(tensor, requires_grad=requires_grad)
            if requires_grad:
                tensor.requires_grad_(True)
            return tensor

    try:
        return _Unpickler(io.BytesIO(structure)).load()
    except CheckpointError:
        raise
    except Exception as exc:  # unpickling user classes can raise anything
        raise CheckpointError(
            f"cannot unpickle the checkpoint's state: {type(exc).__name__}: {exc}"
        ) from exc
