"""Conformance: errors and bad input (docs/conventions.md, "Errors").

One test per rule. Every bad call must raise the contract's error and leave
every env as it was: the qpos, qvel and body poses of all envs are compared bit
for bit before and after, and for calls that feed the next step (ctrl, nsteps,
forces, set_state) a following valid step must give exactly what a twin backend
that never saw the bad call gives, so that no ctrl, pending force or state row
was half-written. A valid force is pending on both backends before the bad call,
so a bad call must not clear pending forces either.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from simbackend.contract_tests.helpers import random_qpos, snapshot, to_np
from simbackend.errors import (
    EnvIdError,
    IndexRangeError,
    InputDTypeError,
    InputShapeError,
    InvalidArgumentError,
    InvalidQuaternionError,
    NonFiniteError,
    SimBackendError,
    UnknownBackendError,
    UnknownNameError,
    UnsupportedFeatureError,
)

N = 4
BUILTIN_MODELS = ("pendulum", "double_pendulum", "cartpole", "arm7", "quadruped")


# ----------------------------------------------------------------------------
# fixtures and helpers
# ----------------------------------------------------------------------------


def _initial_state(sim: Any) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5)
    qpos = random_qpos(sim, rng)
    if "cube_free" in sim.joint_names:  # the cube in the air, clear of the table
        c = int(sim.info.joint_qposadr[int(sim.get_joint_ids("cube_free")[0])])
        qpos[:, c : c + 3] = [1.5, 1.5, 1.0]
    return qpos, rng.normal(scale=0.3, size=(sim.num_envs, sim.nv))


def _valid_ctrl(sim: Any, seed: int = 9) -> np.ndarray:
    lo, hi = to_np(sim.get_actuator_ctrl_range()).T
    lo, hi = np.where(np.isfinite(lo), lo, -1.0), np.where(np.isfinite(hi), hi, 1.0)
    return np.random.default_rng(seed).uniform(lo, hi, size=(sim.num_envs, sim.num_actuators))


def _pending_force(sim: Any) -> None:
    """A valid force and torque on the last body, left pending until the next step."""
    if not sim.capabilities.body_forces:
        return
    b = len(sim.body_names) - 1
    f = np.tile([0.3, -0.2, 1.0], (sim.num_envs, 1, 1)) * np.arange(1, sim.num_envs + 1)[:, None, None]
    sim.apply_body_force([b], f, 0.01 * f)


def _pair(make_sim: Callable[..., Any], model: str = "arm7") -> tuple[Any, Any]:
    """Two backends in the same state with the same pending force."""
    sims = (make_sim(model, N), make_sim(model, N))
    qpos, qvel = _initial_state(sims[0])
    for s in sims:
        s.set_state(None, qpos, qvel)
        _pending_force(s)
    return sims


@pytest.fixture
def pair(make_sim: Callable[..., Any]) -> tuple[Any, Any]:
    return _pair(make_sim)


def _assert_unchanged(sim: Any, before: dict[str, torch.Tensor], call: str) -> None:
    after = snapshot(sim)
    for key, t in before.items():
        assert torch.equal(after[key], t), f"{call}: raised but changed {key} (validate first, then mutate)"


def _assert_next_step_matches(sim: Any, twin: Any, call: str) -> None:
    """A valid step on ``sim`` (which saw the bad call) equals the same step on ``twin`` (which did not)."""
    ctrl = _valid_ctrl(sim)
    for s in (sim, twin):
        s.step(ctrl, nsteps=2)
    for getter in ("get_qpos", "get_qvel"):
        got, want = to_np(getattr(sim, getter)()), to_np(getattr(twin, getter)())
        np.testing.assert_allclose(
            got,
            want,
            rtol=0,
            atol=1e-6,
            err_msg=f"{call}: after the rejected call, the next valid step differs from a backend that never saw it",
        )


def _expect(sim: Any, twin: Any | None, call: str, fn: Callable[[], Any], exc: type, *fragments: str) -> Exception:
    """Run a bad call; check the error type, message fragments, unchanged state and (with a twin) the next step."""
    before = snapshot(sim)
    with pytest.raises(exc) as info:
        fn()
    err = info.value
    assert isinstance(err, SimBackendError), f"{call}: {type(err).__name__} does not derive from SimBackendError"
    msg = str(err)
    for frag in fragments:
        assert frag in msg, f"{call}: message {msg!r} does not mention {frag!r}"
    _assert_unchanged(sim, before, call)
    if twin is not None:
        _assert_next_step_matches(sim, twin, call)
    return err


def _shape(shape: tuple[int, ...]) -> str:
    """How a shape reads in a message: Python's tuple notation."""
    return str(tuple(shape))


