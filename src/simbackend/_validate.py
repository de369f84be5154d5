"""Input conversion and validation shared by every backend.

Each function raises the contract's errors (``simbackend.errors``) with the
argument's name, before anything is written.

* Real-valued inputs become **torch tensors on the backend's device** in the
  backend's hook dtype (:func:`real_tensor`). Shape and dtype are checked from
  tensor metadata; values (finiteness, range) by device reductions
  (:func:`nonfinite_rows`, :func:`rows_above`) whose results the caller reads
  or, on a GPU backend, defers (see ``SimBackend``).
* Ids become int64 **host** numpy arrays (they index host-side tables). Id
  tensors the backend returned carry a host copy (:class:`HostIds`), so
  passing them back reads nothing from the device.
"""

from __future__ import annotations

import numbers
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from simbackend import checks
from simbackend.errors import (
    EnvIdError,
    IndexRangeError,
    InputDTypeError,
    InputShapeError,
    InvalidArgumentError,
)

#: largest magnitude a real input may have: every engine must be able to hold it in float32
MAX_REAL_INPUT = float(np.finfo(np.float32).max)


class HostIds:
    """Host copies of the id tensors a backend returned.

    ``get_body_ids`` & co. return device tensors; the backend registers each
    with its host copy, and validation looks the tensor up instead of reading
    it back (which would synchronise with a GPU). A tensor changed in place
    since it was returned (its ``_version`` moved) is read like any other.
    """

    def __init__(self) -> None:
        self._map: dict[int, tuple[weakref.ref, int, np.ndarray]] = {}

    def register(self, t: torch.Tensor, host: np.ndarray) -> torch.Tensor:
        key = id(t)
        table = self._map

        def forget(ref: weakref.ref, key: int = key) -> None:
            entry = table.get(key)
            if entry is not None and entry[0] is ref:
                del table[key]

        host = np.array(host, dtype=np.int64)
        host.flags.writeable = False
        table[key] = (weakref.ref(t, forget), t._version, host)  # noqa: SLF001 (torch's in-place write counter)
        return t

    def lookup(self, t: torch.Tensor) -> np.ndarray | None:
        entry = self._map.get(id(t))
        if entry is None or entry[0]() is not t or entry[1] != t._version:  # noqa: SLF001 (as above)
            return None
        return entry[2]


def _numpy_input(x: Any, argument: str) -> np.ndarray:
    try:
        a = np.asarray(x)
    except (ValueError, TypeError) as e:
        raise InputDTypeError(f"{argument}: cannot be read as an array ({_one_line(e)})") from e
    return a


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


def check_tensor_storage(x: torch.Tensor, argument: str) -> None:
    """Reject tensors that hold no readable data (``meta`` device, sparse or nested layouts)."""
    if x.device.type == "meta":
        raise InvalidArgumentError(f"{argument}: a tensor on the 'meta' device holds no values")
    if x.layout != torch.strided:
        raise InputDTypeError(f"{argument}: expected a dense (strided) tensor, got layout {x.layout}")


