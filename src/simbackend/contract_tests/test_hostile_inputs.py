"""Conformance: hostile inputs, callbacks that misbehave, interrupted and closed backends.

Every backend inherits these: dtypes and devices that hold no readable data,
broadcasting bait, strided and gradient-carrying tensors, values too large for
float32, construction arguments of the wrong type, pre-step functions that
raise, re-enter or close the backend, Ctrl-C in the middle of a long step, and
use after close. Each bad call raises a ``SimBackendError`` naming the
argument and leaves every env as it was.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from simbackend.contract_tests.helpers import CpuStopwatch, random_qpos, snapshot, to_np
from simbackend.errors import (
    ArgumentTypeError,
    BackendClosedError,
    IndexRangeError,
    InputDTypeError,
    InputShapeError,
    InvalidArgumentError,
    ReentrantCallError,
    SimBackendError,
    ValueRangeError,
)

N = 3


def _arm(make_sim: Callable[..., Any]) -> Any:
    sim = make_sim("arm7", N)
    sim.set_state(None, random_qpos(sim, np.random.default_rng(3)))
    return sim


def _ctrl(sim: Any) -> np.ndarray:
    return np.tile(to_np(sim.get_qpos())[:1, sim.info.dof_qpos_index[: sim.num_actuators]], (sim.num_envs, 1))


def _unchanged(sim: Any, before: dict[str, torch.Tensor], call: str) -> None:
    after = snapshot(sim)
    for key, t in before.items():
        assert torch.equal(after[key], t), f"{call}: raised but changed {key}"


def _rejects(sim: Any, call: str, fn: Callable[[], Any], exc: type, fragment: str) -> None:
    before = snapshot(sim)
    with pytest.raises(exc) as info:
        fn()
    assert isinstance(info.value, SimBackendError), f"{call}: {type(info.value).__name__} is not a SimBackendError"
    msg = str(info.value)
    assert fragment in msg and "\n" not in msg, f"{call}: message {msg!r} should be one line naming {fragment!r}"
    _unchanged(sim, before, call)


# ----------------------------------------------------------------------------
# tensors that hold no values, odd dtypes, broadcasting bait, strides, grad
# ----------------------------------------------------------------------------


def test_meta_and_complex_tensors_rejected(make_sim: Callable[..., Any]) -> None:
    """Clause: hostile inputs — tensors on the meta device and complex values are rejected naming the argument; nothing is written."""
    sim = _arm(make_sim)
    nu, nq = sim.num_actuators, sim.nq
    meta = torch.empty((N, nu), device="meta")
    _rejects(sim, "meta ctrl", lambda: sim.step(meta), InvalidArgumentError, "ctrl")
    _rejects(
        sim, "meta qpos", lambda: sim.set_state(None, torch.empty((N, nq), device="meta")), InvalidArgumentError, "qpos"
    )
    _rejects(
        sim,
        "meta ids",
        lambda: sim.get_body_pos_w(torch.empty(2, dtype=torch.long, device="meta")),
        InvalidArgumentError,
        "body_ids",
    )
    _rejects(
        sim, "complex ctrl", lambda: sim.step(torch.zeros((N, nu), dtype=torch.complex64)), InputDTypeError, "ctrl"
    )
    _rejects(
        sim, "complex numpy qpos", lambda: sim.set_state(None, np.zeros((N, nq), complex)), InputDTypeError, "qpos"
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.int32, torch.float64])
def test_low_precision_and_integer_ctrl_accepted(make_sim: Callable[..., Any], dtype: torch.dtype) -> None:
    """Clause: hostile inputs — ctrl as bfloat16, float16 or integers is accepted and means its values (same trajectory as float32 holding them)."""
    sim, twin = _arm(make_sim), _arm(make_sim)
    ctrl = torch.as_tensor(_ctrl(sim)).round()  # values every dtype holds exactly
    sim.step(ctrl.to(dtype), nsteps=2)
    twin.step(ctrl.to(torch.float32), nsteps=2)
    np.testing.assert_array_equal(to_np(sim.get_qpos()), to_np(twin.get_qpos()))


def test_broadcasting_bait_rejected(make_sim: Callable[..., Any]) -> None:
    """Clause: hostile inputs — shapes that would broadcast ((1, nu) ctrl for N envs, (1, nq) qpos for two envs, (1, B, 3) force) are shape errors, not broadcasts."""
    sim = _arm(make_sim)
    nu, nq = sim.num_actuators, sim.nq
    _rejects(sim, "(1, nu) ctrl", lambda: sim.step(np.zeros((1, nu))), InputShapeError, "ctrl")
    _rejects(sim, "(1, nq) qpos", lambda: sim.set_state([0, 1], np.zeros((1, nq))), InputShapeError, "qpos")
    _rejects(sim, "() ctrl", lambda: sim.step(0.0), InputShapeError, "ctrl")
    if sim.capabilities.body_forces:
        _rejects(
            sim, "(1, 1, 3) force", lambda: sim.apply_body_force([1], np.zeros((1, 1, 3))), InputShapeError, "force"
        )


def test_strided_and_grad_tensors(make_sim: Callable[..., Any]) -> None:
    """Clause: hostile inputs — transposed, sliced, negatively strided and gradient-carrying inputs mean their values."""
    sim, twin = _arm(make_sim), _arm(make_sim)
    ctrl = _ctrl(sim)
    wide = torch.zeros((sim.num_actuators, 2 * N), dtype=torch.float64)
    wide[:, ::2] = torch.as_tensor(ctrl).T
    strided = wide[:, ::2].T  # non-contiguous view
    assert not strided.is_contiguous()
    grad = torch.as_tensor(ctrl, dtype=torch.float32).requires_grad_(True)
    sim.step(strided)
    sim.step(grad)
    twin.step(ctrl)
    twin.step(ctrl)
    np.testing.assert_array_equal(to_np(sim.get_qpos()), to_np(twin.get_qpos()))
    qpos = to_np(sim.get_qpos()).astype(np.float64)
    flipped = np.ascontiguousarray(qpos[::-1])[::-1]  # negative strides
    sim.set_state(None, flipped)
    twin.set_state(None, qpos)
    np.testing.assert_array_equal(to_np(sim.get_qpos()), to_np(twin.get_qpos()))


def test_values_too_large_for_float32_rejected(make_sim: Callable[..., Any]) -> None:
    """Clause: hostile inputs — finite values beyond float32's range (1e39) in ctrl and forces are rejected with ValueRangeError naming the env ids."""
    sim = _arm(make_sim)
    ctrl = _ctrl(sim)
    ctrl[2, 0] = 1e39
    _rejects(sim, "ctrl 1e39", lambda: sim.step(ctrl), ValueRangeError, "[2]")
    if sim.capabilities.body_forces:
        f = np.zeros((N, 1, 3))
        f[0, 0, 1] = -1e39
        _rejects(sim, "force 1e39", lambda: sim.apply_body_force([1], f), ValueRangeError, "[0]")


