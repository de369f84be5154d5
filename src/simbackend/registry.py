"""Build backends by name: ``make_backend("mujoco", "arm7", 1024)``.

The names come from :mod:`simbackend.plugins` (entry points of the group
``simbackend.backends`` and runtime registrations), re-exported here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simbackend.plugins import (
    ENTRY_POINT_GROUP,
    available_backends,
    backend_provider,
    get_backend_factory,
    register_backend,
    unregister_backend,
)

if TYPE_CHECKING:  # pragma: no cover
    from simbackend.contract import SimBackend

__all__ = [
    "ENTRY_POINT_GROUP",
    "available_backends",
    "backend_provider",
    "get_backend_factory",
    "make_backend",
    "register_backend",
    "unregister_backend",
]


def make_backend(
    sim: str, model: Any, num_envs: int, *, device: Any = None, seed: int = 0, **options: Any
) -> SimBackend:
    """Build backend ``sim`` for ``model`` with ``num_envs`` parallel environments.

    Args:
        sim: registered backend name, case-insensitive (:func:`available_backends`), or a mix of
            engines, each holding a contiguous block of the envs: ``"mujoco,sapien"`` (equal shares,
            as ``numpy.array_split``) or ``"mujoco:96,sapien:32"`` (counts summing to ``num_envs``);
            see :mod:`simbackend.mixing`.
        model: a model source: MJCF/URDF path, ``mujoco.MjSpec`` or built-in model name.
        num_envs: number of parallel environments N (>= 1).
        device: torch device for the returned tensors (and for the physics on GPU
            backends); ``None`` picks the backend's default.
        seed: seed of the backend's random streams.
        **options: backend-specific options (for MuJoCo: ``nthread``).
    """
    from simbackend.mixing import is_mix

    if is_mix(sim):  # several engines, each holding a block of the envs (simbackend.mixing)
        from simbackend.mixing import mixed_engine_class

        mixed = mixed_engine_class(sim, num_envs, device, options)
        if not isinstance(mixed, str):
            from simbackend.contract import SimBackend

            return SimBackend(mixed, model, num_envs, device=device, seed=seed, **options)
        sim = mixed  # one engine named with its count: the ordinary backend
    factory = get_backend_factory(sim)
    from simbackend.engine import Engine

    if isinstance(factory, type) and issubclass(factory, Engine):
        from simbackend.contract import SimBackend

        return SimBackend(factory, model, num_envs, device=device, seed=seed, **options)
    return factory(model, num_envs, device=device, seed=seed, **options)
