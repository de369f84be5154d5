"""Robot descriptions (:mod:`simbackend.robots`) and the velocity task over them.

A user's URDF robot is built here (primitives only, not vendored), described in a
JSON file, trained for a few iterations and evaluated on another engine with
no code outside its description. Bad descriptions fail at build, in one line
naming the field. G1's default-pose PD stand holds 10 s on every engine.
"""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from simbackend.errors import ArgumentTypeError, InvalidArgumentError, UnknownNameError
from simbackend.robots import RobotDescription, available_robots, get_robot, resolve, robot_scene
from simbackend.tasks import make_task

#: a four-legged URDF robot with two revolute joints per leg and sphere feet, as a user writes one
URDF = """<?xml version="1.0"?>
<robot name="critter">
  <link name="body">
    <inertial><mass value="4"/><inertia ixx="0.02" iyy="0.06" izz="0.07" ixy="0" ixz="0" iyz="0"/></inertial>
    <collision><geometry><box size="0.4 0.2 0.08"/></geometry></collision>
  </link>
{legs}
</robot>
"""
LEG = """
  <link name="{leg}_thigh">
    <inertial><origin xyz="0 0 -0.08"/><mass value="0.4"/><inertia ixx="1e-3" iyy="1e-3" izz="1e-4" ixy="0" ixz="0" iyz="0"/></inertial>
    <collision><origin xyz="0 0 -0.08"/><geometry><cylinder radius="0.015" length="0.16"/></geometry></collision>
  </link>
  <joint name="{leg}_hip" type="revolute">
    <parent link="body"/><child link="{leg}_thigh"/><origin xyz="{x} {y} 0"/><axis xyz="0 1 0"/>
    <limit lower="-1.5" upper="1.5" effort="20" velocity="20"/>
  </joint>
  <link name="{leg}_shin">
    <inertial><origin xyz="0 0 -0.08"/><mass value="0.2"/><inertia ixx="5e-4" iyy="5e-4" izz="5e-5" ixy="0" ixz="0" iyz="0"/></inertial>
    <collision><origin xyz="0 0 -0.08"/><geometry><cylinder radius="0.012" length="0.16"/></geometry></collision>
    <collision><origin xyz="0 0 -0.16"/><geometry><sphere radius="0.02"/></geometry></collision>
  </link>
  <joint name="{leg}_knee" type="revolute">
    <parent link="{leg}_thigh"/><child link="{leg}_shin"/><origin xyz="0 0 -0.16"/><axis xyz="0 1 0"/>
    <limit lower="-2.5" upper="0" effort="20" velocity="20"/>
  </joint>
"""
LEGS = {"fl": (0.15, 0.1), "fr": (0.15, -0.1), "rl": (-0.15, 0.1), "rr": (-0.15, -0.1)}


def write_urdf_robot(folder: Path) -> Path:
    """The URDF and its JSON description (model path relative to the JSON file); returns the JSON file."""
    legs = "".join(LEG.format(leg=k, x=x, y=y) for k, (x, y) in LEGS.items())
    (folder / "critter.urdf").write_text(URDF.format(legs=legs))
    desc = {
        "name": "critter",
        "model": "critter.urdf",
        "joints": [f"{k}_{j}" for k in LEGS for j in ("hip", "knee")],
        "default_pose": {"*_hip": 0.6, "*_knee": -1.2},
        "base_body": "body",
        "feet": [f"{k}_shin" for k in LEGS],
        "add_free_joint": True,
        "actuation": "servo",
        "kp": 30.0,
        "kd": 1.0,
        "effort_limit": 20.0,
    }
    path = folder / "critter.json"
    path.write_text(json.dumps(desc, indent=1))
    return path


@pytest.fixture(scope="module")
def critter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_urdf_robot(tmp_path_factory.mktemp("critter"))


def test_builtin_robots_are_registered() -> None:
    assert {"quadruped", "go1", "g1"} <= set(available_robots())
    go1 = get_robot("go1")
    assert len(go1.joints) == 12 and go1.base_body == "trunk" and go1.actuation == "servo"
    g1 = get_robot("g1")
    assert len(g1.joints) == 12 and len(g1.held_joints) == 17 and g1.base_body == "pelvis"
    with pytest.raises(UnknownNameError, match="'go1'"):
        get_robot("go2")


