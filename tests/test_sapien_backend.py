"""The SAPIEN/PhysX backend's own tests: model conversion, rejections, options,
the GPU path's index/packing logic (exercised here on the CPU), and the drive
mapping of MuJoCo's joint and actuator terms.

The contract itself is checked by ``pytest contract_tests --sim sapien`` and
the distance from MuJoCo by ``tests/parity``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("sapien")

from simbackend.backends.sapien import gpu as sgpu
from simbackend.backends.sapien.layout import Layout
from simbackend.backends.sapien.plan import MIN_MASS
from simbackend.contract_tests.helpers import gymnasium_assets, random_qpos
from simbackend.errors import ArgumentTypeError, InvalidArgumentError, ModelLoadError, SimBackendError
from simbackend.registry import make_backend


def _mjcf(tmp_path: Path, body: str, extra: str = "", option: str = "") -> str:
    path = tmp_path / "m.xml"
    path.write_text(f"""<mujoco><compiler angle="radian"/><option {option}/><worldbody>
      <geom name="floor" type="plane" size="5 5 .1"/>{body}</worldbody>{extra}</mujoco>""")
    return str(path)


ARM = """<body name="a" pos="0 0 1"><joint name="j1" type="hinge" axis="0 1 0"/>
  <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/>
  <body name="b" pos="0.3 0 0"><joint name="j2" type="hinge" axis="0 1 0"/>
    <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/></body></body>"""


# ----------------------------------------------------------------------------
# rejections name the element
# ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body,extra,option,needle",
    [
        ('<body name="ballbody"><joint name="balljoint" type="ball"/><geom size=".1"/></body>', "", "", "balljoint"),
        (ARM.replace('<joint name="j1"', '<joint name="j1" actuatorgravcomp="true"'), "", "", "j1.*actuatorgravcomp"),
        (
            ARM,
            '<tendon><fixed name="tnd" armature="0.1"><joint joint="j1" coef="1"/><joint joint="j2" coef="-1"/>'
            "</fixed></tendon>",
            "",
            "tnd.*armature",
        ),
        (
            ARM,
            '<actuator><general name="filt" joint="j1" dyntype="filter" dynprm="0.1"/></actuator>',
            "",
            "filt.*activation dynamics",
        ),
        (ARM, '<actuator><adhesion name="sticky" body="b" ctrlrange="0 1"/></actuator>', "", "sticky.*adhesion"),
        (ARM, '<actuator><motor name="m1" joint="j1" gear="1 1 0 0 0 0"/></actuator>', "", "m1"),
    ],
)
def test_unsupported_elements_rejected_by_name(tmp_path: Path, body: str, extra: str, option: str, needle) -> None:
    """Anything PhysX cannot represent fails at load time, naming the element."""
    if needle is None:  # height field geom
        body = body.replace('<geom size=".1"/>', '<geom type="hfield" hfield="hf"/>')
        needle = "hfield"
    with pytest.raises(ModelLoadError, match=needle):
        make_backend("sapien", _mjcf(tmp_path, body, extra, option), 1)


def test_motor_on_a_fixed_tendon_drives_its_joints_as_in_mujoco(tmp_path: Path) -> None:
    """A fixed tendon without passive forces is a readout; a motor on it pushes each joint by
    gear * coef * force. Two links driven through a tendon (coefs 1 and -0.5, no gravity) follow
    MuJoCo's rollout over 0.2 s; gymnasium's humanoid (two such tendons) loads."""
    extra = (
        '<tendon><fixed name="couple"><joint joint="j1" coef="1"/><joint joint="j2" coef="-0.5"/></fixed></tendon>'
        '<actuator><motor name="tm" tendon="couple" gear="2" ctrlrange="-1 1"/></actuator>'
    )
    path = _mjcf(tmp_path, ARM, extra, option='gravity="0 0 0"')
    sims = [make_backend(name, path, 2) for name in ("mujoco", "sapien")]
    ctrl = torch.tensor([[0.5], [-0.8]])
    for sim in sims:
        sim.step(ctrl, nsteps=100)
    ref, got = (s.get_dof_pos().numpy() for s in sims)
    assert np.abs(ref).max() > 0.05, "the motor did not move the joints"
    np.testing.assert_allclose(got, ref, atol=1e-3)
    make_backend("sapien", str(gymnasium_assets() / "humanoid.xml"), 1)


def _friction_model(tmp_path: Path, fl: float) -> str:
    """Frictionloss ``fl`` on joints whose PhysX drive is taken: two position servos (one against
    gravity), a motor on a damped slider, a hinge spring."""
    body = f"""
      <body name="p" pos="0 0 1"><joint name="arm" type="hinge" axis="0 1 0" frictionloss="{fl}" damping="1"
        range="-2 2"/><geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/></body>
      <body name="s" pos="0 1 1"><joint name="x" type="slide" axis="1 0 0" frictionloss="{fl}" range="-1 1"/>
        <geom type="box" size=".05 .05 .05" mass="1"/></body>
      <body name="m" pos="0 2 1"><joint name="y" type="slide" axis="1 0 0" frictionloss="{fl}" damping="0.5"/>
        <geom type="box" size=".05 .05 .05" mass="1"/></body>
      <body name="r" pos="0 3 1"><joint name="spring" type="hinge" axis="0 0 1" frictionloss="{fl / 10}"
        stiffness="1" damping="0.05"/><geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/></body>"""
    actuators = """<actuator><position joint="arm" kp="20" ctrlrange="-2 2"/>
      <position joint="x" kp="40" kv="4" ctrlrange="-1 1"/><motor joint="y" ctrlrange="-2 2"/></actuator>"""
    path = tmp_path / f"friction{fl}.xml"
    path.write_text(Path(_mjcf(tmp_path, body, actuators)).read_text())
    return str(path)


def test_frictionloss_on_a_driven_joint_follows_mujoco(tmp_path: Path) -> None:
    """Frictionloss where the PhysX drive is taken (servo, motor with damping, spring) is MuJoCo's
    friction law applied as a joint force each substep. Through the parity suite: the servos'
    final positions (which friction shifts by up to 7e-3) within the servo tolerance, the motor
    and spring joints' random and sinusoid rollouts within the dynamics tolerance; a motor force
    below the friction limit leaves its slider where it is, as MuJoCo does."""
    from simbackend.parity import DYN_POS_TOL, run_parity

    path = _friction_model(tmp_path, 0.3)
    servo = run_parity("sapien", path, tiers=("servo",), num_envs=3)
    dynamics = run_parity("sapien", path, tiers=("dynamics",), num_envs=3)
    rows = {r.quantity: r for r in servo.rows + dynamics.rows}
    for quantity in ("final_dof_pos[arm]", "final_dof_pos[x]", "dof_pos[y]", "dof_pos[spring]"):
        assert rows[quantity].passed, rows[quantity]
    # friction matters here: without it MuJoCo ends elsewhere, by far more than the tolerances
    ref = {}
    for fl in (0.0, 0.3):
        sim = make_backend("mujoco", _friction_model(tmp_path, fl), 1)
        sim.step(torch.tensor([[0.3, -0.2, 1.0]]), nsteps=500)
        ref[fl] = sim.get_dof_pos().numpy()
    assert np.abs(ref[0.3] - ref[0.0]).max() > 10 * DYN_POS_TOL
    stuck = []
    for name in ("mujoco", "sapien"):
        sim = make_backend(name, path, 1)
        sim.step(torch.tensor([[0.0, 0.0, 0.25]]), nsteps=500)  # 0.25 N against 0.3 N of friction
        stuck.append(float(sim.get_dof_pos()[0, 2]))
    assert max(abs(v) for v in stuck) < 1e-3, stuck


def test_disabled_frictionloss_is_not_applied(tmp_path: Path) -> None:
    """``<flag frictionloss="disable"/>``: no friction, neither as a drive nor as a force."""
    body = ARM.replace('name="j1" type="hinge"', 'name="j1" type="hinge" frictionloss="50"').replace(
        'name="j2" type="hinge"', 'name="j2" type="hinge" frictionloss="50" damping="0.01"'
    )
    out = {}
    for name in ("mujoco", "sapien"):
        sim = make_backend(name, _mjcf(tmp_path, body, '<option><flag frictionloss="disable"/></option>'), 1)
        sim.step(None, nsteps=100)
        out[name] = sim.get_dof_pos().numpy()
    assert np.abs(out["mujoco"]).min() > 0.05, "without friction the arm falls"
    np.testing.assert_allclose(out["sapien"], out["mujoco"], atol=2e-3)


def test_damping_randomization_beside_frictionloss(tmp_path: Path) -> None:
    """Randomized damping is the PhysX drive's: on a joint whose frictionloss the engine applies it
    follows MuJoCo (1 s swing, 2 envs, the same draws); on a joint whose frictionloss is the
    saturating drive it is refused, naming the reason."""
    from simbackend.errors import UnsupportedFeatureError
    from simbackend.randomization import Distribution, RandomizationPlan, Term

    body = ARM.replace('name="j1" type="hinge"', 'name="j1" type="hinge" frictionloss="0.05"').replace(
        'name="j2" type="hinge"', 'name="j2" type="hinge" frictionloss="0.02" damping="0.02"'
    )
    path = _mjcf(tmp_path, body)
    plan = RandomizationPlan(
        (Term("joint_damping", Distribution.uniform(0.0, 0.3), targets=("j2",), operation="set"),), seed=3
    )
    out = {}
    for name in ("mujoco", "sapien"):
        sim = make_backend(name, path, 2)
        sim.apply_init_randomization(plan)
        sim.step(None, nsteps=500)
        out[name] = sim.get_dof_pos().numpy()
    assert abs(out["mujoco"][0, 1] - out["mujoco"][1, 1]) > 0.05, "the draws should change the swing"
    np.testing.assert_allclose(out["sapien"], out["mujoco"], atol=1e-2)
    refused = RandomizationPlan(
        (Term("joint_damping", Distribution.uniform(0.0, 0.3), targets=("j1",), operation="set"),)
    )
    with pytest.raises(UnsupportedFeatureError, match="frictionloss"):
        make_backend("sapien", path, 2).apply_init_randomization(refused)


EQUALITIES = """<body name="a" pos="0 0 1"><joint name="j1" type="hinge" axis="0 1 0" damping="0.5"/>
    <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/>
    <body name="b" pos="0.3 0 0"><joint name="j2" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/></body></body>
  <body name="s" pos="0 1 1"><joint name="x" type="slide" axis="1 0 0"/><geom type="box" size=".05 .05 .05" mass="1"/>
    <body name="t" pos="0 0 -0.2"><joint name="y" type="hinge" axis="0 1 0" ref="0.2"/>
      <geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.03"/></body></body>
  <body name="l" pos="0 2 1"><joint name="lock" type="slide" axis="0 0 1" damping="1"/>
    <geom type="box" size=".05 .05 .05" mass="1"/></body>"""
EQUALITY_ELEMENTS = """<equality><joint name="follow" joint1="j2" joint2="j1" polycoef="0.1 0.5 0.3 0 0"/>
    <joint name="pend" joint1="y" joint2="x" polycoef="0 -2 0 0 0" solref="0.01 1"/>
    <joint name="hold" joint1="lock" polycoef="0.05 0 0 0 0"/>
    <joint name="off" joint1="j1" active="false"/></equality>
  <actuator><motor joint="j1" ctrlrange="-1 1"/><motor joint="x" ctrlrange="-5 5"/></actuator>"""


def test_joint_equalities_follow_mujoco(tmp_path: Path) -> None:
    """Joint equalities (a quadratic coupling, a linear one with its own solref, a joint held at an
    offset; one inactive, which acts on neither engine) are MuJoCo's soft-constraint law applied as
    joint forces each substep: the parity suite's kinematics and dynamics tiers pass (random and
    sinusoid motor ctrl from offset, violated starts), and after the rollout the couplings hold
    as tightly as in MuJoCo."""
    from simbackend.parity import run_parity

    path = _mjcf(tmp_path, EQUALITIES, EQUALITY_ELEMENTS)
    report = run_parity("sapien", path, tiers=("kinematics", "dynamics"), num_envs=3)
    assert report.passed, report.summary()
    ctrl = torch.tensor([[0.8, 3.0], [-0.6, -4.0]])
    residual = {}
    for name in ("mujoco", "sapien"):
        sim = make_backend(name, path, 2)
        rows = []
        for _ in range(8):
            sim.step(ctrl, nsteps=50)
            j1, j2, x, y, lock = sim.get_dof_pos().numpy().astype(np.float64).T
            rows.append([j2 - (0.1 + 0.5 * j1 + 0.3 * j1**2), y - 0.2 + 2 * x, lock - 0.05])  # y's zero: ref
        residual[name] = np.array(rows)
        assert np.abs(j1).min() > 1.0, "the motors should swing the arm"
    # soft constraints: MuJoCo's own violation reaches 1e-2 while the arm swings; PhysX's follows it
    assert np.abs(residual["mujoco"]).max() < 2e-2
    np.testing.assert_allclose(residual["sapien"], residual["mujoco"], atol=2e-3)


def test_delegated_elements_are_declared_and_can_be_refused(tmp_path: Path) -> None:
    """Delegated physics is explicit: capabilities.delegated names every element MuJoCo computes for PhysX
    (the two active joint equalities here, not the inactive one), sapien={"delegate": False} refuses
    such a model naming the first element, and accepts one that needs nothing from MuJoCo."""
    from simbackend.errors import ModelLoadError

    path = _mjcf(tmp_path, EQUALITIES, EQUALITY_ELEMENTS)
    with make_backend("sapien", path, 1) as sim:
        assert sim.capabilities.delegated == frozenset(
            {
                "equality 'follow': MuJoCo's constraint force",
                "equality 'pend': MuJoCo's constraint force",
                "equality 'hold': MuJoCo's constraint force",
            }
        )
    with pytest.raises(ModelLoadError, match=r"sapien\.delegate=False: equality 'follow'.*and 2 more"):
        make_backend("sapien", path, 1, sapien={"delegate": False})
    with make_backend("sapien", _mjcf(tmp_path, ARM), 1, sapien={"delegate": False}) as sim:
        assert sim.capabilities.delegated == frozenset()
    with make_backend("mujoco", path, 1) as sim:
        assert sim.capabilities.delegated == frozenset()  # the reference computes everything itself
    with pytest.raises(ArgumentTypeError, match="sapien.delegate: expected True or False"):
        make_backend("sapien", path, 1, sapien={"delegate": "no"})


def test_snapshot_holds_the_memory_of_mujocos_forces(tmp_path: Path) -> None:
    """MuJoCo's constraint solve uses the previous substep's acceleration; a snapshot holds that memory, so
    an env restored from it continues as the original does. Contact-free, one scene per env: the
    continuation is bit for bit (PhysX's serialisation holds the rest). Without the memory, the first
    substep after the restore solves with none and the trajectories part."""
    path = _mjcf(tmp_path, EQUALITIES, EQUALITY_ELEMENTS)
    sim = make_backend("sapien", path, 2)
    ctrl = torch.tensor([[0.8, 3.0], [-0.6, -4.0]])
    sim.step(ctrl, nsteps=40)  # moving: the memory is far from zero
    snap = sim.get_physics_state([0])
    memory = snap[0, -sim.engine.mujoco_forces.memory_width :]
    assert memory[-1] == 1.0 and memory[:-1].abs().max() > 1e-3, "the snapshot should hold a previous substep"
    sim.set_physics_state([1], snap)
    sim.step(ctrl[[0, 0]], nsteps=30)
    q = sim.get_qpos()
    assert torch.equal(q[0], q[1]), f"the restored env drifted from the original: {(q[0] - q[1]).abs().max():.3g}"


def test_randomized_masses_reach_mujocos_constraint_forces(tmp_path: Path) -> None:
    """Masses randomized to 10-20 % of the model's reach the private model MuJoCo solves the
    equalities in (with its derived constants recomputed): the envs follow MuJoCo with the same
    draws to 1e-3 over 0.6 s. With the model's masses there, the held slider went unstable."""
    from simbackend.randomization import Distribution, RandomizationPlan, Term

    path = _mjcf(tmp_path, EQUALITIES, EQUALITY_ELEMENTS)
    plan = RandomizationPlan((Term("body_mass", Distribution.uniform(0.1, 0.2), targets=("l", "b", "t")),), seed=1)
    out = {}
    for name in ("mujoco", "sapien"):
        sim = make_backend(name, path, 2)
        sim.apply_init_randomization(plan)
        sim.step(torch.tensor([[0.8, 3.0], [-0.6, -4.0]]), nsteps=300)
        out[name] = sim.get_dof_pos().numpy()
    assert np.abs(out["mujoco"][:, :2]).min() > 0.5, "the motors should swing the arm"
    np.testing.assert_allclose(out["sapien"], out["mujoco"], atol=1e-3)


LINKAGES = """
  <body name="l1" pos="0 0 1"><joint name="h1" type="hinge" axis="0 1 0" damping="0.05"/>
    <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02"/>
    <body name="l2" pos="0.3 0 0"><joint name="h2" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0 0 -0.4" size="0.02"/><site name="tip2" pos="0 0 -0.4"/></body></body>
  <body name="l3" pos="0.5 0 1"><joint name="h3" type="hinge" axis="0 1 0"/>
    <geom type="capsule" fromto="0 0 0 -0.2 0 -0.4" size="0.02" contype="0" conaffinity="0"/>
    <site name="tip3" pos="-0.2 0 -0.4"/></body>
  <site name="hook" pos="0 2 1.3"/>
  <body name="ball" pos="0.1 2.1 1" euler="0.3 0 0.5"><freejoint name="ballj"/>
    <geom type="sphere" size=".05" mass="0.5"/><site name="eye" pos="-0.1 -0.1 0.3"/></body>
  <body name="box" pos="0.15 2.1 0.8" euler="0.4 0.3 0"><freejoint name="boxj"/>
    <geom type="box" size=".05 .08 .03" mass="1"/></body>
  <body name="c" pos="0 3 1"><joint name="h4" type="hinge" axis="0 1 0" damping="0.1"/>
    <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02"/></body>
  <body name="e" pos="0 3.5 1"><joint name="h5" type="hinge" axis="0 1 0"/>
    <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02"/></body>"""
LINKAGE_ELEMENTS = """<tendon><fixed name="t1"><joint joint="h4" coef="1"/></fixed>
    <fixed name="t2"><joint joint="h5" coef="0.5"/></fixed></tendon>
  <equality><connect name="loop" body1="l2" body2="l3" anchor="0 0 -0.4"/>
    <connect name="swing" site1="eye" site2="hook"/>
    <weld name="hang" body1="box" body2="ball" torquescale="0.5"/>
    <tendon name="pair" tendon1="t2" tendon2="t1" polycoef="0 1 0 0 0"/></equality>
  <actuator><motor joint="h1" ctrlrange="-1 1"/><motor joint="h4" ctrlrange="-1 1"/></actuator>"""


def test_connect_weld_and_tendon_equalities_follow_mujoco(tmp_path: Path) -> None:
    """Connect (a motor-driven four-bar closed between two trees; a free ball hung from a world
    site by site semantics), weld (a free box under the swinging ball, torquescale 0.5) and tendon
    equalities are the forces MuJoCo's solver gives them each substep: kinematics exact, and 1 s
    of sinusoid and constant motor ctrl follows MuJoCo's qpos (free bodies included) within the
    dynamics tolerance, the loop's soft closure within 1e-3 of MuJoCo's."""
    from simbackend.parity import DYN_POS_TOL, run_parity

    path = _mjcf(tmp_path, LINKAGES, LINKAGE_ELEMENTS)
    report = run_parity("sapien", path, tiers=("kinematics",), num_envs=8)
    assert report.passed, report.summary()
    sims = {name: make_backend(name, path, 2) for name in ("mujoco", "sapien")}
    tips = sims["mujoco"].get_site_ids(["tip2", "tip3"])
    worst, gap = 0.0, 0.0
    for k in range(10):
        t = 0.1 * k
        ctrl = torch.tensor([[0.6 * np.sin(6 * t), 0.5], [-0.8, 0.7 * np.cos(5 * t)]])
        out, closure = {}, {}
        for name, sim in sims.items():
            sim.step(ctrl, nsteps=50)
            out[name] = sim.get_qpos().numpy().astype(np.float64)
            p = sim.get_site_pos_w(tips).numpy().astype(np.float64)
            closure[name] = np.linalg.norm(p[:, 0] - p[:, 1], axis=-1)
        worst = max(worst, float(np.abs(out["sapien"] - out["mujoco"]).max()))
        gap = max(gap, float(np.abs(closure["sapien"] - closure["mujoco"]).max()))
    assert np.abs(out["mujoco"][:, :3]).max() > 1.0, "the four-bar should move"
    assert np.abs(out["mujoco"][:, 3:6] - [0.1, 2.1, 1.0]).max() > 0.05, "the ball should swing"
    assert worst < DYN_POS_TOL, worst
    assert gap < 1e-3, gap
    # replays from one snapshot are bit-identical: a restored env keeps no substep history
    sim, snap, runs = sims["sapien"], sims["sapien"].get_physics_state(), []
    for _ in range(2):
        sim.set_physics_state(None, snap)
        sim.step(ctrl, nsteps=40)
        runs.append(sim.get_qpos().clone())
    assert torch.equal(runs[0], runs[1])


TENDONS = """
  <body name="a" pos="0 0 1"><joint name="j1" type="hinge" axis="0 1 0" damping="0.05"/>
    <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/>
    <body name="b" pos="0.3 0 0"><joint name="j2" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/></body></body>
  <site name="anchor" pos="0 1 1.5"/>
  <body name="bob" pos="0.2 1 1"><joint name="bx" type="slide" axis="1 0 0"/>
    <joint name="bz" type="slide" axis="0 0 1"/><geom type="sphere" size=".05" mass="0.3"/><site name="knot"/></body>
  <body name="hand" pos="0 2 1"><joint name="wrist" type="hinge" axis="0 0 1" damping="0.2"/>
    <geom type="box" size=".03 .05 .02" mass="0.3"/>
    <body name="f1" pos="0 0.05 0"><joint name="s1" type="slide" axis="0 1 0" range="0 0.04" damping="1"/>
      <geom type="box" size=".01 .005 .03" mass="0.05"/></body>
    <body name="f2" pos="0 -0.05 0"><joint name="s2" type="slide" axis="0 -1 0" range="0 0.04" damping="1"/>
      <geom type="box" size=".01 .005 .03" mass="0.05"/></body></body>"""
TENDON_ELEMENTS = """<tendon>
    <fixed name="spring" stiffness="5" damping="0.2" springlength="0.3"><joint joint="j1" coef="1"/>
      <joint joint="j2" coef="-0.7"/></fixed>
    <fixed name="stop" limited="true" range="-0.6 0.6" frictionloss="0.05"><joint joint="j2" coef="1"/></fixed>
    <spatial name="leash" stiffness="20" damping="0.5" limited="true" range="0 0.6"><site site="anchor"/>
      <site site="knot"/></spatial>
    <fixed name="split"><joint joint="s1" coef="0.5"/><joint joint="s2" coef="0.5"/></fixed></tendon>
  <equality><joint joint1="s1" joint2="s2"/></equality>
  <actuator><motor joint="j1" ctrlrange="-1 1"/><position name="grip" tendon="split" kp="50" ctrlrange="0 0.04"/>
    <motor joint="wrist" ctrlrange="-0.3 0.3"/></actuator>"""


def test_tendon_forces_and_servos_on_tendons_follow_mujoco(tmp_path: Path) -> None:
    """Tendon springs and dampers (a fixed tendon across two joints, a spatial leash between sites),
    tendon limits and friction, and a position servo on a fixed tendon (a two-finger gripper
    with a joint equality, as robot hands have it) are MuJoCo's forces each substep: the parity
    suite's model, kinematics and dynamics tiers pass, and 1 s of sinusoid ctrl follows MuJoCo's
    qpos to 2e-3 with the range stop reached and the gripper at its target."""
    from simbackend.parity import run_parity

    path = _mjcf(tmp_path, TENDONS, TENDON_ELEMENTS)
    report = run_parity("sapien", path, tiers=("model", "kinematics", "dynamics"), num_envs=3)
    assert report.passed, report.summary()
    sims = {name: make_backend(name, path, 2) for name in ("mujoco", "sapien")}
    worst = 0.0
    for k in range(10):
        t = 0.1 * k
        ctrl = torch.tensor(
            [[0.6 * np.sin(6 * t), 0.03, 0.2], [-0.8, 0.01 + 0.01 * np.sin(4 * t), -0.2 * np.cos(5 * t)]]
        )
        out = {name: None for name in sims}
        for name, sim in sims.items():
            sim.step(ctrl, nsteps=50)
            out[name] = sim.get_qpos().numpy().astype(np.float64)
        worst = max(worst, float(np.abs(out["sapien"] - out["mujoco"]).max()))
        if k == 5:
            assert out["mujoco"][0, 1] > 0.59, "the first env should reach the tendon's range stop"
    np.testing.assert_allclose(out["mujoco"][0, 5:7], 0.03, atol=2e-3)  # the gripper at its target
    assert worst < 2e-3, worst


def test_general_actuators_and_site_transmissions_follow_mujoco(tmp_path: Path) -> None:
    """Actuators PhysX has no drive for are MuJoCo's force each substep: a general actuator on a
    fixed tendon (a menagerie-style gripper: gain 255 ctrl -> 0.04 m, bias -100 x - 10 v), one of
    an affine law with an offset on a hinge, a tilted thruster on a free body's site. 0.8 s of
    ctrl agrees with MuJoCo to 1e-4; the gripper settles where the law puts it."""
    body = """<body name="hand" pos="0 0 1"><joint name="wrist" type="hinge" axis="0 0 1" damping="0.2"/>
        <geom type="box" size=".03 .05 .02" mass="0.3"/>
        <body name="f1" pos="0 0.05 0"><joint name="s1" type="slide" axis="0 1 0" range="0 0.04" damping="1"/>
          <geom type="box" size=".01 .005 .03" mass="0.05"/></body>
        <body name="f2" pos="0 -0.05 0"><joint name="s2" type="slide" axis="0 -1 0" range="0 0.04" damping="1"/>
          <geom type="box" size=".01 .005 .03" mass="0.05"/></body></body>
      <body name="arm" pos="0 1 1"><joint name="elbow" type="hinge" axis="0 1 0" damping="0.1"/>
        <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02"/></body>
      <body name="drone" pos="0 2 1"><freejoint name="dj"/><geom type="box" size=".1 .1 .02" mass="0.5"/>
        <site name="rotor" euler="0.2 0 0"/></body>"""
    extra = """<tendon><fixed name="split"><joint joint="s1" coef="0.5"/><joint joint="s2" coef="0.5"/></fixed></tendon>
      <equality><joint joint1="s1" joint2="s2"/></equality>
      <actuator><general name="grip" tendon="split" forcerange="-100 100" ctrlrange="0 255" biastype="affine"
          gainprm="0.01568627451" biasprm="0 -100 -10"/>
        <general name="bend" joint="elbow" ctrlrange="-1 1" gainprm="2" biasprm="0.3 -3 -0.5" biastype="affine"/>
        <general name="thrust" site="rotor" gear="0 0 1 0 0 0" ctrlrange="0 10"/>
        <motor name="spin" joint="wrist" ctrlrange="-0.2 0.2"/></actuator>"""
    path = _mjcf(tmp_path, body, extra)
    sims = {name: make_backend(name, path, 2) for name in ("mujoco", "sapien")}
    assert sims["sapien"].info.actuator_kind[:2] == ("other", "other")
    assert "other" in sims["sapien"].capabilities.actuator_kinds
    worst = 0.0
    for k in range(8):
        ctrl = torch.tensor([[200.0, 0.5 * np.sin(0.5 * k), 5.5, 0.1], [50.0, -0.7, 4.5, -0.1]])
        out = {}
        for name, sim in sims.items():
            sim.step(ctrl, nsteps=50)
            out[name] = sim.get_qpos().numpy().astype(np.float64)
        worst = max(worst, float(np.abs(out["sapien"] - out["mujoco"]).max()))
    # the gripper's law: 200 * 0.0157 = 100 x (+ damping) -> x = 0.0314; the drone climbs and drifts
    np.testing.assert_allclose(out["mujoco"][0, 1:3], 200 * 0.01568627451 / 100, atol=1e-3)
    assert out["mujoco"][0, 6] > 1.2 and abs(out["mujoco"][0, 5] - 2.0) > 0.5
    assert worst < 1e-4, worst


def test_randomized_gains_of_a_servo_on_a_tendon_follow_mujoco(tmp_path: Path) -> None:
    """Randomized kp/kv of a servo whose force MuJoCo computes reach that computation: the two
    envs' fingers close at different rates, each as in MuJoCo with the same draws."""
    from simbackend.randomization import Distribution, RandomizationPlan, Term

    plan = RandomizationPlan(
        (
            Term("actuator_kp", Distribution.uniform(5.0, 200.0), targets=("grip",), operation="set"),
            Term("actuator_kv", Distribution.uniform(0.0, 2.0), targets=("grip",), operation="set"),
        ),
        seed=4,
    )
    out = {}
    for name in ("mujoco", "sapien"):
        sim = make_backend(name, _mjcf(tmp_path, TENDONS, TENDON_ELEMENTS), 2)
        sim.apply_init_randomization(plan)
        sim.step(torch.tensor([[0.0, 0.04, 0.0], [0.0, 0.04, 0.0]]), nsteps=40)
        out[name] = sim.get_dof_pos().numpy()[:, 5]
    assert abs(out["mujoco"][0] - out["mujoco"][1]) > 2e-3, "the draws should change how fast the fingers close"
    np.testing.assert_allclose(out["sapien"], out["mujoco"], atol=2e-4)


def test_fluid_forces_follow_mujoco(tmp_path: Path) -> None:
    """Fluid forces (``density``/``viscosity``) are MuJoCo's passive forces each substep: gymnasium's
    swimmer loads, and with MuJoCo's Euler integrator (PhysX's kind; the file asks for RK4)
    its parity dynamics rollouts agree to 1e-5."""
    from simbackend.parity import run_parity

    source = (gymnasium_assets() / "swimmer.xml").read_text()
    assert 'integrator="RK4"' in source and 'viscosity="0.1"' in source
    path = tmp_path / "swimmer_euler.xml"
    path.write_text(source.replace('integrator="RK4"', 'integrator="Euler"'))
    report = run_parity("sapien", str(path), tiers=("dynamics",))
    assert report.passed, report.summary()
    assert max(r.max_error for r in report.rows if r.tier == "dynamics") < 1e-5
    # MuJoCo's ellipsoid fluid model of one geom: a tilted leaf sinking in water, gliding sideways
    leaf = tmp_path / "leaf.xml"
    leaf.write_text("""<mujoco><compiler angle="radian"/><option density="1000" viscosity="0.001"/><worldbody>
      <body name="leaf" pos="0 0 2" euler="0.4 0.2 0"><freejoint/>
        <geom type="box" size=".1 .05 .005" mass="0.05" fluidshape="ellipsoid"/></body></worldbody></mujoco>""")
    out = {}
    for name in ("mujoco", "sapien"):
        sim = make_backend(name, str(leaf), 1)
        sim.step(None, nsteps=250)
        out[name] = sim.get_qpos().numpy()[0]
    assert 0.05 < 2.0 - out["mujoco"][2] < 0.5, "the leaf sinks slowly (free fall would drop 1.2 m in 0.5 s)"
    assert np.abs(out["mujoco"][:2]).max() > 2e-3, "and glides sideways"
    np.testing.assert_allclose(out["sapien"], out["mujoco"], atol=1e-4)


@pytest.mark.parametrize("what", ["friction", "gravcomp", "equality"])
def test_per_substep_forces_are_not_on_the_gpu_path(tmp_path: Path, what: str) -> None:
    """The GPU path refuses, naming the element, what the CPU path applies per substep."""
    from simbackend.backends.sapien.plan import build_plan
    from simbackend.models import compile_model, model_info

    if what == "friction":
        m, needle = compile_model(_friction_model(tmp_path, 0.3)), "GPU: joint 'arm': frictionloss"
    elif what == "equality":
        m, needle = compile_model(_mjcf(tmp_path, EQUALITIES, EQUALITY_ELEMENTS)), "GPU: equality 'follow'"
    else:
        m, needle = (
            compile_model(_mjcf(tmp_path, ARM.replace('<body name="b"', '<body name="b" gravcomp="1"'))),
            "GPU: body 'b': gravity compensation",
        )
    with pytest.raises(ModelLoadError, match=needle):
        sgpu.GpuPhysx(build_plan(m, model_info(m)), 1, (4, 1), False, torch.device("cuda"), None)


# ----------------------------------------------------------------------------
# conversion
# ----------------------------------------------------------------------------


def test_multi_joint_body_is_a_chain_with_massless_intermediates(tmp_path: Path) -> None:
    """A body with k joints becomes k links; the first k-1 carry MIN_MASS and no shapes, in MuJoCo's joint order."""
    body = """<body name="slider" pos="0 0 1"><joint name="x" type="slide" axis="1 0 0"/>
      <joint name="z" type="slide" axis="0 0 1"/><joint name="r" type="hinge" axis="0 1 0"/>
      <geom size=".1" mass="2"/></body>"""
    sim = make_backend("sapien", _mjcf(tmp_path, body), 1)
    links = sim.engine.plan.articulations[0].links
    assert [lk.jtype for lk in links] == ["fixed", "prismatic", "prismatic", "revolute_unwrapped"]
    assert [lk.joint for lk in links] == [-1, 0, 1, 2]
    assert links[1].mass == links[2].mass == MIN_MASS and not links[1].shapes and not links[2].shapes
    assert links[3].body == 1 and links[3].mass == pytest.approx(2.0) and len(links[3].shapes) == 1
    assert any("intermediate" in n for n in sim.notes)


def test_collision_groups_and_parent_filter(tmp_path: Path) -> None:
    """contype/conaffinity become groups g0/g1; a parent/child pair across a multi-joint chain gets a shared ignore bit.

    In simulation (no gravity), the overlapping parent and child stay at rest, as
    in MuJoCo; without the ignore bit PhysX pushes them apart (the child is
    placed off-axis, so a contact would turn its hinges).
    """
    body = """<body name="p" pos="0 0 1"><freejoint/><geom size=".1" contype="3" conaffinity="5"/>
      <body name="c" pos="0.15 0.05 0.02"><joint name="cx" type="hinge" axis="0 1 0"/>
        <joint name="cy" type="hinge" axis="1 0 0"/><geom size=".1"/></body></body>"""
    path = _mjcf(tmp_path, body, option='gravity="0 0 0"')
    sim = make_backend("sapien", path, 1)
    art = sim.engine.plan.articulations[0]
    p, c = art.links[0], art.links[-1]
    assert p.shapes[0].groups[:2] == [3, 5]
    assert p.shapes[0].groups[2] & c.shapes[0].groups[2], "MuJoCo filters this parent/child pair; PhysX must too"
    assert p.shapes[0].groups[3] == c.shapes[0].groups[3] != 0
    for s in (sim, make_backend("mujoco", path, 1)):
        assert not bool(s.step(None, nsteps=20)["diverged"].any())
        qvel = np.abs(s.get_qvel().numpy()).max()
        assert qvel < 1e-6, f"{s.name}: parent and child collided (|qvel| {qvel:.3g})"


TABLE_AND_BOXES = """<body name="table" pos="0 0 0.4"><geom name="top" type="box" size=".3 .3 .02"/></body>
  <body name="box" pos="0 0 0.6"><freejoint/><geom type="box" size=".05 .05 .05"/></body>
  <body name="other" pos="0 0 0.8"><freejoint/><geom type="box" size=".05 .05 .05"/></body>"""


@pytest.mark.parametrize(
    "excludes,through",
    [
        ("", ()),
        ('<contact><exclude body1="table" body2="box"/></contact>', ("box",)),
        ('<contact><exclude body1="box" body2="other"/><exclude body1="table" body2="other"/></contact>', ("other",)),
    ],
    ids=["none", "box-table", "other-box-and-table"],
)
def test_contact_excludes_filter_the_named_body_pairs(tmp_path: Path, excludes: str, through: tuple) -> None:
    """<exclude body1 body2>: those bodies never touch, on PhysX as in MuJoCo, across trees and the
    static world; every other pair still collides. After 0.6 s a box excluded from what is below it
    has fallen through it (down to the floor), the others rest on the table or on each other."""
    path = _mjcf(tmp_path, TABLE_AND_BOXES, excludes)
    heights = {}
    for name in ("mujoco", "sapien"):
        sim = make_backend(name, path, 1)
        sim.step(None, nsteps=300)
        heights[name] = {b: float(sim.get_body_pos_w(sim.get_body_ids(b))[0, 0, 2]) for b in ("box", "other")}
    for b in ("box", "other"):
        ref, got = heights["mujoco"][b], heights["sapien"][b]
        assert abs(got - ref) < 5e-3, f"{b}: sapien {got:.4f} m, mujoco {ref:.4f} m"
        fell = ref < 0.3  # below the table top (0.42 m): it went through
        assert fell == (b in through), f"{b} at {ref:.3f} m in MuJoCo with excludes {excludes!r}"


PAIRED = """<body name="held" pos="-0.3 0 0.3"><freejoint/><geom name="hb" type="box" size=".05 .05 .05" contype="0"
    conaffinity="0"/></body>
  <body name="loose" pos="0.3 0 0.3"><freejoint/><geom type="box" size=".05 .05 .05" contype="0" conaffinity="0"/></body>
  <body name="excl" pos="0 0.5 0.3"><freejoint/><geom name="eb" type="box" size=".05 .05 .05"/></body>"""


def test_explicit_contact_pairs_collide_whatever_the_groups(tmp_path: Path) -> None:
    """<pair geom1 geom2>: two geoms collide although their contype/conaffinity never match (the
    paired box rests on the floor, its unpaired twin falls through, as in MuJoCo); a pair between
    directly jointed links is refused, naming the pair."""
    extra = '<contact><pair name="p1" geom1="hb" geom2="floor"/></contact>'
    path = _mjcf(tmp_path, PAIRED, extra)
    z = {}
    for name in ("mujoco", "sapien"):
        sim = make_backend(name, path, 1)
        sim.step(None, nsteps=300)
        z[name] = {b: float(sim.get_body_pos_w(sim.get_body_ids(b))[0, 0, 2]) for b in ("held", "loose", "excl")}
    for b in ("held", "loose", "excl"):
        assert abs(z["sapien"][b] - z["mujoco"][b]) < 5e-3, (b, z)
    assert (
        abs(z["mujoco"]["held"] - 0.05) < 2e-3
        and z["mujoco"]["loose"] < -0.5
        and abs(z["mujoco"]["excl"] - 0.05) < 2e-3
    )
    chain = ARM.replace(
        '<geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/>\n  <body',
        '<geom name="ga" type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/>\n  <body',
        1,
    )
    chain = chain.replace(
        '<geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/></body>',
        '<geom name="gb" type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/></body>',
    )
    with pytest.raises(ModelLoadError, match="pair 'adj'.*jointed"):
        make_backend("sapien", _mjcf(tmp_path, chain, '<contact><pair name="adj" geom1="ga" geom2="gb"/></contact>'), 1)


@pytest.mark.parametrize("gravcomp", [1.0, 0.4])
def test_gravity_compensation_follows_mujoco(tmp_path: Path, gravcomp: float) -> None:
    """Body gravcomp: -gravcomp * m * g at each centre of mass every substep. Fully compensated, a
    two-link arm stays where it starts; partly, it sags as in MuJoCo (0.4 s rollout, 2 envs with
    randomized masses and gravity, the same draws on both engines)."""
    arm = ARM.replace('<body name="a"', f'<body name="a" gravcomp="{gravcomp}"').replace(
        '<body name="b"', f'<body name="b" gravcomp="{gravcomp}"'
    )
    path = _mjcf(tmp_path, arm)
    from simbackend.randomization import Distribution, RandomizationPlan, Term

    plan = RandomizationPlan(
        (
            Term("body_mass", Distribution.uniform(0.5, 2.0), targets=("b",)),
            Term("gravity", Distribution.uniform([-2.0, 0.0, -3.0], [2.0, 0.0, 3.0]), operation="add"),
        ),
        seed=5,
    )
    out = {}
    for name in ("mujoco", "sapien"):
        sim = make_backend(name, path, 2)
        sim.apply_init_randomization(plan)
        sim.step(None, nsteps=200)
        out[name] = sim.get_dof_pos().numpy()
    if gravcomp == 1.0:
        assert np.abs(out["mujoco"]).max() < 1e-6
    else:
        assert np.abs(out["mujoco"]).max() > 0.1, "the arm should sag"
    np.testing.assert_allclose(out["sapien"], out["mujoco"], atol=2e-3)


def _terrain(tmp_path: Path, elevation: np.ndarray, body: str) -> str:
    nrow, ncol = elevation.shape
    text = " ".join(f"{v:.4f}" for v in elevation.reshape(-1))
    path = tmp_path / "terrain.xml"
    path.write_text(f"""<mujoco><asset><hfield name="hf" nrow="{nrow}" ncol="{ncol}" size="2 1.5 0.4 0.1"
      elevation="{text}"/></asset><worldbody>
      <geom name="terrain" type="hfield" hfield="hf" pos="0.1 -0.2 0.05" euler="0 0 0.3" friction="2"/>
      {body}</worldbody></mujoco>""")
    return str(path)


def test_height_field_terrain_scans_and_holds_bodies_as_in_mujoco(tmp_path: Path) -> None:
    """A height field in the world body is PhysX's triangle mesh of MuJoCo's surface (same grid, same
    cell diagonals): a scan of random terrain reads MuJoCo's heights to 1e-5 m, and a box dropped on
    a plateau rests on it on both engines (within MuJoCo's soft-contact depth). A height field on a
    moving body is refused, naming the geom."""
    rng = np.random.default_rng(3)
    rough = _terrain(
        tmp_path,
        rng.uniform(0, 1, (8, 10)),
        '<body name="probe" pos="0 0 2" mocap="false"><freejoint/><geom size=".01" contype="0"'
        ' conaffinity="0"/></body>',
    )
    heights = {}
    for name in ("mujoco", "sapien"):
        sim = make_backend(name, rough, 2)
        from simbackend.scanner import grid_offsets

        scanner = sim.create_height_scanner("probe", grid_offsets(2.4, 1.8, 0.3), alignment="world")
        heights[name] = scanner.heights().numpy()
    assert np.ptp(heights["mujoco"]) > 0.1
    np.testing.assert_allclose(heights["sapien"], heights["mujoco"], atol=1e-5)

    ramp = np.tile(np.linspace(0.0, 1.0, 10), (8, 1))  # z rises along x
    ramp[:, :4] = ramp[0, 3]  # a plateau at the lowest elevation where x < -0.67
    path = _terrain(
        tmp_path, ramp, '<body name="flat" pos="-1.2 -0.2 0.6"><freejoint/><geom type="box" size=".1 .1 .05"/></body>'
    )
    z = {}
    for name in ("mujoco", "sapien"):
        sim = make_backend(name, path, 1)
        sim.step(None, nsteps=400)
        z[name] = float(sim.get_body_pos_w(sim.get_body_ids("flat"))[0, 0, 2])
    # MuJoCo normalises elevations to [0, 1] (the plateau is the minimum: height 0), plus the geom's 0.05
    for name, value in z.items():
        assert abs(value - 0.10) < 3e-3, f"{name}: the box rests at {value:.4f} m, not on the plateau (0.10 m)"

    moving = Path(_terrain(tmp_path, ramp, ""))
    moving.write_text(
        moving.read_text()
        .replace('<geom name="terrain"', '<body name="mover"><freejoint/><geom name="terrain"')
        .replace('friction="2"/>', 'friction="2"/></body>')
    )
    with pytest.raises(ModelLoadError, match="terrain.*moving body"):
        make_backend("sapien", str(moving), 1)


def _hfield_xml(tiles: list[tuple[str, np.ndarray, str]]) -> str:
    """An MJCF of height-field tiles ``(pose attributes, elevation, size)`` and a free probe body."""
    assets, geoms = [], []
    for i, (where, elevation, size) in enumerate(tiles):
        nrow, ncol = elevation.shape
        text = " ".join(f"{v:.4f}" for v in elevation.reshape(-1))
        assets.append(f'<hfield name="h{i}" nrow="{nrow}" ncol="{ncol}" size="{size}" elevation="{text}"/>')
        geoms.append(f'<geom name="tile{i}" type="hfield" hfield="h{i}" {where}/>')
    return f"""<mujoco><asset>{"".join(assets)}</asset><worldbody>{"".join(geoms)}
      <body name="probe" pos="0 0 3"><freejoint/><geom size=".05"/></body></worldbody></mujoco>"""


def _stairs_and_rough(rng: np.random.Generator, nrow: int = 9, ncol: int = 12) -> tuple[np.ndarray, np.ndarray]:
    stairs = np.tile(np.floor(np.linspace(0, 4, ncol)) / 4, (nrow, 1))  # risers across x
    return stairs, rng.uniform(0, 1, (nrow, ncol))


def _random_rays(rng: np.random.Generator, k: int, verts: np.ndarray, span: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Rays of every kind over a terrain: vertical (half of them through grid vertices and lines),
    horizontal (into risers), slightly tilted, within a vertical plane, upward from below, any."""
    o = np.column_stack([rng.uniform(-span, span, (k, 2)), rng.uniform(-0.5, 1.5, k)])
    d = rng.normal(size=(k, 3))
    kind = np.arange(k) % 6
    d[kind == 0] = [0, 0, -1]
    d[kind == 1, 2] = 0
    d[kind == 2, :2] *= 0.05
    d[kind == 2, 2] = -1
    d[kind == 3, 0] = 0
    d[kind == 4, 2] = np.abs(d[kind == 4, 2])
    o[kind == 4, 2] = -0.5
    on = np.flatnonzero(kind == 0)[::2]
    o[on, :2] = verts[rng.integers(0, len(verts), len(on)), :2]
    o[on[::2], 1] = verts[rng.integers(0, len(verts), len(on[::2])), 1] + 0.37  # on a column line only
    return torch.as_tensor(o), torch.as_tensor(d / np.linalg.norm(d, axis=1, keepdims=True))


def test_height_field_rays_test_only_the_cells_they_cross_and_match_every_triangle() -> None:
    """Rays against a height field walk its grid and test only the cells they cross: the same
    distances, bit for bit, as testing every triangle of its mesh, for vertical rays (through grid
    vertices and lines too), horizontal ones into stair risers, tilted, upward and arbitrary ones;
    misses stay misses."""
    import mujoco

    from simbackend.backends.sapien import raycast
    from simbackend.backends.sapien.plan import hfield_mesh

    rng = np.random.default_rng(7)
    for elevation in (*_stairs_and_rough(rng), np.zeros((9, 12))):
        model = mujoco.MjModel.from_xml_string(_hfield_xml([('pos="0 0 0"', elevation, "1.1 0.8 0.5 0.1")]))
        verts, tris = hfield_mesh(model, 0)
        o, d = _random_rays(rng, 3000, verts, 1.4)
        brute = raycast._mesh(o, d, {"triangles": torch.as_tensor(verts[tris])})
        walk = raycast._hfield(o, d, {"grid": torch.as_tensor(verts.reshape(9, 12, 3))})
        hits = torch.isfinite(brute)
        assert hits.float().mean() > 0.2 and (~hits).any()
        assert torch.equal(walk, brute)


def test_height_field_tiles_scan_as_their_triangles_in_any_pose(tmp_path: Path) -> None:
    """A terrain of several height-field tiles (of two grid sizes, one turned and lifted) is cast
    against by grid size: each ray tests only the tiles whose box it meets (chosen once per env
    for parallel rays) and their crossed cells, with the same distances as every triangle of every
    tile, and the same first hits on the surface as MuJoCo's rays."""
    import mujoco

    from simbackend.backends.sapien import raycast
    from simbackend.backends.sapien.raycast import RayCaster
    from simbackend.math import quat_apply_inverse

    rng = np.random.default_rng(11)
    stairs, rough = _stairs_and_rough(rng)
    tiles = [
        ('pos="-1.1 -0.8 0"', stairs, "1.1 0.8 0.5 0.1"),
        ('pos="1.1 -0.8 0"', rough, "1.1 0.8 0.5 0.1"),
        ('pos="0 0.9 0.2" euler="0.1 0.2 0.7"', rough[::-1], "1.1 0.8 0.4 0.1"),
        ('pos="1 1 -0.1"', rng.uniform(0, 1, (5, 7)), "0.6 0.5 0.3 0.1"),
    ]
    path = tmp_path / "tiles.xml"
    path.write_text(_hfield_xml(tiles))
    sim = make_backend("sapien", str(path), 2)
    engine = sim.engine
    caster = RayCaster(engine.plan, engine.physx)
    assert [len(g) for g in caster._groups] == [3, 1]
    pos, quat = engine.body_pose(caster.bodies)
    probe = int(sim.get_body_ids("probe")[0])

    def every_triangle(o: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        best = torch.full(o.shape[:2], torch.inf, dtype=torch.float64)
        for shape in engine.plan.static_shapes:
            p, q = torch.as_tensor(shape.pose[:3]), torch.as_tensor(shape.pose[3:]).expand(*o.shape[:2], 4)
            lo, lv = quat_apply_inverse(q, o - p).reshape(-1, 3), quat_apply_inverse(q, d).reshape(-1, 3)
            tris = torch.as_tensor(np.asarray(shape.vertices)[np.asarray(shape.triangles)])
            best = torch.minimum(best, raycast._mesh(lo, lv, {"triangles": tris}).reshape(o.shape[:2]))
        return torch.where(torch.isfinite(best), best, -torch.ones_like(best))

    o, d = _random_rays(rng, 1200, np.asarray(engine.plan.static_shapes[0].vertices), 2.4)
    o, d = o.reshape(2, 600, 3), d.reshape(2, 600, 3)
    want = every_triangle(o, d)
    assert torch.equal(caster.cast(o, d, probe, pos, quat), want)
    # parallel rays in each env (a scanner's: the tiles are picked once per env)
    d = torch.as_tensor(np.array([[0.3, -0.2, -1.0], [-0.05, 0.4, -0.8]]))[:, None].expand(2, 600, 3)
    d = d / d.norm(dim=-1, keepdim=True)
    o[..., 2] = 1.5
    want = every_triangle(o, d)
    assert 0.5 < (want >= 0).float().mean() < 1
    assert torch.equal(caster.cast(o, d, probe, pos, quat), want)
    # MuJoCo's rays from above (its height field is a solid below the surface; PhysX's is the surface)
    o = torch.as_tensor(np.column_stack([rng.uniform(-2.4, 2.4, (400, 2)), np.full(400, 2.0)]))
    d = torch.as_tensor(np.column_stack([rng.normal(0, 0.2, (400, 2)), -np.ones(400)]))
    d = d / d.norm(dim=1, keepdim=True)
    got = caster.cast(o[None].expand(2, -1, -1), d[None].expand(2, -1, -1), -1, pos, quat)[0].numpy()
    m = mujoco.MjModel.from_xml_path(str(path))
    data = mujoco.MjData(m)
    mujoco.mj_forward(m, data)
    geomid = np.zeros(1, np.int32)
    want, top = np.full(len(o), -1.0), np.zeros(len(o), bool)
    for k, (oi, di) in enumerate(zip(o.numpy(), d.numpy())):
        want[k] = mujoco.mj_ray(m, data, oi, di, None, 1, 1, geomid)
        if want[k] >= 0:  # on the top surface, not on a side of MuJoCo's solid
            g = int(geomid[0])
            local = data.geom_xmat[g].reshape(3, 3).T @ (oi + want[k] * di - data.geom_xpos[g])
            top[k] = (np.abs(np.abs(local[:2]) - m.hfield_size[m.geom_dataid[g], :2]) > 1e-9).all()
    assert top.mean() > 0.3 and (want < 0).any() and (~top & (want >= 0)).any()
    np.testing.assert_allclose(got[top], want[top], atol=1e-9)
    assert ((got < 0) == (want < 0))[want < 0].all()
    assert ((got < 0) | (got > want))[~top & (want >= 0)].all()  # past a side wall: a farther surface or none


def test_height_field_meshes_are_cooked_once_and_shared_by_every_scene(tmp_path: Path, monkeypatch) -> None:
    """Each height field's triangle mesh is written once, named by its content, under the cache
    folder, and every env's scene (a fresh one at set_state too) loads that file, which SAPIEN cooks
    once per process and shares; the loaded mesh holds the plan's triangles. Without a writable
    cache folder the mesh is cooked per shape, as before."""
    from sapien import physx

    from simbackend.backends.sapien import scene

    rng = np.random.default_rng(5)
    stairs, rough = _stairs_and_rough(rng)
    path = tmp_path / "tiles.xml"
    path.write_text(
        _hfield_xml([('pos="-1.1 0 0"', stairs, "1.1 0.8 0.5 0.1"), ('pos="1.1 0 0"', rough, "1.1 0.8 0.5 0.1")])
    )
    monkeypatch.setenv("SIMBACKEND_CACHE", str(tmp_path / "cache"))
    made: list = []
    real = physx.PhysxCollisionShapeTriangleMesh

    def spy(*args):
        made.append(args[0])
        return real(*args)

    monkeypatch.setattr(scene.physx, "PhysxCollisionShapeTriangleMesh", spy)
    sim = make_backend("sapien", str(path), 3)
    files = sorted((tmp_path / "cache" / "sapien-meshes").iterdir())
    assert len(files) == 2 and all(f.suffix == ".glb" for f in files)
    assert sorted(set(made)) == [str(f) for f in files] and len(made) == 6
    sim.set_state([1], sim.get_qpos()[1:2])
    assert len(made) == 8 and set(made) == {str(f) for f in files}
    plan = sim.engine.plan
    for shape, cooked in zip(plan.static_shapes, sim.engine.physx.static_shapes(2)):
        want = np.asarray(shape.vertices, np.float32)[np.asarray(shape.triangles)].reshape(-1, 9)
        have = np.asarray(cooked.get_vertices())[np.asarray(cooked.get_triangles())].reshape(-1, 9)
        np.testing.assert_array_equal(np.unique(have, axis=0), np.unique(want, axis=0))
    # SAPIEN keeps what it cooked from a file: the same path gives the first mesh, whatever it now holds
    first = scene.shared_mesh_file(
        np.asarray(plan.static_shapes[0].vertices), np.asarray(plan.static_shapes[0].triangles)
    )
    assert first is not None
    mat = physx.PhysxMaterial(1.0, 1.0, 0.0)
    before = real(first, np.ones(3, np.float32), mat).get_vertices()
    Path(first).write_bytes(Path(str(files[0] if str(files[0]) != first else files[1])).read_bytes())
    np.testing.assert_array_equal(real(first, np.ones(3, np.float32), mat).get_vertices(), before)

    made.clear()
    (tmp_path / "blocked").write_text("")
    monkeypatch.setenv("SIMBACKEND_CACHE", str(tmp_path / "blocked"))  # a file: no folder can be made there
    other = make_backend("sapien", str(path), 1)
    assert len(made) == 2 and all(isinstance(a, np.ndarray) for a in made)
    assert other.engine.physx.static_shapes(0)[0].get_triangles().shape == (2 * 8 * 11, 3)


def test_mocap_body_is_fixed_at_its_model_pose_and_collides(tmp_path: Path) -> None:
    """A mocap body stays at its model pose (nothing in the contract moves it) and holds what lands
    on it, as in MuJoCo; the notes say so."""
    body = (
        '<body name="platform" mocap="true" pos="0.5 0 0.4" quat="0.9659 0 0 0.2588">'
        '<geom type="box" size=".3 .3 .02"/></body>'
        '<body name="box" pos="0.5 0 0.8"><freejoint/><geom type="box" size=".05 .05 .05"/></body>'
    )
    path = _mjcf(tmp_path, body)
    poses = {}
    for name in ("mujoco", "sapien"):
        sim = make_backend(name, path, 1)
        sim.step(None, nsteps=400)
        ids = sim.get_body_ids(["platform", "box"])
        poses[name] = np.concatenate(
            [sim.get_body_pos_w(ids)[0].numpy().reshape(-1), sim.get_body_quat_w(ids)[0, 0].numpy()]
        )
        if name == "sapien":
            assert any("mocap" in n for n in sim.notes)
    np.testing.assert_allclose(poses["mujoco"][:3], [0.5, 0, 0.4], atol=1e-6)
    assert abs(poses["mujoco"][5] - 0.47) < 3e-3  # resting on the platform (top 0.42 + half 0.05)
    np.testing.assert_allclose(poses["sapien"], poses["mujoco"], atol=3e-3)


def test_joint_ref_stiffness_and_geared_actuator_follow_mujoco(tmp_path: Path) -> None:
    """ref offsets, joint springs (springref), damping, armature and a geared position actuator map onto one PhysX drive.

    Contact-free, 0.5 s from the same state and ctrl: joint positions within 1e-2 rad (m) of
    MuJoCo's. A wrong mapping (ref offset, spring reference, gear squared in the
    stiffness, target scaled by the gear) is off by 0.1 or more.
    """
    body = """<body name="a" pos="0 0 1"><joint name="j1" type="hinge" axis="0 1 0" ref="0.3" stiffness="20"
        springref="0.5" damping="0.2" armature="0.01"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" contype="0" conaffinity="0"/>
      <body name="b" pos="0.3 0 0"><joint name="j2" type="slide" axis="1 0 0"/>
        <geom size="0.05" contype="0" conaffinity="0"/></body></body>"""
    acts = """<actuator><position name="p1" joint="j1" kp="5" kv="1" gear="2"/>
      <velocity name="v2" joint="j2" kv="5"/></actuator>"""
    # a fine step: the engines integrate stiff drives differently (MuJoCo's Euler is explicit in
    # kp and kv, PhysX's drive implicit); at 5e-4 s that difference stays near 2e-3 rad
    path = _mjcf(tmp_path, body, acts, 'timestep="0.0005"')
    sims = [make_backend(name, path, 2) for name in ("mujoco", "sapien")]
    q = np.array([[0.3, 0.0], [0.8, 0.05]])
    ctrl = np.array([[0.4, 0.05], [-0.2, -0.05]])
    for s in sims:
        s.set_state(None, q)
    for _ in range(25):
        for s in sims:
            assert not bool(s.step(ctrl, nsteps=40)["diverged"].any())
    mj, sp = (s.get_qpos().numpy() for s in sims)
    assert np.abs(mj - q).max() > 0.05, "the joints barely moved: the comparison would be blind"
    np.testing.assert_allclose(sp, mj, atol=1e-2)


# ----------------------------------------------------------------------------
# options and devices
# ----------------------------------------------------------------------------


def test_options() -> None:
    """Common options apply (solver_iterations -> PhysX position iterations, timestep); the sapien block is validated."""
    with make_backend(
        "sapien",
        "pendulum",
        1,
        nthread=2,
        solver_iterations=12,
        timestep=0.004,
        sapien={"solver": "tgs", "solver_velocity_iterations": 2},
    ) as sim:
        art = sim.engine.physx.arts[0][0]
        assert art.get_solver_position_iterations() == 12 and art.get_solver_velocity_iterations() == 2
        assert sim.physics_dt == pytest.approx(0.004) and float(sim.engine.physx.systems[0].timestep) == pytest.approx(
            0.004
        )
        assert sim.engine.solver == "tgs"
    with pytest.raises(InvalidArgumentError, match="solver: unknown option"):
        make_backend("sapien", "pendulum", 1, solver="tgs")  # engine options live in the sapien={...} block
    with pytest.raises(InvalidArgumentError, match="sapien.solver"):
        make_backend("sapien", "pendulum", 1, sapien={"solver": "newton"})
    with pytest.raises(InvalidArgumentError, match="solver_iterations"):
        make_backend("sapien", "pendulum", 1, solver_iterations=256)
    with pytest.raises(InvalidArgumentError, match="sapien.spacing"):
        make_backend("sapien", "pendulum", 1, sapien={"spacing": -1.0})


@pytest.mark.parametrize(
    "bodies,positions",
    [
        (
            '<body name="a" pos="0 0 1"><geom type="box" size=".1 .1 .1"/></body>'
            '<body name="b" pos="1 0 1"><geom type="sphere" size=".1"/></body>',
            [[0, 0, 1], [1, 0, 1]],
        ),
        ("", []),  # world geoms only: no articulation at all
    ],
)
def test_no_joints_model_loads(tmp_path: Path, bodies: str, positions: list) -> None:
    """A model whose every body is welded to the world loads, steps and reads (it failed with an IndexError)."""
    path = tmp_path / "static.xml"
    path.write_text(f'<mujoco><worldbody><geom type="plane" size="1 1 .1"/>{bodies}</worldbody></mujoco>')
    with make_backend("sapien", str(path), 2) as sim:
        assert sim.nq == 0 and sim.nv == 0
        assert not sim.step(None)["diverged"].any()
        sim.set_state(None, np.zeros((2, 0)))
        np.testing.assert_allclose(sim.get_body_pos_w().numpy(), [[[0, 0, 0]] + positions] * 2, atol=1e-6)
        np.testing.assert_allclose(sim.get_body_quat_w().numpy()[..., 0], 1.0, atol=1e-6)


def test_notes_name_the_solver_in_use() -> None:
    for solver in ("pgs", "tgs"):
        with make_backend("sapien", "pendulum", 1, sapien={"solver": solver}) as sim:
            text = " ".join(sim.notes)
            assert solver.upper() in text and ({"pgs", "tgs"} - {solver}).pop().upper() + ")" not in text


@pytest.mark.parametrize("sim_name", ["sapien", "mujoco"])
def test_force_physx_cannot_integrate_is_divergence(sim_name: str) -> None:
    """PhysX zeroes the velocities of a step it cannot integrate (1e30 N): its qacc reports it, the env
    is restored; MuJoCo gives the same mask and state."""
    with make_backend(sim_name, "cartpole", 2) as sim:
        sim.set_state(None, np.full((2, 2), 0.1), np.full((2, 2), 0.2))
        f = np.zeros((2, 1, 3))
        f[1, 0] = [1e30, 0, 0]
        for _ in range(2):  # twice: the second call starts from the restored state, not the failed one
            sim.apply_body_force([2], f)
            assert sim.step(np.zeros((2, 1)))["diverged"].tolist() == [False, True]
            np.testing.assert_allclose(sim.get_qpos().numpy()[1], [0.1, 0.1], rtol=1e-6)
            np.testing.assert_allclose(sim.get_qvel().numpy()[1], [0.2, 0.2], rtol=1e-6)


@pytest.mark.parametrize("sim_name", ["sapien", "mujoco"])
def test_enormous_motor_ctrl_is_divergence(sim_name: str, tmp_path: Path) -> None:
    """A motor without a ctrl range given 1e30: diverged and restored on both engines, the other env steps."""
    body = ARM + '<body name="c" pos="0 2 1"><joint name="s1" type="slide" axis="1 0 0"/><geom size=".1"/></body>'
    acts = (
        '<actuator><motor name="m1" joint="j1" ctrllimited="false"/>'
        '<motor name="m2" joint="s1" ctrllimited="false"/></actuator>'
    )
    with make_backend(sim_name, _mjcf(tmp_path, body, acts), 2) as sim:
        sim.set_state(None, np.full((2, 3), 0.1), np.full((2, 3), 0.2))
        ctrl = np.zeros((2, 2))
        ctrl[1, 0] = 1e30
        assert sim.step(ctrl)["diverged"].tolist() == [False, True]
        q, v = sim.get_qpos().numpy(), sim.get_qvel().numpy()
        np.testing.assert_allclose(q[1], 0.1, rtol=1e-6)
        np.testing.assert_allclose(v[1], 0.2, rtol=1e-6)
        assert np.abs(q[0] - 0.1).max() > 1e-4, "env 0 must have stepped"


class _Interrupting:
    """Wraps a PhysX system; its ``step`` raises KeyboardInterrupt at the ``at``-th call (counted in ``calls``)."""

    def __init__(self, system, calls: dict, at: int):
        self.system, self.calls, self.at = system, calls, at

    def __getattr__(self, name):
        return getattr(self.system, name)

    def step(self):
        self.calls["n"] += 1
        if self.calls["n"] == self.at:
            raise KeyboardInterrupt
        self.system.step()


@pytest.mark.parametrize("where", ["scene step", "verdict"])
def test_interrupted_step_restores_every_scene(where: str) -> None:
    """A KeyboardInterrupt inside PhysX's stepping loop, or while the step is judged after its
    substeps, leaves every env at its pre-call state, and the next step continues consistently."""
    with make_backend("sapien", "arm7", 3) as sim, make_backend("sapien", "arm7", 3) as twin:
        ctrl = np.full((3, sim.num_actuators), 0.3)
        for s in (sim, twin):
            s.step(ctrl, nsteps=2)
        q0, v0 = sim.get_qpos().clone(), sim.get_qvel().clone()
        e = sim.engine.physx
        victim = e.systems[1]
        if where == "scene step":
            calls = {"n": 0}
            e.systems[1] = _Interrupting(victim, calls, at=5)
        else:

            def interrupted():
                raise KeyboardInterrupt

            e._qacc = interrupted
        with pytest.raises(KeyboardInterrupt):
            sim.step(ctrl, nsteps=10)
        e.systems[1] = victim
        e.__dict__.pop("_qacc", None)
        assert torch.equal(sim.get_qpos(), q0) and torch.equal(sim.get_qvel(), v0)
        torch.testing.assert_close(
            torch.from_numpy(sim.engine.layout.state_from_pack(e._serialised())[0]), q0.double(), rtol=0, atol=1e-6
        )  # PhysX itself holds the pre-call state
        # the state is restored exactly; PhysX's contact warm-start caches are not part of its
        # serialised state, so the continuation agrees to solver precision, not bit for bit
        for s in (sim, twin):
            s.step(ctrl, nsteps=3)
        np.testing.assert_allclose(sim.get_qpos().numpy(), twin.get_qpos().numpy(), rtol=0, atol=1e-6)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_cuda_without_cuda_is_a_clear_error() -> None:
    with pytest.raises(SimBackendError, match="CUDA"):
        make_backend("sapien", "pendulum", 2, device="cuda")


def test_missing_gpu_library_message_says_how_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the PhysX GPU library (downloaded by SAPIEN on first use, impossible offline) the error names path and URL."""
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: tmp_path))
    path, url = sgpu.gpu_library()
    assert str(path).startswith(str(tmp_path)) and url.startswith("https://") and url.endswith(".zip")
    with pytest.raises(SimBackendError) as err:
        sgpu.require_gpu_library()
    assert str(path) in str(err.value) and url in str(err.value) and "unzip" in str(err.value)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    sgpu.require_gpu_library()  # present: no error


def test_grid_origins_are_distinct_and_spaced() -> None:
    o = sgpu.grid_origins(10, 3.0)
    assert o.shape == (10, 3) and (o[:, 2] == 0).all()
    d = np.linalg.norm(o[:, None] - o[None], axis=-1) + np.eye(10) * 1e9
    assert d.min() == pytest.approx(3.0)


# ----------------------------------------------------------------------------
# the GPU path's index and packing logic, on the CPU
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["quadruped", "arm7"])
def test_layout_with_gpu_rows_and_offsets_matches_cpu(model: str) -> None:
    """Rows in any order (as gpu_index numbers them) and sub-scene offsets give the CPU path's quantities.

    The CPU buffers are permuted into a random row order with each env's links
    shifted by its origin; a Layout built with that row map and those origins
    must read back the same qpos, qvel, body poses and Jacobians, and pack_state
    must address the same rows with the origin added.
    """
    n = 3
    sim = make_backend("sapien", model, n)
    rng = np.random.default_rng(0)
    q = random_qpos(sim, rng)
    v = rng.normal(size=(n, sim.nv))
    sim.set_state(None, q, v)
    e = sim.engine.physx
    data = e.link_data(None, arts=np.arange(e.num_arts), velocities=True).clone()
    aq, av = e.art_qpos().clone(), e.art_qvel().clone()
    R = data.shape[0]
    perm = rng.permutation(R)  # new row of old row r is perm[r]
    origins = rng.uniform(-20, 20, size=(n, 3))
    g_data, g_q, g_v = torch.empty_like(data), torch.empty_like(aq), torch.empty_like(av)
    g_data[perm], g_q[perm], g_v[perm] = data, aq, av
    env_of_old_row = np.repeat(np.arange(n), e.num_arts)
    g_data[perm, :, :3] += torch.as_tensor(origins[env_of_old_row])[:, None]
    site_pose = np.concatenate([sim.engine.model.site_pos, sim.engine.model.site_quat], 1)
    lay = Layout(sim.engine.plan, perm[e.rows], e.cols, origins, site_pose, torch.device("cpu"))
    ref = sim.engine.layout
    bodies = np.arange(sim.info.nbody)
    free = ref.free_body
    torch.testing.assert_close(lay.gather(g_data, bodies), ref.gather(data, bodies), atol=1e-5, rtol=0)
    torch.testing.assert_close(lay.qpos(g_q, lay.gather(g_data, free)), ref.qpos(aq, ref.gather(data, free)))
    torch.testing.assert_close(
        lay.qvel(g_v, lay.gather(g_data, free)), ref.qvel(av, ref.gather(data, free)), atol=1e-5, rtol=0
    )
    for sid in range(len(sim.site_names)):
        cols = np.arange(sim.nv)
        for a, b in zip(lay.site_jacobian(g_data, sid, cols), ref.site_jacobian(data, sid, cols)):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    ids = np.array([2, 0])
    qt, vt = torch.as_tensor(q[ids]), torch.as_tensor(v[ids])
    packed, ref_packed = lay.pack_state(ids, qt, vt), ref.pack_state(ids, qt, vt)
    np.testing.assert_array_equal(packed["rows"].numpy(), perm[ref_packed["rows"].numpy()])
    shift = np.repeat(origins[ids], e.num_arts, axis=0)
    np.testing.assert_allclose(
        packed["root_pose"][:, :3].numpy() - shift, ref_packed["root_pose"][:, :3].numpy(), atol=1e-12
    )
    np.testing.assert_allclose(packed["qpos"].numpy(), ref_packed["qpos"].numpy())


def _gpu_rows() -> tuple[torch.Tensor, torch.Tensor, int]:
    """GPU-style rows: N=3 envs of A=2 articulations in a permuted order, the spare sub-scene's in between."""
    rows = torch.tensor([[5, 2], [0, 7], [4, 1]])  # (N, A)
    return rows, torch.tensor([6, 3]), 8  # spare rows (A,), R


def test_gpu_restore_index_touches_only_restored_envs() -> None:
    """The fixed-length restore index (GPU path, on CPU tensors): restored envs' rows in their own
    slots, every other entry the spare's row of the same articulation, then the spare's rows."""
    rows, spare, _ = _gpu_rows()
    idx = sgpu.restore_index(torch.tensor([False, True, False]), rows, spare)
    assert idx.dtype == torch.int32 and idx.tolist() == [6, 3, 0, 7, 6, 3, 6, 3]
    idx = sgpu.restore_index(torch.tensor([True, False, True]), rows, spare)
    assert idx.tolist() == [5, 2, 6, 3, 4, 1, 6, 3]
    idx = sgpu.restore_index(torch.zeros(3, dtype=torch.bool), rows, spare)
    assert set(idx.tolist()) == {6, 3}  # no env's row is written


def test_gpu_row_restorer_writes_back_only_restored_rows() -> None:
    """The GPU path's restore (on CPU tensors): after a 'step' changes every buffer row, restoring
    env 1 writes its pre-call values into its rows (and the spare's) and leaves every other row."""
    rows, spare, R = _gpu_rows()
    D = 3
    qpos, qvel, links = torch.randn(R, D), torch.randn(R, D), torch.randn(R, 4, 13)
    r = sgpu.RowRestorer((qpos, qvel, links[:, 0]), rows, spare)
    r.save()
    pre = (qpos.clone(), qvel.clone(), links.clone())
    for buf in (qpos, qvel, links):  # the step moves every row
        buf += 1.0
    stepped = (qpos.clone(), qvel.clone(), links.clone())
    index = r.restore(torch.tensor([False, True, False]))
    assert index is r.index and index.tolist() == [6, 3, 0, 7, 6, 3, 6, 3]
    back = torch.zeros(R, dtype=torch.bool)
    back[[0, 7, 6, 3]] = True  # env 1's rows and the spare's
    for now, p, st in zip((qpos, qvel, links[:, 0]), pre, stepped):
        p, st = (p if p.dim() == 2 else p[:, 0]), (st if st.dim() == 2 else st[:, 0])
        torch.testing.assert_close(now[back], p[back], rtol=0, atol=0)
        torch.testing.assert_close(now[~back], st[~back], rtol=0, atol=0)
    torch.testing.assert_close(links[:, 1:], stepped[2][:, 1:], rtol=0, atol=0)  # only root link data
    # nothing restored: only the spare's rows go back
    r.save()
    for buf in (qpos, qvel, links):
        buf += 1.0
    r.restore(torch.zeros(3, dtype=torch.bool))
    assert torch.equal(qpos[[6, 3]], r.pre[0][[6, 3]]) and not torch.equal(qpos[[0, 7]], r.pre[0][[0, 7]])


def test_physx_failures_numpy_and_torch_agree() -> None:
    """One rule for both paths: an env fails when one of its rows has |qacc| dt > MAX_QVEL or NaN."""
    from simbackend.backends.sapien.paths import physx_failures
    from simbackend.divergence import MAX_QVEL

    dt = 0.01
    qacc = np.zeros((6, 2), np.float32)
    qacc[1, 0] = 1.01 * MAX_QVEL / dt  # row 1: env 2 (rows below)
    qacc[4, 1] = np.nan  # row 4: env 0
    qacc[3, 0] = 0.99 * MAX_QVEL / dt  # under the bound
    rows = np.array([[4, 0], [3, 5], [2, 1]])
    got = physx_failures(qacc, rows, dt)
    assert got.tolist() == [True, False, True]
    assert physx_failures(torch.from_numpy(qacc), torch.from_numpy(rows), dt).tolist() == got.tolist()


def test_model_fields_read_back_from_physx() -> None:
    """model_fields reports what the PhysX links hold: masses and inertias as compiled by MuJoCo."""
    sim = make_backend("sapien", "arm7", 1)
    ref = make_backend("mujoco", "arm7", 1).model_fields()
    got = sim.model_fields()
    np.testing.assert_allclose(got["body_mass"], ref["body_mass"], rtol=1e-6)
    np.testing.assert_allclose(got["body_inertia"], ref["body_inertia"], atol=1e-7)
    np.testing.assert_allclose(got["joint_range"], ref["joint_range"], atol=1e-6)


def test_unlimited_servo_force_reads_back_as_infinite(tmp_path: Path) -> None:
    """A servo without forcerange has PhysX's finite stand-in for no limit; model_fields says inf, as
    MuJoCo does (it said -3e38, which failed the parity suite's model tier), and a real range stays."""
    path = _mjcf(
        tmp_path,
        ARM,
        '<actuator><position joint="j1" kp="10"/>'
        '<position joint="j2" kp="10" forcelimited="true" forcerange="-3 3"/></actuator>',
    )
    got = make_backend("sapien", path, 1).model_fields()["actuator_force_range"]
    np.testing.assert_array_equal(got, make_backend("mujoco", path, 1).model_fields()["actuator_force_range"])
    np.testing.assert_array_equal(got, [[-np.inf, np.inf], [-3.0, 3.0]])


def test_cpu_scene_limit_is_a_clear_error() -> None:
    """SAPIEN 3.0.3 aborts the interpreter when it frees more than ~1000 CPU scenes: refuse up front."""
    from simbackend.backends.sapien.cpu import MAX_CPU_SCENES

    with make_backend("sapien", "pendulum", 2) as sim:
        assert sim.capabilities.max_envs == MAX_CPU_SCENES
        with pytest.raises(InvalidArgumentError, match="device='cuda'") as refused:
            make_backend("sapien", "pendulum", MAX_CPU_SCENES - 1)
        assert "shards=K" in str(refused.value) and "--shards K" in str(refused.value)  # the way out: shards
    make_backend("sapien", "pendulum", 2).close()  # closed scenes count no more


@pytest.mark.parametrize("model", ["arm7", "quadruped", "/tmp/none"])
def test_divergence_judged_on_the_serialised_state_equals_the_getters(model: str, tmp_path: Path) -> None:
    """The CPU step judges divergence on qpos/qvel decoded from PhysX's serialised states; they must
    be the getters' qpos/qvel (free roots with an offset centre of mass included)."""
    if model == "/tmp/none":
        model = str(tmp_path / "offcom.xml")
        Path(model).write_text(
            '<mujoco><option gravity="0 0 0"/><worldbody><body name="b" pos="0 0 1"><freejoint name="f"/>'
            '<geom type="box" size=".1 .2 .05" pos=".3 .1 0" mass="2"/></body><body name="arm" pos="2 0 1">'
            '<joint name="h" type="hinge" axis="0 1 0" ref="0.2"/><geom type="capsule" fromto="0 0 0 .5 0 0" size=".05"/>'
            "</body></worldbody></mujoco>"
        )
    with make_backend("sapien", model, 3) as sim:
        rng = np.random.default_rng(1)
        sim.set_state(None, random_qpos(sim, rng), rng.normal(size=(3, sim.nv)))
        sim.step(np.zeros((3, sim.num_actuators)) if sim.num_actuators else None, nsteps=2)
        q, v = sim.engine.layout.state_from_pack(sim.engine.physx._serialised())
        sim.engine._decoded = None  # the getters then read the links and joints, not the serialised states
        np.testing.assert_allclose(q, sim.get_qpos().numpy(), atol=1e-6)
        np.testing.assert_allclose(v, sim.get_qvel().numpy(), atol=1e-5)


def test_randomized_friction_combines_by_average(tmp_path) -> None:
    """PhysX averages two materials' friction where MuJoCo takes the maximum (docs/randomization.md): a box launched on a low-friction floor slides as each engine's rule says."""
    from simbackend.contract_tests.test_randomization import DR_MJCF
    from simbackend.randomization import Distribution, RandomizationPlan, Term

    path = tmp_path / "dr.xml"
    path.write_text(DR_MJCF)
    box_mu, floor_mu, v0, g = 0.6, 0.1, 2.0, 9.81
    plan = RandomizationPlan(
        (Term("geom_friction", Distribution.fixed(box_mu), operation="set", targets=("box_geom",)),)
    )
    slid = {}
    for name in ("mujoco", "sapien"):
        with make_backend(name, path, 1) as sim:
            sim.apply_init_randomization(plan)
            qvel = sim.get_qvel().numpy()
            qvel[0, sim.info.joint_dofadr[sim.info.joint_names.index("box_free")]] = v0
            sim.set_state(None, sim.get_qpos(), qvel)
            sim.step(torch.zeros(1, sim.num_actuators), nsteps=1000)
            slid[name] = float(sim.get_body_pos_w(sim.get_body_ids("box"))[0, 0, 0])
    np.testing.assert_allclose(slid["mujoco"], v0**2 / (2 * max(box_mu, floor_mu) * g), rtol=0.01)
    np.testing.assert_allclose(slid["sapien"], v0**2 / (2 * (box_mu + floor_mu) / 2 * g), rtol=0.01)


_PUSHED_FOOT = """
<mujoco>
  <option timestep="0.002"/>
  <worldbody>
    <geom type="plane" size="2 2 0.1"/>
    <geom name="ramp" type="box" size="0.5 0.2 0.05" pos="-0.0171 -1 0.45302" euler="0 20 0"/>
    <body name="box" pos="0.0342 -1 0.59397" euler="0 20 0"><freejoint/><geom type="box" size="0.1 0.1 0.1" mass="2"/></body>
    <body name="foot" pos="0 0 0.19">
      <joint name="sx" type="slide" axis="1 0 0"/><joint name="sz" type="slide" axis="0 0 1"/>
      <geom type="box" size="0.1 0.1 0.1" mass="1"/>
      <body name="toe" pos="0 0 -0.1"><joint name="toe" type="hinge" axis="0 1 0"/>
        <geom type="sphere" size="0.05" mass="0.5" pos="0 0 -0.04"/></body>
    </body>
  </worldbody>
  <actuator><motor joint="sx"/><position joint="toe" kp="200" kv="5"/></actuator>
</mujoco>
"""


def test_gpu_contact_layout_derives_friction_from_the_cpu_paths_buffers(tmp_path: Path) -> None:
    """The GPU path's contact force: :class:`ContactDerivation` on buffers laid out as PhysX's GPU buffers
    (rows shuffled as ``gpu_index`` shuffles them, normal-only impulses of a body-impulse query) and gathered
    by ``gather_contact_forces`` gives the CPU path's forces, friction included: a box on a 20 degree slope
    reads its weight straight up (not the normal force alone), a foot (an articulation link whose toe link
    touches the slope's floor) pushed sideways reads the push, opposite; the world and shapeless bodies read
    zero, the others their own rows, in the order asked."""
    from simbackend.backends.sapien.contact import gather_contact_forces

    path = tmp_path / "pushed.xml"
    path.write_text(_PUSHED_FOOT)
    n = 2
    sim = make_backend("sapien", str(path), n, contact_sensing=True)
    try:
        push = torch.tensor([[4.0, 0.0], [-6.0, 0.0]])
        for _ in range(40):
            sim.step(push, nsteps=10)
        every = np.arange(sim.info.nbody)
        cpu = sim.get_body_contact_force_w(every).double()
        box, foot, toe = (int(sim.get_body_ids(b)[0]) for b in ("box", "foot", "toe"))
        w_box = float(sim.get_env_body_mass()[0, box]) * 9.81
        w_foot = float(sim.get_env_body_mass()[0, [foot, toe]].sum()) * 9.81
        torch.testing.assert_close(
            cpu[:, box], torch.tensor([[0.0, 0, w_box]] * n, dtype=torch.float64), atol=0.05, rtol=0
        )
        feet = cpu[:, foot] + cpu[:, toe]
        want = torch.stack([-push[:, 0].double(), torch.zeros(n, dtype=torch.float64), torch.full((n,), w_foot)], 1)
        torch.testing.assert_close(feet, want, atol=0.05, rtol=0)
        px = sim.engine.physx
        d = px._contact
        reported, touching = px.reported(np.arange(n))
        assert abs(reported[0, box, 0]) > 5, "PhysX reports the normal force only: the friction is derived"
        # the GPU layout: rows permuted (gpu_index order), links by column, a (R, L, 6) joint force buffer
        R = px.rows.size
        perm = torch.as_tensor(np.random.default_rng(0).permutation(R))
        links = torch.zeros((R, px.cols.max_links, 13), dtype=torch.float32)
        links[perm] = px.link_data(every, arts=np.arange(px.num_arts), velocities=True).float()
        jf = torch.zeros((R, px.cols.max_links, 6), dtype=torch.float32)
        jf[perm] = torch.from_numpy(px._jf).float()
        rows = perm[torch.as_tensor(px.rows)]
        forces = d.forces(
            rows,
            links,
            torch.from_numpy(px._v0),
            torch.from_numpy(px._mass0),
            torch.tensor([0.0, 0.0, -9.81]),
            jf,
            None,
            torch.from_numpy(reported[:, d.bodies]),
            torch.from_numpy(touching[:, d.bodies]),
            sim.physics_dt,
        )
        columns = torch.as_tensor(d.columns)
        asked = torch.as_tensor([toe, 0, box, foot])
        got = gather_contact_forces(forces, columns, asked, n)
        torch.testing.assert_close(got, cpu[:, asked], atol=2e-3, rtol=1e-5)
        assert torch.equal(got[:, 1], torch.zeros(n, 3, dtype=torch.float64))
        assert torch.equal(gather_contact_forces(None, columns, asked, n), torch.zeros(n, 4, 3, dtype=torch.float64))
    finally:
        sim.close()
