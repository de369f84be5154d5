"""Control: the pre-step control callback and the meaning of ctrl across substeps."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from simbackend.contract_tests.helpers import random_qpos, to_np
from simbackend.errors import ArgumentTypeError, InputShapeError, NonFiniteError

KP, KD = 8.0, 0.6


def _start(sim: Any, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    sim.set_state(None, random_qpos(sim, rng), rng.uniform(-0.5, 0.5, size=(sim.num_envs, sim.nv)))


def _pd(backend: Any, target: torch.Tensor) -> torch.Tensor:
    """A PD law on motors: torque from the target and the backend's current dof state."""
    return KP * (target - backend.get_dof_pos()) - KD * backend.get_dof_vel()


def test_pre_step_control_called_before_every_substep(
    make_sim: Callable[..., Any], require: Callable[..., None]
) -> None:
    """Clause: set_pre_step_control — fn(backend, ctrl) runs once before each substep, with the backend itself and step's ctrl as an (N, nu) float32 tensor on backend.device."""
    require("pre_step_control")
    sim = make_sim("double_pendulum", 3)
    _start(sim)
    calls: list[tuple[Any, torch.Tensor]] = []

    def fn(backend: Any, ctrl: torch.Tensor) -> torch.Tensor:
        calls.append((backend, ctrl.clone()))
        return ctrl

    sim.set_pre_step_control(fn)
    given = np.full((3, sim.num_actuators), 0.25)
    sim.step(given, nsteps=4)
    assert len(calls) == 4
    for backend, ctrl in calls:
        assert backend is sim
        assert isinstance(ctrl, torch.Tensor) and ctrl.dtype == torch.float32 and ctrl.device == sim.device
        assert tuple(ctrl.shape) == (3, sim.num_actuators)
        np.testing.assert_allclose(to_np(ctrl), given, rtol=0, atol=0)
    sim.step(given, nsteps=2)
    assert len(calls) == 6
    sim.set_pre_step_control(None)
    sim.step(given, nsteps=3)
    assert len(calls) == 6, "set_pre_step_control(None) must remove the callback"


def test_pre_step_control_sees_each_substeps_state_and_its_output_is_applied(
    make_sim: Callable[..., Any], require: Callable[..., None]
) -> None:
    """Clause: set_pre_step_control — getters inside fn describe the current substep, and fn's return value is the ctrl of that substep: a PD callback with nsteps=k equals k single substeps with the PD torque computed by hand."""
    require("pre_step_control")
    k = 5
    a, b = make_sim("double_pendulum", 3), make_sim("double_pendulum", 3)
    _start(a, 1)
    _start(b, 1)
    target = torch.tensor([[0.3, -0.2], [0.0, 0.5], [-0.4, 0.1]])
    seen: list[np.ndarray] = []

    def fn(backend: Any, ctrl: torch.Tensor) -> torch.Tensor:
        seen.append(to_np(backend.get_dof_pos()))
        return _pd(backend, ctrl)

    a.set_pre_step_control(fn)
    a.step(target, nsteps=k)
    manual = []
    for _ in range(k):
        manual.append(to_np(b.get_dof_pos()))
        b.step(_pd(b, target), nsteps=1)
    assert len(seen) == k
    for i, (x, y) in enumerate(zip(seen, manual)):
        np.testing.assert_allclose(x, y, rtol=0, atol=1e-6, err_msg=f"state seen by the callback at substep {i}")
    np.testing.assert_allclose(to_np(a.get_qpos()), to_np(b.get_qpos()), rtol=0, atol=1e-6)
    np.testing.assert_allclose(to_np(a.get_qvel()), to_np(b.get_qvel()), rtol=0, atol=1e-5)
    assert not np.allclose(seen[0], seen[-1]), "the pendulum should have moved between substeps"


@pytest.mark.parametrize("bad", ["shape", "nan"])
def test_bad_callback_output_at_first_substep_changes_nothing(
    make_sim: Callable[..., Any], require: Callable[..., None], bad: str
) -> None:
    """Clause: set_pre_step_control / errors — a callback output of the wrong shape or with NaN raises the contract's error and, at the first substep, leaves every env as it was."""
    require("pre_step_control")
    sim = make_sim("double_pendulum", 3)
    _start(sim, 2)
    before = (to_np(sim.get_qpos()), to_np(sim.get_qvel()), to_np(sim.get_body_pos_w()))

    def fn(backend: Any, ctrl: torch.Tensor) -> torch.Tensor:
        if bad == "shape":
            return ctrl[:, :1]
        out = ctrl.clone()
        out[1, 0] = float("nan")
        return out

    sim.set_pre_step_control(fn)
    with pytest.raises(InputShapeError if bad == "shape" else NonFiniteError) as err:
        sim.step(np.zeros((3, sim.num_actuators)), nsteps=3)
    assert "pre-step control" in str(err.value)
    if bad == "nan":
        assert err.value.env_ids == (1,)
    after = (to_np(sim.get_qpos()), to_np(sim.get_qvel()), to_np(sim.get_body_pos_w()))
    for x, y in zip(before, after):
        np.testing.assert_array_equal(x, y)


def test_pre_step_control_must_be_callable(make_sim: Callable[..., Any], require: Callable[..., None]) -> None:
    """Clause: set_pre_step_control — a non-callable raises ArgumentTypeError (a TypeError); None removes the callback."""
    require("pre_step_control")
    sim = make_sim("pendulum", 1)
    with pytest.raises(ArgumentTypeError):
        sim.set_pre_step_control(3)
    sim.set_pre_step_control(None)
