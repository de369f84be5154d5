"""GPU PhysX: one ``PhysxGpuSystem``, one sub-scene per env.

Lifecycle (SAPIEN's documentation): build every sub-scene (each with its own
offset, set before any body is added), ``gpu_init``; then per call write the
CUDA buffers and ``gpu_apply_*`` them, ``step``, and ``gpu_fetch_*`` lazily
when a getter needs a buffer. The buffers are zero-copy torch views
(``CudaArray.torch()``) of PhysX's own memory; rows are
``articulation.gpu_index``, columns ``link.index`` / the dof index, as the
shared :class:`~.layout.Layout` expects. Positions are read back relative to
each env's sub-scene origin. ``step`` does not synchronise with the host: the
divergence mask is computed and acted on on the device.

Not available on the GPU path (declared in the capabilities): body forces.
"""

from __future__ import annotations

import math
import platform
from pathlib import Path
from typing import Optional

import numpy as np
import sapien
import torch
from sapien import physx

from simbackend.divergence import MAX_QVEL
from simbackend.errors import SimBackendError

from .engine import PhysxEngine, scene_config
from .plan import Plan
from .scene import MaterialCache, build_scene

_RELEASES = "https://github.com/sapien-sim/physx-precompiled/releases/download"


def gpu_library() -> tuple[Path, str]:
    """Where SAPIEN looks for the PhysX GPU library, and where it would download it from."""
    version = physx.version()
    arch = "linux-aarch64-so" if platform.machine() in ("aarch64", "arm64") else "linux-so"
    return Path.home() / ".sapien" / "physx" / version / "libPhysXGpu_64.so", f"{_RELEASES}/{version}/{arch}.zip"


def require_gpu_library() -> None:
    """Raise a clear error when the PhysX GPU library is missing (SAPIEN would try to download it)."""
    path, url = gpu_library()
    if not path.is_file():
        raise SimBackendError(
            f"the PhysX GPU library is missing: {path} does not exist. SAPIEN downloads it on first GPU use,"
            f" which needs internet access. Install it by hand: download {url} on a machine with internet,"
            f" and unzip it into {path.parent} (it holds libPhysXGpu_64.so)."
        )


def default_spacing(plan: Plan) -> float:
    """Distance between sub-scene origins: twice MuJoCo's model extent plus 1 m."""
    return 2.0 * plan.extent + 1.0


