"""Conformance: contact forces (``get_body_contact_force_w``, ``get_body_contact_mask``).

Physical answers, the same on every engine: a box at rest on the floor feels its
weight, upward; a box in the air feels nothing; a falling box feels nothing
until it lands; in a stack, the bottom box feels the floor's push less the top
box's weight. The tolerances are the spread of resting contact between the
engines here (MuJoCo's soft contact and PhysX's rigid one both settle within
0.5 % of ``m g``); a force in the wrong frame, of the wrong sign, from the
wrong body or summed over both sides of a contact is off by ``m g`` or more.

Friction is part of the net force: a box held by static friction on an incline
reads ``m g`` straight up (the normal force alone would lean by the slope
angle: ``m g sin(a)`` sideways at 20 degrees, a third of ``m g``); a box
sliding down reads the normal force ``m g cos(a)`` plus kinetic friction
``mu m g cos(a)`` up the slope, against its slip; a foot pushed sideways
against static friction reads the push, opposite.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from simbackend.contract_tests.helpers import to_np
from simbackend.errors import IndexRangeError, InvalidArgumentError

#: relative tolerance on a resting contact force, against m g
REST_RTOL = 0.03

STACK_MJCF = """
<mujoco model="stack">
  <option timestep="0.002" gravity="0 0 -9.81"/>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 0.1"/>
    <body name="bottom" pos="0 0 0.1">
      <freejoint/>
      <geom type="box" size="0.1 0.1 0.1" mass="2"/>
    </body>
    <body name="top" pos="0 0 0.3">
      <freejoint/>
      <geom type="box" size="0.08 0.08 0.08" mass="1"/>
    </body>
    <body name="apart" pos="1 0 0.3">
      <freejoint/>
      <geom type="sphere" size="0.05" mass="0.5"/>
    </body>
  </worldbody>
</mujoco>
"""


#: relative tolerance on a sliding box's friction, against ``mu N`` (means over 200 substeps): MuJoCo and
#: SAPIEN read ``mu N`` to 1e-4 here; the margin is for soft-contact engines whose friction cone is
#: regularised; a reading without friction is off by all of it
SLIDE_RTOL = 0.05


def _incline_mjcf(kind: str, degrees: tuple[float, ...], mu: float) -> str:
    """Boxes (2 kg, half-size 0.1) resting on inclines tilted about y, placed on the surface and tilted
    with it: ``kind="plane"`` one tilted floor plane (one angle), ``kind="ramp"`` one static tilted
    box (a ramp, world geom) per angle, side by side. Box and incline have the same friction ``mu``,
    so every engine's friction combination gives ``mu``."""
    fr = f'friction="{mu} 0.005 0.0001"'
    parts = []
    for i, deg in enumerate(degrees):
        a = np.radians(deg)
        n = np.array([np.sin(a), 0.0, np.cos(a)])  # the incline's normal (a tilt about y)
        y = 0.6 * i
        if kind == "plane":
            parts.append(f'<geom name="incline{i}" type="plane" size="3 3 0.1" euler="0 {deg} 0" {fr}/>')
            top = np.zeros(3)
        else:  # a 1 x 0.4 x 0.1 m ramp whose top face passes through (0, y, 0.5)
            top = np.array([0.0, y, 0.5])
            c = top - 0.05 * n
            parts.append(
                f'<geom name="incline{i}" type="box" size="0.5 0.2 0.05" pos="{c[0]} {c[1]} {c[2]}"'
                f' euler="0 {deg} 0" {fr}/>'
            )
        p = top + 0.1 * n
        parts.append(
            f'<body name="box{i}" pos="{p[0]} {p[1]} {p[2]}" euler="0 {deg} 0"><freejoint/>'
            f'<geom type="box" size="0.1 0.1 0.1" mass="2" {fr}/></body>'
        )
    return f"""
<mujoco model="incline">
  <compiler angle="degree"/>
  <option timestep="0.002" gravity="0 0 -9.81"/>
  <worldbody>
    {"".join(parts)}
  </worldbody>
</mujoco>
"""


