"""Conformance: time, controls, snapshots and named states.

A snapshot (``get_physics_state``) restored with ``set_physics_state`` and
stepped with the same controls reproduces the trajectory: bit for bit where a
backend declares ``capabilities.snapshot_exact``, within
:data:`INEXACT_BOUND` otherwise (an engine whose contact caches cannot be
serialised); restoring the same snapshot twice always gives the same
trajectory bit for bit. Snapshots of another backend, model or layout are
refused, and bad snapshots change nothing. The named state moves a state
by names.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from simbackend.contract_tests.helpers import DR_MJCF, assert_rows_equal, env_params, to_np
from simbackend.errors import (
    ArgumentTypeError,
    EnvIdError,
    InputDTypeError,
    InputShapeError,
    InvalidArgumentError,
    NonFiniteError,
    SnapshotMismatchError,
    UnknownNameError,
    UnsupportedFeatureError,
    ValueRangeError,
)
from simbackend.randomization import Distribution, RandomizationPlan, Term
from simbackend.snapshot import describe_snapshot
from simbackend.state import NamedState

#: largest |qpos| and |qvel| differences between a restored snapshot's continuation and the
#: original's (40 substeps of the quadruped on its feet, 2 solver iterations) allowed where
#: snapshots are not exact (CPU PhysX: 1.3e-4 and 6.4e-4 measured)
INEXACT_BOUND = (1e-3, 1e-2)


def _ctrls(sim: Any, count: int, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lo, hi = to_np(sim.get_actuator_ctrl_range()).T
    lo, hi = np.where(np.isfinite(lo), lo, -1.0), np.where(np.isfinite(hi), hi, 1.0)
    return [
        torch.as_tensor(
            lo + (hi - lo) * torch.rand(sim.num_envs, sim.num_actuators, generator=g).numpy(), dtype=torch.float32
        )
        for _ in range(count)
    ]


def _run(sim: Any, ctrls: list[torch.Tensor]) -> torch.Tensor:
    for c in ctrls:
        sim.step(c, nsteps=2)
    return torch.cat([sim.get_qpos(), sim.get_qvel()], 1)


def _start(make_sim: Any, model: Any, num_envs: int = 4, **options: Any) -> Any:
    sim = make_sim(model, num_envs, **options)
    if "stand" in sim.keyframe_names:
        sim.set_state(None, sim.get_keyframe_qpos("stand").expand(num_envs, -1))
    return sim


def _everything(sim: Any) -> dict:
    return {
        "qpos": sim.get_qpos().clone(),
        "qvel": sim.get_qvel().clone(),
        "time": sim.get_time().clone(),
        "ctrl": sim.get_ctrl().clone(),
        **env_params(sim),
    }


def _assert_same(before: dict, after: dict) -> None:
    for k, v in before.items():
        got = after[k]
        same = torch.equal(got, v) if isinstance(v, torch.Tensor) else np.array_equal(got, v)
        assert same, f"{k} changed"


# ----------------------------------------------------------------------------
# time and controls
# ----------------------------------------------------------------------------
def test_time_counts_substeps_and_set_state_keeps_it(make_sim: Any) -> None:
    """Clause: get_time() is (N,) float64 seconds, 0 at construction, + nsteps * physics_dt per step;
    set_state leaves it."""
    sim = make_sim("pendulum", 3)
    t = sim.get_time()
    assert t.dtype == torch.float64 and t.shape == (3,) and t.device == sim.device and not t.any()
    ctrl = torch.zeros(3, sim.num_actuators)
    for _ in range(3):
        sim.step(ctrl, nsteps=4)
    np.testing.assert_allclose(to_np(sim.get_time()), 12 * sim.physics_dt, rtol=1e-12)
    sim.set_state([1], sim.get_qpos()[[1]])
    np.testing.assert_allclose(to_np(sim.get_time()), 12 * sim.physics_dt, rtol=1e-12)


def test_diverged_env_keeps_its_time(make_sim: Any, require: Any) -> None:
    """Clause: an env that diverges keeps its pre-call state, and so its time; the others advance."""
    require("body_forces")
    require("divergence_detection")
    sim = make_sim("cartpole", 2)
    sim.set_state(None, np.full((2, 2), 0.1), np.full((2, 2), 0.2))  # the divergence clause's own state
    body = sim.get_body_ids("pole")
    force = torch.zeros(2, 1, 3)
    force[1, 0, 0] = 1e30  # the divergence clause's own blow-up
    sim.apply_body_force(body, force)
    info = sim.step(torch.zeros(2, sim.num_actuators), nsteps=3)
    assert info["diverged"].tolist() == [False, True]
    np.testing.assert_allclose(to_np(sim.get_time()), [3 * sim.physics_dt, 0.0], rtol=1e-12)


def test_ctrl_is_the_last_applied_clamped(make_sim: Any) -> None:
    """Clause: get_ctrl() is (N, nu) float32, zeros before any step, then the controls of the last
    substep clamped to each ctrl range (a pre-step function's output where one is set); a tensor the
    caller edits after step does not change it."""
    sim = make_sim("arm7", 2)
    assert sim.get_ctrl().shape == (2, sim.num_actuators) and sim.get_ctrl().dtype == torch.float32
    assert not sim.get_ctrl().any()
    lo, hi = sim.get_actuator_ctrl_range().T
    ctrl = torch.stack([hi + 10.0, lo - 10.0])
    sim.step(ctrl)
    assert torch.equal(sim.get_ctrl(), torch.stack([hi, lo]).to(sim.device))
    ctrl[:] = 0.0
    assert torch.equal(sim.get_ctrl(), torch.stack([hi, lo]).to(sim.device))
    assert torch.equal(sim.get_ctrl([1]), sim.get_ctrl()[[1]]) and torch.equal(
        sim.get_time([1, 0]), sim.get_time()[[1, 0]]
    )
    sim.set_pre_step_control(lambda s, c: c * 0.0 + lo.to(c.device) * 0.5)
    sim.step(torch.zeros(2, sim.num_actuators))
    assert torch.equal(sim.get_ctrl(), (lo * 0.5).expand(2, -1).to(sim.device))
    with pytest.raises(EnvIdError):
        sim.get_ctrl([2])


# ----------------------------------------------------------------------------
# snapshots
# ----------------------------------------------------------------------------
@pytest.mark.parametrize("model", ["quadruped", "arm7"])
def test_restored_snapshot_reproduces_the_trajectory(make_sim: Any, require: Any, model: str) -> None:
    """Clause: restore + the same controls = the same trajectory (bit for bit where snapshot_exact,
    within INEXACT_BOUND otherwise); restoring the same snapshot twice is bit-identical; the time
    comes back with the state. Two solver iterations, so that a solver's warm start (which a
    snapshot must hold) changes the contacts of the quadruped's feet."""
    require("snapshot_restore")
    sim = _start(make_sim, model, solver_iterations=2)
    ctrls = _ctrls(sim, 40)
    _run(sim, ctrls[:20])
    snap = sim.get_physics_state()
    assert snap.dtype == torch.float64 and snap.shape == (4, sim.snapshot_layout.width)
    time = sim.get_time()
    original = _run(sim, ctrls[20:])
    sim.set_physics_state(None, snap)
    assert torch.equal(sim.get_time(), time)
    first = _run(sim, ctrls[20:])
    sim.set_physics_state(None, snap)
    second = _run(sim, ctrls[20:])
    assert torch.equal(first, second), "restoring one snapshot twice gave two trajectories"
    if sim.capabilities.snapshot_exact:
        assert torch.equal(first, original), f"max difference {(first - original).abs().max().item():.3g}"
    else:
        nq = sim.nq
        assert (first[:, :nq] - original[:, :nq]).abs().max().item() <= INEXACT_BOUND[0]
        assert (first[:, nq:] - original[:, nq:]).abs().max().item() <= INEXACT_BOUND[1]
    assert not torch.equal(original, torch.cat([sim.get_qpos(), sim.get_qvel()], 1) * 0), "nothing moved"


