"""Task settings from the command line and files: ``--task-config FILE.json`` and ``--set KEY=VALUE``.

:func:`task_settings` builds the mapping of a task config's fields (what
``make_task(config=...)`` and ``train(task_config=...)`` take) from, in order,
a ``base`` mapping (a checkpoint's ``task_config``), a JSON file (an object of
the config's fields) and ``key=value`` strings; a later source wins, key by key.

* Keys are the fields of the task's config dataclass (``get_task_class(name).config_class``),
  read at run time: a field added to a config is a setting at once.
* A dotted key reaches into a mapping field: ``reward_weights.tilt=-2`` sets one
  term and keeps the others given before. A tuple field is given whole, as JSON:
  ``command_range=[[-1,1],[-0.5,0.5],[-1,1]]``.
* A value is JSON where it parses (``0.3``, ``null``, ``[1, 2]``, ``{"tilt": -2}``),
  else the plain string (``robot=go1``).
* An unknown key fails in one line naming the source and the closest known
  names. A mapping field's sub-keys are checked the same way where the config
  class lists them: a class attribute ``mapping_keys``, either ``{field: keys}``
  or a function ``mapping_keys(field) -> keys | None``; otherwise the config's
  own check (``from_dict``) speaks.
* The merged mapping is checked by ``config_class.from_dict``: a bad value fails
  with the config's own one-line message, prefixed with the source that gave it.

:func:`changed_settings` lists what a config mapping changes from the task's
defaults (``simbackend eval`` prints it).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

from simbackend.errors import ArgumentTypeError, InvalidArgumentError, SimBackendError, closest_names_hint

__all__ = ["changed_settings", "format_setting", "parse_value", "task_settings"]


def parse_value(text: str) -> Any:
    """``text`` as JSON where it parses (a number, ``true``, ``null``, a list, an object), else the string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _fields(config_class: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(config_class)}


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _allowed_keys(config_class: type, name: str) -> Collection[str] | None:
    """The sub-keys the mapping field ``name`` accepts, where the config class lists them: a class attribute
    ``mapping_keys``, ``{field: keys}`` or a function ``mapping_keys(field) -> keys | None``."""
    declared = getattr(config_class, "mapping_keys", None)
    if declared is None:
        return None
    keys = declared.get(name) if isinstance(declared, Mapping) else declared(name)
    return None if keys is None else [str(k) for k in keys]


def _is_mapping_field(config_class: type, f: dataclasses.Field) -> bool:
    """Whether field ``f`` holds a mapping (its default, its annotation or ``mapping_keys`` says so)."""
    if isinstance(_default(f), Mapping) or _allowed_keys(config_class, f.name) is not None:
        return True
    kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    return bool(re.match(r"(typing\.|collections\.abc\.)?(Mapping|MutableMapping|dict|Dict)\b", kind))


class _Builder:
    """The merged mapping, and which source gave each field (for the messages)."""

    def __init__(self, task_name: str, config_class: Any):
        self.task = task_name
        self.cls: Any = config_class
        self.fields = _fields(config_class)
        self.values: dict[str, Any] = {}
        self.origin: dict[str, str] = {}

    def current(self, name: str) -> Any:
        return self.values[name] if name in self.values else _default(self.fields[name])

    def check_top(self, key: str, where: str) -> None:
        if key not in self.fields:
            raise InvalidArgumentError(
                f"{where}: unknown key {key!r} of task {self.task!r}{closest_names_hint(key, list(self.fields))}"
            )

    def check_sub(self, name: str, sub: str, where: str) -> None:
        allowed = _allowed_keys(self.cls, name)
        if allowed is not None and sub not in allowed:
            raise InvalidArgumentError(f"{where}: unknown key {sub!r} of {name}{closest_names_hint(sub, allowed)}")

    def assign(self, key: str, value: Any, where: str) -> None:
        """``key`` (``field`` or ``field.sub[.sub...]``) := ``value``; ``where`` names the source in messages."""
        parts = key.split(".")
        if not all(parts):
            raise InvalidArgumentError(f"{where}: expected a key like action_scale or reward_weights.tilt, got {key!r}")
        name = parts[0]
        self.check_top(name, where)
        if len(parts) == 1:
            if isinstance(value, Mapping):
                for sub in value:
                    self.check_sub(name, str(sub), where)
            self.values[name] = dict(value) if isinstance(value, Mapping) else value
            self.origin[name] = where
            return
        self.check_sub(name, parts[1], where)
        held = self.current(name)
        if not isinstance(held, Mapping) and not (held is None and _is_mapping_field(self.cls, self.fields[name])):
            raise InvalidArgumentError(
                f"{where}: {name} is not a mapping (it holds {held!r}); give it whole: {name}=<JSON value>"
            )
        root = _copy(held) if held is not None else {}
        node = root
        for i, part in enumerate(parts[1:-1], start=1):
            inner = node.get(part)
            if inner is None:
                inner = node[part] = {}
            elif not isinstance(inner, dict):
                raise InvalidArgumentError(f"{where}: {'.'.join(parts[: i + 1])} is not a mapping (it holds {inner!r})")
            node = inner
        node[parts[-1]] = value
        self.values[name] = root
        self.origin[name] = where

    def validate(self) -> None:
        try:
            self.cls.from_dict(self.values)
        except (SimBackendError, TypeError, ValueError) as e:
            message = str(e)
            # the field the message names: config.FIELD, or a nested config's own FIELD.sub / FIELD: (terrain.types)
            named = re.match(r"(?:config\.)?(\w+)[.:\[]", message)
            where = self.origin.get(named.group(1)) if named else None
            if where is None:
                where = ", ".join(dict.fromkeys(self.origin.values())) or "task settings"
            kind = ArgumentTypeError if isinstance(e, TypeError) else InvalidArgumentError
            raise kind(f"{where}: {message}") from None


