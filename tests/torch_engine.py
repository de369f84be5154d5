"""A minimal articulated-body engine in pure torch, written from docs/writing-a-backend.md.

It is the page's worked example, and the proof that a backend written from the page alone passes
the conformance suite. Loaded as a pytest plugin it registers itself as backend ``torch``::

    MUJOCO_GL=egl PYTHONPATH=tests python -m pytest src/simbackend/contract_tests -p torch_engine --sim torch

The physics, batched over the envs, float64, on the engine's device:

* **Kinematics** of the model's tree, body by body in the compiled order (parents first), joint by
  joint as MuJoCo composes them: a body sits at its ``body_pos``/``body_quat`` in its parent's frame,
  a hinge turns it about ``jnt_axis`` through ``jnt_pos`` by ``q - qpos0``, a slide shifts it along the
  axis, a ball turns it by its quaternion, a free joint places it in the world.
* Every qvel column is a **spatial motion vector** ``[w, v]`` in world coordinates about the world
  origin (``v``: velocity of the body point at the origin). A body's twist is the sum of the columns
  on its path to the world times qvel, so body Jacobians are the columns masked by ancestry, and
  site Jacobians follow from them analytically.
* **Dynamics** (Featherstone, in world coordinates): mass matrix ``M = sum_b J_b' I_b J_b`` from each
  body's spatial inertia (mass, centre of mass, principal inertia and axes) plus armature; bias
  forces by recursive Newton-Euler, ``J' (I a_vp + v x* I v - gravity wrench)``; actuator forces
  from ctrl through MuJoCo's affine gain/bias (motor, position and velocity servos, general affine
  actuators on a joint), clamped to the ctrl and force ranges and mapped through the gear; joint
  damping and springs; body forces through the Jacobian transpose; joint limits as a soft
  one-sided spring-damper.
* **Integration**: semi-implicit Euler at the model timestep (velocity first, then positions with
  the new velocity; free and ball quaternions by the exponential map on the local angular velocity),
  joint damping implicit as in MuJoCo's Euler, and the actuators' velocity terms too where the model
  asks for implicit(fast) integration. RK4 models are integrated with Euler (a note says so).

What it does not do is declared: no contacts (``capabilities.contacts``), no ray casting, core
sensor types only. Models with elements it has no counterpart for (equalities, tendons, friction
loss, activation dynamics, fluid forces, ...) are refused with a ``ModelLoadError`` naming them.
"""

from __future__ import annotations

from typing import Any

import mujoco
import numpy as np
import torch

from simbackend.capabilities import CORE_SENSOR_TYPES, Capabilities
from simbackend.engine import BodyForces, Engine, EngineBuild
from simbackend.errors import ModelLoadError
from simbackend.math import quat_mul, quat_normalize, quat_to_matrix
from simbackend.model_info import JOINT_BALL, JOINT_FREE, JOINT_HINGE, JOINT_SLIDE
from simbackend.plugins import register_backend

_PHASES = ("init", "reset", "interval")
#: the domain-randomization terms it applies (geom friction and friction loss would change nothing here)
_DR_TERMS = (
    "body_mass",
    "body_com",
    "body_inertia",
    "actuator_kp",
    "actuator_kv",
    "joint_damping",
    "joint_armature",
    "gravity",
)


