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

from simbackend.errors import (
    ArgumentTypeError,
    InvalidArgumentError,
    ModelLoadError,
    ScalarTypeError,
    UnknownNameError,
)
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
    assert {"quadruped", "go1", "go1_dc", "g1"} <= set(available_robots())
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
        ({"kp": -1.0}, InvalidArgumentError, r"robot\.kp: expected a finite number > 0, got -1\.0"),
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


def test_go1_dc_is_go1_on_dc_motors() -> None:
    """go1_dc: go1's joints, pose and servo gains as a PD law on torque motors (ctrl limited to Unitree's
    torques), with Unitree's torque-speed limits; the velocity task gives it go1's action scale, and it
    stands on zero actions as go1 does."""
    go1, dc = get_robot("go1"), get_robot("go1_dc")
    assert dc.joints == go1.joints and dc.feet == go1.feet and dc.actuation == "pd" and go1.actuation == "servo"
    config = {"joint_noise": 0.0, "episode_length": 100}
    tasks = {r: make_task("velocity", "mujoco", 2, config={"robot": r, **config}, seed=3) for r in ("go1", "go1_dc")}
    try:
        servo, pd = tasks["go1"], tasks["go1_dc"]
        ctl = pd.controller
        assert type(ctl).__name__ == "JointPDController"
        gains = servo.backend.get_model_actuator_gains()
        acts = servo.backend.get_actuator_ids(list(go1.joints))
        torch.testing.assert_close(ctl.kp, gains.kp[acts].float(), rtol=1e-5, atol=0)
        torch.testing.assert_close(ctl.kd, gains.kv[acts].float(), rtol=1e-5, atol=0)
        stall, no_load = torch.tensor([23.7, 23.7, 35.55] * 4), torch.tensor([30.1, 30.1, 20.06] * 4)
        torch.testing.assert_close(ctl.saturation_effort, stall)
        torch.testing.assert_close(ctl.velocity_limit, no_load)
        torch.testing.assert_close(pd.backend.get_actuator_ctrl_range()[ctl.actuator_ids, 1].float(), stall)
        torch.testing.assert_close(pd.action_scale, servo.action_scale)
        for _ in range(50):  # 1 s
            for t in (servo, pd):
                assert not bool(t.step(torch.zeros(2, 12)).terminated.any())
        z_servo, z_pd = servo.backend.get_base_pos()[:, 2], pd.backend.get_base_pos()[:, 2]
        assert (z_pd - z_servo).abs().max() < 0.01, (z_servo.tolist(), z_pd.tolist())
    finally:
        for t in tasks.values():
            t.close()


