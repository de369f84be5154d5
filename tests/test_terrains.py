"""Generated terrains (:mod:`simbackend.terrains`): the tiles' geometry, the grid, the surface a height
field gives MuJoCo, bad configs, and a robot's scene on a terrain.

Each type's geometry is checked at known difficulties against its definition (step heights and tread
widths, rise over run, stone and pit widths, the platforms kept clear, the noise's levels); ``height_at``
against MuJoCo's own ray cast on the composed model; every bad field fails in one line naming it.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from simbackend.errors import ArgumentTypeError, InvalidArgumentError, ScalarTypeError
from simbackend.robots import robot_scene
from simbackend.terrains import (
    BASE_DEPTH,
    FORMS,
    MAX_SAMPLES,
    TERRAIN_PREFIX,
    TERRAIN_TYPES,
    Terrain,
    TerrainConfig,
    add_terrain,
    generate_terrain,
    param_values,
    tile_geoms,
    tile_name,
    tile_pieces,
    tile_surface,
)


def _one(kind: str, difficulty: float, tile: float = 8.0, res: float = 0.05, seed: int = 0, **params) -> np.ndarray:
    """A single ``tile`` m tile's surface (``params``: ``name=(easy, hard)``): a flat-faced type's cells, any
    other type's samples (``tile_surface``)."""
    samples, cells = tile_surface(kind, difficulty, tile, res, np.random.default_rng(seed), params or None)
    return samples if cells is None else cells


def _any(value: Any) -> Any:
    """``value``, of no particular type (a wrong type passed on purpose)."""
    return value


def _runs(row: np.ndarray) -> list[tuple[float, int]]:
    """``(value, length)`` of each run of equal values along ``row``."""
    out: list[tuple[float, int]] = []
    for v in row:
        if out and abs(out[-1][0] - v) < 1e-12:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((float(v), 1))
    return out


