"""Index and packing logic shared by the CPU and GPU PhysX paths.

Both paths hold the simulation state in PhysX's GPU buffer layout:

* ``link data`` ``(R, L, 13)``: per articulation row, per link column, the
  link pose (pos 3, quat wxyz 4, relative to the env's origin) and the link's
  centre-of-mass linear velocity (3) and angular velocity (3), world frame;
* ``art qpos`` / ``art qvel`` ``(R, D)``: PhysX joint coordinates per row.

On the GPU these are PhysX's own CUDA buffers (``cuda_articulation_link_data``,
``cuda_articulation_qpos``, ...), rows given by ``articulation.gpu_index`` and
columns by ``link.index``; on the CPU the backend fills numpy buffers of the
same shape from per-scene reads, rows ``env * A + a``. :class:`Layout` knows
which row and column holds which env's body and joint, converts buffers into
the contract's quantities (MuJoCo's qpos/qvel layout, frame-origin velocities,
site frames, Jacobians, sensors) and contract inputs into buffer rows. All of
it is torch on the backend's device: one code path for both.

Imports neither ``sapien`` nor ``mujoco``.
"""

from __future__ import annotations

import numpy as np
import torch

from simbackend.math import cross, quat_apply, quat_apply_inverse, quat_mul
from simbackend.model_info import JOINT_FREE, JOINT_HINGE, JOINT_SLIDE

from .plan import Plan


def to_tensor(a, device, dtype=torch.float64) -> torch.Tensor:
    """A model table (numpy) as a tensor on ``device`` (float64 unless told)."""
    return torch.as_tensor(np.asarray(a), dtype=dtype, device=device)


