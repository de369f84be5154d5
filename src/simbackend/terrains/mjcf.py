"""A terrain in a MuJoCo model: one height field per tile and a flat border of boxes (:func:`add_terrain`).

Why height fields for every tile, stairs and stones included: every engine
here loads a MuJoCo height field as the same surface (MuJoCo and MuJoCo Warp
natively; SAPIEN as a static PhysX triangle mesh of MuJoCo's very triangles),
so one representation gives every engine one terrain, and a height scan reads
it exactly. A plugin engine that collides height fields otherwise than MuJoCo
says so when it loads one (docs/terrains.md). Boxes would give stairs vertical risers, but
many of them: a tile of stairs is dozens of geoms, each in every engine's
broad phase; a height field's riser is one cell (``resolution``) wide
instead, as legged_gym's and Isaac Lab's height-field terrains have it.

One height field per tile keeps each field small (MuJoCo collides a geom with
the prisms under its bounding box, and caps the contacts per geom pair), and
lets a tile's vertical range be its own (MuJoCo stores elevations normalized
to ``[0, 1]`` in float32: the error is ``range * 6e-8``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .terrain import Terrain

__all__ = ["add_terrain", "tile_name", "TERRAIN_PREFIX", "BASE_DEPTH"]

#: the name prefix of a terrain's geoms and height fields
TERRAIN_PREFIX = "terrain"
#: depth (m) of each height field's solid below its lowest point (MuJoCo's ``base``), and of the border
BASE_DEPTH = 0.5
#: the least vertical range given to a height field (a flat tile's), m
_MIN_RANGE = 1e-3
_RGBA = [0.42, 0.45, 0.48, 1.0]


def tile_name(terrain: Terrain, level: int, column: int) -> str:
    """The geom (and height field) name of tile ``(level, column)``: ``terrain_<column>_<type>_<level>``."""
    return f"{TERRAIN_PREFIX}_{column}_{terrain.types[column]}_{level}"


def add_terrain(spec: Any, terrain: Terrain) -> None:
    """Add ``terrain`` to a ``mujoco.MjSpec``'s world body: a height field per tile, the border's boxes."""
    from simbackend.models.mujoco_extra import import_mujoco

    mujoco = import_mujoco()

    cfg = terrain.config
    half = cfg.tile_size / 2
    friction = [cfg.friction, 0.005, 0.0001]
    for lv in range(terrain.num_levels):
        for col in range(terrain.num_types):
            h = terrain.tile_heights(lv, col)
            lo, hi = float(h.min()), float(h.max())
            rng = max(hi - lo, _MIN_RANGE)
            name = tile_name(terrain, lv, col)
            spec.add_hfield(
                name=name,
                nrow=h.shape[0],
                ncol=h.shape[1],
                size=[half, half, rng, BASE_DEPTH],
                userdata=((h - lo) / rng).ravel().tolist(),
            )
            cx, cy = terrain.tile_center(lv, col)
            spec.worldbody.add_geom(
                name=name,
                type=mujoco.mjtGeom.mjGEOM_HFIELD,
                hfieldname=name,
                pos=[cx, cy, lo],
                contype=1,
                conaffinity=1,
                condim=3,
                friction=friction,
                rgba=_RGBA,
            )
    x0, x1, y0, y1 = terrain.extent
    b = cfg.border
    if b > 0:  # four boxes, top at z = 0: two along x covering the corners, two along y between them
        hx, hy = (x1 - x0) / 2 + b, (y1 - y0) / 2
        for i, (px, py, sx, sy) in enumerate(
            (
                (0.0, y1 + b / 2, hx, b / 2),
                (0.0, y0 - b / 2, hx, b / 2),
                (x1 + b / 2, 0.0, b / 2, hy),
                (x0 - b / 2, 0.0, b / 2, hy),
            )
        ):
            spec.worldbody.add_geom(
                name=f"{TERRAIN_PREFIX}_border_{i}",
                type=mujoco.mjtGeom.mjGEOM_BOX,
                pos=[px, py, -BASE_DEPTH / 2],
                size=[sx, sy, BASE_DEPTH / 2],
                contype=1,
                conaffinity=1,
                condim=3,
                friction=friction,
                rgba=_RGBA,
            )
    spec.worldbody.add_light(pos=[0.0, 0.0, 6.0], dir=[0.0, 0.0, -1.0])


def tile_extrema(terrain: Terrain) -> np.ndarray:
    """``(levels, columns, 2)`` each tile's lowest and highest point."""
    return np.stack([terrain.heights.min(axis=(2, 3)), terrain.heights.max(axis=(2, 3))], axis=-1)