def cross(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Cross product along the last axis, broadcasting (one kernel: the kinematics call it often)."""
    a, b = torch.broadcast_tensors(a, b)
    return torch.linalg.cross(a, b)


def quat_apply(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Rotate vectors ``v (..., 3)`` by unit wxyz quaternions ``q (..., 4)``."""
    t = 2.0 * cross(q[..., 1:], v)
    return v + q[..., :1] * t + cross(q[..., 1:], t)


# ---------------------------------------------------------------------------------------------
# spatial algebra: 6-vectors [angular, linear] in world coordinates, about the world origin
# ---------------------------------------------------------------------------------------------
def _motion(w: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.cat((w, v), -1)


def _cross_motion(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a x b`` of two motion vectors (the rate of change of ``b`` carried by a frame moving at ``a``)."""
    aw, av, bw, bv = a[..., :3], a[..., 3:], b[..., :3], b[..., 3:]
    return _motion(cross(aw, bw), cross(aw, bv) + cross(av, bw))


def _cross_force(a: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """``a x* f``: motion vector ``a`` acting on force vector ``f`` ([torque about the origin, force])."""
    aw, av, fn, ff = a[..., :3], a[..., 3:], f[..., :3], f[..., 3:]
    return _motion(cross(aw, fn) + cross(av, ff), cross(aw, ff))


def _inertia_times(mass: torch.Tensor, com: torch.Tensor, icom: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """Spatial inertia (about the world origin) times motion ``s``: ``[Ic w + c x p, p]`` with ``p = m (v + w x c)``.

    ``mass (...)``, ``com (..., 3)`` world centre of mass, ``icom (..., 3, 3)`` world inertia about it.
    """
    w = s[..., :3]
    p = mass[..., None] * (s[..., 3:] + cross(w, com))
    return _motion((icom * w[..., None, :]).sum(-1) + cross(com, p), p)


def _axis_angle(axis: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """``(N, 4)`` quaternions turning by ``angle (N,)`` about the unit ``axis (3,)``."""
    half = 0.5 * angle[:, None]
    return torch.cat((torch.cos(half), torch.sin(half) * axis), -1)


def _quat_integrate(q: torch.Tensor, w_local: torch.Tensor, h: float) -> torch.Tensor:
    """``q`` turned by the body-local angular velocity ``w_local`` for ``h`` seconds (exponential map)."""
    n = torch.linalg.vector_norm(w_local, dim=-1, keepdim=True)
    half = 0.5 * h * n
    scale = torch.where(n > 1e-12, torch.sin(half) / n.clamp_min(1e-12), torch.full_like(n, 0.5 * h))
    return quat_normalize(quat_mul(q, torch.cat((torch.cos(half), scale * w_local), -1)))


def _solve_spd(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x, failed)``: ``a x = b`` for symmetric positive-definite ``a (N, n, n)``, ``b (N, n)``, by Cholesky.

    Written in torch ops, column by column: for these tiny matrices LAPACK's thread start-up costs far
    more than the arithmetic, and every env's result is the same whatever the batch. ``failed (N,)``:
    ``a`` was not positive definite (its solution is then NaN).
    """
    n = a.shape[-1]
    low = torch.zeros_like(a)
    for j in range(n):
        s = a[:, j:, j] - (low[:, j:, :j] * low[:, j : j + 1, :j]).sum(-1)
        low[:, j:, j] = s / s[:, :1].sqrt()
    diag = torch.diagonal(low, dim1=1, dim2=2)
    y, x = torch.zeros_like(b), torch.zeros_like(b)
    for j in range(n):  # low y = b
        y[:, j] = (b[:, j] - (low[:, j, :j] * y[:, :j]).sum(-1)) / diag[:, j]
    for j in reversed(range(n)):  # low' x = y
        x[:, j] = (y[:, j] - (low[:, j + 1 :, j] * x[:, j + 1 :]).sum(-1)) / diag[:, j]
    return x, ~(diag > 0).all(-1)


class _Kinematics:
    """Everything the frames and the dynamics read from one state, computed once per state."""

    def __init__(
        self, xpos: torch.Tensor, xquat: torch.Tensor, cols: torch.Tensor, twist: torch.Tensor, bias_acc: torch.Tensor
    ):
        self.xpos, self.xquat = xpos, xquat  # (N, nbody, 3), (N, nbody, 4)
        self.cols = cols  # (N, nv, 6) the motion of each qvel column
        self.twist = twist  # (N, nbody, 6) body twists
        self.bias_acc = bias_acc  # (N, nbody, 6) body accelerations at zero qacc


class TorchEngine(Engine):
    """Articulated rigid bodies in pure torch, no contacts (see the module docstring)."""

    name = "torch"
    # the code is device-neutral (no host reads in the hot path), but only the CPU has been tested
    devices = ("cpu",)

    def __init__(self, build: EngineBuild):
        super().__init__(build)
        info, m = self.info, build.info.compiled
        self._refuse_unsupported(m)
        n, dev, f64 = self.num_envs, self.device, torch.float64

        def const(a: Any) -> torch.Tensor:
            return torch.as_tensor(np.array(a, dtype=np.float64), device=dev)

        def per_env(a: Any) -> torch.Tensor:
            t = const(a)
            return t.expand(n, *t.shape).clone()

        self._dt = float(info.timestep)
        self._nv = info.nv
        # MuJoCo's Euler takes joint damping implicitly, implicit(fast) the actuators' velocity terms as well
        integrator = int(m.opt.integrator)
        self._implicit_servo = integrator in (
            mujoco.mjtIntegrator.mjINT_IMPLICIT,
            mujoco.mjtIntegrator.mjINT_IMPLICITFAST,
        )
        self._implicit_damping = float(
            self._implicit_servo or not m.opt.disableflags & int(mujoco.mjtDisableBit.mjDSBL_EULERDAMP)
        )
        self._notes = (
            "no contacts: geoms never collide (capabilities.contacts is False)",
            "joint limits: a soft one-sided spring-damper (the joint's solref time constant and damping ratio,"
            " scaled by the joint's diagonal inertia), not MuJoCo's constraint solver",
        ) + (
            ("integrator: semi-implicit Euler for the model's RK4",)
            if integrator == mujoco.mjtIntegrator.mjINT_RK4
            else ("integrator: implicitfast for the model's implicit (no Coriolis derivatives)",)
            if integrator == mujoco.mjtIntegrator.mjINT_IMPLICIT
            else ()
        )
        # the tree: per body (parent, pos and quat in the parent, joints (type, qposadr, dofadr, pos, axis, qpos0))
        self._bodies = []
        for b in range(1, info.nbody):
            joints = []
            for j in np.flatnonzero(info.joint_body == b):
                qa, da = int(info.joint_qposadr[j]), int(info.joint_dofadr[j])
                joints.append(
                    (int(info.joint_type[j]), qa, da, const(m.jnt_pos[j]), const(m.jnt_axis[j]), float(info.qpos0[qa]))
                )
            self._bodies.append((int(info.body_parent[b]), const(m.body_pos[b]), const(m.body_quat[b]), joints))
        #: (nbody, nv) whether qvel column d moves body b (d's joint is on b's path to the world)
        dof_body = np.zeros(info.nv, np.int64)
        for j, t in enumerate(info.joint_type):
            width = {JOINT_FREE: 6, JOINT_BALL: 3}.get(int(t), 1)
            dof_body[info.joint_dofadr[j] : info.joint_dofadr[j] + width] = info.joint_body[j]
        anc = np.zeros((info.nbody, info.nv), bool)
        for b in range(1, info.nbody):
            anc[b] = anc[info.body_parent[b]] | (dof_body == b)
        self._anc = torch.as_tensor(anc, dtype=f64, device=dev)
        self._iquat = const(info.body_iquat)
        self._eye = torch.eye(3, dtype=f64, device=dev)
        self._site_body = np.asarray(info.site_body, np.int64)
        self._site_pos, self._site_quat = const(m.site_pos), const(m.site_quat)
        # scalar joints: integration, springs, limits
        scalar = info.dof_joints
        self._sq, self._sd = (torch.as_tensor(a, device=dev) for a in (info.dof_qpos_index, info.dof_qvel_index))
        self._stiff = const(m.jnt_stiffness[scalar])
        self._spring_ref = const(m.qpos_spring[info.dof_qpos_index])
        rng = info.joint_range[scalar]
        off = int(mujoco.mjtDisableBit.mjDSBL_LIMIT) | int(mujoco.mjtDisableBit.mjDSBL_CONSTRAINT)
        limited = np.isfinite(rng).any(axis=1) & (not m.opt.disableflags & off)
        self._lim = torch.as_tensor(np.flatnonzero(limited), device=dev)
        self._lim_lo, self._lim_hi = const(rng[limited, 0]), const(rng[limited, 1])
        timeconst = np.maximum(m.jnt_solref[scalar][limited, 0], 2 * self._dt)  # MuJoCo's floor: two substeps
        dampratio = np.where(m.jnt_solref[scalar][limited, 1] > 0, m.jnt_solref[scalar][limited, 1], 1.0)
        self._lim_k, self._lim_b = const(1 / (timeconst * dampratio) ** 2), const(2 / timeconst)
        # free and ball joints: (qposadr of the quaternion, dofadr of the angular velocity)
        self._quats = [
            (
                int(info.joint_qposadr[j]) + (3 if t == JOINT_FREE else 0),
                int(info.joint_dofadr[j]) + (3 if t == JOINT_FREE else 0),
            )
            for j, t in enumerate(info.joint_type)
            if t in (JOINT_FREE, JOINT_BALL)
        ]
        self._free = [
            (int(info.joint_qposadr[j]), int(info.joint_dofadr[j]))
            for j, t in enumerate(info.joint_type)
            if t == JOINT_FREE
        ]
        # actuators: force = gain ctrl + b0 + b1 length + b2 velocity on a hinge/slide, length = gear q
        nu = info.nu
        act_j = np.asarray(info.actuator_joint, np.int64)
        self._act_q = torch.as_tensor(info.joint_qposadr[act_j], device=dev)
        self._act_d = torch.as_tensor(info.joint_dofadr[act_j], device=dev)
        self._gear = const(info.actuator_gear)
        self._ctrl_lo, self._ctrl_hi = const(info.actuator_ctrl_range[:, 0]), const(info.actuator_ctrl_range[:, 1])
        frange = np.array(m.actuator_forcerange, np.float64).reshape(nu, 2)
        frange[~np.asarray(m.actuator_forcelimited, bool)] = (-np.inf, np.inf)
        self._force_range = frange
        self._force_lo, self._force_hi = const(frange[:, 0]), const(frange[:, 1])
        onehot = np.zeros((nu, info.nv))
        onehot[np.arange(nu), info.joint_dofadr[act_j]] = 1.0
        self._act_onehot = const(onehot)
        # per-env model fields (domain randomization writes them)
        self._mass, self._com, self._inertia = (
            per_env(info.body_mass),
            per_env(info.body_com),
            per_env(info.body_inertia),
        )
        self._damping, self._armature = per_env(info.dof_damping), per_env(info.dof_armature)
        self._gravity = per_env(info.gravity)
        self._gain = per_env(np.array(m.actuator_gainprm[:, 0]).reshape(nu))
        self._bias = per_env(np.array(m.actuator_biasprm[:, :3]).reshape(nu, 3))
        self._written: set[str] = set()
        # the state: every env at qpos0, at rest
        self._qpos = per_env(info.qpos0)
        self._qvel = torch.zeros((n, info.nv), dtype=f64, device=dev)
        self._prev = (self._qpos, self._qvel)
        self._saved = False
        self._kin: _Kinematics | None = None

    def _refuse_unsupported(self, m: Any) -> None:
        """Raise ``ModelLoadError`` naming the first element this engine has no counterpart for."""
        info = self.info

        def name(kind: Any, i: int) -> str:
            return mujoco.mj_id2name(m, kind, i) or f"#{i}"

        obj = mujoco.mjtObj
        problems = [f"equality {name(obj.mjOBJ_EQUALITY, i)!r}" for i in range(m.neq)]
        problems += [f"tendon {name(obj.mjOBJ_TENDON, i)!r}" for i in range(m.ntendon)]
        problems += [f"mocap body {name(obj.mjOBJ_BODY, b)!r}" for b in np.flatnonzero(m.body_mocapid >= 0)]
        problems += [f"body {name(obj.mjOBJ_BODY, b)!r}: gravity compensation" for b in np.flatnonzero(m.body_gravcomp)]
        if m.opt.density > 0 or m.opt.viscosity > 0 or np.any(m.opt.wind):
            problems.append("option density/viscosity/wind: fluid forces")
        if m.nplugin:
            problems.append("engine plugins")
        bits = mujoco.mjtDisableBit
        for flag in ("SPRING", "DAMPER", "ACTUATION", "CLAMPCTRL"):  # gravity: ModelInfo.gravity is zero
            if m.opt.disableflags & int(getattr(bits, f"mjDSBL_{flag}")):
                problems.append(f"option flag {flag.lower()}=disable")
        for j, t in enumerate(info.joint_type):
            jn, body = f"joint {info.joint_names[j]!r}", int(info.joint_body[j])
            da = int(info.joint_dofadr[j])
            width = {JOINT_FREE: 6, JOINT_BALL: 3}.get(int(t), 1)
            if np.any(m.dof_frictionloss[da : da + width] > 0):
                problems.append(f"{jn}: frictionloss (dry friction)")
            if np.any(m.dof_dampingpoly[da : da + width]) or np.any(m.jnt_stiffnesspoly[j]) or m.jnt_actfrclimited[j]:
                problems.append(f"{jn}: polynomial damping/stiffness or an actuator force range on the joint")
            if t in (JOINT_FREE, JOINT_BALL) and (m.jnt_stiffness[j] > 0 or m.jnt_limited[j]):
                problems.append(f"{jn}: a spring or limit on a {'free' if t == JOINT_FREE else 'ball'} joint")
            if t in (JOINT_FREE, JOINT_BALL) and np.count_nonzero(info.joint_body == body) > 1:
                problems.append(f"{jn}: a free or ball joint shares its body with other joints")
            if t == JOINT_FREE and info.body_parent[body] != 0:
                problems.append(f"{jn}: a free joint below another body")
        for a in range(info.nu):
            an = f"actuator {info.actuator_names[a]!r}"
            j = int(m.actuator_trnid[a, 0])
            if int(m.actuator_trntype[a]) != mujoco.mjtTrn.mjTRN_JOINT or info.joint_type[j] not in (
                JOINT_HINGE,
                JOINT_SLIDE,
            ):
                problems.append(f"{an}: a transmission other than a hinge or slide joint")
            if (
                int(m.actuator_dyntype[a]) != mujoco.mjtDyn.mjDYN_NONE
                or int(m.actuator_gaintype[a]) != mujoco.mjtGain.mjGAIN_FIXED
                or int(m.actuator_biastype[a]) not in (mujoco.mjtBias.mjBIAS_NONE, mujoco.mjtBias.mjBIAS_AFFINE)
            ):
                problems.append(f"{an}: activation dynamics or a non-affine gain or bias")
            if (
                m.actuator_armature[a]
                or m.actuator_damping[a]
                or np.any(m.actuator_dampingpoly[a])
                or m.actuator_delay[a]
            ):
                problems.append(f"{an}: actuator armature, damping or delay")
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise ModelLoadError(
                f"the torch backend cannot build this model: {problems[0]}{more}; it has no counterpart for it"
            )

    # ------------------------------------------------------------------
    # what it is
    # ------------------------------------------------------------------
    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            gpu=False,
            actuator_kinds=frozenset({"motor", "position", "velocity", "other"}),
            sensor_types=CORE_SENSOR_TYPES,
            contacts=False,
            rendering=True,  # MuJoCo's renderer draws the compiled model at this engine's state
            snapshot_restore=True,
            snapshot_exact=True,
            ray_casting=False,
            domain_randomization=frozenset(f"{t}:{p}" for t in _DR_TERMS for p in _PHASES),
        )

    @property
    def notes(self) -> tuple[str, ...]:
        return self._notes

    # ------------------------------------------------------------------
    # kinematics
    # ------------------------------------------------------------------
    def _kinematics(self) -> _Kinematics:
        if self._kin is None:
            self._kin = self._forward(self._qpos, self._qvel)
        return self._kin

    def _forward(self, qpos: torch.Tensor, qvel: torch.Tensor) -> _Kinematics:
        """Poses, qvel columns, twists and zero-qacc accelerations of every body, MuJoCo's composition."""
        n = qpos.shape[0]
        zero3 = qpos.new_zeros((n, 3))
        pos, quat = [zero3], [qpos.new_tensor([1.0, 0.0, 0.0, 0.0]).expand(n, 4)]
        twist, acc = [qpos.new_zeros((n, 6))], [qpos.new_zeros((n, 6))]
        cols: list[Any] = [None] * self._nv
        for parent, body_pos, body_quat, joints in self._bodies:
            x = pos[parent] + quat_apply(quat[parent], body_pos.expand(n, 3))
            r = quat_mul(quat[parent], body_quat.expand(n, 4))
            v, a = twist[parent], acc[parent]
            for jtype, qa, da, jpos, jaxis, ref in joints:
                if jtype == JOINT_FREE:  # world translation columns (fixed), body-axis rotation columns
                    x, r = qpos[:, qa : qa + 3], quat_normalize(qpos[:, qa + 3 : qa + 7])
                    rot = quat_to_matrix(r)
                    for k in range(3):
                        cols[da + k] = _motion(zero3, self._eye[k].expand(n, 3))
                        cols[da + 3 + k] = _motion(rot[..., k], cross(x, rot[..., k]))
                    spin = sum(cols[da + 3 + k] * qvel[:, da + 3 + k, None] for k in range(3))
                    v = v + sum(cols[da + k] * qvel[:, da + k, None] for k in range(3)) + spin
                    a = a + _cross_motion(v, spin)  # the rotation columns turn with the body
                    continue
                anchor = x + quat_apply(r, jpos.expand(n, 3))
                if jtype == JOINT_BALL:  # rotation about the body's own axes through the anchor
                    r = quat_mul(r, quat_normalize(qpos[:, qa : qa + 4]))
                    rot = quat_to_matrix(r)
                    for k in range(3):
                        cols[da + k] = _motion(rot[..., k], cross(anchor, rot[..., k]))
                    dv = sum(cols[da + k] * qvel[:, da + k, None] for k in range(3))
                    x = anchor - quat_apply(r, jpos.expand(n, 3))
                else:
                    axis = quat_apply(r, jaxis.expand(n, 3))
                    if jtype == JOINT_HINGE:
                        r = quat_mul(r, _axis_angle(jaxis, qpos[:, qa] - ref))
                        x = anchor - quat_apply(r, jpos.expand(n, 3))
                        cols[da] = _motion(axis, cross(anchor, axis))
                    else:
                        x = x + axis * (qpos[:, qa : qa + 1] - ref)
                        cols[da] = _motion(zero3, axis)
                    dv = cols[da] * qvel[:, da : da + 1]
                a = a + _cross_motion(v, dv)  # columns fixed in the frame before the joint
                v = v + dv
            pos.append(x)
            quat.append(quat_normalize(r))
            twist.append(v)
            acc.append(a)
        empty = qpos.new_zeros((n, 0, 6))
        return _Kinematics(
            torch.stack(pos, 1),
            torch.stack(quat, 1),
            torch.stack(cols, 1) if cols else empty,
            torch.stack(twist, 1),
            torch.stack(acc, 1),
        )

    # ------------------------------------------------------------------
    # state
    # ------------------------------------------------------------------
    def read_state(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._qpos, self._qvel

    def write_state(self, env_ids: np.ndarray, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        ids = torch.as_tensor(env_ids, device=self.device)
        self._qpos, self._qvel = self._qpos.clone(), self._qvel.clone()  # never write into a returned view
        self._qpos[ids] = qpos.to(torch.float64)
        self._qvel[ids] = qvel.to(torch.float64)
        self._kin = None

    # ------------------------------------------------------------------
    # dynamics
    # ------------------------------------------------------------------
    def _qacc(
        self, qpos: torch.Tensor, qvel: torch.Tensor, ctrl: torch.Tensor, forces: BodyForces | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(qacc (N, nv), failed (N,))`` at this state; failed: the mass matrix is not positive definite."""
        kin = self._forward(qpos, qvel)
        # spatial inertias: world centre of mass and world inertia about it (principal axes turned by the body)
        com = kin.xpos + quat_apply(kin.xquat, self._com)
        axes = quat_to_matrix(quat_mul(kin.xquat, self._iquat.expand_as(kin.xquat)))
        icom = (axes[..., :, None, :] * axes[..., None, :, :] * self._inertia[..., None, None, :]).sum(-1)
        mass = self._mass
        # mass matrix: sum over bodies of J_b' I_b J_b, J_b the qvel columns on b's path
        jac = kin.cols[:, None] * self._anc[None, :, :, None]  # (N, nb, nv, 6)
        ijac = _inertia_times(mass[..., None], com[:, :, None], icom[:, :, None], jac)
        mmat = (jac[:, :, :, None, :] * ijac[:, :, None, :, :]).sum(-1).sum(1)  # (N, nv, nv)
        # recursive Newton-Euler at zero qacc: body wrenches, gravity, the external forces
        f = _inertia_times(mass, com, icom, kin.bias_acc) + _cross_force(
            kin.twist, _inertia_times(mass, com, icom, kin.twist)
        )
        weight = mass[..., None] * self._gravity[:, None]
        f = f - _motion(cross(com, weight), weight)
        if forces is not None:
            b = torch.as_tensor(forces.bodies, device=self.device)
            force, torque = forces.force.to(torch.float64), forces.torque.to(torch.float64)
            f = f.index_add(1, b, -_motion(torque + cross(kin.xpos[:, b], force), force))
        tau = -(jac * f[:, :, None]).sum(-1).sum(1)  # (N, nv)
        # actuators, MuJoCo's affine gain and bias; their velocity term and joint damping taken implicitly
        u = torch.minimum(torch.maximum(ctrl.to(torch.float64), self._ctrl_lo), self._ctrl_hi)
        length, speed = self._gear * qpos[:, self._act_q], self._gear * qvel[:, self._act_d]
        raw = self._gain * u + self._bias[..., 0] + self._bias[..., 1] * length + self._bias[..., 2] * speed
        act = torch.minimum(torch.maximum(raw, self._force_lo), self._force_hi)
        tau = tau + ((self._gear * act)[..., None] * self._act_onehot).sum(1)
        tau = tau - self._damping * qvel
        damping = self._damping * self._implicit_damping
        if self._implicit_servo:  # implicitfast: the servos' velocity gains too (not where the force saturates)
            free = (raw == act).to(raw.dtype)
            kv = (self._gear**2 * (-self._bias[..., 2]).clamp_min(0) * free)[..., None] * self._act_onehot
            damping = damping + kv.sum(1)
        q, qd = qpos[:, self._sq], qvel[:, self._sd]
        tau = tau.index_add(1, self._sd, -self._stiff * (q - self._spring_ref))
        mhat = mmat + torch.diag_embed(self._armature + self._dt * damping)
        if self._lim.numel():  # soft one-sided limits, scaled by the joint's diagonal inertia
            d = self._sd[self._lim]
            meff = mhat[:, d, d]
            ql, qdl = q[:, self._lim], qd[:, self._lim]
            lower = (meff * (self._lim_k * (self._lim_lo - ql) - self._lim_b * qdl)).clamp_min(0) * (ql < self._lim_lo)
            upper = (meff * (self._lim_k * (self._lim_hi - ql) - self._lim_b * qdl)).clamp_max(0) * (ql > self._lim_hi)
            tau = tau.index_add(1, d, lower + upper)
        return _solve_spd(mhat, tau)

    def _integrate(self, qpos: torch.Tensor, qvel: torch.Tensor) -> torch.Tensor:
        h, out = self._dt, qpos.clone()
        out[:, self._sq] = qpos[:, self._sq] + h * qvel[:, self._sd]
        for qa, da in self._free:
            out[:, qa : qa + 3] = qpos[:, qa : qa + 3] + h * qvel[:, da : da + 3]
        for qa, da in self._quats:
            out[:, qa : qa + 4] = _quat_integrate(qpos[:, qa : qa + 4], qvel[:, da : da + 3], h)
        return out

    def step(self, ctrl: torch.Tensor, nsteps: int, forces: BodyForces | None) -> torch.Tensor:
        self._saved = False
        self._prev = (self._qpos, self._qvel)  # never written in place: the pre-call state as it is
        self._saved = True
        failed = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        qpos, qvel = self._qpos, self._qvel
        for _ in range(nsteps):  # one Python iteration per substep: Ctrl-C is seen between them
            if self._nv:
                qacc, bad = self._qacc(qpos, qvel, ctrl, forces)
                qvel = qvel + self._dt * qacc
                qpos = self._integrate(qpos, qvel)
                failed = failed | bad
            self._qpos, self._qvel = qpos, qvel
        self._kin = None
        return failed

    def revert(self, envs: torch.Tensor) -> None:
        if not self._saved:
            return
        keep = envs.to(self.device)[:, None]
        self._qpos = torch.where(keep, self._prev[0], self._qpos)
        self._qvel = torch.where(keep, self._prev[1], self._qvel)
        self._kin = None

    # ------------------------------------------------------------------
    # frames
    # ------------------------------------------------------------------
    def body_pose(self, ids: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        kin = self._kinematics()
        return kin.xpos[:, ids], kin.xquat[:, ids]

    def body_velocity(self, ids: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        kin = self._kinematics()
        v = kin.twist[:, ids]
        return v[..., 3:] + cross(v[..., :3], kin.xpos[:, ids]), v[..., :3]

    def site_pose(self, ids: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        kin = self._kinematics()
        body = self._site_body[ids]
        bq = kin.xquat[:, body]
        return (
            kin.xpos[:, body] + quat_apply(bq, self._site_pos[ids].expand_as(kin.xpos[:, body])),
            quat_mul(bq, self._site_quat[ids].expand_as(bq)),
        )

    def site_jacobian(self, site_id: int, cols: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        kin = self._kinematics()
        point = self.site_pose(np.array([site_id]))[0]  # (N, 1, 3)
        jac = kin.cols * self._anc[int(self._site_body[site_id])][None, :, None]  # (N, nv, 6)
        jacp = jac[..., 3:] + cross(jac[..., :3], point)  # the velocity of the site's point per column
        return jacp.transpose(1, 2)[..., cols], jac[..., :3].transpose(1, 2)[..., cols]

    # ------------------------------------------------------------------
    # per-env model fields
    # ------------------------------------------------------------------
    def read_params(self, field: str) -> np.ndarray | None:
        if field not in self._written:
            return None
        if field in ("actuator_kp", "actuator_kv"):
            out = np.array(np.broadcast_to(getattr(self.info, field), (self.num_envs, self.info.nu)), np.float64)
            gain, bias = self._gain.cpu().numpy(), self._bias.cpu().numpy()
            for a, kind in enumerate(self.info.actuator_kind):
                if field == "actuator_kp" and kind == "position":
                    out[:, a] = gain[:, a]
                elif field == "actuator_kv" and kind in ("position", "velocity"):
                    out[:, a] = -bias[:, a, 2]
            return out
        return self._table(field).cpu().numpy().copy()

    def _table(self, field: str) -> torch.Tensor:
        return {
            "body_mass": self._mass,
            "body_com": self._com,
            "body_inertia": self._inertia,
            "dof_damping": self._damping,
            "dof_armature": self._armature,
            "gravity": self._gravity,
        }[field]

    def write_params(self, env_ids: np.ndarray, values: Any) -> None:
        ids = torch.as_tensor(env_ids, device=self.device)
        for field, rows in values.items():
            rows = torch.as_tensor(np.asarray(rows, np.float64), device=self.device)
            if field in ("actuator_kp", "actuator_kv"):
                for a, kind in enumerate(self.info.actuator_kind):
                    if field == "actuator_kp" and kind == "position":  # gain kp, bias -kp q
                        self._gain[ids, a], self._bias[ids, a, 1] = rows[:, a], -rows[:, a]
                    elif field == "actuator_kv" and kind == "position":  # bias -kv qdot
                        self._bias[ids, a, 2] = -rows[:, a]
                    elif field == "actuator_kv" and kind == "velocity":  # gain kv, bias -kv qdot
                        self._gain[ids, a], self._bias[ids, a, 2] = rows[:, a], -rows[:, a]
            else:
                self._table(field)[ids] = rows
            self._written.add(field)

    def model_fields(self) -> dict[str, np.ndarray]:
        info = self.info
        axes = quat_to_matrix(np.asarray(info.body_iquat, np.float64))
        inertia = axes @ (info.body_inertia[:, :, None] * np.swapaxes(axes, 1, 2))
        return {
            "body_mass": info.body_mass.copy(),
            "body_com": info.body_com.copy(),
            "body_inertia": 0.5 * (inertia + np.swapaxes(inertia, 1, 2)),
            "joint_range": info.joint_range.copy(),
            "actuator_ctrl_range": info.actuator_ctrl_range.copy(),
            "actuator_force_range": self._force_range.copy(),
            "timestep": np.array(self._dt),
            "gravity": info.gravity.copy(),
        }

    # ------------------------------------------------------------------
    # snapshots: the state is all the engine keeps
    # ------------------------------------------------------------------
    @property
    def state_width(self) -> int:
        return self.info.nq + self.info.nv

    def save_state(self, env_ids: np.ndarray) -> torch.Tensor:
        ids = torch.as_tensor(env_ids, device=self.device)
        return torch.cat((self._qpos[ids], self._qvel[ids]), 1)

    def check_saved(self, env_ids: np.ndarray, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return rows[:, : self.info.nq], rows[:, self.info.nq :]

    def restore_state(self, env_ids: np.ndarray, rows: torch.Tensor) -> None:
        self.write_state(env_ids, *self.check_saved(env_ids, rows))

    def close(self) -> None:
        self._kin = None


def pytest_configure(config: Any) -> None:
    """As a pytest plugin (``-p torch_engine``): the backend is there for ``--sim torch``."""
    register_backend("torch", TorchEngine, replace=True)
