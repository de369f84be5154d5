"""CPU PhysX: one ``sapien.Scene`` with only a ``PhysxCpuSystem`` per env.

Reads fill buffers of PhysX's GPU layout (see :mod:`.layout`), lazily and
only for what a getter needs: ``link_data`` reads the requested links of every
env once per state, ``art_qpos``/``art_qvel`` one call per articulation.
"""

from __future__ import annotations

import weakref
from typing import Optional

import numpy as np
import sapien
import torch
from sapien import physx

from simbackend.divergence import MAX_QVEL
from simbackend.errors import InvalidArgumentError, SimBackendError

from .engine import PhysxEngine, scene_config
from .plan import Plan
from .scene import MaterialCache, build_scene, pose


#: SAPIEN 3.0.3 aborts the interpreter ("Couldn't create autoTSSkey mapping") when more
#: than about 1000 CPU PhysX systems alive in one process are destroyed
MAX_CPU_SCENES = 1000
_alive = [0]


def _release(n: int) -> None:
    _alive[0] -= n


class CpuPhysx(PhysxEngine):
    def __init__(self, plan: Plan, num_envs: int, iterations: tuple[int, int], tgs: bool):
        super().__init__(plan, num_envs)
        if _alive[0] + num_envs > MAX_CPU_SCENES:
            raise InvalidArgumentError(
                f"num_envs: {num_envs} CPU PhysX scenes with {_alive[0]} already alive in this process exceed"
                f" {MAX_CPU_SCENES}: SAPIEN {sapien.__version__} aborts the interpreter when it frees more;"
                " close other sapien backends, or use device='cuda' (one GPU system holds every env)"
            )
        _alive[0] += num_envs
        self._finalizer = weakref.finalize(self, _release, num_envs)
        self._materials = MaterialCache()
        self._iterations, self._tgs = iterations, tgs
        self.systems, self.scenes, self.arts, self.comps = [], [], [], []
        with scene_config(plan.gravity, tgs):
            for _ in range(num_envs):
                system, scene, arts, comps = self._build_env()
                self.systems.append(system)
                self.scenes.append(scene)
                self.arts.append(arts)
                self.comps.append(comps)
        self._index_from(self.arts[0], self.comps[0])
        got = len(self.systems[0].pack()) // 4 if num_envs else self.pack_size
        if got != self.pack_size:
            raise SimBackendError(
                f"sapien {sapien.__version__}: PhysX's serialised state has {got} values where {self.pack_size} were"
                " expected; this SAPIEN version is not supported (use sapien>=3.0.3,<3.1)"
            )
        A = len(plan.articulations)
        self.rows = np.arange(num_envs * A, dtype=np.int64).reshape(num_envs, A)
        self.origins = np.zeros((num_envs, 3))
        R = num_envs * A
        self._links = np.zeros((R, max(self.max_links, 1), 13))
        self._links[..., 3] = 1.0
        self._qpos = np.zeros((R, max(self.max_dof, 1)))
        self._qvel = np.zeros((R, max(self.max_dof, 1)))
        self._fresh_pose = np.zeros((A, max(self.max_links, 1)), bool)
        self._fresh_vel = np.zeros((A, max(self.max_links, 1)), bool)
        self._fresh_q = self._fresh_v = False
        p = plan
        self._pos_j = [j for j in p.drive_joints if p.stiffness[j] > 0]
        self._vel_j = [j for j in p.drive_joints if p.damping[j] > 0 and p.vel_gain[:, j].any()]
        self._motor_arts = [int(a) for a in np.unique(p.joint_link[np.flatnonzero(p.motor_gear.any(0)), 0])]
        self._joint_objs: list = [None] * num_envs
        self._packed: list = [None] * num_envs   # each env's serialised state as of the end of the last call
        self._dof_arts = [a for a in range(A) if self.art_dofs[a]]
        dofs_per_env = int(sum(self.art_dofs[a] for a in self._dof_arts))
        self._qacc_starts = np.arange(num_envs) * dofs_per_env
        self._set_drives()
        for n in range(num_envs):
            self._cache_joints(n)

    def _build_env(self):
        system = physx.PhysxCpuSystem()
        system.timestep = self.plan.timestep
        scene = sapien.Scene([system])
        arts, comps = build_scene(self.plan, scene, self._materials, self._iterations)
        return system, scene, arts, comps

    def _cache_joints(self, n: int) -> None:
        """Env ``n``'s PhysX joint objects of position- and velocity-driven joints, looked up once."""
        jl = self.plan.joint_link
        comps = self.comps[n]
        self._joint_objs[n] = ([comps[jl[j, 0]][jl[j, 1]].joint for j in self._pos_j],
                               [comps[jl[j, 0]][jl[j, 1]].joint for j in self._vel_j])

    def _rebuild(self, env_ids: np.ndarray) -> None:
        """Fresh scenes for ``env_ids``: PhysX keeps contact and broad-phase caches
        across a teleport, which a replay from the same state must not see."""
        with scene_config(self.plan.gravity, self._tgs):
            for n in env_ids:
                self.systems[n], self.scenes[n], self.arts[n], self.comps[n] = self._build_env()
                self._packed[n] = None
        self._set_drives(env_ids)
        for n in env_ids:
            self._cache_joints(n)

    # ------------------------------------------------------------------
    # reads
    # ------------------------------------------------------------------
    def _stale(self) -> None:
        self._fresh_pose[:] = False
        self._fresh_vel[:] = False
        self._fresh_q = self._fresh_v = False

    def link_data(self, body_ids: Optional[np.ndarray], arts: Optional[np.ndarray] = None,
                  velocities: bool = False) -> torch.Tensor:
        """The ``(R, L, 13)`` buffer with the poses (and, if asked, velocities) of the
        requested bodies' links, or of every link of ``arts``, current."""
        need = np.zeros_like(self._fresh_pose)
        if body_ids is not None:
            bl = self.plan.body_link[np.asarray(body_ids)]
            bl = bl[bl[:, 0] >= 0]
            need[bl[:, 0], bl[:, 1]] = True
        if arts is not None:
            for a in arts:
                need[a, :len(self.plan.articulations[a].links)] = True
        need_pose = need & ~self._fresh_pose
        need_vel = need & ~self._fresh_vel if velocities else np.zeros_like(need)
        buf = self._links
        if need_pose.any():
            pairs = [(int(a), int(l), int(self.link_col[a, l])) for a, l in zip(*np.nonzero(need_pose))]
            for n, comps in enumerate(self.comps):
                base = n * self.num_arts
                for a, l, c in pairs:
                    p = comps[a][l].entity_pose
                    row = buf[base + a, c]
                    row[:3] = p.p
                    row[3:7] = p.q
            self._fresh_pose |= need_pose
        if need_vel.any():
            pairs = [(int(a), int(l), int(self.link_col[a, l])) for a, l in zip(*np.nonzero(need_vel))]
            for n, comps in enumerate(self.comps):
                base = n * self.num_arts
                for a, l, c in pairs:
                    comp = comps[a][l]
                    row = buf[base + a, c]
                    row[7:10] = comp.linear_velocity
                    row[10:13] = comp.angular_velocity
            self._fresh_vel |= need_vel
        return torch.from_numpy(self._links)

    def _read_joints(self, buf: np.ndarray, getter: str) -> None:
        A = self.num_arts
        with_dofs = [(a, int(self.art_dofs[a])) for a in range(A) if self.art_dofs[a]]
        for n, arts in enumerate(self.arts):
            for a, d in with_dofs:
                buf[n * A + a, :d] = getattr(arts[a], getter)()

    def art_qpos(self) -> torch.Tensor:
        if not self._fresh_q and self.max_dof:
            self._read_joints(self._qpos, "get_qpos")
            self._fresh_q = True
        return torch.from_numpy(self._qpos)

    def art_qvel(self) -> torch.Tensor:
        if not self._fresh_v and self.max_dof:
            self._read_joints(self._qvel, "get_qvel")
            self._fresh_v = True
        return torch.from_numpy(self._qvel)

    # ------------------------------------------------------------------
    # writes
    # ------------------------------------------------------------------
    def write_state(self, env_ids: np.ndarray, packed: dict) -> None:
        A = self.num_arts
        packed = {k: v.cpu().numpy() if isinstance(v, torch.Tensor) else v for k, v in packed.items()}
        self._rebuild(env_ids)
        for i, n in enumerate(env_ids):
            for a, art in enumerate(self.arts[n]):
                k = i * A + a
                d = self.art_dofs[a]
                if self.floating[a]:
                    art.set_root_pose(pose(packed["root_pose"][k]))
                    art.set_root_linear_velocity(packed["root_vel"][k, :3].astype(np.float32))
                    art.set_root_angular_velocity(packed["root_vel"][k, 3:].astype(np.float32))
                if d:  # after the root: PhysX updates the links' poses and velocities here
                    art.set_qpos(packed["qpos"][k, :d].astype(np.float32))
                    art.set_qvel(packed["qvel"][k, :d].astype(np.float32))
        self._stale()

    def _write_ctrl(self, drive: dict) -> None:
        drive = {k: v.cpu().numpy() if isinstance(v, torch.Tensor) else v for k, v in drive.items()}
        targets = drive["target"][:, self._pos_j].tolist()
        vel_targets = drive["vel_target"][:, self._vel_j].tolist()
        force = drive["force"]
        qfs = {}
        for a in self._motor_arts:
            qf = np.zeros((self.num_envs, int(self.art_dofs[a])), np.float32)
            qf[:, self.joint_dof[self.motor_joints[a]]] = force[:, self.motor_joints[a]]
            qfs[a] = qf
        for n, (pos_joints, vel_joints) in enumerate(self._joint_objs):
            for joint, t in zip(pos_joints, targets[n]):
                joint.set_drive_target(t)
            for joint, t in zip(vel_joints, vel_targets[n]):
                joint.set_drive_velocity_target(t)
            for a, qf in qfs.items():
                self.arts[n][a].set_qf(qf[n])

    def _apply_forces(self, forces) -> None:
        bodies, f, t = forces
        f, t = np.asarray(f.cpu(), np.float32), np.asarray(t.cpu(), np.float32)
        bl = self.plan.body_link[bodies]
        for n, comps in enumerate(self.comps):
            for i, (a, l) in enumerate(bl):
                comp = comps[a][l]
                origin = comp.entity_pose.p
                comp.add_force_at_point(f[n, i], origin)
                comp.add_force_torque(np.zeros(3, np.float32), t[n, i])

    def step(self, drive: dict, nsteps: int, forces, judge, hold=None) -> np.ndarray:
        """Advance every scene ``nsteps`` substeps; restore and return the diverged envs ``(N,)``.

        ``judge(states)`` gives the ``(N,)`` envs the contract's divergence rule
        flags in the serialised states reached (decoded without reading any link
        again); envs whose serialised PhysX state is non-finite count as well (an
        engine-reported failure). On any exception, KeyboardInterrupt
        included, every scene gets back its pre-call state before it propagates.
        """
        # the state each env had at the end of the last call is its pre-call state now
        before = [b if b is not None else s.pack() for b, s in zip(self._packed, self.systems)]
        try:
            self._write_ctrl(drive)
            for _ in range(nsteps):
                if forces is not None:
                    self._apply_forces(forces)
                for s in self.systems:
                    s.step()
            self._stale()
            after = [s.pack() for s in self.systems]
            states = np.frombuffer(b"".join(after), np.float32).reshape(-1, self.pack_size)
            diverged = ~np.isfinite(states).all(1) | self._acceleration_failed() | np.asarray(judge(states), bool)
            if hold is not None:
                diverged |= np.asarray(hold, bool)
            for n in np.flatnonzero(diverged):
                self.systems[n].unpack(before[n])
                after[n] = before[n]
        except BaseException:  # interrupted (Ctrl-C) anywhere in the call: every scene back at its pre-call state
            for s, b in zip(self.systems, before):
                s.unpack(b)
            self._packed = before
            self._stale()
            raise
        if diverged.any():
            self._stale()
        self._packed = after
        return diverged if hold is None else diverged & ~np.asarray(hold, bool)

    def _acceleration_failed(self) -> np.ndarray:
        """``(N,)`` envs whose last substep's joint accelerations PhysX could not integrate.

        PhysX answers a force it cannot integrate (1e30 N, say) by zeroing the
        articulation's velocities and leaving its positions: a finite state the
        divergence thresholds cannot see. Its joint accelerations keep the
        failure: ``|qacc| dt > MAX_QVEL`` (one substep would take a velocity past
        the contract's bound) or a non-finite ``qacc`` is PhysX's report of a failed
        step, as MuJoCo's bad-qacc warning is MuJoCo's.
        """
        arts = self._dof_arts
        if not arts:
            return np.zeros(self.num_envs, bool)
        qacc = np.concatenate([env[a].get_qacc() for env in self.arts for a in arts]).astype(np.float64)
        bad = ~(np.abs(qacc) * self.plan.timestep <= MAX_QVEL)
        per_env = np.add.reduceat(bad, self._qacc_starts) if bad.size else bad
        return per_env > 0

    def close(self) -> None:
        self._finalizer()  # the scenes no longer count against MAX_CPU_SCENES
        self._joint_objs.clear()
        self._packed.clear()
        self.systems.clear()
        self.scenes.clear()
        self.arts.clear()
        self.comps.clear()