class Layout:
    """Where each env's bodies and joints live in the PhysX buffers.

    Args:
        plan: the build plan.
        rows: ``(N, A)`` buffer row of env n's articulation a.
        link_col: ``(A, Lmax)`` buffer column of plan link l of articulation a (-1 past the end).
        dof_col: ``(A, Lmax)`` PhysX dof index (within its articulation) of plan link l's
            incoming joint, -1 for fixed joints and roots.
        origins: ``(N, 3)`` env origins in the physics scene (sub-scene offsets; zeros on CPU).
        site_local: ``(nsite, 7)`` each site's pose (pos + wxyz) in its body's frame.
    """

    def __init__(self, plan: Plan, rows: np.ndarray, link_col: np.ndarray, dof_col: np.ndarray,
                 origins: np.ndarray, site_local: np.ndarray, device: torch.device):
        info = plan.info
        self.plan, self.info, self.device = plan, info, device
        self.num_envs, self.num_arts = rows.shape
        self.rows = np.asarray(rows, np.int64)
        self.link_col = np.asarray(link_col, np.int64)
        self.dof_col = np.asarray(dof_col, np.int64)
        nbody, njnt = info.nbody, len(info.joint_names)
        ba, bl = plan.body_link[:, 0], plan.body_link[:, 1]
        world = ba < 0
        # (N, nbody) row and (nbody,) column of every body's link; the world body points at row/col 0
        self.body_row = np.where(world[None], 0, self.rows[:, np.maximum(ba, 0)])
        self.body_col = np.where(world, 0, self.link_col[np.maximum(ba, 0), np.maximum(bl, 0)])
        self.world_host = world
        self.body_com = to_tensor(np.stack([_body_com(plan, b) for b in range(nbody)]), device)   # (nbody, 3)
        self.origins = to_tensor(origins, device)

        jt = info.joint_type
        self.scalar_joints = np.flatnonzero((jt == JOINT_HINGE) | (jt == JOINT_SLIDE))
        ja, jl = plan.joint_link[:, 0], plan.joint_link[:, 1]
        sj = self.scalar_joints
        self.joint_row = self.rows[:, ja[sj]] if sj.size else np.zeros((self.num_envs, 0), np.int64)  # (N, nsj)
        self.joint_dof = self.dof_col[ja[sj], jl[sj]] if sj.size else np.zeros(0, np.int64)          # (nsj,)
        self.joint_qpos = info.joint_qposadr[sj]
        self.joint_qvel = info.joint_dofadr[sj]
        self.joint_offset = to_tensor(plan.joint_offset[sj], device)
        self.free_joints = np.flatnonzero(jt == JOINT_FREE)
        self.free_body = info.joint_body[self.free_joints]
        self.free_art = ja[self.free_joints]
        self.floating = np.array([not a.fixed_root for a in plan.articulations], bool)
        self.fixed_root_pose = to_tensor(np.stack([a.root_pose for a in plan.articulations]), device)  # (A, 7)

        # sites: body and local pose
        self.site_body = np.asarray(info.site_body, np.int64)
        self.site_local = to_tensor(np.asarray(site_local).reshape(-1, 7), device)   # (nsite, 7) pos + wxyz on the body

        # joint frames for Jacobians: (njnt) link and local joint frame; dof-level tables
        self._jac_tables(plan)
        self._ctrl_tables = None  # ctrl -> drive tables on a GPU ctrl's device, made on first use
        self._ctrl_numpy = None   # the same tables in numpy, for CPU ctrl

    # ------------------------------------------------------------------
    # buffers -> contract quantities
    # ------------------------------------------------------------------
    def gather(self, data: torch.Tensor, body_ids: np.ndarray) -> torch.Tensor:
        """``(N, B, 13)`` link data of bodies ``body_ids`` (world: identity pose, zero velocity), env-relative."""
        rows = torch.as_tensor(self.body_row[:, body_ids], device=data.device)
        cols = torch.as_tensor(self.body_col[body_ids], device=data.device)
        out = data[rows, cols[None].expand_as(rows)].to(torch.float64)
        out[..., :3] -= self.origins[:, None]
        world = np.flatnonzero(self.world_host[body_ids])  # decided on the host: no device read
        if world.size:
            ident = torch.zeros(13, dtype=out.dtype, device=out.device)
            ident[3] = 1.0
            out[:, torch.as_tensor(world, device=out.device)] = ident
        return out

    def origin_velocity(self, link: torch.Tensor, body_ids: np.ndarray) -> torch.Tensor:
        """``(N, B, 3)`` velocity of body frame origins from COM velocities: ``v_com - w x (R c)``."""
        com_w = quat_apply(link[..., 3:7], self.body_com[torch.as_tensor(body_ids, device=self.device)][None].expand(
            link.shape[0], -1, -1))
        return link[..., 7:10] - cross(link[..., 10:13], com_w)

    def qpos(self, art_qpos: torch.Tensor, link: torch.Tensor) -> torch.Tensor:
        """``(N, nq)`` MuJoCo qpos from PhysX joint coordinates and the free roots' link data."""
        n = self.num_envs
        out = torch.zeros((n, self.info.nq), dtype=torch.float64, device=self.device)
        if self.scalar_joints.size:
            vals = art_qpos[torch.as_tensor(self.joint_row, device=art_qpos.device),
                            torch.as_tensor(self.joint_dof, device=art_qpos.device)[None]].to(torch.float64)
            out[:, torch.as_tensor(self.joint_qpos, device=self.device)] = vals + self.joint_offset
        if self.free_joints.size:
            adr = self.info.joint_qposadr[self.free_joints]
            cols = torch.as_tensor(adr[:, None] + np.arange(7), device=self.device)
            out[:, cols] = link[:, :, :7]
        return out

    def qvel(self, art_qvel: torch.Tensor, link: torch.Tensor) -> torch.Tensor:
        """``(N, nv)`` MuJoCo qvel; ``link``: free roots' link data ``(N, F, 13)``."""
        out = torch.zeros((self.num_envs, self.info.nv), dtype=torch.float64, device=self.device)
        if self.scalar_joints.size:
            vals = art_qvel[torch.as_tensor(self.joint_row, device=art_qvel.device),
                            torch.as_tensor(self.joint_dof, device=art_qvel.device)[None]].to(torch.float64)
            out[:, torch.as_tensor(self.joint_qvel, device=self.device)] = vals
        if self.free_joints.size:
            adr = self.info.joint_dofadr[self.free_joints]
            v = self.origin_velocity(link, self.free_body)
            w_local = quat_apply_inverse(link[..., 3:7], link[..., 10:13])
            out[:, torch.as_tensor(adr[:, None] + np.arange(3), device=self.device)] = v
            out[:, torch.as_tensor(adr[:, None] + 3 + np.arange(3), device=self.device)] = w_local
        return out

    def state_from_pack(self, states: np.ndarray, starts: np.ndarray, art_dofs: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray]:
        """The contract's ``(qpos (N, nq), qvel (N, nv))``, float64 numpy, from serialised CPU states.

        ``states``: ``(N, pack_size)`` rows of ``PhysxCpuSystem.pack()`` (per articulation from
        ``starts``: root quat wxyz, root pos, root centre-of-mass linear and angular velocity,
        qpos, qvel, targets). Same values as :meth:`qpos`/:meth:`qvel` on the read buffers.
        """
        s = np.asarray(states, np.float64)
        n, info = s.shape[0], self.info
        qpos, qvel = np.zeros((n, info.nq)), np.zeros((n, info.nv))
        if self.scalar_joints.size:
            ja = self.plan.joint_link[self.scalar_joints, 0]
            col = starts[ja] + 13 + self.joint_dof
            qpos[:, self.joint_qpos] = s[:, col] + self.plan.joint_offset[self.scalar_joints]
            qvel[:, self.joint_qvel] = s[:, col + art_dofs[ja]]
        com = self.body_com.cpu().numpy()
        for j, b, a in zip(self.free_joints, self.free_body, self.free_art):
            st, qa, dv = int(starts[a]), int(info.joint_qposadr[j]), int(info.joint_dofadr[j])
            quat, w = s[:, st:st + 4], s[:, st + 10:st + 13]
            qpos[:, qa:qa + 3], qpos[:, qa + 3:qa + 7] = s[:, st + 4:st + 7], quat
            qvel[:, dv:dv + 3] = s[:, st + 7:st + 10] - cross(w, quat_apply(quat, np.broadcast_to(com[b], w.shape)))
            qvel[:, dv + 3:dv + 6] = quat_apply_inverse(quat, w)
        return qpos, qvel

    # ------------------------------------------------------------------
    # contract inputs -> buffer rows
    # ------------------------------------------------------------------
    def pack_state(self, env_ids: np.ndarray, qpos: torch.Tensor, qvel: torch.Tensor, max_dof: int) -> dict:
        """Buffer rows for envs ``env_ids`` from MuJoCo ``qpos (n, nq)``/``qvel (n, nv)`` (float64 tensors).

        Returns ``rows (n*A,)`` (host int64), and as float64 tensors on the
        inputs' device: ``qpos``/``qvel`` ``(n*A, max_dof)`` PhysX joint
        coordinates, ``root_pose (n*A, 7)`` (scene frame: env origin added) and
        ``root_vel (n*A, 6)`` (centre-of-mass linear, angular; world).
        """
        n, A = env_ids.size, self.num_arts
        dev, f64 = qpos.device, torch.float64
        qpos, qvel = qpos.to(f64), qvel.to(f64)
        aq = torch.zeros((n, A, max_dof), dtype=f64, device=dev)
        av = torch.zeros((n, A, max_dof), dtype=f64, device=dev)
        if self.scalar_joints.size:
            ja = torch.as_tensor(self.plan.joint_link[self.scalar_joints, 0], device=dev)
            jd = torch.as_tensor(self.joint_dof, device=dev)
            aq[:, ja, jd] = qpos[:, torch.as_tensor(self.joint_qpos, device=dev)] - self.joint_offset.to(dev)
            av[:, ja, jd] = qvel[:, torch.as_tensor(self.joint_qvel, device=dev)]
        root_pose = self.fixed_root_pose.to(dev)[None].expand(n, A, 7).clone()
        root_vel = torch.zeros((n, A, 6), dtype=f64, device=dev)
        for j, b, a in zip(self.free_joints, self.free_body, self.free_art):
            qa, dv = int(self.info.joint_qposadr[j]), int(self.info.joint_dofadr[j])
            p, q = qpos[:, qa:qa + 3], qpos[:, qa + 3:qa + 7]
            v, w_local = qvel[:, dv:dv + 3], qvel[:, dv + 3:dv + 6]
            w = quat_apply(q, w_local)
            com = quat_apply(q, self.body_com[b].to(dev).expand(n, 3))
            root_pose[:, a] = torch.cat([p, q], 1)
            root_vel[:, a] = torch.cat([v + cross(w, com), w], 1)
        root_pose[..., :3] += self.origins.to(dev)[torch.as_tensor(env_ids, device=dev)][:, None]
        return {"rows": self.rows[env_ids].reshape(-1), "qpos": aq.reshape(n * A, -1), "qvel": av.reshape(n * A, -1),
                "root_pose": root_pose.reshape(n * A, 7), "root_vel": root_vel.reshape(n * A, 6)}

    def pack_ctrl(self, ctrl: torch.Tensor) -> dict:
        """Per-joint drive targets and joint forces ``(N, njnt)`` from validated ``ctrl (N, nu)``.

        ``target``/``vel_target`` in PhysX joint coordinates for drive joints, ``force``
        the motor joint forces, float64: numpy arrays for a CPU ``ctrl`` (tiny matrices,
        where numpy is several times faster than torch), tensors on ``ctrl``'s device otherwise.
        """
        if ctrl.device.type == "cpu":
            u, c = ctrl.numpy().astype(np.float64, copy=False), self._ctrl_arrays()
            clip, where = np.clip, np.where
        else:
            c = self._ctrl_tables
            if c is None or c["lo"].device != ctrl.device:
                c = self._ctrl_tables = {k: to_tensor(v, ctrl.device) for k, v in self._ctrl_arrays().items()}
            u = ctrl.to(torch.float64)
            clip, where = torch.clamp, torch.where
        u = clip(u, c["lo"], c["hi"])
        k, d = c["stiffness"], c["damping"]
        target = where(k > 0, (c["pos_bias"] + u @ c["pos_gain"]) / where(k > 0, k, 1.0), 0.0)
        vel_target = where(d > 0, (u @ c["vel_gain"]) / where(d > 0, d, 1.0), 0.0)
        motor = clip(u * c["motor_gain"], c["force_lo"], c["force_hi"])
        return {"target": target, "vel_target": vel_target, "force": motor @ c["motor_gear"]}

    def _ctrl_arrays(self) -> dict:
        """The plan's ctrl -> drive tables (numpy), built once."""
        if getattr(self, "_ctrl_numpy", None) is not None:
            return self._ctrl_numpy
        p = self.plan
        self._ctrl_numpy = {"lo": p.ctrl_range[:, 0], "hi": p.ctrl_range[:, 1], "stiffness": p.stiffness, "damping": p.damping,
                "pos_bias": p.pos_bias, "pos_gain": p.pos_gain, "vel_gain": p.vel_gain, "motor_gain": p.motor_gain,
                "force_lo": p.motor_force_range[:, 0], "force_hi": p.motor_force_range[:, 1],
                "motor_gear": p.motor_gear}
        return self._ctrl_numpy

    # ------------------------------------------------------------------
    # sites, Jacobians
    # ------------------------------------------------------------------
    def frames(self, link: torch.Tensor, local: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """World pos/quat ``(N, K, 3/4)`` of frames fixed at ``local (K, 7)`` on links ``link (N, K, 13)``."""
        loc = local[None].expand(link.shape[0], -1, -1)
        pos = link[..., :3] + quat_apply(link[..., 3:7], loc[..., :3])
        return pos, quat_mul(link[..., 3:7], loc[..., 3:])

    def _jac_tables(self, plan: Plan) -> None:
        info = self.info
        nv = info.nv
        # per qvel column: the link (articulation, link) whose frame carries its axis, the local axis and
        # anchor in that link, and whether it rotates; free joints use the root link's frame
        art = np.zeros(nv, np.int64)
        lnk = np.zeros(nv, np.int64)
        axis = np.zeros((nv, 3))
        anchor = np.zeros((nv, 3))
        rot = np.zeros(nv, bool)
        for j in range(len(info.joint_names)):
            a, l = plan.joint_link[j]
            adr = info.joint_dofadr[j]
            lk = plan.articulations[a].links[l]
            if info.joint_type[j] == JOINT_FREE:
                for k in range(6):
                    art[adr + k], lnk[adr + k] = a, l
                    axis[adr + k, k % 3] = 1.0
                    rot[adr + k] = k >= 3
            else:
                art[adr], lnk[adr] = a, l
                axis[adr] = quat_apply(lk.pose_in_child[3:], np.array([1.0, 0.0, 0.0]))
                anchor[adr] = lk.pose_in_child[:3]
                rot[adr] = info.joint_type[j] == JOINT_HINGE
        self.dof_row = self.rows[:, art]                                   # (N, nv)
        self.dof_col = self.link_col[art, lnk]                             # (nv,)
        self.dof_axis = to_tensor(axis, self.device)
        self.dof_anchor = to_tensor(anchor, self.device)
        self.dof_rot = to_tensor(rot, self.device, torch.bool)
        # free-joint translation columns have world axes (not rotated by the root link)
        world_axis = np.zeros(nv, bool)
        for j in self.free_joints:
            world_axis[info.joint_dofadr[j]:info.joint_dofadr[j] + 3] = True
        self.dof_world_axis = to_tensor(world_axis, self.device, torch.bool)
        # (nsite, nv): which qvel columns move each site (ancestors of its body)
        dof_body = np.repeat(info.joint_body, [6 if t == JOINT_FREE else 3 if t == 1 else 1 for t in info.joint_type])
        anc = np.zeros((info.nbody, nv), bool)
        for b in range(1, info.nbody):
            x = b
            while x > 0:
                anc[b] |= dof_body == x
                x = info.body_parent[x]
        self.site_dof_mask = to_tensor(anc[self.site_body], self.device, torch.bool) if self.site_body.size else None
        self.body_dof_mask = to_tensor(anc, self.device)

    def dof_frames(self, data: torch.Tensor, cols: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """World axis and anchor ``(N, k, 3)`` of qvel columns ``cols`` (env-relative)."""
        dev = data.device
        jl = data[torch.as_tensor(self.dof_row[:, cols], device=dev),
                  torch.as_tensor(self.dof_col[cols], device=dev)[None]].to(torch.float64)   # (N, k, 13)
        q = jl[..., 3:7]
        c = torch.as_tensor(cols, device=self.device)
        axis_local = self.dof_axis[c][None].expand(q.shape[0], -1, -1)
        axis = torch.where(self.dof_world_axis[c][None, :, None], axis_local, quat_apply(q, axis_local))
        anchor = jl[..., :3] - self.origins[:, None] + quat_apply(q, self.dof_anchor[c][None].expand_as(axis_local))
        return axis, anchor

    def point_jacobian(self, axis: torch.Tensor, anchor: torch.Tensor, cols: np.ndarray,
                       points: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(jacp, jacr)`` ``(N, P, k, 3)`` of world points ``(N, P, 3)`` for every column (unmasked)."""
        rot = self.dof_rot[torch.as_tensor(cols, device=self.device)][None, None, :, None]
        ax = axis[:, None].expand(-1, points.shape[1], -1, -1)
        jacp = torch.where(rot, cross(ax, points[:, :, None] - anchor[:, None]), ax)
        jacr = torch.where(rot, ax, torch.zeros_like(ax))
        return jacp, jacr

    def site_jacobian(self, data: torch.Tensor, site_id: int, cols: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """``(jacp, jacr)`` ``(N, 3, k)`` of site ``site_id`` for qvel columns ``cols``."""
        link = self.gather(data, np.array([self.site_body[site_id]]))
        p_site, _ = self.frames(link, self.site_local[site_id:site_id + 1])
        axis, anchor = self.dof_frames(data, cols)
        jacp, jacr = self.point_jacobian(axis, anchor, cols, p_site)
        mask = self.site_dof_mask[site_id][torch.as_tensor(cols, device=self.device)][None, :, None]
        return (jacp[:, 0] * mask).transpose(1, 2), (jacr[:, 0] * mask).transpose(1, 2)

    def body_velocities(self, data: torch.Tensor, qvel: torch.Tensor, body_ids: np.ndarray
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        """Frame-origin linear and angular velocities ``(N, B, 3)`` of bodies, ``J(body) @ qvel``.

        Derived from the joint velocities and the link frames rather than read
        from PhysX's per-link velocities, so that body velocities always agree
        with ``qvel`` (as MuJoCo's do), after a step as after ``set_state``.
        """
        n = self.num_envs
        if self.info.nv == 0:
            z = torch.zeros((n, body_ids.size, 3), dtype=torch.float64, device=self.device)
            return z, z.clone()
        cols = np.arange(self.info.nv)
        points = self.gather(data, body_ids)[..., :3]
        axis, anchor = self.dof_frames(data, cols)
        jacp, jacr = self.point_jacobian(axis, anchor, cols, points)          # (N, B, nv, 3)
        w = self.body_dof_mask[torch.as_tensor(body_ids, device=self.device)][None] * qvel[:, None]   # (N, B, nv)
        return (jacp * w[..., None]).sum(2), (jacr * w[..., None]).sum(2)


def _body_com(plan: Plan, body: int) -> np.ndarray:
    """Centre of mass of ``body`` in its frame (zeros for the world)."""
    a, l = plan.body_link[body]
    if a < 0:
        return np.zeros(3)
    return np.asarray(plan.articulations[a].links[l].com[:3], np.float64)

