"""Conformance: deferred checks (``deferred_checks=True``, every GPU backend's way).

A backend with deferred checks finds bad input values on the device and raises
them at its next call; the envs whose rows were refused are left as they were.
"As they were" means everything a getter reads for that env: its controls, time,
qpos and qvel, frames, sensors, Jacobians, per-env parameters, snapshot row
(actuator activations and solver warm starts included) and contact reading, and
the env goes on as if the refused call had not happened. The other envs' rows
take effect. ``close`` raises an error still pending, after releasing everything.

Compared bit for bit, but for the frames of an engine without exact snapshots
(PhysX renormalises a restored free body's quaternion, by up to 1.2e-7).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from simbackend.contract_tests.helpers import to_np
from simbackend.contract_tests.test_state import env_getters
from simbackend.errors import BackendClosedError, InvalidQuaternionError, NonFiniteError, SimBackendError
from simbackend.state import NamedState

N = 4
#: what a revert restores exactly on every engine (the front end's own rows, the engine's saved state)
EXACT_KEYS = ("ctrl", "time", "physics_state", "contact_force", "contact_mask")
#: frames of an engine without exact snapshots: float32 rounding of a restored state
INEXACT_ATOL = 1e-6


def _sim(make_sim: Callable[..., Any], capabilities: Any, **options: Any) -> Any:
    """The quadruped (actuators, a free base, feet on the floor, sensors) with deferred checks, moved
    away from its start with different controls per env, contact sensing where the engine has it."""
    if capabilities.contact_forces:
        options["contact_sensing"] = True
    sim = make_sim("quadruped", N, deferred_checks=True, **options)
    for k in range(4):
        sim.step(_ctrl(sim, k), 25)  # on its feet: the contact readings are not zero
    if sim.contact_sensing:
        assert (sim.get_body_contact_force_w().abs().sum(dim=(1, 2)) > 1.0).all()
    return sim


def _ctrl(sim: Any, seed: int) -> torch.Tensor:
    """``(N, nu)`` small controls (the quadruped stays on its feet), a different row per env."""
    lo, hi = to_np(sim.get_actuator_ctrl_range()).T
    u = np.random.default_rng(seed).uniform(-0.1, 0.1, size=(sim.num_envs, sim.num_actuators))
    return torch.as_tensor(np.clip(u, lo, hi), dtype=torch.float32)


def everything(sim: Any) -> dict[str, torch.Tensor]:
    """Every per-env reading of ``sim`` (``(N, ...)`` host copies), by name."""
    out = {k: f().detach().cpu().clone() for k, f in env_getters(sim, sim.capabilities).items()}
    out["ctrl"] = sim.get_ctrl().cpu().clone()
    out["time"] = sim.get_time().cpu().clone()
    if sim.capabilities.snapshot_restore:
        out["physics_state"] = sim.get_physics_state().cpu().clone()
    if sim.contact_sensing:
        out["contact_force"] = sim.get_body_contact_force_w().cpu().clone()
        out["contact_mask"] = sim.get_body_contact_mask(threshold=0.5).cpu().clone()
    return out


def assert_kept(sim: Any, before: dict[str, torch.Tensor], after: dict[str, torch.Tensor], envs: list[int]) -> None:
    """Envs ``envs`` read what they read ``before``."""
    exact = sim.capabilities.snapshot_exact
    for key, was in before.items():
        now = after[key]
        if exact or key in EXACT_KEYS:
            same = torch.equal(was[envs], now[envs])
        else:
            same = torch.allclose(was[envs], now[envs], rtol=0.0, atol=INEXACT_ATOL)
        assert same, f"{key} of refused envs {envs} changed: {was[envs].flatten()[:6]} -> {now[envs].flatten()[:6]}"


def assert_moved_on(sim: Any, before: dict[str, torch.Tensor], after: dict[str, torch.Tensor], envs: list[int]) -> None:
    """Envs ``envs`` took their step (their time advanced)."""
    assert (after["time"][envs] > before["time"][envs]).all(), f"envs {envs} did not step"


# ----------------------------------------------------------------------------
# step
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("nsteps", [1, 3])
@pytest.mark.parametrize("bad", ["nan", "mixed"])
def test_refused_ctrl_row_leaves_that_env_as_it_was(
    make_sim: Callable[..., Any], capabilities: Any, nsteps: int, bad: str
) -> None:
    """Clause: deferred checks — step with a NaN (or inf, or too large) row keeps that env's every reading
    (ctrl, time, state, frames, sensors, snapshot row, contact reading), steps the others with their rows,
    raises at the next call naming the env, and the env goes on as if the call had not happened."""
    sims = [_sim(make_sim, capabilities) for _ in range(2)]
    sim, twin = sims
    ctrl = _ctrl(sim, 7).double()
    refused = [1]
    ctrl[1, 0] = float("nan")
    if bad == "mixed":  # a NaN, an inf and a value too large for float32, in three envs
        ctrl[2, -1] = float("inf")
        ctrl[3, 0] = 1e300
        refused = [1, 2, 3]
    before = everything(sim)
    sim.step(ctrl, nsteps)
    after = everything(sim)
    assert_kept(sim, before, after, refused)
    assert_moved_on(sim, before, after, [0])
    assert torch.equal(after["ctrl"][0], ctrl[0].float()), "the good row's controls were not applied"
    with pytest.raises(NonFiniteError, match=r"ctrl.*env ids \[1") as info:
        sim.synchronize()
    assert "\n" not in str(info.value)
    assert_kept(sim, before, everything(sim), refused)
    # and the refused envs go on as a twin that never saw the refused call
    for s in sims:
        s.step(_ctrl(s, 8), 2)
    if capabilities.snapshot_exact:
        assert_kept(sim, everything(twin), everything(sim), refused)


@pytest.mark.parametrize("at", [1, 2])
def test_refused_pre_step_output_row_holds_that_env(
    make_sim: Callable[..., Any], capabilities: Any, require: Callable[..., None], at: int
) -> None:
    """Clause: deferred checks — a pre-step control function whose output has a NaN row at substep ``at``
    of 3: that env keeps its every reading from before that substep (as a diverged env does) and is held
    for the rest of the call; the others take every substep; the next call raises naming the env."""
    require("pre_step_control")
    sim = _sim(make_sim, capabilities)
    calls = []

    def fn(backend: Any, ctrl: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        if len(calls) == at + 1:  # the state from before the refused substep
            mid.update(everything(backend))
        out = ctrl.clone()
        if len(calls) == at:
            out[2] = float("nan")
        return out

    before, mid = everything(sim), {}
    sim.set_pre_step_control(fn)
    sim.step(_ctrl(sim, 9), 3)
    after = everything(sim)
    assert_kept(sim, before if at == 1 else mid, after, [2])
    assert_moved_on(sim, before, after, [0, 1, 3])
    dt = sim.physics_dt
    np.testing.assert_allclose(to_np(after["time"] - before["time"]), [3 * dt, 3 * dt, (at - 1) * dt, 3 * dt])
    with pytest.raises(NonFiniteError, match=r"pre-step control output.*\[2\]"):
        sim.synchronize()


def test_refused_force_row_adds_nothing(
    make_sim: Callable[..., Any], capabilities: Any, require: Callable[..., None]
) -> None:
    """Clause: deferred checks — apply_body_force with a NaN row adds nothing to that env (its next step is
    its step without the force); the other rows' forces act; the next call raises naming the env."""
    require("body_forces")
    sim, twin = _sim(make_sim, capabilities), _sim(make_sim, capabilities)
    torso = sim.get_body_ids("torso")
    force = torch.zeros((N, 1, 3), dtype=torch.float64)
    force[:, 0, 2] = 40.0
    force[1, 0, 0] = float("nan")
    sim.apply_body_force(torso, force)
    with pytest.raises(NonFiniteError, match=r"force.*\[1\]"):
        sim.step(_ctrl(sim, 10), 2)  # the error is raised before the call does anything
    ctrl = _ctrl(sim, 11)
    for s in (sim, twin):
        s.step(ctrl, 2)
    a, b = everything(sim), everything(twin)
    assert_kept(sim, b, a, [1])
    assert not torch.equal(a["qpos"][0], b["qpos"][0]), "the good rows' force did not act"


