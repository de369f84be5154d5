"""Action latency's engine calls and the velocity task's observation noise (issue 40 part 1b)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from simbackend import make_backend
from simbackend.errors import InvalidArgumentError
from simbackend.randomization import Distribution, RandomizationPlan, Term
from simbackend.tasks import make_task
from simbackend.tasks.velocity import OBS_NOISE


def _count_engine_steps(sim: Any) -> list[int]:
    calls: list[int] = []
    engine = sim.engine
    inner = engine.step

    def counted(ctrl: Any, nsteps: int, forces: Any = None) -> Any:
        calls.append(nsteps)
        return inner(ctrl, nsteps, forces)

    engine.step = counted
    return calls


def test_latency_splits_a_step_at_the_distinct_latencies_only() -> None:
    sim = make_backend("mujoco", "cartpole", 4)
    calls = _count_engine_steps(sim)
    ctrl = torch.full((4, 1), 0.3)
    sim.step(ctrl, 4)
    assert calls == [4]  # no latency: one engine call
    plan = RandomizationPlan((Term("action_latency", Distribution.uniform(0.0, 0.0)),))
    sim.apply_init_randomization(plan)
    calls.clear()
    sim.step(ctrl, 4)
    assert calls == [4]  # every latency 0: still one call
    for i, lat in enumerate([0, 2, 2, 9]):
        p = RandomizationPlan((Term("action_latency", Distribution.fixed(lat), phase="reset"),))
        sim.set_state([i], sim.get_qpos()[[i]], sim.get_qvel()[[i]], randomization=p)
    calls.clear()
    sim.step(ctrl, 4)
    assert calls == [2, 2]  # parts at the distinct capped latencies {0, 2, 4}
    sim.close()


def test_latency_gives_a_pre_step_function_the_delayed_command() -> None:
    sim = make_backend("mujoco", "cartpole", 2)
    sim.step(torch.full((2, 1), 0.1), 1)
    p = RandomizationPlan((Term("action_latency", Distribution.fixed(2), phase="reset"),))
    sim.set_state([1], sim.get_qpos()[[1]], sim.get_qvel()[[1]], randomization=p)
    seen: list[torch.Tensor] = []

    def fn(backend: Any, ctrl: torch.Tensor) -> torch.Tensor:
        seen.append(ctrl.clone())
        return ctrl

    sim.set_pre_step_control(fn)
    sim.step(torch.full((2, 1), 0.5), 3)
    got = torch.stack(seen)[:, :, 0]
    np.testing.assert_allclose(got[:, 0].numpy(), [0.5, 0.5, 0.5])
    np.testing.assert_allclose(got[:, 1].numpy(), [0.1, 0.1, 0.5])
    sim.close()


def test_strength_takes_scale_only_and_composes_with_kp() -> None:
    with pytest.raises(InvalidArgumentError, match="operation"):
        Term("actuator_strength", Distribution.fixed(2.0), operation="set")
    sim = make_backend("mujoco", "arm7", 2)
    plan = RandomizationPlan(
        (
            Term("actuator_strength", Distribution.fixed(0.5)),
            Term("actuator_kp", Distribution.fixed(2.0), operation="scale"),
        )
    )
    sim.apply_init_randomization(plan)
    model_kp = sim.info.actuator_kp
    # the gains read back are the kp/kv terms' (tuning); the engine applies them times the strength
    np.testing.assert_allclose(sim.get_env_actuator_gains().kp.numpy()[0], 2.0 * model_kp, rtol=1e-6)
    gain = sim.engine.batch.expanded("actuator_gainprm")[:, :, 0]
    np.testing.assert_allclose(gain[0], 2.0 * 0.5 * model_kp, rtol=1e-6)
    sim.apply_init_randomization(plan)  # again: from the model's values, never compounding
    gain = sim.engine.batch.expanded("actuator_gainprm")[:, :, 0]
    np.testing.assert_allclose(gain[1], 2.0 * 0.5 * model_kp, rtol=1e-6)
    sim.close()


def _observations(noise: float, train: bool, steps: int = 4) -> list[dict[str, torch.Tensor]]:
    task = make_task("quadruped", "mujoco", 4, config={"obs_noise": noise}, seed=3)
    if train:
        task.begin_training()
    task.reset()
    out = []
    for _ in range(steps):
        task.step(torch.zeros(4, task._action_dim()))
        out.append(task.observe())
    task.close()
    return out


def test_obs_noise_zero_or_evaluating_is_the_clean_observation_and_one_is_bounded() -> None:
    clean = _observations(0.0, True)
    evaluating = _observations(1.0, False)  # not training: evaluations observe without noise
    noisy = _observations(1.0, True)
    for a, b in zip(clean, evaluating):
        for k in a:
            assert torch.equal(a[k], b[k]), k
    for k in clean[0]:
        diffs = torch.stack([n[k] - c[k] for n, c in zip(noisy, clean)])
        if k not in OBS_NOISE:
            assert torch.equal(diffs, torch.zeros_like(diffs)), k
            continue
        bound = OBS_NOISE[k]
        assert float(diffs.abs().max()) <= bound * (1 + 1e-5) + 1e-6, k
        assert float(diffs.abs().max()) > 0.3 * bound, f"{k}: noise far below its bound"
        assert float(diffs.std()) > 0.1 * bound, f"{k}: constant noise"
    with pytest.raises(InvalidArgumentError, match="obs_noise"):
        make_task("quadruped", "mujoco", 1, config={"obs_noise": -1.0})
