"""Conformance: the legged-robot randomization terms — action latency and motor strength.

Every test talks only to the contract. Expected effects come from the term's
definition and Newton's laws on small models written here: a delayed servo's
trajectory is the undelayed one shifted by the latency; a stronger motor gives
proportionally more force (acceleration), a stronger servo a proportionally
smaller steady-state error and a proportionally higher force limit. A backend
that does not declare a term is checked to refuse it by name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from simbackend.contract_tests.helpers import DR_MJCF, to_np
from simbackend.errors import UnsupportedFeatureError, ValueRangeError
from simbackend.randomization import Distribution, RandomizationPlan, Term

#: a 1 kg body on a vertical slide held by a position servo (kp 100, kv 20, force limit 15 N) against
#: gravity, and a 1 kg cart on a horizontal rail pushed by a motor (gain 1, no limits)
LIFT_MJCF = """
<mujoco model="strength_bench">
  <option timestep="0.002" gravity="0 0 -9.81"/>
  <worldbody>
    <body name="lift" pos="0 0 1">
      <joint name="lift_z" type="slide" axis="0 0 1"/>
      <inertial pos="0 0 0" mass="1" diaginertia="0.01 0.01 0.01"/>
      <geom name="lift_geom" type="sphere" size="0.05" contype="0" conaffinity="0"/>
    </body>
    <body name="cart" pos="2 0 1">
      <joint name="rail" type="slide" axis="1 0 0"/>
      <inertial pos="0 0 0" mass="1" diaginertia="0.01 0.01 0.01"/>
      <geom name="cart_geom" type="sphere" size="0.05" contype="0" conaffinity="0"/>
    </body>
  </worldbody>
  <actuator>
    <position name="servo" joint="lift_z" kp="100" kv="20" forcelimited="true" forcerange="-15 15"/>
    <motor name="push" joint="rail" gear="1"/>
  </actuator>