# ----------------------------------------------------------------------------
# set_state
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["ids", "mask"])
def test_refused_set_state_row_leaves_that_env_as_it_was(
    make_sim: Callable[..., Any], capabilities: Any, form: str
) -> None:
    """Clause: deferred checks — set_state with a NaN row and a zero-quaternion row (ids form and mask form
    alike) writes the good rows and keeps the refused envs' every reading, contact reading and snapshot
    row (warm starts) included; the next call raises naming them."""
    sim = _sim(make_sim, capabilities)
    q, v = sim.get_qpos().double().clone(), sim.get_qvel().double().clone()
    q[:, 2] += 0.05
    q[1, 0] = float("nan")
    quat = int(sim.info.quat_qpos_index[0])
    q[3, quat : quat + 4] = 0.0
    before = everything(sim)
    if form == "ids":
        sim.set_state([3, 0, 1], q[[3, 0, 1]], v[[3, 0, 1]])
    else:
        mask = torch.tensor([True, True, False, True], device=sim.device)
        sim.set_state(mask, q, v)
    after = everything(sim)
    assert_kept(sim, before, after, [1, 2, 3])
    np.testing.assert_allclose(to_np(after["qpos"][0]), to_np(q[0]), atol=1e-6)
    with pytest.raises((NonFiniteError, InvalidQuaternionError), match=r"qpos"):
        sim.synchronize()
    assert_kept(sim, before, everything(sim), [1, 2, 3])


