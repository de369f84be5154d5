"""Tiled views: where each env of a tiled picture sits, and how its scene is assembled.

Env ``k`` of a tiled view is shifted by :func:`tile_offsets`; the floor (planes
of the world body facing up or down, :func:`is_floor`) is drawn once, from the
first env, repeated edge to edge (:func:`floor_tiles`) until it covers every
env's cell; :func:`directional_lights` lets the first env's lights light every
env. :class:`~simbackend.playback.render.Renderer` puts these together.
"""

from __future__ import annotations

import math
from typing import Any

import mujoco
import numpy as np

from simbackend import checks
from simbackend.playback.render.arguments import check_model

__all__ = ["copy_geom", "default_spacing", "directional_lights", "floor_tiles", "is_floor", "tile_offsets"]

_OBJ_GEOM = int(mujoco.mjtObj.mjOBJ_GEOM)
_GEOM_NONE = int(mujoco.mjtGeom.mjGEOM_NONE)
_LIGHT_SPOT = int(mujoco.mjtLightType.mjLIGHT_SPOT)
_LIGHT_POINT = int(mujoco.mjtLightType.mjLIGHT_POINT)
_LIGHT_DIRECTIONAL = int(mujoco.mjtLightType.mjLIGHT_DIRECTIONAL)


def default_spacing(model: Any) -> float:
    """Distance between neighbouring envs of a tiled view: ``1.1 * model.stat.extent`` metres."""
    return 1.1 * max(float(check_model(model).stat.extent), 1e-3)


def tile_offsets(n: int, spacing: float) -> np.ndarray:
    """``(n, 3)`` float64 world-frame shifts of the envs of a tiled view, metres.

    Env ``k`` (in the order the envs are given) sits in column ``k % c`` and row
    ``k // c`` of a grid of ``c = ceil(sqrt(n))`` columns: shifted by
    ``(column * spacing, row * spacing, 0)``. The first env is not shifted.
    """
    n = checks.integer(n, "n", minimum=0)
    s = checks.real(spacing, "spacing", minimum=0.0, above=True)
    cols = max(1, math.ceil(math.sqrt(n)))
    k = np.arange(n)
    return np.stack([(k % cols) * s, (k // cols) * s, np.zeros(n)], axis=1).astype(np.float64)


def is_floor(g: Any, world_plane: np.ndarray) -> bool:
    """Scene geom ``g`` is a plane of the world body (``world_plane[geom id]``) facing up or down
    (its normal, the local z axis, along world z)."""
    if g.objtype != _OBJ_GEOM or g.type == _GEOM_NONE or not world_plane[g.objid]:
        return False
    return abs(float(g.mat[2, 2] if np.ndim(g.mat) == 2 else g.mat[8])) > 0.999


def floor_tiles(g: Any, offsets: np.ndarray) -> list[np.ndarray]:
    """Centres of the extra copies of floor ``g`` (edge to edge, in its own frame) that, with
    ``g``, cover the floor of every env shifted by ``offsets``; none for an infinite plane."""
    hx, hy = float(g.size[0]), float(g.size[1])
    if hx <= 0 or hy <= 0:
        return []
    mat = np.asarray(g.mat, np.float64).reshape(3, 3)
    ax, ay = mat[:, 0], mat[:, 1]
    px, py = offsets @ ax, offsets @ ay
    i_range = range(math.floor(px.min() / (2 * hx) + 1e-9), math.ceil(px.max() / (2 * hx) - 1e-9) + 1)
    j_range = range(math.floor(py.min() / (2 * hy) + 1e-9), math.ceil(py.max() / (2 * hy) - 1e-9) + 1)
    pos = np.asarray(g.pos, np.float64)
    return [pos + 2 * hx * i * ax + 2 * hy * j * ay for i in i_range for j in j_range if (i, j) != (0, 0)]


def directional_lights(scene: Any) -> None:
    """Make the scene's spot and point lights (not the headlight) directional, so that envs
    far from the first are lit as it is."""
    for light in scene.lights[: scene.nlight]:
        if not light.headlight and light.type in (_LIGHT_SPOT, _LIGHT_POINT):
            light.type = _LIGHT_DIRECTIONAL


_GEOM_FIELDS: tuple[str, ...] | None = None


def copy_geom(dst: Any, src: Any) -> None:
    """Copy every field of scene geom ``src`` into scene geom ``dst``."""
    global _GEOM_FIELDS
    if _GEOM_FIELDS is None:
        _GEOM_FIELDS = tuple(a for a in dir(src) if not a.startswith("_") and not callable(getattr(src, a)))
    for name in _GEOM_FIELDS:
        value = getattr(src, name)
        if isinstance(value, np.ndarray):
            getattr(dst, name)[...] = value
        else:
            try:
                setattr(dst, name, value)
            except AttributeError:  # a read-only field
                pass
