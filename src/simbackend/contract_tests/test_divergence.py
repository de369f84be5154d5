"""Conformance: divergence is defined once, in the contract (``simbackend.divergence``).

The same blow-up must give the same ``info["diverged"]`` mask and the same
restored state on every backend: the thresholds are the contract's
(``MAX_QPOS``, ``MAX_QVEL``), not an engine's. Each test checks the exact mask,
that the diverged env is back bit for bit at its state from before the call,
and that the other envs advanced exactly as on a twin backend that never saw
the blow-up.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from simbackend.contract_tests.helpers import to_np
from simbackend.divergence import MAX_QPOS, MAX_QVEL, diverged_rows
from simbackend.errors import ValueRangeError

#: a slider driven by a motor with no ctrl or force range: any ctrl reaches the joint
UNLIMITED_MOTOR_XML = """
<mujoco model="unlimited_motor">
  <option timestep="0.002" gravity="0 0 0"/>
  <worldbody>
    <body name="cart">
      <joint name="slide" type="slide" axis="1 0 0"/>
      <geom type="box" size="0.1 0.1 0.1" mass="1" contype="0" conaffinity="0"/>
    </body>
  </worldbody>
  <actuator>
    <motor name="push" joint="slide" gear="1"/>
  </actuator>
</mujoco>
"""


def _state(sim: Any) -> tuple[np.ndarray, np.ndarray]:
    return to_np(sim.get_qpos()), to_np(sim.get_qvel())


def _check(sim: Any, twin: Any, before: tuple[np.ndarray, np.ndarray], info: dict, expected: list[bool]) -> None:
    mask = to_np(info["diverged"]).astype(bool)
    np.testing.assert_array_equal(mask, expected, err_msg="diverged mask differs from the contract's definition")
    q, v = _state(sim)
    bad = np.asarray(expected)
    np.testing.assert_array_equal(q[bad], before[0][bad], err_msg="a diverged env did not get back its pre-call qpos")
    np.testing.assert_array_equal(v[bad], before[1][bad], err_msg="a diverged env did not get back its pre-call qvel")
    tq, tv = _state(twin)
    np.testing.assert_allclose(q[~bad], tq[~bad], rtol=0, atol=1e-6, err_msg="the other envs did not advance normally")
    np.testing.assert_allclose(v[~bad], tv[~bad], rtol=0, atol=1e-6, err_msg="the other envs did not advance normally")


def test_rule_thresholds() -> None:
    """Clause: divergence — the rule flags non-finite values, |qpos| > MAX_QPOS and |qvel| > MAX_QVEL, for numpy and torch alike."""
    import torch

    q = np.zeros((5, 2))
    v = np.zeros((5, 3))
    q[1, 0] = np.nan
    q[2, 1] = -1.0001 * MAX_QPOS
    v[3, 2] = 1.0001 * MAX_QVEL
    v[4, 0] = np.inf
    want = [False, True, True, True, True]
    np.testing.assert_array_equal(diverged_rows(q, v), want)
    np.testing.assert_array_equal(diverged_rows(torch.as_tensor(q), torch.as_tensor(v)).numpy(), want)
    q[2, 1], v[3, 2] = MAX_QPOS, MAX_QVEL  # the bounds themselves are allowed
    np.testing.assert_array_equal(diverged_rows(q, v), [False, True, False, False, True])


def test_set_state_rejects_what_the_rule_flags(make_sim: Callable[..., Any]) -> None:
    """Clause: divergence — set_state rejects (ValueRangeError, naming env ids) a state the rule would flag at once: qvel 1e8 on arm7 env 1, |qpos| 1e11, a quaternion of 1e300; nothing is written."""
    sim = make_sim("arm7", 3)
    q0, v0 = _state(sim)
    qvel = np.zeros((3, sim.nv))
    qvel[1, 0] = 1e8
    with pytest.raises(ValueRangeError, match=r"qvel.*\[1\]"):
        sim.set_state(None, q0, qvel)
    qpos = q0.astype(np.float64).copy()
    qpos[2, 0] = 1e11
    with pytest.raises(ValueRangeError, match=r"qpos.*\[2\]"):
        sim.set_state(None, qpos)
    quat = int(sim.info.quat_qpos_index[0])
    qpos = q0.astype(np.float64).copy()
    qpos[0, quat : quat + 4] = [0.0, 0.0, 1.0, 1e300]
    with pytest.raises(ValueRangeError, match=r"qpos.*\[0\]"):
        sim.set_state(None, qpos)
    q, v = _state(sim)
    np.testing.assert_array_equal(q, q0)
    np.testing.assert_array_equal(v, v0)


def test_nan_producing_force(make_sim: Callable[..., Any], require: Callable[..., None]) -> None:
    """Clause: divergence — 1e30 N on cartpole's pole in env 1 flags exactly env 1, which keeps its pre-call state; env 0 steps as on a twin."""
    require("divergence_detection")
    require("body_forces")
    sim, twin = make_sim("cartpole", 2), make_sim("cartpole", 2)
    for s in (sim, twin):
        s.set_state(None, np.full((2, 2), 0.1), np.full((2, 2), 0.2))
    pole = int(sim.get_body_ids("pole")[0])
    f = np.zeros((2, 1, 3))
    f[1, 0] = [1e30, 0.0, 0.0]
    sim.apply_body_force([pole], f)
    before = _state(sim)
    ctrl = np.zeros((2, 1))
    twin.step(ctrl)
    _check(sim, twin, before, sim.step(ctrl), [False, True])


