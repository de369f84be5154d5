"""simbackend.controllers against ground truth, on every engine.

Joint servos reach the commanded positions, deltas move joints by the delta,
the PD law's ctrl equals kp (t - q) - kd qdot over gear at every substep, the
end-effector controller moves the site by the commanded translation and
rotation in each of the four frames, and every bad input raises a one-line
error naming the argument and changes nothing.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from simbackend import make_backend
from simbackend.controllers import (
    EE_FRAMES,
    CombinedController,
    Controller,
    EEPoseConfig,
    EEPoseController,
    JointPDConfig,
    JointPositionConfig,
    PassiveConfig,
    available_controllers,
    make_controller,
    register_controller,
)
from simbackend.controllers._rotation import quat_from_rotvec, rotvec_from_quat
from simbackend.errors import (
    ArgumentTypeError,
    EnvIdError,
    InputShapeError,
    InvalidArgumentError,
    NonFiniteError,
    UnknownNameError,
)
from simbackend.math import quat_angle_between, quat_apply, quat_conj, quat_mul

SIMS = ["mujoco", "sapien"]
N = 4
ARM = [f"joint{i}" for i in range(1, 8)]
LEGS = [f"{leg}_{part}" for leg in ("FL", "FR", "RL", "RR") for part in ("hip", "thigh", "calf")]

_CACHE: dict = {}


@pytest.fixture(scope="module", autouse=True)
def _close_cached():
    yield
    for b in _CACHE.values():
        b.close()
    _CACHE.clear()


def backend(sim: str, model: str):
    """A cached backend of ``model``, with no pre-step function, at its home state, at rest."""
    b = _CACHE.get((sim, model))
    if b is None:
        b = _CACHE[(sim, model)] = make_backend(sim, model, N)
    b.set_pre_step_control(None)
    key = {"arm7": "home", "quadruped": "stand"}.get(model)
    qpos = b.get_keyframe_qpos(key) if key else b.get_default_qpos()
    b.set_state(None, qpos.expand(N, -1))
    return b


def arm_at_home(sim: str, settle: int = 300):
    """arm7 at its home keyframe, servos holding it (gravity sag settled)."""
    b = backend(sim, "arm7")
    b.step(b.get_keyframe_qpos("home")[:7].expand(N, -1), settle)
    return b


def dof(b, joints):
    return b.get_qpos()[:, b.get_joint_qpos_indices(joints)]


def pre_step(b):
    return b._pre_step  # no public getter: the contract only sets it


# ----------------------------------------------------------------------
# joint position (servos)
# ----------------------------------------------------------------------
@pytest.mark.parametrize("sim", SIMS)
def test_joint_position_absolute_reaches_targets(sim):
    """Absolute targets (controller units) are reached by the servos within 2e-3 rad."""
    b = backend(sim, "arm7")
    ctl = make_controller(b, JointPositionConfig(ARM, normalize_action=False))
    home = b.get_keyframe_qpos("home")[:7]
    offsets = torch.tensor([0.2, -0.1, 0.15, 0.2, -0.3, 0.25, 0.4]) * torch.linspace(-1, 1, N)[:, None]
    target = home + offsets
    ctl.apply(target, 1000)
    assert torch.equal(ctl.compute(), target)
    err = (dof(b, ARM) - target).abs().max().item()
    assert err < 2e-3, err


@pytest.mark.parametrize("use_target", [False, True])
@pytest.mark.parametrize("sim", SIMS)
def test_joint_position_delta_moves_by_delta(sim, use_target):
    """A delta moves each joint by the delta; use_target adds to the previous target, else to the
    measured position."""
    b = arm_at_home(sim)
    ctl = make_controller(b, JointPositionConfig(ARM, low=-0.2, high=0.2, use_delta=True, use_target=use_target))
    q0 = dof(b, ARM)
    assert torch.equal(ctl.compute(), q0)  # anchored at the current state
    delta = torch.tensor([0.1, -0.08, 0.12, 0.15, -0.1, 0.05, -0.15]).expand(N, -1)
    ctl.apply(delta / 0.2, 750)  # normalized: +-1 is +-0.2 rad
    q1 = dof(b, ARM)
    err = (q1 - q0 - delta).abs().max().item()
    assert err < 2e-3, err
    # a second delta: from the previous target (exactly), or from the measured position
    prev = ctl.compute()
    ctl.set_action(-delta / 0.2)
    base = prev if use_target else q1
    assert torch.allclose(ctl.compute(), base - delta, atol=1e-6)


@pytest.mark.parametrize("sim", SIMS)
def test_joint_position_targets_clipped_to_ctrl_range(sim):
    """Targets stay in the actuators' ctrl ranges; normalized absolute actions span exactly the ctrl range."""
    b = backend(sim, "arm7")
    rng = b.get_actuator_ctrl_range()
    ctl = make_controller(b, JointPositionConfig(ARM))
    assert torch.equal(ctl.action_low, rng[:, 0]) and torch.equal(ctl.action_high, rng[:, 1])
    ctl.set_action(torch.ones(N, 7))
    assert torch.equal(ctl.compute(), rng[:, 1].expand(N, -1))
    ctl.set_action(torch.full((N, 7), -1.0))
    assert torch.equal(ctl.compute(), rng[:, 0].expand(N, -1))
    delta = make_controller(
        b, JointPositionConfig(ARM, low=-5.0, high=5.0, use_delta=True, use_target=True, normalize_action=False)
    )
    for _ in range(3):  # repeated deltas cannot wind the target past the range
        delta.set_action(torch.full((N, 7), 5.0))
    assert torch.equal(delta.compute(), rng[:, 1].expand(N, -1))


