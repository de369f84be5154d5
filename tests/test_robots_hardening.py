"""Issue 50's robot items: self-collisions (a description's ``self_collisions``, honoured alike on every
engine; self-contacts named as such; a link's hull swallowing another link's origin), the settle check's
stance limits (tilt, the spread of foot loads; which limit failed, on which engines), and bad descriptions
exiting 2 from every command that takes one.

The test robot is a URDF written here whose chassis box swallows the tops of its upper legs, as the
issue's quadruped's chassis mesh (taken as its convex hull) did.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from simbackend.robots import get_robot, make_robot_backend, resolve, robot_scene

LEG = """
  <joint name="{leg}_hip" type="revolute">
    <parent link="chassis"/><child link="{leg}_hip_link"/>
    <origin xyz="{x} {y} 0"/><axis xyz="1 0 0"/><limit lower="-1" upper="1" effort="30" velocity="20"/>
  </joint>
  <link name="{leg}_hip_link">
    <inertial><mass value="0.3"/><inertia ixx="1e-4" iyy="1e-4" izz="1e-4" ixy="0" ixz="0" iyz="0"/></inertial>
  </link>
  <joint name="{leg}_thigh" type="revolute">
    <parent link="{leg}_hip_link"/><child link="{leg}_upper_leg"/>
    <origin xyz="0 0 0"/><axis xyz="0 1 0"/><limit lower="-2" upper="2" effort="30" velocity="20"/>
  </joint>
  <link name="{leg}_upper_leg">
    <inertial><origin xyz="0 0 -0.1"/><mass value="0.5"/><inertia ixx="1e-3" iyy="1e-3" izz="1e-4" ixy="0" ixz="0" iyz="0"/></inertial>
    <collision><origin xyz="0 0 -0.1"/><geometry><cylinder radius="0.03" length="0.2"/></geometry></collision>
  </link>
  <joint name="{leg}_knee" type="revolute">
    <parent link="{leg}_upper_leg"/><child link="{leg}_lower_leg"/>
    <origin xyz="0 0 -0.2"/><axis xyz="0 1 0"/><limit lower="-2.5" upper="0" effort="30" velocity="20"/>
  </joint>
  <link name="{leg}_lower_leg">
    <inertial><origin xyz="0 0 -0.1"/><mass value="0.3"/><inertia ixx="1e-3" iyy="1e-3" izz="1e-4" ixy="0" ixz="0" iyz="0"/></inertial>
    <collision><origin xyz="0 0 -0.2"/><geometry><sphere radius="0.025"/></geometry></collision>
  </link>
