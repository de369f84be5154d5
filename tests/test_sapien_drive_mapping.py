"""SAPIEN's joint drives mean what MuJoCo's servos mean: PhysX integrates a drive's stiffness implicitly
(an extra damping ``kp h``), so the plan gives the drive ``D - K h`` (``Plan.drive_damping``), also per env
once gains are randomized. The step response itself is the conformance clause
``contract_tests/test_mapping.py``; these tests pin the mapping's numbers and its randomized path."""

from __future__ import annotations

from pathlib import Path

import mujoco
import numpy as np

from simbackend.backends.sapien.plan import build_plan
from simbackend.contract_tests.test_mapping import SERVO_MJCF, _response
from simbackend.models import model_info
from simbackend.randomization import Distribution, RandomizationPlan, Term
from simbackend.registry import make_backend


def _plan(xml: str):  # noqa: ANN202 - the plan of a model string
    m = mujoco.MjModel.from_xml_string(xml)
    return build_plan(m, model_info(m))


def test_drive_damping_subtracts_the_stiffness_over_one_step() -> None:
    """kv 0.5 + joint damping 0.05 with kp 20 at 5 ms: PhysX gets 0.55 - 20 x 0.005 = 0.45 (0.5 where the
    joint has no damping); under RK4 nothing is subtracted; a servo damped less than kp h gets 0 and a note
    names its joint."""
    plan = _plan(SERVO_MJCF)
    j = [plan.info.joint_names.index(n) for n in ("arm_swing", "limited_swing")]
    np.testing.assert_allclose(plan.damping[j], [0.55, 0.5])
    np.testing.assert_allclose(plan.drive_damping(plan.stiffness, plan.damping)[j], [0.45, 0.4])
    rk4 = _plan(SERVO_MJCF.replace('integrator="implicitfast"', 'integrator="RK4"'))
    np.testing.assert_allclose(rk4.drive_damping(rk4.stiffness, rk4.damping)[j], [0.55, 0.5])
    light = _plan(SERVO_MJCF.replace('kv="0.5"', 'kv="0.02"', 1).replace('damping="0.05"', 'damping="0"'))
    assert light.drive_damping(light.stiffness, light.damping)[j[0]] == 0.0
    assert any("'arm_swing'" in n and "stiffness x timestep" in n for n in light.notes), light.notes
    assert not any("stiffness x timestep" in n for n in plan.notes)


def test_randomized_gains_keep_mujocos_step_response(tmp_path: Path) -> None:
    """Per-env kp and kv (the drive tables domain randomization writes) get the same compensation: the
    servos' step responses follow MuJoCo's with the same draws (within 1 % of the step)."""
    path = tmp_path / "servo.xml"
    path.write_text(SERVO_MJCF)
    plan = RandomizationPlan(
        (
            Term("actuator_kp", Distribution.uniform(10.0, 40.0), operation="set"),
            Term("actuator_kv", Distribution.uniform(0.3, 1.0), operation="set"),
        ),
        seed=5,
    )
    out = {}
    for name in ("mujoco", "sapien"):
        with make_backend(name, str(path), 3) as sim:
            sim.apply_init_randomization(plan)
            out[name] = _response(sim)
    assert np.ptp(out["mujoco"][20, :, 0]) > 0.0, "the draws should differ per env"
    size = np.array([0.15, 1.0, 0.5])[:, None]
    assert (np.abs(out["sapien"] - out["mujoco"]).max(axis=0) / size).max() < 0.01


def test_joint_force_cap_reaches_drives_and_motors() -> None:
    """A joint's actuatorfrcrange (MuJoCo's URDF reader's ``<limit effort>``) is the drive's force limit
    (the smaller of it and the servo's own) and a motor's force range through its gear."""
    xml = """<mujoco><worldbody>
      <body name="a" pos="0 0 1"><joint name="servoed" type="hinge" axis="0 1 0" actuatorfrcrange="-3 3"/>
        <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02"/></body>
      <body name="b" pos="0 1 1"><joint name="tight" type="hinge" axis="0 1 0" actuatorfrcrange="-9 9"/>
        <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02"/></body>
      <body name="c" pos="0 2 1"><joint name="motored" type="hinge" axis="0 1 0" actuatorfrcrange="-1 2"/>
        <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02"/></body></worldbody>
      <actuator><position joint="servoed" kp="10"/><position joint="tight" kp="10" forcerange="-5 5"/>
        <motor joint="motored" gear="-2" ctrlrange="-5 5"/></actuator></mujoco>"""
    plan = _plan(xml)
    j = [plan.info.joint_names.index(n) for n in ("servoed", "tight", "motored")]
    np.testing.assert_allclose(plan.force_limit[j[:2]], [3.0, 5.0])
    np.testing.assert_allclose(plan.motor_force_range[2], [-1.0, 0.5])  # (-1, 2) N m through gear -2