@pytest.mark.parametrize("sim", SIMS)
def test_joint_position_servo_with_gear(sim):
    """A position servo with gear 2 (added by the ``actuators`` option) gets ctrl 2 * target and holds
    the joint at the target (sag m g L sin(q) / (kp gear^2) <= 2.1e-3 rad); the unowned motor holds 0."""
    b = make_backend(
        sim,
        "pendulum",
        N,
        actuators=[
            {"joints": ["hinge"], "kind": "position", "kp": 1000.0, "kv": 30.0, "gear": 2.0, "name": "{joint}_servo"}
        ],
    )
    with b:
        ctl = make_controller(b, {"servo": JointPositionConfig(["hinge"], normalize_action=False)}, allow_unowned=True)
        assert b.actuator_names[int(ctl.actuator_ids[0])] == "hinge_servo"
        target = torch.tensor([[0.5], [-0.4], [1.0], [0.0]])
        ctl.apply(target, 1500)
        assert torch.allclose(b.get_ctrl(), torch.cat([torch.zeros(N, 1), 2 * target], dim=1))
        err = (dof(b, ["hinge"]) - target).abs().max().item()
        assert err < 3e-3, err


@pytest.mark.parametrize("sim", SIMS)
def test_normalization_maps_and_clips(sim):
    """normalize_action maps [-1, 1] linearly onto [low, high] and clips outside; without it,
    actions are clipped to [low, high] in controller units."""
    b = backend(sim, "arm7")
    low = torch.tensor([-0.5, -0.4, -0.3, -0.2, -0.1, 0.0, 0.1])
    high = torch.tensor([0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1])
    ctl = make_controller(b, JointPositionConfig(ARM, low=low.tolist(), high=high.tolist()))
    assert torch.equal(ctl.action_low, low) and torch.equal(ctl.action_high, high)
    assert torch.equal(ctl.policy_action_low, -torch.ones(7)) and torch.equal(ctl.policy_action_high, torch.ones(7))
    x = torch.tensor([-1.0, 0.0, 1.0, 0.5, -3.0, 7.0, -0.25]).expand(N, -1)
    ctl.set_action(x)
    xc = x.clamp(-1, 1)
    expected = low + (xc + 1) / 2 * (high - low)
    assert torch.allclose(ctl.compute(), expected, atol=1e-6)
    assert ctl.compute()[0, 0].item() == pytest.approx(-0.5) and ctl.compute()[0, 2].item() == pytest.approx(0.7)
    raw = make_controller(b, JointPositionConfig(ARM, low=low.tolist(), high=high.tolist(), normalize_action=False))
    assert torch.equal(raw.policy_action_low, low)
    raw.set_action(torch.tensor([-9.0, 0.3, 9.0, 0.0, 0.2, 0.5, 0.0]).expand(N, -1))
    assert torch.allclose(raw.compute()[0], torch.tensor([-0.5, 0.3, 0.7, 0.0, 0.2, 0.5, 0.1]))


# ----------------------------------------------------------------------
# PD on motors
# ----------------------------------------------------------------------
@pytest.mark.parametrize("sim", SIMS)
def test_pd_ctrl_is_the_pd_law(sim):
    """ctrl = clip((kp (t - q) - kd qdot) / gear, ctrl range) from the state at the substep (quadruped,
    gear 25), read back through get_ctrl after one substep."""
    b = backend(sim, "quadruped")
    g = torch.Generator().manual_seed(0)
    qpos, qvel = b.get_qpos(), torch.zeros(N, b.nv)
    cols, vcols = b.get_joint_qpos_indices(LEGS), b.get_joint_qvel_indices(LEGS)
    qpos[:, cols] += 0.2 * (torch.rand(N, 12, generator=g) - 0.5)
    qvel[:, vcols] = 2.0 * (torch.rand(N, 12, generator=g) - 0.5)
    b.set_state(None, qpos, qvel)
    kp, kd = [40.0 + 5 * i for i in range(12)], 1.5
    ctl = make_controller(b, JointPDConfig(LEGS, kp=kp, kd=kd, normalize_action=False))
    assert ctl.physics_rate
    target = qpos[:, cols] + 0.6 * (torch.rand(N, 12, generator=g) - 0.5)
    q, qd = qpos[:, cols], qvel[:, vcols]
    expected = ((torch.tensor(kp) * (target - q) - kd * qd) / 25.0).clamp(-1, 1)
    assert (expected.abs() < 1).any() and (expected.abs() == 1).any()  # both regimes are covered
    ctl.set_action(target)
    assert torch.allclose(ctl.compute(), expected, atol=1e-5)
    ctl.apply(target, 1)
    acts = b.get_actuator_ids([f"{j}_motor" for j in LEGS])
    assert torch.allclose(b.get_ctrl()[:, acts], expected, atol=1e-5)
    ctl.detach()


def _dc_expected(pd, v, sat, vmax, effort):
    """Isaac Lab's DCMotor clip, per joint: the speed clipped to the corner speed ``V (1 + E/S)``, then
    ``clip(pd, max(-E, S (-1 - v/V)), min(E, S (1 - v/V)))`` (``inf``: no such limit)."""
    out = torch.empty_like(pd)
    for j in range(pd.shape[1]):
        s, big_v = sat[j], vmax[j]
        inv = 0.0 if math.isinf(big_v) else 1.0 / big_v
        corner = big_v * (1 + effort / s)
        vj = v[:, j].clamp(-corner, corner)
        top = (s * (1 - vj * inv)).clamp(max=effort)
        bottom = (s * (-1 - vj * inv)).clamp(min=-effort)
        out[:, j] = torch.minimum(torch.maximum(pd[:, j], bottom), top)
    return out


