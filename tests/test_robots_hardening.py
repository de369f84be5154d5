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


@pytest.mark.parametrize("sim", ENGINES)
def test_self_collisions_mean_the_same_on_every_engine(tmp_path: Path, sim: str) -> None:
    """The chassis box swallows the upper legs' tops. Lifted 1 m clear of the floor, so that any contact is a
    self-contact: with self_collisions true the chassis and the upper legs push each other apart (their
    contact forces), with false (the default) nothing touches, on every engine: the scene's contype/conaffinity
    bits say it, and each engine honours them."""
    for on in (True, False):
        folder = tmp_path / str(on)
        folder.mkdir()
        path = write_overlap_robot(folder, self_collisions=on)
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
            assert {"chassis", "FL_upper_leg", "FR_upper_leg", "RL_upper_leg", "RR_upper_leg"} <= set(touching), (
                touching
            )
        else:
            assert touching == {}, touching
