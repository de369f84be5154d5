"""Conformance: a generated terrain (:mod:`simbackend.terrains`) on every engine.

A small grid of every terrain type at two difficulties (``TERRAIN``: eight
columns, two levels, 3 m tiles sampled every 0.1 m, a 1 m border), composed
with :func:`simbackend.terrains.add_terrain` into one MJCF file (boxes for the
flat-faced tiles, convex meshes for the slopes, a height field for rough
ground, four border boxes) beside a free sphere and a free box. The engine
loads every tile, rests bodies where the analytic surface
(:meth:`simbackend.terrains.Terrain.height_at`) holds them, on every type but
rough ground, and its height scanner reads that surface. Expected values come
from the terrain's heights, never from an engine. An engine that cannot
collide height fields as MuJoCo does may refuse the model at construction
(``ModelLoadError`` naming a tile); the clauses that need it loaded are then
skipped with its reason. Talks only to the contract.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from simbackend.contract_tests.helpers import to_np
from simbackend.errors import ModelLoadError
from simbackend.scanner import grid_offsets
from simbackend.terrains import (
    DEFAULT_TYPES,
    TERRAIN_PREFIX,
    Terrain,
    TerrainConfig,
    add_terrain,
    generate_terrain,
    tile_geoms,
    tile_pieces,
)

#: every terrain type, at difficulty 0 (level 0) and 1 (level 1)
TERRAIN = TerrainConfig(types=DEFAULT_TYPES, levels=2, tile_size=3.0, resolution=0.1, border=1.0, seed=0)
#: the sphere's radius and the box's half size (m)
R = 0.1
#: how high above its rest height a body is let go (m)
DROP = 0.01
#: simulated time a dropped body is given to come to rest (s): it lands in 45 ms and settles in a
#: few contact time constants (MuJoCo's default 0.02 s)
SETTLE_S = 0.6
#: how far (m) a sphere's level spot keeps its edge from a riser: a sphere let go tangent to a riser's face
#: is pushed off it by any engine's contact (MuJoCo Warp's: 7 mm), which is not this clause's subject
SPHERE_CLEARANCE = 0.01
#: the boxes are let go this far (m) off the half-cell lattice their level square was found on (and the
#: square keeps 0.05 m of margin): a box whose edges lie exactly on the height field's grid lines, or whose
#: centre lies on a cell diagonal, is a degenerate case of a convex-prism collision (not this clause's
#: subject, see the clause's docstring)
OFF_GRID = np.array([0.013, 0.027])
#: rest height tolerance (m), see test_spheres_rest_on_the_terrain
REST_ATOL = 1e-3
#: the farthest a body may slide while it settles (m), and the fastest it may still move after (m/s)
DRIFT_MAX = 0.02
SPEED_MAX = 0.01
#: scanner tolerance (m): float32 rays against float32 surfaces a few metres away
SCAN_ATOL = 1e-4

#: the dropped bodies; add_terrain adds the terrain to the world body
BODIES_MJCF = f"""
<mujoco model="terrain_rest">
  <option timestep="0.004" gravity="0 0 -9.81"/>
  <worldbody>
    <body name="ball" pos="0 0 2">
      <freejoint name="ball_free"/>
      <geom name="ball_geom" type="sphere" size="{R}" mass="1" friction="1 0.005 0.0001"/>
    </body>
    <body name="crate" pos="1 0 2">
      <freejoint name="crate_free"/>
      <geom name="crate_geom" type="box" size="{R} {R} {R}" mass="1" friction="1 0.005 0.0001"/>
    </body>
  </worldbody>
