"""Input conversion and validation shared by every backend.

Each function raises the contract's errors (``simbackend.errors``) with the
argument's name, before anything is written. Real inputs are returned as
C-contiguous float64 numpy arrays, ids as int64 numpy arrays.
"""

from __future__ import annotations

import numbers
from typing import Any, Sequence

import numpy as np

from simbackend.errors import (
    EnvIdError,
    IndexRangeError,
    InputDTypeError,
    InvalidArgumentError,
    InputShapeError,
    NonFiniteError,
)


def to_numpy(x: Any, argument: str) -> np.ndarray:
    """A numpy view or copy of a torch tensor, numpy array or (nested) sequence."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # torch.Tensor, without importing torch here
        x = x.detach().cpu().numpy()
    try:
        return np.asarray(x)
    except (ValueError, TypeError) as e:
        raise InputDTypeError(f"{argument}: cannot be read as an array ({e})") from e


def real_array(
    x: Any, argument: str, shape: Sequence[int], *, finite_rows: bool = True, row_ids: np.ndarray | None = None
) -> np.ndarray:
    """Validate a real-valued input of exactly ``shape``; return float64.

    Args:
        x: tensor, array or sequence.
        argument: the name used in error messages.
        shape: the expected shape; its first axis indexes envs when ``finite_rows``.
        finite_rows: reject NaN/inf, naming the rows (env ids) that hold them.
        row_ids: env id of each row, when the rows are a subset of the envs.
    """
    a = to_numpy(x, argument)
    if a.dtype == object or a.dtype.kind not in "biuf":
        raise InputDTypeError(f"{argument}: expected real numbers, got dtype {a.dtype}")
    if a.dtype.kind == "b":
        raise InputDTypeError(f"{argument}: expected real numbers, got booleans")
    if tuple(a.shape) != tuple(shape):
        raise InputShapeError(argument, tuple(shape), a.shape)
    a = np.ascontiguousarray(a, dtype=np.float64)
    if finite_rows and a.size:
        bad = ~np.isfinite(a)
        if bad.any():
            rows = np.flatnonzero(bad.reshape(a.shape[0], -1).any(axis=1)) if a.ndim > 1 else np.flatnonzero(bad)
            raise NonFiniteError(argument, rows if row_ids is None else row_ids[rows])
    return a


def env_ids(ids: Any, num_envs: int, argument: str = "env_ids") -> np.ndarray:
    """Validate environment ids; ``None`` means all. Returns int64, in the given order.

    Rejects non-integers, non-1-D input, negatives, ids >= num_envs and duplicates
    (:class:`EnvIdError`). A boolean mask of shape ``(num_envs,)`` is accepted.
    """
    a = _as_ids(ids, num_envs, argument)
    if a.dtype == bool:
        if a.shape != (num_envs,):
            raise InputShapeError(f"{argument} (boolean mask)", (num_envs,), a.shape)
        return np.flatnonzero(a).astype(np.int64)
    return _checked_ids(a, num_envs, argument, "env", EnvIdError, allow_duplicates=False)


def index_array(ids: Any, size: int, kind: str, argument: str, *, allow_duplicates: bool = True) -> np.ndarray:
    """Validate ids into a table of ``size`` entries (bodies, sites, dofs); return int64.

    ``None`` means all entries. A single integer is accepted as one id.
    Errors are :class:`IndexRangeError`.
    """
    a = _as_ids(ids, size, argument)
    if a.dtype == bool:
        raise IndexRangeError(f"{argument}: expected integer {kind} ids, got booleans")
    return _checked_ids(a, size, argument, kind, IndexRangeError, allow_duplicates=allow_duplicates)


def _as_ids(ids: Any, size: int, argument: str) -> np.ndarray:
    if ids is None:
        return np.arange(size, dtype=np.int64)
    if isinstance(ids, numbers.Integral) and not isinstance(ids, bool):
        ids = [ids]
    return to_numpy(ids, argument)


def _checked_ids(a: np.ndarray, size: int, argument: str, kind: str, error: type, *, allow_duplicates: bool) -> np.ndarray:
    if a.ndim != 1:
        raise InputShapeError(argument, "(n,)", a.shape)
    if a.size == 0:
        return np.zeros(0, np.int64)
    if a.dtype.kind not in "iu":
        raise error(f"{argument}: expected integer {kind} ids, got dtype {a.dtype}")
    a = a.astype(np.int64)
    bad = a[(a < 0) | (a >= size)]
    if bad.size:
        raise error(f"{argument}: {kind} ids must be in [0, {size}), got {bad[:8].tolist()}")
    if not allow_duplicates:
        uniq, counts = np.unique(a, return_counts=True)
        if (counts > 1).any():
            raise error(f"{argument}: duplicated {kind} ids {uniq[counts > 1][:8].tolist()}")
    return a


def scalar_id(i: Any, size: int, kind: str, argument: str) -> int:
    """Validate one integer id into a table of ``size`` entries."""
    a = to_numpy(i, argument)
    if a.ndim != 0 or a.dtype.kind not in "iu":
        raise IndexRangeError(f"{argument}: expected one integer {kind} id, got {i!r}")
    v = int(a)
    if not 0 <= v < size:
        raise IndexRangeError(f"{argument}: {kind} id must be in [0, {size}), got {v}")
    return v


def positive_int(n: Any, argument: str) -> int:
    """Validate an integer >= 1 (``bool`` rejected)."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or int(n) < 1:
        raise InvalidArgumentError(f"{argument}: expected an integer >= 1, got {n!r}")
    return int(n)
