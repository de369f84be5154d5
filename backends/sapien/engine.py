"""The PhysX engine interface the backend drives, and what both paths share.

:class:`PhysxEngine` is the protocol between :class:`~.backend.SapienBackend`
and a physics path: :class:`~.cpu.CpuPhysx` (one CPU scene per env) and
:class:`~.gpu.GpuPhysx` (one GPU system, a sub-scene per env). Both hold the
state in PhysX's GPU buffer layout (:mod:`.layout`): link data ``(R, L, 13)``
and joint coordinates ``(R, D)``, rows indexed by ``rows[env, articulation]``.
The base class also builds the index tables read from the built
articulations, reads the model back, and sets the scene configuration.
"""

from __future__ import annotations

import abc
import contextlib
from typing import Any, Callable, Iterator, Optional

import numpy as np
from sapien import physx

from simbackend.math import quat_to_matrix
from simbackend.model_info import JOINT_HINGE, JOINT_SLIDE

from .plan import Plan

_FLT_MAX = float(np.finfo(np.float32).max)


@contextlib.contextmanager
def scene_config(gravity: np.ndarray, tgs: bool) -> Iterator[None]:
    """PhysX's scene config is process-global: set the model's gravity, the
    solver and enhanced determinism for the systems created inside, then restore it."""
    old = physx.get_scene_config()
    cfg = physx.get_scene_config()
    cfg.gravity = np.asarray(gravity, np.float32)
    cfg.enable_enhanced_determinism = True
    cfg.enable_tgs = tgs
    physx.set_scene_config(cfg)
    try:
        yield
    finally:
        physx.set_scene_config(old)