# ----------------------------------------------------------------------------
# wrong shape or size
# ----------------------------------------------------------------------------


def _shape_cases(sim: Any) -> list[tuple[str, Callable[[Any], Any], str, tuple, tuple]]:
    """(label, call, argument, expected shape, received shape)."""
    nq, nv, nu, nb = sim.nq, sim.nv, sim.num_actuators, len(sim.body_names)
    cube = nb - 1
    z = np.zeros
    ctrl_cases = [
        ("ctrl extra column", lambda s: s.step(z((N, nu + 1))), "ctrl", (N, nu), (N, nu + 1)),
        ("ctrl 1-D", lambda s: s.step(z(nu)), "ctrl", (N, nu), (nu,)),
        ("ctrl too many envs", lambda s: s.step(z((N + 1, nu))), "ctrl", (N, nu), (N + 1, nu)),
        ("ctrl 3-D", lambda s: s.step(z((N, nu, 1))), "ctrl", (N, nu), (N, nu, 1)),
        ("ctrl nested list", lambda s: s.step([[0.0] * nu] * (N - 1)), "ctrl", (N, nu), (N - 1, nu)),
    ]
    q2 = z((2, nq))
    state_cases = [
        ("qpos short row", lambda s: s.set_state([0, 2], z((2, nq - 1))), "qpos", (2, nq), (2, nq - 1)),
        ("qpos too many rows", lambda s: s.set_state([0, 2], z((3, nq))), "qpos", (2, nq), (3, nq)),
        ("qpos 1-D for one env", lambda s: s.set_state([1], z(nq)), "qpos", (1, nq), (nq,)),
        ("qvel long row", lambda s: s.set_state([0, 2], q2, z((2, nv + 1))), "qvel", (2, nv), (2, nv + 1)),
        ("qvel all envs", lambda s: s.set_state(None, z((N, nq)), z((N - 1, nv))), "qvel", (N, nv), (N - 1, nv)),
    ]
    force_cases = [
        (
            "force two bodies for one id",
            lambda s: s.apply_body_force([cube], z((N, 2, 3))),
            "force",
            (N, 1, 3),
            (N, 2, 3),
        ),
        ("force 4-vector", lambda s: s.apply_body_force([cube], z((N, 1, 4))), "force", (N, 1, 3), (N, 1, 4)),
        ("force without env axis", lambda s: s.apply_body_force([cube], z((1, 3))), "force", (N, 1, 3), (1, 3)),
        (
            "torque short",
            lambda s: s.apply_body_force([cube], z((N, 1, 3)) + 1.0, z((N, 1, 2))),
            "torque",
            (N, 1, 3),
            (N, 1, 2),
        ),
    ]
    return ctrl_cases + state_cases + (force_cases if sim.capabilities.body_forces else [])


SHAPE_LABELS = [
    "ctrl extra column",
    "ctrl 1-D",
    "ctrl too many envs",
    "ctrl 3-D",
    "ctrl nested list",
    "qpos short row",
    "qpos too many rows",
    "qpos 1-D for one env",
    "qvel long row",
    "qvel all envs",
    "force two bodies for one id",
    "force 4-vector",
    "force without env axis",
    "torque short",
]