@pytest.mark.parametrize("sim", SIMS)
def test_pd_dc_motor_clips_torque_to_the_torque_speed_curve(sim):
    """saturation_effort S and velocity_limit V: ctrl = clip(PD, [max(-E, S (-1 - v/V)), min(E, S (1 - v/V))])
    / gear, E the motor's own limit (quadruped: ctrl range 1 x gear 25 = 25 N m), per joint; inf turns a
    joint's limit off; V alone takes S = E; S alone caps the torque at any speed. Read back through get_ctrl."""
    b = backend(sim, "quadruped")
    g = torch.Generator().manual_seed(1)
    qpos, qvel = b.get_qpos(), torch.zeros(N, b.nv)
    cols, vcols = b.get_joint_qpos_indices(LEGS), b.get_joint_qvel_indices(LEGS)
    qvel[:, vcols] = 50.0 * (torch.rand(N, 12, generator=g) - 0.5)  # up to 25 rad/s both ways
    b.set_state(None, qpos, qvel)
    kp, kd, effort = 200.0, 1.0, 25.0
    target = qpos[:, cols] + 0.4 * (torch.rand(N, 12, generator=g) - 0.5)
    q, qd = qpos[:, cols], qvel[:, vcols]
    pd = kp * (target - q) - kd * qd
    inf = math.inf
    cases = [
        ([20.0] * 6 + [30.0] * 3 + [inf] * 3, [10.0] * 3 + [8.0] * 3 + [12.0] * 3 + [inf] * 3),
        (None, 10.0),  # V alone: S = E = 25
        (15.0, None),  # S alone: |torque| <= 15 at any speed
        ([inf] * 12, [inf] * 12),  # off
    ]
    for i, (sat, vmax) in enumerate(cases):
        ctl = make_controller(
            b, JointPDConfig(LEGS, kp=kp, kd=kd, normalize_action=False, saturation_effort=sat, velocity_limit=vmax)
        )
        s = [inf] * 12 if sat is None else ([sat] * 12 if isinstance(sat, float) else sat)
        v_lim = [inf] * 12 if vmax is None else ([vmax] * 12 if isinstance(vmax, float) else vmax)
        s_eff = [effort if math.isinf(a) and not math.isinf(c) else a for a, c in zip(s, v_lim)]
        assert ctl.saturation_effort.tolist() == pytest.approx(s_eff)
        assert ctl.velocity_limit.tolist() == pytest.approx(v_lim)
        expected = _dc_expected(pd, qd, s_eff, v_lim, effort) / 25.0
        ctl.set_action(target)
        assert torch.allclose(ctl.compute(), expected, atol=1e-5), (sat, vmax)
        ctl.apply(target, 1)
        acts = b.get_actuator_ids([f"{j}_motor" for j in LEGS])
        assert torch.allclose(b.get_ctrl()[:, acts], expected, atol=1e-5), (sat, vmax)
        ctl.detach()
        b.set_state(None, qpos, qvel)
        plain = (pd / 25.0).clamp(-1, 1)
        curve = (expected - plain).abs() > 1e-4
        if i == 0:  # every regime is covered: on the curve, at E, within, braking against the motion on it
            assert curve.any() and (~curve).any() and (expected.abs() == 1).any() and (expected.abs() < 1).any()
            assert ((qd * expected < 0) & curve).any()
        if i == len(cases) - 1:
            assert torch.equal(expected, plain)  # inf everywhere: the plain PD law


@pytest.mark.parametrize("sim", SIMS)
def test_pd_is_recomputed_every_substep(sim):
    """apply(a, 5) equals five apply(a, 1) calls (the PD law re-evaluated before every substep),
    and differs from holding the first substep's ctrl for 5 substeps."""
    b = backend(sim, "quadruped")
    start_q, start_v = b.get_qpos(), b.get_qvel()
    cols = b.get_joint_qpos_indices(LEGS)
    ctl = make_controller(b, JointPDConfig(LEGS, kp=60.0, kd=2.0, normalize_action=False))
    target = start_q[:, cols] + 0.3
    ctl.apply(target, 5)
    batched = b.get_qpos()
    b.set_state(None, start_q, start_v)
    for _ in range(5):
        ctl.apply(target, 1)
    assert torch.allclose(b.get_qpos(), batched, atol=1e-5)
    ctl.detach()
    b.set_state(None, start_q, start_v)
    ctl.set_action(target)
    b.step(ctl.ctrl(), 5)  # not attached: the first ctrl held
    assert (b.get_qpos()[:, cols] - batched[:, cols]).abs().max() > 1e-4


@pytest.mark.parametrize("sim", SIMS)
def test_pd_drives_cart_to_target_with_passive_pole(sim):
    """PD (motor gear 10) drives the cartpole's cart to commanded positions; the pole is passive."""
    b = backend(sim, "cartpole")
    qpos = torch.zeros(N, 2)
    qpos[:, 1] = math.pi  # pole hanging down
    b.set_state(None, qpos)
    ctl = make_controller(
        b, {"cart": JointPDConfig("slider", kp=40.0, kd=12.0, low=-1.0, high=1.0), "pole": PassiveConfig(["hinge"])}
    )
    assert ctl.action_dim == 1 and ctl.controllers["pole"].action_dim == 0
    target = torch.tensor([[0.5], [-0.3], [0.2], [0.0]])
    for _ in range(20):
        ctl.apply(target, 50)
    err = (dof(b, ["slider"]) - target).abs().max().item()
    assert err < 0.015, err
    ctl.detach()


@pytest.mark.parametrize("sim", SIMS)
def test_passive_motor_held_at_zero(sim):
    """A passive joint's motor gets ctrl 0 while a PD drives the other joint (double pendulum)."""
    b = backend(sim, "double_pendulum")
    ctl = make_controller(
        b,
        {
            "shoulder": JointPDConfig(["shoulder"], kp=200.0, kd=20.0, low=-1.0, high=1.0),
            "elbow": PassiveConfig(["elbow"]),
        },
    )
    motor = b.get_actuator_ids("elbow_motor")
    assert torch.equal(ctl.controllers["elbow"].actuator_ids, motor)
    ctl.apply(torch.full((N, 1), 0.5), 20)
    assert (b.get_ctrl()[:, motor] == 0).all() and (b.get_ctrl()[:, 1 - motor] != 0).all()
    ctl.detach()