</mujoco>
"""


@pytest.fixture
def dr_model(tmp_path: Path) -> Path:
    path = tmp_path / "dr_bench.xml"
    path.write_text(DR_MJCF)
    return path


@pytest.fixture
def lift_model(tmp_path: Path) -> Path:
    path = tmp_path / "strength_bench.xml"
    path.write_text(LIFT_MJCF)
    return path


def _declares(sim: Any, kind: str, phase: str) -> bool:
    return phase in sim.get_dr_capabilities().get(kind, frozenset())


def _per_env(kind: str, values: list[float], sim: Any, targets: Any = None) -> None:
    """Apply ``kind`` with value ``values[i]`` in env ``i`` (reset phase, each env on its own)."""
    for i, v in enumerate(values):
        plan = RandomizationPlan((Term(kind, Distribution.fixed(v), phase="reset", targets=targets),))
        sim.set_state([i], sim.get_qpos()[[i]], sim.get_qvel()[[i]], randomization=plan)


def _ctrl(sim: Any, **values: float) -> torch.Tensor:
    ctrl = torch.zeros(sim.num_envs, sim.num_actuators)
    for name, v in values.items():
        ctrl[:, sim.info.actuator_names.index(name)] = v
    return ctrl


# ----------------------------------------------------------------------------
# action latency
# ----------------------------------------------------------------------------
def test_latency_delays_a_servo_by_whole_substeps(make_sim: Any, dr_model: Path) -> None:
    """Clause: action latency — a position servo given a step target with a latency of L substeps follows
    the zero-latency trajectory delayed by min(L, nsteps) substeps (same engine, float tolerance), and an
    env without latency in the same batch moves exactly as in a batch without any latency."""
    sim = make_sim(dr_model, 4)
    assert _declares(sim, "action_latency", "init") and _declares(sim, "action_latency", "reset")
    # no latency anywhere: the undelayed trajectory of each env, every 2 substeps (a batch of the same size:
    # env i of a mixed backend runs on the same engine in both)
    ref = make_sim(dr_model, 4)
    latencies = [0, 2, 4, 7]  # 7 > nsteps: the whole call applies the previous command (capped at 4)
    _per_env("action_latency", latencies, sim)
    col = int(sim.info.joint_qposadr[sim.info.joint_names.index("slide")])
    nsteps, calls = 4, 30
    ref_q = [np.zeros(4)]
    for _ in range(2 * calls):
        ref.step(_ctrl(ref, servo=0.1), nsteps=2)
        ref_q.append(to_np(ref.get_qpos())[:, col])
    got = np.zeros((calls, 4))
    for k in range(calls):
        sim.step(_ctrl(sim, servo=0.1), nsteps=nsteps)
        got[k] = to_np(sim.get_qpos())[:, col]
    for i, lat in enumerate(latencies):
        shift = min(lat, nsteps)
        want = np.array([ref_q[(nsteps * (k + 1) - shift) // 2][i] for k in range(calls)])
        np.testing.assert_allclose(got[:, i], want, atol=2e-5, rtol=1e-4, err_msg=f"env {i}, latency {lat}")
    assert got[5, 1] < got[5, 0] - 1e-4, "a delayed servo must lag the undelayed one"
    undelayed = np.array([q[0] for q in ref_q[2::2][:calls]])
    np.testing.assert_array_equal(got[:, 0], undelayed, err_msg="env 0 has no latency")


def test_latency_round_trips_through_snapshots(make_sim: Any, dr_model: Path) -> None:
    """Clause: action latency — the latency and the pending command are part of a snapshot: restoring one
    and stepping with the same controls gives the same trajectory; negative latencies are refused."""
    sim = make_sim(dr_model, 2)
    if not sim.capabilities.snapshot_restore:
        pytest.skip(f"backend {sim.name!r} has no snapshots")
    _per_env("action_latency", [3, 0], sim)
    sim.step(_ctrl(sim, servo=0.05), nsteps=4)
    saved = sim.get_physics_state()
    for target in (0.1, -0.1):
        sim.step(_ctrl(sim, servo=target), nsteps=4)
    first = to_np(sim.get_qpos()).copy()
    sim.set_physics_state(None, saved)
    for target in (0.1, -0.1):
        sim.step(_ctrl(sim, servo=target), nsteps=4)
    np.testing.assert_allclose(to_np(sim.get_qpos()), first, atol=1e-6)
    with pytest.raises(ValueRangeError, match="latency"):
        sim.apply_init_randomization(RandomizationPlan((Term("action_latency", Distribution.fixed(-1.0)),)))


# ----------------------------------------------------------------------------
# motor strength
# ----------------------------------------------------------------------------
def _strength_or_refusal(sim: Any) -> None:
    if _declares(sim, "actuator_strength", "reset"):
        return
    plan = RandomizationPlan((Term("actuator_strength", Distribution.fixed(2.0)),))
    with pytest.raises(UnsupportedFeatureError, match="actuator_strength") as e:
        sim.apply_init_randomization(plan)
    assert sim.name in str(e.value)
    pytest.skip(f"backend {sim.name!r} does not declare actuator_strength (refused by name, checked)")


def test_strength_scales_a_motor_force(make_sim: Any, lift_model: Path) -> None:
    """Clause: motor strength — a motor pushing a free body (a 1 kg cart on a rail) with strength s
    accelerates it at s times the unit-strength acceleration (within 1 %)."""
    sim = make_sim(lift_model, 3)
    _strength_or_refusal(sim)
    factors = [1.0, 0.5, 1.75]
    _per_env("actuator_strength", factors, sim, targets=("push",))
    steps = 100
    sim.step(_ctrl(sim, push=2.0), nsteps=steps)
    v = to_np(sim.get_qvel())[:, int(sim.info.joint_dofadr[sim.info.joint_names.index("rail")])]
    np.testing.assert_allclose(v / (steps * sim.physics_dt), 2.0 * np.array(factors), rtol=1e-2)


def test_strength_scales_a_servo_and_its_force_limit(make_sim: Any, lift_model: Path) -> None:
    """Clause: motor strength — a position servo holding 1 kg against gravity with strength s settles at
    the steady-state error m g / (s kp) (kp and kv scaled), and its force limit scales too: at s = 0.5
    (limit 7.5 N < m g) it cannot hold the body, which sinks."""
    sim = make_sim(lift_model, 3)
    _strength_or_refusal(sim)
    factors = [1.0, 2.0, 0.5]
    _per_env("actuator_strength", factors, sim, targets=("servo",))
    for _ in range(10):
        sim.step(_ctrl(sim), nsteps=100)  # 2 s: the servo settles (critically damped at s = 1)
    z = to_np(sim.get_qpos())[:, int(sim.info.joint_qposadr[sim.info.joint_names.index("lift_z")])]
    np.testing.assert_allclose(-z[:2], 9.81 / (100.0 * np.array(factors[:2])), rtol=2e-2)
    assert z[2] < -1.0, f"a servo limited to 7.5 N holds 9.81 N of weight (z = {z[2]})"