@pytest.mark.parametrize("label", SHAPE_LABELS)
def test_wrong_shape(pair: tuple[Any, Any], require: Callable[..., None], label: str) -> None:
    """Clause: errors — wrong shape or size of ctrl, qpos, qvel, force or torque raises InputShapeError (a ValueError) naming the argument, the expected and the received shape; nothing changes."""
    sim, twin = pair
    if label.startswith(("force", "torque")):
        require("body_forces")
    cases = {c[0]: c for c in _shape_cases(sim)}
    _, call, argument, expected, received = cases[label]
    err = _expect(sim, twin, label, lambda: call(sim), InputShapeError, argument, _shape(expected), _shape(received))
    assert isinstance(err, ValueError)


def test_env_ids_wrong_shape(pair: tuple[Any, Any]) -> None:
    """Clause: errors — 2-D env_ids, or a boolean mask of the wrong length, raise InputShapeError naming env_ids; nothing is written."""
    sim, twin = pair
    q = np.tile(to_np(sim.get_default_qpos()), (2, 1))
    _expect(sim, twin, "env_ids 2-D", lambda: sim.set_state([[0, 1]], q), InputShapeError, "env_ids", "(1, 2)")
    mask = np.array([True, False, True])
    _expect(
        sim,
        twin,
        "env_ids short mask",
        lambda: sim.set_state(mask, q),
        InputShapeError,
        "env_ids",
        _shape((N,)),
        "(3,)",
    )


def test_body_ids_wrong_shape(pair: tuple[Any, Any]) -> None:
    """Clause: errors — 2-D body or site ids in a getter raise InputShapeError naming the argument."""
    sim, _ = pair
    _expect(sim, None, "body_ids 2-D", lambda: sim.get_body_pos_w([[1, 2]]), InputShapeError, "body_ids", "(1, 2)")
    _expect(sim, None, "site_ids 2-D", lambda: sim.get_site_pos_w([[0]]), InputShapeError, "site_ids", "(1, 1)")


def test_missing_ctrl(pair: tuple[Any, Any]) -> None:
    """Clause: errors — step(None) on a model with actuators raises InvalidArgumentError (a SimBackendError and ValueError) naming ctrl; nothing is stepped."""
    sim, twin = pair
    before = snapshot(sim)
    with pytest.raises(InvalidArgumentError, match="ctrl"):
        sim.step(None)
    _assert_unchanged(sim, before, "step(None)")
    _assert_next_step_matches(sim, twin, "step(None)")


# ----------------------------------------------------------------------------
# wrong dtype
# ----------------------------------------------------------------------------

