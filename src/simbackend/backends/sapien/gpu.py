"""GPU PhysX: one ``PhysxGpuSystem``, one sub-scene per env.

Lifecycle (SAPIEN's documentation): build every sub-scene (each with its own
offset, set before any body is added), ``gpu_init``; then per call write the
CUDA buffers and ``gpu_apply_*`` them, ``step``, and ``gpu_fetch_*`` lazily
when a getter needs a buffer. The buffers are zero-copy torch views
(``CudaArray.torch()``) of PhysX's own memory; rows are
``articulation.gpu_index``, columns ``link.index`` / the dof index, as the
shared :class:`~.layout.Layout` expects. Positions are read back relative to
each env's sub-scene origin. ``step`` does not synchronise with the host: the
divergence mask is computed and acted on on the device (pre-call state in
preallocated buffers, masked writes, a fixed-length restore index aimed at a
spare sub-scene: :func:`restore_index`).

Contact forces, friction included (:mod:`.contact`): with ``contact_sensing``,
each step copies the links' velocities on the device before its last substep;
a read runs one SAPIEN body-impulse query over the links that carry collision
shapes in every sub-scene (made on first use: PhysX's net normal impulse per
link in the last substep, which says which links touch; SAPIEN waits for its
stream here, the one host synchronisation of the read), fetches the link data
and incoming joint forces, derives each touching link's net force from them
(:class:`~.contact.ContactDerivation`) and gathers the requested bodies
(:func:`~.contact.gather_contact_forces`).

Not available on the GPU path (declared in the capabilities): body forces.
"""

from __future__ import annotations

import math
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import sapien
import torch
from sapien import physx

from simbackend.errors import SimBackendError

from .contact import ContactDerivation, gather_contact_forces, joint_frames
from .layout import Columns
from .paths import PhysxPath, scene_config
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


def restore_index(envs: torch.Tensor, env_rows: torch.Tensor, spare_rows: torch.Tensor) -> torch.Tensor:
    """``(N*A + A,)`` int32 row index for ``gpu_apply_*`` that re-applies the rows of ``envs`` and no other env's.

    ``gpu_apply_*`` takes an index whose length the host must know, while which
    envs diverged is known only on the device. So the index has a fixed length:
    entry ``n*A + a`` is env n's row of articulation a when ``envs[n]``, else
    the row of articulation a in the spare sub-scene (built for this, simulated
    by no env); the last A entries are the spare's rows themselves. Envs that
    are not restored are never written, and the spare is rewritten with its own
    pre-call state every call (it never drifts). No host synchronisation.

    Args:
        envs: ``(N,)`` bool, envs to restore.
        env_rows: ``(N, A)`` buffer rows of each env's articulations.
        spare_rows: ``(A,)`` buffer rows of the spare sub-scene's articulations.
    """
    picked = torch.where(envs[:, None], env_rows, spare_rows[None])  # (N, A)
    return torch.cat([picked.reshape(-1), spare_rows]).to(torch.int32)