def test_a_urdf_robot_from_its_json_description(critter: Path) -> None:
    desc = get_robot(str(critter))
    scene = robot_scene(desc)
    task = make_task("velocity", "mujoco", 2, config={"robot": str(critter)})
    try:
        b = task.backend
        assert task.action_dim == 8 and b.num_actuators == 8 and b.capabilities.contact_forces
        gains = b.get_model_actuator_gains()
        np.testing.assert_allclose(gains.kp.numpy(), 30.0)
        np.testing.assert_allclose(b.get_actuator_ctrl_range().numpy(), np.tile([-math.inf, math.inf], (8, 1)))
        # the base rests on its feet in the default pose: its height places the lowest geom 2 mm above the floor
        lowest = 0.16 * math.cos(0.6) + 0.16 * math.cos(0.6) + 0.02  # hip angle 0.6, knee -1.2: shin at -0.6
        assert scene.default_qpos[2] == pytest.approx(lowest + 0.002, abs=2e-3)
        # it stands with zero actions: on average over a second, its feet carry its weight (each substep's
        # force rises and falls as the legs settle and the feet chatter on the floor)
        total = torch.zeros(2)
        for k in range(75):
            task.step(torch.zeros(2, 8))
            if k >= 25:
                total += b.get_body_contact_force_w(task.robot.feet)[..., 2].sum(1) / 50
        mass = float(b.get_env_body_mass()[0].sum())
        assert total.numpy() == pytest.approx(mass * 9.81, rel=0.05)
    finally:
        task.close()


def test_a_urdf_robot_trains_and_evaluates_elsewhere(critter: Path, tmp_path: Path) -> None:
    from simbackend.training import evaluate, train

    small = {"num_envs": 8, "num_steps_per_env": 8, "max_iterations": 2, "eval_interval": 0, "eval_episodes": 2}
    config = {"robot": str(critter), "episode_length": 20}
    r = train("velocity", "mujoco", seed=1, train_config=small, task_config=config, out_dir=tmp_path, progress=False)
    assert r.iterations == 2 and r.checkpoint.is_file()
    res = evaluate(r.checkpoint, "sapien", seeds=(0,), episodes_per_seed=2)
    assert res.task == "velocity" and 1.0 <= res.mean_length.mean <= 20.0


def _bad(desc: RobotDescription, **changes: object) -> RobotDescription:
    return dataclasses.replace(desc, **changes)


@pytest.mark.parametrize(
    ("changes", "error", "match"),
    [
        ({"kp": -1.0}, InvalidArgumentError, r"robot\.kp: expected values > 0"),
        ({"kd": float("nan")}, InvalidArgumentError, r"robot\.kd: expected a finite number"),
        ({"kp": {"*_hip": math.inf}}, InvalidArgumentError, r"robot\.kp\['\*_hip'\]"),
        ({"actuation": "torque"}, InvalidArgumentError, r"robot\.actuation"),
        ({"joints": []}, InvalidArgumentError, r"robot\.joints: expected at least one"),
        ({"joints": ["a", "a"]}, InvalidArgumentError, r"robot\.joints: names must be distinct"),
        ({"timestep": 0}, InvalidArgumentError, r"robot\.timestep"),
        ({"default_pose": 3}, ArgumentTypeError, r"robot\.default_pose"),
        ({"actuation": "pd", "kp": None}, InvalidArgumentError, r"robot\.kp, robot\.kd: required"),
    ],
)
def test_bad_fields_fail_when_made(changes: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        _bad(get_robot("go1"), **changes)


def _build(desc: RobotDescription) -> None:
    scene = robot_scene(desc)
    from simbackend.registry import make_backend

    with make_backend("mujoco", scene.path, 1) as b:
        resolve(desc, b, scene.default_qpos)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        (
            {"joints": ("FR_hip_joint", "FR_thigh_jont")},
            r"robot\.joints: .* no joint 'FR_thigh_jont'; closest .*'FR_thigh_joint'",
        ),
        ({"feet": ("FR_foot_colision",)}, r"robot\.feet: the model has no body or geom 'FR_foot_colision'; closest"),
        ({"base_body": "trunc"}, r"robot\.base_body: .* no body 'trunc'; closest .*'trunk'"),
        ({"base_body": "FR_hip"}, r"robot\.base_body: 'FR_hip' has no free joint"),
        (
            {"default_pose": {"FR_calf_joint": 0.5}},
            r"robot\.default_pose: joint 'FR_calf_joint' at 0\.5 is outside its range",
        ),
        ({"default_pose": {"*_knee_joint": 0.5}}, r"robot\.default_pose: '\*_knee_joint' matches none"),
        ({"default_pose": "stand"}, r"robot\.default_pose: the model has no keyframe 'stand'; known names: 'home'"),
        ({"imu_site": "imu2"}, r"robot\.imu_site: .* no site 'imu2'"),
        ({"actuation": "pd", "kp": 20.0, "kd": 1.0}, r"robot\.actuation: joint 'FR_hip_joint' has a position actuator"),
        ({"kp": {"*_hip_jont": 3.0}}, r"robot\.kp: '\*_hip_jont' matches none"),
    ],
)
def test_bad_descriptions_fail_at_build_in_one_line(changes: dict, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match) as err:
        _build(_bad(get_robot("go1"), **changes))
    assert "\n" not in str(err.value)