DTYPE_CASES = {
    "ctrl strings": lambda s: s.step(np.full((N, s.num_actuators), "0.1")),
    "ctrl complex": lambda s: s.step(np.ones((N, s.num_actuators), dtype=complex)),
    "ctrl booleans": lambda s: s.step(np.ones((N, s.num_actuators), dtype=bool)),
    "ctrl torch booleans": lambda s: s.step(torch.ones((N, s.num_actuators), dtype=torch.bool)),
    "ctrl objects": lambda s: s.step(np.array([[object()] * s.num_actuators] * N, dtype=object)),
    "ctrl ragged": lambda s: s.step([[0.0] * s.num_actuators, [0.0]] * (N // 2)),
    "qpos strings": lambda s: s.set_state([0], np.full((1, s.nq), "x")),
    "qvel complex": lambda s: s.set_state([0], s.get_qpos()[:1], np.ones((1, s.nv), dtype=complex)),
    "force booleans": lambda s: s.apply_body_force([1], np.ones((N, 1, 3), dtype=bool)),
    "torque complex": lambda s: s.apply_body_force([1], np.ones((N, 1, 3)), np.ones((N, 1, 3), dtype=complex)),
}


@pytest.mark.parametrize("label", list(DTYPE_CASES))
def test_wrong_dtype(pair: tuple[Any, Any], require: Callable[..., None], label: str) -> None:
    """Clause: errors — values that are not real numbers (strings, complex, booleans, objects, ragged lists) raise InputDTypeError (a ValueError) naming the argument; nothing changes."""
    if label.startswith(("force", "torque")):
        require("body_forces")
    sim, twin = pair
    argument = label.split()[0]
    err = _expect(sim, twin, label, lambda: DTYPE_CASES[label](sim), InputDTypeError, argument)
    assert isinstance(err, ValueError)


# ----------------------------------------------------------------------------
# non-finite values
# ----------------------------------------------------------------------------


def _nonfinite(sim: Any, twin: Any, label: str, fn: Callable[[], Any], argument: str, env_ids: tuple[int, ...]) -> None:
    err = _expect(sim, twin, label, fn, NonFiniteError, argument)
    assert isinstance(err, ValueError)
    assert sorted(err.env_ids) == sorted(env_ids), f"{label}: env_ids {err.env_ids}, expected {env_ids} (in any order)"
    for i in env_ids:
        assert re.search(rf"\b{i}\b", str(err)), f"{label}: message {str(err)!r} does not name env id {i}"


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf], ids=["nan", "inf", "-inf"])
def test_nonfinite_ctrl(pair: tuple[Any, Any], bad: float) -> None:
    """Clause: errors — NaN/inf in ctrl raises NonFiniteError naming the offending env ids (err.env_ids and message); nothing is stepped."""
    sim, twin = pair
    ctrl = _valid_ctrl(sim)
    ctrl[2, 0] = bad
    _nonfinite(sim, twin, "ctrl one env", lambda: sim.step(ctrl), "ctrl", (2,))
    ctrl[0, -1] = bad
    ctrl[3, :] = bad
    _nonfinite(sim, twin, "ctrl three envs", lambda: sim.step(torch.as_tensor(ctrl), nsteps=3), "ctrl", (0, 2, 3))


@pytest.mark.parametrize("bad", [np.nan, np.inf], ids=["nan", "inf"])
def test_nonfinite_state(pair: tuple[Any, Any], bad: float) -> None:
    """Clause: errors — NaN/inf in set_state's qpos or qvel raises NonFiniteError naming env ids (not row numbers); no env is written.

    With env_ids [3, 0, 1] and the bad value in rows 0 and 2, the reported
    ids are 3 and 1; the valid rows of the same call are not written either.
    """
    sim, twin = pair
    ids = [3, 0, 1]
    rng = np.random.default_rng(1)
    qpos, qvel = random_qpos(sim, rng, 3), rng.normal(size=(3, sim.nv))
    bad_q = qpos.copy()
    bad_q[0, 0] = bad
    bad_q[2, -1] = bad
    _nonfinite(sim, twin, "qpos", lambda: sim.set_state(ids, bad_q, qvel), "qpos", (1, 3))
    bad_v = qvel.copy()
    bad_v[1, 0] = bad
    _nonfinite(sim, twin, "qvel", lambda: sim.set_state(ids, qpos, bad_v), "qvel", (0,))
    _nonfinite(
        sim,
        twin,
        "qvel all envs",
        lambda: sim.set_state(None, random_qpos(sim, rng), np.full((N, sim.nv), bad)),
        "qvel",
        (0, 1, 2, 3),
    )


@pytest.mark.parametrize("bad", [np.nan, np.inf], ids=["nan", "inf"])
def test_nonfinite_force(pair: tuple[Any, Any], require: Callable[..., None], bad: float) -> None:
    """Clause: errors — NaN/inf in apply_body_force's force or torque raises NonFiniteError naming env ids; nothing becomes pending."""
    require("body_forces")
    sim, twin = pair
    bodies = [1, len(sim.body_names) - 1]
    f = np.ones((N, 2, 3))
    bf = f.copy()
    bf[1, 1, 2] = bad
    _nonfinite(sim, twin, "force", lambda: sim.apply_body_force(bodies, bf), "force", (1,))
    bt = f.copy()
    bt[2, 0, 0] = -bad
    bt[3, 1, 1] = bad
    _nonfinite(sim, twin, "torque", lambda: sim.apply_body_force(bodies, f, bt), "torque", (2, 3))


