"""Tasks (simbackend.tasks): registry, reproducible resets, step semantics, bad input, the reach
baseline and the quadruped's base-frame observations, on both backends."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from simbackend import make_backend
from simbackend.errors import InputShapeError, InvalidArgumentError, NonFiniteError, UnknownNameError
from simbackend.math import quat_mul
from simbackend.randomization import Distribution, RandomizationPlan, Term
from simbackend.tasks import Task, TaskConfig, available_tasks, get_task_class, make_task, register_task

SIMS = ("mujoco", "sapien")


@pytest.fixture
def closing():
    made = []
    yield made.append
    for t in made:
        t.close()


def task(closing, name, sim="mujoco", n=4, **kw):
    t = make_task(name, sim, n, **kw)
    closing(t)
    return t


def test_registry_lists_the_builtin_tasks_and_hints_unknown_names() -> None:
    assert {"cartpole", "reach", "quadruped"} <= set(available_tasks())
    with pytest.raises(UnknownNameError, match="closest known names: 'cartpole'"):
        get_task_class("cartpol")
    with pytest.raises(InvalidArgumentError, match="taken"):
        register_task(type("Other", (Task,), {"name": "cartpole"}))


@pytest.mark.parametrize("name", ["cartpole", "reach", "quadruped"])
def test_env_starts_depend_on_seed_env_and_episode_only(closing, name: str) -> None:
    """Env i's k-th episode: same start for any num_envs and on every engine; new episodes differ."""
    small = task(closing, name, "mujoco", 2, seed=7)
    big = task(closing, name, "mujoco", 5, seed=7)
    other = task(closing, name, "sapien", 3, seed=7)
    a, b, c = (small.flatten(t.observe()) for t in (small, big, other))
    torch.testing.assert_close(a, b[:2])
    torch.testing.assert_close(a, c[:2], atol=2e-5, rtol=0)
    first = big.backend.get_qpos().clone()
    big.reset([1])  # a second episode of env 1 starts elsewhere; env 0 untouched
    second = big.backend.get_qpos()
    torch.testing.assert_close(second[0], first[0])
    assert not torch.allclose(second[1], first[1])
    assert big.episode_count.tolist() == [1, 2, 1, 1, 1]
    small.reset([1])
    torch.testing.assert_close(small.backend.get_qpos()[1], second[1])
    reseeded = task(closing, name, "mujoco", 2, seed=8)
    assert not torch.allclose(reseeded.backend.get_qpos(), small.backend.get_qpos())


def test_cartpole_falls_with_zero_action_and_truncates_at_the_time_limit(closing) -> None:
    t = task(closing, "cartpole", n=3)
    zero = torch.zeros(3, 1)
    for k in range(200):  # noqa: B007 (k is read after the loop)
        out = t.step(zero)
        if out.terminated.any():
            break
    assert out.terminated.any() and not out.truncated.any()
    env = int(out.terminated.nonzero()[0])
    angle = t.backend.get_dof_pos()[env, 1].abs()
    assert angle > t.config.max_angle
    assert out.reward[env] == 0 and out.info["episode_return"][env] == k  # 1 per step before the fall
    assert out.info["episode_length"][env] == k + 1
    short = task(closing, "cartpole", n=2, config={"episode_length": 3})
    for _ in range(2):
        out = short.step(torch.zeros(2, 1))
        assert not (out.truncated.any() or out.terminated.any())
    out = short.step(torch.zeros(2, 1))
    assert out.truncated.all() and not out.terminated.any() and out.info["success"].all()
    assert out.reward.dtype == torch.float32 and out.terminated.dtype == torch.bool


def test_observation_dict_and_flat_vector_agree(closing) -> None:
    t = task(closing, "quadruped", n=2)
    obs = t.observe()
    assert list(obs) == [
        "base_lin_vel",
        "base_ang_vel",
        "projected_gravity",
        "command",
        "joint_pos",
        "joint_vel",
        "last_action",
    ]
    flat = t.flatten(obs)
    assert flat.shape == (2, t.observation_size) == (2, 48)
    torch.testing.assert_close(flat[:, 9:12], obs["command"])
    torch.testing.assert_close(flat[:, 36:], obs["last_action"])


@pytest.mark.parametrize(
    "bad, error, match",
    [
        (torch.zeros(3, 2), InputShapeError, "action: expected shape"),
        (torch.full((3, 1), float("nan")), NonFiniteError, "action"),
    ],
)
def test_bad_actions_are_rejected_before_anything_steps(closing, bad, error, match) -> None:
    t = task(closing, "cartpole", n=3)
    before = t.backend.get_qpos().clone()
    time_before = t.backend.get_time().clone()
    with pytest.raises(error, match=match):
        t.step(bad)
    torch.testing.assert_close(t.backend.get_qpos(), before)
    torch.testing.assert_close(t.backend.get_time(), time_before)
    assert int(t.episode_step.sum()) == 0


@pytest.mark.parametrize(
    "config, match",
    [
        ({"episode_length": 0}, "config.episode_length"),
        ({"decimation": 1.5}, "config.decimation"),
        ({"max_angle": -1}, "config.max_angle"),
        ({"bogus": 1}, "unknown keys \\['bogus'\\]"),
        ({"randomization": "/no/such/plan.json"}, "no such file"),
    ],
)
def test_bad_configs_name_the_field(config, match) -> None:
    with pytest.raises((InvalidArgumentError, TypeError), match=match):
        get_task_class("cartpole").config_class.from_dict(config)


