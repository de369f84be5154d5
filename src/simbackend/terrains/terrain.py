"""A generated terrain (:class:`Terrain`): every tile's heights, where tiles lie, heights anywhere.

:func:`generate_terrain` draws the tiles of a :class:`TerrainConfig` from its
seed, the same on every machine (numpy's PCG64, one stream per tile), so a
task regenerates the terrain from its config instead of reading it back from
a scene. The grid lies centred on the world origin: level ``l`` (row) along x,
column ``c`` (type) along y; tile ``(l, c)``'s centre is at
``x = (l + 1/2 - levels/2) tile_size``, ``y = (c + 1/2 - columns/2) tile_size``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from simbackend.checks import short_repr
from simbackend.errors import InvalidArgumentError

from .config import TerrainConfig
from .tiles import FORMS, param_values, tile_surface

__all__ = ["Terrain", "generate_terrain", "SPAWN_HALF_WIDTH"]

#: a spawn point's height is the highest ground within this many metres (x and y) of the tile's centre
SPAWN_HALF_WIDTH = 0.4


@dataclass(frozen=True)
class Terrain:
    """A terrain's tiles (see the module docstring for the layout).

    Attributes:
        config: the config it was generated from.
        heights: ``(levels, columns, n+1, n+1)`` float64 heights (m) of the surface at every tile's sample
            points, rows along y and columns along x (a MuJoCo height field's order),
            ``n = tile_size / resolution`` (:func:`~simbackend.terrains.tile_surface`).
        cells: ``(levels, columns, n, n)`` float64 heights (m) of every cell of the flat-faced tiles (form
            ``cells``, :data:`~simbackend.terrains.FORMS`); 0 in the other columns.
    """

    config: TerrainConfig
    heights: np.ndarray
    cells: np.ndarray
    _device_heights: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def num_levels(self) -> int:
        return self.config.levels

    @property
    def num_types(self) -> int:
        return len(self.config.types)

    @property
    def types(self) -> tuple[str, ...]:
        return tuple(self.config.types)

    @property
    def forms(self) -> tuple[str, ...]:
        """Each column's form (:data:`~simbackend.terrains.FORMS`): ``cells``, ``pyramid`` or ``samples``; every
        column's is ``samples`` when the config builds every tile as a height field (``build``)."""
        if self.config.build == "height_field":
            return ("samples",) * self.num_types
        return tuple(FORMS[t] for t in self.config.types)

    def params(self, level: int, column: int) -> dict[str, float]:
        """Tile ``(level, column)``'s parameter values (its type's, at its level's difficulty)."""
        kind = self.types[column]
        return param_values(kind, self.difficulty(level), dict(self.config.params.get(kind, {})))

    def difficulty(self, level: int) -> float:
        return self.config.level_difficulty(level)

    def tile_heights(self, level: int, column: int) -> np.ndarray:
        return self.heights[level, column]

    def tile_center(self, level: int, column: int) -> tuple[float, float]:
        """World ``(x, y)`` of tile ``(level, column)``'s centre."""
        s = self.config.tile_size
        return (level + 0.5 - self.num_levels / 2) * s, (column + 0.5 - self.num_types / 2) * s

    @property
    def extent(self) -> tuple[float, float, float, float]:
        """``(x_min, x_max, y_min, y_max)`` of the tiles (the border lies outside)."""
        s = self.config.tile_size
        hx, hy = self.num_levels * s / 2, self.num_types * s / 2
        return -hx, hx, -hy, hy

    @property
    def origins(self) -> np.ndarray:
        """``(levels, columns, 3)`` spawn points: each tile's centre, at the highest point of the terrain
        within :data:`SPAWN_HALF_WIDTH` of it (a robot placed there starts above the ground around it)."""
        lv, col = np.meshgrid(np.arange(self.num_levels), np.arange(self.num_types), indexing="ij")
        s, res = self.config.tile_size, self.config.resolution
        x = (lv + 0.5 - self.num_levels / 2) * s
        y = (col + 0.5 - self.num_types / 2) * s
        n = self.heights.shape[-1] - 1
        k = min(n // 2, int(np.ceil(SPAWN_HALF_WIDTH / res)))
        mid = n // 2
        z = self.heights[:, :, mid - k : mid + k + 1, mid - k : mid + k + 1].max(axis=(2, 3))
        return np.stack([x, y, np.maximum(z, self.height_at(x, y))], axis=-1)

    def height_at(self, x: np.ndarray | float, y: np.ndarray | float) -> np.ndarray:
        """Terrain height (m) at world points, on the surface every engine collides: on a flat-faced tile the
        height of the cell under the point (on a riser, its top: the highest cell the point touches); on a slope the
        pyramid's planes; on rough ground each cell split into two triangles along its ``(r, c)``-``(r+1,
        c+1)`` diagonal (as MuJoCo splits a height field); 0 outside the tiles (the border, and any point at
        infinity). Every tile's rim is at 0 (:func:`~simbackend.terrains.tile_surface`), so a seam between
        tiles, and the grid's edge, has one height whichever tile reads it. ``x`` and ``y`` broadcast; NaN
        is refused in one line."""
        xy = []
        for name, v in (("x", x), ("y", y)):
            try:
                a = np.asarray(v, np.float64)
            except (TypeError, ValueError):
                raise InvalidArgumentError(f"height_at: {name}: expected real numbers, got {short_repr(v)}") from None
            if np.isnan(a).any():
                raise InvalidArgumentError(
                    f"height_at: {name}: expected numbers, got NaN at {np.argwhere(np.isnan(a))[0].tolist()}"
                )
            xy.append(a)
        try:
            bx, by = np.broadcast_arrays(*xy)
        except ValueError:
            raise InvalidArgumentError(
                f"height_at: x, y: shapes {xy[0].shape} and {xy[1].shape} do not broadcast"
            ) from None
        z = self.height_at_torch(torch.tensor(bx), torch.tensor(by))  # copies; a 0-d point stays 0-d
        return z.numpy()

    def height_at_torch(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """:meth:`height_at` on torch tensors, on their device, in their dtype (no host read); the one
        implementation (:meth:`height_at` runs it in float64 on the CPU). A NaN coordinate gives NaN."""
        key = (x.device, x.dtype)
        t = self._device_heights.get(key)
        if t is None:  # every tile's samples and cells, flat, and per tile its form and pyramid: gathers only
            t = self._device_heights[key] = self._tables(x.device, x.dtype)
        h, cells, form, slope, half_platform = t
        s, res = self.config.tile_size, self.config.resolution
        side = self.heights.shape[-1]
        n = side - 1
        x0, x1, y0, y1 = self.extent
        # sample units from the grid's corner; a tile spans n units and its last sample is the next one's first
        gu = (x - x0) / res
        gv = (y - y0) / res
        per = s / res
        lv = torch.floor(gu / per).clamp(0, self.num_levels - 1)
        col = torch.floor(gv / per).clamp(0, self.num_types - 1)
        u = gu - lv * per
        v = gv - col * per
        c = torch.floor(u).clamp(0, n - 1)
        r = torch.floor(v).clamp(0, n - 1)
        fu, fv = (u - c).clamp(0.0, 1.0), (v - r).clamp(0.0, 1.0)
        # clamped: a NaN coordinate casts to no particular index (its weights are NaN, and so is its height)
        tile = (lv * self.num_types + col).long().clamp_(0, self.num_levels * self.num_types - 1)
        idx = ((tile * side + r) * side + c).long().clamp_(0, h.numel() - side - 2)
        # gathers by index_select on the flat tables (torch.take: 2.4 x as slow on scattered points, CPU)
        h00, h01, h10, h11 = _gather(h, idx, (0, 1, side, side + 1))
        lower = fu >= fv
        tri = h00 + torch.where(lower, fu * (h01 - h00) + fv * (h11 - h01), fv * (h10 - h00) + fu * (h11 - h10))
        # a flat-faced tile's cell; a point on a riser (a cell line: fu or fv exactly 0) reads its top, the
        # highest cell it touches (within the tile: a tile's outermost cells are at 0, as is its neighbour's rim)
        base = ((tile * n + r) * n + c).long()
        cell, *others = _gather(cells, base, (0, -1, -n, -n - 1))
        left, below = (fu == 0) & (c > 0), (fv == 0) & (r > 0)
        for touch, other in zip((left, below, left & below), others):
            cell = torch.where(touch, torch.maximum(cell, other), cell)
        # a pyramid's planes: slope x (run from the rim, held at the platform's edge)
        cheb = torch.maximum((u - per / 2).abs(), (v - per / 2).abs()) * res
        tile_slope, tile_platform, f = (
            t.index_select(0, tile.reshape(-1)).view(tile.shape) for t in (slope, half_platform, form)
        )
        pyramid = tile_slope * (s / 2 - torch.maximum(cheb, tile_platform))
        z = torch.where(f == 0, cell, torch.where(f == 1, pyramid, tri))
        inside = (x >= x0) & (x <= x1) & (y >= y0) & (y <= y1)
        return z * inside

    def _tables(self, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        """What :meth:`height_at_torch` gathers from: samples, cells, and per tile its form (0 cells, 1
        pyramid, 2 samples), its signed slope and half its platform's width."""
        codes = {"cells": 0, "pyramid": 1, "samples": 2}
        forms, slope, half_platform = [], [], []
        for lv in range(self.num_levels):
            for col, kind in enumerate(self.types):
                forms.append(codes[self.forms[col]])
                p = self.params(lv, col)
                slope.append((1.0 if kind == "slope_down" else -1.0) * p.get("slope", 0.0))
                half_platform.append(min(p.get("platform", 0.0), self.config.tile_size) / 2)
        return (
            torch.tensor(self.heights.ravel(), dtype=dtype, device=device),
            torch.tensor(self.cells.ravel(), dtype=dtype, device=device),
            torch.tensor(forms, device=device),
            torch.tensor(slope, dtype=dtype, device=device),
            torch.tensor(half_platform, dtype=dtype, device=device),
        )

    def locate(self, x: np.ndarray | float, y: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
        """``(level, column)`` of the tile under world points, ``-1`` outside the grid."""
        x, y = np.broadcast_arrays(np.asarray(x, np.float64), np.asarray(y, np.float64))
        s = self.config.tile_size
        x0, x1, y0, y1 = self.extent
        inside = (x >= x0) & (x < x1) & (y >= y0) & (y < y1)
        lv = np.where(inside, np.floor((x - x0) / s), -1).astype(np.int64)
        col = np.where(inside, np.floor((y - y0) / s), -1).astype(np.int64)
        return lv, col


def generate_terrain(config: TerrainConfig) -> Terrain:
    """The tiles of ``config`` (a :class:`TerrainConfig`, a mapping or a JSON file), drawn from its seed."""
    config = TerrainConfig.load(config)
    n = int(round(config.tile_size / config.resolution))
    out = np.zeros((config.levels, len(config.types), n + 1, n + 1), np.float64)
    cells = np.zeros((config.levels, len(config.types), n, n), np.float64)
    seeds = np.random.SeedSequence(config.seed).spawn(config.levels * len(config.types))
    for lv in range(config.levels):
        d = config.level_difficulty(lv)
        for col, kind in enumerate(config.types):
            rng = np.random.Generator(np.random.PCG64(seeds[lv * len(config.types) + col]))
            samples, tile_cells = tile_surface(
                kind, d, config.tile_size, config.resolution, rng, dict(config.params.get(kind, {}))
            )
            out[lv, col] = samples
            if tile_cells is not None:
                cells[lv, col] = tile_cells
    out.setflags(write=False)
    cells.setflags(write=False)
    return Terrain(config, out, cells)


def _gather(table: torch.Tensor, index: torch.Tensor, shifts: tuple[int, ...]) -> list[torch.Tensor]:
    """``table[clamp(index + shift)]`` for each shift, in one ``index_select`` of the flat ``table``."""
    flat = index.reshape(1, -1)
    at = (flat + torch.tensor(shifts, device=index.device).view(-1, 1)).clamp_(0, table.numel() - 1)
    return list(table.index_select(0, at.reshape(-1)).view(len(shifts), *index.shape).unbind(0))