def test_snapshot_row_restores_into_another_env_only(make_sim: Any, require: Any) -> None:
    """Clause: row i goes to env env_ids[i] (any order, a row of another env included); the envs
    not named keep everything bit for bit; the getters describe the restored state at once."""
    require("snapshot_restore")
    sim = _start(make_sim, "quadruped")
    ctrls = _ctrls(sim, 10)
    _run(sim, ctrls)
    snap = sim.get_physics_state([3, 0])
    want_qpos, want_time = sim.get_qpos()[[3, 0]], sim.get_time()[[3, 0]]
    want_body = sim.get_body_pos_w()[[3, 0]]
    _run(sim, ctrls)
    before = _everything(sim)
    sim.set_physics_state([2, 1], snap)
    after = _everything(sim)
    assert torch.equal(after["qpos"][[2, 1]], want_qpos) and torch.equal(after["time"][[2, 1]], want_time)
    got_body = sim.get_body_pos_w()[[2, 1]]
    if sim.capabilities.snapshot_exact:
        assert torch.equal(got_body, want_body)
    else:  # an engine that recomputes link poses from its serialised state: float32 rounding
        np.testing.assert_allclose(to_np(got_body), to_np(want_body), atol=1e-6)
    _assert_same({k: v[[0, 3]] for k, v in before.items()}, {k: v[[0, 3]] for k, v in after.items()})