# ----------------------------------------------------------------------
# end-effector pose
# ----------------------------------------------------------------------
def _ee_setup(sim, frame, **kw):
    """arm7 settled at home; joint1 held by a servo, joints 2..7 under EE control (root: link1,
    turned 0.3 rad about z by joint1, so root axes differ from world axes)."""
    b = arm_at_home(sim)
    home = b.get_keyframe_qpos("home")[:7]
    cfg = EEPoseConfig(
        ARM[1:], "ee_site", pos_low=-0.05, pos_high=0.05, rot_bound=0.2, frame=frame, normalize_action=False, **kw
    )
    ctl = make_controller(b, {"base": JointPositionConfig(["joint1"], normalize_action=False), "arm": cfg})
    return b, ctl, home[:1].expand(N, 1)


def _expected_pose(frame, p0, q0, qr, dp, dr):
    axes = qr if frame.startswith("root") else q0
    p = p0 + quat_apply(axes, dp)
    qd = quat_from_rotvec(dr)
    if "root_aligned" in frame:
        q = quat_mul(quat_mul(quat_mul(qr, qd), quat_conj(qr)), q0)
    else:
        q = quat_mul(q0, qd)
    return p, q


@pytest.mark.parametrize("frame", EE_FRAMES)
@pytest.mark.parametrize("sim", SIMS)
def test_ee_delta_moves_site_in_frame(sim, frame):
    """A 2 cm translation (envs 0, 1) or a 0.1 rad rotation (envs 2, 3) moves the ee_site by that
    motion in the frame asked for, within 3 mm and 0.005 rad after settling."""
    b, ctl, j1 = _ee_setup(sim, frame)
    arm = ctl.controllers["arm"]
    assert b.body_names[arm.root_body_id] == "link1"
    p0, q0 = arm.site_pose()
    _, qr = arm.root_pose()
    dp = torch.tensor([[0.012, -0.010, 0.013], [-0.008, 0.016, -0.008], [0, 0, 0], [0, 0, 0]])
    dr = torch.tensor([[0, 0, 0], [0, 0, 0], [0.05, -0.08, 0.03], [-0.06, 0.02, 0.075]])
    assert torch.allclose(dp[:2].norm(dim=1), torch.full((2,), 0.02), atol=1e-3)
    assert torch.allclose(dr[2:].norm(dim=1), torch.full((2,), 0.1), atol=2e-3)
    ctl.apply(torch.cat([j1, dp, dr], dim=1), 750)
    p1, q1 = arm.site_pose()
    p_exp, q_exp = _expected_pose(frame, p0, q0, qr, dp, dr)
    pos_err = (p1 - p_exp).norm(dim=1).max().item()
    rot_err = quat_angle_between(q1, q_exp).max().item()
    assert pos_err < 3e-3, pos_err
    assert rot_err < 5e-3, rot_err
    # the frames differ: the same action read in another frame would miss by far more than that
    other = EE_FRAMES[(EE_FRAMES.index(frame) + 3) % 4]
    p_other, q_other = _expected_pose(other, p0, q0, qr, dp, dr)
    assert (p1 - p_other)[:2].norm(dim=1).min() > 0.01 or quat_angle_between(q1, q_other)[2:].min() > 0.05


@pytest.mark.parametrize("sim", SIMS)
def test_ee_ik_is_exact_kinematically(sim):
    """The joint targets of one set_action put the site at the target pose (checked by writing them
    into the state), for a 5 cm + 0.2 rad step; the root-frame target is stored."""
    b, ctl, j1 = _ee_setup(sim, EE_FRAMES[0])
    arm = ctl.controllers["arm"]
    pr, qr = arm.root_pose()
    p0, q0 = arm.site_pose()
    dp, dr = torch.tensor([0.03, -0.025, 0.03]).expand(N, 3), torch.tensor([0.1, 0.15, -0.08]).expand(N, 3)
    ctl.set_action(torch.cat([j1, dp, dr], dim=1))
    p_exp, q_exp = _expected_pose(EE_FRAMES[0], p0, q0, qr, dp, dr)
    assert torch.allclose(arm.target_pos, quat_apply(quat_conj(qr), p_exp - pr), atol=1e-5)
    qpos = b.get_qpos()
    qpos[:, b.get_joint_qpos_indices(ARM[1:])] = arm.targets
    b.set_state(None, qpos)
    p1, q1 = arm.site_pose()
    assert (p1 - p_exp).norm(dim=1).max() < 1e-4
    assert quat_angle_between(q1, q_exp).max() < 1e-4


@pytest.mark.parametrize("sim", SIMS)
def test_ee_absolute_pose_is_reached(sim):
    """An absolute target (position + rotation vector in the root frame; root link1, turned by joint1)
    is reached within 3 mm and 0.005 rad; normalized, the action [-1, 1] spans
    [pos_low, pos_high] x [-rot_bound, rot_bound]."""
    b = arm_at_home(sim)
    default = EEPoseController(b, EEPoseConfig(ARM, "ee_site", -1.0, 1.0, math.pi, use_delta=False))
    assert b.body_names[default.root_body_id] == "base"  # the default root of the whole arm
    low = torch.tensor([-1.0, -1.0, 0.0, -math.pi, -math.pi, -math.pi])
    high = torch.tensor([1.0, 1.0, 1.5, math.pi, math.pi, math.pi])
    home = b.get_keyframe_qpos("home")[:1].expand(N, 1)
    ctl = make_controller(
        b,
        {
            "base": JointPositionConfig(["joint1"]),
            "arm": EEPoseConfig(ARM[1:], "ee_site", low[:3].tolist(), high[:3].tolist(), math.pi, use_delta=False),
        },
    )
    arm = ctl.controllers["arm"]
    assert torch.allclose(arm.action_low, low) and torch.allclose(arm.action_high, high)
    pr, qr = arm.root_pose()
    assert quat_angle_between(qr, torch.tensor([1.0, 0, 0, 0])).min() > 0.29  # joint1 = 0.3 turns the root
    p0, q0 = arm.site_pose()
    p_root = quat_apply(quat_conj(qr), p0 - pr) + torch.tensor([0.03, -0.02, 0.04])
    q_root = quat_mul(quat_from_rotvec(torch.tensor([0.0, 0.1, -0.1]).expand(N, 3)), quat_mul(quat_conj(qr), q0))
    action = torch.cat([p_root, rotvec_from_quat(q_root)], dim=1)
    j1 = home / 2.8  # normalized: joint1's ctrl range is [-2.8, 2.8]
    ctl.apply(torch.cat([j1, (action - low) / (high - low) * 2 - 1], dim=1), 750)
    p1, q1 = arm.site_pose()
    pos_err = (p1 - (pr + quat_apply(qr, p_root))).norm(dim=1).max().item()
    rot_err = quat_angle_between(q1, quat_mul(qr, q_root)).max().item()
    assert pos_err < 3e-3, pos_err
    assert rot_err < 5e-3, rot_err


