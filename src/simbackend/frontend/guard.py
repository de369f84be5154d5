"""The one guard of a backend that can no longer serve: every public method raises ``BackendClosedError``
after ``close()``, and the ``ShardFailedError`` of a sharded backend whose shard was lost after that.

Applied once, to the front end's class (Gymnasium's ``closed`` flag and one
check, instead of swapping the object's class). Properties are not guarded:
they describe the model (names, sizes, ``num_envs``, ``device``,
``capabilities``) and keep answering. A lost shard is remembered by the guard
itself, so that no getter answers from what the front end kept (time,
controls) or the engine cached (the last state a shard returned) while others
raise: the backend can then only be closed.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from simbackend.errors import BackendClosedError, ShardFailedError

#: public methods a closed backend still answers
OPEN_AFTER_CLOSE = frozenset({"close"})

T = TypeVar("T", bound=type)


def guard_public_methods(cls: T) -> T:
    """Wrap every public method of ``cls`` (but :data:`OPEN_AFTER_CLOSE`) in the closed check."""
    for name, member in list(vars(cls).items()):
        if name.startswith("_") or name in OPEN_AFTER_CLOSE or not inspect.isfunction(member):
            continue
        setattr(cls, name, _guarded(member))
    return cls


def _guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    name = fn.__name__

    @functools.wraps(fn)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self._closed or self._lost is not None:
            raise _refusal(name, self.name, self._lost if not self._closed else None)
        try:
            return fn(self, *args, **kwargs)
        except ShardFailedError as e:
            if self._lost is None:
                self._lost = e
            raise

    return method


def _refusal(name: str, backend: str, lost: ShardFailedError | None) -> Exception:
    """What public method ``name`` of backend ``backend`` raises once closed (``lost`` None), or once a
    shard was lost (``lost``: the error that said so)."""
    if lost is None:
        return BackendClosedError(f"{name}: backend {backend!r} is closed")
    first = str(lost).split("; this backend can only be closed")[0]
    return ShardFailedError(f"{name}: {first}; this backend can only be closed", lost.shard, lost.env_ids)
