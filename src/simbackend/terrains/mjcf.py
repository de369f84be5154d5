"""A terrain in a MuJoCo model: each tile built of what its form needs, and a flat border (:func:`add_terrain`).

Each tile is built as its surface is shaped (:data:`~simbackend.terrains.FORMS`):

* a flat-faced tile (flat, stairs, obstacles, stepping stones) as boxes
  (:func:`~simbackend.terrains.pieces.cell_boxes`): vertical risers, and
  contacts every engine computes for boxes as primitives;
* a slope as convex prisms under its planes
  (:func:`~simbackend.terrains.pieces.pyramid_prisms`), mesh geoms every
  engine collides as the convex solids they are;
* rough ground as a height field (one per tile): its surface is no union of
  a few convex solids.

Measured against one height field for every tile (the first edition,
``TerrainConfig.build="height_field"``), the boxes and prisms rest bodies where
MuJoCo rests them on the other engines too; on MuJoCo they cost more, since
MuJoCo poses every static geom at every step: docs/terrains.md gives both
tables. A rough tile's height field keeps its own
vertical range (MuJoCo stores elevations normalized to ``[0, 1]`` in float32:
the error is ``range * 6e-8``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from simbackend.errors import InvalidArgumentError

from .config import MAX_PIECES
from .pieces import TooManyPieces, cell_boxes, pyramid_prisms
from .terrain import Terrain

__all__ = ["add_terrain", "tile_geoms", "tile_name", "tile_pieces", "TERRAIN_PREFIX", "BASE_DEPTH"]

#: the name prefix of a terrain's geoms and height fields
TERRAIN_PREFIX = "terrain"
#: depth (m) of each tile's solid below its lowest point (a height field's ``base``), and of the border
BASE_DEPTH = 0.5
#: the least vertical range given to a height field (a flat tile's), m
_MIN_RANGE = 1e-3
_RGBA = [0.42, 0.45, 0.48, 1.0]


def tile_name(terrain: Terrain, level: int, column: int) -> str:
    """The name of tile ``(level, column)``: ``terrain_<column>_<type>_<level>``. A rough tile's height-field
    geom has this name; the pieces of the others are named ``<tile name>_<k>`` (:func:`tile_geoms`)."""
    return f"{TERRAIN_PREFIX}_{column}_{terrain.types[column]}_{level}"


def tile_pieces(
    terrain: Terrain, level: int, column: int, limit: int = MAX_PIECES
) -> tuple[np.ndarray, list[np.ndarray]]:
    """``(boxes, prisms)`` tile ``(level, column)`` is built of, from its centre: ``(k, 6)`` boxes ``(x_min,
    x_max, y_min, y_max, z_min, z_max)`` and each convex prism's ``(8, 3)`` vertices; none for rough ground
    (a height field). More than ``limit`` boxes is refused in one line naming the type's parameters."""
    form = terrain.forms[column]
    low = terrain.cells[level, column] if form == "cells" else terrain.tile_heights(level, column)
    bottom = float(low.min()) - BASE_DEPTH
    s = terrain.config.tile_size
    if form == "cells":
        try:
            return cell_boxes(terrain.cells[level, column], terrain.config.resolution, s, bottom, limit), []
        except TooManyPieces as e:
            kind = terrain.types[column]
            raise InvalidArgumentError(
                f"terrain.params.{kind}: tile ({level}, {column}) ({kind} at level {level}) would be built of"
                f" {e.count} boxes or more, more than the {MAX_PIECES} geoms a terrain may hold; use larger"
                " features or a coarser terrain.resolution"
            ) from None
    if form == "pyramid":
        p = terrain.params(level, column)
        slope = p["slope"] if terrain.types[column] == "slope_down" else -p["slope"]
        prisms, boxes = pyramid_prisms(slope, p["platform"], s, bottom)
        return boxes, prisms
    return np.zeros((0, 6)), []


def tile_geoms(terrain: Terrain, level: int, column: int) -> list[str]:
    """The names of the geoms tile ``(level, column)`` is built of, in the model's order: the height field's
    (:func:`tile_name`), or ``<tile name>_<k>`` for its boxes, then its prisms."""
    name = tile_name(terrain, level, column)
    if terrain.forms[column] == "samples":
        return [name]
    boxes, prisms = tile_pieces(terrain, level, column)
    return [f"{name}_{k}" for k in range(len(boxes) + len(prisms))]


def add_terrain(spec: Any, terrain: Terrain) -> None:
    """Add ``terrain`` to a ``mujoco.MjSpec``'s world body: every tile's pieces (boxes, convex prisms, or a
    rough tile's height field), the border's boxes."""
    from simbackend.models.mujoco_extra import import_mujoco

    mujoco = import_mujoco()

    cfg = terrain.config
    half = cfg.tile_size / 2
    friction = [cfg.friction, 0.005, 0.0001]
    common = {"contype": 1, "conaffinity": 1, "condim": 3, "friction": friction, "rgba": _RGBA}
    # every tile's pieces first: a terrain refused for its size leaves the spec as it was
    left, pieces = MAX_PIECES, {}
    for lv in range(terrain.num_levels):
        for col in range(terrain.num_types):
            if terrain.forms[col] != "samples":
                pieces[lv, col] = tile_pieces(terrain, lv, col, left)
                left -= len(pieces[lv, col][0]) + len(pieces[lv, col][1])
    for lv in range(terrain.num_levels):
        for col in range(terrain.num_types):
            name = tile_name(terrain, lv, col)
            cx, cy = terrain.tile_center(lv, col)
            if terrain.forms[col] != "samples":
                boxes, prisms = pieces[lv, col]
                names = iter(f"{name}_{k}" for k in range(len(boxes) + len(prisms)))
                holder = spec.worldbody
                for x0, x1, y0, y1, z0, z1 in boxes:
                    holder.add_geom(
                        name=next(names),
                        type=mujoco.mjtGeom.mjGEOM_BOX,
                        pos=[cx + (x0 + x1) / 2, cy + (y0 + y1) / 2, (z0 + z1) / 2],
                        size=[(x1 - x0) / 2, (y1 - y0) / 2, (z1 - z0) / 2],
                        **common,
                    )
                for verts in prisms:
                    piece = next(names)
                    spec.add_mesh(name=piece, uservert=verts.ravel().tolist())
                    holder.add_geom(
                        name=piece, type=mujoco.mjtGeom.mjGEOM_MESH, meshname=piece, pos=[cx, cy, 0.0], **common
                    )
                continue
            h = terrain.tile_heights(lv, col)
            lo, hi = float(h.min()), float(h.max())
            rng = max(hi - lo, _MIN_RANGE)
            spec.add_hfield(
                name=name,
                nrow=h.shape[0],
                ncol=h.shape[1],
                size=[half, half, rng, BASE_DEPTH],
                userdata=((h - lo) / rng).ravel().tolist(),
            )
            spec.worldbody.add_geom(
                name=name, type=mujoco.mjtGeom.mjGEOM_HFIELD, hfieldname=name, pos=[cx, cy, lo], **common
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
                **common,
            )
    spec.worldbody.add_light(pos=[0.0, 0.0, 6.0], dir=[0.0, 0.0, -1.0])


def tile_extrema(terrain: Terrain) -> np.ndarray:
    """``(levels, columns, 2)`` each tile's lowest and highest point."""
    return np.stack([terrain.heights.min(axis=(2, 3)), terrain.heights.max(axis=(2, 3))], axis=-1)
