"""Adapters from a :class:`~simbackend.tasks.Task` to RL libraries' environment APIs.

Each adapter is one module, loaded on first use of one of its names (so
importing :mod:`simbackend.envs` loads no RL library):

- :mod:`simbackend.envs.gym`: :class:`SimVectorEnv`, a ``gymnasium.vector.VectorEnv``,
  and :func:`make_vector_env`.
- :mod:`simbackend.envs.rsl`: :class:`RslRlVecEnv`, rsl-rl's ``VecEnv`` (same-step autoreset).
"""

from __future__ import annotations

import importlib
from typing import Any

#: exported name -> adapter module (relative to this package) that defines it; an adapter adds its names here
_EXPORTS = {
    "SimVectorEnv": "gym",
    "make_vector_env": "gym",
    "RslRlVecEnv": "rsl",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
