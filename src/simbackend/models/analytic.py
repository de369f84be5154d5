"""Engine-neutral ground truth for the built-in models.

Forward kinematics of the built-in MJCF models (``assets/*.xml``), written by
hand from their geometric parameters with numpy only, so that any backend can
be checked against numbers that no engine produced. The module-level
constants below must match the XML files exactly; ``tests/test_builtin_models.py``
checks that they do (against MuJoCo, for random configurations).

Conventions (MuJoCo's): positions in metres, angles in radians, quaternions
``(w, x, y, z)``; a hinge with unit axis ``a`` (in its body frame) at angle
``theta`` rotates the child frame by ``R(a, theta)``; a body's world pose is
``parent_pose * (body_pos, body_quat) * joint_rotation`` and a site's world pose
is ``body_pose * (site_pos, site_quat)``. Quaternions returned here are the
products along that chain (the same sign MuJoCo's own product gives); compare
them up to sign when in doubt.
"""

from __future__ import annotations

import math

import numpy as np

from simbackend.errors import IndexRangeError, InputShapeError

__all__ = [
    "GRAVITY",
    # pendulum
    "PENDULUM_PIVOT",
    "PENDULUM_LENGTH",
    "PENDULUM_MASS",
    "pendulum_tip",
    "pendulum_small_angle_period",
    # double pendulum
    "DOUBLE_PENDULUM_PIVOT",
    "DOUBLE_PENDULUM_L1",
    "DOUBLE_PENDULUM_L2",
    "DOUBLE_PENDULUM_M1",
    "DOUBLE_PENDULUM_M2",
    "double_pendulum_elbow",
    "double_pendulum_tip",
    # cart-pole
    "CARTPOLE_RAIL_HEIGHT",
    "CARTPOLE_POLE_LENGTH",
    "CARTPOLE_SLIDER_RANGE",
    "CARTPOLE_GEAR",
    "cartpole_tip",
    # arm7
    "ARM7_TABLE_HEIGHT",
    "ARM7_BASE_POS",
    "ARM7_LINK_OFFSETS",
    "ARM7_JOINT_AXES",
    "ARM7_JOINT_RANGES",
    "ARM7_EE_SITE_POS",
    "ARM7_EE_SITE_QUAT",
    "ARM7_HOME",
    "ARM7_CUBE_POS",
    "ARM7_CUBE_HALF_SIZE",
    "ARM7_CUBE_MASS",
    "ARM7_KP",
    "arm7_body_pose",
    "arm7_body_origin",
    "arm7_ee_pose",
    "arm7_ee_transform",
    "arm7_jacobian",
    # quadruped
    "QUADRUPED_LEGS",
    "QUADRUPED_HIP_POS",
    "QUADRUPED_THIGH_OFFSET",
    "QUADRUPED_THIGH_LENGTH",
    "QUADRUPED_CALF_LENGTH",
    "QUADRUPED_FOOT_RADIUS",
    "QUADRUPED_STAND_QPOS",
    "quadruped_foot_pos",
    # helpers
    "axis_angle_matrix",
    "axis_angle_quat",
    "quat_mul",
    "quat_to_matrix",
    "matrix_to_quat",
    "homogeneous",
]

#: Gravity magnitude every built-in model uses (``<option gravity="0 0 -9.81"/>``).
GRAVITY = 9.81

# --------------------------------------------------------------------------
# Small rotation helpers
# --------------------------------------------------------------------------


def axis_angle_matrix(axis, angle: float) -> np.ndarray:
    """(3, 3) rotation by ``angle`` about the unit vector ``axis`` (Rodrigues)."""
    a = np.asarray(axis, dtype=np.float64)
    a = a / np.linalg.norm(a)
    x, y, z = a
    c, s = math.cos(angle), math.sin(angle)
    C = 1.0 - c
    return np.array(
        [
            [c + x * x * C, x * y * C - z * s, x * z * C + y * s],
            [y * x * C + z * s, c + y * y * C, y * z * C - x * s],
            [z * x * C - y * s, z * y * C + x * s, c + z * z * C],
        ]
    )


def axis_angle_quat(axis, angle: float) -> np.ndarray:
    """(4,) quaternion (w, x, y, z) of a rotation by ``angle`` about ``axis``."""
    a = np.asarray(axis, dtype=np.float64)
    a = a / np.linalg.norm(a)
    h = 0.5 * angle
    return np.concatenate(([math.cos(h)], math.sin(h) * a))


def quat_mul(q1, q2) -> np.ndarray:
    """Hamilton product ``q1 * q2`` of (w, x, y, z) quaternions."""
    w1, x1, y1, z1 = q1
    w2, x2, y2, z2 = q2
    return np.array(
        [
            w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
            w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
            w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
            w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
        ]
    )