def test_push_on_a_robot_standing_in_contact(make_sim: Callable[..., Any], require: Callable[..., None]) -> None:
    """Clause: divergence — 1e30 N on the torso of the quadruped standing on its feet (a free base in contact) in env 1 of 3 flags exactly env 1, which keeps its pre-call state, and envs 0 and 2 step as on a twin; the next step goes on (an engine whose solver fails on the blown-up state reports it, it does not raise)."""
    require("divergence_detection")
    require("body_forces")
    sim, twin = make_sim("quadruped", 3), make_sim("quadruped", 3)
    # torques of a few N m, another per env and joint: what the other envs step with must be kept
    ctrl = 0.3 * np.sin(np.arange(3 * sim.num_actuators)).reshape(3, -1)
    for s in (sim, twin):
        s.set_state(None, np.tile(to_np(s.get_keyframe_qpos("stand")), (3, 1)), np.zeros((3, s.nv)))
        s.step(ctrl, 2)  # the feet touch the floor: contacts in the solve the push blows up
    torso = int(sim.get_body_ids("torso")[0])
    f = np.zeros((3, 1, 3))
    f[1, 0, 2] = 1e30
    sim.apply_body_force([torso], f)
    before = _state(sim)
    twin.step(ctrl, 2)
    _check(sim, twin, before, sim.step(ctrl, 2), [False, True, False])
    info = sim.step(ctrl, 2)
    assert not to_np(info["diverged"]).any(), "the step after a flagged push diverged"


def test_enormous_control(make_sim: Callable[..., Any], require: Callable[..., None], tmp_path: Path) -> None:
    """Clause: divergence — an enormous (finite) motor command in env 1 of 3 on an unlimited motor flags exactly env 1, which keeps its pre-call state."""
    require("divergence_detection")
    path = tmp_path / "unlimited_motor.xml"
    path.write_text(UNLIMITED_MOTOR_XML)
    sim, twin = make_sim(str(path), 3), make_sim(str(path), 3)
    for s in (sim, twin):
        s.set_state(None, np.array([[0.1], [0.2], [0.3]]), np.array([[1.0], [2.0], [3.0]]))
    before = _state(sim)
    ctrl = np.array([[1.0], [1e30], [-1.0]])
    twin.step(np.array([[1.0], [0.0], [-1.0]]))
    _check(sim, twin, before, sim.step(ctrl), [False, True, False])


