"""The velocity recipe (:mod:`simbackend.tasks.velocity`): survival pays, the command curriculum, the
defaults a robot's description gives, and the trainer's resume and evaluation share."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from simbackend.errors import InvalidArgumentError
from simbackend.tasks import make_task
from simbackend.tasks.velocity import (
    VelocityConfig,
    default_action_scale,
    default_command_range,
)


def _fall(task, env: int) -> None:
    """Put env ``env``'s base on the floor, tipped over: it ends at its next step."""
    b = task.backend
    qpos = b.get_qpos()[env : env + 1].clone()
    qpos[0, 2] = 0.05
    qpos[0, 3:7] = torch.tensor([math.cos(0.8), math.sin(0.8), 0.0, 0.0])  # 92 degrees of roll
    b.set_state([env], qpos, torch.zeros_like(b.get_qvel()[env : env + 1]))


def test_survival_pays_more_than_an_early_end() -> None:
    """With the survival options, a step alive is never worth less than 0 and a fall costs the termination weight: the return of a robot
    that stands (zero actions, moving commands it does not follow) beats that of one that falls at once. With
    the penalties unclipped and no termination cost, standing still is a loss and falling early the way out:
    the failure the recipe exists to prevent."""
    survival = {"only_positive_rewards": True, "reward_weights": {"termination": -1.0}}
    task = make_task("velocity", "mujoco", 2, config={"robot": "go1", "joint_noise": 0.0, **survival}, seed=3)
    try:
        _fall(task, 1)
        first = task.step(torch.zeros(2, 12))
        assert bool(first.terminated[1]) and not bool(first.terminated[0])
        assert float(first.reward[1]) <= -1.0 + 0.06 < 0  # at most one step of the three positive terms
        standing = [float(first.reward[0])]
        for _ in range(30):
            standing.append(float(task.step(torch.zeros(2, 12)).reward[0]))
        assert min(standing) >= 0.0
        assert sum(standing) > float(first.reward[1])
        # the clip term is what was added back: the terms still sum to the reward
        step = task.step(torch.zeros(2, 12))
        total = torch.stack(list(step.info["reward_terms"].values())).sum(0)
        torch.testing.assert_close(total, step.reward)
    finally:
        task.close()


#: the reward weights of 0.9.0, all penalties besides the tracking terms: on them a robot that stands loses
OLD_WEIGHTS = {
    "track_yaw_rate": 0.5,
    "pose": 0.0,
    "action_rate": -0.01,
    "lin_vel_z": -2.0,
    "ang_vel_xy": -0.05,
    "tilt": -1.0,
    "joint_vel": -1e-4,
    "torques": -2e-5,
    "feet_air_time": 1.0,
    "foot_slip": -0.1,
}


def _standing_rewards(config: dict, steps: int = 10) -> list[float]:
    task = make_task("velocity", "mujoco", 1, config={"robot": "go1", "joint_noise": 0.0, **config}, seed=3)
    try:
        return [float(task.step(torch.zeros(1, 12)).reward[0]) for _ in range(steps)]
    finally:
        task.close()


def test_the_default_recipe_pays_a_robot_to_stay_up() -> None:
    """The defaults' survival: the pose term pays each step near the default pose, so a robot that stands
    (zero actions, moving commands it does not follow) earns every step and beats one that falls at once;
    on 0.9.0's weights (penalties only, besides tracking) the same robot collects negative steps, and the
    way out of them is to end the episode."""
    standing = _standing_rewards({}, steps=30)
    assert min(standing) > 0.01 * 0.02  # at least a hundredth of the pose term's full pay per step
    task = make_task("velocity", "mujoco", 2, config={"robot": "go1", "joint_noise": 0.0}, seed=3)
    try:
        _fall(task, 1)
        fell = task.step(torch.zeros(2, 12))
        assert bool(fell.terminated[1]) and not bool(fell.terminated[0])
        assert sum(standing) > 10 * float(fell.reward[1])
        terms = fell.info["reward_terms"]
        assert float(terms["pose"][0]) > 0.9 * 0.02  # the default pose earns nearly all of it
    finally:
        task.close()
    assert min(_standing_rewards({"reward_weights": OLD_WEIGHTS})) < 0.0


