"""Which backends exist: entry points (group ``simbackend.backends``) plus runtime registrations.

Entry points are listed without being loaded, so listing backends (and
``simbackend --help``) imports no engine. A backend's class is imported the
first time it is asked for by name. Names are case-insensitive. Building a
backend is :func:`simbackend.registry.make_backend`'s job; this module builds
nothing, so every part of the core may ask it what is registered.

A registered backend is an :class:`~simbackend.engine.Engine` subclass (the
documented way: ``make_backend`` puts the contract's front end in front of
it), or any factory ``factory(model, num_envs, *, device, seed, **options)``
returning a :class:`~simbackend.contract.SimBackend`.
"""

from __future__ import annotations

from importlib import metadata
from typing import TYPE_CHECKING, Any

from simbackend.errors import (
    ArgumentTypeError,
    InvalidArgumentError,
    MissingExtraError,
    SimBackendError,
    UnknownBackendError,
)

if TYPE_CHECKING:  # pragma: no cover
    pass

ENTRY_POINT_GROUP = "simbackend.backends"

#: name -> factory registered at run time (takes precedence over entry points)
_RUNTIME: dict[str, Any] = {}


def _entry_points() -> dict[str, metadata.EntryPoint]:
    eps = metadata.entry_points(group=ENTRY_POINT_GROUP)
    return {ep.name.lower(): ep for ep in eps}


def available_backends() -> tuple[str, ...]:
    """Names of every registered backend (entry points and runtime), sorted."""
    return tuple(sorted(set(_entry_points()) | set(_RUNTIME)))


def backend_provider(name: str) -> str:
    """Where backend ``name`` comes from, without loading it.

    ``"runtime: module.Factory"`` for a runtime registration, else the entry
    point's ``module:attr`` and its distribution; raises
    :class:`UnknownBackendError` for an unknown name.
    """
    key = _check_name(name)
    factory = _RUNTIME.get(key)
    if factory is not None:
        qual = getattr(factory, "__qualname__", type(factory).__qualname__)
        return f"runtime: {getattr(factory, '__module__', '?')}.{qual}"
    ep = _entry_points().get(key)
    if ep is None:
        raise UnknownBackendError(name, available_backends())
    dist = getattr(ep, "dist", None)
    return ep.value + (f" ({dist.name} {dist.version})" if dist is not None else "")


def register_backend(name: str, factory: Any, *, replace: bool = False) -> None:
    """Register ``factory`` under ``name`` for this process.

    ``factory`` is an :class:`~simbackend.engine.Engine` subclass, or a callable
    ``factory(model, num_envs, *, device=None, seed=0, **options)`` returning a
    :class:`~simbackend.contract.SimBackend`.
    Raises ``InvalidArgumentError`` (a ``ValueError``) if the name is taken and ``replace`` is false.
    """
    key = _check_name(name)
    if not callable(factory):
        raise ArgumentTypeError(f"factory for backend {name!r} must be callable, got {type(factory).__name__}")
    if not replace and key in _RUNTIME:
        raise InvalidArgumentError(f"backend {name!r} is already registered; pass replace=True to replace it")
    _RUNTIME[key] = factory


def unregister_backend(name: str) -> None:
    """Remove a runtime registration (entry points cannot be removed)."""
    _RUNTIME.pop(name.lower(), None)


def get_backend_factory(name: str) -> Any:
    """The factory registered under ``name`` (case-insensitive), importing it if needed."""
    key = _check_name(name)
    if key in _RUNTIME:
        return _RUNTIME[key]
    eps = _entry_points()
    if key not in eps:
        raise UnknownBackendError(name, available_backends())
    try:
        return eps[key].load()
    except MissingExtraError as e:  # an engine whose extra is not installed: say which extra
        raise MissingExtraError(f"backend {name!r}: {e}", extra=e.extra) from e
    except Exception as e:
        raise SimBackendError(
            f"backend {name!r} is registered by entry point {eps[key].value!r}, but it failed to load:"
            f" {type(e).__name__}: {e}"
        ) from e


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise InvalidArgumentError(f"backend name must be a non-empty string, got {name!r}")
    return name.strip().lower()