# ----------------------------------------------------------------------------
# each type's geometry
# ----------------------------------------------------------------------------
@pytest.mark.parametrize("difficulty", [0.0, 0.5, 1.0])
def test_stairs_step_heights_and_tread_widths(difficulty: float) -> None:
    size, res = 8.0, 0.05
    height = 0.05 + difficulty * (0.20 - 0.05)  # the default step_height pair
    up, down = _one("stairs_up", difficulty, size, res), _one("stairs_down", difficulty, size, res)
    np.testing.assert_array_equal(down, -up)
    n = up.shape[0] - 1
    # four-fold symmetric pyramids
    np.testing.assert_array_equal(up, up.T)
    np.testing.assert_array_equal(up, up[::-1])
    np.testing.assert_array_equal(up, up[:, ::-1])
    steps = int(np.floor((size / 2 - 0.5) / 0.30 + 1e-9))  # rim to the 1 m platform, treads 0.3 m: 11
    assert steps == 11
    line = up[n // 2, n // 2 :]  # from the centre out along +x, at y = 0
    runs = _runs(line)
    # climbing out of the pit: a tread every step_height up, the last (the rim) at 0
    assert [v for v, _ in runs] == pytest.approx([-height * (steps - k) for k in range(steps + 1)], abs=1e-12)
    # every tread but the central one (the platform and what is left of its step) is 0.3 m: 6 samples
    assert [length for _, length in runs[1:]] == [6] * steps
    assert runs[0][1] * res >= 0.5  # the platform's half
    assert up.max() == 0.0 and up.min() == pytest.approx(-steps * height)


@pytest.mark.parametrize("difficulty", [0.25, 1.0])
def test_slopes_rise_over_run_and_platform(difficulty: float) -> None:
    size, res = 8.0, 0.1
    slope = 0.4 * difficulty
    up, down = _one("slope_up", difficulty, size, res), _one("slope_down", difficulty, size, res)
    np.testing.assert_allclose(down, -up, atol=1e-12)
    n = up.shape[0] - 1
    x = np.linspace(-size / 2, size / 2, n + 1)
    line = up[n // 2]  # along x at y = 0
    outside = np.abs(x) >= 0.5
    # rise over run: |x| from the platform's edge (0.5 m) out to the rim (4 m), up by slope per metre
    np.testing.assert_allclose(line[outside], -slope * (size / 2 - np.abs(x[outside])), atol=1e-12)
    np.testing.assert_allclose(line[~outside], -slope * (size / 2 - 0.5), atol=1e-12)  # the level platform
    assert line[0] == line[-1] == 0.0
    # the faces are planes: height_at between samples on the +x face rises at the slope
    t = generate_terrain(TerrainConfig(types=("slope_up",), levels=1, difficulty=(difficulty, difficulty)))
    xs = np.linspace(0.6, 3.9, 37)
    np.testing.assert_allclose(np.diff(t.height_at(xs, 0.37)) / np.diff(xs), slope, atol=1e-9)


def test_pyramids_up_climb_out_and_down_descend() -> None:
    """``up``: the robot at the centre faces ground rising away from it (the platform at the bottom);
    ``down``: falling away (the platform on top); every rim at 0."""
    t = generate_terrain(TerrainConfig(types=("slope_up", "slope_down", "stairs_up", "stairs_down"), levels=2))
    z = t.origins[1, :, 2]  # the hard level's centres
    assert z[0] < -1.0 and z[1] > 1.0 and z[2] < -1.0 and z[3] > 1.0
    for col in range(4):
        h = t.tile_heights(1, col)
        rim = np.concatenate([h[0], h[-1], h[:, 0], h[:, -1]])
        assert (rim == 0).all()
        centre = h[h.shape[0] // 2, h.shape[1] // 2]
        line = h[h.shape[0] // 2, h.shape[1] // 2 :]  # centre to rim
        steps = np.diff(line)
        assert (steps >= -1e-12).all() if centre < 0 else (steps <= 1e-12).all()  # monotone outwards


def test_stepping_stones_pits_and_platform() -> None:
    size, res, d = 8.0, 0.05, 1.0
    p = param_values("stepping_stones", d)
    assert (p["stone_size"], p["gap"], p["depth"], p["platform"]) == pytest.approx((0.4, 0.3, 0.5, 1.2))
    h = _one("stepping_stones", d, size, res, seed=3)
    assert set(np.unique(h)) == {0.0, -0.5}
    n = h.shape[0] - 1
    x = np.linspace(-size / 2, size / 2, n + 1)
    cheb = np.maximum(np.abs(x)[None, :], np.abs(x)[:, None])
    assert (h[cheb <= 0.6] == 0).all()  # the platform
    outside = h[cheb > 0.8]
    assert 0.55 < (outside < 0).mean() < 0.8  # pits: 1 - (0.4 / 0.7)^2 of the area away from the platform
    # along every row clear of the platform: stones 0.4 m wide (8-9 samples), pits 0.3 m (5-6 samples)
    stones, pits = set(), set()
    for r in np.flatnonzero(np.abs(x) > 0.7):
        runs = _runs(h[r, 1:-1])[1:-1]  # the rim (at 0) and the runs it cuts left out
        stones |= {length for v, length in runs if v == 0}
        pits |= {length for v, length in runs if v < 0 and len(runs) > 1}
    assert stones and stones <= {8, 9} and pits and pits <= {5, 6}
    # the lattice's offset is drawn: another seed, other stones
    assert not np.array_equal(h, _one("stepping_stones", d, size, res, seed=4))


@pytest.mark.parametrize("difficulty", [0.0, 1.0])
def test_obstacles_leave_the_platform_clear(difficulty: float) -> None:
    size, res = 8.0, 0.05
    height = 0.05 + difficulty * 0.15
    n = int(size / res)
    x = np.linspace(-size / 2 + res / 2, size / 2 - res / 2, n)  # the cells' centres
    cheb = np.maximum(np.abs(x)[None, :], np.abs(x)[:, None])
    for seed in range(5):
        h = _one("obstacles", difficulty, size, res, seed=seed)
        assert (h[cheb <= 1.0] == 0).all()  # the 2 m platform
        values = set(np.round(np.unique(h), 12))
        assert values <= {0.0, height, -height, height / 2, -height / 2} and len(values) > 2
        # 20 rectangles of sides (0.5-1) x size (0.4 m easy, 1 m hard) on 64 m^2: 2.8 % and 17.6 % on average
        cover = 20 * (0.75 * (0.4 + 0.6 * difficulty)) ** 2 / size**2
        assert 0.3 * cover < (h != 0).mean() < 1.5 * cover
    few = _one("obstacles", difficulty, size, res, count=(1.0, 1.0), size=(0.4, 0.4))
    assert (few != 0).sum() <= (0.4 / res + 1) ** 2  # one obstacle, at most size x size


def test_rough_amplitude_and_quantization() -> None:
    for d, amplitude in ((0.0, 0.02), (0.5, 0.06), (1.0, 0.10)):
        h = _one("rough", d, 8.0, 0.1, seed=1)
        assert (h[[0, -1]] == 0).all() and (h[:, [0, -1]] == 0).all()  # the rim
        levels = np.unique(np.round(h[1:-1, 1:-1] / 0.005, 9))
        k = round(amplitude / 0.005)
        # every level, in whole steps of 5 mm, from -amplitude/2 to +amplitude/2 (81^2 samples)
        np.testing.assert_array_equal(levels, np.arange(k + 1) - k / 2)
        assert abs(h.mean()) < 0.1 * amplitude
    # an amplitude that is no whole number of steps: whole steps within it, centred on 0
    odd = _one("rough", 0.0, 4.0, 0.1, amplitude=(0.1, 0.1), step=(0.03, 0.03))
    np.testing.assert_allclose(np.unique(odd[1:-1, 1:-1]), [-0.045, -0.015, 0.015, 0.045], atol=1e-12)
    assert (_one("rough", 0.0, 4.0, 0.1, amplitude=(0.004, 0.004)) == 0).all()  # less than a step: level
    assert (_one("flat", 1.0) == 0).all()


def test_difficulty_per_level() -> None:
    cfg = TerrainConfig(types=("stairs_down",), levels=3, difficulty=(0.2, 0.6), tile_size=4.0)
    assert [cfg.level_difficulty(lv) for lv in range(3)] == pytest.approx([0.2, 0.4, 0.6])
    assert TerrainConfig(levels=1, difficulty=(0.3, 0.9)).level_difficulty(0) == 0.3
    t = generate_terrain(cfg)
    steps = int(np.floor((2.0 - 0.5) / 0.3 + 1e-9))
    for lv in range(3):
        assert t.difficulty(lv) == pytest.approx(0.2 + 0.2 * lv)
        top = t.tile_heights(lv, 0).max()  # the platform: steps x step_height
        assert top == pytest.approx(steps * (0.05 + 0.15 * (0.2 + 0.2 * lv)))


# ----------------------------------------------------------------------------
# seeds, parameters, the grid
# ----------------------------------------------------------------------------
RANDOM = ("rough", "obstacles", "stepping_stones")


def test_a_seed_gives_the_same_terrain_and_another_seed_another() -> None:
    cfg = TerrainConfig(tile_size=4.0, levels=2, seed=7)
    a, b = generate_terrain(cfg), generate_terrain(TerrainConfig.from_dict(cfg.to_dict()))
    np.testing.assert_array_equal(a.heights, b.heights)
    assert TerrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    assert not a.heights.flags.writeable
    c = generate_terrain(TerrainConfig(tile_size=4.0, levels=2, seed=8))
    for col, kind in enumerate(cfg.types):
        same = np.array_equal(a.heights[:, col], c.heights[:, col])
        assert same == (kind not in RANDOM), kind
    # every tile draws its own stream: two rough columns differ
    twice = generate_terrain(TerrainConfig(types=("rough", "rough"), levels=1, tile_size=2.0))
    assert not np.array_equal(twice.heights[0, 0], twice.heights[0, 1])


def test_the_same_terrain_in_another_process() -> None:
    """No state of the process (hash seeds, numpy's global generator) enters the draw."""
    code = (
        "import hashlib, numpy as np; np.random.seed(123)\n"
        "from simbackend.terrains import TerrainConfig, generate_terrain\n"
        "t = generate_terrain(TerrainConfig(tile_size=2.0, levels=2, seed=5))\n"
        "print(hashlib.sha256(t.heights.tobytes()).hexdigest())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONHASHSEED": "77"},
    )
    assert out.returncode == 0, out.stderr
    here = generate_terrain(TerrainConfig(tile_size=2.0, levels=2, seed=5)).heights.tobytes()
    assert out.stdout.strip() == hashlib.sha256(here).hexdigest()


def test_params_override_a_types_ranges() -> None:
    cfg = TerrainConfig(
        types=("stairs_up", "stairs_down"),
        levels=2,
        tile_size=4.0,
        resolution=0.05,
        params={"stairs_up": {"step_height": [0.1, 0.1], "step_width": (0.5, 0.25)}},
    )
    assert cfg.params == {"stairs_up": {"step_height": (0.1, 0.1), "step_width": (0.5, 0.25)}}
    assert param_values("stairs_up", 0.5, dict(cfg.params["stairs_up"])) == pytest.approx(
        {"step_height": 0.1, "step_width": 0.375, "platform": 1.0}
    )
    t = generate_terrain(cfg)
    for lv, width in ((0, 0.5), (1, 0.25)):
        runs = _runs(t.tile_heights(lv, 0)[40, 40:])
        assert [v for v, _ in runs][-2:] == pytest.approx([-0.1, 0.0])  # 0.1 m steps at every level
        assert runs[-2][1] == round(width / 0.05)  # the override's tread width at that level
    # the other column keeps the defaults: 0.05 m steps at level 0, 0.2 m at level 1
    assert [_runs(t.tile_heights(lv, 1)[40, 40:])[-2][0] for lv in (0, 1)] == pytest.approx([0.05, 0.2])


def test_grid_layout_tiles_extent_locate_and_origins() -> None:
    cfg = TerrainConfig(types=("flat", "stairs_up", "slope_down"), levels=4, tile_size=2.0, border=1.0)
    t = generate_terrain(cfg)
    assert t.heights.shape == (4, 3, 21, 21) and (t.num_levels, t.num_types) == (4, 3)
    assert t.extent == (-4.0, 4.0, -3.0, 3.0)
    assert t.tile_center(0, 0) == (-3.0, -2.0) and t.tile_center(3, 2) == (3.0, 2.0)
    assert t.tile_center(1, 1) == (-1.0, 0.0)
    for lv in range(4):
        for col in range(3):
            cx, cy = t.tile_center(lv, col)
            for dx, dy in ((0, 0), (0.99, -0.99), (-0.99, 0.5)):
                got = t.locate(cx + dx, cy + dy)
                assert (int(got[0]), int(got[1])) == (lv, col)
    lvs, cols = t.locate(np.array([-4.5, 0.0, 4.0, 3.9]), np.array([0.0, 3.5, 0.0, 2.9]))
    assert lvs.tolist() == [-1, -1, -1, 3] and cols.tolist() == [-1, -1, -1, 2]
    # a seam belongs to the tile that starts there in locate; in height_at its two sides agree (rims at 0)
    assert (int(t.locate(0.0, 0.3)[0]), int(t.locate(-0.7, 1.0)[1])) == (2, 2)
    rough = generate_terrain(TerrainConfig(types=("rough", "rough"), levels=2, tile_size=2.0))
    along = -2.0 + 0.1 * np.arange(20)  # the samples of level 0 along x, of column 0 along y
    np.testing.assert_allclose(rough.height_at(0.0, along), rough.heights[1, 0, :20, 0], atol=1e-12)
    np.testing.assert_allclose(rough.height_at(along, 0.0), rough.heights[0, 1, 0, :20], atol=1e-12)
    np.testing.assert_array_equal(rough.heights[1, 0, :, 0], rough.heights[0, 0, :, -1])  # the seam's other side
    o = t.origins
    assert o.shape == (4, 3, 3)
    for lv in range(4):
        for col in range(3):
            assert tuple(o[lv, col, :2]) == t.tile_center(lv, col)
    np.testing.assert_array_equal(o[..., 2], t.height_at(o[..., 0], o[..., 1]))
    # the platforms: flat 0; stairs up at the bottom of its steps; slope down on top
    d = np.array([cfg.level_difficulty(lv) for lv in range(4)])
    np.testing.assert_allclose(o[:, 0, 2], 0.0)
    np.testing.assert_allclose(o[:, 1, 2], -(0.05 + 0.15 * d) * np.floor(0.5 / 0.3 + 1e-9))
    np.testing.assert_allclose(o[:, 2, 2], 0.4 * d * 0.5)
    assert t.height_at(10.0, -10.0) == 0.0 and t.height_at(-4.5, 0.0) == 0.0  # beyond the grid: the border


# ----------------------------------------------------------------------------
# the surface MuJoCo collides
# ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mixed() -> Terrain:
    """Every type at two levels, small tiles."""
    return generate_terrain(TerrainConfig(levels=2, tile_size=3.0, resolution=0.1, border=1.0, seed=2))


def _mujoco_terrain(terrain: Terrain):
    import mujoco

    spec = mujoco.MjSpec()
    add_terrain(spec, terrain)
    model = spec.compile()
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    return mujoco, model, data


def _rays(mujoco, model, data, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """MuJoCo's ``mj_ray`` straight down from z = 5 at every point: the world z it hits."""
    out = np.empty(len(x))
    geom = np.zeros(1, np.int32)
    down = np.array([0.0, 0.0, -1.0])
    for i, (px, py) in enumerate(zip(x, y, strict=True)):
        out[i] = 5.0 - mujoco.mj_ray(model, data, np.array([px, py, 5.0]), down, None, 1, -1, geom)
    return out


def test_height_at_is_mujocos_surface(mixed: Terrain) -> None:
    """height_at against MuJoCo's own ray cast on the composed model, within 1e-6 m: random points over the
    tiles and the border, points a micrometre either side of every seam and of cell lines (the risers of
    the flat-faced tiles). Exactly on a seam or a riser, a ray grazes two pieces' faces, and which one
    MuJoCo's ray test finds (or whether it finds either) is down to rounding: not compared."""
    mujoco, model, data = _mujoco_terrain(mixed)
    x0, x1, y0, y1 = mixed.extent
    s, b = mixed.config.tile_size, mixed.config.border
    rng = np.random.default_rng(0)
    pts = [rng.uniform([x0 - b, y0 - b], [x1 + b, y1 + b], (1500, 2))]
    seams_x, seams_y = x0 + s * np.arange(mixed.num_levels + 1), y0 + s * np.arange(mixed.num_types + 1)
    res = mixed.config.resolution
    for eps in (-1e-6, 1e-6):
        ys = rng.uniform(y0, y1, 60)
        pts += [np.stack([np.full(60, sx + eps), ys], 1) for sx in seams_x]
        xs = rng.uniform(x0, x1, 60)
        pts += [np.stack([xs, np.full(60, sy + eps)], 1) for sy in seams_y]
        pts.append(np.stack([x0 + res * rng.integers(0, 60, 200) + eps, rng.uniform(y0, y1, 200)], 1))
        pts.append(np.stack([rng.uniform(x0, x1, 200), y0 + res * rng.integers(0, 60, 200) + eps], 1))
    p = np.concatenate(pts)
    got = _rays(mujoco, model, data, p[:, 0], p[:, 1])
    want = mixed.height_at(p[:, 0], p[:, 1])
    err = np.abs(got - want)
    assert err.max() < 1e-6, f"height_at off MuJoCo's surface by {err.max():.2e} m at {p[np.argmax(err)]}"
    assert np.ptp(want) > 1.0  # the points saw the pits and pyramids, not only flat ground


def test_exactly_on_a_riser_height_at_reads_the_highest_cell_it_touches() -> None:
    """A point exactly on a cell line of a flat-faced tile (a riser) reads the highest of the cells it touches:
    the cell left of a vertical line, the one below a horizontal line, all four at a corner. Checked against
    the cells themselves on a binary-exact grid (0.25 m), so that the points fall on the lines exactly."""
    t = generate_terrain(TerrainConfig(levels=2, tile_size=4.0, resolution=0.25, border=1.0, seed=3))
    x0, _, y0, _ = t.extent
    res, per = t.config.resolution, round(t.config.tile_size / t.config.resolution)
    rng = np.random.default_rng(1)
    checked = 0
    for lv in range(t.num_levels):
        for col, form in enumerate(t.forms):
            if form != "cells":
                continue
            cells = t.cells[lv, col]
            k, r = rng.integers(1, per - 1, 400), rng.integers(1, per - 1, 400)
            half = rng.uniform(0.2, 0.8, 400)
            ux, vy = x0 + (lv * per + k) * res, y0 + (col * per + r) * res  # cell lines
            cases = (  # (x, y, the cells touched)
                (ux, vy + half * res, np.maximum(cells[r, k], cells[r, k - 1])),
                (ux - half * res + res, vy, np.maximum(cells[r, k], cells[r - 1, k])),
                (ux, vy, np.max([cells[r, k], cells[r, k - 1], cells[r - 1, k], cells[r - 1, k - 1]], axis=0)),
            )
            for x, y, want in cases:
                np.testing.assert_array_equal(t.height_at(x, y), want, err_msg=f"{t.types[col]} level {lv}")
                checked += int((want != cells[r, k]).sum())
    assert checked > 100  # the lines had risers on them, not only equal cells either side


def test_add_terrain_builds_each_form_and_the_border(mixed: Terrain) -> None:
    """Rough tiles are height fields, flat-faced tiles boxes, slopes convex meshes (one for a pyramid, four
    and a box for an inverted one), each a world geom named after its tile, with the terrain's friction;
    every piece stays within its tile's square; ``build="height_field"`` makes every tile one height field."""
    mujoco, model, _ = _mujoco_terrain(mixed)
    kinds = {
        mujoco.mjtGeom.mjGEOM_HFIELD: "hfield",
        mujoco.mjtGeom.mjGEOM_BOX: "box",
        mujoco.mjtGeom.mjGEOM_MESH: "mesh",
    }
    half = mixed.config.tile_size / 2
    for lv in range(mixed.num_levels):
        for col in range(mixed.num_types):
            name = tile_name(mixed, lv, col)
            assert name == f"{TERRAIN_PREFIX}_{col}_{mixed.types[col]}_{lv}"
            geoms = [model.geom(g) for g in tile_geoms(mixed, lv, col)]
            types = {kinds[int(g.type[0])] for g in geoms}
            form = FORMS[mixed.types[col]]
            want = {"samples": {"hfield"}, "cells": {"box"}, "pyramid": {"mesh", "box"}}[form]
            assert types <= want and (form != "pyramid" or "mesh" in types or lv == 0), (name, types)
            if form == "samples":
                assert geoms[0].name == name and model.hfield(name).size[3] == BASE_DEPTH
            if form == "cells":
                assert len(geoms) == len(tile_pieces(mixed, lv, col)[0]) > 0
            cx, cy = mixed.tile_center(lv, col)
            for g in geoms:
                assert int(g.bodyid[0]) == 0 and g.friction[0] == mixed.config.friction
                if int(g.type[0]) == mujoco.mjtGeom.mjGEOM_BOX:  # within the tile's square
                    assert (
                        abs(g.pos[0] - cx) + g.size[0] <= half + 1e-9 and abs(g.pos[1] - cy) + g.size[1] <= half + 1e-9
                    )
    slopes = [c for c, k in enumerate(mixed.types) if k.startswith("slope")]
    hard = mixed.num_levels - 1
    counts = {mixed.types[c]: len(tile_geoms(mixed, hard, c)) for c in slopes}
    assert counts == {"slope_up": 5, "slope_down": 1}
    whole = generate_terrain(TerrainConfig(**{**mixed.config.to_dict(), "build": "height_field"}))
    mujoco, model, _ = _mujoco_terrain(whole)
    assert model.nhfield == whole.num_levels * whole.num_types and model.nmesh == 0
    assert all(tile_geoms(whole, lv, c) == [tile_name(whole, lv, c)] for lv in range(2) for c in range(whole.num_types))
    border = [model.geom(f"{TERRAIN_PREFIX}_border_{i}") for i in range(4)]
    tops = [float(g.pos[2] + g.size[2]) for g in border]
    assert tops == pytest.approx([0.0] * 4)
    # the border boxes cover the ring around the grid exactly (corners once)
    area = sum(4 * g.size[0] * g.size[1] for g in border)
    x0, x1, y0, y1 = mixed.extent
    b = mixed.config.border
    assert area == pytest.approx((x1 - x0 + 2 * b) * (y1 - y0 + 2 * b) - (x1 - x0) * (y1 - y0))
    spec = mujoco.MjSpec()
    add_terrain(spec, generate_terrain(TerrainConfig(types=("flat",), levels=1, tile_size=2.0, border=0.0)))
    assert [g.name for g in spec.geoms] == [f"{TERRAIN_PREFIX}_0_flat_0_0"]  # a flat tile is one box; no border


# ----------------------------------------------------------------------------
# bad configs: one line naming the field
# ----------------------------------------------------------------------------
BAD: list[tuple[dict, type, str]] = [
    ({"types": ("flat", "stairz")}, InvalidArgumentError, r"^terrain\.types: unknown terrain type 'stairz'.*stairs_"),
    ({"types": []}, ArgumentTypeError, r"^terrain\.types: expected a non-empty list"),
    ({"types": "flat"}, ArgumentTypeError, r"^terrain\.types: "),
    ({"levels": 0}, InvalidArgumentError, r"^terrain\.levels: expected an integer in \[1, 100\], got 0"),
    ({"levels": 2.5}, ScalarTypeError, r"^terrain\.levels: "),
    ({"levels": "3"}, ScalarTypeError, r"^terrain\.levels: "),
    ({"levels": True}, ScalarTypeError, r"^terrain\.levels: "),
    ({"difficulty": (0.5,)}, InvalidArgumentError, r"^terrain\.difficulty: expected a pair"),
    ({"difficulty": (0.0, 1.5)}, InvalidArgumentError, r"^terrain\.difficulty: .*1\.5"),
    ({"difficulty": "hard"}, InvalidArgumentError, r"^terrain\.difficulty: "),
    ({"tile_size": 0.0}, InvalidArgumentError, r"^terrain\.tile_size: "),
    ({"tile_size": -8.0}, InvalidArgumentError, r"^terrain\.tile_size: "),
    ({"tile_size": float("nan")}, InvalidArgumentError, r"^terrain\.tile_size: "),
    ({"tile_size": "8"}, ScalarTypeError, r"^terrain\.tile_size: "),
    ({"resolution": 0.0}, InvalidArgumentError, r"^terrain\.resolution: "),
    ({"resolution": 0.3}, InvalidArgumentError, r"^terrain\.resolution: tile_size 8\.0 m is not a whole number"),
    ({"tile_size": 100.0, "resolution": 0.05}, InvalidArgumentError, r"^terrain\.resolution: \d+ height samples"),
    ({"border": -1.0}, InvalidArgumentError, r"^terrain\.border: "),
    ({"friction": -0.1}, InvalidArgumentError, r"^terrain\.friction: "),
    ({"seed": -1}, InvalidArgumentError, r"^terrain\.seed: "),
    ({"seed": 1.5}, ScalarTypeError, r"^terrain\.seed: "),
    ({"params": [1]}, ArgumentTypeError, r"^terrain\.params: expected"),
    ({"params": {"stairz": {}}}, InvalidArgumentError, r"^terrain\.params: unknown terrain type 'stairz'.*stairs_"),
    ({"params": {"stairs_up": [0.1]}}, ArgumentTypeError, r"^terrain\.params\.stairs_up: expected"),
    (
        {"params": {"stairs_up": {"step_hieght": (0.1, 0.2)}}},
        InvalidArgumentError,
        r"^terrain\.params\.stairs_up: stairs_up has no parameter 'step_hieght'.*'step_height'",
    ),
    ({"params": {"flat": {"slope": (0.1, 0.2)}}}, InvalidArgumentError, r"^terrain\.params\.flat: flat has no"),
    (
        {"params": {"stairs_up": {"step_height": 0.1}}},
        InvalidArgumentError,
        r"^terrain\.params\.stairs_up\.step_height: expected a pair",
    ),
    (
        {"params": {"stairs_up": {"step_height": (-0.1, 0.2)}}},
        InvalidArgumentError,
        r"^terrain\.params\.stairs_up\.step_height: ",
    ),
    (
        {"params": {"stairs_up": {"step_width": (0.0, 0.3)}}},
        InvalidArgumentError,
        r"^terrain\.params\.stairs_up\.step_width: expected numbers > 0",
    ),
    (
        {"params": {"rough": {"step": (0.005, 0.0)}}},
        InvalidArgumentError,
        r"^terrain\.params\.rough\.step: expected numbers > 0",
    ),
    (
        {"params": {"obstacles": {"count": (1.0, 2000.0)}}},
        InvalidArgumentError,
        r"^terrain\.params\.obstacles\.count: ",
    ),
    ({"params": {"slope_up": {"slope": ("steep", 0.3)}}}, ScalarTypeError, r"^terrain\.params\.slope_up\.slope: "),
]


@pytest.mark.parametrize(("fields", "error", "match"), BAD, ids=[str(list(f.items())[0])[:60] for f, _, _ in BAD])
def test_bad_configs_fail_in_one_line_naming_the_field(fields: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match) as e:
        TerrainConfig(**fields)
    assert "\n" not in str(e.value)


def test_from_dict_and_load_refuse_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^terrain: unknown field 'level'.*'levels'") as e:
        TerrainConfig.from_dict({"level": 3})
    with pytest.raises(ArgumentTypeError, match=r"^terrain: expected an object"):
        TerrainConfig.from_dict(_any([1]))
    missing = tmp_path / "nowhere.json"
    with pytest.raises(InvalidArgumentError, match=r"^terrain: cannot read '.*nowhere\.json'") as e2:
        TerrainConfig.load(missing)
    junk = tmp_path / "junk.json"
    junk.write_text("{levels: 3,\n")
    with pytest.raises(InvalidArgumentError, match=r"^terrain: '.*junk\.json' is not JSON") as e3:
        TerrainConfig.load(str(junk))
    with pytest.raises(ArgumentTypeError, match=r"^terrain: expected a TerrainConfig"):
        TerrainConfig.load(_any(42))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"levels": 0}))
    with pytest.raises(InvalidArgumentError, match=r"^terrain\.levels: "):
        TerrainConfig.load(bad)
    for err in (e, e2, e3):
        assert "\n" not in str(err.value)
    good = tmp_path / "good.json"
    cfg = TerrainConfig(types=("flat", "rough"), levels=2, params={"rough": {"amplitude": (0.01, 0.05)}})
    good.write_text(json.dumps(cfg.to_dict()))
    assert TerrainConfig.load(good) == TerrainConfig.load(str(good)) == cfg
    assert TerrainConfig.load(cfg) is cfg
    assert set(TERRAIN_TYPES) == set(cfg.to_dict()["types"]) | set(TERRAIN_TYPES)


def test_max_samples_bounds_every_grid() -> None:
    n = int(8.0 / 0.1) + 1
    TerrainConfig(levels=MAX_SAMPLES // (n * n * 8), tile_size=8.0, resolution=0.1)  # at the bound: fine
    with pytest.raises(InvalidArgumentError, match=r"^terrain\.resolution: "):
        TerrainConfig(levels=MAX_SAMPLES // (n * n * 8) + 1, tile_size=8.0, resolution=0.1)


# ----------------------------------------------------------------------------
# a robot on a terrain
# ----------------------------------------------------------------------------
SMALL = {"types": ["flat", "stairs_up"], "levels": 1, "tile_size": 2.0, "border": 0.5}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SIMBACKEND_CACHE", str(tmp_path))
    return tmp_path / "scenes"


def test_robot_scene_on_a_terrain_is_cached_by_content(cache: Path) -> None:
    import mujoco

    a = robot_scene("go1", terrain=SMALL)
    assert Path(a.path).is_file() and Path(a.path).is_relative_to(cache)
    stamp = Path(a.path).stat().st_mtime_ns
    assert robot_scene("go1", terrain=TerrainConfig.from_dict(SMALL)) == a  # the same config: the same file
    assert Path(a.path).stat().st_mtime_ns == stamp  # read from the cache, not written again
    b = robot_scene("go1", terrain={**SMALL, "seed": 1})  # flat and stairs draw nothing from the seed
    c = robot_scene("go1", terrain={**SMALL, "types": ["rough", "stairs_up"]})
    d = robot_scene("go1", terrain={**SMALL, "types": ["rough", "stairs_up"], "seed": 1})
    plain = robot_scene("go1")
    assert len({a.path, c.path, d.path, plain.path}) == 4  # another terrain, another seed: another file
    assert b.path == a.path  # a seed that changes no tile changes no file (the key is the content)
    m = mujoco.MjModel.from_xml_path(a.path)
    names = [m.geom(i).name for i in range(m.ngeom)]
    assert "floor" not in names and not (np.asarray(m.geom_type) == mujoco.mjtGeom.mjGEOM_PLANE).any()
    assert {f"{TERRAIN_PREFIX}_0_flat_0_0", f"{TERRAIN_PREFIX}_1_stairs_up_0_0"} <= set(names)
    # the written file holds the heights: MuJoCo's rays read height_at
    t = generate_terrain(TerrainConfig.from_dict(SMALL))
    data = mujoco.MjData(m)
    mujoco.mj_forward(m, data)
    xy = np.random.default_rng(1).uniform([-0.9, -1.9], [0.9, 1.9], (50, 2))
    xy = xy[np.hypot(*xy.T) > 0.6]  # clear of the robot at the origin
    np.testing.assert_allclose(_rays(mujoco, m, data, xy[:, 0], xy[:, 1]), t.height_at(xy[:, 0], xy[:, 1]), atol=1e-6)
    # the default pose is placed on the ground as on the floor: the task spawns it that high over a tile
    np.testing.assert_allclose(a.default_qpos, plain.default_qpos, atol=1e-12)


def test_robot_scene_terrain_refusals(cache: Path) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^terrain: robot 'quadruped' brings its own floor") as e:
        robot_scene("quadruped", terrain=SMALL)
    assert "\n" not in str(e.value)
    with pytest.raises(InvalidArgumentError, match=r"^terrain\.levels: ") as e:
        robot_scene("go1", terrain={**SMALL, "levels": 0})
    with pytest.raises(InvalidArgumentError, match=r"^terrain: unknown field 'tile'.*'tile_size'"):
        robot_scene("go1", terrain={**SMALL, "tile": 2.0})
    assert not cache.exists() or not any(cache.iterdir())  # nothing composed for a refused call