def quat_to_matrix(q) -> np.ndarray:
    """(3, 3) rotation matrix of a (w, x, y, z) quaternion (normalised first)."""
    q = np.asarray(q, dtype=np.float64)
    w, x, y, z = q / np.linalg.norm(q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def matrix_to_quat(R) -> np.ndarray:
    """(4,) unit quaternion (w, x, y, z), with w >= 0, of a rotation matrix."""
    R = np.asarray(R, dtype=np.float64)
    tr = R[0, 0] + R[1, 1] + R[2, 2]
    if tr > 0.0:
        s = 2.0 * math.sqrt(1.0 + tr)
        q = np.array([0.25 * s, (R[2, 1] - R[1, 2]) / s, (R[0, 2] - R[2, 0]) / s, (R[1, 0] - R[0, 1]) / s])
    elif R[0, 0] > R[1, 1] and R[0, 0] > R[2, 2]:
        s = 2.0 * math.sqrt(1.0 + R[0, 0] - R[1, 1] - R[2, 2])
        q = np.array([(R[2, 1] - R[1, 2]) / s, 0.25 * s, (R[0, 1] + R[1, 0]) / s, (R[0, 2] + R[2, 0]) / s])
    elif R[1, 1] > R[2, 2]:
        s = 2.0 * math.sqrt(1.0 + R[1, 1] - R[0, 0] - R[2, 2])
        q = np.array([(R[0, 2] - R[2, 0]) / s, (R[0, 1] + R[1, 0]) / s, 0.25 * s, (R[1, 2] + R[2, 1]) / s])
    else:
        s = 2.0 * math.sqrt(1.0 + R[2, 2] - R[0, 0] - R[1, 1])
        q = np.array([(R[1, 0] - R[0, 1]) / s, (R[0, 2] + R[2, 0]) / s, (R[1, 2] + R[2, 1]) / s, 0.25 * s])
    q /= np.linalg.norm(q)
    return -q if q[0] < 0 else q


def homogeneous(pos=(0.0, 0.0, 0.0), rot=None) -> np.ndarray:
    """(4, 4) homogeneous transform from a translation and a (3, 3) rotation."""
    T = np.eye(4)
    if rot is not None:
        T[:3, :3] = rot
    T[:3, 3] = pos
    return T


# --------------------------------------------------------------------------
# pendulum.xml
# --------------------------------------------------------------------------

#: World position of the hinge (axis y).
PENDULUM_PIVOT = np.array([0.0, 0.0, 1.0])
#: Distance from the pivot to the point mass (and the "tip" site).
PENDULUM_LENGTH = 1.0
#: The point mass (kg); its rotational inertia about its centre is 1e-6 kg m^2.
PENDULUM_MASS = 1.0


def pendulum_tip(theta: float) -> np.ndarray:
    """(3,) world position of site "tip" at hinge angle ``theta`` (0 = hanging down)."""
    L = PENDULUM_LENGTH
    return PENDULUM_PIVOT + np.array([-L * math.sin(theta), 0.0, -L * math.cos(theta)])


def pendulum_small_angle_period(g: float = GRAVITY) -> float:
    """Small-angle period ``2*pi*sqrt(L/g)`` of the point-mass pendulum (s).

    The model's rotational inertia of 1e-6 kg m^2 about the mass changes the
    true period by a relative 5e-7, below any tolerance one would test with.
    """
    return 2.0 * math.pi * math.sqrt(PENDULUM_LENGTH / g)


# --------------------------------------------------------------------------
# double_pendulum.xml
# --------------------------------------------------------------------------

#: World position of the shoulder hinge (axis y).
DOUBLE_PENDULUM_PIVOT = np.array([0.0, 0.0, 2.0])
DOUBLE_PENDULUM_L1 = 1.0
DOUBLE_PENDULUM_L2 = 0.8
DOUBLE_PENDULUM_M1 = 1.0
DOUBLE_PENDULUM_M2 = 1.0


def double_pendulum_elbow(q1: float) -> np.ndarray:
    """(3,) world position of site "elbow" (end of the first link)."""
    L1 = DOUBLE_PENDULUM_L1
    return DOUBLE_PENDULUM_PIVOT + np.array([-L1 * math.sin(q1), 0.0, -L1 * math.cos(q1)])


def double_pendulum_tip(q1: float, q2: float) -> np.ndarray:
    """(3,) world position of site "tip" (end of the second link)."""
    L2 = DOUBLE_PENDULUM_L2
    a = q1 + q2
    return double_pendulum_elbow(q1) + np.array([-L2 * math.sin(a), 0.0, -L2 * math.cos(a)])


# --------------------------------------------------------------------------
# cartpole.xml
# --------------------------------------------------------------------------

#: Height of the rail, the cart centre and the pole hinge.
CARTPOLE_RAIL_HEIGHT = 1.0
CARTPOLE_POLE_LENGTH = 1.0
CARTPOLE_SLIDER_RANGE = (-3.0, 3.0)
#: Motor gear on the slider: force = CARTPOLE_GEAR * ctrl, ctrl in [-1, 1].
CARTPOLE_GEAR = 10.0


def cartpole_tip(x: float, theta: float) -> np.ndarray:
    """(3,) world position of site "tip" (0 = pole upright)."""
    L = CARTPOLE_POLE_LENGTH
    return np.array([x + L * math.sin(theta), 0.0, CARTPOLE_RAIL_HEIGHT + L * math.cos(theta)])


# --------------------------------------------------------------------------
# arm7.xml
# --------------------------------------------------------------------------

#: Height of the table top surface (the base sits on it; the cube rests on it).
ARM7_TABLE_HEIGHT = 0.4
#: World position of body "base" (fixed, identity orientation).
ARM7_BASE_POS = np.array([0.0, 0.0, 0.4])
#: Position of body "link{k}" in its parent's frame, k = 1..7 (identity orientation).
ARM7_LINK_OFFSETS = np.array(
    [
        [0.0, 0.0, 0.10],
        [0.0, 0.0, 0.20],
        [0.0, 0.0, 0.30],
        [0.0, 0.0, 0.30],
        [0.0, 0.0, 0.25],
        [0.0, 0.0, 0.20],
        [0.0, 0.0, 0.10],
    ]
)
#: Axis of hinge "joint{k}" in body "link{k}" (joint at the body origin).
ARM7_JOINT_AXES = np.array(
    [
        [0.0, 0.0, 1.0],
        [0.0, 1.0, 0.0],
        [0.0, 0.0, 1.0],
        [0.0, 1.0, 0.0],
        [0.0, 0.0, 1.0],
        [0.0, 1.0, 0.0],
        [0.0, 0.0, 1.0],
    ]
)
#: Joint ranges (also the ctrlranges of the position actuators "act1".."act7").
ARM7_JOINT_RANGES = np.array(
    [
        [-2.8, 2.8],
        [-1.7, 1.7],
        [-2.8, 2.8],
        [-2.8, 2.8],
        [-2.8, 2.8],
        [-2.5, 2.5],
        [-2.8, 2.8],
    ]
)
#: Position gains of "act1".."act7".
ARM7_KP = np.array([4000.0, 6000.0, 3000.0, 6000.0, 1000.0, 1000.0, 500.0])
#: Site "ee_site" in body "link7": offset and orientation (120 deg about (1,1,1)).
ARM7_EE_SITE_POS = np.array([0.02, 0.03, 0.12])
ARM7_EE_SITE_QUAT = np.array([0.5, 0.5, 0.5, 0.5])
#: Arm joints of keyframe "home" (also its ctrl).
ARM7_HOME = np.array([0.3, 0.5, -0.2, -1.4, 0.1, 1.0, 0.5])
#: Initial (and "home") position of the free cube; it rests on the table top.
ARM7_CUBE_POS = np.array([0.5, -0.3, 0.45])
ARM7_CUBE_HALF_SIZE = 0.05
ARM7_CUBE_MASS = 0.15


def _arm7_q(q) -> np.ndarray:
    q = np.asarray(q, dtype=np.float64).reshape(-1)
    if q.shape != (7,):
        raise InputShapeError("q (arm7 joint angles)", (7,), q.shape)
    return q


def _arm7_transforms(q) -> list[np.ndarray]:
    """World (4, 4) transforms of bodies base, link1, ..., link7 (8 entries)."""
    q = _arm7_q(q)
    T = homogeneous(ARM7_BASE_POS)
    out = [T]
    for k in range(7):
        T = T @ homogeneous(ARM7_LINK_OFFSETS[k]) @ homogeneous(rot=axis_angle_matrix(ARM7_JOINT_AXES[k], q[k]))
        out.append(T)
    return out


def _arm7_quats(q) -> list[np.ndarray]:
    """World quaternions of bodies base, link1, ..., link7, chained as MuJoCo does."""
    q = _arm7_q(q)
    Q = np.array([1.0, 0.0, 0.0, 0.0])
    out = [Q]
    for k in range(7):
        Q = quat_mul(Q, axis_angle_quat(ARM7_JOINT_AXES[k], q[k]))
        out.append(Q)
    return out


def arm7_body_pose(q, k: int) -> tuple[np.ndarray, np.ndarray]:
    """World ``(pos (3,), quat_wxyz (4,))`` of body k: 0 = "base", 1..7 = "link1".."link7"."""
    if not 0 <= k <= 7:
        raise IndexRangeError(f"k: arm7 body index must be in 0..7, got {k}")
    T = _arm7_transforms(q)[k]
    return T[:3, 3].copy(), _arm7_quats(q)[k]


def arm7_body_origin(q, k: int) -> np.ndarray:
    """(3,) world position of body k's origin: 0 = "base", 1..7 = "link1".."link7"."""
    return arm7_body_pose(q, k)[0]


def arm7_ee_transform(q) -> np.ndarray:
    """(4, 4) world transform of site "ee_site"."""
    T7 = _arm7_transforms(q)[7]
    return T7 @ homogeneous(ARM7_EE_SITE_POS, quat_to_matrix(ARM7_EE_SITE_QUAT))


def arm7_ee_pose(q) -> tuple[np.ndarray, np.ndarray]:
    """World ``(pos (3,), quat_wxyz (4,))`` of site "ee_site" at arm joints ``q`` (7,)."""
    T = arm7_ee_transform(q)
    quat = quat_mul(_arm7_quats(q)[7], ARM7_EE_SITE_QUAT / np.linalg.norm(ARM7_EE_SITE_QUAT))
    return T[:3, 3].copy(), quat


def arm7_jacobian(q, point=None) -> np.ndarray:
    """(6, 7) world-frame geometric Jacobian ``[J_pos; J_rot]`` of a point on link7.

    ``point`` is the world position of the point (default: site "ee_site").
    Columns are the 7 arm joints; a model's free cube adds dofs after them.
    For revolute joint i with world axis ``z_i`` through ``o_i``:
    ``J_pos[:, i] = z_i x (point - o_i)``, ``J_rot[:, i] = z_i``.
    """
    Ts = _arm7_transforms(q)
    p = arm7_ee_transform(q)[:3, 3] if point is None else np.asarray(point, dtype=np.float64)
    J = np.zeros((6, 7))
    for i in range(7):
        T = Ts[i + 1]
        z = T[:3, :3] @ ARM7_JOINT_AXES[i]
        o = T[:3, 3]
        J[:3, i] = np.cross(z, p - o)
        J[3:, i] = z
    return J


# --------------------------------------------------------------------------
# quadruped.xml
# --------------------------------------------------------------------------

#: Leg prefixes in actuator/joint order.
QUADRUPED_LEGS = ("FL", "FR", "RL", "RR")
#: Hip body ("{leg}_hip_link") positions in the torso frame; hip joint axis x.
QUADRUPED_HIP_POS = {
    "FL": np.array([0.2, 0.1, 0.0]),
    "FR": np.array([0.2, -0.1, 0.0]),
    "RL": np.array([-0.2, 0.1, 0.0]),
    "RR": np.array([-0.2, -0.1, 0.0]),
}
#: Thigh body ("{leg}_thigh_link") position in the hip frame; thigh joint axis y.
QUADRUPED_THIGH_OFFSET = {
    "FL": np.array([0.0, 0.06, 0.0]),
    "FR": np.array([0.0, -0.06, 0.0]),
    "RL": np.array([0.0, 0.06, 0.0]),
    "RR": np.array([0.0, -0.06, 0.0]),
}
#: Calf body at (0, 0, -QUADRUPED_THIGH_LENGTH) in the thigh frame; calf axis y.
QUADRUPED_THIGH_LENGTH = 0.2
#: Foot sphere centre and "{leg}_foot_site" at (0, 0, -QUADRUPED_CALF_LENGTH) in the calf frame.
QUADRUPED_CALF_LENGTH = 0.2
QUADRUPED_FOOT_RADIUS = 0.025
#: qpos of keyframe "stand": torso (pos, quat), then (hip, thigh, calf) per leg.
QUADRUPED_STAND_QPOS = np.array([0.0, 0.0, 0.335, 1.0, 0.0, 0.0, 0.0] + [0.0, 0.7, -1.4] * 4)


def quadruped_foot_pos(qpos, leg: str) -> np.ndarray:
    """(3,) world position of "{leg}_foot_site" from the full qpos (19,)."""
    qpos = np.asarray(qpos, dtype=np.float64).reshape(-1)
    if qpos.shape != (19,):
        raise InputShapeError("qpos (quadruped)", (19,), qpos.shape)
    i = QUADRUPED_LEGS.index(leg)
    hip, thigh, calf = qpos[7 + 3 * i : 10 + 3 * i]
    T = homogeneous(qpos[:3], quat_to_matrix(qpos[3:7]))
    T = T @ homogeneous(QUADRUPED_HIP_POS[leg], axis_angle_matrix((1.0, 0.0, 0.0), hip))
    T = T @ homogeneous(QUADRUPED_THIGH_OFFSET[leg], axis_angle_matrix((0.0, 1.0, 0.0), thigh))
    T = T @ homogeneous((0.0, 0.0, -QUADRUPED_THIGH_LENGTH), axis_angle_matrix((0.0, 1.0, 0.0), calf))
    return (T @ np.array([0.0, 0.0, -QUADRUPED_CALF_LENGTH, 1.0]))[:3]