@pytest.mark.parametrize("sim", SIMS)
def test_ee_use_target_accumulates(sim):
    """use_target: deltas add to the stored target; without it, to the measured pose; a zero action
    after reset asks for the current pose and the current joint positions."""
    b = arm_at_home(sim)
    step = torch.tensor([0.01, 0.0, 0.0, 0.0, 0.0, 0.0]).expand(N, 6)
    for use_target, expect in ((True, 0.02), (False, 0.01)):
        ctl = EEPoseController(
            b, EEPoseConfig(ARM[1:], "ee_site", -0.05, 0.05, 0.1, use_target=use_target, normalize_action=False)
        )  # root link1, turned by joint1
        start = ctl.target_pos
        ctl.set_action(torch.zeros(N, 6))
        assert torch.allclose(ctl.target_pos, start, atol=1e-6)
        assert torch.allclose(ctl.targets, dof(b, ARM[1:]), atol=1e-4)
        ctl.set_action(step)
        ctl.set_action(step)  # no physics in between
        assert torch.allclose(ctl.target_pos - start, torch.tensor([expect, 0, 0]).expand(N, 3), atol=1e-6)


@pytest.mark.parametrize("sim", SIMS)
def test_reset_reanchors_only_named_envs(sim):
    """reset(ids) sets the named envs' targets to their current state (ids, bool mask), others untouched."""
    b = arm_at_home(sim)
    joint = make_controller(b, JointPositionConfig(ARM, low=-0.2, high=0.2, use_delta=True, use_target=True))
    ee = EEPoseController(b, EEPoseConfig(ARM[1:], "ee_site", -0.05, 0.05, 0.1))  # root link1
    joint.set_action(torch.ones(N, 7))
    ee.set_action(torch.ones(N, 6))
    jt, et, ep, eq = joint.compute(), ee.compute(), ee.target_pos, ee.target_quat
    qpos = b.get_qpos()
    cols = b.get_joint_qpos_indices(ARM)
    qpos[:, cols] += 0.1
    b.set_state(None, qpos)
    joint.reset([3, 1])
    ee.reset(torch.tensor([False, True, False, True]))
    now, (site, site_q) = dof(b, ARM), ee.site_pose()
    pr, qr = ee.root_pose()
    for c, old, fresh in ((joint, jt, now), (ee, et, now[:, 1:])):
        out = c.compute()
        assert torch.equal(out[[0, 2]], old[[0, 2]])
        assert torch.allclose(out[[1, 3]], fresh[[1, 3]], atol=1e-6)
    assert torch.allclose(ee.target_pos[[1, 3]], quat_apply(quat_conj(qr), site - pr)[[1, 3]], atol=1e-6)
    assert torch.equal(ee.target_pos[[0, 2]], ep[[0, 2]])
    rel = quat_mul(quat_conj(qr), site_q)
    assert quat_angle_between(ee.target_quat[[1, 3]], rel[[1, 3]]).max() < 1e-5
    assert torch.equal(ee.target_quat[[0, 2]], eq[[0, 2]])


# ----------------------------------------------------------------------
# combinations
# ----------------------------------------------------------------------
@pytest.mark.parametrize("sim", SIMS)
def test_combined_slices_columns_and_ctrl(sim):
    """Action = concatenation in mapping order; ctrl() puts each child's commands in its columns,
    whatever order the children name their actuators in."""
    b = backend(sim, "arm7")
    rest = ARM[:0:-1]  # joint7 ... joint2: columns in reverse order
    ctl = make_controller(
        b,
        {
            "first": JointPositionConfig(["joint1"], normalize_action=False),
            "rest": JointPositionConfig(rest, normalize_action=False),
        },
    )
    assert isinstance(ctl, CombinedController)
    assert ctl.action_slices == {"first": slice(0, 1), "rest": slice(1, 7)}
    assert ctl.actuator_ids.tolist() == [0, 6, 5, 4, 3, 2, 1]
    a = torch.tensor([0.1, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2]).expand(N, -1)
    ctl.set_action(a)
    assert torch.allclose(ctl.ctrl(), torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]).expand(N, -1))
    assert torch.equal(ctl.compute(), a)
    lo = b.get_actuator_ctrl_range()[:, 0]
    assert torch.equal(ctl.action_low, lo[[0, 6, 5, 4, 3, 2, 1]])
    assert pre_step(b) is None
    ctl.attach()  # nothing physics-rate: installs nothing
    assert pre_step(b) is None and not ctl.attached