</mujoco>
"""


@pytest.fixture(scope="module")
def terrain() -> Terrain:
    return generate_terrain(TERRAIN)


@pytest.fixture(scope="module")
def terrain_model(tmp_path_factory: pytest.TempPathFactory, terrain: Terrain) -> Path:
    """The MJCF file: ``BODIES_MJCF`` with the terrain added, written as one file."""
    from simbackend.models import export_mjcf
    from simbackend.models.compiler import prepared_spec

    folder = tmp_path_factory.mktemp("terrain")
    bodies = folder / "bodies.xml"
    bodies.write_text(BODIES_MJCF)
    spec, _, _ = prepared_spec(str(bodies), None, None, None)
    add_terrain(spec, terrain)
    (folder / "model").mkdir()
    _, path = export_mjcf(spec, folder / "model")
    return Path(path)


def _terrain_sim(make_sim: Callable[..., Any], path: Path, n: int) -> Any:
    """The backend on the terrain model, or a skip where the engine refuses its height fields (a one-line
    ``ModelLoadError`` naming a tile geom: checked, it is part of the contract)."""
    try:
        return make_sim(path, n)
    except ModelLoadError as e:
        msg = str(e)
        assert "\n" not in msg and f"{TERRAIN_PREFIX}_" in msg, f"refusal must be one line naming a tile: {msg!r}"
        pytest.skip(f"the backend refuses the terrain's height fields: {msg}")


# ----------------------------------------------------------------------------
# where bodies rest: spots chosen from the terrain's heights alone
# ----------------------------------------------------------------------------
def _level_spots(terrain: Terrain, reach: float, per_tile: int) -> list[tuple[float, float, float]]:
    """``(x, y, height)`` of level spots (the surface level over the square ``reach`` around them, sampled at
    its edges and at most half a cell apart): in every tile, the level spot nearest its
    centre, then, away from the centre (platforms), the spot of each other height nearest the centre
    (stair treads, stones, pits, obstacle tops), up to ``per_tile`` spots a tile; then two on the border."""
    res = terrain.config.resolution
    half = terrain.config.tile_size / 2
    grid = np.arange(-half + res / 2, half, res / 2)
    gx, gy = (a.ravel() for a in np.meshgrid(grid, grid))
    order = np.argsort(np.hypot(gx, gy), kind="stable")
    gx, gy = gx[order], gy[order]
    # candidates every half cell, samples at most half a cell apart and on the square's edges: every cell of
    # a flat-faced tile within the square holds a sample, and a riser on the square's edge is seen (its top)
    s = np.linspace(-reach, reach, int(np.ceil(4 * reach / res - 1e-9)) + 1)
    ox, oy = (a.ravel() for a in np.meshgrid(s, s))
    spots = []
    for lv in range(terrain.num_levels):
        for col in range(terrain.num_types):
            cx, cy = terrain.tile_center(lv, col)
            h = terrain.height_at(cx + gx[:, None] + ox, cy + gy[:, None] + oy)
            level = np.ptp(h, axis=1) < 1e-9
            away = np.maximum(np.abs(gx), np.abs(gy)) > half / 2
            seen: list[float] = []
            for i in np.flatnonzero(level):
                z = float(h[i, 0])
                if seen and (not away[i] or any(abs(z - s) < 1e-6 for s in seen[1:])):
                    continue
                seen.append(z)
                spots.append((float(cx + gx[i]), float(cy + gy[i]), z))
                if len(seen) == per_tile:
                    break
    x0, x1, y0, y1 = terrain.extent
    b = terrain.config.border
    return spots + [(x1 + b / 2, 0.3 * y0, 0.0), (0.7 * x0, y0 - b / 2, 0.0)]


def _slope_spots(terrain: Terrain) -> list[tuple[float, float]]:
    """``(x, y)`` in the middle of each planar face of each steep slope tile (the hard level), off the lattice
    by ``OFF_GRID``."""
    lv = terrain.num_levels - 1
    mid = (terrain.config.tile_size / 2 + 0.5) / 2  # halfway between the platform's edge (0.5 m) and the rim
    out = []
    for col, kind in enumerate(terrain.types):
        if kind.startswith("slope"):
            cx, cy = terrain.tile_center(lv, col)
            for fx, fy in ((1.0, 0.0), (0.0, -1.0), (-1.0, 0.0), (0.0, 1.0)):
                out.append((cx + fx * mid + OFF_GRID[0], cy + fy * mid + OFF_GRID[1]))
    return out


def _normal(terrain: Terrain, x: float, y: float) -> np.ndarray:
    """The surface's unit normal at ``(x, y)`` (central differences over 1 cm: exact on a planar face)."""
    e = 0.01
    gx = float(terrain.height_at(x + e, y) - terrain.height_at(x - e, y)) / (2 * e)
    gy = float(terrain.height_at(x, y + e) - terrain.height_at(x, y - e)) / (2 * e)
    n = np.array([-gx, -gy, 1.0])
    return n / np.linalg.norm(n)


def _tilt(n: np.ndarray) -> np.ndarray:
    """wxyz quaternion turning +z onto the unit vector ``n``."""
    axis = np.cross([0.0, 0.0, 1.0], n)
    s = float(np.linalg.norm(axis))
    if s < 1e-12:
        return np.array([1.0, 0.0, 0.0, 0.0])
    angle = math.atan2(s, float(n[2]))
    return np.concatenate([[math.cos(angle / 2)], axis / s * math.sin(angle / 2)])


