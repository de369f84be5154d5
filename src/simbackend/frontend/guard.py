"""The one guard of a closed backend: every public method raises ``BackendClosedError`` after ``close()``.

Applied once, to the front end's class (Gymnasium's ``closed`` flag and one
check, instead of swapping the object's class). Properties are not guarded:
they describe the model (names, sizes, ``num_envs``, ``device``,
``capabilities``) and keep answering.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from simbackend.errors import BackendClosedError

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
        if self.closed:
            raise BackendClosedError(f"{name}: backend {self.name!r} is closed")
        return fn(self, *args, **kwargs)

    return method