def test_speed_threshold_is_the_contracts(make_sim: Callable[..., Any], require: Callable[..., None]) -> None:
    """Clause: divergence — a free box flying at 0.99 MAX_QVEL is not diverged; pushed past MAX_QVEL by a finite force in one step it is, on every engine (not at an engine's own limit)."""
    require("divergence_detection")
    require("body_forces")
    sim = make_sim("box_drop", 2)
    cols = sim.get_joint_qvel_indices("box_free")
    qpos = np.tile(to_np(sim.get_default_qpos()), (2, 1))
    qpos[:, 2] = 1.0  # in the air: nothing to touch while it flies parallel to the floor
    qvel = np.zeros((2, sim.nv))
    qvel[:, int(cols[0])] = 0.99 * MAX_QVEL
    sim.set_state(None, qpos, qvel)
    info = sim.step(None)
    assert not to_np(info["diverged"]).any(), "a speed below the contract's threshold was flagged"
    box = int(sim.get_body_ids("box")[0])
    mass = float(to_np(sim.get_env_body_mass())[0, box])
    before = _state(sim)
    f = np.zeros((2, 1, 3))
    f[1, 0, 0] = mass * 0.05 * MAX_QVEL / sim.physics_dt  # +5 % of the threshold in one substep
    sim.apply_body_force([box], f)
    info = sim.step(None)
    np.testing.assert_array_equal(to_np(info["diverged"]).astype(bool), [False, True])
    q, v = _state(sim)
    np.testing.assert_array_equal(q[1], before[0][1])
    np.testing.assert_array_equal(v[1], before[1][1])
    assert abs(v[0, int(cols[0])]) < MAX_QVEL


@pytest.mark.parametrize(
    ("body", "magnitude", "state"),
    [("cart", 1e15, (0.1, 0.2)), ("pole", 1e30, (0.0, 0.0)), ("cart", 1e30, (0.0, 0.0))],
    ids=["1e15-on-the-moving-cart", "1e30-on-the-pole-at-rest", "1e30-on-the-cart-at-rest"],
)
def test_a_push_no_engine_integrates_is_flagged(
    make_sim: Callable[..., Any], require: Callable[..., None], body: str, magnitude: float, state: tuple
) -> None:
    """Clause: divergence — rule 5: a force whose speed change within the step, |F| dt times the body's inverse weight (body_invweight0), exceeds MAX_QVEL flags exactly that env, on every engine (PhysX would drop it or zero the velocities), and it keeps its pre-call state."""
    require("divergence_detection")
    require("body_forces")
    sim, twin = make_sim("cartpole", 3), make_sim("cartpole", 3)
    for s in (sim, twin):
        s.set_state(None, np.full((3, 2), state[0]), np.full((3, 2), state[1]))
    b = int(sim.get_body_ids(body)[0])
    f = np.zeros((3, 1, 3))
    f[1, 0] = [magnitude, 0.0, 0.0]
    sim.apply_body_force([b], f)
    before = _state(sim)
    ctrl = np.zeros((3, 1))
    twin.step(ctrl, 2)
    _check(sim, twin, before, sim.step(ctrl, 2), [False, True, False])


def test_a_hard_push_within_the_rule_is_integrated_alike(
    make_sim: Callable[..., Any], require: Callable[..., None]
) -> None:
    """Clause: divergence — a push whose speed change stays well under rule 5's bound (1 % of MAX_QVEL on the cart) is not flagged, and moves the cart along the force."""
    require("divergence_detection")
    require("body_forces")
    sim = make_sim("cartpole", 2)
    cart = int(sim.get_body_ids("cart")[0])
    mass = float(to_np(sim.get_env_body_mass())[0, cart])  # the cart drags the pole: its inverse weight is below 1/mass
    f = np.zeros((2, 1, 3))
    f[1, 0, 0] = 0.01 * MAX_QVEL * mass / sim.physics_dt
    sim.apply_body_force([cart], f)
    info = sim.step(np.zeros((2, 1)))
    assert not to_np(info["diverged"]).any(), "a push within rule 5's bound was flagged"
    slide = int(sim.get_joint_qvel_indices(sim.joint_names[0])[0])
    v = to_np(sim.get_qvel())
    assert v[1, slide] > 100 * max(abs(v[0, slide]), 1.0), "the pushed cart did not speed up along the force"
