"""End-effector pose control: a target site pose, solved into joint targets by damped least squares."""

from __future__ import annotations

import numpy as np
import torch

from simbackend.contract import SimBackend
from simbackend.errors import InvalidArgumentError, UnsupportedFeatureError
from simbackend.math import (
    cross,
    quat_apply,
    quat_apply_inverse,
    quat_conj,
    quat_mul,
    quat_normalize,
)
from simbackend.model_info import JOINT_HINGE

from ._rotation import quat_from_rotvec, rotvec_from_quat
from .base import (
    Controller,
    bound_array,
    check_backend,
    joint_actuators,
    resolve_dof_joints,
    resolve_names,
    sorted_range,
)
from .config import EEPoseConfig
from .registry import register_controller

__all__ = ["EEPoseController"]


def _ancestors(parent: np.ndarray, body: int) -> list[int]:
    """``body`` and its ancestors up to (not including) the world body."""
    out = []
    while body != 0:
        out.append(body)
        body = int(parent[body])
    return out


@register_controller
class EEPoseController(Controller):
    """End-effector (site) pose targets reached by joint position targets (:class:`EEPoseConfig`).

    Action ``(N, 6)``: translation (m) and rotation vector (rad), delta or
    absolute (see :class:`EEPoseConfig` for the frames). :meth:`set_action`
    computes the target site pose, stores it in the root body's frame (so a
    moving root carries it along), and solves it into joint targets;
    :meth:`compute` gives ``(N, k)`` ctrl ``gear * joint target`` for the
    joints' position actuators. Not physics-rate: the servos track.

    Inverse kinematics: damped least squares (Levenberg-Marquardt) on the exact
    kinematics of the controlled chain, from one contract query. The world-frame
    site Jacobian ``(N, 6, k)`` of the controlled joints at the current state
    gives each joint's screw (a hinge's axis ``a = jr`` and a point on it
    ``c = p - jp x a``; a slide's direction ``jp``). With them the product of
    exponentials gives the site pose and the Jacobian ``J`` at ``q + dq``
    exactly, for any ``dq``, without asking the backend again. Each of the
    ``ik_iterations`` iterations computes the 6-vector error
    ``e = [p_target - p(dq), rotvec(R_target R(dq)^T)]`` and adds
    ``J^T (J J^T + damping^2 I)^-1 e`` to ``dq``. The first iteration is the
    textbook damped-least-squares step; the next ones converge quadratically
    (on the 7-DoF arm, a 2 cm + 0.1 rad step is solved to about 1e-6 m after 4).
    The damping still bounds each step near singularities, where the target is
    approached over several actions instead. The joint targets ``q + dq`` are
    clipped to the actuators' ctrl ranges (joint limits are not part of the solve).

    Attributes:
        joint_ids: ``(k,)`` the joints. site_id: the site. root_body_id: the root body
            (0: the world).
        targets: ``(N, k)`` joint targets; target_pos, target_quat: ``(N, 3)``,
            ``(N, 4)`` the target site pose in the root frame (wxyz).
    """

    config_type = EEPoseConfig

    def __init__(self, backend: SimBackend, config: EEPoseConfig):
        backend = check_backend(backend)
        self.config = config
        info = backend.info
        arg = "EEPoseConfig"
        joints = resolve_dof_joints(backend, config.joints, f"{arg}.joints")
        site = int(resolve_names(backend, "site", [config.site], f"{arg}.site")[0])
        acts = joint_actuators(
            backend, joints, config.joints, "position", f"{arg}.joints", "; the IK writes joint position targets"
        )
        parent = np.asarray(info.body_parent)
        site_body = int(info.site_body[site])
        chain = _ancestors(parent, site_body)
        joint_bodies = [int(info.joint_body[j]) for j in joints]
        for name, b in zip(config.joints, joint_bodies):
            if b not in chain:
                raise InvalidArgumentError(
                    f"{arg}.joints: joint {name!r} does not move site {config.site!r} (its body"
                    f" {info.body_names[b]!r} is not an ancestor of the site's body {info.body_names[site_body]!r})"
                )
        if config.root_body is None:
            top = max(joint_bodies, key=chain.index)  # the controlled joint's body nearest the root
            root = int(parent[top])
        else:
            root = int(resolve_names(backend, "body", [config.root_body], f"{arg}.root_body")[0])
            moved = set(_ancestors(parent, root))
            for name, b in zip(config.joints, joint_bodies):
                if b in moved:
                    raise InvalidArgumentError(
                        f"{arg}.root_body: body {config.root_body!r} is moved by controlled joint {name!r};"
                        " the root frame must not move with the joints"
                    )
        if not backend.capabilities.site_jacobians:
            raise UnsupportedFeatureError(backend.name, "site_jacobians", "EEPoseConfig needs site Jacobians")
        gear = np.asarray(info.actuator_gear)[acts]
        if (gear == 0).any():
            raise InvalidArgumentError(
                f"{arg}.joints: actuators with gear 0: {[info.actuator_names[a] for a in acts[gear == 0]]}"
            )
        dev = backend.device
        low = torch.cat([bound_array(config.pos_low, 3, dev), torch.full((3,), -config.rot_bound, device=dev)])
        high = torch.cat([bound_array(config.pos_high, 3, dev), torch.full((3,), config.rot_bound, device=dev)])
        super().__init__(backend, config, acts, low, high, physics_rate=False, normalize_action=config.normalize_action)
        names = list(config.joints)
        self.joint_ids = torch.as_tensor(joints, dtype=torch.int64, device=dev)
        self.site_id = site
        self.root_body_id = root
        self._site_ids = backend.get_site_ids([config.site])
        self._root_ids = backend.get_body_ids([info.body_names[root]]) if root else None
        self._qpos_cols = backend.get_joint_qpos_indices(names).to(dev)
        self._qvel_cols = backend.get_joint_qvel_indices(names)
        self._gear = torch.as_tensor(gear, dtype=torch.float32, device=dev)
        r = sorted_range(np.asarray(info.actuator_ctrl_range)[acts], gear)
        self._target_low = torch.as_tensor(r[:, 0], dtype=torch.float32, device=dev)
        self._target_high = torch.as_tensor(r[:, 1], dtype=torch.float32, device=dev)
        self._damping2 = config.damping**2
        self._eye6 = torch.eye(6, dtype=torch.float32, device=dev)
        # the joints from the root towards the site (deeper bodies later; joints of one body in id order)
        depth = {b: len(chain) - chain.index(b) for b in joint_bodies}
        order = sorted(range(len(joints)), key=lambda i: (depth[joint_bodies[i]], int(joints[i])))
        self._chain_order = torch.as_tensor(order, dtype=torch.int64, device=dev)
        self._is_hinge = [int(info.joint_type[joints[i]]) == JOINT_HINGE for i in order]
        n = backend.num_envs
        self._target = torch.zeros((n, len(acts)), dtype=torch.float32, device=dev)
        self._target_pos = torch.zeros((n, 3), dtype=torch.float32, device=dev)
        self._target_quat = torch.zeros((n, 4), dtype=torch.float32, device=dev)
        self.reanchor(torch.arange(n, device=dev))

    # ------------------------------------------------------------------
    @property
    def targets(self) -> torch.Tensor:
        """``(N, k)`` float32 joint targets (rad or m), a copy."""
        return self._target.clone()

    @property
    def target_pos(self) -> torch.Tensor:
        """``(N, 3)`` target site position in the root frame (m), a copy."""
        return self._target_pos.clone()

    @property
    def target_quat(self) -> torch.Tensor:
        """``(N, 4)`` target site orientation in the root frame (wxyz), a copy."""
        return self._target_quat.clone()

    def root_pose(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(pos (N, 3), quat (N, 4))`` world pose of the root body (identity for the world body)."""
        b = self.backend
        if self._root_ids is None:
            n, dev = b.num_envs, b.device
            quat = torch.zeros((n, 4), dtype=torch.float32, device=dev)
            quat[:, 0] = 1.0
            return torch.zeros((n, 3), dtype=torch.float32, device=dev), quat
        return b.get_body_pos_w(self._root_ids)[:, 0], b.get_body_quat_w(self._root_ids)[:, 0]

    def site_pose(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(pos (N, 3), quat (N, 4))`` world pose of the controlled site."""
        b = self.backend
        return b.get_site_pos_w(self._site_ids)[:, 0], b.get_site_quat_w(self._site_ids)[:, 0]

    def compute(self) -> torch.Tensor:
        """``(N, k)`` ctrl of the position actuators: ``gear * joint target``."""
        return self._target * self._gear

    # ------------------------------------------------------------------
    def _clip(self, t: torch.Tensor) -> torch.Tensor:
        return torch.maximum(torch.minimum(t, self._target_high), self._target_low)

    def reanchor(self, ids: torch.Tensor) -> None:
        p_r, q_r = self.root_pose()
        p_e, q_e = self.site_pose()
        self._target_pos[ids] = quat_apply_inverse(q_r, p_e - p_r)[ids]
        self._target_quat[ids] = quat_normalize(quat_mul(quat_conj(q_r), q_e))[ids]
        self._target[ids] = self._clip(self.backend.get_qpos()[:, self._qpos_cols])[ids]

    def store_targets(self, action: torch.Tensor) -> None:
        cfg = self.config
        dp, dr = action[:, :3], action[:, 3:]
        p_r, q_r = self.root_pose()
        p_e, q_e = self.site_pose()
        if cfg.use_delta:
            if cfg.use_target:  # the previous target, carried by the root
                p_b = p_r + quat_apply(q_r, self._target_pos)
                q_b = quat_mul(q_r, self._target_quat)
            else:
                p_b, q_b = p_e, q_e
            axes = q_r if cfg.translation_frame == "root" else q_b
            p_t = p_b + quat_apply(axes, dp)
            q_d = quat_from_rotvec(dr)
            if cfg.rotation_frame == "root":  # R_root R(dr) R_root^T R_base
                q_t = quat_mul(quat_mul(quat_mul(q_r, q_d), quat_conj(q_r)), q_b)
            else:  # R_base R(dr)
                q_t = quat_mul(q_b, q_d)
        else:
            p_t = p_r + quat_apply(q_r, dp)
            q_t = quat_mul(q_r, quat_from_rotvec(dr))
        q_t = quat_normalize(q_t)
        q_now = self.backend.get_qpos()[:, self._qpos_cols]
        dq = self._solve(p_e, q_e, p_t, q_t)
        self._target_pos = quat_apply_inverse(q_r, p_t - p_r)
        self._target_quat = quat_normalize(quat_mul(quat_conj(q_r), q_t))
        self._target = self._clip(q_now + dq)

    def _solve(self, p: torch.Tensor, q: torch.Tensor, p_t: torch.Tensor, q_t: torch.Tensor) -> torch.Tensor:
        """``(N, k)`` joint step (config order) towards the world-frame target pose ``(p_t, q_t)``
        from the site pose ``(p, q)`` at the current state (see the class docstring)."""
        jacp, jacr = self.backend.get_site_jacobian_w(self.site_id, self._qvel_cols)  # (N, 3, k)
        order = self._chain_order  # base to tip
        jacp, jacr = jacp[:, :, order], jacr[:, :, order]
        n, k = p.shape[0], len(order)
        # each joint's screw at the current state, recovered from its Jacobian column:
        # hinge: unit axis a = jr and a point on it c = p - jp x a (since jp = a x (p - c));
        # slide: direction d = jp.
        axes, points = [], []
        for i in range(k):
            if self._is_hinge[i]:
                a = jacr[:, :, i] / torch.linalg.vector_norm(jacr[:, :, i], dim=1, keepdim=True).clamp_min(1e-12)
                axes.append(a)
                points.append(p - cross(jacp[:, :, i], a))
            else:
                axes.append(jacp[:, :, i])
                points.append(None)
        dq = torch.zeros((n, k), dtype=torch.float32, device=p.device)
        eye = self._eye6
        for _ in range(self.config.ik_iterations):
            # product of exponentials: the site pose at q + dq, and the Jacobian there
            gq = torch.zeros((n, 4), dtype=torch.float32, device=p.device)
            gq[:, 0] = 1.0  # rotation of the composed motion
            gt = torch.zeros((n, 3), dtype=torch.float32, device=p.device)  # its translation
            cols_a, cols_c = [], []
            for i in range(k):
                a = quat_apply(gq, axes[i])  # the joint's axis moved by the joints before it
                if self._is_hinge[i]:
                    c = quat_apply(gq, points[i]) + gt
                    step_q = quat_from_rotvec(a * dq[:, i : i + 1])  # rotation about the moved axis through c
                    gt = quat_apply(step_q, gt - c) + c
                    gq = quat_mul(step_q, gq)
                else:
                    c = None
                    gt = gt + a * dq[:, i : i + 1]
                cols_a.append(a)
                cols_c.append(c)
            p_now = quat_apply(gq, p) + gt
            q_now = quat_mul(gq, q)
            jp = torch.stack([cross(a, p_now - c) if c is not None else a for a, c in zip(cols_a, cols_c)], 2)
            jr = torch.stack([a if c is not None else torch.zeros_like(a) for a, c in zip(cols_a, cols_c)], 2)
            J = torch.cat([jp, jr], dim=1)  # (N, 6, k)
            e = torch.cat([p_t - p_now, rotvec_from_quat(quat_mul(q_t, quat_conj(q_now)))], dim=1)
            A = J @ J.transpose(1, 2) + self._damping2 * eye  # symmetric positive definite
            L, _ = torch.linalg.cholesky_ex(A)
            dq = dq + (J.transpose(1, 2) @ torch.cholesky_solve(e[:, :, None], L))[:, :, 0]
        out = torch.empty_like(dq)
        out[:, order] = dq
        return out
