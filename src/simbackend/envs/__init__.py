"""Adapters from a :class:`~simbackend.tasks.Task` to RL libraries' environment APIs.

Each adapter is one module, loaded on first use of one of its names (so
importing :mod:`simbackend.envs` loads no RL library):

- :mod:`simbackend.envs.gym`: :class:`SimVectorEnv`, a ``gymnasium.vector.VectorEnv``,
  and :func:`make_vector_env`.
- :mod:`simbackend.envs.wrappers`: gymnasium's episode-statistics and normalization
  wrappers on torch tensors, for :class:`SimVectorEnv`'s torch mode.
- :mod:`simbackend.envs.rsl`: :class:`RslRlVecEnv`, rsl-rl's ``VecEnv`` (same-step autoreset).
- :mod:`simbackend.envs.sb3`: :class:`SB3VecEnv`, stable-baselines3's ``VecEnv``, and
  :func:`make_sb3_env`.
- :mod:`simbackend.envs.torchrl`: :class:`TorchRLEnv`, torchrl's ``EnvBase``, and
  :func:`make_torchrl_env`.

skrl needs no adapter: its ``wrap_env`` takes a :class:`SimVectorEnv` as it is.
"""

from __future__ import annotations

import importlib
from typing import Any

#: exported name -> adapter module (relative to this package) that defines it; an adapter adds its names here
_EXPORTS = {
    "SimVectorEnv": "gym",
    "make_vector_env": "gym",
    "RslRlVecEnv": "rsl",
    "SB3VecEnv": "sb3",
    "make_sb3_env": "sb3",
    "TorchRLEnv": "torchrl",
    "make_torchrl_env": "torchrl",
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