def test_snapshot_holds_the_randomized_parameters(make_sim: Any, require: Any, tmp_path: Path) -> None:
    """Clause: a snapshot holds the env's per-env parameters (domain randomization) and its default
    pose; restoring it brings them back over values randomized since, in the named envs only."""
    require("snapshot_restore")
    path = tmp_path / "dr.xml"
    path.write_text(DR_MJCF)
    sim = make_sim(path, 3)
    caps = sim.get_dr_capabilities()
    terms = [
        Term(k, Distribution.uniform(0.5, 1.5), targets=t)
        for k, t in (("body_mass", ("cart", "box")), ("actuator_kp", ("servo",)), ("joint_damping", ("hinge",)))
        if "init" in caps.get(k, ())
    ]
    terms += [Term("joint_default_pos", Distribution.uniform(-0.1, 0.1), targets=("slide",))]
    sim.apply_init_randomization(RandomizationPlan(tuple(terms), seed=1))
    sim.step(torch.ones(3, sim.num_actuators), nsteps=3)
    snap = sim.get_physics_state()
    saved = _everything(sim)
    sim.apply_init_randomization(RandomizationPlan(tuple(terms), seed=2))
    sim.step(-torch.ones(3, sim.num_actuators), nsteps=3)
    other = _everything(sim)
    assert any(not np.array_equal(saved[k], other[k]) for k in ("mass", "default_qpos")), "plan 2 changed nothing"
    sim.set_physics_state([1], snap[[1]])
    now = _everything(sim)
    _assert_same({k: v[[1]] for k, v in saved.items()}, {k: v[[1]] for k, v in now.items()})
    _assert_same({k: v[[0, 2]] for k, v in other.items()}, {k: v[[0, 2]] for k, v in now.items()})


def test_snapshot_of_another_model_or_backend_is_refused(make_sim: Any, require: Any) -> None:
    """Clause: rows of another model, another backend, another layout version or no snapshot at all
    raise SnapshotMismatchError (saying how to move states between engines) and change nothing."""
    require("snapshot_restore")
    sim = _start(make_sim, "arm7", 2)
    _run(sim, _ctrls(sim, 3))
    other = make_sim("double_pendulum", 2)
    before = _everything(sim)
    with pytest.raises(SnapshotMismatchError, match="another model"):
        sim.set_physics_state(
            None,
            other.get_physics_state()
            if other.capabilities.snapshot_restore
            else _with_header(sim.get_physics_state(), 3, 12345.0),
        )
    snap = sim.get_physics_state()
    cases = [
        (_with_header(snap, 2, 7.0), "another backend|set_named_state"),
        (_with_header(snap, 1, 99.0), "version 99"),
        (_with_header(snap, 0, 1.0), "not simbackend snapshots"),
        (_with_header(snap, 4, 3.0), "another model"),
    ]
    for bad, match in cases:
        with pytest.raises(SnapshotMismatchError, match=match):
            sim.set_physics_state(None, bad)
    _assert_same(before, _everything(sim))
    head = describe_snapshot(snap)
    assert head.magic_ok and head.fingerprint == sim.info.fingerprint and head.width == snap.shape[1]


def _with_header(snap: torch.Tensor, column: int, value: float) -> torch.Tensor:
    bad = snap.clone()
    bad[:, column] = value
    return bad


def _stepped_snapshot(make_sim: Any, model: str, num_envs: int) -> tuple[Any, torch.Tensor, Any, dict]:
    """A backend stepped a few times, its snapshot, the snapshot's layout and everything it then holds."""
    sim = _start(make_sim, model, num_envs)
    _run(sim, _ctrls(sim, num_envs))
    return sim, sim.get_physics_state(), sim.snapshot_layout, _everything(sim)


