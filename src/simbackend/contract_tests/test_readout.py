"""Conformance: model lookups, combined readouts and the height scanner.

Geom tables and body lookups agree with the model description; the combined
getters (selected env rows, caller-owned buffers) agree bit for bit with the
single getters; a height scanner reads known terrain heights. Talks only to
the contract.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from simbackend.contract_tests.helpers import random_qpos, to_np
from simbackend.errors import (
    ArgumentTypeError,
    BackendClosedError,
    EnvIdError,
    IndexRangeError,
    InputDTypeError,
    InputShapeError,
    InvalidArgumentError,
    UnknownNameError,
    UnsupportedFeatureError,
)
from simbackend.scanner import grid_offsets

#: a floor, a 0.5 m step at x in [0.5, 1.5], a visual-only box, and a free "robot" sphere at z = 2
TERRAIN_MJCF = """
<mujoco model="terrain">
  <worldbody>
    <geom name="floor" type="plane" size="10 10 0.1"/>
    <geom name="step" type="box" pos="1 0 0.25" size="0.5 0.5 0.25"/>
    <geom name="ghost" type="box" pos="-1 0 1" size="0.5 0.5 0.2" contype="0" conaffinity="0"/>
    <body name="robot" pos="0 0 2">
      <freejoint name="robot_free"/>
      <geom name="robot_geom" type="sphere" size="0.2"/>
    </body>
  </worldbody>
</mujoco>
"""


@pytest.fixture
def terrain(tmp_path: Path) -> Path:
    path = tmp_path / "terrain.xml"
    path.write_text(TERRAIN_MJCF)
    return path


#: every collision primitive at a known height on a small (3 m) floor, a transparent collision box, a
#: visual-only box, a free "robot" at z = 2 with a hinged paddle (a second link), and a free crate
SHAPES_MJCF = """
<mujoco model="shapes">
  <worldbody>
    <geom name="floor" type="plane" size="3 3 0.1"/>
    <geom name="block" type="box" pos="1 0 0.2" size="0.2 0.2 0.2"/>
    <geom name="drum" type="cylinder" pos="2 0 0.3" size="0.15 0.3"/>
    <geom name="log" type="cylinder" pos="0 1 0.1" size="0.1 0.4" euler="0 90 0"/>
    <geom name="pill" type="capsule" pos="0 2 0.5" size="0.1 0.3"/>
    <geom name="ball" type="sphere" pos="-1 0 0.25" size="0.25"/>
    <geom name="glass" type="box" pos="-2 0 0.35" size="0.2 0.2 0.35" rgba="1 1 1 0"/>
    <geom name="ghost" type="box" pos="0 -1 1" size="0.3 0.3 0.3" contype="0" conaffinity="0"/>
    <body name="robot" pos="0 0 2">
      <freejoint name="robot_free"/>
      <geom name="robot_geom" type="sphere" size="0.2"/>
      <body name="arm" pos="0.5 0 0">
        <joint name="swing" type="hinge" axis="0 0 1" pos="-0.5 0 0"/>
        <geom name="paddle" type="box" size="0.1 0.1 0.02"/>
      </body>
    </body>
    <body name="crate" pos="2 2 0.25">
      <freejoint name="crate_free"/>
      <geom name="crate_geom" type="box" size="0.25 0.25 0.25"/>
    </body>
  </worldbody>
