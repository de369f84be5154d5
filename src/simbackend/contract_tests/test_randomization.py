"""Conformance: domain randomization — plans applied in the init, reset and interval phases.

Every test talks only to the contract. A backend is tested on the terms and
phases it declares (``get_dr_capabilities()``); the others are skipped with
the reason. Expected effects come from Newton's laws on small models written
here (primitives only), never from an engine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from simbackend.contract_tests.helpers import DR_MJCF, assert_rows_equal, env_params, to_np
from simbackend.errors import (
    EnvIdError,
    InvalidArgumentError,
    UnknownNameError,
    UnsupportedFeatureError,
    ValueRangeError,
)
from simbackend.randomization import PHASES, Distribution, RandomizationPlan, Term


@pytest.fixture
def dr_model(tmp_path: Path) -> Path:
    path = tmp_path / "dr_bench.xml"
    path.write_text(DR_MJCF)
    return path


def _supports(sim: Any, kind: str, phase: str) -> None:
    caps = sim.get_dr_capabilities()
    if phase not in caps.get(kind, frozenset()):
        pytest.skip(f"backend {sim.name!r} declares domain randomization term {kind!r} in phase {phase!r} absent")


# term kind -> (targets, value set, reader(sim) -> (N, ...) values of the target)
def _col(sim: Any, kind: str, name: str) -> int:
    info = sim.info
    if kind == "joint_qpos":
        return int(info.joint_qposadr[info.joint_names.index(name)])
    return int(info.joint_dofadr[info.joint_names.index(name)])


READERS = {
    "body_mass": ("cart", [2.5], lambda s: to_np(s.get_env_body_mass())[:, s.info.body_names.index("cart")]),
    "body_com": (
        "cart",
        [0.01, -0.02, 0.03],
        lambda s: to_np(s.get_env_body_com())[:, s.info.body_names.index("cart")],
    ),
    "body_inertia": ("cart", [3.0], lambda s: to_np(s.get_env_body_inertia())[:, s.info.body_names.index("cart")]),
    "geom_friction": (
        "box_geom",
        [0.7],
        lambda s: to_np(s.get_env_geom_friction())[:, s.info.geom_names.index("box_geom"), 0],
    ),
    "geom_compliance": (
        "box_geom",
        [0.03],
        lambda s: to_np(s.get_env_geom_compliance())[:, s.info.geom_names.index("box_geom"), 0],
    ),
    "geom_impedance": (
        "box_geom",
        [0.5],
        lambda s: to_np(s.get_env_geom_impedance())[:, s.info.geom_names.index("box_geom"), 0],
    ),
    "actuator_kp": (
        "servo",
        [35.0],
        lambda s: to_np(s.get_env_actuator_gains().kp)[:, s.info.actuator_names.index("servo")],
    ),
    "actuator_kv": (
        "servo",
        [4.0],
        lambda s: to_np(s.get_env_actuator_gains().kv)[:, s.info.actuator_names.index("servo")],
    ),
    "joint_damping": ("hinge", [0.8], lambda s: to_np(s.get_env_joint_damping())[:, _col(s, "dof", "hinge")]),
    "joint_armature": ("rail", [0.25], lambda s: to_np(s.get_env_joint_armature())[:, _col(s, "dof", "rail")]),
    "joint_frictionloss": ("hinge", [0.3], lambda s: to_np(s.get_env_joint_frictionloss())[:, _col(s, "dof", "hinge")]),
    "gravity": (None, [0.5, -0.25, -4.0], lambda s: to_np(s.get_env_gravity())),
    "joint_default_pos": (
        "slide",
        [0.125],
        lambda s: to_np(s.get_env_default_qpos())[:, _col(s, "joint_qpos", "slide")],
    ),
}


def _set_plan(kind: str, phase: str, seed: int = 0) -> RandomizationPlan:
    target, value, _ = READERS[kind]
    op = "scale" if kind == "body_inertia" else "set"  # inertia takes a scale only (keeps it physical)
    return RandomizationPlan(
        (
            Term(
                kind,
                Distribution.fixed(value),
                phase=phase,
                operation=op,
                targets=None if target is None else (target,),
            ),
        ),
        seed=seed,
    )


def _apply(sim: Any, plan: RandomizationPlan, phase: str, env_ids: list[int]) -> None:
    if phase == "init":
        sim.apply_init_randomization(plan)
    elif phase == "reset":
        sim.set_state(env_ids, sim.get_qpos()[env_ids], sim.get_qvel()[env_ids], randomization=plan)
    else:
        sim.apply_interval_randomization(plan, env_ids)


def snapshot(sim: Any) -> dict[str, torch.Tensor]:
    """The state (qpos, qvel): derived getters follow from it, and their own clauses are tested elsewhere."""
    return {"qpos": sim.get_qpos().clone(), "qvel": sim.get_qvel().clone()}


def _assert_unchanged(sim: Any, before_state: dict, before_params: dict, rows: Any = slice(None)) -> None:
    after_state, after_params = snapshot(sim), env_params(sim)
    for k, v in before_state.items():
        assert torch.equal(after_state[k][rows], v[rows]), f"state {k} changed"
    for k, v in before_params.items():
        np.testing.assert_array_equal(after_params[k][rows], v[rows], err_msg=f"parameter {k} changed")


# ----------------------------------------------------------------------------
# capabilities
# ----------------------------------------------------------------------------
def test_dr_capabilities_are_well_formed(make_sim: Any, dr_model: Path) -> None:
    """Clause: get_dr_capabilities() maps term kinds of the contract to phases; the contract's own terms
    (default pose offsets, pushes) are there on every backend."""
    from simbackend.randomization import TERM_KINDS

    sim = make_sim(dr_model, 2)
    caps = sim.get_dr_capabilities()
    assert set(caps) <= set(TERM_KINDS)
    assert all(set(p) <= set(PHASES) and p for p in caps.values())
    assert caps["joint_default_pos"] == frozenset(PHASES) and caps["body_velocity_delta"] == frozenset(PHASES)
    assert ("body_force" in caps) == bool(sim.capabilities.body_forces)


def test_unsupported_term_raises_or_is_dropped(make_sim: Any, dr_model: Path) -> None:
    """Clause: a term the backend does not declare raises UnsupportedFeatureError naming term, phase and
    backend before anything changes; strict=False skips it and returns its name."""
    from simbackend.randomization import TERM_KINDS

    sim = make_sim(dr_model, 2)
    caps = sim.get_dr_capabilities()
    missing = [k for k in TERM_KINDS if "init" not in caps.get(k, ()) and k in READERS]
    if not missing:
        pytest.skip(f"backend {sim.name!r} applies every term in the init phase")
    kind = missing[0]
    plan = RandomizationPlan(
        (Term("joint_default_pos", Distribution.fixed(0.1), targets=("slide",)), _set_plan(kind, "init").terms[0])
    )
    state, params = snapshot(sim), env_params(sim)
    with pytest.raises(UnsupportedFeatureError, match=f"{kind}.*init") as e:
        sim.apply_init_randomization(plan)
    assert sim.name in str(e.value)
    _assert_unchanged(sim, state, params)
    dropped = sim.apply_init_randomization(plan, strict=False)
    assert dropped == [f"1:{kind}"]
    assert to_np(sim.get_env_default_qpos())[:, _col(sim, "joint_qpos", "slide")] == pytest.approx(0.1)


@pytest.mark.parametrize("kind", ["geom_compliance", "geom_impedance"])
def test_contact_model_getters_refuse_an_undeclared_term(make_sim: Any, dr_model: Path, kind: str) -> None:
    """Clause: get_env_geom_compliance() and get_env_geom_impedance() read MuJoCo's contact model (solref,
    solimp); a backend that declares the term in no phase does not use it, and the getter raises
    UnsupportedFeatureError naming the backend and the term rather than returning the model's values
    (the getters of mass, friction, damping and the like read the model's value there: every engine
    holds those). A backend that declares it reads back ``(N, ngeom, k)``."""
    sim = make_sim(dr_model, 2)
    getter = getattr(sim, f"get_env_{kind}")
    if sim.get_dr_capabilities().get(kind):
        width = 2 if kind == "geom_compliance" else 3
        assert tuple(getter().shape) == (2, sim.info.ngeom, width)
        return
    with pytest.raises(UnsupportedFeatureError, match=rf"{sim.name}.*{kind}"):
        getter()


# ----------------------------------------------------------------------------
# read back, named envs only
# ----------------------------------------------------------------------------
@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("kind", sorted(READERS))
def test_value_reads_back_for_the_named_envs_only(make_sim: Any, dr_model: Path, kind: str, phase: str) -> None:
    """Clause: a randomized value reads back as set (per-env getters, (N, ...)) in the envs named, and
    the other envs keep their state and parameters bit for bit."""
    sim = make_sim(dr_model, 4)
    _supports(sim, kind, phase)
    sim.step(torch.zeros(4, sim.num_actuators), nsteps=3)
    _, value, read = READERS[kind]
    model = read(sim).copy()
    state, params = snapshot(sim), env_params(sim)
    named = [0, 1, 2, 3] if phase == "init" else [3, 1]
    _apply(sim, _set_plan(kind, phase), phase, named)
    got = read(sim)
    expected = np.asarray(value if len(value) > 1 else value[0], np.float64)
    if kind == "body_inertia":
        expected = expected * sim.info.body_inertia[sim.info.body_names.index("cart")]
    for n in range(4):
        if n in named:
            np.testing.assert_allclose(got[n], expected, rtol=1e-6, atol=1e-7, err_msg=f"env {n}")
        else:
            np.testing.assert_array_equal(got[n], model[n])
    others = [n for n in range(4) if n not in named]
    if others:
        _assert_unchanged(sim, state, params, rows=others)


def test_resampling_starts_from_the_model_value(make_sim: Any, dr_model: Path) -> None:
    """Clause: scale and add act on the model's value, so applying a plan again never compounds."""
    sim = make_sim(dr_model, 2)
    _supports(sim, "body_mass", "interval")
    plan = RandomizationPlan((Term("body_mass", Distribution.fixed(2.0), phase="interval", targets=("cart",)),))
    cart = sim.info.body_names.index("cart")
    for _ in range(3):
        sim.apply_interval_randomization(plan)
    np.testing.assert_allclose(to_np(sim.get_env_body_mass())[:, cart], 2.0 * sim.info.body_mass[cart], rtol=1e-6)