def grid_origins(num_envs: int, spacing: float) -> np.ndarray:
    """``(N, 3)`` sub-scene origins on a square grid in the z = 0 plane."""
    side = max(1, math.ceil(math.sqrt(num_envs)))
    n = np.arange(num_envs)
    return np.stack([(n % side) * spacing, (n // side) * spacing, np.zeros(num_envs)], 1).astype(np.float64)


def restore_index(envs: torch.Tensor, env_of_row: torch.Tensor, all_rows: torch.Tensor) -> torch.Tensor:
    """``(R,)`` int32 rows for ``gpu_apply_*`` that re-apply only the rows of ``envs`` ``(N,)`` (bool), sync-free.

    ``gpu_apply_*`` takes an index whose length the host must know, and how
    many envs diverged is only known on the device. So the index has one entry
    per row: rows of restored envs name themselves; every other entry names
    the first restored row (a duplicate write of the same values) or, when no
    env is restored, the first row, whose buffers hold its current state (a
    write of the values it already has).

    Args:
        envs: ``(N,)`` bool, envs to restore.
        env_of_row: ``(R_total,)`` env of each buffer row.
        all_rows: ``(R,)`` the rows of every env's articulations.
    """
    flag = envs[env_of_row[all_rows]]                                   # (R,)
    first = all_rows[torch.argmax(flag.to(torch.int32))]                # a restored row, or row 0's
    return torch.where(flag, all_rows, first).to(torch.int32)


class GpuPhysx(PhysxEngine):
    def __init__(self, plan: Plan, num_envs: int, iterations: tuple[int, int], tgs: bool,
                 device: torch.device, spacing: Optional[float]):
        super().__init__(plan, num_envs)
        require_gpu_library()
        physx.enable_gpu()
        self.device = device
        with scene_config(plan.gravity, tgs):
            self.system = physx.PhysxGpuSystem(f"cuda:{device.index or 0}")
        self.systems = [self.system]
        self.system.timestep = plan.timestep
        self.origins = grid_origins(num_envs, spacing or default_spacing(plan))
        materials = MaterialCache()
        self.scenes, self.arts, self.comps = [], [], []
        for n in range(num_envs):
            scene = sapien.Scene([self.system])
            self.system.set_scene_offset(scene, self.origins[n].astype(np.float32))
            arts, comps = build_scene(plan, scene, materials, iterations, place=False)
            self.scenes.append(scene)
            self.arts.append(arts)
            self.comps.append(comps)
        self._index_from(self.arts[0], self.comps[0])
        self._set_drives()
        self.system.gpu_init()
        self.rows = np.array([[a.gpu_index for a in arts] for arts in self.arts], np.int64).reshape(num_envs, -1)
        s = self.system
        self._links = s.cuda_articulation_link_data.torch()          # (R, L, 13)
        self._qpos = s.cuda_articulation_qpos.torch()                 # (R, D)
        self._qvel = s.cuda_articulation_qvel.torch()
        self._target_q = s.cuda_articulation_target_qpos.torch()
        self._target_v = s.cuda_articulation_target_qvel.torch()
        self._qf = s.cuda_articulation_qf.torch()
        self._qacc = s.cuda_articulation_qacc.torch()
        dev = self._qpos.device
        self._all_rows = torch.as_tensor(self.rows.reshape(-1), dtype=torch.long, device=dev)
        # the restore index: filled in place each call, wrapped once (PhysX reads the tensor's memory)
        self._index_rows = self._all_rows.to(torch.int32).contiguous()
        self._index_array = sapien.pysapien.CudaArray(self._index_rows)
        self._pre = (torch.empty_like(self._qpos), torch.empty_like(self._qvel), torch.empty_like(self._links[:, 0]))
        self._keep: list = []  # index buffers PhysX may still be reading (freed two calls later)
        self._env_of_row = torch.zeros(self._links.shape[0], dtype=torch.long, device=dev)
        self._env_of_row[self._all_rows] = torch.arange(num_envs, device=dev).repeat_interleave(self.num_arts)
        sj = np.flatnonzero(plan.joint_link[:, 0] >= 0)
        sj = sj[self.joint_dof[sj] >= 0]
        self._sj = sj
        self._sj_rows = torch.as_tensor(self.rows[:, plan.joint_link[sj, 0]], device=dev)   # (N, nsj)
        self._sj_cols = torch.as_tensor(self.joint_dof[sj], device=dev)                     # (nsj,)
        self._fresh = {"pose": False, "vel": False, "qpos": False, "qvel": False}
        self.system.gpu_update_articulation_kinematics()

    # ------------------------------------------------------------------
    # reads: fetch a buffer once per state
    # ------------------------------------------------------------------
    def _stale(self) -> None:
        for k in self._fresh:
            self._fresh[k] = False

    def link_data(self, body_ids=None, arts=None, velocities: bool = False) -> torch.Tensor:
        if not self._fresh["pose"]:
            self.system.gpu_fetch_articulation_link_pose()
            self._fresh["pose"] = True
        if velocities and not self._fresh["vel"]:
            self.system.gpu_fetch_articulation_link_velocity()
            self._fresh["vel"] = True
        return self._links

    def art_qpos(self) -> torch.Tensor:
        if not self._fresh["qpos"]:
            self.system.gpu_fetch_articulation_qpos()
            self._fresh["qpos"] = True
        return self._qpos

    def art_qvel(self) -> torch.Tensor:
        if not self._fresh["qvel"]:
            self.system.gpu_fetch_articulation_qvel()
            self._fresh["qvel"] = True
        return self._qvel

    # ------------------------------------------------------------------
    # writes
    # ------------------------------------------------------------------
    def _index(self, rows: np.ndarray):
        t = torch.as_tensor(rows, dtype=torch.int32, device=self._qpos.device).contiguous()
        return t, sapien.pysapien.CudaArray(t)

    def write_state(self, env_ids: np.ndarray, packed: dict) -> None:
        dev = self._qpos.device
        rows = torch.as_tensor(packed["rows"], dtype=torch.long, device=dev)
        d = self.max_dof
        if d:
            self._qpos[rows] = torch.as_tensor(packed["qpos"][:, :d], dtype=self._qpos.dtype, device=dev)
            self._qvel[rows] = torch.as_tensor(packed["qvel"][:, :d], dtype=self._qvel.dtype, device=dev)
        self._links[rows, 0, :7] = torch.as_tensor(packed["root_pose"], dtype=self._links.dtype, device=dev)
        self._links[rows, 0, 7:13] = torch.as_tensor(packed["root_vel"], dtype=self._links.dtype, device=dev)
        owner, index = self._index(packed["rows"])
        s = self.system
        s.gpu_apply_articulation_root_pose(index)
        s.gpu_apply_articulation_root_velocity(index)
        if d:
            s.gpu_apply_articulation_qpos(index)
            s.gpu_apply_articulation_qvel(index)
        s.gpu_update_articulation_kinematics()
        # PhysX reads ``owner`` asynchronously: keep it alive for two more calls instead of waiting
        self._keep = (self._keep + [owner])[-2:]
        self._stale()

    def _write_ctrl(self, drive: dict) -> None:
        if not self._sj.size:
            return
        dev = self._qpos.device
        cols = self._sj_cols[None].expand_as(self._sj_rows)
        for key, buf in (("target", self._target_q), ("vel_target", self._target_v), ("force", self._qf)):
            vals = torch.as_tensor(drive[key][:, self._sj], dtype=buf.dtype, device=dev)
            buf[self._sj_rows, cols] = vals
        s = self.system
        s.gpu_apply_articulation_target_position()
        s.gpu_apply_articulation_target_velocity()
        s.gpu_apply_articulation_qf()

    def step(self, drive: dict, nsteps: int, forces, judge, hold=None) -> torch.Tensor:
        """Advance every sub-scene; restore the diverged (and held) envs on the device; return the mask.

        No host synchronisation: the pre-call state is copied into preallocated
        buffers, the verdict (``judge()``, the contract's rule, plus non-finite
        PhysX rows) stays on the device, the restore is a masked ``torch.where``
        of the affected rows, and the ``gpu_apply_*`` calls take a fixed-length
        index (:meth:`_restore_rows`).
        """
        if forces is not None:
            raise SimBackendError("body forces are not available on the GPU path")
        self.link_data(velocities=True)
        pre_q, pre_v, pre_root = self._pre
        pre_q.copy_(self.art_qpos())
        pre_v.copy_(self.art_qvel())
        pre_root.copy_(self._links[:, 0])
        try:
            self._write_ctrl(drive)
            for _ in range(nsteps):
                self.system.step()
        except BaseException:
            self._restore(torch.ones(self.num_envs, dtype=torch.bool, device=pre_q.device))
            raise
        self._stale()
        q, v, links = self.art_qpos(), self.art_qvel(), self.link_data(velocities=True)
        root = links[:, 0]
        self.system.gpu_fetch_articulation_qacc()
        # PhysX zeroes the velocities of a step it cannot integrate; its qacc keeps the failure (see cpu.py)
        acc_bad = ~(self._qacc.abs() * self.plan.timestep <= MAX_QVEL).all(1)
        per_row = ~(torch.isfinite(q).all(1) & torch.isfinite(v).all(1) & torch.isfinite(root).all(1)) | acc_bad
        failed = torch.zeros(self.num_envs, dtype=torch.int32, device=q.device)
        failed.index_add_(0, self._env_of_row[self._all_rows], per_row[self._all_rows].to(torch.int32))
        bad = (failed > 0) | judge(None)
        self._restore(bad if hold is None else bad | hold)
        return bad if hold is None else bad & ~hold

    def _restore(self, envs: torch.Tensor) -> None:
        """Write the pre-call state back into the rows of ``envs`` ``(N,)`` (device bool), sync-free."""
        pre_q, pre_v, pre_root = self._pre
        q, v, root = self._qpos, self._qvel, self._links[:, 0]
        row = envs[self._env_of_row][:, None]
        q.copy_(torch.where(row, pre_q, q))
        v.copy_(torch.where(row, pre_v, v))
        root.copy_(torch.where(row, pre_root, root))
        index = self._restore_rows(envs)
        s = self.system
        s.gpu_apply_articulation_root_pose(index)
        s.gpu_apply_articulation_root_velocity(index)
        if self.max_dof:
            s.gpu_apply_articulation_qpos(index)
            s.gpu_apply_articulation_qvel(index)
        s.gpu_update_articulation_kinematics()
        self._fresh["pose"] = self._fresh["vel"] = False

    def _restore_rows(self, envs: torch.Tensor):
        """The CUDA index array of rows to re-apply for ``envs`` (see :func:`restore_index`), filled in place."""
        self._index_rows.copy_(restore_index(envs, self._env_of_row, self._all_rows))
        return self._index_array

    def close(self) -> None:
        self.scenes.clear()
        self.arts.clear()
        self.comps.clear()
