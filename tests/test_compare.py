"""``simbackend compare`` (:mod:`simbackend.robots.compare`): the same robot through the same experiments on
several engines, and the figures where they part. Each engine runs a fraction of a second of sim."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from simbackend.errors import InvalidArgumentError
from simbackend.randomization import RandomizationPlan
from simbackend.robots import get_robot, make_robot_backend
from simbackend.robots.compare import (
    TRACK_COMMANDS,
    TRACK_ENVS,
    CompareReport,
    Experiments,
    Tracked,
    _events,
    compare,
    compare_engine,
    gait_lift_directions,
    policy_targets,
    policy_tracking,
)

SHORT = {"seconds": 0.2, "step_seconds": 0.25, "gait_seconds": 0.25}


def _kp_plan(scale: float) -> RandomizationPlan:
    return RandomizationPlan.from_dict({"version": 1, "seed": 0, "terms": [{
        "kind": "actuator_kp", "phase": "init", "targets": [".*"], "operation": "scale",
        "distribution": {"kind": "uniform", "low": scale, "high": scale}}]})  # fmt: skip


def test_a_servo_gain_changed_on_one_engine_shows_in_its_step_response() -> None:
    """Go1's servos at a quarter of their kp on SAPIEN only (a plan term): its calf's step response ends
    several times further from the target than on MuJoCo, the robot settles lower, and the report names both;
    the other joints are not stepped (one env per joint asked for)."""
    report = compare("go1", ["mujoco", "sapien"], joints=["FR_calf_joint"], plans={"sapien": _kp_plan(0.25)}, **SHORT)
    mj, sp = report.results
    assert (mj.engine, sp.engine) == ("mujoco", "sapien") and set(mj.steps) == {"FR_calf_joint"}
    a, b = mj.steps["FR_calf_joint"], sp.steps["FR_calf_joint"]
    assert a.step == b.step and abs(a.step) == pytest.approx(0.3)
    assert abs(b.final_error) > 2.5 * abs(a.final_error)
    for r in (mj, sp):  # the experiments start where the settle check does: the description's default state
        assert r.steps["FR_calf_joint"].before == pytest.approx(-r.settle.sag["FR_calf_joint"], abs=0.02)
    assert sp.settle.height < mj.settle.height - 0.01  # it sags more (still sinking at 0.2 s)
    parts = "\n".join(report.parts())
    assert "sapien vs mujoco: FR_calf_joint step final error" in parts and "sapien vs mujoco: settles at" in parts
    table = {name: values for name, values, _ in report.rows()}
    assert table["settled height"] == [mj.settle.height, sp.settle.height]
    assert set(mj.contacts) == set(get_robot("go1").feet) and set(mj.slip) == set(get_robot("go1").feet)


def test_slippery_feet_on_one_engine_show_in_the_slip_under_the_push() -> None:
    """Sliding friction at a twentieth on SAPIEN only (a plan term): under the same push its feet slide
    several times as far as MuJoCo's, and the report names the slip."""
    slippery = RandomizationPlan.from_dict({"version": 1, "seed": 0, "terms": [{
        "kind": "geom_friction", "phase": "init", "targets": [".*"], "operation": "scale", "components": ["sliding"],
        "distribution": {"kind": "uniform", "low": 0.05, "high": 0.05}}]})  # fmt: skip
    report = compare(
        "go1", ["mujoco", "sapien"], joints=[], plans={"sapien": slippery}, **{**SHORT, "gait_seconds": 0.3}
    )
    mj, sp = report.results
    assert sum(sp.slip.values()) > 2.5 * sum(mj.slip.values()) and min(sp.slip.values()) > 0.03
    assert "sapien vs mujoco: RL_foot_collision slips" in "\n".join(report.parts())


