"""CPU PhysX: one ``sapien.Scene`` with only a ``PhysxCpuSystem`` per env.

Reads fill buffers of PhysX's GPU layout (see :mod:`.layout`), lazily and
only for what a getter needs: ``link_data`` reads the requested links of every
env once per state, ``art_qpos``/``art_qvel`` one call per articulation.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import sapien
import torch
from sapien import physx

from simbackend.errors import SimBackendError

from .backend_common import EngineBase, scene_config
from .plan import Plan
from .scene import MaterialCache, build_scene, pose


class CpuPhysx(EngineBase):
    def __init__(self, plan: Plan, num_envs: int, iterations: tuple[int, int], tgs: bool):
        super().__init__(plan, num_envs)
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
        self._fresh_links = np.zeros((A, max(self.max_links, 1)), bool)
        self._fresh_q = self._fresh_v = False
        self._set_drives()

    def _build_env(self):
        system = physx.PhysxCpuSystem()
        system.timestep = self.plan.timestep
        scene = sapien.Scene([system])
        arts, comps = build_scene(self.plan, scene, self._materials, self._iterations)
        return system, scene, arts, comps

    def _rebuild(self, env_ids: np.ndarray) -> None:
        """Fresh scenes for ``env_ids``: PhysX keeps contact and broad-phase caches
        across a teleport, which a replay from the same state must not see."""
        with scene_config(self.plan.gravity, self._tgs):
            for n in env_ids:
                self.systems[n], self.scenes[n], self.arts[n], self.comps[n] = self._build_env()
        self._set_drives(env_ids)

    # ------------------------------------------------------------------
    # reads
    # ------------------------------------------------------------------
    def _stale(self) -> None:
        self._fresh_links[:] = False
        self._fresh_q = self._fresh_v = False

    def link_data(self, body_ids: Optional[np.ndarray], arts: Optional[np.ndarray] = None) -> torch.Tensor:
        need = np.zeros_like(self._fresh_links)
        if body_ids is not None:
            bl = self.plan.body_link[np.asarray(body_ids)]
            bl = bl[bl[:, 0] >= 0]
            need[bl[:, 0], bl[:, 1]] = True
        if arts is not None:
            for a in arts:
                need[a, :len(self.plan.articulations[a].links)] = True
        need &= ~self._fresh_links
        if need.any():
            pairs = [(int(a), int(l), int(self.link_col[a, l])) for a, l in zip(*np.nonzero(need))]
            buf = self._links
            for n, comps in enumerate(self.comps):
                base = n * self.num_arts
                for a, l, c in pairs:
                    comp = comps[a][l]
                    p = comp.entity_pose
                    row = buf[base + a, c]
                    row[:3] = p.p
                    row[3:7] = p.q
                    row[7:10] = comp.linear_velocity
                    row[10:13] = comp.angular_velocity
            self._fresh_links |= need
        return torch.from_numpy(self._links)

    def art_qpos(self) -> torch.Tensor:
        if not self._fresh_q and self.max_dof:
            for r, art in enumerate(a for arts in self.arts for a in arts):
                d = self.art_dofs[r % self.num_arts]
                if d:
                    self._qpos[r, :d] = art.get_qpos()
            self._fresh_q = True
        return torch.from_numpy(self._qpos)

    def art_qvel(self) -> torch.Tensor:
        if not self._fresh_v and self.max_dof:
            for r, art in enumerate(a for arts in self.arts for a in arts):
                d = self.art_dofs[r % self.num_arts]
                if d:
                    self._qvel[r, :d] = art.get_qvel()
            self._fresh_v = True
        return torch.from_numpy(self._qvel)

    # ------------------------------------------------------------------
    # writes
    # ------------------------------------------------------------------
    def write_state(self, env_ids: np.ndarray, packed: dict) -> None:
        A = self.num_arts
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
                    art.set_qacc(np.zeros(d, np.float32))
        self._stale()

    def _write_ctrl(self, drive: dict) -> None:
        p = self.plan
        K, D = p.stiffness, p.damping
        target, vel_target, force = drive["target"], drive["vel_target"], drive["force"]
        pos_j = [j for j in p.drive_joints if K[j] > 0]
        vel_j = [j for j in p.drive_joints if D[j] > 0 and p.vel_gain[:, j].any()]
        motor_arts = np.unique(p.joint_link[np.flatnonzero(p.motor_gear.any(0)), 0])
        for n, comps in enumerate(self.comps):
            for j in pos_j:
                a, l = p.joint_link[j]
                comps[a][l].joint.set_drive_target(float(target[n, j]))
            for j in vel_j:
                a, l = p.joint_link[j]
                comps[a][l].joint.set_drive_velocity_target(float(vel_target[n, j]))
            for a in motor_arts:
                qf = np.zeros(self.art_dofs[a], np.float32)
                qf[self.joint_dof[self.motor_joints[a]]] = force[n, self.motor_joints[a]]
                self.arts[n][a].set_qf(qf)

    def _apply_forces(self, forces) -> None:
        bodies, f, t = forces
        bl = self.plan.body_link[bodies]
        for n, comps in enumerate(self.comps):
            for i, (a, l) in enumerate(bl):
                comp = comps[a][l]
                origin = comp.entity_pose.p
                comp.add_force_at_point(f[n, i].astype(np.float32), origin)
                comp.add_force_torque(np.zeros(3, np.float32), t[n, i].astype(np.float32))

    def step(self, drive: dict, nsteps: int, forces) -> np.ndarray:
        before = [s.pack() for s in self.systems]
        self._write_ctrl(drive)
        for _ in range(nsteps):
            if forces is not None:
                self._apply_forces(forces)
            for s in self.systems:
                s.step()
        self._stale()
        diverged = np.zeros(self.num_envs, bool)
        for n, s in enumerate(self.systems):
            if self.blown_up(np.frombuffer(before[n], np.float32)) or self.blown_up(np.frombuffer(s.pack(), np.float32)):
                diverged[n] = True
                s.unpack(before[n])
        return diverged

    def close(self) -> None:
        self.systems.clear()
        self.scenes.clear()
        self.arts.clear()
        self.comps.clear()