# ----------------------------------------------------------------------------
# env ids
# ----------------------------------------------------------------------------

ENV_ID_CASES = {
    "out of range": [0, N],
    "negative": [-1],
    "duplicated": [1, 2, 1],
    "floats": [0.0, 1.0],
    "float tensor": torch.tensor([0.0, 2.0]),
    "strings": ["0", "1"],
}


@pytest.mark.parametrize("label", list(ENV_ID_CASES))
def test_bad_env_ids(pair: tuple[Any, Any], label: str) -> None:
    """Clause: errors — env ids out of range, negative, duplicated or not integers raise EnvIdError; nothing is written."""
    sim, twin = pair
    ids = ENV_ID_CASES[label]
    n = len(ids)
    rng = np.random.default_rng(2)
    err = _expect(
        sim,
        twin,
        f"env_ids {label}",
        lambda: sim.set_state(ids, random_qpos(sim, rng, n), np.zeros((n, sim.nv))),
        EnvIdError,
        "env_ids",
    )
    assert isinstance(err, ValueError)


def test_uint8_ids_are_refused(pair: tuple[Any, Any], capabilities: Any) -> None:
    """Clause: errors — ids of dtype uint8 (torch's old mask dtype: [1, 0, 0, 1] as ids would pick envs 1 and
    0, not the envs marked) raise EnvIdError or IndexRangeError naming the argument and mask.nonzero(), for
    every kind of id argument (env, body, site, geom, dof, one body or site); nothing is written. A bool mask
    of shape (N,) stays env ids' mask."""
    sim, twin = pair
    u8 = lambda *v: torch.tensor(v, dtype=torch.uint8)  # noqa: E731
    rng = np.random.default_rng(3)
    mask = u8(1, 0, 0, 1)
    cases: list[tuple[str, Callable[[], Any], type, str]] = [
        (
            "set_state",
            lambda: sim.set_state(mask, random_qpos(sim, rng, N), np.zeros((N, sim.nv))),
            EnvIdError,
            "env_ids",
        ),
        ("get_qpos", lambda: sim.get_qpos(u8(1, 2)), EnvIdError, "env_ids"),
        ("get_body_pose_w", lambda: sim.get_body_pose_w([1], u8(1)), EnvIdError, "env_ids"),
        ("get_body_pos_w", lambda: sim.get_body_pos_w(u8(1, 2)), IndexRangeError, "body_ids"),
        ("get_site_pos_w", lambda: sim.get_site_pos_w(u8(0)), IndexRangeError, "site_ids"),
        ("get_geom_size", lambda: sim.get_geom_size(u8(0)), IndexRangeError, "geom_ids"),
        ("get_body_subtree_ids", lambda: sim.get_body_subtree_ids(u8(1)), IndexRangeError, "body"),
    ]
    if capabilities.site_jacobians:
        cases += [
            ("jacobian site", lambda: sim.get_site_jacobian_w(u8(0)), IndexRangeError, "site_id"),
            ("jacobian dofs", lambda: sim.get_site_jacobian_w(0, u8(0, 1)), IndexRangeError, "dof_indices"),
        ]
    if capabilities.body_forces:
        f = np.ones((N, 1, 3))
        cases.append(("apply_body_force", lambda: sim.apply_body_force(u8(1), f), IndexRangeError, "body_ids"))
    if capabilities.snapshot_restore:
        cases.append(("get_physics_state", lambda: sim.get_physics_state(u8(1)), EnvIdError, "env_ids"))
    for call, fn, exc, argument in cases:
        _expect(sim, None, f"{call} with uint8 ids", fn, exc, argument, "uint8", "nonzero()")
    _assert_next_step_matches(sim, twin, "the uint8 ids")
    np.testing.assert_array_equal(to_np(sim.get_qpos(mask.bool())), to_np(sim.get_qpos([0, 3])))


# ----------------------------------------------------------------------------
# body, site and dof ids
# ----------------------------------------------------------------------------