def test_a_robot_without_a_floating_base_is_refused(critter: Path) -> None:
    desc = dataclasses.replace(get_robot(str(critter)), add_free_joint=False)
    with pytest.raises(InvalidArgumentError, match=r"robot\.base_body: 'body' has no free joint.*add_free_joint=True"):
        robot_scene(desc)


def test_quadruped_is_the_velocity_task_on_the_builtin_quadruped() -> None:
    task = make_task("quadruped", "mujoco", 2)
    try:
        assert task.config.robot == "quadruped" and task.robot.description.name == "quadruped"
        assert task.action_dim == 12 and task.control_dt == pytest.approx(0.02)
        assert type(task.controller).__name__ == "JointPDController"
    finally:
        task.close()


def test_commands_are_resampled_within_an_episode() -> None:
    task = make_task("velocity", "mujoco", 3, config={"robot": "go1", "resample_time": 0.1, "episode_length": 20})
    try:
        first = task.commands.clone()
        seen = [first]
        for _ in range(12):
            task.step(torch.zeros(3, task.action_dim))
            seen.append(task.commands.clone())
        # 0.1 s of 20 ms steps: a new command after steps 5 and 10 (seen[k] is after k steps)
        assert torch.equal(seen[4], first) and not torch.equal(seen[5], first)
        assert torch.equal(seen[5], seen[9]) and not torch.equal(seen[10], seen[9])
        again = make_task("velocity", "sapien", 3, config={"robot": "go1", "resample_time": 0.1, "episode_length": 20})
        try:
            assert torch.equal(again.commands, first)  # the same episodes on another engine
        finally:
            again.close()
    finally:
        task.close()


@pytest.mark.parametrize("sim", ["mujoco", "sapien", "mjwarp", "motrix"])
def test_g1_stands_10_s_on_its_default_pose(sim: str) -> None:
    """G1 with zero actions: every joint held at ``knees_bent`` by its servos for 10 s, without falling."""
    if sim == "motrix":
        pytest.importorskip("simbackend_motrix")
    task = make_task("velocity", sim, 2, config={"robot": "g1", "joint_noise": 0.0, "episode_length": 600})
    try:
        steps = round(10.0 / task.control_dt)
        z0 = float(task.backend.get_base_pos()[0, 2])
        for _ in range(steps):
            out = task.step(torch.zeros(2, task.action_dim))
            assert not bool(out.terminated.any()), f"G1 fell on {sim} at t = {_ * task.control_dt:.2f} s"
        z = task.backend.get_base_pos()[:, 2]
        assert (z > z0 - 0.05).all(), f"G1 sank on {sim}: {z0:.3f} -> {z.tolist()}"
    finally:
        task.close()


def test_robots_command(critter: Path) -> None:
    run = [sys.executable, "-m", "simbackend.cli.main"]
    listing = subprocess.run([*run, "robots"], capture_output=True, text=True, timeout=120)
    assert listing.returncode == 0 and "go1" in listing.stdout and "g1" in listing.stdout
    one = subprocess.run([*run, "robots", str(critter), "--sim", "mujoco"], capture_output=True, text=True, timeout=120)
    assert one.returncode == 0, one.stderr
    assert "fl_shin" in one.stdout and "mujoco" in one.stdout and "servo" in one.stdout
    bad = subprocess.run([*run, "robots", "go2"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "closest" in bad.stderr
    wrong = subprocess.run(
        [*run, "train", "--task", "cartpole", "--robot", "go1", "--out", "/tmp/x"], capture_output=True, text=True
    )
    assert wrong.returncode == 2 and "--robot: task 'cartpole' takes no robot" in wrong.stderr
