"""Errors of the SimBackend contract.

Every error a backend raises for bad input or a missing feature derives from
:class:`SimBackendError`. The input errors also derive from the built-in class a
Python user would expect (``ValueError`` for a bad value, ``LookupError`` for an
unknown name), so ``except ValueError`` keeps working.

A call that raises one of these leaves every environment as it was: backends
validate all inputs before they write anything.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "SimBackendError",
    "InputShapeError",
    "InputDTypeError",
    "InvalidArgumentError",
    "ArgumentTypeError",
    "ScalarTypeError",
    "NonFiniteError",
    "ValueRangeError",
    "BackendClosedError",
    "ReentrantCallError",
    "ShardFailedError",
    "EnvIdError",
    "IndexRangeError",
    "InvalidQuaternionError",
    "UnknownNameError",
    "UnknownBackendError",
    "UnsupportedFeatureError",
    "MissingExtraError",
    "ModelLoadError",
    "RenderingError",
    "SnapshotMismatchError",
    "RecordingError",
    "closest_names_hint",
]


class SimBackendError(Exception):
    """Base class of every error the contract defines."""


class InputShapeError(SimBackendError, ValueError):
    """An argument has the wrong shape or size.

    The message names the argument, the expected shape and the received one.
    """

    def __init__(self, argument: str, expected: Sequence[int] | str, received: Sequence[int]):
        self.argument = argument
        self.expected = tuple(expected) if not isinstance(expected, str) else expected
        self.received = tuple(received)
        exp = expected if isinstance(expected, str) else format_shape(expected)
        super().__init__(f"{argument}: expected shape {exp}, got {format_shape(received)}")


class InvalidArgumentError(SimBackendError, ValueError):
    """An argument with a value the call cannot take (``nsteps=0``, a missing ctrl, ...)."""


class ArgumentTypeError(SimBackendError, TypeError):
    """An argument of the wrong Python type (a name that is not a string, ...)."""


class ScalarTypeError(ArgumentTypeError, InvalidArgumentError):
    """A scalar argument of the wrong Python type (``nsteps=1.5``, ``fps="30"``, ``True`` for a
    count): both an :class:`ArgumentTypeError` and an :class:`InvalidArgumentError`, so code
    catching either (or ``TypeError`` / ``ValueError``) sees it. Raised by :mod:`simbackend.checks`."""


class InputDTypeError(SimBackendError, ValueError):
    """An argument has a dtype that cannot stand for the expected values."""


class _RowsError(SimBackendError, ValueError):
    """A bad value in some rows of an argument; ``argument`` and ``env_ids`` name them."""

    def __init__(self, argument: str, env_ids: Sequence[int], problem: str):
        self.argument = argument
        self.env_ids = tuple(int(i) for i in env_ids)
        shown = ", ".join(str(i) for i in self.env_ids[:8])
        more = ", ..." if len(self.env_ids) > 8 else ""
        super().__init__(f"{argument}: {problem} in env ids [{shown}{more}]; nothing was written or stepped")


class NonFiniteError(_RowsError):
    """An argument holds NaN or infinite values; ``env_ids`` names the rows."""

    def __init__(self, argument: str, env_ids: Sequence[int]):
        super().__init__(argument, env_ids, "non-finite values (NaN or inf)")


class ValueRangeError(_RowsError):
    """An argument holds finite values too large to accept; ``env_ids`` names the rows.

    ``set_state`` rejects states the divergence rule (:mod:`simbackend.divergence`)
    would flag at once; every real input rejects magnitudes beyond float32.
    """

    def __init__(
        self, argument: str, env_ids: Sequence[int], limit: float, what: str = "values", problem: str | None = None
    ):
        self.limit = limit
        super().__init__(argument, env_ids, problem or f"{what} with magnitude above {limit:.3g}")


class BackendClosedError(SimBackendError, RuntimeError):
    """A method of a backend that was closed (``backend.closed`` is true)."""


class ShardFailedError(SimBackendError, RuntimeError):
    """A shard of a sharded backend (a Ray actor, ``make_backend(..., shards=K)``) died, timed out or
    could not be reached; the message names the shard and its env ids. Without
    ``sharding={"restart": True}`` the backend can then only be closed."""

    def __init__(self, message: str, shard: int, env_ids: Sequence[int]):
        self.shard = shard
        self.env_ids = list(env_ids)
        super().__init__(message)


class ReentrantCallError(SimBackendError, RuntimeError):
    """A call that mutates the simulation (``step``, ``set_state``, ...) made from inside a
    pre-step control function, while ``step`` is running."""


class EnvIdError(SimBackendError, ValueError):
    """Environment ids out of range, negative, duplicated or not integers."""


class IndexRangeError(SimBackendError, ValueError):
    """Body, site, sensor or dof ids out of range or of the wrong kind."""


class InvalidQuaternionError(SimBackendError, ValueError):
    """A free or ball joint quaternion is zero (or too close to zero) to normalise."""


class UnknownNameError(SimBackendError, LookupError):
    """A name that the model does not have; the message lists the closest ones."""

    def __init__(self, kind: str, name: str, known: Iterable[str]):
        self.kind = kind
        self.name = name
        super().__init__(f"unknown {kind} name {name!r}{closest_names_hint(name, known)}")

    def __str__(self) -> str:  # LookupError would quote the message
        return str(self.args[0])


class UnknownBackendError(UnknownNameError):
    """A backend name that is not registered; the message lists the registered ones."""

    def __init__(self, name: str, registered: Iterable[str]):
        registered = sorted(registered)
        self.registered = tuple(registered)
        SimBackendError.__init__(
            self,
            f"unknown backend {name!r}; registered backends: {', '.join(registered) if registered else '(none)'}",
        )
        self.kind, self.name = "backend", name


class UnsupportedFeatureError(SimBackendError, NotImplementedError):
    """A feature the backend does not have, named with the backend and capability."""

    def __init__(self, backend: str, capability: str, detail: str = ""):
        self.backend = backend
        self.capability = capability
        extra = f": {detail}" if detail else ""
        super().__init__(f"backend {backend!r} does not support {capability!r}{extra} (see backend.capabilities)")


class ModelLoadError(SimBackendError, ValueError):
    """A model source that cannot be read, compiled or represented by a backend."""


class SnapshotMismatchError(SimBackendError, ValueError):
    """A snapshot (or recording) made by another backend, from another model, or in another
    layout version than the one it is given to; the message says which and how to move a
    state between engines instead (qpos/qvel or the named state)."""


class RecordingError(InvalidArgumentError):
    """A file given as a recording that cannot be replayed: not a readable HDF5 file (damaged,
    truncated, another kind of file), or one whose datasets and header disagree with each other or
    with the model it stores (a missing dataset, a shape, a dtype, a row count, an attribute, NaN or
    inf). ``Recording(path)`` checks the whole file when it opens it and raises this before any of it
    is used. The message is one line naming the file and the dataset (or ``attribute NAME``);
    ``path`` and ``dataset`` hold them (``dataset`` is ``None`` when the file itself is unreadable)."""

    def __init__(self, path: str, dataset: str | None, problem: str):
        self.path = str(path)
        self.dataset = dataset
        if dataset is None:
            super().__init__(f"path: {self.path!r} is not a readable recording: {problem}")
        else:
            super().__init__(f"{dataset} of recording {self.path!r}: {problem}")


class RenderingError(SimBackendError, RuntimeError):
    """Pictures cannot be made here: no usable OpenGL context (``simbackend.playback.render``).

    The message says why and what to do (usually: set ``MUJOCO_GL=egl`` in the
    environment before mujoco or simbackend is imported).
    """


class MissingExtraError(SimBackendError, ImportError):
    """A part of simbackend whose optional dependency is not installed; the message names the extra
    that installs it (``pip install 'simbackend[sapien]'``)."""

    def __init__(self, message: str, extra: str):
        super().__init__(message)
        self.extra = extra


def closest_names_hint(name: str, known: Iterable[str], n: int = 3) -> str:
    """``' (closest: 'a', 'b')'`` for the names closest to ``name``, or a short listing."""
    known = list(known)
    close = difflib.get_close_matches(name, known, n=n, cutoff=0.4)
    if close:
        return f"; closest known names: {', '.join(map(repr, close))}"
    if not known:
        return "; the model has none"
    shown = ", ".join(map(repr, known[:8]))
    return f"; known names: {shown}{', ...' if len(known) > 8 else ''}"


def format_shape(shape: Sequence[Any] | str) -> str:
    """``(2, 3)``, ``(5,)``: a shape as messages write it (a string is kept as it is)."""
    if isinstance(shape, str):
        return shape
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"
