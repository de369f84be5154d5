"""Hostile terrain configs and task settings (issue 50, items 6 and 13): each reproducer refused in one line
naming the field, before anything is allocated; the surface exactly on the seams between random tiles is
MuJoCo's; ``height_at`` on NaN; ``--set`` errors that name the key that was wrong.
"""

from __future__ import annotations

import math
import tracemalloc
from typing import Any

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from simbackend.cli.main import app
from simbackend.errors import ArgumentTypeError, InvalidArgumentError
from simbackend.tasks.settings import task_settings
from simbackend.terrains import (
    MAX_HEIGHT,
    MAX_NOISE_STEPS,
    MAX_OBSTACLES,
    MAX_TILES,
    TERRAIN_TYPES,
    TerrainConfig,
    add_terrain,
    generate_terrain,
    param_values,
    tile_heights,
    tile_surface,
)
from simbackend.terrains.tiles import height_bound


def _cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env={"SIMBACKEND_SIM": None})


def _one_error_line(result: Any) -> str:
    """The CLI refused with exit 2 and one line ``error: ...``; that line."""
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


# ----------------------------------------------------------------------------
# item 6: a bad terrain under --set names --set terrain, not every --set given
# ----------------------------------------------------------------------------
def test_a_bad_terrain_type_under_set_names_the_terrain_key() -> None:
    sets = ["robot=go1", '{"types": ["bogus"]}', "height_scan=true"]
    sets[1] = "terrain=" + sets[1]
    with pytest.raises(InvalidArgumentError) as e:
        task_settings("velocity", sets=sets)
    message = str(e.value)
    assert message.startswith("--set terrain: terrain.types: unknown terrain type 'bogus'"), message
    assert "--set robot" not in message and "--set height_scan" not in message
    # the same from the command line, --robot given too: exit 2, one line
    line = _one_error_line(
        _cli("train", "--task", "velocity", "--robot", "go1", *(a for s in sets[1:] for a in ("--set", s)))
    )
    assert line.startswith("error: --set terrain: terrain.types: unknown terrain type 'bogus'"), line
    assert "--robot" not in line and "--set height_scan" not in line


# ----------------------------------------------------------------------------
# item 13: what a config may allocate is bounded, and refused before allocating
# ----------------------------------------------------------------------------
def test_a_tiny_rough_step_is_refused_before_allocating() -> None:
    """The reproducer: ``params.rough.step = [1e-12, 1e-12]`` asked numpy for 149 GiB of noise levels."""
    hostile = {"types": ["rough"], "levels": 1, "tile_size": 2.0, "params": {"rough": {"step": [1e-12, 1e-12]}}}
    with pytest.raises(InvalidArgumentError, match=rf"^terrain\.params\.rough\.step: .* {MAX_NOISE_STEPS} steps"):
        TerrainConfig(**hostile)
    line = _one_error_line(_cli("train", "--task", "velocity", "--set", f"terrain={_json(hostile)}"))
    assert line.startswith("error: --set terrain: terrain.params.rough.step: "), line
    # at the bound: accepted, and drawn without listing its levels (a few KiB for 21^2 samples, not 8 MB)
    amplitude = 0.1
    at_bound = TerrainConfig(
        types=["rough"], levels=1, tile_size=2.0, params={"rough": {"amplitude": [amplitude] * 2, "step": [1e-7] * 2}}
    )
    tracemalloc.start()
    try:
        h = generate_terrain(at_bound).heights
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, f"drawing 21^2 samples took {peak} bytes"
    assert np.abs(h).max() <= amplitude / 2 + 1e-12 and len(np.unique(h)) > 300  # nearly continuous noise


def _json(value: Any) -> str:
    import json

    return json.dumps(value)