@pytest.mark.parametrize("sim", SIMS)
def test_combined_ownership_rules(sim):
    """Overlapping actuators are rejected; unowned ones too unless allow_unowned, and then they
    hold default_ctrl (or 0)."""
    b = backend(sim, "arm7")
    with pytest.raises(InvalidArgumentError, match=r"controllers: actuator 'act3' is driven by both 'a' and 'b'"):
        make_controller(b, {"a": JointPositionConfig(ARM[:3]), "b": JointPositionConfig(ARM[2:])})
    with pytest.raises(
        InvalidArgumentError,
        match=r"controllers: no controller drives actuators \['act5', 'act6', "
        r"'act7'\].*allow_unowned",
    ):
        make_controller(b, {"a": JointPositionConfig(ARM[:4])})
    default = torch.arange(7.0) / 10
    ctl = make_controller(
        b, {"a": JointPositionConfig(ARM[:4], normalize_action=False)}, allow_unowned=True, default_ctrl=default
    )
    ctl.set_action(torch.full((N, 4), -0.5))
    assert torch.allclose(ctl.ctrl(), torch.tensor([-0.5] * 4 + [0.4, 0.5, 0.6]).expand(N, -1))
    zeros = make_controller(b, {"a": JointPositionConfig(ARM[:4])}, allow_unowned=True)
    assert (zeros.ctrl()[:, 4:] == 0).all()
    single = make_controller(b, JointPositionConfig(ARM[:4]))
    t0 = b.get_time()
    with pytest.raises(InvalidArgumentError, match=r"ctrl: .*does not drive actuators \['act5'"):
        single.apply(torch.zeros(N, 4))
    assert torch.equal(b.get_time(), t0)


@pytest.mark.parametrize("sim", SIMS)
def test_combined_with_pd_installs_pre_step(sim):
    """A combination with a physics-rate child installs a pre-step function on apply (or attach),
    which recomputes only that child's columns; detach removes it."""
    b = backend(sim, "double_pendulum")
    ctl = make_controller(
        b, {"s": JointPDConfig(["shoulder"], kp=100.0, kd=5.0, normalize_action=False), "e": PassiveConfig(["elbow"])}
    )
    assert ctl.physics_rate and pre_step(b) is None
    ctl.apply(torch.full((N, 1), 0.3), 3)
    fn = pre_step(b)
    assert fn is not None and ctl.attached
    given = torch.full((N, 2), 0.25)
    out = fn(b, given.clone())
    q, qd = dof(b, ["shoulder"]), b.get_qvel()[:, :1]
    assert torch.allclose(out[:, :1], (100 * (0.3 - q) - 5 * qd).clamp(-5, 5), atol=1e-5)
    assert torch.equal(out[:, 1:], given[:, 1:])
    ctl.detach()
    assert pre_step(b) is None and not ctl.attached


# ----------------------------------------------------------------------
# bad input
# ----------------------------------------------------------------------
CONFIG_ERRORS = [
    (lambda: JointPositionConfig(ARM, low=-0.1, use_delta=True), InvalidArgumentError, "high"),
    (lambda: JointPositionConfig(ARM, use_delta=True), InvalidArgumentError, "low"),
    (lambda: JointPositionConfig(ARM, low=[0.0] * 6, high=1.0), InvalidArgumentError, "low"),
    (lambda: JointPositionConfig(ARM, low=0.2, high=0.1), InvalidArgumentError, "low"),
    (lambda: JointPositionConfig(ARM, low=float("nan"), high=0.1), InvalidArgumentError, "low"),
    (lambda: JointPositionConfig(ARM, use_target=True), InvalidArgumentError, "use_target"),
    (lambda: JointPositionConfig(ARM, use_delta=1), ArgumentTypeError, "use_delta"),
    (lambda: JointPositionConfig([]), InvalidArgumentError, "joints"),
    (lambda: JointPositionConfig([1, 2]), ArgumentTypeError, "joints"),
    (lambda: JointPositionConfig(["joint1", "joint1"]), InvalidArgumentError, "joints"),
    (lambda: JointPDConfig(LEGS, kp=0.0, kd=1.0), InvalidArgumentError, "kp"),
    (lambda: JointPDConfig(LEGS, kp=[10.0] * 11 + [-1.0], kd=1.0), InvalidArgumentError, "kp"),
    (lambda: JointPDConfig(LEGS, kp=10.0, kd=-1.0), InvalidArgumentError, "kd"),
    (lambda: JointPDConfig(LEGS, kp="10", kd=1.0), ArgumentTypeError, "kp"),
    (lambda: JointPDConfig(LEGS, kp=10.0, kd=1.0, velocity_limit=0.0), InvalidArgumentError, "velocity_limit"),
    (lambda: JointPDConfig(LEGS, kp=10.0, kd=1.0, velocity_limit=-math.inf), InvalidArgumentError, "velocity_limit"),
    (lambda: JointPDConfig(LEGS, kp=10.0, kd=1.0, velocity_limit=math.nan), InvalidArgumentError, "velocity_limit"),
    (lambda: JointPDConfig(LEGS, kp=10.0, kd=1.0, velocity_limit=[30.0] * 3), InvalidArgumentError, "velocity_limit"),
    (lambda: JointPDConfig(LEGS, kp=10.0, kd=1.0, velocity_limit="30"), ArgumentTypeError, "velocity_limit"),
    (
        lambda: JointPDConfig(LEGS, kp=10.0, kd=1.0, saturation_effort=[20.0] * 11 + [-1.0]),
        InvalidArgumentError,
        "saturation_effort",
    ),
    (lambda: JointPDConfig(LEGS, kp=10.0, kd=1.0, saturation_effort=True), ArgumentTypeError, "saturation_effort"),
    (lambda: EEPoseConfig(ARM, "ee_site", -0.1, 0.1, 0.1, frame="world"), InvalidArgumentError, "frame"),
    (lambda: EEPoseConfig(ARM, "ee_site", -0.1, 0.1, 0.1, frame="root_translation"), InvalidArgumentError, "frame"),
    (lambda: EEPoseConfig(ARM, "ee_site", -0.1, 0.1, 0.0), InvalidArgumentError, "rot_bound"),
    (lambda: EEPoseConfig(ARM, "ee_site", -0.1, 0.1, 0.1, damping=0.0), InvalidArgumentError, "damping"),
    (lambda: EEPoseConfig(ARM, "ee_site", 0.1, -0.1, 0.1), InvalidArgumentError, "pos_low"),
    (lambda: EEPoseConfig(ARM, "ee_site", [-0.1, -0.1], 0.1, 0.1), InvalidArgumentError, "pos_low"),
    (lambda: EEPoseConfig(ARM, 3, -0.1, 0.1, 0.1), ArgumentTypeError, "site"),
    (lambda: EEPoseConfig(ARM, "ee_site", -0.1, 0.1, 0.1, ik_iterations=0), InvalidArgumentError, "ik_iterations"),
    (
        lambda: PassiveConfig(
            "hinge",
        ),
        None,
        None,
    ),
]