</mujoco>
"""


@pytest.fixture
def shapes(tmp_path: Path) -> Path:
    path = tmp_path / "shapes.xml"
    path.write_text(SHAPES_MJCF)
    return path


# ----------------------------------------------------------------------------
# geoms and bodies
# ----------------------------------------------------------------------------
def test_geom_tables_match_the_model(make_sim: Any) -> None:
    """Clause: geom names, ids, owning bodies, sizes and contact masks are the compiled model's."""
    sim = make_sim("arm7", 2)
    info = sim.info
    assert sim.geom_names == info.geom_names and len(sim.geom_names) == info.ngeom
    ids = sim.get_geom_ids([info.geom_names[3], info.geom_names[0]])
    assert ids.tolist() == [3, 0] and ids.dtype == torch.int64
    assert sim.get_geom_body_ids().tolist() == info.geom_body.tolist()
    assert sim.get_geom_body_ids(ids).tolist() == [int(info.geom_body[3]), int(info.geom_body[0])]
    np.testing.assert_allclose(to_np(sim.get_geom_size(ids)), info.geom_size[[3, 0]], rtol=1e-6)
    contype, conaffinity = sim.get_geom_contact_masks()
    assert contype.tolist() == info.geom_contype.tolist() and conaffinity.tolist() == info.geom_conaffinity.tolist()
    with pytest.raises(UnknownNameError, match=info.geom_names[1]):
        sim.get_geom_ids(info.geom_names[1] + "x")


def test_body_id_and_subtree(make_sim: Any) -> None:
    """Clause: get_body_id gives one plain int; get_body_subtree_ids a body and all its descendants."""
    sim = make_sim("quadruped", 1)
    info = sim.info
    base = sim.get_body_id(info.body_names[info.base_body])
    assert isinstance(base, int) and base == info.base_body
    assert sim.get_body_subtree_ids(0).tolist() == list(range(info.nbody))
    every_child = sim.get_body_subtree_ids(info.body_names[base]).tolist()
    assert every_child == [b for b in range(info.nbody) if info.body_root[b] == info.body_root[base]]
    leaf = info.nbody - 1
    assert sim.get_body_subtree_ids(leaf).tolist() == [leaf]
    some = int(np.flatnonzero(info.body_parent == base)[0])
    expect = [b for b in range(info.nbody) if _is_descendant(info.body_parent, b, some)]
    assert sim.get_body_subtree_ids(some).tolist() == expect and len(expect) > 1
    with pytest.raises(UnknownNameError):
        sim.get_body_id("no_such_body")


def _is_descendant(parent: np.ndarray, b: int, root: int) -> bool:
    while True:
        if b == root:
            return True
        if b == 0:
            return False
        b = int(parent[b])


def test_zero_qvel(make_sim: Any) -> None:
    """Clause: get_zero_qvel is the (N, nv) float32 initial velocity on the backend's device."""
    sim = make_sim("quadruped", 3)
    z = sim.get_zero_qvel()
    assert z.shape == (3, sim.nv) and z.dtype == torch.float32 and z.device == sim.device and not z.any()


# ----------------------------------------------------------------------------
# combined readouts
# ----------------------------------------------------------------------------
def _moving(make_sim: Any) -> Any:
    sim = make_sim("quadruped", 4)
    rng = np.random.default_rng(3)
    sim.set_state(None, random_qpos(sim, rng), rng.normal(0.0, 0.5, size=(4, sim.nv)))
    return sim


def test_combined_body_getters_match_the_single_ones(make_sim: Any) -> None:
    """Clause: get_body_pose_w/vel_w/state_w give the single getters' values side by side, for the env
    rows asked (in that order), bit for bit."""
    sim = _moving(make_sim)
    bodies = sim.get_body_ids([sim.body_names[2], sim.body_names[1]])
    rows = [3, 0]
    pos, quat = sim.get_body_pos_w(bodies)[rows], sim.get_body_quat_w(bodies)[rows]
    lin, ang = sim.get_body_lin_vel_w(bodies)[rows], sim.get_body_ang_vel_w(bodies)[rows]
    assert torch.equal(sim.get_body_pose_w(bodies, env_ids=rows), torch.cat([pos, quat], -1))
    assert torch.equal(sim.get_body_vel_w(bodies, env_ids=rows), torch.cat([lin, ang], -1))
    assert torch.equal(sim.get_body_state_w(bodies, env_ids=rows), torch.cat([pos, quat, lin, ang], -1))
    assert sim.get_body_state_w().shape == (4, sim.info.nbody, 13)