#: a 2 kg box on the floor on two slides (x, z) from the world: a link of an articulation on every
#: engine that has them, pushed sideways by a motor on the x slide (a foot pushing off)
FOOT_MJCF = """
<mujoco model="foot">
  <option timestep="0.002" gravity="0 0 -9.81"/>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 0.1" friction="1 0.005 0.0001"/>
    <body name="foot" pos="0 0 0.1">
      <joint name="sx" type="slide" axis="1 0 0"/>
      <joint name="sz" type="slide" axis="0 0 1"/>
      <geom type="box" size="0.1 0.1 0.1" mass="2" friction="1 0.005 0.0001"/>
    </body>
  </worldbody>
  <actuator>
    <motor name="push" joint="sx" gear="1"/>
  </actuator>
</mujoco>
"""


def _settled(sim: Any, substeps: int = 400) -> None:
    for _ in range(substeps // 10):
        sim.step(None, nsteps=10)


def _weight(sim: Any, body: str) -> float:
    b = int(sim.get_body_ids(body)[0])
    return float(to_np(sim.get_env_body_mass())[0, b]) * 9.81


def test_box_at_rest_feels_its_weight_upward(make_sim: Callable[..., Any], require: Callable[..., None]) -> None:
    """Clause: contact forces — a box at rest on the floor reads m g upward (world frame) on every env; the world body reads zero; the contact mask is set above the threshold and clear below."""
    require("contact_forces")
    sim = make_sim("box_drop", 3, contact_sensing=True)
    _settled(sim)
    box = sim.get_body_ids("box")
    f = to_np(sim.get_body_contact_force_w(box))[:, 0]
    mg = _weight(sim, "box")
    np.testing.assert_allclose(f[:, 2], mg, rtol=REST_RTOL, err_msg="vertical contact force on a resting box")
    np.testing.assert_allclose(f[:, :2], 0.0, atol=REST_RTOL * mg, err_msg="horizontal force on a resting box")
    whole = to_np(sim.get_body_contact_force_w())
    assert whole.shape == (3, len(sim.body_names), 3)
    np.testing.assert_array_equal(whole[:, 0], 0.0, err_msg="the world body reads zero")
    np.testing.assert_allclose(whole[:, int(box[0])], f, rtol=1e-6, atol=1e-6)
    mask = sim.get_body_contact_mask(box, threshold=0.5 * mg)
    assert mask.dtype == torch.bool and tuple(mask.shape) == (3, 1) and bool(mask.all())
    assert not bool(sim.get_body_contact_mask(box, threshold=2 * mg).any())


def test_falling_box_feels_nothing_until_it_lands(make_sim: Callable[..., Any], require: Callable[..., None]) -> None:
    """Clause: contact forces — a box in the air reads zero at every substep of its fall, and its weight's order once it lands."""
    require("contact_forces")
    sim = make_sim("box_drop", 2, contact_sensing=True)
    qpos = np.tile(to_np(sim.get_default_qpos()), (2, 1))
    qpos[1, 2] = 0.6  # env 1 starts higher: still falling when env 0 has landed
    sim.set_state(None, qpos)
    box = sim.get_body_ids("box")
    mg = _weight(sim, "box")
    landed = [False, False]
    for _ in range(300):
        sim.step(None)
        z = to_np(sim.get_body_pos_w(box))[:, 0, 2]
        f = to_np(sim.get_body_contact_force_w(box))[:, 0]
        for e in range(2):
            if z[e] > 0.102 and not landed[e]:  # 2 mm above the floor and not bounced yet
                np.testing.assert_array_equal(f[e], 0.0, err_msg=f"env {e} in the air at z = {z[e]:.4f}")
            elif np.abs(f[e]).max() > 0:
                landed[e] = True
    assert all(landed), "a box that fell onto the floor never read a contact force"
    _settled(sim, 600)
    f = to_np(sim.get_body_contact_force_w(box))[:, 0]
    np.testing.assert_allclose(f[:, 2], mg, rtol=REST_RTOL)


def test_stack_reads_each_bodys_own_contacts(
    make_sim: Callable[..., Any], require: Callable[..., None], tmp_path: Path
) -> None:
    """Clause: contact forces — in a resting stack the bottom box reads its weight (the floor's push less the top box's weight) and the top box its weight; a sphere dropped apart reads its own: each body reads the force on itself, one side of each contact."""
    require("contact_forces")
    path = tmp_path / "stack.xml"
    path.write_text(STACK_MJCF)
    sim = make_sim(str(path), 2, contact_sensing=True)
    _settled(sim, 600)
    ids = sim.get_body_ids(["bottom", "top", "apart"])
    f = to_np(sim.get_body_contact_force_w(ids))
    w_bottom, w_top = _weight(sim, "bottom"), _weight(sim, "top")
    np.testing.assert_allclose(f[:, 0, 2], w_bottom, rtol=REST_RTOL, err_msg="bottom box: floor push less top box")
    np.testing.assert_allclose(f[:, 1, 2], w_top, rtol=REST_RTOL, err_msg="top box: its weight")
    np.testing.assert_allclose(f[:, 2, 2], _weight(sim, "apart"), rtol=REST_RTOL, err_msg="sphere on the floor")
    np.testing.assert_allclose(f[..., :2], 0.0, atol=REST_RTOL * w_bottom, err_msg="horizontal forces at rest")
    order = to_np(sim.get_body_contact_force_w(ids[[1, 0]]))
    np.testing.assert_array_equal(order, f[:, [1, 0]], err_msg="bodies are read in the order given")


def test_applied_force_is_not_a_contact_force(make_sim: Callable[..., Any], require: Callable[..., None]) -> None:
    """Clause: contact forces — a body force lifting half a resting box's weight halves its contact force: the readout holds contact forces only."""
    require("contact_forces")
    require("body_forces")
    sim = make_sim("box_drop", 2, contact_sensing=True)
    _settled(sim)
    box = sim.get_body_ids("box")
    mg = _weight(sim, "box")
    lift = np.zeros((2, 1, 3))
    lift[0, 0, 2] = 0.5 * mg
    for _ in range(100):
        sim.apply_body_force(box, lift)
        sim.step(None)
    f = to_np(sim.get_body_contact_force_w(box))[:, 0, 2]
    np.testing.assert_allclose(f, [0.5 * mg, mg], rtol=REST_RTOL)


def test_written_envs_read_zero_until_they_step(make_sim: Callable[..., Any], require: Callable[..., None]) -> None:
    """Clause: contact forces — set_state zeroes the written envs' contact forces until their next step; the others keep theirs."""
    require("contact_forces")
    sim = make_sim("box_drop", 3, contact_sensing=True)
    _settled(sim)
    box = sim.get_body_ids("box")
    before = to_np(sim.get_body_contact_force_w(box))
    qpos = to_np(sim.get_qpos())
    sim.set_state([1], qpos[1:2])
    after = to_np(sim.get_body_contact_force_w(box))
    np.testing.assert_array_equal(after[1], 0.0)
    np.testing.assert_array_equal(after[[0, 2]], before[[0, 2]])
    sim.step(None)
    assert to_np(sim.get_body_contact_force_w(box))[1, 0, 2] > 0.5 * _weight(sim, "box")


def test_contact_force_bad_arguments(make_sim: Callable[..., Any], require: Callable[..., None]) -> None:
    """Clause: errors — contact forces without the contact_sensing option, a body id out of range and a negative or NaN threshold each raise one line naming the argument."""
    require("contact_forces")
    plain = make_sim("box_drop", 1)
    with pytest.raises(InvalidArgumentError, match="contact_sensing"):
        plain.get_body_contact_force_w()
    with pytest.raises(InvalidArgumentError, match="contact_sensing"):
        plain.get_body_contact_mask()
    sim = make_sim("box_drop", 1, contact_sensing=True)
    nb = len(sim.body_names)
    with pytest.raises(IndexRangeError, match="body_ids"):
        sim.get_body_contact_force_w([nb])
    for bad in (-1.0, float("nan"), "1"):
        with pytest.raises((InvalidArgumentError, TypeError), match="threshold"):
            sim.get_body_contact_mask(None, threshold=bad)


@pytest.mark.parametrize(
    ("kind", "degrees"), [("plane", (10.0,)), ("plane", (20.0,)), ("plane", (30.0,)), ("ramp", (10.0, 20.0, 30.0))]
)
def test_box_held_by_static_friction_on_an_incline_reads_its_weight_straight_up(
    make_sim: Callable[..., Any], require: Callable[..., None], tmp_path: Path, kind: str, degrees: tuple
) -> None:
    """Clause: contact forces — the net contact force includes friction: a box held by static friction on an
    incline (a tilted plane, or a tilted static box), at 10, 20 and 30 degrees, reads m g straight up (normal
    force and static friction together carry its weight; the normal force alone leans by the slope angle)."""
    require("contact_forces")
    path = tmp_path / f"incline_{kind}.xml"
    path.write_text(_incline_mjcf(kind, degrees, mu=1.0))  # mu = 1 > tan(30 degrees): every box stays
    sim = make_sim(str(path), 2, contact_sensing=True)
    _settled(sim)
    names = [f"box{i}" for i in range(len(degrees))]
    f = to_np(sim.get_body_contact_force_w(sim.get_body_ids(names)))
    for i, deg in enumerate(degrees):
        mg = _weight(sim, names[i])
        np.testing.assert_allclose(
            f[:, i], np.tile([0.0, 0.0, mg], (2, 1)), atol=REST_RTOL * mg, err_msg=f"box on a {deg} degree {kind}"
        )


def test_box_sliding_down_an_incline_reads_normal_force_and_kinetic_friction(
    make_sim: Callable[..., Any], require: Callable[..., None], tmp_path: Path
) -> None:
    """Clause: contact forces — a box sliding down a 30 degree incline (mu = 0.2 < tan 30) reads the normal
    force N = m g cos(a) along the incline's normal plus kinetic friction mu N in the incline's plane, against
    its slip, mu the model's friction (get_env_geom_friction); means over 200 substeps (0.4 s)."""
    require("contact_forces")
    deg = 30.0
    path = tmp_path / "slide.xml"
    path.write_text(_incline_mjcf("plane", (deg,), mu=0.2))
    sim = make_sim(str(path), 2, contact_sensing=True)
    box = sim.get_body_ids("box0")
    mu = to_np(sim.get_env_geom_friction())[:, :, 0]
    assert np.allclose(mu, 0.2), "box and incline carry the model's friction"
    for _ in range(5):  # 0.1 s: sliding, clear of the start
        sim.step(None, nsteps=10)
    a = np.radians(deg)
    normal = np.array([np.sin(a), 0.0, np.cos(a)])
    # the mean over 200 substeps: a box sliding on MuJoCo's soft contacts rattles, so one substep's normal
    # force ranges over 0 to 2 m g cos(a); the mean is m g cos(a) on every engine, and friction at mu N in
    # each substep is mu times the mean normal force
    f = np.zeros((2, 3))
    for _ in range(200):
        sim.step(None)
        f += to_np(sim.get_body_contact_force_w(box))[:, 0] / 200
    v = to_np(sim.get_body_lin_vel_w(box))[:, 0]
    mg = _weight(sim, "box0")
    n_part = f @ normal
    t_part = f - n_part[:, None] * normal
    slip = v - (v @ normal)[:, None] * normal
    assert (np.linalg.norm(slip, axis=1) > 0.1).all(), f"the box slides down: slip velocity {slip}"
    np.testing.assert_allclose(n_part, mg * np.cos(a), rtol=REST_RTOL, err_msg="normal force, m g cos(a)")
    np.testing.assert_allclose(
        np.linalg.norm(t_part, axis=1), mu[:, 0] * n_part, rtol=SLIDE_RTOL, err_msg="kinetic friction, mu N"
    )
    against = -(t_part * slip).sum(1) / (np.linalg.norm(t_part, axis=1) * np.linalg.norm(slip, axis=1))
    np.testing.assert_allclose(against, 1.0, atol=0.01, err_msg="friction opposes the slip")


def test_foot_pushing_sideways_reads_the_tangential_force(
    make_sim: Callable[..., Any], require: Callable[..., None], tmp_path: Path
) -> None:
    """Clause: contact forces — a foot (a link on slide joints, pressed on the floor by its weight) pushed
    sideways by a motor below the static-friction limit stays and reads the push, opposite, as its contact
    force's horizontal part, and its weight as the vertical part; an unpushed one reads no horizontal force."""
    require("contact_forces")
    path = tmp_path / "foot.xml"
    path.write_text(FOOT_MJCF)
    sim = make_sim(str(path), 3, contact_sensing=True)
    foot = sim.get_body_ids("foot")
    mg = _weight(sim, "foot")
    push = torch.tensor([[0.0], [5.0], [-8.0]])  # newtons, below mu m g = 19.6
    for _ in range(40):
        sim.step(push, nsteps=10)
    f = to_np(sim.get_body_contact_force_w(foot))[:, 0]
    want = np.stack([-to_np(push)[:, 0], np.zeros(3), np.full(3, mg)], 1)
    np.testing.assert_allclose(f, want, atol=REST_RTOL * mg, err_msg="contact force of a foot pushed sideways")
    assert np.abs(to_np(sim.get_qpos())[:, 0]).max() < 0.01, "static friction holds the foot"