"""
URDF = """<?xml version="1.0"?>
<robot name="overlap">
  <link name="chassis">
    <inertial><mass value="6"/><inertia ixx="0.02" iyy="0.06" izz="0.07" ixy="0" ixz="0" iyz="0"/></inertial>
    <collision><geometry>{chassis}</geometry></collision>
  </link>
{legs}
</robot>
"""
#: the hips sit 5 cm inside the chassis' ends: its box holds the upper legs' origins and tops
LEGS = (("FL", 0.2, 0.09), ("FR", 0.2, -0.09), ("RL", -0.2, 0.09), ("RR", -0.2, -0.09))
JOINTS = [f"{leg}_{part}" for leg, _, _ in LEGS for part in ("hip", "thigh", "knee")]


def write_overlap_robot(folder: Path, mesh: bool = False, **fields: object) -> Path:
    """The overlapping quadruped's URDF and JSON description in ``folder``; ``mesh``: the chassis as an OBJ
    box (8 vertices: MuJoCo collides its convex hull) instead of a URDF box."""
    chassis = '<box size="0.5 0.24 0.14"/>'
    if mesh:
        verts = [(x, y, z) for x in (-0.25, 0.25) for y in (-0.12, 0.12) for z in (-0.07, 0.07)]
        faces = [(1, 3, 4, 2), (5, 6, 8, 7), (1, 2, 6, 5), (3, 7, 8, 4), (1, 5, 7, 3), (2, 4, 8, 6)]
        (folder / "chassis.obj").write_text(
            "".join(f"v {x} {y} {z}\n" for x, y, z in verts) + "".join(f"f {a} {b} {c} {d}\n" for a, b, c, d in faces)
        )
        chassis = '<mesh filename="chassis.obj"/>'
    legs = "".join(LEG.format(leg=leg, x=x, y=y) for leg, x, y in LEGS)
    (folder / "overlap.urdf").write_text(URDF.format(chassis=chassis, legs=legs))
    desc = {
        "name": "overlap",
        "model": "overlap.urdf",
        "joints": JOINTS,
        "default_pose": {"*_thigh": 0.5, "*_knee": -1.0},
        "base_body": "chassis",
        "feet": [f"{leg}_lower_leg" for leg, _, _ in LEGS],
        "add_free_joint": True,
        "actuation": "servo",
        "kp": 40.0,
        "kd": 1.0,
        "effort_limit": 30.0,
        **fields,
    }
    path = folder / "overlap.json"
    path.write_text(json.dumps(desc))
    return path


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


ENGINES = [
    pytest.param("mujoco"),
    pytest.param("mjwarp", marks=pytest.mark.skipif(not _installed("mujoco_warp"), reason="mujoco_warp missing")),
    pytest.param("sapien", marks=pytest.mark.skipif(not _installed("sapien"), reason="sapien missing")),
    pytest.param("motrix", marks=pytest.mark.skipif(not _installed("simbackend_motrix"), reason="motrix missing")),
]


# ----------------------------------------------------------------------
# item 2: self-collisions
# ----------------------------------------------------------------------
def test_self_collisions_default_off_and_checked() -> None:
    from simbackend.errors import ScalarTypeError
    from simbackend.robots import RobotDescription

    fields = {**get_robot("go1").to_dict(), "name": "x"}
    del fields["self_collisions"]
    assert RobotDescription(**fields).self_collisions is False  # a new description: off
    assert get_robot("go1").self_collisions is True  # built-ins keep Menagerie's filtering (their scenes as before)
    with pytest.raises(ScalarTypeError, match=r"^robot\.self_collisions: "):
        RobotDescription(**{**fields, "self_collisions": "no"})
    from simbackend.errors import ArgumentTypeError, InvalidArgumentError

    on = {**fields, "self_collisions": True}
    pairs = RobotDescription(**{**on, "collision_exclude": [["trunk", "FR_calf"]]}).collision_exclude
    assert pairs == (("trunk", "FR_calf"),)
    for bad, error, match in (
        ({**fields, "collision_exclude": [["trunk", "FR_calf"]]}, InvalidArgumentError, ": only with self_collisions"),
        ({**on, "collision_exclude": "trunk"}, ArgumentTypeError, r": expected a list of \[body, body\] pairs"),
        ({**on, "collision_exclude": [["trunk"]]}, ArgumentTypeError, r"\[0\]: expected a pair"),
        ({**on, "collision_exclude": [["trunk", "trunk"]]}, InvalidArgumentError, r"\[0\]: a body with itself"),
        ({**on, "collision_exclude": [["a", "b"], ["b", "a"]]}, InvalidArgumentError, r"\[1\]: the pair .* twice"),
    ):
        with pytest.raises(error, match=r"^robot\.collision_exclude" + match):
            RobotDescription(**bad)
    with pytest.raises(InvalidArgumentError, match=r"^robot\.collision_exclude\[0\]: .* no body 'FR_calff'"):
        robot_scene(RobotDescription(**{**on, "collision_exclude": [["trunk", "FR_calff"]]}))


@pytest.mark.parametrize("sim", ENGINES)
def test_self_collisions_mean_the_same_on_every_engine(tmp_path: Path, sim: str) -> None:
    """The chassis box swallows the upper legs' tops. Lifted 1 m clear of the floor, so that any contact is a
    self-contact: with self_collisions true and three of the four chassis-upper leg pairs excluded
    (collision_exclude), the chassis and the fourth upper leg push each other apart (their contact forces) and
    nothing else touches; with false (the default) nothing touches, on every engine: the scene's
    contype/conaffinity bits and <exclude> pairs say it, and each engine honours them."""
    excluded = [["chassis", f"{leg}_upper_leg"] for leg in ("FL", "FR", "RL")]
    for on in (True, False):
        folder = tmp_path / str(on)
        folder.mkdir()
        path = write_overlap_robot(folder, self_collisions=on, **({"collision_exclude": excluded} if on else {}))
        scene = robot_scene(path)
        with make_robot_backend(path, sim, 1, contact_sensing=True) as b:
            r = resolve(path, b, scene.default_qpos)
            qpos = r.default_qpos[None].clone()
            qpos[0, 2] += 1.0
            b.set_state(None, qpos)
            for _ in range(3):
                b.step(r.default_joints[None])
            force = b.get_body_contact_force_w()[0].norm(dim=-1).cpu()
            touching = {b.body_names[i]: float(f) for i, f in enumerate(force) if f > 1.0}
        if on:
            assert set(touching) == {"chassis", "RR_upper_leg"}, touching
        else:
            assert touching == {}, touching


def test_the_settle_check_names_self_contacts_as_such(tmp_path: Path) -> None:
    """The issue's report: self-contact forces (chassis 101658.6 N ... RR_upper_leg 1179499.7 N) listed as
    "other bodies in contact", with advice about the pose and the gains. With self-collisions on, the overlap
    robot's upper legs are named as colliding with the chassis (the pairs and their depth at the default
    pose) with the fix, not as resting on something; off, it stands."""
    from simbackend.robots import settle

    on = settle(write_overlap_robot(tmp_path, self_collisions=True), ["mujoco"], seconds=0.5)
    (r,) = on.results
    assert {"FL_upper_leg", "FR_upper_leg", "RL_upper_leg", "RR_upper_leg"} <= set(r.self_touching)
    assert [(a, b) for a, b, _ in r.self_contacts if a == "chassis"] and all(d > 0.05 for _, _, d in r.self_contacts)
    assert "self-contacts" in r.failed and not r.stands
    (line,) = [w for w in on.warnings if "collides with itself" in w]
    assert "chassis - FL_upper_leg 6.0 cm deep" in line and "robot.self_collisions to false" in line
    assert not any("rests on bodies other than its feet: FL_upper_leg" in w for w in on.warnings), on.warnings
    off = settle(write_overlap_robot(tmp_path), ["mujoco"], seconds=0.5)
    assert off.results[0].self_contacts == () and off.results[0].touching == {}


def test_the_robots_command_warns_when_a_hull_swallows_another_links_origin(tmp_path: Path) -> None:
    """The chassis as a mesh whose convex hull holds the upper legs' origins: ``robots`` says so (the body, its
    geom, the links whose origins it holds) with what to do, and nothing with self-collisions off."""
    from typer.testing import CliRunner

    from simbackend.cli.main import app

    runner = CliRunner()
    (tmp_path / "on").mkdir()
    (tmp_path / "off").mkdir()
    on = runner.invoke(app, ["robots", str(write_overlap_robot(tmp_path / "on", mesh=True, self_collisions=True)),
                             "--sim", "mujoco"])  # fmt: skip
    assert on.exit_code == 0, on.output
    hull = [ln for ln in on.stderr.splitlines() if "convex hull" in ln]
    assert len(hull) == 1, on.stderr
    assert hull[0].startswith("warning: overlap: the collision geometry of chassis (")
    assert "contains the origin of FL_upper_leg, FR_upper_leg, RL_upper_leg, RR_upper_leg" in hull[0]
    assert (
        "robot.self_collisions to false" in hull[0] and "robot.collision_exclude" in hull[0] and "primitive" in hull[0]
    )
    off = runner.invoke(app, ["robots", str(write_overlap_robot(tmp_path / "off", mesh=True)), "--sim", "mujoco"])
    assert off.exit_code == 0 and "warning" not in off.stderr, off.stderr


# ----------------------------------------------------------------------
# item 3: the settle check judges tilt and the spread of foot loads
# ----------------------------------------------------------------------
def test_a_leaning_robot_on_one_light_foot_does_not_stand(tmp_path: Path) -> None:
    """The issue's poor stance, reproduced: at kp 40 the robot with one hip rolled out (0.75 rad) leans 13 deg
    with its opposite rear foot carrying 2.4 % of its weight; the old limits (29 deg, the feet
    carrying m g) said "stands: yes". Now both limits fail, each named, and the summary says which."""
    from simbackend.robots import settle
    from simbackend.robots.settle import MAX_TILT, MIN_FOOT_SHARE

    pose = {"*_thigh": 0.5, "*_knee": -1.0, "FL_hip": 0.75}
    report = settle(write_overlap_robot(tmp_path, default_pose=pose), ["mujoco"])
    (r,) = report.results
    assert r.tilt > MAX_TILT and r.touching == {} and abs(r.feet_share - 1) < 0.1
    assert r.least_foot is not None and r.least_foot[0] == "RR_lower_leg" and r.least_foot[1] < MIN_FOOT_SHARE
    assert r.failed == ["tilt", "foot loads"] and not report.stands
    tilt, loads = report.warnings
    assert tilt.startswith("overlap on mujoco: tilts ") and "(limit 11.5)" in tilt
    assert loads.startswith("overlap on mujoco: uneven foot loads: RR_lower_leg carries ")
    assert "less than 0.33 of an equal share (8% with 4 feet)" in loads and "robot.default_pose" in loads
    assert report.summary() == "overlap: does not stand on mujoco (tilt, foot loads)"
    assert report.to_dict()["engines"]["mujoco"]["failed"] == ["tilt", "foot loads"]


def test_a_level_stance_stands_and_reports_its_sag(tmp_path: Path) -> None:
    """The same robot on its level default pose stands under the new limits; the sag of each driven joint is
    reported (the knees give most at kp 40)."""
    from simbackend.robots import settle

    report = settle(write_overlap_robot(tmp_path), ["mujoco"])
    (r,) = report.results
    assert r.stands and r.feet_even and report.warnings == ()
    assert set(r.sag) == set(JOINTS) and 0.01 < max(abs(v) for v in r.sag.values()) < 0.2
    assert report.summary() == "overlap: stands on mujoco"


# ----------------------------------------------------------------------
# items 5, 6 and 13: exit codes and messages of the robot commands
# ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"joints": ["nope", *JOINTS[1:]]}, "error: robot.joints: "),
        ({"model": "missing.urdf"}, "error: robot.model: model file not found: "),
        ({"kp": -1}, "error: robot.kp: expected a finite number > 0, got -1"),
        ({"feet": ["nofoot"]}, "error: robot.feet: the model has no body or geom 'nofoot'"),
    ],
)
def test_a_bad_description_exits_2_from_every_command(tmp_path: Path, changes: dict, message: str) -> None:
    """A wrong joint name or a missing URDF exited 1 (a failure while running) where a bad kp exited 2: every
    bad description input now exits 2 with one line naming the field, from ``robots`` (with and without
    ``--settle``), ``train`` and ``eval --policy ... --robot``, before any engine of the command's is built."""
    from typer.testing import CliRunner

    from simbackend.cli.main import app

    path = str(write_overlap_robot(tmp_path, **changes))
    policy = tmp_path / "policy.onnx"
    policy.write_bytes(b"")
    runner = CliRunner()
    for args in (
        ["robots", path],
        ["robots", path, "--settle", "--sim", "mujoco"],
        ["train", "--task", "velocity", "--robot", path, "--sim", "mujoco", "--out", str(tmp_path / "run")],
        ["eval", "--policy", str(policy), "--robot", path],
    ):
        out = runner.invoke(app, args)
        assert out.exit_code == 2, (args, out.output)
        assert out.stderr.startswith(message) and len(out.stderr.strip().splitlines()) == 1, (args, out.stderr)
    assert not (tmp_path / "run").exists()


def test_the_settle_summary_says_what_was_checked() -> None:
    """``robots go1 --settle --sim mujoco`` said "stands on every engine" after one engine; it names the engines
    checked. ``--sim bogus`` did not name ``--sim``."""
    from typer.testing import CliRunner

    from simbackend.cli.main import app

    runner = CliRunner()
    out = runner.invoke(app, ["robots", "go1", "--settle", "--sim", "mujoco", "--seconds", "0.5"])
    assert out.exit_code == 0, out.output
    assert out.stdout.strip().splitlines()[-1] == "go1: stands on mujoco"
    assert "every engine" not in out.output
    for args in (["robots", "go1", "--settle", "--sim", "bogus"], ["robots", "go1", "--sim", "bogus"]):
        bad = runner.invoke(app, args)
        assert bad.exit_code == 2 and bad.stderr.startswith("error: --sim: 'bogus' is not a registered backend"), (
            bad.stderr
        )