def test_tile_count_is_bounded() -> None:
    """Each tile is a height field and a geom in every env's scene: at most MAX_TILES of them."""
    small = {"tile_size": 0.5, "resolution": 0.25}  # 9 samples a tile: the sample bound stays far away
    TerrainConfig(types=["flat"] * (MAX_TILES // 100), levels=100, **small)  # at the bound: fine
    with pytest.raises(InvalidArgumentError, match=rf"^terrain\.levels: .* more than {MAX_TILES}") as e:
        TerrainConfig(types=["flat"] * (MAX_TILES // 100 + 1), levels=100, **small)
    with pytest.raises(InvalidArgumentError, match=rf"^terrain\.types: {MAX_TILES + 1} columns, more than") as e2:
        TerrainConfig(types=["flat"] * (MAX_TILES + 1), levels=1, **small)
    assert "\n" not in str(e.value) + str(e2.value)


@pytest.mark.parametrize(
    ("kind", "params", "tile"),
    [
        ("stairs_up", {"step_width": [1e-300, 1e-300], "step_height": [100, 100]}, 2.0),  # 5e301 m
        ("stairs_down", {"step_width": [1e-320, 1e-320]}, 2.0),  # a subnormal width: inf heights
        ("slope_up", {"slope": [0.0, 100.0]}, 8.0),  # 350 m at the last level
    ],
)
def test_heights_are_bounded_before_drawing(kind: str, params: dict, tile: float) -> None:
    """Parameters within their own bounds whose product is not: a pyramid of steps 1e-300 m wide reached
    5e301 m (or inf, which MuJoCo refused as "invalid data range in hfield")."""
    with pytest.raises(InvalidArgumentError, match=rf"^terrain\.params\.{kind}: .* more than {MAX_HEIGHT:g} m") as e:
        TerrainConfig(types=[kind], levels=2, tile_size=tile, params={kind: params})
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("kind", sorted(TERRAIN_TYPES))
def test_height_bound_bounds_every_drawn_tile(kind: str) -> None:
    """The check above reads :func:`height_bound`, not the tile: it must hold for what is drawn (random
    parameters of every type, several seeds), and be reached within a step where the type is deterministic."""
    rng = np.random.default_rng(0)
    for trial in range(6):
        params = {name: tuple(np.sort(rng.uniform(0.05, 1.5, 2))) for name in TERRAIN_TYPES[kind]}
        if kind == "obstacles":
            params["count"] = (5.0, 30.0)
        d = float(rng.uniform())
        p = param_values(kind, d, params)
        h = tile_heights(kind, d, 4.0, 0.05, np.random.default_rng(trial), params)
        bound = height_bound(kind, p, 4.0)
        assert np.abs(h).max() <= bound + 1e-9, (kind, p)
        if kind in ("slope_up", "slope_down", "stairs_up", "stairs_down", "flat"):
            assert np.abs(h).max() >= bound - 1e-9 - p.get("slope", 0.0) * 0.05, (kind, p)


def test_obstacle_count_bound_is_the_one_the_message_states() -> None:
    """``count`` had the lengths' bound [0, 100], so the "at most 1000 obstacles" check could never speak."""
    cfg = TerrainConfig(
        types=["obstacles"], levels=1, tile_size=4.0, params={"obstacles": {"count": [MAX_OBSTACLES] * 2}}
    )
    h = generate_terrain(cfg).heights[0, 0]
    assert (h != 0).mean() > 0.5  # a thousand obstacles cover most of a 4 m tile
    with pytest.raises(InvalidArgumentError, match=rf"^terrain\.params\.obstacles\.count: .*\[0, {MAX_OBSTACLES}\]"):
        TerrainConfig(types=["obstacles"], params={"obstacles": {"count": [1.0, MAX_OBSTACLES + 1.0]}})


def test_obstacles_are_the_rectangles_they_are_defined_as() -> None:
    """The obstacles are stamped as blocks of cells (rows and columns); the same tiles as the definition (the
    cells whose centres lie in each rectangle, a mask of the whole tile per rectangle), with the same draws."""
    size, res = 4.0, 0.1
    n = round(size / res)
    s = np.linspace(-size / 2 + res / 2, size / 2 - res / 2, n)  # the cells' centres
    y, x = np.meshgrid(s, s, indexing="ij")
    for seed in range(4):
        p = param_values("obstacles", 0.7, {"count": (40.0, 40.0)})
        got = tile_surface("obstacles", 0.7, size, res, np.random.default_rng(seed), {"count": (40.0, 40.0)})[1]
        rng = np.random.default_rng(seed)
        want = np.zeros_like(x)
        for _ in range(40):
            w, d = rng.uniform(0.5 * p["size"], p["size"], 2)
            cx, cy = rng.uniform(-size / 2, size / 2, 2)
            want[(np.abs(x - cx) <= w / 2) & (np.abs(y - cy) <= d / 2)] = (
                rng.choice([-1.0, -0.5, 0.5, 1.0]) * p["height"]
            )
        want[np.maximum(np.abs(x), np.abs(y)) <= p["platform"] / 2] = 0.0
        want[[0, -1]] = 0.0
        want[:, [0, -1]] = 0.0
        np.testing.assert_array_equal(got, want)


def test_types_must_be_names() -> None:
    """The reproducer ``TerrainConfig(types=[["flat"]])`` raised ``TypeError: unhashable type: 'list'``."""
    for bad, kind in ((["flat"], "list"), (None, "NoneType"), (3, "int"), ({"a": 1}, "dict")):
        with pytest.raises(
            ArgumentTypeError, match=rf"^terrain\.types: types\[1\]: expected a terrain type name, got {kind}"
        ):
            TerrainConfig(types=["flat", bad])


def test_height_at_refuses_nan_and_the_torch_path_gives_nan() -> None:
    """The reproducer ``height_at(nan, 0)`` raised a raw ``IndexError``."""
    t = generate_terrain(TerrainConfig(types=["rough", "stairs_up"], levels=2, tile_size=2.0))
    with pytest.raises(InvalidArgumentError, match=r"^height_at: x: expected numbers, got NaN"):
        t.height_at(math.nan, 0.0)
    with pytest.raises(InvalidArgumentError, match=r"^height_at: y: expected numbers, got NaN at \[1\]"):
        t.height_at(0.0, [0.3, math.nan])
    with pytest.raises(InvalidArgumentError, match=r"^height_at: x: expected real numbers"):
        t.height_at("far", 0.0)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=r"^height_at: x, y: shapes \(2,\) and \(3,\) do not broadcast"):
        t.height_at([0.0, 1.0], [0.0, 1.0, 2.0])
    # on the device path (no host read): NaN in, NaN out, the other points untouched; infinity is off the grid
    x = torch.tensor([0.3, math.nan, 0.5, math.inf, -math.inf], dtype=torch.float32)
    y = torch.tensor([0.2, 0.1, math.nan, 0.0, 0.0], dtype=torch.float32)
    z = t.height_at_torch(x, y)
    assert torch.isnan(z[1:3]).all() and z[3:].tolist() == [0.0, 0.0]
    assert z[0].item() == pytest.approx(float(t.height_at(0.3, 0.2)), abs=1e-6)


def test_height_scan_without_a_terrain_is_a_bad_setting() -> None:
    """``--set height_scan=true`` without a terrain exited 1 (refused when the task was built)."""
    with pytest.raises(InvalidArgumentError, match=r"^--set height_scan: config\.height_scan: .*set config\.terrain"):
        task_settings("velocity", sets=["height_scan=true"])
    line = _one_error_line(_cli("train", "--task", "velocity", "--set", "height_scan=true"))
    assert line.startswith("error: --set height_scan: config.height_scan: a height scan reads a terrain"), line


# ----------------------------------------------------------------------------
# item 13 (Low): the seams between random tiles, against MuJoCo's ray cast
# ----------------------------------------------------------------------------
def test_height_at_is_mujocos_surface_on_and_near_the_seams() -> None:
    """Tiles of rough ground, obstacles and stones on both sides of every seam. A picometre, a nanometre and a
    micrometre either side of every seam, of the corners where four tiles meet and of the grid's edge against
    the border: ``height_at`` against ``mj_ray`` straight down, within 1e-6 m. Exactly on them: the surface is
    continuous (both sides' rays agree) and ``height_at`` is that height; MuJoCo's own ray there agrees too,
    but where it grazes the edge of both height fields it may slip between them (rounding in its triangle
    test) onto the base below, never above the surface, and rarely.

    Before, each tile's rim noise met its neighbour's at a step: exactly on the seam a ray hit one tile or the
    other (by rounding), ``height_at`` read the one starting there, and they differed by up to the step
    (0.065 m in the issue; here up to 0.52 m, at a stone's pit, in 56 % of the points)."""
    import mujoco

    cfg = TerrainConfig(
        types=["rough", "obstacles", "rough", "stepping_stones"],
        levels=3,
        difficulty=(0.6, 1.0),
        tile_size=2.0,
        resolution=0.1,
        border=1.0,
        seed=4,
        params={"obstacles": {"count": [60, 60]}},
    )
    t = generate_terrain(cfg)
    spec = mujoco.MjSpec()
    add_terrain(spec, t)
    model = spec.compile()
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    geom = np.zeros(1, np.int32)
    down = np.array([0.0, 0.0, -1.0])

    def ray(p: np.ndarray) -> np.ndarray:
        return np.array(
            [5.0 - mujoco.mj_ray(model, data, np.array([x, y, 5.0]), down, None, 1, -1, geom) for x, y in p]
        )

    x0, x1, y0, y1 = t.extent
    s = cfg.tile_size
    rng = np.random.default_rng(0)
    seams_x, seams_y = x0 + s * np.arange(t.num_levels + 1), y0 + s * np.arange(t.num_types + 1)
    on = np.concatenate(
        [np.stack([np.full(40, sx), rng.uniform(y0, y1, 40)], 1) for sx in seams_x]
        + [np.stack([rng.uniform(x0, x1, 40), np.full(40, sy)], 1) for sy in seams_y]
        + [np.stack(np.meshgrid(seams_x, seams_y), -1).reshape(-1, 2)]  # the corners
    )
    on_x = np.isin(on[:, 0], seams_x)  # which coordinate lies on a seam (the corners: both)
    on_y = np.isin(on[:, 1], seams_y)
    want = t.height_at(on[:, 0], on[:, 1])
    for eps in (1e-12, 1e-9, 1e-6):
        for sign in (-1.0, 1.0):
            beside = on + sign * eps * np.stack([on_x, on_y], 1)
            err = np.abs(ray(beside) - t.height_at(beside[:, 0], beside[:, 1]))
            assert err.max() < 1e-6, f"height_at off MuJoCo's surface by {err.max():.2e} m at {beside[np.argmax(err)]}"
            if eps == 1e-12:  # the surface's one height on the seam, from either side
                np.testing.assert_allclose(ray(beside), want, atol=1e-6)
    exact = ray(on)
    off = np.abs(exact - want) > 1e-6
    assert (exact[off] < want[off] - 1e-3).all(), "mj_ray on a seam read above the surface"
    assert off.mean() < 0.05, f"mj_ray on a seam slipped off the surface at {off.mean():.1%} of the points"
    # the tiles were rough where they meet: a sample beside every seam is off 0
    h = t.heights
    assert (np.abs(h[:, :, 1, 1:-1]) > 0.01).mean() > 0.3 and (np.abs(h[:, :, 1:-1, -2]) > 0.01).mean() > 0.3


def test_a_terrain_of_too_many_boxes_is_refused_when_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stones 2 cm wide, 2 cm apart, on a 20 m tile at 2 cm are 250,000 boxes: add_terrain refuses them in
    one line naming the type's parameters (before the greedy pass: the runs of equal cells bound them), and
    a terrain just under the bound builds."""
    import mujoco

    from simbackend.terrains import MAX_PIECES, mjcf

    tiny = {"stone_size": (0.02, 0.02), "gap": (0.02, 0.02)}
    cfg = TerrainConfig(
        types=("stepping_stones",), levels=1, tile_size=20.0, resolution=0.02, params={"stepping_stones": tiny}
    )
    with pytest.raises(
        InvalidArgumentError,
        match=rf"^terrain\.params\.stepping_stones: tile \(0, 0\) .* more than the {MAX_PIECES} geoms",
    ) as e:
        add_terrain(mujoco.MjSpec(), generate_terrain(cfg))
    assert "\n" not in str(e.value)
    # the bound counts the whole terrain: tiles of a hundred-odd boxes each add up to it (a bound of 500 here)
    many = generate_terrain(TerrainConfig(types=("stepping_stones",) * 3, levels=2, tile_size=8.0))
    monkeypatch.setattr(mjcf, "MAX_PIECES", 500)
    untouched = mujoco.MjSpec()
    with pytest.raises(
        InvalidArgumentError, match=r"^terrain\.params\.stepping_stones: tile \(1, \d\) .* the 500 geoms"
    ):
        add_terrain(untouched, many)
    assert len(untouched.geoms) == 0 and len(untouched.hfields) == 0  # refused before anything was added
    monkeypatch.undo()
    spec = mujoco.MjSpec()
    add_terrain(spec, generate_terrain(TerrainConfig(types=("stepping_stones",) * 4, levels=2, tile_size=8.0)))
    assert 4 * 2 * 50 < len(spec.geoms) < MAX_PIECES