def test_reach_and_quadruped_configs_validate() -> None:
    with pytest.raises(InvalidArgumentError, match="config.controller"):
        get_task_class("reach").config_class(controller="osc")
    with pytest.raises(InvalidArgumentError, match="config.target_low"):
        get_task_class("reach").config_class(target_low=(1, 0, 1), target_high=(0, 0, 1))
    with pytest.raises(InvalidArgumentError, match="config.command_range"):
        get_task_class("quadruped").config_class(command_range=((1, 0), (0, 0), (0, 0)))


def test_a_randomization_plan_in_the_config_applies_at_init_and_reset(closing) -> None:
    plan = RandomizationPlan(
        (
            Term("body_mass", Distribution.uniform(0.5, 1.5), targets=["pole"], operation="scale", phase="init"),
            Term("joint_damping", Distribution.uniform(2.0, 3.0), targets=["slider"], phase="reset", operation="scale"),
        ),
        seed=3,
    )
    plain = task(closing, "cartpole", n=4)
    randomized = task(closing, "cartpole", n=4, config={"randomization": plan.to_dict()})
    pole = randomized.backend.get_body_ids(["pole"])
    masses = randomized.backend.get_env_body_mass()[:, pole[0]]
    assert masses.unique().numel() == 4 and not torch.allclose(masses, plain.backend.get_env_body_mass()[:, pole[0]])
    damping = randomized.backend.get_env_joint_damping()[:, 0].clone()  # the slider's, model value 0.05
    assert damping.unique().numel() == 4 and ((damping >= 0.1 - 1e-6) & (damping <= 0.15 + 1e-6)).all()
    torch.testing.assert_close(plain.backend.get_env_joint_damping()[:, 0], torch.full((4,), 0.05))
    randomized.reset([2])  # a reset draws again for the envs it names only
    again = randomized.backend.get_env_joint_damping()[:, 0]
    assert again[2] != damping[2] and torch.equal(again[[0, 1, 3]], damping[[0, 1, 3]])
    assert randomized.describe()["config"]["randomization"]["seed"] == 3


# the reach baseline's 1 cm on every backend: contract_tests/test_tasks.py


def test_reach_scripted_baseline_is_not_a_no_op(closing) -> None:
    t = task(closing, "reach", n=2, seed=1)
    start = t.distance().clone()
    for _ in range(10):
        t.step(torch.zeros(2, 3))
    torch.testing.assert_close(t.distance(), start, atol=5e-3, rtol=0)


@pytest.mark.parametrize("sim", SIMS)
def test_quadruped_stands_on_zero_action(closing, sim: str) -> None:
    t = task(closing, "quadruped", sim, n=2, config={"episode_length": 50})
    for _ in range(50):
        out = t.step(torch.zeros(2, 12))
        assert not out.terminated.any()
    assert out.truncated.all()
    assert (t.backend.get_base_pos()[:, 2] > 0.25).all()


def test_quadruped_observations_are_in_the_base_frame(closing) -> None:
    """Turning the whole robot (and its velocity) about z leaves the base-frame observations alone."""
    t = task(closing, "quadruped", n=2)
    b = t.backend
    qpos = b.get_qpos().clone()
    qvel = torch.zeros(2, b.nv)
    qvel[:, :3] = torch.tensor([0.5, -0.2, 0.1])
    qvel[:, 3:6] = torch.tensor([0.1, 0.2, 0.3])
    qpos[1] = qpos[0]
    yaw = 0.9
    turn = torch.tensor([math.cos(yaw / 2), 0, 0, math.sin(yaw / 2)])
    qpos[1, 3:7] = quat_mul(turn, qpos[0, 3:7])
    qvel[1, :3] = (
        torch.tensor([[math.cos(yaw), -math.sin(yaw), 0], [math.sin(yaw), math.cos(yaw), 0], [0, 0, 1]]) @ qvel[0, :3]
    )
    b.set_state(None, qpos, qvel)
    obs = t.observe()
    for term in ("base_lin_vel", "base_ang_vel", "projected_gravity"):
        torch.testing.assert_close(obs[term][0], obs[term][1], atol=1e-5, rtol=0)
    assert not torch.allclose(b.get_base_lin_vel()[0], b.get_base_lin_vel()[1])


def test_a_camera_joins_the_observation_dict_not_the_vector(closing) -> None:
    from simbackend.errors import RenderingError

    try:
        t = task(closing, "cartpole", n=2, config={"camera": "free", "image_size": (32, 24)})
    except RenderingError as e:
        pytest.skip(f"no OpenGL context here: {e}")
    obs = t.observe()
    assert obs["rgb"].shape == (2, 24, 32, 3) and obs["rgb"].dtype == torch.uint8
    assert t.flatten(obs).shape == (2, 4)
    assert int(obs["rgb"].float().std()) > 0


def test_a_task_runs_on_a_backend_the_user_built(closing) -> None:
    b = make_backend("mujoco", "cartpole", 3)
    cls = get_task_class("cartpole")
    t = cls(b, {"episode_length": 5}, seed=2)
    closing(t)
    assert isinstance(t.config, TaskConfig) and t.config.episode_length == 5
    t.close()
    assert not b.closed  # a task over a user's backend leaves it open
    b.close()
    np.testing.assert_array_equal(t.episode_count, [1, 1, 1])