def test_the_lift_directions_raise_each_foot_with_its_own_leg() -> None:
    """Per foot, the joint change raises that foot by 1 m (the gradient's dot product) using only the joints
    that move that foot alone; a joint that moves two feet (a spine) stays still."""
    lift = np.array([[0.2, -0.1, 0.0, 0.05], [0.0, 0.0, 0.3, 0.05]])  # joint 3 moves both feet
    d = gait_lift_directions(lift)
    assert d[:, 3].tolist() == [0.0, 0.0]
    assert d[0] @ lift[0] == pytest.approx(1.0) and d[1] @ lift[1] == pytest.approx(1.0)
    assert d[0, 2] == 0.0 and d[1, :2].tolist() == [0.0, 0.0]


def test_a_foot_named_by_its_geom_is_raised_by_its_knee() -> None:
    """Go1's feet are geoms on the calf bodies, whose origin is the knee: the foot's point is the geom, so the
    knee (calf joint) moves it, and the hip of another leg does not."""
    from simbackend.models.feet import foot_points
    from simbackend.robots import robot_scene

    desc = get_robot("go1")
    scene = robot_scene(desc)
    points = foot_points(scene.path, scene.default_qpos, desc.feet, desc.joints)
    fr = desc.feet.index("FR_foot_collision")
    assert points.bodies[fr] == "FR_calf" and np.linalg.norm(points.offsets[fr]) > 0.1
    assert abs(points.lift[fr, desc.joints.index("FR_calf_joint")]) > 0.05
    assert points.lift[fr, desc.joints.index("FL_thigh_joint")] == 0.0
    with make_robot_backend(desc, "mujoco", 1) as b:  # the same body ids through the contract
        assert b.get_body_ids(["FR_calf"]).tolist() == [b.body_names.index("FR_calf")]


CHECKPOINT = Path(__file__).parent / "data" / "go1_velocity.pt"


def test_a_policy_rollout_is_recorded_as_its_controllers_targets() -> None:
    """policy_targets records, per control step, the targets the task's controller drove: the first is the
    default pose plus the action scale times the policy's clipped action at the task's first observation."""
    from simbackend.tasks import make_task
    from simbackend.training import load_checkpoint

    replay = policy_targets(CHECKPOINT, "mujoco", 0.1)
    ckpt = load_checkpoint(CHECKPOINT)
    task = make_task("velocity", "mujoco", 1, config={**ckpt.task_config, "randomization": None}, seed=0)
    try:
        action = ckpt.policy()(task.flatten(task.reset()))[0].clamp(-1, 1).double().numpy()
        default = task.robot.default_joints.double().numpy()
        scale = task.action_scale.double().numpy()
        assert replay.control_dt == pytest.approx(task.control_dt) and replay.steps == 5
    finally:
        task.close()
    assert replay.targets[0] == pytest.approx(default + scale * action, abs=1e-5)
    assert np.abs(replay.targets[1:] - replay.targets[:1]).max() > 1e-3  # the policy moves on


def test_the_gait_replays_a_policys_targets_with_a_checkpoint() -> None:
    """With a checkpoint the gait env replays the policy's targets (the report says so) instead of the
    scripted gait: the feet's contacts differ from the scripted gait's on the same engine."""
    settings = {**SHORT, "gait_seconds": 0.5}
    replayed = compare("go1", ["mujoco", "sapien"], joints=[], checkpoint=CHECKPOINT, track_seconds=1.2, **settings)
    assert all(set(r.tracking) == {label for label, _ in TRACK_COMMANDS} for r in replayed.results)
    scripted = compare_engine("go1", "mujoco", Experiments(**settings, joints=()))
    assert replayed.settings["gait"] == f"{CHECKPOINT} on mujoco" and replayed.settings["replay_steps"] == 25
    assert not np.array_equal(replayed.results[0].traces["gait_contact"], scripted.traces["gait_contact"])
    with pytest.raises(InvalidArgumentError, match="^checkpoint: its policy drives robot 'go1'"):
        compare("quadruped", ["mujoco", "sapien"], checkpoint=CHECKPOINT)


def test_contact_events_are_the_mask_changes() -> None:
    mask = np.array([1, 1, 0, 0, 1, 1, 0], dtype=bool)
    t = np.arange(7) * 0.01
    onsets, releases = _events(mask, t)
    assert onsets == (0.04,) and releases == (0.02, 0.06)