def real_tensor(
    x: Any, argument: str, shape: Sequence[int], *, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """A real-valued input of exactly ``shape`` as a ``dtype`` tensor on ``device``.

    Accepts torch tensors (any device, dtype, strides; gradients are
    detached), numpy arrays and nested sequences of numbers. Booleans,
    complex numbers and objects are rejected. Values are not checked here
    (see :func:`nonfinite_rows`). The result may share memory with ``x``.
    """
    if isinstance(x, torch.Tensor):
        check_tensor_storage(x, argument)
        if x.dtype == torch.bool:
            raise InputDTypeError(f"{argument}: expected real numbers, got booleans")
        if x.is_complex():
            raise InputDTypeError(f"{argument}: expected real numbers, got dtype {x.dtype}")
        if tuple(x.shape) != tuple(shape):
            raise InputShapeError(argument, tuple(shape), tuple(x.shape))
        return x.detach().to(device=device, dtype=dtype)
    a = _numpy_input(x, argument)
    if a.dtype == object or a.dtype.kind not in "biuf":
        raise InputDTypeError(f"{argument}: expected real numbers, got dtype {a.dtype}")
    if a.dtype.kind == "b":
        raise InputDTypeError(f"{argument}: expected real numbers, got booleans")
    if tuple(a.shape) != tuple(shape):
        raise InputShapeError(argument, tuple(shape), a.shape)
    with np.errstate(over="ignore"):
        a = np.ascontiguousarray(a, dtype=np.float64)
    if not a.flags.writeable:  # torch cannot share read-only memory (e.g. arrays of backend.info)
        a = a.copy()
    return torch.as_tensor(a, device=device).to(dtype)


#: float dtypes whose CPU tensors :func:`host_real` reads as numpy views
_HOST_FLOATS = (torch.float32, torch.float64)


def host_real(x: Any, shape: tuple[int, ...]) -> np.ndarray | None:
    """A numpy view of ``x`` when it is a plain CPU float32/float64 tensor of exactly ``shape`` whose values
    all pass the input checks (finite, ``|x| <= MAX_REAL_INPUT``), else ``None``.

    The CPU front end's fast path: one reduction instead of :func:`real_tensor`, :func:`nonfinite_rows`
    and :func:`rows_above`. ``None`` sends the caller to those general checks, which name what is wrong.
    """
    if (
        type(x) is not torch.Tensor
        or x.dtype not in _HOST_FLOATS
        or x.device.type != "cpu"
        or x.layout != torch.strided
        or x.shape != shape
    ):
        return None
    a = x.detach().numpy()
    return a if bounded(a, MAX_REAL_INPUT) else None


def bounded(a: np.ndarray, limit: float) -> bool:
    """Whether every entry of ``a`` is finite and within ``[-limit, limit]``: a max and a min, no temporary
    array (NaN propagates through both and compares false). The CPU fast paths' one reduction."""
    return not a.size or (float(a.max()) <= limit and float(a.min()) >= -limit)


def nonfinite_rows(t: torch.Tensor) -> torch.Tensor:
    """``(n,)`` bool on ``t``'s device: rows (first axis) holding NaN or inf."""
    if t.shape[0] == 0:
        return torch.zeros(0, dtype=torch.bool, device=t.device)
    return ~torch.isfinite(t).reshape(t.shape[0], -1).all(dim=1)


def rows_above(t: torch.Tensor, limit: float, columns: torch.Tensor | None = None) -> torch.Tensor:
    """``(n,)`` bool: rows with some ``|value| > limit`` (optionally only in ``columns``); NaN rows are not counted."""
    if columns is not None:
        t = t[:, columns]
    if t.shape[0] == 0 or t.numel() == 0:
        return torch.zeros(t.shape[0], dtype=torch.bool, device=t.device)
    return (t.abs() > limit).reshape(t.shape[0], -1).any(dim=1)


# ----------------------------------------------------------------------
# ids (host side)
# ----------------------------------------------------------------------
def _as_ids(ids: Any, size: int, argument: str, host_ids: HostIds | None) -> np.ndarray:
    if ids is None:
        return np.arange(size, dtype=np.int64)
    if isinstance(ids, bool):
        raise IndexRangeError(f"{argument}: expected integer ids, got a bool")
    if isinstance(ids, numbers.Integral):
        return np.array([int(ids)], dtype=np.int64)
    if isinstance(ids, (str, bytes)) or not hasattr(ids, "__len__") and not isinstance(ids, (torch.Tensor, np.ndarray)):
        raise IndexRangeError(
            f"{argument}: expected integer ids (an int, a sequence, an array or a tensor), got {type(ids).__name__}"
        )
    if isinstance(ids, torch.Tensor):
        check_tensor_storage(ids, argument)
        host = host_ids.lookup(ids) if host_ids is not None else None
        if host is not None:
            return host
        # a tensor the backend did not return: read it (one device read for a GPU tensor)
        return ids.detach().cpu().numpy()
    return _numpy_input(ids, argument)


def env_ids(ids: Any, num_envs: int, argument: str = "env_ids", host_ids: HostIds | None = None) -> np.ndarray:
    """Validate environment ids; ``None`` means all. Returns int64, in the given order.

    Rejects non-integers, non-1-D input, negatives, ids >= num_envs and duplicates
    (:class:`EnvIdError`). A boolean mask of shape ``(num_envs,)`` is accepted.
    """
    a = _as_ids(ids, num_envs, argument, host_ids)
    _mask_dtype(a, argument, "env", EnvIdError, f" (or the mask as bool, shape ({num_envs},))")
    if a.dtype == bool:
        if a.shape != (num_envs,):
            raise InputShapeError(f"{argument} (boolean mask)", (num_envs,), a.shape)
        return np.flatnonzero(a).astype(np.int64)
    return _checked_ids(a, num_envs, argument, "env", EnvIdError, allow_duplicates=False)


def index_array(
    ids: Any, size: int, kind: str, argument: str, *, allow_duplicates: bool = True, host_ids: HostIds | None = None
) -> np.ndarray:
    """Validate ids into a table of ``size`` entries (bodies, sites, dofs); return int64.

    ``None`` means all entries. A single integer is accepted as one id.
    Errors are :class:`IndexRangeError`.
    """
    a = _as_ids(ids, size, argument, host_ids)
    if a.dtype == bool:
        raise IndexRangeError(f"{argument}: expected integer {kind} ids, got booleans (for a mask: mask.nonzero())")
    return _checked_ids(a, size, argument, kind, IndexRangeError, allow_duplicates=allow_duplicates)


def _mask_dtype(a: np.ndarray, argument: str, kind: str, error: type, mask_note: str = "") -> None:
    """Refuse ``uint8`` ids: torch code often means a mask by them (torch's old mask dtype), which as ids would
    select envs 0 and 1 instead of the envs marked."""
    if a.dtype == np.uint8:
        raise error(
            f"{argument}: got dtype uint8, which reads as a mask, not as {kind} ids: give integer ids (int64),"
            f" or mask.nonzero() of a mask{mask_note}"
        )


def _checked_ids(
    a: np.ndarray, size: int, argument: str, kind: str, error: type, *, allow_duplicates: bool
) -> np.ndarray:
    if a.ndim != 1:
        raise InputShapeError(argument, "(n,)", a.shape)
    if a.size == 0:
        return np.zeros(0, np.int64)
    if a.dtype.kind not in "iu":
        raise error(f"{argument}: expected integer {kind} ids, got dtype {a.dtype}")
    _mask_dtype(a, argument, kind, error)
    big = a.dtype.kind == "u" and a.dtype.itemsize == 8 and (a > np.iinfo(np.int64).max).any()
    a = a.astype(np.int64)
    if big or not (0 <= a.min() and a.max() < size):  # the common case: one reduction each way
        bad = a[(a < 0) | (a >= size)] if not big else a[:1]
        raise error(f"{argument}: {kind} ids must be in [0, {size}), got {bad[:8].tolist()}")
    if not allow_duplicates and a.size > 1:
        ordered = np.sort(a)
        if (ordered[1:] == ordered[:-1]).any():
            uniq, counts = np.unique(a, return_counts=True)
            raise error(f"{argument}: duplicated {kind} ids {uniq[counts > 1][:8].tolist()}")
    return a


def scalar_id(i: Any, size: int, kind: str, argument: str, host_ids: HostIds | None = None) -> int:
    """Validate one integer id (a Python int, a 0-d array or a one-element id tensor/array)."""
    if isinstance(i, bool) or i is None:
        raise IndexRangeError(f"{argument}: expected one integer {kind} id, got {i!r}")
    a = _as_ids(i, size, argument, host_ids)
    _mask_dtype(a, argument, kind, IndexRangeError)
    if a.ndim > 1 or a.size != 1 or a.dtype.kind not in "iu":
        raise IndexRangeError(f"{argument}: expected one integer {kind} id, got {checks.short_repr(i)}")
    v = int(a.reshape(-1)[0])
    if not 0 <= v < size:
        raise IndexRangeError(f"{argument}: {kind} id must be in [0, {size}), got {v}")
    return v


def positive_int(n: Any, argument: str) -> int:
    """An integer >= 1 (``bool``, floats and None refused); :func:`simbackend.checks.integer`."""
    if type(n) is int and n >= 1:  # the common case, without the general checks' cost
        return n
    return checks.integer(n, argument, minimum=1)


def seed_value(seed: Any) -> int:
    """A seed: an integer in ``[0, 2**63)`` (``bool``, floats, strings and None refused)."""
    return checks.integer(seed, "seed", minimum=0, maximum=2**63 - 1)


#: quaternions with a norm below this are rejected by set_state
MIN_QUAT_NORM = 1e-9


def normalised_quaternions(qpos: torch.Tensor, quat_cols: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``qpos (n, nq)`` with unit quaternions in columns ``quat_cols`` ``(nquat, 4)``, and the
    ``(n,)`` mask of rows holding a zero (or non-finite) one. Each quaternion is scaled by its
    largest component first, so no finite quaternion overflows. Device reductions only."""
    n = qpos.shape[0]
    if not quat_cols.numel() or not n:
        return qpos, torch.zeros(n, dtype=torch.bool, device=qpos.device)
    quats = qpos[:, quat_cols]  # (n, nquat, 4)
    scale = quats.abs().amax(dim=-1, keepdim=True)
    unit = quats / torch.where(scale > 0, scale, 1.0)
    norms = torch.linalg.vector_norm(unit, dim=-1, keepdim=True)
    zero = (scale[..., 0] < MIN_QUAT_NORM).any(dim=1) | ~torch.isfinite(scale[..., 0]).all(dim=1)
    qpos = qpos.clone()
    qpos[:, quat_cols] = torch.where(norms > 0, unit / torch.where(norms > 0, norms, 1.0), unit)
    return qpos, zero