def _copy(value: Any) -> Any:
    """A copy of nested mappings as dicts (the leaves shared)."""
    return {k: _copy(v) for k, v in value.items()} if isinstance(value, Mapping) else value


def _read_file(file: Any) -> dict[str, Any]:
    where = f"--task-config {file}"
    try:
        data = json.loads(Path(file).read_text())
    except FileNotFoundError:
        raise InvalidArgumentError(f"--task-config: no such file {str(file)!r}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidArgumentError(f"{where}: cannot be read ({type(e).__name__}: {e})") from None
    except ValueError as e:
        raise InvalidArgumentError(f"{where}: not JSON ({e})") from None
    if not isinstance(data, dict):
        raise InvalidArgumentError(
            f"{where}: expected a JSON object of the task config's fields, got {type(data).__name__}"
        )
    return data


def task_settings(
    task_name: str,
    *,
    file: Any = None,
    sets: Iterable[str] = (),
    base: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The task config mapping of ``task_name`` from ``base``, then ``file``, then ``sets`` (later wins).

    Args:
        task_name: a registered task; its config class's fields are the keys.
        file: a JSON file holding an object of the config's fields (dotted keys allowed), or ``None``.
        sets: ``"key=value"`` strings (``--set``); ``key`` may be dotted (``reward_weights.tilt=-2``),
            ``value`` is JSON where it parses, else a plain string.
        base: a mapping of fields to start from (a checkpoint's ``task_config``), or ``None``.

    Returns:
        A dict of the fields given (missing ones keep the config's defaults), accepted by
        ``config_class.from_dict``.

    Raises:
        InvalidArgumentError / ArgumentTypeError: one line naming the source (``--set KEY``,
            ``--task-config FILE``, ``base``): an unknown key with the closest known names, a ``--set``
            without ``=``, an unreadable file, or the config's own message for a bad value.
    """
    from simbackend.tasks import get_task_class

    cls = get_task_class(task_name).config_class
    builder = _Builder(task_name, cls)
    if base is not None:
        if not isinstance(base, Mapping):
            raise ArgumentTypeError(f"base: expected a mapping of task config fields, got {type(base).__name__}")
        for key, value in base.items():
            builder.assign(str(key), _copy(value), "base")
    if file is not None:
        where = f"--task-config {file}"
        for key, value in _read_file(file).items():
            builder.assign(key, value, where)
    if isinstance(sets, str):
        raise ArgumentTypeError(f"sets: expected a sequence of 'key=value' strings, got the string {sets!r}")
    for item in sets:
        key, eq, text = item.partition("=") if isinstance(item, str) else ("", "", "")
        key = key.strip()
        if not eq or not key:
            raise InvalidArgumentError(f"--set: expected KEY=VALUE (e.g. action_scale=0.3), got {item!r}")
        builder.assign(key, parse_value(text), f"--set {key}")
    builder.validate()
    return builder.values


def _plain(value: Any) -> Any:
    """``value`` as JSON would give it back (tuples as lists, a plan as its dict)."""
    if hasattr(value, "to_dict"):
        value = value.to_dict()
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return value


def changed_settings(task_name: str, config: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """``[(key, value)]``: the settings of ``config`` (a task config mapping, e.g. a checkpoint's ``task_config``)
    that differ from the task's defaults, in field order; a mapping field is listed by its dotted sub-keys
    (``reward_weights.tilt``), and a key the config no longer has is listed as it is."""
    from simbackend.tasks import get_task_class

    cls = get_task_class(task_name).config_class
    fields = _fields(cls)
    defaults = {name: _plain(_default(f)) for name, f in fields.items()}
    out: list[tuple[str, Any]] = []
    for name in [*fields, *(k for k in config if k not in fields)]:
        if name not in config:
            continue
        value, default = _plain(config[name]), defaults.get(name, ...)
        if value == default:
            continue
        if isinstance(value, dict) and isinstance(default, dict) and name != "randomization":
            out.extend((f"{name}.{k}", v) for k, v in value.items() if default.get(k, ...) != v)
            out.extend((f"{name}.{k}", None) for k in default if k not in value)
        else:
            out.append((name, value))
    return out


def format_setting(key: str, value: Any) -> str:
    """``key=value`` as ``--set`` takes it back (a randomization plan summarised as its terms)."""
    if key == "randomization" and isinstance(value, Mapping) and isinstance(value.get("terms"), list):
        n = len(value["terms"])
        return f"randomization=<plan: {n} term{'s' if n != 1 else ''}, seed {value.get('seed')}>"
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return f"{key}={text}"