def test_the_cli_writes_the_table_json_and_pictures(tmp_path) -> None:
    from typer.testing import CliRunner

    from simbackend.cli.main import app

    runner = CliRunner()
    out, report = tmp_path / "pics", tmp_path / "report.json"
    args = ["compare", "quadruped", "--sims", "mujoco,sapien", "--joint", "FL_hip", "--seconds", "0.2",
            "--step-seconds", "0.2", "--gait-seconds", "0.2", "--json", str(report), "--out", str(out)]  # fmt: skip
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "settled height" in res.output and "step FL_hip: final error" in res.output
    data = json.loads(report.read_text())
    assert data["reference"] == "mujoco" and set(data["engines"]) == {"mujoco", "sapien"}
    row = next(r for r in data["table"] if r["figure"] == "settled height")
    assert row["values"]["mujoco"] == pytest.approx(data["engines"]["mujoco"]["settle"]["height"])
    assert sorted(p.name for p in out.iterdir()) == ["contacts.png", "push.png", "settle.png", "steps.png"]
    assert runner.invoke(app, args).exit_code == 2  # outputs exist, no --overwrite


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--sims", "mujoco"], "--sims"),
        (["--sims", "mujoco,nosuch"], "--sims"),
        (["--plan", "mujoco"], "--plan"),
        (["--plan", "sapien=x.json", "--sims", "mujoco,mjwarp"], "--plan"),
        (["--seconds", "0"], "--seconds"),
        (["--push-speed", "-1"], "--push-speed"),
        (["--track-seconds", "0.5"], "--track-seconds"),
        (["--joint", "FL_knee"], "--joint"),
        (["--checkpoint", "nosuch.pt"], "--checkpoint"),
        (["--checkpoint", str(CHECKPOINT)], "--checkpoint"),  # a Go1 policy
    ],
)
def test_bad_input_exits_2_naming_the_flag(args: list[str], flag: str) -> None:
    from typer.testing import CliRunner

    from simbackend.cli.main import app

    res = CliRunner().invoke(app, ["compare", "quadruped", *args])
    assert res.exit_code == 2, res.output
    assert flag in res.output


def test_the_policy_tracks_each_command_closed_loop() -> None:
    """policy_tracking holds each command, scaled to the task's command ranges, on its own envs: the trained
    Go1 policy goes forward on the forward command and backward on the backward one, turns with the yaw
    commands, and stands on the standing one."""
    from simbackend.training import load_checkpoint

    got = policy_tracking(CHECKPOINT, "mujoco", 2.0)
    ranges = load_checkpoint(CHECKPOINT).task_config.get("command_range")
    assert [label for label, _ in TRACK_COMMANDS] == list(got)
    fwd, back, yaw, stand = got["forward"], got["backward"], got["yaw left"], got["stand"]
    if ranges is None:  # the default ranges: forward up to min(1, sqrt(0.5 g h)), 1 rad/s of yaw
        assert yaw.command == pytest.approx((0.0, 0.0, 0.8))
    assert fwd.command[0] > 0.3 and fwd.command[1:] == (0.0, 0.0) and back.command[0] == -fwd.command[0]
    assert all(t.envs == TRACK_ENVS and t.falls == 0 for t in got.values())
    assert fwd.velocity[0] > 0.6 * fwd.command[0] and back.velocity[0] < 0.6 * back.command[0]
    assert yaw.velocity[2] > 0.5 * yaw.command[2] and got["yaw right"].velocity[2] < 0.5 * got["yaw right"].command[2]
    assert max(abs(v) for v in stand.velocity[:2]) < 0.15


def _tracked(velocity: tuple[float, float, float], falls: int = 0) -> dict[str, Tracked]:
    return {"left": Tracked(command=(0.0, 0.4, 0.0), velocity=velocity, falls=falls, envs=TRACK_ENVS)}