def test_combined_getters_write_into_a_caller_buffer(make_sim: Any) -> None:
    """Clause: with out=, the result is written into the caller's tensor and that tensor is returned;
    a buffer of the wrong shape, dtype or type raises naming out, and is left as it was."""
    sim = _moving(make_sim)
    bodies = sim.get_body_ids(sim.body_names[1])
    out = torch.full((2, 1, 13), -7.0, device=sim.device)
    got = sim.get_body_state_w(bodies, env_ids=[1, 2], out=out)
    assert got is out and torch.equal(out, sim.get_body_state_w(bodies, env_ids=[1, 2]))
    for bad, error in (
        (torch.zeros((2, 1, 12), device=sim.device), InputShapeError),
        (torch.zeros((2, 1, 13), dtype=torch.float64, device=sim.device), InputDTypeError),
        (np.zeros((2, 1, 13), np.float32), ArgumentTypeError),
    ):
        before = bad.clone() if isinstance(bad, torch.Tensor) else bad.copy()
        with pytest.raises(error, match="out"):
            sim.get_body_state_w(bodies, env_ids=[1, 2], out=bad)
        assert torch.equal(bad, before) if isinstance(bad, torch.Tensor) else np.array_equal(bad, before)


def test_sensors_concatenated(make_sim: Any, require: Any) -> None:
    """Clause: get_sensors concatenates the named sensors' readings in the order named, for the env rows
    asked, each with get_sensor_data's meaning."""
    sim = _moving(make_sim)
    names = [n for n, t in zip(sim.sensor_names, sim.info.sensor_type) if t in sim.capabilities.sensor_types][:3]
    if len(names) < 2:
        pytest.skip("the quadruped has fewer than two sensors this backend serves")
    names = names[::-1]
    expect = torch.cat([sim.get_sensor_data(n) for n in names], -1)
    assert torch.equal(sim.get_sensors(names), expect)
    assert torch.equal(sim.get_sensors(names, env_ids=[2, 1]), expect[[2, 1]])
    out = torch.empty_like(expect[[0]])
    assert sim.get_sensors(names, env_ids=[3], out=out) is out and torch.equal(out, expect[[3]])
    with pytest.raises(UnknownNameError):
        sim.get_sensors(["no_such_sensor"])


# ----------------------------------------------------------------------------
# height scanner
# ----------------------------------------------------------------------------
def _robot_pose(sim: Any, yaw: float = 0.0, pitch: float = 0.0, pos: tuple = (0.0, 0.0, 2.0)) -> None:
    qy = np.array([math.cos(yaw / 2), 0, 0, math.sin(yaw / 2)])
    qp = np.array([math.cos(pitch / 2), 0, math.sin(pitch / 2), 0])
    w1, x1, y1, z1 = qy
    w2, x2, y2, z2 = qp
    q = [
        w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
        w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
        w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
        w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
    ]
    qpos = np.tile(np.concatenate([pos, q]), (sim.num_envs, 1))
    sim.set_state(None, qpos)


def test_height_scanner_reads_the_terrain(make_sim: Any, require: Any, terrain: Path) -> None:
    """Clause: a height scanner reads the world z of the first collision geom under each point (floor,
    box top), ignores visual-only geoms and the scanned body, and reports a miss as max_distance."""
    require("ray_casting")
    sim = make_sim(terrain, 2)
    _robot_pose(sim)
    points = [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [-1.0, 0.0, 0.0], [3.0, 3.0, 0.0]]
    scan = sim.create_height_scanner("robot", points, alignment="yaw")
    np.testing.assert_allclose(to_np(scan.heights()), [[0.5, 0.0, 0.0, 0.0]] * 2, atol=1e-5)
    np.testing.assert_allclose(to_np(scan.distances())[0], [1.5, 2.0, 2.0, 2.0], atol=1e-5)
    hits = to_np(scan.hit_points())
    np.testing.assert_allclose(hits[0, 0], [1.0, 0.0, 0.5], atol=1e-5)
    up = sim.create_height_scanner("robot", [[0.0, 0.0, 0.0]], direction=(0, 0, 1), max_distance=3.0)
    np.testing.assert_allclose(to_np(up.distances()), [[3.0], [3.0]])
    grid = sim.create_height_scanner("robot", grid_offsets(2.0, 2.0, 1.0), alignment="world")
    assert grid.num_rays == 9 and grid.heights().shape == (2, 9)


