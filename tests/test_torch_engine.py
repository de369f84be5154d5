"""The pure-torch example engine (tests/torch_engine.py) is real physics, not a stub.

The conformance suite runs against it in ``make test``
(``PYTHONPATH=tests pytest src/simbackend/contract_tests -p torch_engine --sim torch``). Here it is
compared with MuJoCo where both compute the same thing: MuJoCo's copy of the model has contacts and
joint limits switched off (the torch engine has no contacts, treats limits its own way and honours the
disable flag), and an RK4 model is switched to Euler (the torch engine integrates it with Euler).
Measured differences are ~1e-13 (float64 rounding); the tolerances leave room for other builds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mujoco
import numpy as np
import pytest
import torch

from simbackend.backends.mujoco import MuJoCoEngine
from simbackend.contract import SimBackend
from simbackend.contract_tests.helpers import BALL_MJCF, gymnasium_assets, random_qpos
from simbackend.engine import ENGINE_MEMBERS
from simbackend.errors import ModelLoadError
from simbackend.models import compile_model
from torch_engine import TorchEngine

#: max |difference| of qpos (rad, m) and qvel allowed against MuJoCo (measured: below 1e-13)
TOL = 1e-9


def _state(sim: SimBackend) -> tuple[np.ndarray, np.ndarray]:
    """float64 copies of the engine's own state rows (the getters give float32)."""
    q, v = (torch.as_tensor(a).double().cpu().numpy().copy() for a in sim.engine.read_state())
    return q, v


def _unconstrained(source: Any) -> Any:
    """The compiled model with contacts and joint limits disabled (Euler where it asks for RK4)."""
    m = compile_model(source)
    m.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_CONTACT) | int(mujoco.mjtDisableBit.mjDSBL_LIMIT)
    if m.opt.integrator == mujoco.mjtIntegrator.mjINT_RK4:
        m.opt.integrator = int(mujoco.mjtIntegrator.mjINT_EULER)
    return m


def test_pendulum_free_swing_matches_mujoco() -> None:
    """The built-in pendulum released at 1 rad swings for 2 s (2000 substeps) as MuJoCo's does, within 1e-9 rad
    at every 10 ms sample (measured: 3e-16)."""
    a, b = SimBackend(TorchEngine, "pendulum", 1), SimBackend(MuJoCoEngine, "pendulum", 1)
    for s in (a, b):
        s.set_state(None, np.array([[1.0]]))
    worst, swing = 0.0, []
    for _ in range(200):
        for s in (a, b):
            s.step(np.zeros((1, 1)), nsteps=10)
        qa, qb = _state(a)[0][0, 0], _state(b)[0][0, 0]
        worst, swing = max(worst, abs(qa - qb)), swing + [qa]
    assert min(swing) < -0.9 and max(swing) > 0.9, "the pendulum did not swing"
    assert worst < TOL, f"the torch pendulum left MuJoCo's by {worst:.2e} rad"


#: springs, a general affine actuator (other) and a velocity servo, on a hinge and a slide
SPRINGS_MJCF = """<mujoco><worldbody><body pos="0 0 1">
  <joint name="h" axis="0 1 0" stiffness="3" springref="0.4" damping="0.2"/>
  <inertial pos="0.1 0 -0.3" mass="1" diaginertia="0.01 0.02 0.03"/>
  <body pos="0 0 -0.5"><joint name="s" type="slide" axis="1 0 1" stiffness="10" springref="-0.1"/>
    <inertial pos="0 0.1 0" mass="0.5" diaginertia="0.01 0.01 0.01"/></body></body></worldbody>
  <actuator><general joint="s" gainprm="2" biasprm="0.5 -3 -0.7" biastype="affine" gear="1.5" ctrlrange="-1 1"/>
    <velocity joint="h" kv="0.8"/></actuator></mujoco>"""
MODELS = {
    "pendulum": "pendulum",
    "double_pendulum": "double_pendulum",
    "cartpole": "cartpole",
    "arm7": "arm7",
    "quadruped": "quadruped",
    "ball_chain": BALL_MJCF,
    "springs": SPRINGS_MJCF,
    "gym-ant": None,
}


