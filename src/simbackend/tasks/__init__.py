"""Batched tasks over any backend, registered by name.

A task is one file: a :class:`Task` subclass with a config dataclass,
decorated with :func:`register_task`. Built-in tasks (``cartpole``,
``reach``, ``velocity`` over any robot of :mod:`simbackend.robots`, and
``quadruped``, the velocity task on the built-in quadruped) load on first lookup; third-party packages add
theirs through the entry-point group ``simbackend.tasks`` (``name =
"package.module:TaskClass"``).

>>> task = make_task("cartpole", sim="mujoco", num_envs=64, seed=0)   # doctest: +SKIP
>>> obs = task.reset(); out = task.step(torch.zeros(64, task.action_dim))   # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import Any

from simbackend.errors import ArgumentTypeError, InvalidArgumentError, UnknownNameError

from .base import Task, TaskConfig, TaskStep, load_plan

__all__ = [
    "Task",
    "TaskConfig",
    "TaskStep",
    "available_tasks",
    "get_task_class",
    "load_plan",
    "make_task",
    "register_task",
]

#: built-in task modules, imported on first lookup
_BUILTIN = ("cartpole", "reach", "velocity")
_TASKS: dict[str, type[Task]] = {}
_loaded = False


def register_task(cls: type[Task]) -> type[Task]:
    """Class decorator: register a :class:`Task` subclass under ``cls.name``."""
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise ArgumentTypeError(f"register_task: expected a Task subclass, got {cls!r}")
    if not isinstance(cls.name, str) or not cls.name:
        raise InvalidArgumentError(f"register_task: {cls.__name__}.name must be a non-empty string")
    other = _TASKS.get(cls.name)
    if other is not None and other is not cls and other.__qualname__ != cls.__qualname__:
        raise InvalidArgumentError(f"register_task: task name {cls.name!r} is taken by {other.__qualname__}")
    _TASKS[cls.name] = cls
    return cls


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for mod in _BUILTIN:
        importlib.import_module(f"{__name__}.{mod}")
    for ep in metadata.entry_points(group="simbackend.tasks"):
        if ep.name not in _TASKS:
            register_task(ep.load())


def available_tasks() -> tuple[str, ...]:
    """Names of the registered tasks, sorted."""
    _load()
    return tuple(sorted(_TASKS))


def get_task_class(name: str) -> type[Task]:
    """The task class registered as ``name``; unknown names list the closest ones."""
    if not isinstance(name, str):
        raise ArgumentTypeError(f"task: expected a task name, got {type(name).__name__}")
    _load()
    if name not in _TASKS:
        raise UnknownNameError("task", name, _TASKS)
    return _TASKS[name]


def make_task(
    name: str,
    sim: str = "mujoco",
    num_envs: int = 1,
    *,
    config: Any = None,
    seed: int = 0,
    device: Any = None,
    **backend_options: Any,
) -> Task:
    """Build backend ``sim`` on the task's model and the task over it; swapping the engine is ``sim``.

    Args:
        name: a registered task (:func:`available_tasks`).
        sim: a registered backend name.
        num_envs: N.
        config: the task's config, a mapping of its fields, or ``None``.
        seed: seed of the task's resets (the backend gets the same seed).
        device: torch device for the backend.
        **backend_options: passed to the backend factory.
    """
    from simbackend.registry import make_backend

    cls = get_task_class(name)
    if config is None or not isinstance(config, cls.config_class):
        config = cls.config_class.from_dict(config)
    options = {**cls.backend_options(config), **backend_options}
    backend = make_backend(sim, cls.model_source(config), num_envs, device=device, seed=seed, **options)
    try:
        return cls(backend, config, seed=seed, owns_backend=True)
    except BaseException:
        backend.close()
        raise