@pytest.mark.parametrize("i", range(len(CONFIG_ERRORS)))
def test_bad_config_values(i):
    """Every bad config field raises at construction, a one-line error naming the field."""
    make, error, field = CONFIG_ERRORS[i]
    if error is None:
        assert make().joints == ("hinge",)  # one name is a one-joint sequence
        return
    with pytest.raises(error) as e:
        make()
    msg = str(e.value)
    assert "\n" not in msg and field in msg, msg


def _state(b):
    return b.get_qpos(), b.get_qvel(), b.get_time(), b.get_ctrl()


def _unchanged(b, before):
    after = _state(b)
    assert all(torch.equal(x, y) for x, y in zip(before, after))
    assert pre_step(b) is None


@pytest.mark.parametrize("sim", SIMS)
def test_bad_model_arguments(sim):
    """Names the model lacks, joints without the needed actuator kind, a site the joints do not move,
    a root moved by the joints: one-line errors naming the argument; nothing changes."""
    arm, quad, pole = backend(sim, "arm7"), backend(sim, "quadruped"), backend(sim, "cartpole")
    pend = backend(sim, "double_pendulum")
    cases = [
        (
            arm,
            JointPositionConfig(["joint1", "jiont2"]),
            UnknownNameError,
            r"JointPositionConfig\.joints: unknown joint name 'jiont2'.*'joint2'",
        ),
        (arm, JointPositionConfig(["cube_free"]), InvalidArgumentError, r"joints: joint 'cube_free' is a free joint"),
        (
            arm,
            JointPDConfig(ARM, kp=1.0, kd=1.0),
            InvalidArgumentError,
            r"JointPDConfig\.joints: joint 'joint1' has no motor actuator \(it has position 'act1'",
        ),
        (quad, JointPositionConfig(LEGS), InvalidArgumentError, r"joints: joint 'FL_hip' has no position actuator"),
        (pole, JointPositionConfig(["slider"]), InvalidArgumentError, "no position actuator"),
        (
            arm,
            PassiveConfig(["joint3"]),
            InvalidArgumentError,
            r"PassiveConfig\.joints: joint 'joint3' is driven by position actuator 'act3'",
        ),
        (
            pend,
            JointPDConfig(["shoulder"], kp=1.0, kd=0.0),
            InvalidArgumentError,
            r"JointPDConfig\.low, high: joints \['shoulder'\] have an unlimited joint range",
        ),
        (
            arm,
            EEPoseConfig(ARM, "ee_sight", -0.1, 0.1, 0.1),
            UnknownNameError,
            r"EEPoseConfig\.site: unknown site name 'ee_sight'.*'ee_site'",
        ),
        (
            arm,
            EEPoseConfig(ARM, "cube_site", -0.1, 0.1, 0.1),
            InvalidArgumentError,
            r"EEPoseConfig\.joints: joint 'joint1' does not move site",
        ),
        (
            arm,
            EEPoseConfig(ARM, "ee_site", -0.1, 0.1, 0.1, root_body="link3"),
            InvalidArgumentError,
            r"EEPoseConfig\.root_body: body 'link3' is moved by controlled joint 'joint1'",
        ),
        (arm, EEPoseConfig(ARM, "ee_site", -0.1, 0.1, 0.1, root_body="bsae"), UnknownNameError, "root_body"),
        (quad, EEPoseConfig(LEGS[:3], "FL_foot_site", -0.1, 0.1, 0.1), InvalidArgumentError, "no position actuator"),
        (arm, "JointPositionConfig", ArgumentTypeError, r"config: expected one of"),
        (arm, {"a": JointPositionConfig(ARM), "b": {"joints": ARM}}, ArgumentTypeError, r"config\['b'\]"),
        (arm, {}, InvalidArgumentError, "config: expected at least one"),
        (
            arm,
            {
                "a": JointPositionConfig(ARM[1:]),
                "b": JointPositionConfig(["joint1"], low=-0.1, high=0.1, use_delta=True, normalize_action=False),
            },
            InvalidArgumentError,
            "controllers: mixed normalize_action",
        ),
    ]
    for b, cfg, error, pattern in cases:
        before = _state(b)
        with pytest.raises(error, match=pattern) as e:
            make_controller(b, cfg)
        assert "\n" not in str(e.value)
        _unchanged(b, before)
    with pytest.raises(ArgumentTypeError, match="backend: expected a SimBackend"):
        make_controller("mujoco", JointPositionConfig(ARM))
    with pytest.raises(InvalidArgumentError, match="allow_unowned, default_ctrl: only for a mapping"):
        make_controller(arm, JointPositionConfig(ARM), allow_unowned=True)
    with pytest.raises(InvalidArgumentError, match="default_ctrl: only used with allow_unowned"):
        make_controller(arm, {"a": JointPositionConfig(ARM)}, default_ctrl=torch.zeros(7))
    with pytest.raises(InputShapeError, match=r"default_ctrl: expected shape \(4, 7\), got \(3, 7\)"):
        make_controller(arm, {"a": JointPositionConfig(ARM[:3])}, allow_unowned=True, default_ctrl=torch.zeros(3, 7))
    with pytest.raises(ArgumentTypeError, match=r"controllers\['x'\]: expected a Controller"):
        CombinedController(arm, {"x": JointPositionConfig(ARM)})