def test_bad_snapshots_change_nothing(make_sim: Any, require: Any) -> None:
    """Clause: a snapshot of the wrong width, dtype or row count, with NaN, a negative time or a
    non-positive mass raises the contract's error naming the argument (and the env ids), and nothing
    changes; bad env ids raise EnvIdError."""
    require("snapshot_restore")
    sim, snap, L, before = _stepped_snapshot(make_sim, "quadruped", 3)
    nan = snap.clone()
    nan[2, L.engine.start] = float("nan")
    negative_time = snap.clone()
    negative_time[1, L.time] = -1.0
    massless = snap.clone()
    massless[0, L.fields["body_mass"][0].start + 1] = 0.0
    cases = [
        (None, snap[:, :-1], InputShapeError, "state"),
        (None, snap[:2], InputShapeError, "state"),
        (None, snap.float(), InputDTypeError, "float64"),
        (None, nan, NonFiniteError, r"state.*\[2\]"),
        (None, negative_time, ValueRangeError, r"time.*\[1\]"),
        (None, massless, ValueRangeError, r"mass.*\[0\]"),
        ([0, 0, 1], snap, EnvIdError, "env_ids"),
        ([0, 1, 5], snap, EnvIdError, "env_ids"),
        (None, "snapshot", (InputDTypeError, ArgumentTypeError, InputShapeError), "state"),
    ]
    for ids, state, error, match in cases:
        with pytest.raises(error, match=match):
            sim.set_physics_state(ids, state)
        _assert_same(before, _everything(sim))


def test_snapshot_columns_beyond_their_bounds_change_nothing(make_sim: Any, require: Any) -> None:
    """Clause: a snapshot row whose columns break the bounds the same values have where they come in
    otherwise raises ValueRangeError naming the column and the env id, and nothing changes: a latency that
    is not a whole number of substeps in [0, 1e6] (the action_latency term's; 1e19 once wrapped to a
    negative int64 and the next step never returned), a time a substep would not advance, ctrl, pending
    ctrl and held forces beyond float32, a default qpos beyond the divergence rule's bound. A named state's
    time and ctrl are held to the same bounds. The next step after them runs as before."""
    require("snapshot_restore")
    sim, snap, L, before = _stepped_snapshot(make_sim, "arm7", 2)
    cases = [
        (L.latency, 1e19, "latency"),
        (L.latency, 1e300, "latency"),
        (L.latency, 2e6, "latency"),
        (L.latency, -1.0, "latency"),
        (L.time, 1e300, "time"),
        (L.ctrl, 1e39, "ctrl"),
        (L.pending_ctrl, -1e39, "pending ctrl"),
        (L.default_qpos, 1e11, "default qpos"),
        (L.force, 1e39, "held force"),
    ]
    for cols, value, column in cases:
        bad = snap.clone()
        bad[1, cols] = value
        with pytest.raises(ValueRangeError, match=rf"state \({column}\).*\[1\]"):
            sim.set_physics_state(None, bad)
        _assert_same(before, _everything(sim))
    named = sim.get_named_state()
    first = sim.actuator_names[0]
    late = replace(named, time=torch.tensor([0.0, 1e300], dtype=torch.float64))
    loud = replace(named, actuator_ctrl={**named.actuator_ctrl, first: torch.tensor([0.0, 1e39], dtype=torch.float64)})
    for state, argument in ((late, "state.time"), (loud, "state.actuator_ctrl")):
        with pytest.raises(ValueRangeError, match=rf"{argument}.*\[1\]"):
            sim.set_named_state(None, state)
        _assert_same(before, _everything(sim))
    sim.set_physics_state(None, snap)
    _run(sim, _ctrls(sim, 1))  # returns: nothing of the refused rows was kept


def test_snapshot_absent_raises(make_sim: Any, capabilities: Any) -> None:
    """Clause: a backend that declares snapshot_restore absent raises UnsupportedFeatureError naming it."""
    if capabilities.snapshot_restore:
        pytest.skip("the backend declares snapshot_restore")
    sim = make_sim("pendulum", 1)
    with pytest.raises(UnsupportedFeatureError, match="snapshot_restore"):
        sim.get_physics_state()