def test_height_scanner_alignment(make_sim: Any, require: Any, terrain: Path) -> None:
    """Clause: yaw alignment turns the points with the body's heading only (rays stay vertical), full
    alignment turns points and rays with the whole orientation, world alignment only translates."""
    require("ray_casting")
    sim = make_sim(terrain, 1)
    point = [[1.0, 0.0, 0.0]]
    yaw = sim.create_height_scanner("robot", point, alignment="yaw")
    full = sim.create_height_scanner("robot", point, alignment="full")
    world = sim.create_height_scanner("robot", point, alignment="world")
    _robot_pose(sim, yaw=math.pi / 2)  # the point swings to (0, 1): floor
    assert to_np(yaw.heights())[0, 0] == pytest.approx(0.0, abs=1e-5)
    assert to_np(world.heights())[0, 0] == pytest.approx(0.5, abs=1e-5)
    _robot_pose(sim, pitch=0.3)  # pitching leaves a yaw-aligned scan alone
    assert to_np(yaw.heights())[0, 0] == pytest.approx(0.5, abs=1e-5)
    assert to_np(yaw.distances())[0, 0] == pytest.approx(1.5, abs=1e-5)
    d = to_np(full.distances())[0, 0]  # full: point at 2 - sin(0.3) and x = cos(0.3), ray tilted by 0.3
    ox, oz = math.cos(0.3), 2.0 - math.sin(0.3)
    expect = (oz - 0.5) / math.cos(0.3)  # lands on the box top while x stays in [0.5, 1.5]
    assert ox - math.sin(0.3) * expect > 0.5 and d == pytest.approx(expect, abs=1e-4)


def test_height_scanner_bad_input(make_sim: Any, require: Any, terrain: Path) -> None:
    """Clause: a bad scanner definition raises naming the argument."""
    require("ray_casting")
    sim = make_sim(terrain, 1)
    with pytest.raises(UnknownNameError):
        sim.create_height_scanner("robt", [[0, 0, 0]])
    with pytest.raises(InputShapeError, match="offsets"):
        sim.create_height_scanner("robot", [[0, 0]])
    with pytest.raises(InvalidArgumentError, match="max_distance"):
        sim.create_height_scanner("robot", [[0, 0, 0]], max_distance=-1.0)
    with pytest.raises(InvalidArgumentError, match="alignment"):
        sim.create_height_scanner("robot", [[0, 0, 0]], alignment="pitch")
    with pytest.raises(InvalidArgumentError, match="direction"):
        sim.create_height_scanner("robot", [[0, 0, 0]], direction=(0, 0, 0))
    with pytest.raises(InvalidArgumentError, match="offsets"):
        sim.create_height_scanner("robot", [[0, 0, float("nan")]])


# ----------------------------------------------------------------------------
# more lookups and readouts
# ----------------------------------------------------------------------------
@pytest.mark.parametrize("model", ["arm7", "quadruped"])
def test_subtree_of_every_body(make_sim: Any, model: str) -> None:
    """Clause: get_body_subtree_ids(body) is the body and all its descendants in id order, for a name,
    an int or a one-element id tensor; an id out of range raises IndexRangeError."""
    sim = make_sim(model, 1)
    info = sim.info
    for b in range(info.nbody):
        expect = [c for c in range(info.nbody) if _is_descendant(info.body_parent, c, b)]
        got = sim.get_body_subtree_ids(info.body_names[b])
        assert got.tolist() == expect and got.dtype == torch.int64 and got.device == sim.device
        assert sim.get_body_subtree_ids(b).tolist() == expect
    tip = sim.get_body_ids(info.body_names[-1])
    assert sim.get_body_subtree_ids(tip).tolist() == [info.nbody - 1]
    with pytest.raises(IndexRangeError, match="body"):
        sim.get_body_subtree_ids(info.nbody)