def test_the_command_curriculum_starts_small_and_widens_when_tracked() -> None:
    config = {
        "robot": "go1",
        "episode_length": 20,
        "resample_time": 0.4,
        "joint_noise": 0.0,
        "command_curriculum": True,
        "curriculum_start": 0.0,  # standing commands: a standing robot tracks them
        "curriculum_step": 0.5,
        "curriculum_threshold": 0.4,  # settling from the default pose moves the base 0.14 m/s on average
    }
    task = make_task("velocity", "mujoco", 4, config=config, seed=0)
    try:
        assert task.command_level == 1.0  # not training: the full ranges (evaluations)
        task.begin_training()
        assert task.curriculum_state() == {"command_level": 0.0}
        task.reset()
        assert float(task.commands.abs().max()) == 0.0
        for _ in range(20):
            step = task.step(torch.zeros(4, 12))
            done = step.terminated | step.truncated
            if bool(done.any()):
                task.reset(torch.nonzero(done).flatten())
        assert task.command_level == 0.5  # one window of well-tracked episodes: promoted one step
        assert 0.0 < float(task.commands.abs().max())
        lo, hi = (torch.tensor([r[i] for r in task.command_range]) for i in (0, 1))
        assert bool((task.commands >= 0.5 * lo - 1e-6).all() and (task.commands <= 0.5 * hi + 1e-6).all())
        task.load_curriculum_state({"command_level": 1.0})
        assert task.command_level == 1.0
        with pytest.raises(InvalidArgumentError, match="command_level"):
            task.load_curriculum_state({"command_level": 2.0})
    finally:
        task.close()


@pytest.mark.parametrize("start", [1.0 / 3, 0.25])
def test_standing_still_does_not_pass_the_curriculum(start: float) -> None:
    """A standing robot tracks none of its commands: no promotion, on moving commands (a third of 1 m/s) nor on
    the small commands of the first level (a quarter of Go1's ranges, which the summed tracking reward of a
    standing robot passed)."""
    config = {
        "robot": "go1",
        "episode_length": 20,
        "joint_noise": 0.0,
        "command_curriculum": True,
        "curriculum_start": start,
    }
    if start > 0.3:
        config["command_range"] = [[1, 1], [0, 0], [0, 0]]
    task = make_task("velocity", "mujoco", 8, config=config)
    try:
        task.begin_training()
        task.reset()
        for _ in range(20):
            task.step(torch.zeros(8, 12))
        assert task.command_level == pytest.approx(start)
    finally:
        task.close()