def test_index_out_of_range(pair: tuple[Any, Any], capabilities: Any) -> None:
    """Clause: errors — body, site and dof (qvel column) ids out of range or not integers raise IndexRangeError naming the argument."""
    sim, _ = pair
    nb, ns = len(sim.body_names), len(sim.site_names)
    cases = [
        ("body id = nbody", lambda: sim.get_body_pos_w([0, nb]), "body_ids"),
        ("negative body id", lambda: sim.get_body_quat_w(-1), "body_ids"),
        ("body id float", lambda: sim.get_body_lin_vel_w([1.0]), "body_ids"),
        ("body_b id = nbody", lambda: sim.get_body_pos_b([nb]), "body_ids"),
        ("site id = nsite", lambda: sim.get_site_pos_w([ns]), "site_ids"),
        ("negative site id", lambda: sim.get_site_quat_w([-1]), "site_ids"),
    ]
    if capabilities.site_jacobians:
        cases += [
            ("jacobian site id", lambda: sim.get_site_jacobian_w(ns), "site_id"),
            ("jacobian two site ids", lambda: sim.get_site_jacobian_w([0, 1]), "site_id"),
            ("jacobian dof index = nv", lambda: sim.get_site_jacobian_w(0, [0, sim.nv]), "dof_indices"),
            ("jacobian negative dof index", lambda: sim.get_site_jacobian_w(0, [-1]), "dof_indices"),
        ]
    for label, fn, argument in cases:
        _expect(sim, None, label, fn, IndexRangeError, argument)


def test_free_joint_has_no_dof_column(pair: tuple[Any, Any]) -> None:
    """Clause: errors — asking for the dof column of a free joint (not a hinge/slide) raises IndexRangeError."""
    sim, _ = pair
    _expect(
        sim,
        None,
        "free joint dof column",
        lambda: sim.get_joint_dof_pos_indices("cube_free"),
        IndexRangeError,
        "cube_free",
    )


def test_apply_body_force_bad_bodies(pair: tuple[Any, Any], require: Callable[..., None]) -> None:
    """Clause: errors — apply_body_force on the world body, on out-of-range or duplicated body ids raises IndexRangeError; no force becomes pending."""
    require("body_forces")
    sim, twin = pair
    nb = len(sim.body_names)
    f1, f2 = np.ones((N, 1, 3)), np.ones((N, 2, 3))
    _expect(sim, twin, "world body", lambda: sim.apply_body_force([0], f1), IndexRangeError, "world")
    _expect(
        sim, twin, "world body among others", lambda: sim.apply_body_force([nb - 1, 0], f2), IndexRangeError, "world"
    )
    _expect(sim, twin, "body id = nbody", lambda: sim.apply_body_force([nb], f1), IndexRangeError, "body_ids")
    _expect(
        sim,
        twin,
        "duplicated body ids",
        lambda: sim.apply_body_force([nb - 1, nb - 1], f2),
        IndexRangeError,
        "body_ids",
        "duplicated",
    )


# ----------------------------------------------------------------------------
# unknown names
# ----------------------------------------------------------------------------

NAME_CASES = [
    ("body", "get_body_ids", "cub", "cube"),
    ("body", "get_body_ids", "link_4", "link4"),
    ("site", "get_site_ids", "ee_sit", "ee_site"),
    ("joint", "get_joint_ids", "cube_fre", "cube_free"),
    ("joint", "get_joint_dof_pos_indices", "jiont3", "joint3"),
    ("joint", "get_joint_qvel_indices", "joint_2", "joint2"),
    ("actuator", "get_actuator_ids", "act_5", "act5"),
    ("sensor", "get_sensor_ids", "ee_pos_", "ee_pos"),
    ("sensor", "get_sensor_data", "ee_gyr", "ee_gyro"),
    ("keyframe", "get_keyframe_qpos", "hom", "home"),
]