class PhysxEngine(abc.ABC):
    """One physics path. Subclasses build the scenes, then set:

    * ``rows`` ``(N, A)``: buffer row of env n's articulation a;
    * ``origins`` ``(N, 3)``: each env's origin in the physics scene;
    * ``systems``, ``comps`` (per env, per articulation, the link components
      in plan order), via :meth:`_index_from` the column tables.
    """

    systems: list
    comps: list
    rows: np.ndarray
    origins: np.ndarray

    def __init__(self, plan: Plan, num_envs: int):
        self.plan = plan
        self.num_envs = num_envs
        self.num_arts = len(plan.articulations)

    def _index_from(self, arts: list, comps: list) -> None:
        """Columns of links and dofs as PhysX numbers them, from one env's built articulations."""
        p = self.plan
        A = self.num_arts
        self.max_links = max((len(a.links) for a in p.articulations), default=0)
        self.link_col = np.full((A, max(self.max_links, 1)), -1, np.int64)
        self.dof_col = np.full((A, max(self.max_links, 1)), -1, np.int64)
        self.art_dofs = np.zeros(A, np.int64)
        for a, (art, links) in enumerate(zip(arts, comps)):
            active = [j.name for j in art.active_joints]
            self.art_dofs[a] = len(active)
            for l, comp in enumerate(links):
                self.link_col[a, l] = comp.index
                if comp.joint.name in active and p.articulations[a].links[l].joint >= 0:
                    self.dof_col[a, l] = active.index(comp.joint.name)
        self.max_dof = int(self.art_dofs.max(initial=0))
        self.floating = np.array([not art.fixed_root for art in p.articulations], bool)
        njnt = len(p.info.joint_names)
        self.joint_dof = np.full(njnt, -1, np.int64)
        for j in range(njnt):
            a, l = p.joint_link[j]
            if a >= 0:
                self.joint_dof[j] = self.dof_col[a, l]
        # PhysX's serialised scene state (PhysxCpuSystem.pack), per articulation in build order:
        # root pose (quat wxyz 4, pos 3), root centre-of-mass velocity (linear 3, angular 3, world),
        # qpos (d), qvel (d), drive targets (2d), float32
        sizes = 13 + 4 * self.art_dofs
        self.pack_size = int(sizes.sum())
        #: first column of each articulation in a serialised state
        self.pack_starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        motor = np.flatnonzero(p.motor_gear.any(0))
        self.motor_joints = {a: motor[p.joint_link[motor, 0] == a] for a in range(A)}

    # ------------------------------------------------------------------
    # the protocol
    # ------------------------------------------------------------------
    @abc.abstractmethod
    def link_data(self, body_ids: Optional[np.ndarray], arts: Optional[np.ndarray] = None,
                  velocities: bool = False) -> Any:
        """The ``(R, L, 13)`` link buffer, current for the links of ``body_ids`` (or every link of
        ``arts``): pose (pos 3, wxyz 4, scene frame) and, if ``velocities``, centre-of-mass linear
        and angular velocity (world). Paths may refresh more than asked."""

    @abc.abstractmethod
    def art_qpos(self) -> Any:
        """The ``(R, D)`` PhysX joint positions, current."""

    @abc.abstractmethod
    def art_qvel(self) -> Any:
        """The ``(R, D)`` PhysX joint velocities, current."""

    @abc.abstractmethod
    def write_state(self, env_ids: np.ndarray, packed: dict) -> None:
        """Write :meth:`.layout.Layout.pack_state` rows for sorted ``env_ids``; buffers become current."""

    @abc.abstractmethod
    def step(self, drive: dict, nsteps: int, forces: Optional[tuple], judge: Callable[[Any], Any],
             hold: Optional[Any] = None) -> Any:
        """Apply ``drive`` (:meth:`.layout.Layout.pack_ctrl`) and ``forces`` ``(bodies, (N, B, 3) force,
        torque)`` for ``nsteps`` substeps; then ``judge(states)`` (the contract's divergence rule on
        the reached state, ``(N,)``; ``states``: the serialised ``(N, pack_size)`` states where the
        path has them, else None) plus PhysX's own failures mark diverged envs, which, with the
        ``hold`` envs, get back their pre-call state. Returns diverged and not held ``(N,)``.
        Any exception leaves every env in its pre-call state."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the scenes."""

    def _set_drives(self, env_ids=None) -> None:
        """Drive stiffness, damping and force limit of every driven joint (see :class:`.plan.Plan`)."""
        p = self.plan
        for n in range(self.num_envs) if env_ids is None else env_ids:
            comps = self.comps[n]
            for j in p.drive_joints:
                a, l = p.joint_link[j]
                comps[a][l].joint.set_drive_properties(float(p.stiffness[j]), float(p.damping[j]),
                                                       float(min(p.force_limit[j], 3.0e38)), "force")

    # ------------------------------------------------------------------
    # model read-back (first env)
    # ------------------------------------------------------------------
    def body_comps(self) -> list:
        """Link component of every body (None for the world), first env."""
        return [None if a < 0 else self.comps[0][a][l] for a, l in self.plan.body_link]

    def body_masses(self, plan: Plan) -> np.ndarray:
        return np.array([0.0 if c is None else float(c.mass) for c in self.body_comps()])

    def gravity(self) -> np.ndarray:
        return np.asarray(self.systems[0].config.gravity, np.float64)

    def model_fields(self, plan: Plan, m) -> dict[str, np.ndarray]:
        info = plan.info
        comps = self.body_comps()
        nbody, njnt, nu = info.nbody, len(info.joint_names), info.nu
        mass = np.zeros(nbody)
        com = np.zeros((nbody, 3))
        inertia = np.zeros((nbody, 3, 3))
        for b, c in enumerate(comps):
            if c is None:
                continue
            mass[b] = c.mass
            cp = c.cmass_local_pose
            com[b] = cp.p
            r = quat_to_matrix(np.asarray(cp.q, np.float64))
            inertia[b] = r @ np.diag(np.asarray(c.inertia, np.float64)) @ r.T
        jrange = np.tile([-np.inf, np.inf], (njnt, 1)).astype(np.float64)
        for j in range(njnt):
            if info.joint_type[j] not in (JOINT_HINGE, JOINT_SLIDE):
                continue
            a, l = plan.joint_link[j]
            lim = np.asarray(self.comps[0][a][l].joint.limit, np.float64).reshape(2)
            jrange[j] = np.where(np.isfinite(lim) & (np.abs(lim) < 1e30), lim + plan.joint_offset[j], lim)
            jrange[j] = np.where(np.abs(jrange[j]) >= 1e30, np.copysign(np.inf, jrange[j]), jrange[j])
        force = np.tile([-np.inf, np.inf], (nu, 1)).astype(np.float64)
        for u in range(nu):
            j = int(info.actuator_joint[u])
            if info.actuator_kind[u] == "motor":
                force[u] = plan.motor_force_range[u]
                continue
            a, l = plan.joint_link[j]
            fl = float(self.comps[0][a][l].joint.force_limit)
            gear = abs(float(m.actuator_gear[u, 0])) or 1.0
            if fl < _FLT_MAX * 0.99:
                force[u] = (-fl / gear, fl / gear)
        return {
            "body_mass": mass, "body_com": com, "body_inertia": inertia, "joint_range": jrange,
            "actuator_ctrl_range": np.array(plan.ctrl_range, np.float64),
            "actuator_force_range": force,
            "timestep": np.array(float(self.systems[0].timestep)),
            "gravity": self.gravity(),
        }