def test_scale_inertia_follows_the_mass(make_sim: Any, dr_model: Path) -> None:
    """Clause: body_mass with scale_inertia scales the principal inertia by the mass factor."""
    sim = make_sim(dr_model, 2)
    _supports(sim, "body_mass", "init")
    plan = RandomizationPlan((Term("body_mass", Distribution.fixed(3.0), targets=("cart",), scale_inertia=True),))
    sim.apply_init_randomization(plan)
    cart = sim.info.body_names.index("cart")
    np.testing.assert_allclose(
        to_np(sim.get_env_body_inertia())[:, cart], np.tile(3.0 * sim.info.body_inertia[cart], (2, 1)), rtol=1e-6
    )


# ----------------------------------------------------------------------------
# the physics follows
# ----------------------------------------------------------------------------
def _interval(sim: Any, kind: str, value: Any, env: int, target: Any, **kw: Any) -> None:
    _supports(sim, kind, "interval")
    kw.setdefault("operation", "set")
    plan = RandomizationPlan(
        (Term(kind, Distribution.fixed(value), phase="interval", targets=None if target is None else (target,), **kw),)
    )
    sim.apply_interval_randomization(plan, [env])


def _ctrl(sim: Any, **values: float) -> torch.Tensor:
    ctrl = torch.zeros(sim.num_envs, sim.num_actuators)
    for name, v in values.items():
        ctrl[:, sim.info.actuator_names.index(name)] = v
    return ctrl