def test_combined_getters_rows_by_mask_and_every_buffer(make_sim: Any) -> None:
    """Clause: env_ids may be a bool mask (rows in id order); get_body_pose_w and get_body_vel_w write
    into out= as get_body_state_w does; bad env ids, a non-contiguous buffer or one that requires grad
    raise before anything is written."""
    sim = _moving(make_sim)
    bodies = sim.get_body_ids([sim.body_names[3], sim.body_names[1]])
    mask = torch.tensor([True, False, True, False])
    full = sim.get_body_state_w(bodies)
    assert torch.equal(sim.get_body_state_w(bodies, env_ids=mask), full[[0, 2]])
    for getter, cols in ((sim.get_body_pose_w, slice(0, 7)), (sim.get_body_vel_w, slice(7, 13))):
        out = torch.full((2, 2, cols.stop - cols.start), -7.0, device=sim.device)
        assert getter(bodies, env_ids=[2, 0], out=out) is out
        assert torch.equal(out, full[[2, 0]][..., cols])
    store = torch.full((2, 2, 14), -7.0, device=sim.device)
    bad_outs = [
        (store[..., :13], InvalidArgumentError, "contiguous"),
        (torch.zeros((2, 2, 13), device=sim.device, requires_grad=True), InvalidArgumentError, "grad"),
    ]
    for bad, error, what in bad_outs:
        before = bad.detach().clone()
        with pytest.raises(error, match=f"out.*{what}"):
            sim.get_body_state_w(bodies, env_ids=[2, 0], out=bad)
        assert torch.equal(bad.detach(), before)
    out = torch.full((2, 2, 13), -7.0, device=sim.device)
    with pytest.raises(EnvIdError):
        sim.get_body_state_w(bodies, env_ids=[0, 0], out=out)
    assert (out == -7.0).all()


def test_sensors_raise_as_get_sensor_data(make_sim: Any) -> None:
    """Clause: get_sensors gives each sensor get_sensor_data's reading, and a sensor type the backend
    does not serve raises UnsupportedFeatureError as get_sensor_data does, writing nothing."""
    sim = make_sim("quadruped", 2)
    served = [n for n, t in zip(sim.sensor_names, sim.info.sensor_type) if t in sim.capabilities.sensor_types]
    assert served, "the quadruped has sensors of the core types"
    for name in sim.sensor_names:
        try:
            alone = sim.get_sensor_data(name)
        except UnsupportedFeatureError as e:
            out = torch.full((2, 99), -7.0, device=sim.device)
            with pytest.raises(UnsupportedFeatureError, match=str(e).split(":")[0]):
                sim.get_sensors([served[0], name], out=out)
            assert (out == -7.0).all()
            continue
        both = sim.get_sensors([name, served[0]], env_ids=[1, 0])
        assert torch.equal(both, torch.cat([alone, sim.get_sensor_data(served[0])], -1)[[1, 0]])


# ----------------------------------------------------------------------------
# the scanner: geometry, state, rules
# ----------------------------------------------------------------------------
#: (point over it, expected world z of the first collision surface) for SHAPES_MJCF, robot at rest
_SURFACES = [
    ((1.0, 0.0), 0.4),
    ((2.0, 0.0), 0.6),
    ((0.0, 1.0), 0.2),
    ((0.0, 2.0), 0.9),
    ((-1.0, 0.0), 0.5),
    ((-2.0, 0.0), 0.7),
    ((0.0, -1.0), 0.0),
    ((10.0, -7.0), 0.0),
    ((0.0, 0.0), 2.2),
    ((0.5, 0.0), 2.02),
]


