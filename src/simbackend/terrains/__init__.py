"""Rough terrain: generated grids of sub-terrain tiles, described as data, on every engine.

A :class:`TerrainConfig` (a dataclass, or the same fields as JSON) describes a
grid of tiles: rows are difficulty levels, columns terrain types (flat, rough,
slopes, stairs, obstacles, stepping stones; :data:`TERRAIN_TYPES`).
:func:`generate_terrain` draws it from its seed (:class:`Terrain`: every tile's
heights, tile centres, heights anywhere); :func:`add_terrain` puts it into a
MuJoCo model, each tile built as its surface is shaped (boxes for flat-faced
types, convex prisms for slopes, a height field for rough ground), which every
engine loads as the same surface; :func:`simbackend.robots.robot_scene` composes a robot on it. See
docs/terrains.md.
"""

from .config import (
    BUILDS,
    DEFAULT_TYPES,
    MAX_HEIGHT,
    MAX_NOISE_STEPS,
    MAX_OBSTACLES,
    MAX_PIECES,
    MAX_SAMPLES,
    MAX_TILES,
    TerrainConfig,
)
from .mjcf import BASE_DEPTH, TERRAIN_PREFIX, add_terrain, tile_geoms, tile_name, tile_pieces
from .terrain import Terrain, generate_terrain
from .tiles import FORMS, TERRAIN_TYPES, param_values, tile_heights, tile_surface

__all__ = [
    "BASE_DEPTH",
    "BUILDS",
    "DEFAULT_TYPES",
    "FORMS",
    "MAX_HEIGHT",
    "MAX_NOISE_STEPS",
    "MAX_OBSTACLES",
    "MAX_PIECES",
    "MAX_SAMPLES",
    "MAX_TILES",
    "TERRAIN_PREFIX",
    "TERRAIN_TYPES",
    "Terrain",
    "TerrainConfig",
    "add_terrain",
    "generate_terrain",
    "param_values",
    "tile_geoms",
    "tile_heights",
    "tile_name",
    "tile_pieces",
    "tile_surface",
]