# ----------------------------------------------------------------------------
# ids and names
# ----------------------------------------------------------------------------


def test_names_of_the_wrong_type(make_sim: Callable[..., Any]) -> None:
    """Clause: hostile inputs — get_*_ids(None) or an int raise ArgumentTypeError, not a TypeError from iteration."""
    sim = _arm(make_sim)
    for fn in (sim.get_body_ids, sim.get_joint_ids, sim.get_site_ids, sim.get_joint_qpos_indices):
        for bad in (None, 5, 1.5):
            with pytest.raises(ArgumentTypeError):
                fn(bad)


def test_returned_ids_round_trip_and_in_place_edits(make_sim: Callable[..., Any]) -> None:
    """Clause: ids — an id tensor returned by get_body_ids selects the same bodies when passed back; edited in place afterwards, its new values are what count (and are validated)."""
    sim = _arm(make_sim)
    ids = sim.get_body_ids(["link3", "link1"])
    l1, l2, l3 = (sim.body_names.index(n) for n in ("link1", "link2", "link3"))
    np.testing.assert_array_equal(to_np(sim.get_body_pos_w(ids)), to_np(sim.get_body_pos_w([l3, l1])))
    ids[0] = l2
    np.testing.assert_array_equal(to_np(sim.get_body_pos_w(ids)), to_np(sim.get_body_pos_w([l2, l1])))
    ids[1] = 10_000
    with pytest.raises(IndexRangeError, match="body_ids"):
        sim.get_body_pos_w(ids)
    site = sim.get_site_ids("ee_site")
    jp, _ = sim.get_site_jacobian_w(site)
    jp2, _ = sim.get_site_jacobian_w(int(site[0]))
    np.testing.assert_array_equal(to_np(jp), to_np(jp2))