def test_height_scanner_sees_every_primitive(make_sim: Any, require: Any, shapes: Path) -> None:
    """Clause: the scanner reads the top of every collision primitive (box, upright and lying cylinder,
    capsule, sphere), collision geoms drawn transparent, the bodies and their second links where they
    are right after construction, and unbounded planes; visual-only geoms are transparent. A scanner on
    the world body sees the world's geoms."""
    require("ray_casting")
    sim = make_sim(shapes, 2)
    points = [[x, y, 3.0] for (x, y), _ in _SURFACES]
    scan = sim.create_height_scanner("world", points)
    expect = [z for _, z in _SURFACES]
    np.testing.assert_allclose(to_np(scan.heights()), [expect] * 2, atol=1e-5)
    np.testing.assert_allclose(to_np(scan.distances()), [[3.0 - z for z in expect]] * 2, atol=1e-5)
    assert scan.distances().dtype == torch.float32 and scan.distances().device == sim.device
    hits = to_np(scan.hit_points())
    np.testing.assert_allclose(hits[1, 3], [0.0, 2.0, 0.9], atol=1e-5)


def test_height_scanner_sees_the_current_state(make_sim: Any, require: Any, shapes: Path) -> None:
    """Clause: after set_state (no step), each env's rays see that env's bodies where the getters put
    them: a crate moved in one env only, a link swung by its joint; the scanned body is skipped, other
    bodies of the robot are not."""
    require("ray_casting")
    sim = make_sim(shapes, 2)
    points = [[0.5, 0.0, 0.5], [0.0, 0.5, 0.5], [-1.5, -1.5, 0.0]]
    scan = sim.create_height_scanner("robot", points, alignment="world")
    np.testing.assert_allclose(to_np(scan.heights()), [[2.02, 0.0, 0.0]] * 2, atol=1e-5)
    qpos = to_np(sim.get_qpos())
    cols = sim.get_joint_qpos_indices("crate_free").tolist()
    qpos[0, cols[:3]] = [-1.5, -1.5, 0.25]  # env 0: the crate under point 3
    qpos[1, sim.get_joint_qpos_indices("swing").tolist()] = math.pi / 2  # env 1: the paddle over point 2
    sim.set_state(None, qpos)
    np.testing.assert_allclose(to_np(scan.heights()), [[2.02, 0.0, 0.5], [0.0, 2.02, 0.0]], atol=1e-5)
    paddle = to_np(sim.get_body_pos_w(sim.get_body_ids("arm")))[:, 0]
    np.testing.assert_allclose(paddle[:, :2], [[0.5, 0.0], [0.0, 0.5]], atol=1e-5)


def test_height_scanner_rules(make_sim: Any, require: Any, shapes: Path) -> None:
    """Clause: a hit beyond max_distance reads max_distance (and hit_points ends the ray there); a ray
    starting inside a geom it does not exclude reports where it leaves it; planes are one-sided (a ray
    from below the floor passes through); after close the scanner raises BackendClosedError."""
    require("ray_casting")
    sim = make_sim(shapes, 1)
    short = sim.create_height_scanner("robot", [[2.5, -2.5, 0.0]], alignment="world", max_distance=1.5)
    assert to_np(short.distances())[0, 0] == pytest.approx(1.5, abs=1e-6)
    np.testing.assert_allclose(to_np(short.hit_points())[0, 0], [2.5, -2.5, 0.5], atol=1e-5)
    inside = sim.create_height_scanner("robot", [[0.0, 0.0, 0.0]], exclude_body=False)
    assert to_np(inside.distances())[0, 0] == pytest.approx(0.2, abs=1e-5)
    below = sim.create_height_scanner("world", [[2.5, -2.5, -1.0]], direction=(0, 0, 1), max_distance=5.0)
    assert to_np(below.distances())[0, 0] == pytest.approx(5.0)
    sim.close()
    with pytest.raises(BackendClosedError):
        short.distances()
    with pytest.raises(BackendClosedError):
        sim.create_height_scanner("robot", [[0.0, 0.0, 0.0]])


def test_height_scanner_absent_raises(make_sim: Any, capabilities: Any, terrain: Path) -> None:
    """Clause: a backend that declares ray_casting absent raises UnsupportedFeatureError naming it."""
    if capabilities.ray_casting:
        pytest.skip("the backend declares ray_casting")
    sim = make_sim(terrain, 1)
    with pytest.raises(UnsupportedFeatureError, match="ray_casting"):
        sim.create_height_scanner("robot", [[0.0, 0.0, 0.0]])