def test_a_velocity_limit_takes_the_motors_limit_as_its_stall_torque(critter: Path, tmp_path: Path) -> None:
    """velocity_limit without saturation_effort: the stall torque is the motor's own limit (an added motor's
    ctrl range, effort_limit); a motor with no limit is refused at build, in one line naming the field."""
    fields = json.loads(critter.read_text())
    fields.update(name="critter_dc", model=str(critter.parent / "critter.urdf"), actuation="pd")
    fields.update(velocity_limit={"*_knee": 15.0})
    path = tmp_path / "dc.json"
    path.write_text(json.dumps(fields))
    task = make_task("velocity", "mujoco", 2, config={"robot": str(path)})
    try:
        ctl = task.controller
        inf = math.inf
        assert ctl.velocity_limit.tolist() == [inf, 15.0] * 4 and ctl.saturation_effort.tolist() == [inf, 20.0] * 4
    finally:
        task.close()
    fields.pop("effort_limit")
    path.write_text(json.dumps(fields))
    with pytest.raises(
        InvalidArgumentError, match=r"^robot\.velocity_limit: joint 'fl_knee' has a velocity limit"
    ) as e:
        make_task("velocity", "mujoco", 2, config={"robot": str(path)})
    assert "'fl_knee_motor' has no ctrl range" in str(e.value) and "\n" not in str(e.value)


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
    listing = subprocess.run([*run, "robots"], capture_output=True, text=True, timeout=300)
    assert listing.returncode == 0 and "go1" in listing.stdout and "g1" in listing.stdout
    one = subprocess.run([*run, "robots", str(critter), "--sim", "mujoco"], capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr
    assert "fl_shin" in one.stdout and "mujoco" in one.stdout and "servo" in one.stdout
    bad = subprocess.run([*run, "robots", "go2"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "closest" in bad.stderr
    wrong = subprocess.run(
        [*run, "train", "--task", "cartpole", "--robot", "go1", "--out", "/tmp/x"], capture_output=True, text=True
    )
    assert wrong.returncode == 2 and "--robot: task 'cartpole' takes no robot" in wrong.stderr


# ----------------------------------------------------------------------
# hostile descriptions: every field checked where the description is made, one line naming it
# ----------------------------------------------------------------------
def _write_json(tmp_path: Path, **changes: object) -> Path:
    """A JSON file holding go1's fields with ``changes`` (``None`` drops a field)."""
    fields = get_robot("go1").to_dict()
    fields.pop("base_dir")
    for k, v in changes.items():
        if v is None:
            fields.pop(k)
        else:
            fields[k] = v
    path = tmp_path / "own.json"
    path.write_text(json.dumps(fields))
    return path


def _from_json_fields(tmp_path: Path, **changes: object) -> RobotDescription:
    """``get_robot`` of :func:`_write_json`'s file."""
    return get_robot(str(_write_json(tmp_path, **changes)))


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        # beyond float32 (the dtype gains, limits and poses are used in): inf there, so refused here
        ({"kp": 1e300}, r"robot\.kp: 1e\+300 is not finite in float32"),
        ({"kd": {"*_hip_joint": 1e39}}, r"robot\.kd\['\*_hip_joint'\]: 1e\+39 is not finite in float32"),
        ({"effort_limit": -1e39}, r"robot\.effort_limit: expected a finite number > 0"),
        ({"effort_limit": 1e39}, r"robot\.effort_limit: 1e\+39 is not finite in float32"),
        ({"kp": 1e-50}, r"robot\.kp: 1e-50 is 0 in float32"),
        ({"default_pose": {"FR_hip_joint": 1e300}}, r"robot\.default_pose\['FR_hip_joint'\]: 1e\+300 is not finite"),
        ({"kp": float("inf")}, r"robot\.kp: expected a finite number > 0, got inf"),
        # a physics substep: (0, 0.1] s
        ({"timestep": 1e9}, r"robot\.timestep: expected a finite number in \(0, 0\.1\], got 1000000000\.0"),
        ({"timestep": 0.2}, r"robot\.timestep: expected a finite number in \(0, 0\.1\]"),
        ({"timestep": 1e-60}, r"robot\.timestep: 1e-60 is 0 in float32"),
        ({"timestep": -0.001}, r"robot\.timestep: expected a finite number in \(0, 0\.1\]"),
        # gains a PD law needs for every driven joint, globs that match nothing: when made, not at build
        ({"actuation": "pd", "kp": {"FR_*": 20.0}, "kd": 1.0}, r"robot\.kp: no value for joints \['FL_hip_joint'"),
        ({"kp": {"*_hip_jont": 3.0}}, r"robot\.kp: '\*_hip_jont' matches none of the robot's joints; closest"),
        ({"default_pose": {"*_knee_joint": 0.5}}, r"robot\.default_pose: '\*_knee_joint' matches none"),
        # empty and repeated names
        ({"feet": []}, r"robot\.feet: expected at least one foot body or geom name"),
        ({"feet": ["trunk", "trunk"]}, r"robot\.feet: names must be distinct, repeated: \['trunk'\]"),
        ({"termination_bodies": ["trunk", "trunk"]}, r"robot\.termination_bodies: names must be distinct"),
        ({"held_joints": ["FR_hip_joint"]}, r"robot\.held_joints: joints the policy drives cannot be held too"),
        # engines and options
        ({"engine_options": {"mujocoo": {}}}, r"robot\.engine_options: unknown engine 'mujocoo'; closest .*'mujoco'"),
        ({"engine_options": {"mujoco": {"integrator": math.nan}}}, r"robot\.engine_options\.mujoco\.integrator: "),
        ({"model_options": {"fuse": True}}, r"robot\.model_options: unknown keys \['fuse'\]"),
        ({"name": "my robot"}, r"robot\.name: expected letters, digits"),
        ({"actuation": "torque"}, r"robot\.actuation: expected one of \['servo', 'pd'\], got 'torque'"),
        # DC-motor limits: > 0, globs that match, and only on a PD law ("servo" cannot saturate with speed)
        ({"velocity_limit": -1.0}, r"robot\.velocity_limit: expected a finite number > 0, got -1\.0"),
        ({"saturation_effort": {"*_knee": 3.0}}, r"robot\.saturation_effort: '\*_knee' matches none"),
        ({"velocity_limit": 30.0}, r'^robot\.velocity_limit: a DC-motor limit is a PD law\'s: use actuation "pd"'),
        ({"saturation_effort": {"*_calf_joint": 35.0}}, r'^robot\.saturation_effort: .*use actuation "pd"'),
    ],
)
def test_hostile_values_fail_where_the_description_is_made(tmp_path: Path, changes: dict, match: str) -> None:
    """Python and JSON alike: an InvalidArgumentError, one line naming the field, no doubled prefix."""
    for make in (lambda: _bad(get_robot("go1"), **changes), lambda: _from_json_fields(tmp_path, **changes)):
        with pytest.raises(InvalidArgumentError, match=match) as err:
            make()
        assert "\n" not in str(err.value) and not str(err.value).startswith("robot: robot")


def test_sane_extremes_are_taken() -> None:
    go1 = get_robot("go1")
    assert _bad(go1, timestep=0.1).timestep == 0.1
    assert _bad(go1, kp=3e38, kd=0.0, effort_limit=1e-3).kp == 3e38
    assert _bad(go1, termination_bodies=[]).termination_bodies == ()  # no body contact ends an episode


@pytest.mark.parametrize(
    ("changes", "error", "match"),
    [
        # a string where a list of names goes is refused, not read as one name
        ({"joints": "FR_hip_joint"}, ArgumentTypeError, r"robot\.joints: expected a list of joint names, got str"),
        ({"held_joints": "waist"}, ArgumentTypeError, r"robot\.held_joints: expected a list of joint names, got str"),
        ({"feet": "trunk"}, ArgumentTypeError, r"robot\.feet: expected a list of foot body or geom names, got str"),
        ({"termination_bodies": "trunk"}, ArgumentTypeError, r"robot\.termination_bodies: expected a list of body"),
        ({"joints": ["FR_hip_joint", 3]}, ArgumentTypeError, r"robot\.joints\[1\]: expected a non-empty name, got 3"),
        # numbers and flags: ScalarTypeError (an ArgumentTypeError and an InvalidArgumentError), as simbackend.checks
        ({"kp": "3"}, ScalarTypeError, r"robot\.kp: expected a finite number > 0, got str '3'"),
        ({"kp": True}, ScalarTypeError, r"robot\.kp: expected a finite number > 0, got bool True"),
        ({"kp": [1.0, 2.0]}, ArgumentTypeError, r"robot\.kp: expected a number or \{joint or glob: number\}, got list"),
        ({"velocity_limit": [30.0]}, ArgumentTypeError, r"robot\.velocity_limit: expected a number or \{joint or"),
        ({"saturation_effort": "23.7"}, ScalarTypeError, r"robot\.saturation_effort: expected a finite number > 0"),
        ({"kd": {"*": [1.0]}}, ScalarTypeError, r"robot\.kd\['\*'\]: expected a finite number >= 0, got list"),
        ({"timestep": "0.005"}, ScalarTypeError, r"robot\.timestep: expected a finite number in \(0, 0\.1\], got str"),
        ({"add_floor": 1}, ScalarTypeError, r"robot\.add_floor: expected True or False, got int 1"),
        ({"actuation": 3}, ScalarTypeError, r"robot\.actuation: expected one of \['servo', 'pd'\], got int 3"),
        ({"default_pose": [0.1]}, ArgumentTypeError, r"robot\.default_pose: expected a keyframe name or \{joint"),
        ({"default_pose": {"FR_hip_joint": "0.1"}}, ScalarTypeError, r"robot\.default_pose\['FR_hip_joint'\]"),
        ({"imu_site": 3}, ArgumentTypeError, r"robot\.imu_site: expected a non-empty name or None, got 3"),
        ({"name": 7}, ArgumentTypeError, r"robot\.name: expected a non-empty name, got 7"),
        ({"model": 7}, ArgumentTypeError, r"robot\.model: expected a built-in model name or a file path, got 7"),
        ({"base_dir": 7}, ArgumentTypeError, r"robot\.base_dir: expected a folder path or None, got 7"),
        ({"engine_options": {"mujoco": 3}}, ArgumentTypeError, r"robot\.engine_options\.mujoco: expected a dict of"),
        ({"engine_options": [1]}, ArgumentTypeError, r"robot\.engine_options: expected \{engine: \{option: value\}\}"),
        ({"model_options": {"package_dirs": 3}}, ArgumentTypeError, r"robot\.model_options\.package_dirs: expected"),
        ({"model_options": {"fuse_static": "yes"}}, ArgumentTypeError, r"robot\.model_options\.fuse_static: expected"),
    ],
)
def test_wrong_types_are_argument_type_errors_naming_the_field(
    tmp_path: Path, changes: dict, error: type, match: str
) -> None:
    """docs/robots.md's rule: a field of the wrong type is an ArgumentTypeError, from Python and JSON alike."""
    for make in (lambda: _bad(get_robot("go1"), **changes), lambda: _from_json_fields(tmp_path, **changes)):
        with pytest.raises(error, match=match) as err:
            make()
        assert isinstance(err.value, ArgumentTypeError) and "\n" not in str(err.value)
        assert not str(err.value).startswith("robot: robot")


def test_a_json_description_names_its_missing_and_unknown_fields(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^robot\.joints, robot\.feet: required, missing from") as err:
        _from_json_fields(tmp_path, joints=None, feet=None)
    assert "__init__" not in str(err.value) and "positional" not in str(err.value)
    with pytest.raises(InvalidArgumentError, match=r"^robot: unknown fields \['kpp'\]; closest known: 'kp'"):
        _from_json_fields(tmp_path, kpp=3.0)
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ArgumentTypeError, match=r"list\.json holds a list, expected \{field: value\}"):
        get_robot(str(tmp_path / "list.json"))
    with pytest.raises(InvalidArgumentError, match=r"robot\.kp: .* is not finite in float32"):
        _from_json_fields(tmp_path, kp=10**400)
    (tmp_path / "null.json").write_text("null")
    with pytest.raises(ArgumentTypeError, match=r"null\.json holds null, expected \{field: value\}"):
        get_robot(str(tmp_path / "null.json"))
    with pytest.raises(ArgumentTypeError, match=r"robot\.engine_options: expected engine names as keys, got 1"):
        _bad(get_robot("go1"), engine_options={1: {}})


def test_the_model_file_is_named_by_its_field_at_build(tmp_path: Path) -> None:
    desc = _from_json_fields(tmp_path, model="missing.xml")
    with pytest.raises(ModelLoadError, match=r"^robot\.model: .*missing\.xml"):
        robot_scene(desc)


def test_the_robots_command_says_each_field_once(tmp_path: Path) -> None:
    """``error: ROBOT: robot: ...`` and ``robot 'x': robot.kp: ...`` were doubled prefixes: one line, once."""
    run = [sys.executable, "-m", "simbackend.cli.main"]
    fields = json.loads(_write_json(tmp_path).read_text())
    (tmp_path / "bad.json").write_text(json.dumps({**fields, "kp": "30"}))
    bad = subprocess.run([*run, "robots", str(tmp_path / "bad.json")], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and bad.stderr.strip() == "error: robot.kp: expected a finite number > 0, got str '30'"
    missing = subprocess.run([*run, "robots", str(tmp_path / "nope.json")], capture_output=True, text=True, timeout=300)
    assert missing.returncode == 2 and missing.stderr.strip().startswith("error: robot: no file")
    train = subprocess.run(
        [*run, "train", "--task", "velocity", "--robot", str(tmp_path / "bad.json"), "--out", str(tmp_path / "r")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (
        train.returncode == 2 and train.stderr.strip() == "error: robot.kp: expected a finite number > 0, got str '30'"
    )


def test_a_backend_for_a_robot_in_one_call(tmp_path: Path) -> None:
    """docs/robots.md's Python path: ``make_robot_backend`` builds on the robot's scene with its engine blocks and
    checks the description against the model; ``resolve`` gives the ids and the default state."""
    from simbackend.robots import make_robot_backend

    with make_robot_backend("go1", "mujoco", 2) as b:
        robot = resolve("go1", b)
        assert b.nq == 19 and b.num_actuators == 12 and b.body_names[robot.base_body] == "trunk"
        assert robot.default_qpos[2] == pytest.approx(robot_scene(get_robot("go1")).default_qpos[2])
    # the robot's block for the engine is checked there, named as the description's field
    odd = _bad(get_robot("go1"), name="odd", engine_options={"mujoco": {"integratr": "euler"}})
    with pytest.raises(InvalidArgumentError, match=r"^robot\.engine_options\.mujoco\.integratr: unknown option"):
        make_robot_backend(odd, "mujoco", 1)
    # a description that does not fit its model fails before the backend is handed back
    with pytest.raises(InvalidArgumentError, match=r"robot\.imu_site: .* no site 'imu2'"):
        make_robot_backend(_bad(get_robot("go1"), imu_site="imu2"), "mujoco", 1)


@pytest.mark.parametrize(("changes", "match"), [({"timestep": 1e9}, r"robot\.timestep"), ({"kp": 1e300}, r"robot\.kp")])
def test_the_task_refuses_a_bad_description_before_it_builds(tmp_path: Path, changes: dict, match: str) -> None:
    """The issue's cases: ``timestep`` 1e9 made the velocity task allocate terabytes (a raw torch RuntimeError),
    ``kp`` 1e300 a model whose gains read inf; both fail at ``make_task`` now, naming the field."""
    path = _write_json(tmp_path, **changes)
    with pytest.raises(InvalidArgumentError, match=match):
        make_task("velocity", "mujoco", 2, config={"robot": str(path)})


def test_the_robots_command_fails_where_an_installed_engine_refuses_the_description(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``--sim`` every registered engine is tried: one that is installed and cannot build the
    description makes the exit code 1, as a failure while running; an engine whose extra is missing is listed
    as such and fails the command only where ``--sim`` names it. A description that does not fit its model (a
    foot the model lacks) is bad input on every engine: exit 2, one line, before any engine (issue 50, item 5)."""
    from typer.testing import CliRunner

    import simbackend.cli.main as cli_main
    from simbackend.cli.common import app

    feet = list(get_robot("go1").feet)
    bad = _write_json(tmp_path, feet=["nope_foot", *feet[1:]])
    import simbackend.robots as robots

    engines = ["mujoco", "absent"]
    monkeypatch.setattr(cli_main, "available_backends", lambda: engines)
    real = robots.make_robot_backend

    def make(desc, sim, n, **kw):  # an engine registered but not installed, as an extra that is missing
        if sim == "absent":
            raise ImportError("absent: pip install 'simbackend[absent]'")
        if sim == "picky":  # installed, and cannot build this model (as SAPIEN past its 32 ignore bits)
            raise ModelLoadError("the picky backend cannot build this model")
        return real(desc, sim, n, **kw)

    monkeypatch.setattr(robots, "make_robot_backend", make)
    runner = CliRunner()
    refused = runner.invoke(app, ["robots", str(bad)])
    assert refused.exit_code == 2, refused.output
    assert refused.output.strip().startswith("error: robot.feet: ") and "nope_foot" in refused.output
    good = _write_json(tmp_path)
    loads = runner.invoke(app, ["robots", str(good)])  # the absent engine alone does not fail it
    assert loads.exit_code == 0, loads.output
    assert "absent  loads: no" in loads.output
    engines.append("picky")
    picky = runner.invoke(app, ["robots", str(good)])
    assert picky.exit_code == 1, picky.output
    assert "picky   loads: no (the picky backend cannot build this model)" in picky.output


#: a one-joint URDF whose base inertia violates the triangle inequality (0.001 + 0.001 < 0.01), as shipped
#: models (Mini Cheetah's thighs, ANYmal C's camera) do
BAD_INERTIA_URDF = """<robot name="bad">
  <link name="body">
    <inertial><mass value="1"/><inertia ixx="0.001" iyy="0.001" izz="0.01" ixy="0" ixz="0" iyz="0"/></inertial>
    <collision><geometry><box size="0.2 0.1 0.05"/></geometry></collision>
  </link>
  <link name="leg">
    <inertial><mass value="0.1"/><inertia ixx="1e-4" iyy="1e-4" izz="1e-4" ixy="0" ixz="0" iyz="0"/></inertial>
    <collision><origin xyz="0 0 -0.05"/><geometry><sphere radius="0.02"/></geometry></collision>
  </link>
  <joint name="hip" type="revolute"><parent link="body"/><child link="leg"/><origin xyz="0 0 -0.1"/>
    <axis xyz="0 1 0"/><limit lower="-1" upper="1" effort="5" velocity="10"/></joint>
</robot>
"""


def _bad_inertia_robot(folder: Path, **changes: object) -> Path:
    (folder / "bad_inertia.urdf").write_text(BAD_INERTIA_URDF)
    fields = {"name": "bad", "model": "bad_inertia.urdf", "joints": ["hip"], "default_pose": {"hip": 0.0},
              "base_body": "body", "feet": ["leg"], "add_free_joint": True, "kp": 10.0, "kd": 0.5, **changes}  # fmt: skip
    path = folder / f"{fields['name']}.json"
    path.write_text(json.dumps(fields))
    return path


def test_a_model_mujoco_cannot_compile_is_one_line_naming_robot_model(tmp_path: Path) -> None:
    """MuJoCo's compile error (raised by the spec's XML writer before the scene is cached) is one line naming
    robot.model and the file, with the option that fixes it, on every path: robot_scene, make_robot_backend,
    the velocity task and ``simbackend robots``."""
    from simbackend.robots import make_robot_backend

    path = _bad_inertia_robot(tmp_path)
    expected = (
        r"^robot\.model: MuJoCo could not compile .*bad_inertia\.urdf: .*A \+ B >= C.*"
        r"set robot\.model_options\.balance_inertia to true"
    )
    for build in (
        lambda: robot_scene(str(path)),
        lambda: make_robot_backend(str(path), "mujoco", 1),
        lambda: make_task("velocity", "mujoco", 1, config={"robot": str(path)}),
    ):
        with pytest.raises(InvalidArgumentError, match=expected) as e:
            build()
        assert isinstance(e.value, ModelLoadError) and "\n" not in str(e.value)
    run = [sys.executable, "-m", "simbackend.cli.main", "robots", str(path), "--sim", "mujoco"]
    cli = subprocess.run(run, capture_output=True, text=True, timeout=300)
    assert cli.returncode == 2 and "Traceback" not in cli.stderr, cli.stderr  # bad input (issue 50, item 5)
    assert len(cli.stderr.strip().splitlines()) == 1 and cli.stderr.startswith("error: robot.model: MuJoCo could not")


def test_balance_inertia_loads_the_model_with_the_same_inertia_on_every_engine(tmp_path: Path) -> None:
    """``model_options.balance_inertia`` reaches the composed scene's compiler: the model loads, and MuJoCo and
    SAPIEN (read back from PhysX) hold the same balanced inertia, which satisfies the triangle inequality."""
    from simbackend.robots import make_robot_backend

    path = _bad_inertia_robot(tmp_path, name="balanced", model_options={"balance_inertia": True})
    sims = ["mujoco"] + (["sapien"] if _installed("sapien") else [])
    inertias = {}
    for sim in sims:
        with make_robot_backend(str(path), sim, 1) as b:
            inertia = np.asarray(b.model_fields()["body_inertia"], np.float64)[list(b.body_names).index("body")]
            moments = np.linalg.eigvalsh(inertia)
            assert moments[0] + moments[1] >= moments[2] * (1 - 1e-6), (sim, moments)
            inertias[sim] = moments
    for sim, moments in inertias.items():
        np.testing.assert_allclose(moments, inertias["mujoco"], rtol=1e-5, err_msg=sim)
    with pytest.raises(ArgumentTypeError, match=r"^robot\.model_options\.balance_inertia: expected True, False"):
        get_robot(str(_bad_inertia_robot(tmp_path, name="typo", model_options={"balance_inertia": "yes"})))


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def test_robot_scene_takes_a_name_or_a_json_path(critter: Path) -> None:
    """As make_robot_backend and resolve do: a description, a registered name or a JSON file."""
    assert robot_scene(str(critter)) == robot_scene(critter) == robot_scene(get_robot(str(critter)))
    assert robot_scene("go1").path == robot_scene(get_robot("go1")).path
    with pytest.raises(ArgumentTypeError, match=r"^robot: expected a robot name or a JSON file, got int"):
        robot_scene(3)


def test_sapiens_pair_budget_error_suggests_fusing_fixed_links(tmp_path: Path) -> None:
    """Ten fixed links on one body make 45 pairs PhysX must ignore, over its 32 bits: the message says that
    fuse_static merges them, and with it the robot builds."""
    pytest.importorskip("sapien")
    from simbackend.robots import make_robot_backend

    welded = "".join(
        f'<link name="f{i}"><inertial><mass value="0.1"/><inertia ixx="1e-4" iyy="1e-4" izz="1e-4" ixy="0" ixz="0"'
        f' iyz="0"/></inertial><collision><origin xyz="{0.02 * i} 0 0"/><geometry><sphere radius="0.01"/>'
        f'</geometry></collision></link><joint name="w{i}" type="fixed"><parent link="body"/><child link="f{i}"/>'
        "</joint>"
        for i in range(10)
    )
    (tmp_path / "bad_inertia.urdf").write_text(
        BAD_INERTIA_URDF.replace('izz="0.01"', 'izz="0.002"').replace('<link name="leg">', welded + '<link name="leg">')
    )
    fields = {"name": "welded", "model": "bad_inertia.urdf", "joints": ["hip"], "default_pose": {"hip": 0.0},
              "base_body": "body", "feet": ["leg"], "add_free_joint": True, "kp": 10.0, "kd": 0.5}  # fmt: skip
    with pytest.raises(ModelLoadError, match=r"PhysX's 32 ignore bits.*10 bodies are welded.*fuse_static: true"):
        make_robot_backend(RobotDescription.from_dict(fields, base_dir=str(tmp_path)), "sapien", 1)
    fused = {**fields, "model_options": {"fuse_static": True}}
    with make_robot_backend(RobotDescription.from_dict(fused, base_dir=str(tmp_path)), "sapien", 1) as b:
        assert list(b.body_names) == ["world", "body", "leg"]


def test_the_robots_command_prints_the_total_mass(critter: Path) -> None:
    """Per engine, the bodies' masses as the engine holds them: the critter's URDF gives 4 + 4 (0.4 + 0.2) kg."""
    from typer.testing import CliRunner

    import simbackend.cli.main  # noqa: F401  (registers the commands)
    from simbackend.cli.common import app

    out = CliRunner().invoke(app, ["robots", str(critter), "--sim", "mujoco"])
    assert out.exit_code == 0, out.output
    assert "mass: 6.400 kg" in out.output, out.output