def test_heavier_body_accelerates_less(make_sim: Any, dr_model: Path) -> None:
    """Clause: a randomized mass changes the dynamics: the same force gives a = F / m within 1 %, and the
    randomized parameters survive set_state."""
    sim = make_sim(dr_model, 2)
    _interval(sim, "body_mass", 4.0, 1, "cart")
    sim.set_state(None, sim.get_qpos(), sim.get_qvel())
    col = _col(sim, "dof", "rail")
    steps = 100
    sim.step(_ctrl(sim, push=2.0), nsteps=steps)
    a = to_np(sim.get_qvel())[:, col] / (steps * sim.physics_dt)
    np.testing.assert_allclose(a, [2.0 / 1.0, 2.0 / 4.0], rtol=1e-2)


def test_armature_adds_inertia(make_sim: Any, dr_model: Path) -> None:
    """Clause: a randomized joint armature adds to the joint's inertia: a = F / (m + armature) within 1 %."""
    sim = make_sim(dr_model, 2)
    _interval(sim, "joint_armature", 1.0, 1, "rail")
    col = _col(sim, "dof", "rail")
    steps = 100
    sim.step(_ctrl(sim, push=2.0), nsteps=steps)
    a = to_np(sim.get_qvel())[:, col] / (steps * sim.physics_dt)
    np.testing.assert_allclose(a, [2.0, 1.0], rtol=1e-2)