class RowRestorer:
    """The GPU path's restore of diverged envs, sync-free: pre-call copies of the state buffers,
    masked writes, and the fixed-length row index of :func:`restore_index`.

    Pure torch on any device (the tests run it on CPU tensors).

    Args:
        buffers: the ``(R, ...)`` state buffers that ``gpu_apply_*`` reads: joint
            positions and velocities ``(R, D)``, root link data ``(R, 13)`` (views allowed).
        rows: ``(N, A)`` buffer rows of each env's articulations.
        spare_rows: ``(A,)`` buffer rows of the spare sub-scene.
    """

    def __init__(self, buffers: Sequence[torch.Tensor], rows: torch.Tensor, spare_rows: torch.Tensor):
        N, A = rows.shape
        dev = rows.device
        self.buffers = tuple(buffers)
        self.pre = tuple(torch.empty_like(b) for b in self.buffers)
        self.rows, self.spare_rows = rows, spare_rows
        #: env of every buffer row; the spare's rows (and any no env owns) count as env N
        self.env_of_row = torch.full((self.buffers[0].shape[0],), N, dtype=torch.long, device=dev)
        self.env_of_row[rows.reshape(-1)] = torch.arange(N, device=dev).repeat_interleave(A)
        #: ``(N + 1,)`` envs restored by the current call; entry N, the spare, always
        self.restored = torch.ones(N + 1, dtype=torch.bool, device=dev)
        #: ``(N*A + A,)`` int32, filled in place each call (PhysX reads this memory)
        self.index = torch.zeros(N * A + A, dtype=torch.int32, device=dev)

    def save(self) -> None:
        """Copy the buffers (current: the caller fetched them) as the pre-call state."""
        for pre, buf in zip(self.pre, self.buffers):
            pre.copy_(buf)

    def restore(self, envs: torch.Tensor) -> torch.Tensor:
        """Write the pre-call state into the rows of ``envs`` ``(N,)`` bool and the spare's; return
        :attr:`index`, the rows for ``gpu_apply_*``. Rows of other envs keep the buffers' values."""
        self.restored[:-1].copy_(envs)
        rows = self.restored[self.env_of_row]  # (R,)
        for buf, pre in zip(self.buffers, self.pre):
            buf.copy_(torch.where(rows.view(-1, *([1] * (buf.dim() - 1))), pre, buf))
        self.index.copy_(restore_index(envs, self.rows, self.spare_rows))
        return self.index


