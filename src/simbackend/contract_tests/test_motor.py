"""Motors: a PD law with a DC-motor torque-speed limit, computed by the controller, behaves the same on every engine.

A free-spinning wheel on a vertical hinge (no gravity torque, no damping, no
friction) is driven by a motor (gear 2, ctrl range +-0.75: ``E`` = 1.5 N m)
through :class:`~simbackend.controllers.JointPDConfig` with stall torque
``S`` = 2 N m and no-load speed ``V`` = 10 rad/s toward a target 100 rad away,
so the PD torque always exceeds what the motor gives and the torque is the
limit itself: ``min(E, S (1 - v/V))`` (``max(-E, S (-1 - v/V))`` the other way).
The torque of a substep is read from the speed it adds: ``I (v' - v) / dt``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from simbackend.contract_tests.helpers import to_np
from simbackend.controllers import JointPDConfig, make_controller

#: the wheel's moment of inertia about the hinge (kg m^2), the motor's stall torque (N m), no-load speed (rad/s)
INERTIA, STALL, NO_LOAD = 0.01, 2.0, 10.0
#: the motor's own limit: ctrl range 0.75 times gear 2 (N m)
EFFORT = 1.5

MOTOR_MJCF = f"""
<mujoco model="dc_wheel">
  <compiler angle="radian" inertiafromgeom="false"/>
  <option timestep="0.002" gravity="0 0 -9.81"/>
  <worldbody>
    <body name="wheel" pos="0 0 0.5">
      <joint name="spin" type="hinge" axis="0 0 1"/>
      <inertial pos="0 0 0" mass="1" diaginertia="0.006 0.006 {INERTIA}"/>
      <geom type="cylinder" size="0.1 0.02" contype="0" conaffinity="0"/>
    </body>
  </worldbody>
  <actuator>
    <motor name="spin_motor" joint="spin" gear="2" ctrlrange="-0.75 0.75"/>
  </actuator>
</mujoco>
"""


def _curve(v: np.ndarray, target_sign: np.ndarray) -> np.ndarray:
    """The torque of a motor driven hard toward ``target_sign``: the curve's bound on that side, within [-E, E]."""
    top = np.clip(STALL * (1 - v / NO_LOAD), -EFFORT, EFFORT)
    bottom = np.clip(STALL * (-1 - v / NO_LOAD), -EFFORT, EFFORT)
    return np.where(target_sign > 0, top, bottom)


def test_dc_motor_spins_up_to_its_velocity_limit_along_its_torque_speed_curve(
    make_sim: Callable[..., Any], require: Callable[..., None], tmp_path: Path
) -> None:
    """Clause: motors — a PD law on a motor with a DC-motor limit (JointPDConfig saturation_effort, velocity_limit), recomputed every substep through set_pre_step_control, gives the torque of the motor's curve at the joint's speed, clipped to the motor's own limit: a wheel driven toward an unreachable target spins up to its velocity limit and not beyond (both ways), and one spun beyond it is braked back to it."""
    require("pre_step_control")
    path = tmp_path / "dc_wheel.xml"
    path.write_text(MOTOR_MJCF)
    sim = make_sim(str(path), 4)
    dt = float(sim.physics_dt)
    # env 0 and 1 start at rest, driven up and down; env 2 starts above V (between V and the corner speed
    # V (1 + E/S) = 17.5), env 3 beyond the corner: both driven up, the motor brakes them back to V
    v_start = np.array([0.0, 0.0, 15.0, 20.0])
    sign = np.array([1.0, -1.0, 1.0, 1.0])
    sim.set_state(None, np.zeros((4, sim.nq)), v_start[:, None])
    ctl = make_controller(
        sim,
        JointPDConfig(
            ["spin"],
            kp=50.0,
            kd=0.5,
            low=-200.0,
            high=200.0,
            normalize_action=False,
            saturation_effort=STALL,
            velocity_limit=NO_LOAD,
        ),
    )
    target = torch.as_tensor(100.0 * sign[:, None], dtype=torch.float32)
    speeds = [to_np(sim.get_dof_vel())[:, 0]]
    for _ in range(150):  # 0.3 s: 6 time constants I V / S of the spin-up along the curve
        ctl.apply(target, 1)
        speeds.append(to_np(sim.get_dof_vel())[:, 0])
    ctl.detach()
    v = np.stack(speeds)  # (151, 4)
    torque = INERTIA * np.diff(v, axis=0) / dt
    expected = _curve(v[:-1], sign)
    # the first substep of each env is one point of the curve: flat E at rest, S (1 - v/V) above V, -E
    # beyond the corner speed
    np.testing.assert_allclose(expected[0], [EFFORT, -EFFORT, -1.0, -EFFORT])
    err = np.abs(torque - expected)
    assert err.max() < 1e-3 * STALL, (
        f"torque off the curve by {err.max():.4f} N m (env {int(err.max(0).argmax())},"
        f" substep {int(err.max(1).argmax())}): got {torque[err.max(1).argmax()]}, curve {expected[err.max(1).argmax()]}"
    )
    # up to V, and not beyond: from rest each way, and back down to it from above
    up, down = v[:, 0], v[:, 1]
    assert up.max() <= NO_LOAD * (1 + 1e-3) and up[-1] >= 0.99 * NO_LOAD, (up.max(), up[-1])
    assert down.min() >= -NO_LOAD * (1 + 1e-3) and down[-1] <= -0.99 * NO_LOAD, (down.min(), down[-1])
    assert np.all(np.diff(up) >= -1e-4) and np.all(np.diff(down) <= 1e-4), "a spin-up along the curve is monotonic"
    for env in (2, 3):
        assert np.all(np.diff(v[:, env]) <= 1e-4), f"env {env}: braked back toward V, never pushed faster"
        assert NO_LOAD * (1 - 1e-4) <= v[-1, env] <= 1.01 * NO_LOAD, (env, v[-1, env])