def _drops(terrain: Terrain) -> dict[str, np.ndarray]:
    """One env per sphere spot, its box on a level spot at least 0.6 m away; then one env per slope spot,
    its sphere on the border 3 m or more away (a box that slid or bounced on a slope cannot reach it).

    Returns ``ball``, ``crate``: ``(n, 2)`` world xy let go over; ``on_slope``: ``(n,)`` the box is on a
    slope."""
    spots = _level_spots(terrain, R + SPHERE_CLEARANCE, per_tile=4)
    balls = [(x, y) for x, y, _ in spots]
    level = [(x + OFF_GRID[0], y + OFF_GRID[1]) for x, y, _ in _level_spots(terrain, R + 0.05, per_tile=2)]
    slopes = _slope_spots(terrain)
    b = np.array(balls)
    for shift in range(len(level)):
        c = np.array([level[(i + shift) % len(level)] for i in range(len(balls))])
        if np.hypot(*(b - c).T).min() > 0.6:
            break
    else:
        raise AssertionError("no pairing keeps every sphere and box 0.6 m apart")  # the clause's own set-up
    x0, x1, y0, y1 = terrain.extent
    far = np.array([[x1 + terrain.config.border / 2, y1], [x0 - terrain.config.border / 2, y0]])
    s = np.array(slopes)
    parked = far[np.argmax(np.hypot(*(far[:, None] - s[None]).transpose(2, 0, 1)).min(axis=1))]
    assert np.hypot(*(s - parked).T).min() > 3.0  # the clause's own set-up
    return {
        "ball": np.concatenate([b, np.tile(parked, (len(s), 1))]),
        "crate": np.concatenate([c, s]),
        "on_slope": np.array([False] * len(b) + [True] * len(s)),
    }


@pytest.fixture(scope="module")
def settled(
    make_module_sim: Callable[..., Any], capabilities: Any, sim_name: str, terrain: Terrain, terrain_model: Path
) -> dict[str, Any]:
    """Every env's sphere and box let go ``DROP`` over their spots (``_drops``), after ``SETTLE_S``: where each
    was let go, where it is, the surface's normal there, the rest error along the normal, the drift and the
    speed; ``[:, 0]`` the sphere, ``[:, 1]`` the box."""
    if not capabilities.contacts:
        pytest.skip(f"backend {sim_name!r} declares capability contacts absent")
    drops = _drops(terrain)
    n = len(drops["ball"])
    try:
        sim = make_module_sim(terrain_model, n)
    except ModelLoadError as e:
        pytest.skip(f"the backend refuses the terrain's height fields: {e}")
    bq = sim.get_joint_qpos_indices("ball_free").tolist()
    cq = sim.get_joint_qpos_indices("crate_free").tolist()
    qpos = np.tile(to_np(sim.get_qpos())[0], (n, 1))
    normals = np.zeros((n, 2, 3))
    normals[:, 0, 2] = 1.0  # spheres: on level spots
    normals[:, 1] = [_normal(terrain, x, y) for x, y in drops["crate"]]
    for i in range(n):
        (bx, by), (cx, cy) = drops["ball"][i], drops["crate"][i]
        qpos[i, bq] = [bx, by, float(terrain.height_at(bx, by)) + R + DROP, 1.0, 0.0, 0.0, 0.0]
        centre = np.array([cx, cy, float(terrain.height_at(cx, cy))]) + (R + DROP) * normals[i, 1]
        qpos[i, cq] = [*centre, *_tilt(normals[i, 1])]
    start = np.stack([qpos[:, bq[:2]], qpos[:, cq[:2]]], axis=1)  # (n, 2, 2)
    sim.set_state(None, qpos)
    sim.step(None, nsteps=int(round(SETTLE_S / sim.info.timestep)))
    ids = sim.get_body_ids(["ball", "crate"])
    pos = to_np(sim.get_body_pos_w(ids))  # (n, 2, 3)
    surface = terrain.height_at(pos[..., 0], pos[..., 1])
    return {
        **drops,
        "start": start,
        "pos": pos,
        "surface": surface,
        # the distance from each centre to the (planar) surface under it, along its normal, less R
        "err": (pos[..., 2] - surface) * normals[..., 2] - R,
        "drift": np.linalg.norm(pos[..., :2] - start, axis=-1),
        "speed": np.linalg.norm(to_np(sim.get_body_lin_vel_w(ids)), axis=-1),
    }