class GpuPhysx(PhysxPath):
    """One ``PhysxGpuSystem``: env n in sub-scene n (origin ``origins[n]``), plus one spare sub-scene.

    Args:
        plan: the build plan.
        num_envs: N.
        iterations: PhysX (position, velocity) solver iterations.
        tgs: TGS instead of PGS.
        device: the CUDA device.
        spacing: distance between sub-scene origins, m (None: :func:`default_spacing`).
    """

    def __init__(
        self,
        plan: Plan,
        num_envs: int,
        iterations: tuple[int, int],
        tgs: bool,
        device: torch.device,
        spacing: float | None,
    ):
        super().__init__(plan, num_envs)
        per_substep = plan.per_substep
        if per_substep:  # MuJoCo's forces and gravity compensation are applied per substep on the CPU path
            from simbackend.errors import ModelLoadError

            raise ModelLoadError(
                f"the sapien backend cannot build this model on the GPU: {per_substep[0]} is applied"
                " as a per-substep force, which the GPU path has not"
            )
        require_gpu_library()
        physx.enable_gpu()
        self.device = device
        with scene_config(plan.gravity, tgs):
            self.system = physx.PhysxGpuSystem(f"cuda:{device.index or 0}")
        self.systems = [self.system]
        self.system.timestep = plan.timestep
        grid = grid_origins(num_envs + 1, spacing or default_spacing(plan))  # slot N: the spare
        self.origins = grid[:num_envs]
        materials = MaterialCache()
        self.scenes, self.arts, self.comps = [], [], []
        for n in range(num_envs + 1):
            scene = sapien.Scene([self.system])
            self.system.set_scene_offset(scene, grid[n].astype(np.float32))
            arts, comps = build_scene(plan, scene, materials, iterations, place=False)
            self.scenes.append(scene)
            self.arts.append(arts)
            self.comps.append(comps)
        # the spare sub-scene: no env's, the target of restore_index's unused entries
        self._spare = (self.scenes.pop(), self.arts.pop(), self.comps.pop())
        self.cols = Columns.read(plan, self.arts[0], self.comps[0])
        self._set_drives()
        self.system.gpu_init()
        self.rows = np.array([[a.gpu_index for a in arts] for arts in self.arts], np.int64).reshape(num_envs, -1)
        s = self.system
        self._links = s.cuda_articulation_link_data.torch()  # (R, L, 13)
        self._qpos = s.cuda_articulation_qpos.torch()  # (R, D)
        self._qvel = s.cuda_articulation_qvel.torch()
        self._target_q = s.cuda_articulation_target_qpos.torch()
        self._target_v = s.cuda_articulation_target_qvel.torch()
        self._qf = s.cuda_articulation_qf.torch()
        self._qacc_buf = s.cuda_articulation_qacc.torch()
        dev = self._qpos.device
        self._rows_t = torch.as_tensor(self.rows, device=dev)  # (N, A)
        spare_rows = torch.as_tensor([a.gpu_index for a in self._spare[1]], dtype=torch.long, device=dev)
        self._restorer = RowRestorer((self._qpos, self._qvel, self._links[:, 0]), self._rows_t, spare_rows)
        self._index_array = sapien.pysapien.CudaArray(self._restorer.index)  # wrapped once, refilled in place
        self._keep: list = []  # index buffers PhysX may still be reading (freed two calls later)
        # hinge/slide joints: their rows (N, nsj) and dof columns (nsj,), for the drive buffers
        sj = np.flatnonzero(plan.joint_link[:, 0] >= 0)
        sj = sj[self.cols.joint_dof[sj] >= 0]
        self._sj = torch.as_tensor(sj, dtype=torch.long, device=dev)
        self._sj_rows = torch.as_tensor(self.rows[:, plan.joint_link[sj, 0]], device=dev)
        self._sj_cols = torch.as_tensor(self.cols.joint_dof[sj], device=dev)[None].expand_as(self._sj_rows)
        self._fresh = {"pose": False, "vel": False, "qpos": False, "qvel": False}
        #: the contact query (made on first use): SAPIEN's query, or None when no link has shapes
        self._contact_query: Any = None
        self._contact = ContactDerivation(plan, self.cols, joint_frames(plan, self.comps[0]), dev)
        self._contact_columns = torch.as_tensor(self._contact.columns, device=dev)
        K = self._contact.bodies.size
        #: ``(N, K, 3)`` the bodies' link velocities before the last substep (contact_sensing), ``(N, K)``
        #: their masses (fixed at gpu_init: the GPU path randomizes none) and the scenes' gravity
        self._v0 = torch.zeros((num_envs, K, 3), dtype=torch.float64, device=dev)
        bl = plan.body_link[self._contact.bodies]
        self._mass = (
            torch.as_tensor(
                [[float(self.comps[n][a][l].mass) for a, l in bl] for n in range(num_envs)], dtype=torch.float64
            )
            .reshape(num_envs, K)
            .to(dev)
        )
        self._gravity = torch.as_tensor(np.asarray(plan.gravity, np.float64), device=dev)
        self._link_rc = self._contact.link_rows(self._rows_t)  # (N, K) rows and columns of their links
        self._joint_forces: torch.Tensor | None = None  # PhysX's incoming joint force buffer (first use)
        self.system.gpu_update_articulation_kinematics()

    # ------------------------------------------------------------------
    # reads: fetch a buffer once per state
    # ------------------------------------------------------------------
    def _stale(self) -> None:
        for k in self._fresh:
            self._fresh[k] = False

    def link_data(self, body_ids=None, arts=None, velocities: bool = False, links=None) -> torch.Tensor:
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

    def contact_forces(self, body_ids: torch.Tensor) -> torch.Tensor:
        """``(N, B, 3)`` float64 net contact force on bodies ``body_ids`` (a device tensor) in every
        sub-scene's last substep, friction included (see the module docstring); whether an env has
        stepped since it was written is the engine's to apply."""
        d, n = self._contact, self.num_envs
        if not d.bodies.size:
            return gather_contact_forces(None, self._contact_columns, body_ids, n)
        if self._contact_query is None:
            links = [self.comps[e][a][l] for e in range(n) for a, l in self.plan.body_link[d.bodies]]
            self._contact_query = self.system.gpu_create_contact_body_impulse_query(links)
        self.system.gpu_query_contact_body_impulses(self._contact_query)
        impulses = self._contact_query.cuda_impulses.torch().reshape(n, -1, 3).to(torch.float64)
        dt = float(self.plan.timestep)
        jf = None
        if d.joint_arts.size:
            self.system.gpu_fetch_articulation_link_incoming_joint_forces()
            if self._joint_forces is None:
                self._joint_forces = self.system.cuda_articulation_link_incoming_joint_forces.torch()
            jf = self._joint_forces
        forces = d.forces(
            self._rows_t,
            self.link_data(velocities=True),
            self._v0,
            self._mass,
            self._gravity,
            jf,
            None,
            impulses / dt,
            (impulses != 0).any(-1),
            dt,
        )
        return gather_contact_forces(forces, self._contact_columns, body_ids, n)

    # ------------------------------------------------------------------
    # writes
    # ------------------------------------------------------------------
    def write_state(self, env_ids: np.ndarray, packed: dict) -> None:
        rows = packed["rows"]
        d = self._qpos.shape[1]
        if self.cols.has_dofs:
            self._qpos[rows] = packed["qpos"][:, :d].to(self._qpos.dtype)
            self._qvel[rows] = packed["qvel"][:, :d].to(self._qvel.dtype)
        self._links[rows, 0, :7] = packed["root_pose"].to(self._links.dtype)
        self._links[rows, 0, 7:13] = packed["root_vel"].to(self._links.dtype)
        owner = rows.to(torch.int32).contiguous()
        index = sapien.pysapien.CudaArray(owner)
        s = self.system
        s.gpu_apply_articulation_root_pose(index)
        s.gpu_apply_articulation_root_velocity(index)
        if self.cols.has_dofs:
            s.gpu_apply_articulation_qpos(index)
            s.gpu_apply_articulation_qvel(index)
        s.gpu_update_articulation_kinematics()
        # PhysX reads ``owner`` asynchronously: keep it alive for two more calls instead of waiting
        self._keep = (self._keep + [owner])[-2:]
        self._stale()

    # ------------------------------------------------------------------
    # the pieces of PhysxPath.step: no host synchronisation
    # ------------------------------------------------------------------
    @property
    def _rows_index(self) -> torch.Tensor:
        return self._rows_t

    def _save(self) -> None:
        """Copy the pre-call state (joint coordinates, root link data) into preallocated buffers."""
        self.link_data(velocities=True)
        self.art_qpos(), self.art_qvel()
        self._restorer.save()

    def _write_ctrl(self, drive: dict) -> None:
        if not self._sj.numel():
            return
        for key, buf in (("target", self._target_q), ("vel_target", self._target_v), ("force", self._qf)):
            buf[self._sj_rows, self._sj_cols] = drive[key][:, self._sj].to(buf.dtype)
        s = self.system
        s.gpu_apply_articulation_target_position()
        s.gpu_apply_articulation_target_velocity()
        s.gpu_apply_articulation_qf()

    def _substep(self, forces: tuple | None, joint_forces: Any = None, last: bool = False) -> None:
        if forces is not None or joint_forces is not None:
            raise SimBackendError("body forces and per-substep joint forces are not available on the GPU path")
        if last and self.contact_sensing and self._contact.bodies.size:
            if not self._fresh["vel"]:
                self.system.gpu_fetch_articulation_link_velocity()
            rows, cols = self._link_rc
            self._v0.copy_(self._links[rows, cols, 7:10])  # on the device: no host synchronisation
        self.system.step()
        self._stale()

    def _qacc(self) -> torch.Tensor:
        self.system.gpu_fetch_articulation_qacc()
        return self._qacc_buf

    def _restore(self, envs: torch.Tensor) -> None:
        """Masked device writes of the pre-call state into the rows of ``envs`` ``(N,)`` (and the
        spare's), then ``gpu_apply_*`` with :func:`restore_index`: no host synchronisation."""
        self.art_qpos(), self.art_qvel()  # the other rows' joint coordinates: current
        self._restorer.restore(envs)
        s, index = self.system, self._index_array
        s.gpu_apply_articulation_root_pose(index)
        s.gpu_apply_articulation_root_velocity(index)
        if self.cols.has_dofs:
            s.gpu_apply_articulation_qpos(index)
            s.gpu_apply_articulation_qvel(index)
        s.gpu_update_articulation_kinematics()
        self._fresh["pose"] = self._fresh["vel"] = False  # non-root links moved; qpos/qvel buffers are current

    def close(self) -> None:
        self._keep.clear()
        self._contact_query = None
        self._spare = None
        self.scenes.clear()
        self.arts.clear()
        self.comps.clear()