def test_any_joint_has_qpos_and_qvel_columns(make_sim: Callable[..., Any]) -> None:
    """Clause: names — get_joint_qpos/qvel_indices give any joint's columns: a free joint's 7 and 6, in MuJoCo's layout."""
    sim = make_sim("quadruped", 2)
    base = sim.joint_names[int(sim.info.base_free_joint)]
    qcols, vcols = sim.get_joint_qpos_indices(base).cpu().numpy(), sim.get_joint_qvel_indices(base).cpu().numpy()
    assert qcols.shape == (7,) and vcols.shape == (6,)
    qpos, qvel = to_np(sim.get_qpos()), to_np(sim.get_qvel())
    np.testing.assert_allclose(qpos[:, qcols[:3]], to_np(sim.get_base_pos()), atol=1e-6)
    np.testing.assert_allclose(qvel[:, vcols[:3]], to_np(sim.get_base_lin_vel()), atol=1e-6)
    hinge = sim.dof_names[0]
    both = sim.get_joint_qpos_indices([hinge, base]).cpu().numpy()
    np.testing.assert_array_equal(both, np.concatenate([sim.get_joint_qpos_indices(hinge).cpu().numpy(), qcols]))


def test_keyframe_names(make_sim: Callable[..., Any]) -> None:
    """Clause: names — keyframe_names lists the model's keyframes; each is accepted by get_keyframe_qpos."""
    sim = make_sim("arm7", 1)
    assert "home" in sim.keyframe_names
    for name in sim.keyframe_names:
        assert tuple(sim.get_keyframe_qpos(name).shape) == (sim.nq,)


def test_model_description_is_read_only(make_sim: Callable[..., Any]) -> None:
    """Clause: model — backend.info cannot be written: writing joint_qposadr raises and the getters keep their columns."""
    sim = _arm(make_sim)
    dof = to_np(sim.get_dof_pos())
    with pytest.raises(ValueError):
        sim.info.joint_qposadr[:] = 0
    with pytest.raises(ValueError):
        sim.info.qpos0[0] = 1.0
    np.testing.assert_array_equal(to_np(sim.get_dof_pos()), dof)


# ----------------------------------------------------------------------------
# construction arguments
# ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"seed": "abc"}, "seed"),
        ({"seed": None}, "seed"),
        ({"seed": 1.7}, "seed"),
        ({"seed": True}, "seed"),
        ({"seed": -1}, "seed"),
        ({"device": "foo"}, "device"),
        ({"device": "meta"}, "device"),
        ({"device": 3.5}, "device"),
        ({"nthread": -1}, "nthread"),
        ({"nthread": 1.5}, "nthread"),
        ({"solver_iterations": 0}, "solver_iterations"),
        ({"timestep": -0.01}, "timestep"),
        ({"timestep": float("nan")}, "timestep"),
        ({"no_such_option": 1}, "no_such_option"),
    ],
)
def test_bad_construction_arguments(sim_name: str, kwargs: dict, argument: str) -> None:
    """Clause: construction — seeds, devices and common options of the wrong type or range raise a SimBackendError naming the argument."""
    from simbackend.registry import make_backend

    with pytest.raises(SimBackendError) as info:
        make_backend(sim_name, "pendulum", 1, **kwargs).close()
    assert argument in str(info.value) and "\n" not in str(info.value)


def test_absurd_num_envs(sim_name: str) -> None:
    """Clause: construction — num_envs far beyond memory or the declared max_envs raises a SimBackendError (a ValueError), quickly."""
    from simbackend.registry import make_backend

    watch = CpuStopwatch()
    with pytest.raises(SimBackendError) as info:
        make_backend(sim_name, "arm7", 10**12).close()
    assert isinstance(info.value, ValueError) and "num_envs" in str(info.value)
    assert watch.elapsed < 30


def test_options_for_other_engines_are_ignored(sim_name: str, sim_engines: tuple[str, ...]) -> None:
    """Clause: construction — an option block keyed by another registered engine is ignored, so one call works on every backend."""
    from simbackend.registry import available_backends, make_backend

    others = {name: {"surely_not_an_option": 1} for name in available_backends() if name not in sim_engines}
    with make_backend(sim_name, "pendulum", 2, nthread=1, solver_iterations=20, **others) as sim:
        sim.step(np.zeros((2, sim.num_actuators)))


# ----------------------------------------------------------------------------
# pre-step control functions that misbehave
# ----------------------------------------------------------------------------