def _check_rest(settled: dict[str, Any], rows: np.ndarray, body: int, what: str) -> None:
    """The bodies ``[rows, body]`` rest within ``REST_ATOL`` of the surface, slid less than ``DRIFT_MAX`` and
    move slower than ``SPEED_MAX``; the message gives the spread and the worst env."""
    envs = np.flatnonzero(rows)
    assert envs.size, f"no {what} to check: the clause would be blind"  # its own set-up
    err, drift, speed = (settled[k][envs, body] for k in ("err", "drift", "speed"))
    bad = np.abs(err) / REST_ATOL + drift / DRIFT_MAX + speed / SPEED_MAX
    w = envs[int(np.argmax(bad))]
    start, pos = settled["start"][w, body], settled["pos"][w, body]
    report = (
        f"{what}: {int((bad >= 1).sum())} of {envs.size} off; rest error {err.min():+.2e}..{err.max():+.2e} m,"
        f" drift up to {drift.max():.2e} m, speed up to {speed.max():.2e} m/s; worst: env {w}, let go over"
        f" ({start[0]:.3f}, {start[1]:.3f}), now at ({pos[0]:.4f}, {pos[1]:.4f}, {pos[2]:.4f}) over a surface at"
        f" {settled['surface'][w, body]:.4f} m (error {settled['err'][w, body]:+.2e} m)"
    )
    assert np.abs(err).max() < REST_ATOL and drift.max() < DRIFT_MAX and speed.max() < SPEED_MAX, report


# ----------------------------------------------------------------------------
# clauses
# ----------------------------------------------------------------------------
def test_terrain_loads_every_tile(make_sim: Callable[..., Any], terrain: Terrain, terrain_model: Path) -> None:
    """Clause: a generated terrain (boxes, convex meshes, a height field per rough tile, border boxes) loads,
    or is refused at construction with a one-line ModelLoadError naming a tile; loaded, the geom table names
    every piece of every tile and every border box, each a collision geom of the world body of the type
    the terrain built it as."""
    sim = _terrain_sim(make_sim, terrain_model, 2)
    names, types = [], []
    for lv in range(terrain.num_levels):
        for c in range(terrain.num_types):
            names += tile_geoms(terrain, lv, c)  # the boxes, then the prisms
            boxes, prisms = tile_pieces(terrain, lv, c)
            types += ["hfield"] if terrain.forms[c] == "samples" else ["box"] * len(boxes) + ["mesh"] * len(prisms)
    border = [f"{TERRAIN_PREFIX}_border_{i}" for i in range(4)]
    names += border
    types += ["box"] * len(border)
    missing = sorted(set(names) - set(sim.geom_names))
    assert not missing, f"geoms missing from the geom table: {missing}"
    ids = sim.get_geom_ids(names)
    assert sim.get_geom_body_ids(ids).tolist() == [0] * len(names)
    contype, conaffinity = sim.get_geom_contact_masks()
    assert (contype[ids] != 0).all() and (conaffinity[ids] != 0).all()
    got = [sim.info.geom_type[i] for i in ids.tolist()]
    wrong = [(n, g, t) for n, g, t in zip(names, got, types, strict=True) if g != t]
    assert not wrong, f"pieces not of the type they were built as (name, got, built): {wrong[:5]}"
    assert {"hfield", "box", "mesh"} <= set(types)  # the clause's own set-up: every form is there


def test_spheres_rest_on_the_terrain(settled: dict[str, Any]) -> None:
    """Clause: spheres (r = 0.1 m) let go 1 cm above the terrain rest where its analytic surface
    (Terrain.height_at) holds them, within 1 mm, and stay: on the level spots of every tile but rough ground
    (platforms, every stair tread, stones, pits, obstacle tops and floors) and on the border.

    The spots are chosen from the heights alone (the surface level within r around the sphere: nothing
    else within r of its centre). The tolerance is MuJoCo's soft contact: at the default solref/solimp a
    resting body sinks a fraction of a millimetre (measured 0.07-0.4 mm, deepest on a box: one contact);
    PhysX rests at its rest offset, 0 (measured within 1e-6 m). A sphere on the wrong tile, level, triangle
    or orientation of a height field is off by the smallest height step here, 25 mm (an obstacle half the
    easy height), or drops 50 mm or more off a tread or a stone."""
    _check_rest(settled, np.ones(len(settled["ball"]), bool), 0, "spheres")


def test_boxes_rest_on_level_ground(settled: dict[str, Any]) -> None:
    """Clause: boxes (0.1 m half size) let go 1 cm above level ground of the terrain (level 0.05 m beyond the
    box: the platforms of every tile but rough ground, the stairs' outer treads across a seam, stones, the
    ground between obstacles, the border) rest on it at Terrain.height_at + 0.1 m within 1 mm, and stay. Tolerance as for the spheres (MuJoCo's soft contact
    sinks a box 0.03-0.12 mm here). The boxes are let go off the height fields' grid lines (``OFF_GRID``): a
    box with its edges on the grid lines and its centre on a cell's diagonal is a degenerate case of the
    prism-by-prism collision some engines run, not this clause's subject."""
    _check_rest(settled, ~settled["on_slope"], 1, "boxes on level ground")


