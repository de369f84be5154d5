"""simbackend: one contract between robot-learning code and physics engines.

    from simbackend import make_backend
    with make_backend("mujoco", "arm7", num_envs=1024) as sim:
        info = sim.step(ctrl, nsteps=4)
        ee = sim.get_site_pos_w(sim.get_site_ids("ee_site"))

The engine is a flag: the same call with ``"sapien"`` runs on PhysX.

The package imports lazily: importing it (and running ``simbackend --help``)
loads neither torch nor any engine.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.9.0"

_LAZY = {
    "SimBackend": "simbackend.contract",
    "ActuatorGains": "simbackend.contract",
    "Capabilities": "simbackend.capabilities",
    "ModelInfo": "simbackend.model_info",
    "make_backend": "simbackend.registry",
    "available_backends": "simbackend.registry",
    "register_backend": "simbackend.registry",
    "unregister_backend": "simbackend.registry",
    "get_backend_factory": "simbackend.registry",
    "builtin_models": "simbackend.models",
    "BackendOptions": "simbackend.options",
    "COMMON_OPTIONS": "simbackend.options",
    "MAX_QPOS": "simbackend.divergence",
    "MAX_QVEL": "simbackend.divergence",
    "diverged_rows": "simbackend.divergence",
}

__all__ = sorted(_LAZY) + ["errors", "__version__"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in ("errors", "math", "models", "registry", "contract", "options", "divergence", "devices"):
        return importlib.import_module(f"simbackend.{name}")
    raise AttributeError(f"module 'simbackend' has no attribute {name!r}")