def test_callback_removing_itself(make_sim: Callable[..., Any], require: Callable[..., None]) -> None:
    """Clause: pre-step control — a function that removes itself runs for every substep of the current call (fixed when the call starts) and not in the next."""
    require("pre_step_control")
    sim = _arm(make_sim)
    calls = []

    def fn(s: Any, ctrl: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        s.set_pre_step_control(None)
        return ctrl

    sim.set_pre_step_control(fn)
    sim.step(_ctrl(sim), nsteps=3)
    assert len(calls) == 3
    sim.step(_ctrl(sim), nsteps=2)
    assert len(calls) == 3


@pytest.mark.parametrize("call", ["step", "set_state", "apply_body_force"])
def test_callback_reentering_the_backend(make_sim: Callable[..., Any], require: Callable[..., None], call: str) -> None:
    """Clause: pre-step control — calling step, set_state or apply_body_force from the function raises ReentrantCallError; at the first substep nothing changed."""
    require("pre_step_control")
    sim = _arm(make_sim)
    qpos = to_np(sim.get_qpos())
    ctrl = _ctrl(sim)

    def fn(s: Any, c: torch.Tensor) -> torch.Tensor:
        s.get_body_pos_w()  # reads are allowed
        if call == "step":
            s.step(ctrl)
        elif call == "set_state":
            s.set_state(None, qpos)
        else:
            s.apply_body_force([1], np.zeros((N, 1, 3)))
        return c

    sim.set_pre_step_control(fn)
    before = snapshot(sim)
    with pytest.raises(ReentrantCallError, match=call):
        sim.step(ctrl, nsteps=2)
    _unchanged(sim, before, "re-entrant callback")
    sim.set_pre_step_control(None)
    sim.step(ctrl)  # the backend is usable afterwards


def test_callback_that_raises(make_sim: Callable[..., Any], require: Callable[..., None]) -> None:
    """Clause: pre-step control — an exception in the function at the first substep propagates and leaves every env as it was."""
    require("pre_step_control")
    sim = _arm(make_sim)

    def fn(s: Any, c: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("policy crashed")

    sim.set_pre_step_control(fn)
    before = snapshot(sim)
    with pytest.raises(RuntimeError, match="policy crashed"):
        sim.step(_ctrl(sim), nsteps=4)
    _unchanged(sim, before, "raising callback")


def _fails_at_substep_3(kind: str) -> Callable[[Any, torch.Tensor], Any]:
    """A pre-step control function that behaves for two substeps, then fails the way ``kind`` says."""
    calls = []

    def fn(s: Any, c: torch.Tensor) -> Any:
        calls.append(1)
        if len(calls) < 3:
            return c
        if kind == "raises":
            raise RuntimeError("policy crashed")
        if kind == "interrupted":
            raise KeyboardInterrupt
        if kind == "reenters":
            s.apply_body_force([1], np.zeros((s.num_envs, 1, 3)))
        if kind == "bad output":
            return c[:, :-1]
        return c

    return fn


STEP_FAILURES = {
    "raises": RuntimeError,
    "interrupted": KeyboardInterrupt,
    "reenters": ReentrantCallError,
    "bad output": InputShapeError,
}


@pytest.mark.parametrize("kind", list(STEP_FAILURES))
def test_step_failing_at_a_later_substep_is_undone(
    make_sim: Callable[..., Any], require: Callable[..., None], kind: str
) -> None:
    """Clause: step — a step whose pre-step control function fails at its third substep (raises, Ctrl-C, re-enters the backend, returns a bad ctrl) leaves every env at its pre-call state, time and controls included; the backend then steps on like a twin that never made the call."""
    require("pre_step_control")
    sim, twin = _arm(make_sim), _arm(make_sim)
    ctrl = _ctrl(sim)
    for s in (sim, twin):
        s.step(ctrl)
    before, time_before, ctrl_before = snapshot(sim), sim.get_time().clone(), sim.get_ctrl().clone()
    sim.set_pre_step_control(_fails_at_substep_3(kind))
    with pytest.raises(STEP_FAILURES[kind]):
        sim.step(ctrl + 0.05, nsteps=5)
    sim.set_pre_step_control(None)
    assert torch.equal(sim.get_time(), time_before), f"{kind}: time advanced by a step that raised"
    assert torch.equal(sim.get_ctrl(), ctrl_before), f"{kind}: the controls of a step that raised were kept"
    # to float32 rounding: an engine may renormalise a restored free body's quaternion (PhysX: one ulp)
    after = snapshot(sim)
    for key, t in before.items():
        np.testing.assert_allclose(
            to_np(after[key]), to_np(t), rtol=0, atol=1e-6, err_msg=f"{kind}: {key} kept a substep of a failed step"
        )
    for s in (sim, twin):
        s.step(ctrl, nsteps=3)
    np.testing.assert_allclose(to_np(sim.get_qpos()), to_np(twin.get_qpos()), rtol=0, atol=1e-6)
    np.testing.assert_allclose(to_np(sim.get_qvel()), to_np(twin.get_qvel()), rtol=0, atol=1e-5)


def test_callback_that_closes_the_backend(make_sim: Callable[..., Any], require: Callable[..., None]) -> None:
    """Clause: pre-step control — a function that closes the backend makes step raise BackendClosedError; the backend is closed."""
    require("pre_step_control")
    sim = _arm(make_sim)
    sim.set_pre_step_control(lambda s, c: (s.close(), c)[1])
    with pytest.raises(BackendClosedError):
        sim.step(_ctrl(sim), nsteps=3)
    assert sim.closed


# ----------------------------------------------------------------------------
# interruption
# ----------------------------------------------------------------------------


def test_long_step_is_interruptible(make_sim: Callable[..., Any]) -> None:
    """Clause: step — Ctrl-C (KeyboardInterrupt) during a huge step stops it within a second, every env is back at its pre-call state (to float32 rounding), the whole snapshot row included (the interrupted call's controls are not kept), and the backend steps on like a twin that was never interrupted."""
    sim, twin = _arm(make_sim), _arm(make_sim)
    ctrl = _ctrl(sim)
    for s in (sim, twin):
        s.step(ctrl)
    before = snapshot(sim)
    before["ctrl"] = sim.get_ctrl().clone()
    if sim.capabilities.snapshot_restore:
        before["physics state"] = sim.get_physics_state(None).clone()

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        # the process's own work, not the wall clock: other jobs on a shared machine stretch wall time
        watch = CpuStopwatch()
        with pytest.raises(KeyboardInterrupt):
            sim.step(np.flip(ctrl, axis=1).copy(), nsteps=2**31)  # other controls than the last call's
        elapsed = watch.elapsed
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert elapsed < 1.5, f"the interrupt took {elapsed:.2f} s to stop the step"
    # back at the pre-call state; to float32 rounding, since an engine may renormalise a restored free
    # body's quaternion (PhysX's unpack moves it by up to one float32 ulp, 1.2e-7)
    after = snapshot(sim)
    after["ctrl"] = sim.get_ctrl()
    if sim.capabilities.snapshot_restore:
        after["physics state"] = sim.get_physics_state(None)
    for key, t in before.items():
        np.testing.assert_allclose(
            to_np(after[key]),
            to_np(t),
            rtol=0,
            atol=1e-6,
            err_msg=f"interrupted step: {key} is not back at its pre-call value",
        )
    # the state is restored exactly; an engine's warm-start caches may not be (PhysX), so compare to solver precision
    for s in (sim, twin):
        s.step(ctrl, nsteps=3)
    np.testing.assert_allclose(to_np(sim.get_qpos()), to_np(twin.get_qpos()), rtol=0, atol=1e-6)
    np.testing.assert_allclose(to_np(sim.get_qvel()), to_np(twin.get_qvel()), rtol=0, atol=1e-5)


# ----------------------------------------------------------------------------
# use after close
# ----------------------------------------------------------------------------


def test_every_public_method_raises_after_close(make_sim: Callable[..., Any]) -> None:
    """Clause: close — after close(), every public method raises BackendClosedError (no stale values, no IndexError); the model description still answers; hasattr never raises."""
    sim = _arm(make_sim)
    sim.get_body_pos_w()  # derived values computed before close must not be served after it
    names = sim.body_names
    sim.close()
    assert sim.closed
    methods = [
        m
        for m in dir(sim)
        if not m.startswith("_")
        and m not in ("close", "closed")
        and callable(getattr(type(sim), m, None))
        and not isinstance(getattr(type(sim), m), property)
        and m not in ("parse_options", "resolve_device")
    ]
    assert "get_qpos" in methods and "get_env_body_mass" in methods and "model_fields" in methods
    for m in methods:
        with pytest.raises(BackendClosedError):
            getattr(sim, m)()
            pytest.fail(f"{m} did not raise after close")
    assert sim.body_names == names and sim.num_envs == N
    assert hasattr(sim, "no_such_attribute") is False
    hasattr(sim, "notes")  # must not raise
    sim.close()  # idempotent