@pytest.mark.parametrize("kind,method,bad,closest", NAME_CASES, ids=[f"{c[1]}-{c[2]}" for c in NAME_CASES])
def test_unknown_name_suggests_closest(
    pair: tuple[Any, Any], require: Callable[..., None], kind: str, method: str, bad: str, closest: str
) -> None:
    """Clause: errors — an unknown body/site/joint/actuator/sensor/keyframe name raises UnknownNameError (a LookupError) listing the closest known names."""
    if kind == "keyframe":
        require("keyframes")
    sim, _ = pair
    err = _expect(
        sim, None, f"{method}({bad!r})", lambda: getattr(sim, method)(bad), UnknownNameError, repr(bad), repr(closest)
    )
    assert isinstance(err, LookupError)


def test_unknown_name_in_a_list(pair: tuple[Any, Any]) -> None:
    """Clause: errors — one unknown name among known ones raises UnknownNameError naming it; a name with no close match lists known names."""
    sim, _ = pair
    _expect(sim, None, "list", lambda: sim.get_body_ids(["cube", "base", "tabel"]), UnknownNameError, "'tabel'")
    err = _expect(sim, None, "far name", lambda: sim.get_actuator_ids("zzzzzzzz"), UnknownNameError, "'zzzzzzzz'")
    assert any(repr(n) in str(err) for n in sim.actuator_names), f"no known actuator names listed in {str(err)!r}"


def test_unknown_backend(sim_engines: tuple[str, ...]) -> None:
    """Clause: errors — an unknown backend name in make_backend raises UnknownBackendError listing the registered backends."""
    from simbackend.registry import available_backends, make_backend

    with pytest.raises(UnknownBackendError) as info:
        make_backend("no-such-engine", "pendulum", 1)
    err = info.value
    assert isinstance(err, SimBackendError) and isinstance(err, LookupError)
    msg = str(err)
    assert "no-such-engine" in msg
    for name in available_backends():
        assert name in msg, f"registered backend {name!r} not listed in {msg!r}"
    for name in sim_engines:  # the backend under test (each engine of a mix)
        assert name in msg


# ----------------------------------------------------------------------------
# quaternions and nsteps
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("model,joint", [("arm7", "cube_free"), ("quadruped", "root")])
def test_zero_quaternion_rejected(make_sim: Callable[..., Any], model: str, joint: str) -> None:
    """Clause: errors — a zero (or vanishing) free-joint quaternion in set_state raises InvalidQuaternionError naming the joint; no env is written, not even the valid rows."""
    sim, twin = _pair(make_sim, model)
    adr = int(sim.info.joint_qposadr[int(sim.get_joint_ids(joint)[0])])
    rng = np.random.default_rng(3)
    qpos = random_qpos(sim, rng, 3)
    qpos[1, adr + 3 : adr + 7] = 0.0
    _expect(sim, twin, "zero quaternion", lambda: sim.set_state([2, 0, 3], qpos), InvalidQuaternionError, joint)
    qpos[1, adr + 3 : adr + 7] = 1e-12
    err = _expect(
        sim, twin, "vanishing quaternion", lambda: sim.set_state([2, 0, 3], qpos), InvalidQuaternionError, joint
    )
    assert isinstance(err, ValueError)


@pytest.mark.parametrize("nsteps", [0, -1, 1.5, True, "2", None], ids=["0", "-1", "1.5", "True", "str", "None"])
def test_bad_nsteps(pair: tuple[Any, Any], nsteps: Any) -> None:
    """Clause: errors — nsteps that is not an integer >= 1 (0, -1, 1.5, True, "2", None) raises InvalidArgumentError (a SimBackendError and ValueError); nothing is stepped and ctrl is not half-applied."""
    sim, twin = pair
    before = snapshot(sim)
    with pytest.raises(InvalidArgumentError, match="nsteps"):
        sim.step(_valid_ctrl(sim, seed=123), nsteps=nsteps)
    _assert_unchanged(sim, before, f"nsteps={nsteps!r}")
    _assert_next_step_matches(sim, twin, f"nsteps={nsteps!r}")