def test_gravity_changes_free_fall(make_sim: Any, dr_model: Path) -> None:
    """Clause: a randomized gravity is the env's free-fall acceleration (v = g t, within 0.1 %)."""
    sim = make_sim(dr_model, 2)
    _interval(sim, "gravity", [0.0, 1.0, -3.0], 1, None)
    ball = sim.get_body_ids("ball")
    steps = 50
    sim.step(_ctrl(sim), nsteps=steps)
    v = to_np(sim.get_body_lin_vel_w(ball))[:, 0]
    t = steps * sim.physics_dt
    np.testing.assert_allclose(v[0], [0.0, 0.0, -9.81 * t], rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(v[1], [0.0, 1.0 * t, -3.0 * t], rtol=1e-3, atol=1e-5)


def test_higher_friction_slides_shorter(make_sim: Any, dr_model: Path, require: Any) -> None:
    """Clause: a randomized geom friction changes contact: a box pushed at the same speed slides a shorter
    distance with the higher friction (only where geoms collide: ``capabilities.contacts``)."""
    require("contacts")
    sim = make_sim(dr_model, 2)
    _interval(sim, "geom_friction", 1.2, 1, "box_geom")
    free = _col(sim, "dof", "box_free")
    qvel = to_np(sim.get_qvel())
    qvel[:, free] = 1.0
    sim.set_state(None, sim.get_qpos(), qvel)
    sim.step(_ctrl(sim), nsteps=400)
    x = to_np(sim.get_body_pos_w(sim.get_body_ids("box")))[:, 0, 0]
    assert x[1] < 0.8 * x[0], f"slide distances {x} (env 1 has the higher friction)"
    assert x[1] > 0.0


def test_higher_kp_settles_faster(make_sim: Any, dr_model: Path) -> None:
    """Clause: a randomized actuator kp changes the servo: a stiffer position servo reaches 90 % of its
    target sooner."""
    sim = make_sim(dr_model, 2)
    _interval(sim, "actuator_kp", 80.0, 1, "servo")
    col = _col(sim, "joint_qpos", "slide")
    reached = np.full(2, -1)
    for k in range(600):
        sim.step(_ctrl(sim, servo=0.1), nsteps=2)
        q = to_np(sim.get_qpos())[:, col]
        reached = np.where((reached < 0) & (q >= 0.09), k, reached)
    assert (reached >= 0).all() and reached[1] < 0.75 * reached[0], f"steps to 90 %: {reached}"


def test_higher_damping_decays_faster(make_sim: Any, dr_model: Path) -> None:
    """Clause: randomized joint damping changes the motion: a pendulum with more damping swings less."""
    sim = make_sim(dr_model, 2)
    _interval(sim, "joint_damping", 0.5, 1, "hinge")
    col = _col(sim, "joint_qpos", "hinge")
    qpos = to_np(sim.get_qpos())
    qpos[:, col] = 0.6
    sim.set_state(None, qpos)
    sim.step(_ctrl(sim), nsteps=500)
    amp = np.zeros(2)
    for _ in range(60):
        sim.step(_ctrl(sim), nsteps=5)
        amp = np.maximum(amp, np.abs(to_np(sim.get_qpos())[:, col]))
    assert amp[1] < 0.7 * amp[0], f"late amplitudes {amp} (env 1 has the higher damping)"


def test_velocity_push_changes_velocity_by_the_delta(make_sim: Any, dr_model: Path) -> None:
    """Clause: apply_body_velocity_delta and the body_velocity_delta term change a free body's frame-origin
    linear velocity and its angular velocity (world) by exactly the delta; positions stay."""
    sim = make_sim(dr_model, 3)
    sim.step(_ctrl(sim), nsteps=5)
    ball = sim.get_body_ids("ball")
    qpos = to_np(sim.get_qpos())
    rot = np.array([0.9, 0.1, 0.3, -0.2]) / np.linalg.norm([0.9, 0.1, 0.3, -0.2])
    qcol = _col(sim, "joint_qpos", "ball_free")
    qpos[:, qcol + 3 : qcol + 7] = rot  # a turned body: the angular delta is world, qvel's angular part local
    sim.set_state(None, qpos, sim.get_qvel())
    lin0, ang0 = to_np(sim.get_body_lin_vel_w(ball)), to_np(sim.get_body_ang_vel_w(ball))
    delta = np.array([[0.5, -1.0, 2.0, 0.3, -0.2, 1.5]])
    sim.apply_body_velocity_delta(ball, delta[None].repeat(2, 0), env_ids=[0, 2])
    lin1, ang1 = to_np(sim.get_body_lin_vel_w(ball)), to_np(sim.get_body_ang_vel_w(ball))
    np.testing.assert_allclose((lin1 - lin0)[[0, 2], 0], delta[:, :3].repeat(2, 0), atol=2e-5)
    np.testing.assert_allclose((ang1 - ang0)[[0, 2], 0], delta[:, 3:].repeat(2, 0), atol=2e-5)
    np.testing.assert_array_equal(lin1[1], lin0[1])
    np.testing.assert_allclose(to_np(sim.get_qpos()), qpos, atol=1e-6)
    # the same through a plan term, in the interval phase
    _interval(sim, "body_velocity_delta", [0.0, 0.0, 1.0, 0.0, 0.0, 0.0], 1, "ball", operation="add")
    np.testing.assert_allclose(to_np(sim.get_body_lin_vel_w(ball))[1, 0] - lin1[1, 0], [0, 0, 1.0], atol=2e-5)


def test_velocity_push_needs_a_free_body(make_sim: Any, dr_model: Path) -> None:
    """Clause: a velocity change of a body without a free joint is rejected, naming it, and changes nothing."""
    sim = make_sim(dr_model, 2)
    state, params = snapshot(sim), env_params(sim)
    with pytest.raises(Exception, match="cart.*free joint"):
        sim.apply_body_velocity_delta(sim.get_body_ids("cart"), np.zeros((2, 1, 6)))
    _assert_unchanged(sim, state, params)


def test_bodies_welded_to_the_world_take_no_mass(make_sim: Any) -> None:
    """Clause: body_mass/com/inertia terms never touch a body welded to the world (no joint between it and
    the world: its mass never acts): naming one is rejected, naming it and changing nothing; an
    untargeted term skips it and changes the moving bodies."""
    sim = make_sim("arm7", 2)
    _supports(sim, "body_mass", "init")
    state, params = snapshot(sim), env_params(sim)
    named = RandomizationPlan(
        (Term("body_mass", Distribution.fixed([2.0]), operation="scale", targets=("base",)),), seed=1
    )
    with pytest.raises(InvalidArgumentError, match="base.*welded"):
        sim.apply_init_randomization(named)
    _assert_unchanged(sim, state, params)
    every = RandomizationPlan((Term("body_mass", Distribution.fixed([2.0]), operation="scale"),), seed=1)
    sim.apply_init_randomization(every)
    mass, names = to_np(sim.get_env_body_mass()), sim.info.body_names
    base, link1 = names.index("base"), names.index("link1")
    np.testing.assert_allclose(mass[:, base], sim.info.body_mass[base], rtol=1e-6)
    np.testing.assert_allclose(mass[:, link1], 2.0 * sim.info.body_mass[link1], rtol=1e-6)


#: an arm whose last link carries a massless frame (a body holding only a site, as real arms' camera frames)
MASSLESS_MJCF = """
<mujoco model="massless_frame">
  <worldbody>
    <body name="link1" pos="0 0 1">
      <joint name="j1" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="1"/>
      <body name="link2" pos="0.3 0 0">
        <joint name="j2" type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="0.5"/>
        <body name="camera_frame" pos="0.3 0 0"><site name="camera" size="0.01"/></body>
      </body>
    </body>
  </worldbody>
  <actuator><motor joint="j1"/><motor joint="j2"/></actuator>
</mujoco>
"""


def test_a_massless_body_does_not_stop_mass_randomization(make_sim: Any, tmp_path: Path) -> None:
    """Clause: body_mass/inertia terms on a model with a massless body (mass 0, e.g. a frame holding only a
    site) apply: a scale keeps the massless body's zeros and changes the named bodies; a value below zero is
    still refused and changes nothing."""
    path = tmp_path / "massless.xml"
    path.write_text(MASSLESS_MJCF)
    sim = make_sim(path, 2)
    _supports(sim, "body_mass", "init")
    names = sim.info.body_names
    link1, frame = names.index("link1"), names.index("camera_frame")
    assert sim.info.body_mass[frame] == 0.0
    every = RandomizationPlan((Term("body_mass", Distribution.fixed([2.0]), operation="scale"),), seed=1)
    sim.apply_init_randomization(every)
    mass = to_np(sim.get_env_body_mass())
    np.testing.assert_allclose(mass[:, link1], 2.0 * sim.info.body_mass[link1], rtol=1e-6)
    state, params = snapshot(sim), env_params(sim)
    below = RandomizationPlan(
        (Term("body_mass", Distribution.fixed([-1.0]), operation="add", targets=("camera_frame",)),), seed=1
    )
    with pytest.raises(ValueRangeError, match="randomized mass"):
        sim.apply_init_randomization(below)
    _assert_unchanged(sim, state, params)


def test_velocity_push_bad_input_changes_nothing(make_sim: Any, dr_model: Path) -> None:
    """Clause: a push with NaN, a wrong shape, or one that would take qvel past the divergence bound is
    rejected naming the problem, and changes nothing."""
    from simbackend.errors import InputShapeError, NonFiniteError

    sim = make_sim(dr_model, 2)
    ball = sim.get_body_ids("ball")
    state, params = snapshot(sim), env_params(sim)
    bad = np.zeros((2, 1, 6))
    bad[1, 0, 2] = np.nan
    with pytest.raises(NonFiniteError, match=r"delta.*\[1\]"):
        sim.apply_body_velocity_delta(ball, bad)
    with pytest.raises(InputShapeError, match="delta"):
        sim.apply_body_velocity_delta(ball, np.zeros((2, 6)))
    with pytest.raises(ValueRangeError):
        sim.apply_body_velocity_delta(ball, np.full((2, 1, 6), 2e5))
    _assert_unchanged(sim, state, params)


def test_held_body_force_acts_for_its_duration(make_sim: Any, dr_model: Path) -> None:
    """Clause: a body_force term holds its force over the steps of its duration, then stops."""
    sim = make_sim(dr_model, 2)
    _supports(sim, "body_force", "interval")
    dt = sim.physics_dt
    plan = RandomizationPlan(
        (
            Term(
                "body_force",
                Distribution.fixed([1.0, 0, 0, 0, 0, 0]),
                phase="interval",
                targets=("ball",),
                duration=20 * dt,
            ),
        )
    )
    sim.apply_interval_randomization(plan, [1])
    ball = sim.get_body_ids("ball")
    for _ in range(4):
        sim.step(_ctrl(sim), nsteps=10)
    v = to_np(sim.get_body_lin_vel_w(ball))[:, 0, 0]
    # 1 N on 0.5 kg for 20 substeps (two calls), then nothing
    np.testing.assert_allclose(v, [0.0, 2.0 * 20 * dt], rtol=1e-3, atol=1e-7)


# ----------------------------------------------------------------------------
# phases
# ----------------------------------------------------------------------------
def test_reset_payload_applies_with_the_state(make_sim: Any, dr_model: Path) -> None:
    """Clause: set_state(..., randomization=plan) writes the state and the reset terms of the named envs
    together; a push term adds to the written qvel."""
    sim = make_sim(dr_model, 3)
    _supports(sim, "body_mass", "reset")
    plan = RandomizationPlan(
        (
            Term("body_mass", Distribution.fixed(3.0), phase="reset", operation="set", targets=("cart",)),
            Term(
                "body_velocity_delta",
                Distribution.fixed([0.0, 0.0, 0.5, 0.0, 0.0, 0.0]),
                phase="reset",
                targets=("ball",),
            ),
            Term("body_mass", Distribution.fixed(9.0), phase="interval", operation="set", targets=("cart",)),
        )
    )
    qpos = to_np(sim.get_qpos())[[2]]
    qpos[:, _col(sim, "joint_qpos", "slide")] = 0.05
    sim.set_state([2], qpos, None, randomization=plan)
    cart = sim.info.body_names.index("cart")
    np.testing.assert_allclose(to_np(sim.get_env_body_mass())[:, cart], [1.0, 1.0, 3.0], rtol=1e-6)
    got = to_np(sim.get_qpos())[2]
    np.testing.assert_allclose(got[_col(sim, "joint_qpos", "slide")], 0.05, atol=1e-7)
    ball_v = to_np(sim.get_body_lin_vel_w(sim.get_body_ids("ball")))[:, 0, 2]
    np.testing.assert_allclose(ball_v, [0.0, 0.0, 0.5], atol=1e-6)


def test_interval_plan_leaves_the_trajectory_before_it(make_sim: Any, dr_model: Path) -> None:
    """Clause: an interval plan applied at step k leaves the trajectory identical to the unrandomized one
    before k, and the env it did not name identical throughout."""
    a, b = make_sim(dr_model, 2), make_sim(dr_model, 2)
    _supports(a, "body_mass", "interval")
    plan = RandomizationPlan(
        (Term("body_mass", Distribution.uniform(2.0, 3.0), phase="interval", targets=("cart", "box")),), seed=5
    )
    ctrl = _ctrl(a, push=1.0, servo=0.05)
    traj_a, traj_b = [], []
    for k in range(30):
        if k == 15:
            a.apply_interval_randomization(plan, [1])
        a.step(ctrl, nsteps=2)
        b.step(ctrl, nsteps=2)
        traj_a.append(to_np(a.get_qpos()))
        traj_b.append(to_np(b.get_qpos()))
    traj_a, traj_b = np.stack(traj_a), np.stack(traj_b)
    np.testing.assert_array_equal(traj_a[:15], traj_b[:15])
    np.testing.assert_array_equal(traj_a[:, 0], traj_b[:, 0])
    assert not np.array_equal(traj_a[15:, 1], traj_b[15:, 1])


# ----------------------------------------------------------------------------
# reproducible sampling
# ----------------------------------------------------------------------------
def test_env_values_do_not_depend_on_num_envs(make_sim: Any, dr_model: Path) -> None:
    """Clause: the values drawn for env i depend on (seed, plan, term, env i, draw count) only: env 3
    gets the same values with N = 4 and N = 64 (bit for bit on one engine; to 1e-4 where a mixed backend
    puts env 3 on another engine at N = 64), and a second draw differs from the first."""
    small, large = make_sim(dr_model, 4), make_sim(dr_model, 64)
    caps = small.get_dr_capabilities()
    terms = [Term("joint_default_pos", Distribution.gaussian(0.0, 0.1, -0.2, 0.2), targets=("slide", "hinge"))]
    terms += [
        Term(k, Distribution.uniform(0.5, 1.5), targets=(READERS[k][0],))
        for k in ("body_mass", "actuator_kp", "geom_friction")
        if "init" in caps.get(k, ())
    ]
    terms += [Term("body_mass", Distribution.log_uniform(0.5, 2.0), phase="interval", targets=("box",))]
    plan = RandomizationPlan(tuple(terms), seed=123)
    small.apply_init_randomization(plan)
    large.apply_init_randomization(plan, strict=False)
    for a, b in zip(env_params(small).values(), env_params(large).values()):
        assert_rows_equal(a, [3], small, b, [3], large)
    assert_rows_equal(
        env_params(small)["default_qpos"], [0, 1, 2, 3], small, env_params(large)["default_qpos"], [0, 1, 2, 3], large
    )
    if "interval" in caps.get("body_mass", ()):
        box = small.info.body_names.index("box")
        small.apply_interval_randomization(plan, [3])
        first = to_np(small.get_env_body_mass())[:, box]
        large.apply_interval_randomization(plan, [3, 40])
        assert_rows_equal(large.get_env_body_mass()[:, box], [3], large, first, [3], small)
        first = first[3]
        small.apply_interval_randomization(plan, [3])
        assert to_np(small.get_env_body_mass())[3, box] != first


# ----------------------------------------------------------------------------
# bad plans change nothing
# ----------------------------------------------------------------------------
BAD_PLANS = {
    "negative mass": (
        Term("body_mass", Distribution.fixed(-1.0), operation="set", targets=("cart",)),
        ValueRangeError,
        "mass",
    ),
    "zero inertia": (Term("body_inertia", Distribution.fixed(0.0), targets=("cart",)), ValueRangeError, "inertia"),
    "negative friction": (
        Term("geom_friction", Distribution.uniform(-1.0, -0.5), targets=("box_geom",)),
        ValueRangeError,
        "friction",
    ),
    "negative damping": (
        Term("joint_damping", Distribution.fixed(-0.1), operation="add", targets=("hinge",)),
        ValueRangeError,
        "damping",
    ),
    "negative armature": (
        Term("joint_armature", Distribution.fixed(-1.0), operation="set", targets=("rail",)),
        ValueRangeError,
        "armature",
    ),
    "unknown name": (Term("body_mass", Distribution.fixed(1.0), targets=("crat",)), UnknownNameError, "cart"),
    "pattern matching nothing": (
        Term("geom_friction", Distribution.fixed(1.0), targets=("wheel_.*",)),
        UnknownNameError,
        "wheel",
    ),
    "world body": (Term("body_mass", Distribution.fixed(1.0), targets=("world",)), InvalidArgumentError, "world"),
    "kp of a motor": (
        Term("actuator_kp", Distribution.fixed(1.0), targets=("push",)),
        InvalidArgumentError,
        "position actuator",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_PLANS))
def test_bad_plan_is_rejected_before_anything_changes(make_sim: Any, dr_model: Path, case: str) -> None:
    """Clause: a plan that is wrong for the model (bad values after sampling, unknown names, targets the
    term cannot take) raises a clear error naming the problem, and nothing changes in any env."""
    sim = make_sim(dr_model, 3)
    term, error, match = BAD_PLANS[case]
    _supports(sim, term.kind, "init")
    ok = Term("joint_default_pos", Distribution.fixed(0.2), targets=("slide",))  # would apply first if not validated
    plan = RandomizationPlan((ok, term))
    sim.step(_ctrl(sim), nsteps=2)
    state, params = snapshot(sim), env_params(sim)
    with pytest.raises(error, match=match):
        sim.apply_init_randomization(plan)
    _assert_unchanged(sim, state, params)
    interval = RandomizationPlan(
        (
            Term(ok.kind, ok.distribution, phase="interval", targets=ok.targets),
            Term(term.kind, term.distribution, phase="interval", operation=term.operation, targets=term.targets),
        )
    )
    with pytest.raises(error, match=match):
        sim.apply_interval_randomization(interval, [1])
    _assert_unchanged(sim, state, params)


def test_bad_env_ids_and_arguments_change_nothing(make_sim: Any, dr_model: Path) -> None:
    """Clause: out-of-range env ids, a non-plan argument and an unknown term name raise, changing nothing."""
    sim = make_sim(dr_model, 3)
    plan = RandomizationPlan(
        (Term("joint_default_pos", Distribution.fixed(0.2), phase="interval", targets=("slide",)),)
    )
    state, params = snapshot(sim), env_params(sim)
    with pytest.raises(EnvIdError):
        sim.apply_interval_randomization(plan, [0, 3])
    with pytest.raises(TypeError, match="RandomizationPlan"):
        sim.apply_interval_randomization(plan.to_dict(), [0])
    with pytest.raises(UnknownNameError, match="interval term"):
        sim.apply_interval_randomization(plan, [0], terms=["0:joint_defualt_pos"])
    with pytest.raises(EnvIdError):
        sim.set_state([5], sim.get_qpos()[:1], randomization=plan)
    _assert_unchanged(sim, state, params)