@pytest.mark.parametrize("model", MODELS)
def test_dynamics_match_mujoco_without_constraints(tmp_path: Path, model: str) -> None:
    """From random states inside the joint ranges, with random controls, 10 substeps agree with MuJoCo's
    (contacts and limits off) within 1e-9: mass matrix, Coriolis and gravity, armature, damping, springs,
    motors, servos and general affine actuators (Euler and implicitfast), ball and free joints."""
    source = MODELS[model]
    if source is None:
        assets = gymnasium_assets()
        if assets is None:
            pytest.skip("gymnasium is not installed: its ant.xml is absent")
        source = str(assets / "ant.xml")
    elif "<mujoco" in source:
        (tmp_path / "m.xml").write_text(source)
        source = str(tmp_path / "m.xml")
    m = _unconstrained(source)
    a, b = SimBackend(TorchEngine, m, 4), SimBackend(MuJoCoEngine, m, 4)
    rng = np.random.default_rng(3)
    qpos, qvel = random_qpos(a, rng, margin=0.3), rng.normal(scale=0.5, size=(4, a.nv))
    lo, hi = a.info.actuator_ctrl_range.T
    ctrl = np.clip(rng.uniform(-1, 1, size=(4, a.num_actuators)) * np.where(np.isfinite(hi), hi, 1), lo, hi)
    for s in (a, b):
        s.set_state(None, qpos, qvel)
        s.step(ctrl * 0.1, nsteps=10)  # ant: small controls keep its joints inside their ranges
    for got, want, what in zip(_state(a), _state(b), ("qpos", "qvel")):
        assert np.abs(got - want).max() < TOL, f"{what} differs from MuJoCo's by {np.abs(got - want).max():.2e}"
    assert np.abs(_state(a)[1] - qvel).max() > 1e-3, "the state barely changed: the comparison would be blind"


def test_joint_limit_holds() -> None:
    """cartpole's slider pushed at full force into its +3 m limit for 10 s stops within 1 cm of it
    (measured 3.8 mm: the soft limit's stiffness against 10 N)."""
    sim = SimBackend(TorchEngine, "cartpole", 1)
    sim.step(np.ones((1, 1)), nsteps=5000)
    x = float(sim.get_qpos()[0, 0])
    assert 2.99 < x < 3.01, f"the cart is at {x} m"


@pytest.mark.parametrize(
    "xml,named",
    [
        ('<equality><connect body1="a" body2="b" anchor="0 0 0" name="loop"/></equality>', "equality 'loop'"),
        (
            '<tendon><fixed name="tie"><joint joint="ja" coef="1"/><joint joint="jb" coef="-1"/></fixed></tendon>',
            "tendon 'tie'",
        ),
        ('<actuator><general name="spin" joint="ja" dyntype="filter" dynprm="0.1"/></actuator>', "actuator 'spin'"),
    ],
    ids=["equality", "tendon", "activation"],
)
def test_refuses_what_it_cannot_simulate(tmp_path: Path, xml: str, named: str) -> None:
    """A model element the engine has no counterpart for fails the build with ModelLoadError naming it."""
    path = tmp_path / "m.xml"
    path.write_text(f"""<mujoco><worldbody>
      <body name="a"><joint name="ja" type="hinge"/><geom size="0.1" mass="1"/></body>
      <body name="b" pos="1 0 0"><joint name="jb" type="hinge"/><geom size="0.1" mass="1"/></body>
    </worldbody>{xml}</mujoco>""")
    with pytest.raises(ModelLoadError, match=named):
        SimBackend(TorchEngine, str(path), 1)


def test_frictionloss_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "friction.xml"
    path.write_text(
        '<mujoco><worldbody><body><joint name="dry" type="slide" frictionloss="0.5"/>'
        '<geom size="0.1" mass="1"/></body></worldbody></mujoco>'
    )
    with pytest.raises(ModelLoadError, match="joint 'dry': frictionloss"):
        SimBackend(TorchEngine, str(path), 1)


def test_defines_only_the_engine_interface() -> None:
    """Like the library's engines, its public members are the declared interface's."""
    public = {
        k for k, v in vars(TorchEngine).items() if not k.startswith("_") and (callable(v) or isinstance(v, property))
    }
    assert public <= set(ENGINE_MEMBERS), sorted(public - set(ENGINE_MEMBERS))