# ----------------------------------------------------------------------------
# features the backend lacks
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("model", BUILTIN_MODELS)
def test_sensor_types_as_declared(make_sim: Callable[..., Any], model: str) -> None:
    """Clause: errors — reading a sensor whose type the capabilities do not list raises UnsupportedFeatureError naming backend and capability; every listed type is readable.

    The backend is held to what it declares: a declared sensor type gives an
    (N, dim) finite reading, an undeclared one the error, state unchanged.
    """
    sim = make_sim(model, 2)
    declared = sim.capabilities.sensor_types
    for sid, name in enumerate(sim.sensor_names):
        stype = sim.info.sensor_type[sid]
        if stype in declared:
            out = sim.get_sensor_data(name)
            assert tuple(out.shape) == (2, int(sim.info.sensor_dim[sid])), name
            assert torch.isfinite(out).all(), name
        else:
            err = _expect(
                sim,
                None,
                f"sensor {name}",
                lambda name=name: sim.get_sensor_data(name),
                UnsupportedFeatureError,
                sim.name,
                stype,
            )
            assert isinstance(err, NotImplementedError)


def test_optional_features_as_declared(pair: tuple[Any, Any]) -> None:
    """Clause: errors — a feature the backend declares absent (body_forces, site_jacobians, pre_step_control, contact_forces) raises UnsupportedFeatureError naming backend and capability; a declared one works."""
    sim, _ = pair
    caps = sim.capabilities
    nb = len(sim.body_names)
    calls = {
        "body_forces": lambda: sim.apply_body_force([nb - 1], np.zeros((N, 1, 3))),
        "site_jacobians": lambda: sim.get_site_jacobian_w(0),
        "pre_step_control": lambda: sim.set_pre_step_control(lambda backend, ctrl: ctrl),
    }
    for capability, fn in calls.items():
        if getattr(caps, capability):
            fn()
        else:
            _expect(sim, None, capability, fn, UnsupportedFeatureError, sim.name, capability)
    if caps.pre_step_control:
        sim.set_pre_step_control(None)
    if not caps.contact_forces:  # a declared one is checked in test_contacts.py (it needs contact_sensing)
        fn = sim.get_body_contact_force_w
        _expect(sim, None, "contact_forces", fn, UnsupportedFeatureError, sim.name, "contact_forces")


# ----------------------------------------------------------------------------
# closed backend
# ----------------------------------------------------------------------------


def test_closed_backend_raises(make_sim: Callable[..., Any]) -> None:
    """Clause: errors — every state call on a closed backend raises SimBackendError; close() is idempotent."""
    sim = make_sim("arm7", 2)
    qpos = to_np(sim.get_qpos())
    ctrl = np.zeros((2, sim.num_actuators))
    sim.close()
    sim.close()
    calls = {
        "step": lambda: sim.step(ctrl),
        "set_state": lambda: sim.set_state(None, qpos),
        "apply_body_force": lambda: sim.apply_body_force([1], np.zeros((2, 1, 3))),
        "get_qpos": sim.get_qpos,
        "get_qvel": sim.get_qvel,
        "get_dof_pos": sim.get_dof_pos,
        "get_base_pos": sim.get_base_pos,
        "get_body_pos_w": sim.get_body_pos_w,
        "get_body_lin_vel_w": sim.get_body_lin_vel_w,
        "get_site_pos_w": sim.get_site_pos_w,
        "get_sensor_data": lambda: sim.get_sensor_data(sim.sensor_names[0]),
    }
    for label, fn in calls.items():
        with pytest.raises(SimBackendError):
            fn()
            pytest.fail(f"{label} on a closed backend did not raise")


def test_closed_by_context_manager(sim_name: str) -> None:
    """Clause: errors — a backend used as a context manager is closed on exit; later calls raise SimBackendError."""
    from simbackend.registry import make_backend

    with make_backend(sim_name, "pendulum", 1) as sim:
        sim.step([[0.0]])
    with pytest.raises(SimBackendError):
        sim.step([[0.0]])
    with pytest.raises(SimBackendError):
        sim.get_qpos()
