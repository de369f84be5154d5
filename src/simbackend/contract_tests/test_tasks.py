"""Tasks and controllers run unchanged on any backend: the layers the engine swap exists for.

They talk only to the contract, so what they need from a backend is the contract's
meaning: ``set_state`` rows, site Jacobians, servos that track their targets.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from simbackend.contract_tests.helpers import to_np
from simbackend.controllers import EEPoseConfig, make_controller
from simbackend.math import quat_angle_between, quat_apply_inverse
from simbackend.randomization import uniforms
from simbackend.tasks import get_task_class

ARM = [f"joint{i}" for i in range(1, 8)]


def test_task_episode_starts_are_their_draws(make_sim: Callable[..., Any]) -> None:
    """Clause: tasks — a task's episode starts are written through set_state exactly: env i's start depends only on (seed, i, episode), so every backend and every num_envs starts the same episodes."""
    cls = get_task_class("cartpole")
    small = cls(make_sim("cartpole", 2), seed=5)
    big = cls(make_sim("cartpole", 4), seed=5)
    u = uniforms(5, small.reset_key, np.arange(4), np.zeros(4, np.int64), cls.reset_draws)
    expected = small.config.init_noise * (2 * u - 1)
    np.testing.assert_allclose(to_np(big.backend.get_qpos()), expected[:, :2], atol=1e-6, rtol=0)
    np.testing.assert_allclose(to_np(big.backend.get_qvel()), expected[:, 2:], atol=1e-6, rtol=0)
    np.testing.assert_array_equal(to_np(small.flatten(small.observe())), to_np(big.flatten(big.observe()))[:2])


def test_reach_baseline_gets_within_1cm(make_sim: Callable[..., Any], require: Callable[..., None]) -> None:
    """Clause: tasks — the reach task's scripted baseline (operational-space control by damped least squares on get_site_jacobian_w, position servos) brings arm7's end-effector site within 1 cm of every env's target."""
    require("site_jacobians")
    from simbackend.tasks.reach import scripted_action

    task = get_task_class("reach")(make_sim("arm7", 3), seed=1)
    assert (task.distance() > 0.1).all()
    for _ in range(50):
        out = task.step(scripted_action(task))
    final = to_np(task.distance())
    assert (final < 0.01).all(), f"final distances {final.tolist()} m"
    assert bool(out.info["success"].all())


def test_ee_delta_pose_moves_the_site_by_the_delta(make_sim: Callable[..., Any], require: Callable[..., None]) -> None:
    """Clause: controllers — an end-effector delta pose (root-frame translation, root-aligned rotation) moves arm7's site by the commanded translation and rotation once the servos settle."""
    require("site_jacobians")
    sim = make_sim("arm7", 2)
    sim.set_state(None, sim.get_keyframe_qpos("home").expand(2, -1))
    ee = make_controller(
        sim,
        EEPoseConfig(
            joints=ARM,
            site="ee_site",
            pos_low=-0.05,
            pos_high=0.05,
            rot_bound=0.2,
            normalize_action=False,
            use_target=True,
        ),
    )
    ids = sim.get_site_ids(["ee_site"])
    base = sim.get_body_ids(["base"])
    p0, q0 = sim.get_site_pos_w(ids)[:, 0].clone(), sim.get_site_quat_w(ids)[:, 0].clone()
    delta = torch.tensor([[0.02, -0.01, 0.015, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.1, 0.0]])
    ee.apply(delta, nsteps=20)
    for _ in range(15):
        ee.apply(torch.zeros(2, 6), nsteps=20)
    moved = quat_apply_inverse(sim.get_body_quat_w(base)[:, 0], sim.get_site_pos_w(ids)[:, 0] - p0)
    np.testing.assert_allclose(to_np(moved[0]), [0.02, -0.01, 0.015], atol=3e-3, rtol=0)
    np.testing.assert_allclose(to_np(moved[1]), [0.0, 0.0, 0.0], atol=3e-3, rtol=0)
    turned = to_np(quat_angle_between(q0, sim.get_site_quat_w(ids)[:, 0]))
    assert abs(turned[1] - 0.1) < 5e-3 and turned[0] < 5e-3, f"rotations {turned.tolist()} rad"