# ----------------------------------------------------------------------------
# named states
# ----------------------------------------------------------------------------
def test_named_state_describes_the_envs_by_name(make_sim: Any) -> None:
    """Clause: get_named_state(env_ids) holds every body (but the world) with the body getters' values,
    every joint's qpos/qvel columns and every actuator's last ctrl by name, for the rows asked; env(i)
    is the per-env view."""
    sim = _start(make_sim, "quadruped", 3)
    _run(sim, _ctrls(sim, 5))
    state = sim.get_named_state([2, 0])
    assert state.num_envs == 2 and state.body_names == sim.body_names[1:]
    assert torch.equal(state.body_pos, sim.get_body_pos_w()[[2, 0], 1:])
    assert torch.equal(state.body_quat, sim.get_body_quat_w()[[2, 0], 1:])
    assert torch.equal(state.body_lin_vel, sim.get_body_lin_vel_w()[[2, 0], 1:])
    assert torch.equal(state.body_ang_vel, sim.get_body_ang_vel_w()[[2, 0], 1:])
    qpos, qvel = sim.get_qpos()[[2, 0]], sim.get_qvel()[[2, 0]]
    for j in sim.joint_names:
        assert torch.equal(state.joint_pos[j], qpos[:, sim.get_joint_qpos_indices(j)])
        assert torch.equal(state.joint_vel[j], qvel[:, sim.get_joint_qvel_indices(j)])
    for k, a in enumerate(sim.actuator_names):
        assert torch.equal(state.actuator_ctrl[a], sim.get_ctrl()[[2, 0], k])
    one = state.env(1)
    assert torch.equal(one["bodies"][sim.body_names[1]]["pos"], sim.get_body_pos_w()[0, 1])
    assert torch.equal(
        one["joints"][sim.joint_names[0]]["pos"], qpos[1, sim.get_joint_qpos_indices(sim.joint_names[0])]
    )


def test_named_state_moves_between_backends_of_one_model(make_sim: Any, tmp_path: Path) -> None:
    """Clause: a named state (through to_dict/from_dict) imported into another backend instance of the
    same model gives the same qpos, qvel, time, ctrl and per-env parameters, in the rows named (the
    parameters bit for bit on one engine, to 1e-4 between the engines of a mixed backend)."""
    path = tmp_path / "dr.xml"
    path.write_text(DR_MJCF)
    src = make_sim(path, 3)
    if "init" in src.get_dr_capabilities().get("body_mass", ()):
        src.apply_init_randomization(RandomizationPlan((Term("body_mass", Distribution.uniform(0.5, 2.0)),), seed=4))
    src.step(torch.ones(3, src.num_actuators) * 0.3, nsteps=5)
    state = NamedState.from_dict(src.get_named_state([0, 2]).to_dict())
    dst = make_sim(path, 4)
    dst.set_named_state([3, 1], state)
    np.testing.assert_allclose(to_np(dst.get_qpos()[[3, 1]]), to_np(src.get_qpos()[[0, 2]]), atol=1e-6)
    np.testing.assert_allclose(to_np(dst.get_qvel()[[3, 1]]), to_np(src.get_qvel()[[0, 2]]), atol=1e-5)
    assert torch.equal(dst.get_time()[[3, 1]], src.get_time()[[0, 2]])
    assert torch.equal(dst.get_ctrl()[[3, 1]], src.get_ctrl()[[0, 2]])
    assert_rows_equal(dst.get_env_body_mass(), [3, 1], dst, src.get_env_body_mass(), [0, 2], src)
    assert not dst.get_time()[[0, 2]].any(), "envs not named moved"


def test_named_state_of_another_model_is_refused(make_sim: Any) -> None:
    """Clause: a named state naming joints the model lacks, lacking some, with wrong widths or the wrong
    row count raises (UnknownNameError, InvalidArgumentError, InputShapeError) and nothing changes."""
    sim = _start(make_sim, "arm7", 2)
    before = _everything(sim)
    other = make_sim("double_pendulum", 2).get_named_state()
    mine = sim.get_named_state()
    fewer = mine.to_dict()
    del fewer["joint_pos"][sim.joint_names[0]], fewer["joint_vel"][sim.joint_names[0]]
    wide = mine.to_dict()
    wide["joint_pos"][sim.joint_names[0]] = np.zeros((2, 3), np.float32)
    cases = [
        (other, UnknownNameError),
        (NamedState.from_dict(fewer), InvalidArgumentError),
        (NamedState.from_dict(wide), InputShapeError),
        (mine.rows([0]), InputShapeError),
        ({"joint_pos": {}}, ArgumentTypeError),
    ]
    for state, error in cases:
        with pytest.raises(error):
            sim.set_named_state(None, state)
        _assert_same(before, _everything(sim))