def test_boxes_rest_on_slopes(settled: dict[str, Any]) -> None:
    """Clause: a box let go 1 cm above a steep slope's face (0.4 rise over run, the box tilted to the face)
    rests on the face, its centre 0.1 m from the plane Terrain.height_at gives within 1 mm, held by
    friction 1 (above the slope's 0.4): it creeps less than 2 cm while settling (MuJoCo: up to 4 mm, the
    soft contact's creep) and then moves slower than 1 cm/s. The faces are convex meshes (the terrain's
    slopes are built as convex prisms), so every engine's box-mesh contact holds it: MuJoCo Warp, whose
    height-field contacts kick such a box off (``Capabilities.hfield_slope_contacts``), included."""
    _check_rest(settled, settled["on_slope"], 1, "boxes on slopes")


#: the scanned regions' centres: where 4 tiles meet (easy and hard stairs up and down; rough and slopes;
#: obstacles and stepping stones) and where the grid meets the border, none within a ray of a seam or of a
#: cell line (a riser: exactly on one, a ray grazes two boxes' faces, and which it finds is rounding)
SCAN_CENTRES = [(0.011, 3.017), (-0.023, -5.989), (0.017, 8.987), (2.493, 11.487)]


def test_height_scanner_reads_the_terrain(
    make_sim: Callable[..., Any], require: Callable[..., None], terrain: Terrain, terrain_model: Path
) -> None:
    """Clause: a height scanner over the terrain reads Terrain.height_at within 1e-4 m (float32 rays) on a
    3 m grid of rays 7 cm apart, in each env over another region: across tile seams (stairs up and down at
    both levels, rough ground and slopes, obstacles and stepping stones) and from the grid onto the border.
    Rays keep 1 mm from the seams and the cell lines, where a ray grazes two pieces' faces."""
    require("ray_casting")
    sim = _terrain_sim(make_sim, terrain_model, len(SCAN_CENTRES))
    offsets = grid_offsets(3.0, 3.0, 0.07)
    centres = np.array(SCAN_CENTRES)
    rays = centres[:, None, :] + offsets[None, :, :2]  # (N, R, 2) world xy of every ray
    seams_x = np.arange(terrain.num_levels + 1) * TERRAIN.tile_size + terrain.extent[0]
    seams_y = np.arange(terrain.num_types + 1) * TERRAIN.tile_size + terrain.extent[2]
    near = min(np.abs(rays[..., 0, None] - seams_x).min(), np.abs(rays[..., 1, None] - seams_y).min())
    assert near > 1e-3, "the clause's rays must keep clear of the seams"  # its own set-up
    lines = (rays - np.array([terrain.extent[0], terrain.extent[2]])) / TERRAIN.resolution
    assert (np.abs(lines - np.round(lines)) * TERRAIN.resolution).min() > 9e-4, "and of the cell lines"
    qpos = np.tile(to_np(sim.get_qpos())[0], (len(centres), 1))
    bq = sim.get_joint_qpos_indices("ball_free").tolist()
    cq = sim.get_joint_qpos_indices("crate_free").tolist()
    x0, x1, y0, y1 = terrain.extent
    for i, (x, y) in enumerate(centres):
        qpos[i, bq] = [x, y, 2.0, 1.0, 0.0, 0.0, 0.0]  # above everything
        qpos[i, cq] = [x0 - 0.5, y0 - 0.5, 0.2, 1.0, 0.0, 0.0, 0.0]  # over the border's far corner, out of the way
    sim.set_state(None, qpos)
    scan = sim.create_height_scanner("ball", offsets, alignment="world")
    got = to_np(scan.heights())
    expect = terrain.height_at(rays[..., 0], rays[..., 1])
    err = np.abs(got - expect)
    e, r = np.unravel_index(np.argmax(err), err.shape)
    assert err.max() < SCAN_ATOL, (
        f"scanner off by up to {err.max():.2e} m: it reads {got[e, r]:.6f} m at ({rays[e, r, 0]:.4f},"
        f" {rays[e, r, 1]:.4f})"
        f" (env {e}), the terrain is at {expect[e, r]:.6f} m; {int((err > SCAN_ATOL).sum())} of {err.size} rays"
        f" off by more than {SCAN_ATOL} m"
    )
    # the regions hold what they are meant to: steps, slopes and pits all under the scanner
    assert np.ptp(expect[0]) > 0.5 and np.ptp(expect[2]) > 0.4 and (expect[3] == 0).mean() > 0.3