def test_defaults_come_from_the_description() -> None:
    # a Froude number of 0.35 on the base's default height, at most 1 m/s
    assert default_command_range(0.2965) == ((-1.0, 1.0), (-0.5, 0.5), (-1.0, 1.0))
    v = round(math.sqrt(0.35 * 9.81 * 0.15), 2)
    assert default_command_range(0.15) == ((-v, v), (-v / 2, v / 2), (-1.0, 1.0))
    assert default_command_range(0.8)[0] == (-1.0, 1.0)
    # effort / kp, at most half the range and 1 rad; 0.5 rad where the effort or the stiffness is unknown
    low = torch.tensor([-0.5, -3.0, -math.inf, -3.0, -3.0])
    high = torch.tensor([0.5, 3.0, math.inf, 3.0, 3.0])
    effort = torch.tensor([20.0, 20.0, 200.0, math.inf, 10.0])
    kp = torch.tensor([10.0, 40.0, 100.0, 20.0, 0.0])
    torch.testing.assert_close(default_action_scale(low, high, effort, kp), torch.tensor([0.5, 0.5, 1.0, 0.5, 0.5]))
    task = make_task("velocity", "mujoco", 1, config={"robot": "go1", "action_scale": None})
    try:
        assert task.command_range == ((-1.0, 1.0), (-0.5, 0.5), (-1.0, 1.0))
        r = task.robot
        # Go1's servos: kp 15.9 / 35.8, effort 23.7 / 35.55 N m (hip, thigh / calf)
        want = torch.minimum(torch.tensor([23.7, 23.7, 35.55] * 4) / task._kp, 0.5 * (r.joint_high - r.joint_low))
        torch.testing.assert_close(task.action_scale, want.clamp(max=1.0))
        assert [round(x, 2) for x in task.action_scale[:3].tolist()] == [0.86, 1.0, 0.97]
    finally:
        task.close()
    task = make_task("velocity", "mujoco", 1, config={"robot": "go1", "action_scale": 0.3})
    try:
        torch.testing.assert_close(task.action_scale, torch.full((12,), 0.3))
    finally:
        task.close()


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"only_positive_rewards": 1}, "config.only_positive_rewards"),
        ({"curriculum_start": 1.5}, r"config.curriculum_start: expected a number in \[0, 1\]"),
        ({"curriculum_step": 0.0}, r"config.curriculum_step: expected a number in \(0, 1\]"),
        ({"curriculum_threshold": float("nan")}, "config.curriculum_threshold"),
        ({"reward_weights": {"tilts": -1.0}}, "unknown terms.*closest known names: 'tilt'"),
        ({"action_scale": -0.1}, "config.action_scale"),
    ],
)
def test_bad_recipe_settings_fail_naming_the_field(changes: dict, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        VelocityConfig(**changes)


def _small(**changes: object) -> dict:
    return {"num_envs": 8, "num_steps_per_env": 8, "max_iterations": 2, "eval_episodes": 2, **changes}


def test_resume_continues_a_run(tmp_path: Path) -> None:
    from simbackend.training import load_checkpoint, train

    first = train("cartpole", "mujoco", train_config=_small(), out_dir=tmp_path / "a", progress=False)
    again = train(
        None, "mujoco", train_config=_small(), out_dir=tmp_path / "b", progress=False, resume=first.checkpoint
    )
    assert again.task == "cartpole" and again.iterations == 4
    assert [row["iteration"] for row in again.rows] == [3, 4]
    assert load_checkpoint(again.checkpoint).iteration == 4
    saved = json.loads((tmp_path / "b" / "config.json").read_text())
    assert saved["resumed_from"] == str(first.checkpoint)

    # the resumed networks start where the first run ended, not afresh: one more iteration moves the actor's
    # weights by Adam's steps (<= 20 x lr), a fresh start of another seed is a different network
    def first_layer(path: Path) -> torch.Tensor:
        actor = torch.load(path, weights_only=True)["actor_state_dict"]
        return next(v for k, v in actor.items() if k.endswith("weight"))

    one = train(
        None, "mujoco", train_config=_small(max_iterations=1), out_dir=tmp_path / "c", progress=False,
        resume=first.checkpoint,
    )  # fmt: skip
    fresh = train("cartpole", "mujoco", seed=7, train_config=_small(max_iterations=1), out_dir=tmp_path / "e",
                  progress=False)  # fmt: skip
    moved = (first_layer(one.checkpoint) - first_layer(first.checkpoint)).abs().max()
    assert float(moved) <= 0.03 < float((first_layer(fresh.checkpoint) - first_layer(first.checkpoint)).abs().max())
    with pytest.raises(InvalidArgumentError, match="resume: the checkpoint trained task 'cartpole'"):
        train("reach", "mujoco", train_config=_small(), out_dir=tmp_path / "d", progress=False, resume=first.checkpoint)


def test_resume_keeps_the_curriculum(tmp_path: Path) -> None:
    from simbackend.training import load_checkpoint, train

    # a threshold of 1 (an error of exactly 0) is never reached: the level moves only by what is loaded
    config = {"robot": "quadruped", "episode_length": 10, "command_curriculum": True, "curriculum_start": 0.5,
              "curriculum_threshold": 1.0}  # fmt: skip
    tc = _small(max_iterations=1)
    first = train("velocity", "mujoco", task_config=config, train_config=tc, out_dir=tmp_path / "a", progress=False)
    assert first.rows[-1]["command_level"] == 0.5
    ckpt = load_checkpoint(first.checkpoint)
    assert ckpt.data["curriculum"] == {"command_level": 0.5}
    data = dict(ckpt.data)
    data["curriculum"] = {"command_level": 0.75}
    torch.save(data, tmp_path / "edited.pt")
    again = train(
        None, "mujoco", train_config=tc, out_dir=tmp_path / "b", progress=False, resume=tmp_path / "edited.pt"
    )
    assert again.rows[0]["command_level"] == 0.75


def test_resume_keeps_each_envs_terrain_level(tmp_path: Path) -> None:
    """A resumed terrain run starts every env on its saved level (the checkpoint's ``terrain_levels``), not
    back on 0..init_level: the resumed Go1 runs of 2026-11-30 fell from a mean level of 1.3-1.6 to 0.5 and took
    100-124 iterations to climb back. Episodes longer than the iteration: the levels move only by what is loaded."""
    from simbackend.training import load_checkpoint, train

    terrain = {"types": ["flat", "slope_down"], "levels": 3, "tile_size": 4.0, "border": 2.0}
    config = {"robot": "go1", "terrain": terrain, "init_level": 0, "episode_length": 1000}
    tc = _small(max_iterations=1)
    first = train("velocity", "mujoco", task_config=config, train_config=tc, out_dir=tmp_path / "a", progress=False)
    assert first.rows[-1]["terrain_level"] == 0.0
    ckpt = load_checkpoint(first.checkpoint)
    assert ckpt.data["curriculum"]["terrain_levels"] == [0] * 8
    data = dict(ckpt.data)
    data["curriculum"] = {**data["curriculum"], "terrain_levels": [2, 1, 2, 1, 2, 1, 2, 1]}
    torch.save(data, tmp_path / "edited.pt")
    again = train(
        None, "mujoco", train_config=tc, out_dir=tmp_path / "b", progress=False, resume=tmp_path / "edited.pt"
    )
    assert again.rows[0]["terrain_level"] == 1.5
    assert load_checkpoint(again.checkpoint).data["curriculum"]["terrain_levels"] == [2, 1, 2, 1, 2, 1, 2, 1]


def test_a_checkpoint_that_does_not_fit_closes_what_the_run_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Resuming with networks of another size fails in one line naming resume, and the task built for the run is
    closed (its backend would otherwise stay open: Ray workers, a GPU scene)."""
    from simbackend.envs.rsl import RslRlVecEnv
    from simbackend.training import train

    first = train("cartpole", "mujoco", train_config=_small(), out_dir=tmp_path / "a", progress=False)
    closed = []
    original = RslRlVecEnv.close

    def close(self: RslRlVecEnv) -> None:
        closed.append(self)
        original(self)

    monkeypatch.setattr(RslRlVecEnv, "close", close)
    wider = _small(actor_hidden_dims=[64, 64])
    with pytest.raises(InvalidArgumentError, match="resume: the checkpoint's networks do not fit"):
        train(None, "mujoco", train_config=wider, out_dir=tmp_path / "b", progress=False, resume=first.checkpoint)
    assert len(closed) == 1


def test_evaluations_keep_to_their_share_of_a_time_budget(tmp_path: Path) -> None:
    from simbackend.training import train

    # share 0: every scheduled evaluation (iterations 1-3) is skipped; the final one still runs
    r = train(
        "cartpole", "mujoco", train_config=_small(max_iterations=3, time_budget_s=1e6, eval_share=0.0),
        out_dir=tmp_path / "a", progress=False,
    )  # fmt: skip
    log = json.loads(r.log_json.read_text())
    assert log["meta"]["skipped_evals"] == 3 and r.final_eval["iteration"] == 3
    assert [row["eval_success"] is not None for row in r.rows] == [False, False, True]
    # without a budget the schedule holds
    r = train("cartpole", "mujoco", train_config=_small(max_iterations=3), out_dir=tmp_path / "b", progress=False)
    assert all(row["eval_success"] is not None for row in r.rows)


def test_unweighted_terms_are_skipped_without_changing_the_weighted_ones() -> None:
    """A term of weight 0 is not computed (the feet are not even read), and the terms that are weighted come
    out the same whether the others are computed or not: the same episodes and actions with the defaults
    and with 0.9.0's terms added give the defaults' terms equal, and the feet terms only in the second."""
    extra = {k: v for k, v in OLD_WEIGHTS.items() if k not in ("track_yaw_rate", "pose", "action_rate")}
    tasks = [
        make_task("velocity", "mujoco", 3, config={"robot": "go1", **cfg}, seed=5)
        for cfg in ({}, {"reward_weights": extra})
    ]
    try:
        g = torch.Generator().manual_seed(0)
        for _ in range(15):
            action = torch.rand(3, 12, generator=g) * 2 - 1
            plain, full = (t.step(action).info["reward_terms"] for t in tasks)
            assert set(plain) == {"track_lin_vel", "track_yaw_rate", "pose", "joint_limits", "action_rate"}
            assert {"feet_air_time", "foot_slip", "torques"} <= set(full)
            for k, v in plain.items():
                torch.testing.assert_close(v, full[k])
        assert not tasks[0]._feet_read and tasks[1]._feet_read
    finally:
        for t in tasks:
            t.close()