# ----------------------------------------------------------------------------
# snapshots and named states: host rows, checked at once
# ----------------------------------------------------------------------------


def test_refused_snapshot_and_named_state_rows_raise_at_once(make_sim: Callable[..., Any], capabilities: Any) -> None:
    """Clause: deferred checks — set_physics_state with a row the divergence rule would flag, and
    set_named_state with a NaN joint position, raise at once (their rows are on the host) and write
    nothing: not the state, not the time, not the controls, in no env named."""
    sim = _sim(make_sim, capabilities)
    before = everything(sim)
    named = sim.get_named_state([2, 1]).to_dict()
    joint = next(j for j in sim.joint_names if np.asarray(named["joint_pos"][j]).shape[-1] == 1)
    named["joint_pos"][joint] = np.array(named["joint_pos"][joint], dtype=np.float64)
    named["joint_pos"][joint][1] = float("nan")
    named["time"] = np.asarray(named["time"]) + 5.0
    with pytest.raises(NonFiniteError, match=r"state.*\[1\]"):
        sim.set_named_state([2, 1], NamedState.from_dict(named))
    assert_kept(sim, before, everything(sim), list(range(N)))
    sim.synchronize()  # nothing pending: it was raised
    if not capabilities.snapshot_restore:
        return
    # a snapshot whose base x position is beyond the divergence rule's bound: find its column by a marker
    q = sim.get_qpos().double().clone()
    q[3, 0] = 12.375
    sim.set_state([3], q[3:4], sim.get_qvel()[3:4])
    before = everything(sim)
    rows = sim.get_physics_state([0, 3])
    col = int(torch.nonzero(rows[1] == 12.375).flatten()[-1])
    rows[1, col] = 1e11
    rows[:, sim.snapshot_layout.time] += 1.0
    with pytest.raises(SimBackendError, match=r"state.*\[3\]"):
        sim.set_physics_state([0, 3], rows)
    assert_kept(sim, before, everything(sim), list(range(N)))
    sim.synchronize()


# ----------------------------------------------------------------------------
# close
# ----------------------------------------------------------------------------


def test_close_raises_the_error_still_pending(make_sim: Callable[..., Any], capabilities: Any) -> None:
    """Clause: deferred checks — close with an input error not raised yet releases the backend and then
    raises the error (as a file's close raises its last flush's); a second close does nothing. Leaving a
    with block by another exception, that exception goes on with the pending error as a note."""
    sim = _sim(make_sim, capabilities)
    ctrl = _ctrl(sim, 12)
    ctrl[2] = float("nan")
    sim.step(ctrl)
    with pytest.raises(NonFiniteError, match=r"ctrl.*\[2\]"):
        sim.close()
    assert sim.closed
    sim.close()
    with pytest.raises(BackendClosedError):
        sim.get_qpos()
    # a clean exit from a with block raises it too
    other = make_sim("pendulum", 2, deferred_checks=True)
    with pytest.raises(NonFiniteError, match="ctrl"):
        with other:
            other.step(torch.tensor([[0.1], [float("nan")]]))
    assert other.closed
    # another exception leaving the block wins; the pending error is noted on it
    third = make_sim("pendulum", 2, deferred_checks=True)
    with pytest.raises(KeyError, match="boom") as info:
        with third:
            third.step(torch.tensor([[float("nan")], [0.1]]))
            raise KeyError("boom")
    assert third.closed
    notes = getattr(info.value, "__notes__", [])
    assert any("NonFiniteError" in n and "ctrl" in n for n in notes), notes
    assert not isinstance(info.value, SimBackendError)