def test_where_tracking_parts_is_named(tmp_path) -> None:
    """A tracked velocity more than 0.1 (m/s or rad/s) from the reference's, or falls on one engine and not
    the other, is a line of ``parts``; a difference within the tolerance is not."""
    base = compare_engine("quadruped", "mujoco", Experiments(**SHORT, joints=()))
    ref = replace(base, tracking=_tracked((0.0, 0.25, 0.0)))

    def parts(velocity: tuple[float, float, float], falls: int = 0) -> list[str]:
        other = replace(base, engine="sapien", tracking=_tracked(velocity, falls))
        return [p for p in CompareReport("q", (ref, other), {}, {}, {}).parts() if "track" in p or "fall" in p]

    assert parts((0.05, 0.2, -0.05)) == []
    assert parts((0.0, 0.05, 0.0)) == [
        "sapien vs mujoco: tracking left gives (+0.00, +0.05, +0.00) against (+0.00, +0.25, +0.00)"
        " (vx, vy m/s, yaw rate rad/s)"
    ]
    assert parts((0.0, 0.25, 0.0), falls=3) == ["sapien vs mujoco: 3 of 4 fall tracking left against 0"]
    rows = CompareReport("q", (ref, ref), {}, {}, {}).rows()
    assert ("track left: vy", [0.25, 0.25], "m/s (+0.40)") in rows
    from simbackend.robots.compare import write_pictures

    written = write_pictures(CompareReport("q", (ref, ref), {}, {}, {}), tmp_path)
    assert written["tracking"].name == "tracking.png" and written["tracking"].stat().st_size > 0


def test_set_commands_holds_them_past_the_resample_time_and_refuses_bad_input() -> None:
    """VelocityTask.set_commands: the commands held stay through the task's resampling until a reset; a bad
    shape, a non-finite value or an env id out of range raises naming the argument and changes nothing."""
    import torch

    from simbackend.errors import EnvIdError
    from simbackend.tasks import make_task

    task = make_task("velocity", "mujoco", 3, config={"robot": "go1", "resample_time": 0.04}, seed=0)
    try:
        task.reset()
        task.set_commands([0.5, 0.0, 0.2])
        task.set_commands([[0.0, -0.3, 0.0]], env_ids=[1])
        want = torch.tensor([[0.5, 0.0, 0.2], [0.0, -0.3, 0.0], [0.5, 0.0, 0.2]])
        for _ in range(6):  # three resample periods
            task.step(torch.zeros(3, 12))
            assert torch.equal(task.commands, want)
        assert task.tracked_velocity().shape == (3, 3)
        for bad, error, words in (
            ([1.0, 2.0], InvalidArgumentError, "commands: expected shape (3,) or (3, 3), got (2,)"),
            ([[1.0, 2.0, 3.0]] * 2, InvalidArgumentError, "got (2, 3)"),
            ([float("nan"), 0.0, 0.0], InvalidArgumentError, "commands: expected finite values"),
            ("fast", InvalidArgumentError, "commands: expected (3,) or (n, 3) numbers, got str"),
        ):
            with pytest.raises(error, match=None) as e:
                task.set_commands(bad)
            assert words in str(e.value)
        with pytest.raises(EnvIdError, match="env_ids"):
            task.set_commands([0.0, 0.0, 0.0], env_ids=[3])
        assert torch.equal(task.commands, want)
    finally:
        task.close()


def test_tracking_follows_each_env_for_one_episode_at_most(tmp_path) -> None:
    """Held past the episode's time limit, an env is no longer counted (it restarts with commands of its
    own), and the time limit is not a fall: Go1's policy on 0.6 s episodes, held 2 s."""
    from simbackend.training import load_checkpoint
    from simbackend.training.checkpoint import save_checkpoint

    data = dict(load_checkpoint(CHECKPOINT).data)
    data.pop("format", None)
    data["task_config"] = {**data["task_config"], "episode_length": 30}  # 0.6 s at 20 ms
    short = save_checkpoint(tmp_path / "short.pt", data)
    got = policy_tracking(short, "mujoco", 2.0)
    assert all(t.falls == 0 for t in got.values())
    assert all(math.isnan(v) for t in got.values() for v in t.velocity)  # ended before the 1 s settle
