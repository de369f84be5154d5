"""Which controller class a config builds: a table filled by :func:`register_controller`.

Built-in controllers register themselves when their modules load; third-party
packages add theirs with the decorator or through the entry-point group
``simbackend.controllers`` (``name = "package.module:ControllerClass"``), loaded
on the first lookup.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata
from typing import Any

from simbackend.errors import ArgumentTypeError, InvalidArgumentError

from .base import Controller

__all__ = ["available_controllers", "controller_class", "register_controller"]

_CONTROLLERS: dict[type, type[Controller]] = {}
_loaded = False


def register_controller(cls: type[Controller]) -> type[Controller]:
    """Class decorator: ``make_controller(backend, config)`` builds ``cls`` for a config of
    type ``cls.config_type``. A config type has one controller; registering another raises."""
    if not (isinstance(cls, type) and issubclass(cls, Controller)):
        raise ArgumentTypeError(f"register_controller: expected a Controller subclass, got {cls!r}")
    config_type = cls.config_type
    if not isinstance(config_type, type):
        raise InvalidArgumentError(
            f"register_controller: {cls.__name__}.config_type must name its config class, got {config_type!r}"
        )
    other = _CONTROLLERS.get(config_type)
    if other is not None and other is not cls and other.__qualname__ != cls.__qualname__:
        raise InvalidArgumentError(
            f"register_controller: {config_type.__name__} is built by {other.__qualname__}"
            f" already; one controller per config type"
        )
    _CONTROLLERS[config_type] = cls
    return cls


def _load_entry_points() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for ep in metadata.entry_points(group="simbackend.controllers"):
        register_controller(ep.load())


def available_controllers() -> dict[type, type[Controller]]:
    """``{config class: controller class}`` of every registered controller (a copy)."""
    _load_entry_points()
    return dict(_CONTROLLERS)


def controller_class(config: object, argument: str = "config") -> Callable[[Any, Any], Controller]:
    """The controller class registered for ``type(config)``; anything else raises
    ``ArgumentTypeError`` naming ``argument`` and the config classes that are known."""
    _load_entry_points()
    cls = _CONTROLLERS.get(type(config))
    if cls is None:
        known = sorted(k.__name__ for k in _CONTROLLERS)
        raise ArgumentTypeError(
            f"{argument}: expected one of {known} (the registered controller configs)"
            f" or a mapping of them, got {type(config).__name__}"
        )
    return cls
