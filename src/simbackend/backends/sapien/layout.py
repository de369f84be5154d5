"""Index and packing logic shared by the CPU and GPU PhysX paths.

Both paths hold the simulation state in PhysX's GPU buffer layout:

* ``link data`` ``(R, L, 13)``: per articulation row, per link column, the
  link pose (pos 3, quat wxyz 4, relative to the env's origin) and the link's
  centre-of-mass linear velocity (3) and angular velocity (3), world frame;
* ``art qpos`` / ``art qvel`` ``(R, D)``: PhysX joint coordinates per row.

On the GPU these are PhysX's own CUDA buffers (``cuda_articulation_link_data``,
``cuda_articulation_qpos``, ...), rows given by ``articulation.gpu_index`` and
columns by ``link.index``; on the CPU the backend fills numpy buffers of the
same shape from per-scene reads, rows ``env * A + a``. :class:`Columns` says
which column of a row holds which link and dof (read once from the built
articulations, the same for both paths); :class:`Layout` adds the rows and
converts buffers into the contract's quantities (MuJoCo's qpos/qvel layout,
frame-origin velocities, site frames, Jacobians, sensors) and contract inputs
into buffer rows. All of it is torch on the backend's device: one code path
for both, and on a GPU no host synchronisation (index tables live on the
device; per-call ids are copied once and cached).

Imports neither ``sapien`` nor ``mujoco``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from simbackend.math import cross, quat_apply, quat_apply_inverse, quat_mul
from simbackend.model_info import JOINT_BALL, JOINT_FREE, JOINT_HINGE, JOINT_SLIDE

from .plan import Plan

#: per-call id arrays kept on a CUDA device before the cache is emptied
_ID_CACHE_SIZE = 256


def to_tensor(a: Any, device: Any, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """A model table (numpy, any int or real dtype) as a new tensor on ``device`` (float64 unless told)."""
    return torch.as_tensor(np.array(a), dtype=dtype, device=device)


class Columns:
    """Where PhysX puts one model's links and dofs within an articulation row (the same in every env).

    Attributes:
        link_col: ``(A, Lmax)`` buffer column (PhysX link index) of plan link l
            of articulation a; -1 past the articulation's last link.
        dof_col: ``(A, Lmax)`` PhysX dof index (within its articulation) of plan
            link l's incoming joint; -1 for fixed joints and roots.
        art_dofs: ``(A,)`` dofs of each articulation.
        joint_dof: ``(njnt,)`` PhysX dof index of each hinge/slide joint within
            its articulation; -1 for free joints.
        max_links, max_dof: ``Lmax`` and ``D``, the buffers' column counts (>= 1).
        pack_starts: ``(A,)`` first value of each articulation in a serialised CPU
            state (``PhysxCpuSystem.pack()``: per articulation root pose 7, root
            centre-of-mass velocity 6, qpos d, qvel d, drive targets 2d).
        pack_size: values in one env's serialised state.
    """

    def __init__(self, plan: Plan, link_col: np.ndarray, dof_col: np.ndarray, art_dofs: np.ndarray):
        self.link_col = np.asarray(link_col, np.int64)
        self.dof_col = np.asarray(dof_col, np.int64)
        self.art_dofs = np.asarray(art_dofs, np.int64)
        self.max_links = max(self.link_col.shape[1] if self.link_col.ndim == 2 else 0, 1)
        self.max_dof = max(int(self.art_dofs.max(initial=0)), 1)
        self.has_dofs = bool(self.art_dofs.any())
        self.joint_dof = np.full(len(plan.info.joint_names), -1, np.int64)
        for j, (a, l) in enumerate(plan.joint_link):
            if a >= 0:
                self.joint_dof[j] = self.dof_col[a, l]
        sizes = 13 + 4 * self.art_dofs
        self.pack_size = int(sizes.sum())
        self.pack_starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)

    @classmethod
    def read(cls, plan: Plan, arts: Sequence[Any], comps: Sequence[Sequence[Any]]) -> Columns:
        """From one env's built articulations: ``arts[a]`` (SAPIEN articulations) and
        ``comps[a][l]`` (their link components in plan order; PhysX renumbers links)."""
        A = len(plan.articulations)
        lmax = max((len(a.links) for a in plan.articulations), default=0)
        link_col = np.full((A, max(lmax, 1)), -1, np.int64)
        dof_col = np.full((A, max(lmax, 1)), -1, np.int64)
        art_dofs = np.zeros(A, np.int64)
        for a, (art, links) in enumerate(zip(arts, comps)):
            active = [j.name for j in art.active_joints]
            art_dofs[a] = len(active)
            for l, comp in enumerate(links):
                link_col[a, l] = comp.index
                if plan.articulations[a].links[l].joint >= 0 and comp.joint.name in active:
                    dof_col[a, l] = active.index(comp.joint.name)
        return cls(plan, link_col, dof_col, art_dofs)


class Layout:
    """Where each env's bodies and joints live in the PhysX buffers, and the conversions.

    Args:
        plan: the build plan.
        rows: ``(N, A)`` buffer row of env n's articulation a.
        cols: the columns of links and dofs within a row.
        origins: ``(N, 3)`` env origins in the physics scene (sub-scene offsets; zeros on CPU).
        site_local: ``(nsite, 7)`` each site's pose (pos + wxyz) in its body's frame.
        device: where the buffers and the tables live.
    """

    def __init__(
        self,
        plan: Plan,
        rows: np.ndarray,
        cols: Columns,
        origins: np.ndarray,
        site_local: np.ndarray,
        device: torch.device,
    ):
        info = plan.info
        self.plan, self.info, self.cols, self.device = plan, info, cols, torch.device(device)
        self.num_envs, self.num_arts = rows.shape
        self.rows = np.asarray(rows, np.int64)
        self._id_cache: dict[bytes, torch.Tensor] = {}
        idx = self._table
        nbody = info.nbody
        ba, bl = plan.body_link[:, 0], plan.body_link[:, 1]
        world = ba < 0
        # (N, nbody) row and (nbody,) column of every body's link; the world body points at row/col 0
        # (a model without articulations has only the world body: padded tables, never used to index)
        rows_p = self.rows if self.num_arts else np.zeros((self.num_envs, 1), np.int64)
        link_col_p = cols.link_col if self.num_arts else np.zeros((1, 1), np.int64)
        self.body_row = idx(np.where(world[None], 0, rows_p[:, np.maximum(ba, 0)]))
        self.body_col = idx(np.where(world, 0, link_col_p[np.maximum(ba, 0), np.maximum(bl, 0)]))
        self.world_host = world
        self.body_com = to_tensor(np.stack([_body_com(plan, b) for b in range(nbody)]), device)  # (nbody, 3)
        self.origins = to_tensor(origins, device)  # (N, 3)
        self._offset = bool(np.any(origins))  # positions are read relative to non-zero origins
        self.rows_t = idx(self.rows)  # (N, A)

        # hinge and slide joints: (N, nsj) row, (nsj,) dof index, qpos/qvel columns, articulation
        jt = info.joint_type
        self.scalar_joints = np.flatnonzero((jt == JOINT_HINGE) | (jt == JOINT_SLIDE))
        sj = self.scalar_joints
        ja = plan.joint_link[sj, 0]
        self.joint_row = idx(self.rows[:, ja])
        self.joint_dof_host = cols.joint_dof[sj]
        self.joint_dof = idx(self.joint_dof_host)
        self.joint_art = idx(ja)
        self.joint_qpos = idx(info.joint_qposadr[sj])
        self.joint_qvel = idx(info.joint_dofadr[sj])
        self.joint_offset = to_tensor(plan.joint_offset[sj], device)
        # free joints (each the root of its articulation)
        self.free_joints = np.flatnonzero(jt == JOINT_FREE)
        self.free_body = info.joint_body[self.free_joints]
        self.free_art = plan.joint_link[self.free_joints, 0]
        self.free_qpos = idx(info.joint_qposadr[self.free_joints][:, None] + np.arange(7))  # (F, 7)
        self.free_qvel = idx(info.joint_dofadr[self.free_joints][:, None] + np.arange(6))  # (F, 6)
        self.fixed_root_pose = to_tensor(np.array([a.root_pose for a in plan.articulations]).reshape(-1, 7), device)

        # sites: body and local pose
        self.site_body = np.asarray(info.site_body, np.int64)
        self.site_local = to_tensor(np.asarray(site_local).reshape(-1, 7), device)  # (nsite, 7) pos + wxyz on the body

        self._jac_tables(plan)
        self._ctrl_tables = None  # ctrl -> drive tables on a GPU ctrl's device, made on first use
        self._ctrl_numpy = None  # the same tables in numpy, for CPU ctrl

    # ------------------------------------------------------------------
    # host ids -> device indices
    # ------------------------------------------------------------------
    def _table(self, a: Any) -> torch.Tensor:
        """A static index table as an int64 tensor on the device (copied once, at construction)."""
        return to_tensor(a, self.device, torch.long)

    def ids(self, a: np.ndarray) -> torch.Tensor:
        """Host ids ``a`` (int array) as an int64 tensor on the device.

        On the CPU a plain conversion. On a GPU, copying pageable host memory to
        the device waits for the stream, so each distinct id array is copied once
        and cached (callers pass the same few arrays call after call).
        """
        a = np.ascontiguousarray(a, np.int64)
        if self.device.type == "cpu":
            return torch.from_numpy(a if a.flags.writeable else a.copy())
        key = a.tobytes() + bytes(str(a.shape), "ascii")
        t = self._id_cache.get(key)
        if t is None:
            if len(self._id_cache) >= _ID_CACHE_SIZE:
                self._id_cache.clear()
            t = self._id_cache[key] = torch.as_tensor(a, device=self.device)
        return t

    # ------------------------------------------------------------------
    # buffers -> contract quantities
    # ------------------------------------------------------------------
    def gather(self, data: torch.Tensor, body_ids: np.ndarray) -> torch.Tensor:
        """``(N, B, 13)`` link data of bodies ``body_ids`` (world: identity pose, zero velocity), env-relative.

        ``data``: the ``(R, L, 13)`` link buffer.
        """
        b = self.ids(body_ids)
        if not self.num_arts:  # no link at all: only the world body
            out = torch.zeros((self.num_envs, b.numel(), 13), dtype=torch.float64, device=self.device)
            out[..., 3] = 1.0
            return out
        rows = self.body_row[:, b]  # (N, B)
        out = data[rows, self.body_col[b][None].expand_as(rows)].to(torch.float64)
        if self._offset:
            out[..., :3] -= self.origins[:, None]
        world = np.flatnonzero(self.world_host[body_ids])  # decided on the host: no device read
        if world.size:
            ident = torch.zeros(13, dtype=out.dtype, device=out.device)
            ident[3] = 1.0
            out[:, self.ids(world)] = ident
        return out

    def origin_velocity(self, link: torch.Tensor, body_ids: np.ndarray) -> torch.Tensor:
        """``(N, B, 3)`` velocity of body frame origins from ``link (N, B, 13)``'s COM velocities: ``v_com - w x (R c)``."""
        com = self.body_com[self.ids(body_ids)][None].expand(link.shape[0], -1, -1)
        return link[..., 7:10] - cross(link[..., 10:13], quat_apply(link[..., 3:7], com))

    def qpos(self, art_qpos: torch.Tensor, link: torch.Tensor) -> torch.Tensor:
        """``(N, nq)`` MuJoCo qpos from ``art_qpos (R, D)`` and the free roots' link data ``(N, F, 13)``."""
        out = torch.zeros((self.num_envs, self.info.nq), dtype=torch.float64, device=self.device)
        if self.scalar_joints.size:
            vals = art_qpos[self.joint_row, self.joint_dof[None]].to(torch.float64)
            out[:, self.joint_qpos] = vals + self.joint_offset
        if self.free_joints.size:
            out[:, self.free_qpos] = link[:, :, :7]
        return out

    def qvel(self, art_qvel: torch.Tensor, link: torch.Tensor) -> torch.Tensor:
        """``(N, nv)`` MuJoCo qvel from ``art_qvel (R, D)`` and the free roots' link data ``(N, F, 13)``."""
        out = torch.zeros((self.num_envs, self.info.nv), dtype=torch.float64, device=self.device)
        if self.scalar_joints.size:
            out[:, self.joint_qvel] = art_qvel[self.joint_row, self.joint_dof[None]].to(torch.float64)
        if self.free_joints.size:
            v = self.origin_velocity(link, self.free_body)
            w_local = quat_apply_inverse(link[..., 3:7], link[..., 10:13])
            out[:, self.free_qvel] = torch.cat([v, w_local], -1)
        return out

    def state_from_pack(self, states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The contract's ``(qpos (N, nq), qvel (N, nv))``, float64 numpy, from serialised CPU states.

        ``states``: ``(N, pack_size)`` rows of ``PhysxCpuSystem.pack()`` (per articulation from
        ``cols.pack_starts``: root quat wxyz, root pos, root centre-of-mass linear and angular
        velocity, qpos, qvel, targets). Same values as :meth:`qpos`/:meth:`qvel` on the read buffers.
        """
        s = np.asarray(states, np.float64)
        n, info, starts = s.shape[0], self.info, self.cols.pack_starts
        qpos, qvel = np.zeros((n, info.nq)), np.zeros((n, info.nv))
        sj = self.scalar_joints
        if sj.size:
            ja = self.plan.joint_link[sj, 0]
            col = starts[ja] + 13 + self.joint_dof_host
            qpos[:, info.joint_qposadr[sj]] = s[:, col] + self.plan.joint_offset[sj]
            qvel[:, info.joint_dofadr[sj]] = s[:, col + self.cols.art_dofs[ja]]
        com = self.body_com.cpu().numpy()
        for j, b, a in zip(self.free_joints, self.free_body, self.free_art):
            st, qa, dv = int(starts[a]), int(info.joint_qposadr[j]), int(info.joint_dofadr[j])
            quat, w = s[:, st : st + 4], s[:, st + 10 : st + 13]
            qpos[:, qa : qa + 3], qpos[:, qa + 3 : qa + 7] = s[:, st + 4 : st + 7], quat
            qvel[:, dv : dv + 3] = s[:, st + 7 : st + 10]
            if com[b].any():  # the frame origin's velocity: v_com - w x (R c)
                qvel[:, dv : dv + 3] -= cross(w, quat_apply(quat, np.broadcast_to(com[b], w.shape)))
            qvel[:, dv + 3 : dv + 6] = quat_apply_inverse(quat, w)
        return qpos, qvel

    # ------------------------------------------------------------------
    # contract inputs -> buffer rows
    # ------------------------------------------------------------------
    def pack_state(self, env_ids: np.ndarray, qpos: torch.Tensor, qvel: torch.Tensor) -> dict:
        """Buffer rows for sorted envs ``env_ids`` (host) from MuJoCo ``qpos (n, nq)``/``qvel (n, nv)`` tensors.

        Returns, as tensors on the layout's device: ``rows (n*A,)`` int64, the
        buffer rows written; and float64 ``qpos``/``qvel`` ``(n*A, D)`` PhysX
        joint coordinates, ``root_pose (n*A, 7)`` (scene frame: env origin
        added) and ``root_vel (n*A, 6)`` (centre-of-mass linear, angular; world).
        """
        n, A, D = env_ids.size, self.num_arts, self.cols.max_dof
        dev, f64 = self.device, torch.float64
        qpos, qvel = qpos.to(device=dev, dtype=f64), qvel.to(device=dev, dtype=f64)
        envs = self.ids(env_ids)
        aq = torch.zeros((n, A, D), dtype=f64, device=dev)
        av = torch.zeros((n, A, D), dtype=f64, device=dev)
        if self.scalar_joints.size:
            aq[:, self.joint_art, self.joint_dof] = qpos[:, self.joint_qpos] - self.joint_offset
            av[:, self.joint_art, self.joint_dof] = qvel[:, self.joint_qvel]
        root_pose = self.fixed_root_pose[None].expand(n, A, 7).clone()
        root_vel = torch.zeros((n, A, 6), dtype=f64, device=dev)
        for f, (b, a) in enumerate(zip(self.free_body, self.free_art)):
            pq = qpos[:, self.free_qpos[f]]
            vw = qvel[:, self.free_qvel[f]]
            q = pq[:, 3:]
            w = quat_apply(q, vw[:, 3:])
            com = quat_apply(q, self.body_com[int(b)].expand(n, 3))
            root_pose[:, a] = pq
            root_vel[:, a] = torch.cat([vw[:, :3] + cross(w, com), w], 1)
        root_pose[..., :3] += self.origins[envs][:, None]
        return {
            "rows": self.rows_t[envs].reshape(-1),
            "qpos": aq.reshape(n * A, D),
            "qvel": av.reshape(n * A, D),
            "root_pose": root_pose.reshape(n * A, 7),
            "root_vel": root_vel.reshape(n * A, 6),
        }

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
        k, d = c["stiffness"], c["drive_damping"]

        def gain(table: Any) -> Any:  # (nu, njnt) model tables, or (N, nu, njnt) per env
            return u @ table if table.ndim == 2 else (u[:, None, :] @ table)[:, 0]

        target = where(k > 0, (c["pos_bias"] + gain(c["pos_gain"])) / where(k > 0, k, 1.0), 0.0)
        vel_target = where(d > 0, gain(c["vel_gain"]) / where(d > 0, d, 1.0), 0.0)
        motor = clip(u * c["motor_gain"], c["force_lo"], c["force_hi"])
        return {"target": target, "vel_target": vel_target, "force": motor @ c["motor_gear"]}

    def set_env_drives(self, drives: dict) -> None:
        """Per-env drive tables (domain randomization): ``stiffness``/``damping``/``pos_bias``
        ``(N, njnt)``, ``pos_gain``/``vel_gain`` ``(N, nu, njnt)``."""
        tables = dict(self._ctrl_arrays())
        tables.update({k: np.asarray(v, np.float64) for k, v in drives.items()})
        tables["drive_damping"] = self.plan.drive_damping(tables["stiffness"], tables["damping"])
        self._ctrl_numpy = tables
        self._ctrl_tables = None

    def _ctrl_arrays(self) -> dict:
        """The plan's ctrl -> drive tables (numpy), built once."""
        if self._ctrl_numpy is None:
            p = self.plan
            self._ctrl_numpy = {
                "lo": p.ctrl_range[:, 0],
                "hi": p.ctrl_range[:, 1],
                "stiffness": p.stiffness,
                "damping": p.damping,
                "drive_damping": p.drive_damping(p.stiffness, p.damping),  # what PhysX's drive is given
                "pos_bias": p.pos_bias,
                "pos_gain": p.pos_gain,
                "vel_gain": p.vel_gain,
                "motor_gain": p.motor_gain,
                "force_lo": p.motor_force_range[:, 0],
                "force_hi": p.motor_force_range[:, 1],
                "motor_gear": p.motor_gear,
            }
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
        """Per qvel column: the link whose frame carries its axis (row ``qvel_row (N, nv)``, column
        ``qvel_col (nv,)``), the local axis and anchor, whether it rotates; and the ancestor masks."""
        info = self.info
        nv = info.nv
        art = np.zeros(nv, np.int64)
        lnk = np.zeros(nv, np.int64)
        axis = np.zeros((nv, 3))
        anchor = np.zeros((nv, 3))
        rot = np.zeros(nv, bool)
        world_axis = np.zeros(nv, bool)  # free-joint translation columns have world axes
        for j in range(len(info.joint_names)):
            a, l = plan.joint_link[j]
            adr = info.joint_dofadr[j]
            lk = plan.articulations[a].links[l]
            if info.joint_type[j] == JOINT_FREE:  # the root link's frame
                for k in range(6):
                    art[adr + k], lnk[adr + k] = a, l
                    axis[adr + k, k % 3] = 1.0
                    rot[adr + k] = k >= 3
                    world_axis[adr + k] = k < 3
            else:
                art[adr], lnk[adr] = a, l
                axis[adr] = quat_apply(lk.pose_in_child[3:], np.array([1.0, 0.0, 0.0]))
                anchor[adr] = lk.pose_in_child[:3]
                rot[adr] = info.joint_type[j] == JOINT_HINGE
        self.qvel_row = self._table(self.rows[:, art])  # (N, nv)
        self.qvel_col = self._table(self.cols.link_col[art, lnk])  # (nv,)
        self.dof_axis = to_tensor(axis, self.device)
        self.dof_anchor = to_tensor(anchor, self.device)
        self.dof_rot = to_tensor(rot, self.device, torch.bool)
        self.dof_world_axis = to_tensor(world_axis, self.device, torch.bool)
        # (nbody, nv): which qvel columns move each body (those of its ancestors' joints)
        width = {JOINT_FREE: 6, JOINT_BALL: 3}
        dof_body = np.repeat(info.joint_body, [width.get(int(t), 1) for t in info.joint_type])
        anc = np.zeros((info.nbody, nv), bool)
        for b in range(1, info.nbody):
            x = b
            while x > 0:
                anc[b] |= dof_body == x
                x = info.body_parent[x]
        self.site_dof_mask = to_tensor(anc[self.site_body], self.device, torch.bool)  # (nsite, nv)
        self.body_dof_mask = to_tensor(anc, self.device)  # (nbody, nv) float

    def dof_frames(self, data: torch.Tensor, cols: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """World axis and anchor ``(N, k, 3)`` of qvel columns ``cols`` (env-relative) from the link buffer."""
        c = self.ids(cols)
        jl = data[self.qvel_row[:, c], self.qvel_col[c][None]].to(torch.float64)  # (N, k, 13)
        q = jl[..., 3:7]
        axis_local = self.dof_axis[c][None].expand(q.shape[0], -1, -1)
        axis = torch.where(self.dof_world_axis[c][None, :, None], axis_local, quat_apply(q, axis_local))
        anchor = jl[..., :3] - self.origins[:, None] + quat_apply(q, self.dof_anchor[c][None].expand_as(axis_local))
        return axis, anchor

    def point_jacobian(
        self, axis: torch.Tensor, anchor: torch.Tensor, cols: np.ndarray, points: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(jacp, jacr)`` ``(N, P, k, 3)`` of world points ``(N, P, 3)`` for every column (unmasked)."""
        rot = self.dof_rot[self.ids(cols)][None, None, :, None]
        ax = axis[:, None].expand(-1, points.shape[1], -1, -1)
        jacp = torch.where(rot, cross(ax, points[:, :, None] - anchor[:, None]), ax)
        jacr = torch.where(rot, ax, torch.zeros_like(ax))
        return jacp, jacr

    def site_jacobian(self, data: torch.Tensor, site_id: int, cols: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """``(jacp, jacr)`` ``(N, 3, k)`` of site ``site_id`` for qvel columns ``cols``."""
        link = self.gather(data, self.site_body[site_id : site_id + 1])
        p_site, _ = self.frames(link, self.site_local[site_id : site_id + 1])
        axis, anchor = self.dof_frames(data, cols)
        jacp, jacr = self.point_jacobian(axis, anchor, cols, p_site)
        mask = self.site_dof_mask[site_id][self.ids(cols)][None, :, None]
        return (jacp[:, 0] * mask).transpose(1, 2), (jacr[:, 0] * mask).transpose(1, 2)

    def body_velocities(
        self, data: torch.Tensor, qvel: torch.Tensor, body_ids: np.ndarray
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Frame-origin linear and angular velocities ``(N, B, 3)`` of bodies, ``J(body) @ qvel``.

        Derived from the joint velocities ``qvel (N, nv)`` and the link frames in
        ``data (R, L, 13)`` rather than read from PhysX's per-link velocities, so
        that body velocities always agree with ``qvel`` (as MuJoCo's do), after a
        step as after ``set_state``.
        """
        n = self.num_envs
        if self.info.nv == 0:
            z = torch.zeros((n, body_ids.size, 3), dtype=torch.float64, device=self.device)
            return z, z.clone()
        cols = np.arange(self.info.nv)
        points = self.gather(data, body_ids)[..., :3]
        axis, anchor = self.dof_frames(data, cols)
        jacp, jacr = self.point_jacobian(axis, anchor, cols, points)  # (N, B, nv, 3)
        w = self.body_dof_mask[self.ids(body_ids)][None] * qvel[:, None]  # (N, B, nv)
        return (jacp * w[..., None]).sum(2), (jacr * w[..., None]).sum(2)


def _body_com(plan: Plan, body: int) -> np.ndarray:
    """Centre of mass of ``body`` in its frame (zeros for the world)."""
    a, l = plan.body_link[body]
    if a < 0:
        return np.zeros(3)
    return np.asarray(plan.articulations[a].links[l].com[:3], np.float64)
