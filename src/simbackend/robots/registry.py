"""The robot registry: built-in descriptions, entry points of the group ``simbackend.robots``, JSON files."""

from __future__ import annotations

import importlib
import json
import os
from importlib import metadata
from pathlib import Path
from typing import Any

from simbackend.errors import ArgumentTypeError, InvalidArgumentError, UnknownNameError

from .description import RobotDescription

__all__ = ["available_robots", "get_robot", "register_robot"]

_ROBOTS: dict[str, RobotDescription] = {}
_loaded = False


def register_robot(desc: RobotDescription) -> RobotDescription:
    """Register ``desc`` under ``desc.name`` (a name already taken by another description raises)."""
    if not isinstance(desc, RobotDescription):
        raise ArgumentTypeError(f"register_robot: expected a RobotDescription, got {type(desc).__name__}")
    other = _ROBOTS.get(desc.name)
    if other is not None and other != desc:
        raise InvalidArgumentError(f"register_robot: robot name {desc.name!r} is taken by another description")
    _ROBOTS[desc.name] = desc
    return desc


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    importlib.import_module(f"{__package__}.builtin")  # registers the built-in robots

    for ep in metadata.entry_points(group="simbackend.robots"):
        if ep.name not in _ROBOTS:
            register_robot(ep.load())


def available_robots() -> tuple[str, ...]:
    """Names of the registered robots, sorted."""
    _load()
    return tuple(sorted(_ROBOTS))


def get_robot(robot: Any) -> RobotDescription:
    """A description: itself, a registered name, or a JSON file of its fields (``.json``)."""
    if isinstance(robot, RobotDescription):
        return robot
    if not isinstance(robot, (str, os.PathLike)):
        raise ArgumentTypeError(f"robot: expected a robot name or a JSON file, got {type(robot).__name__}")
    text = os.fspath(robot)
    if text.endswith(".json"):
        path = Path(text).expanduser()
        if not path.is_file():
            raise InvalidArgumentError(f"robot: no file {text!r}")
        try:
            fields = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise InvalidArgumentError(f"robot: {text} is not a JSON description: {e}") from None
        if not isinstance(fields, dict):
            kind = {list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
                type(fields), "a number"
            )
            raise ArgumentTypeError(f"robot: {text} holds {kind}, expected {{field: value}}")
        return RobotDescription.from_dict(fields, base_dir=str(path.resolve().parent))
    _load()
    if text not in _ROBOTS:
        raise UnknownNameError("robot", text, _ROBOTS)
    return _ROBOTS[text]