@pytest.mark.parametrize("sim", SIMS)
def test_bad_actions_change_nothing(sim):
    """A wrong action shape or dtype, NaN, bad env ids or nsteps: one-line errors naming the argument;
    targets, state, time and ctrl unchanged, no pre-step function installed."""
    b = backend(sim, "quadruped")
    pd = make_controller(b, JointPDConfig(LEGS, kp=20.0, kd=1.0, low=-0.3, high=0.3, use_delta=True))
    other = backend(sim, "cartpole")
    with pytest.raises(InvalidArgumentError, match=r"controllers\['pd'\]: built on another backend"):
        CombinedController(other, {"pd": pd})
    targets = pd.targets
    nan = torch.zeros(N, 12)
    nan[2, 5] = float("nan")
    bad = [
        (
            lambda: pd.set_action(torch.zeros(N, 11)),
            InputShapeError,
            r"action: expected shape \(4, 12\), got \(4, 11\)",
        ),
        (lambda: pd.set_action(torch.zeros(12)), InputShapeError, "action"),
        (lambda: pd.apply(torch.zeros(N + 1, 12)), InputShapeError, "action"),
        (lambda: pd.set_action(torch.zeros(N, 12, dtype=torch.bool)), ValueError, "action"),
        (lambda: pd.apply(nan), NonFiniteError, r"action: non-finite values .* env ids \[2\]"),
        (lambda: pd.apply(torch.ones(N, 12), nsteps=0), InvalidArgumentError, "nsteps"),
        (lambda: pd.reset([0, 9]), EnvIdError, "env_ids"),
        (lambda: pd.reset([1, 1]), EnvIdError, "env_ids"),
        (lambda: pd.reset(torch.tensor([True, False])), InputShapeError, "env_ids"),
    ]
    for call, error, pattern in bad:
        before = _state(b)
        with pytest.raises(error, match=pattern) as e:
            call()
        assert "\n" not in str(e.value)
        _unchanged(b, before)
        assert torch.equal(pd.targets, targets)


def test_rotation_helpers_round_trip():
    """rotvec -> quaternion -> rotvec is the identity, for tiny and large angles, and matches the
    quaternion of a rotation about an axis."""
    g = torch.Generator().manual_seed(1)
    axes = torch.nn.functional.normalize(torch.randn(64, 3, generator=g), dim=1)
    angles = torch.cat([torch.logspace(-9, 0, 32), torch.linspace(1.0, 3.1, 32)])[:, None]
    v = axes * angles
    q = quat_from_rotvec(v)
    expected = torch.cat([torch.cos(angles / 2), axes * torch.sin(angles / 2)], dim=1)
    assert torch.allclose(q, expected, atol=1e-6)
    assert torch.allclose(rotvec_from_quat(q), v, atol=1e-5, rtol=1e-5)
    assert torch.allclose(rotvec_from_quat(-q), v, atol=1e-5, rtol=1e-5)
    assert np.isfinite(rotvec_from_quat(torch.tensor([[1.0, 0, 0, 0]])).numpy()).all()


# ----------------------------------------------------------------------
# registration: a third party's controller built by make_controller
# ----------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class _HoldConfig:
    joints: tuple
    value: float = 0.0


class _HoldController(Controller):
    """Writes a constant to the motors of ``joints``: the smallest controller a third party could add."""

    config_type = _HoldConfig

    def __init__(self, backend, config):
        ids = [i for i, j in enumerate(backend.info.actuator_joint) if backend.info.joint_names[j] in config.joints]
        super().__init__(backend, config, np.asarray(ids), [], [], physics_rate=False, normalize_action=True)

    def compute(self):
        return torch.full((self.num_envs, self.actuator_ids.numel()), self.config.value, device=self.backend.device)

    def reanchor(self, ids):
        pass

    def store_targets(self, action):
        pass


def test_a_registered_third_party_controller_is_built_alone_and_in_a_mapping():
    b = backend("mujoco", "pendulum")
    with pytest.raises(ArgumentTypeError, match=r"config: expected one of \[.*'JointPDConfig'.*got _HoldConfig"):
        make_controller(b, _HoldConfig(("hinge",)))
    assert register_controller(_HoldController) is _HoldController
    try:
        assert available_controllers()[_HoldConfig] is _HoldController
        alone = make_controller(b, _HoldConfig(("hinge",), 0.25))
        assert isinstance(alone, _HoldController)
        assert torch.equal(alone.ctrl(), torch.full((N, 1), 0.25))
        both = make_controller(b, {"hold": _HoldConfig(("hinge",), -0.5)})
        assert isinstance(both, CombinedController) and both.action_dim == 0
        assert torch.equal(both.ctrl(), torch.full((N, 1), -0.5))
    finally:
        _unregister(_HoldConfig)


def _unregister(config_type):
    from simbackend.controllers import registry

    registry._CONTROLLERS.pop(config_type, None)


def test_register_controller_refuses_what_it_cannot_build():
    with pytest.raises(ArgumentTypeError, match="register_controller: expected a Controller subclass"):
        register_controller(JointPDConfig)

    class NoConfig(_HoldController):
        config_type = None

    with pytest.raises(InvalidArgumentError, match=r"NoConfig\.config_type must name its config class"):
        register_controller(NoConfig)

    class Rival(_HoldController):
        config_type = JointPDConfig

    with pytest.raises(InvalidArgumentError, match="JointPDConfig is built by JointPDController already"):
        register_controller(Rival)
    assert available_controllers()[JointPDConfig].__name__ == "JointPDController"
