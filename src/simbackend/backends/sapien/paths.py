"""The two PhysX paths (CPU scenes, one GPU system) and what they share.

:class:`PhysxPath` is the interface between :class:`~.backend.SapienEngine`
and a physics path: :class:`~.cpu.CpuPhysx` (one CPU scene per env) and
:class:`~.gpu.GpuPhysx` (one GPU system, a sub-scene per env). Both hold the
state in PhysX's GPU buffer layout (:mod:`.layout`): link data ``(R, L, 13)``
and joint coordinates ``(R, D)``, rows ``rows[env, articulation]``, columns
given by :class:`~.layout.Columns`. The base class owns the step sequence
(save, drive, substeps, PhysX's own failure report) and :meth:`PhysxPath.revert`,
so both paths step and restore alike; the paths implement the pieces. It also
reads the model back from the first env and sets the scene configuration.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from sapien import physx

from simbackend.divergence import MAX_QVEL
from simbackend.math import quat_to_matrix
from simbackend.model_info import JOINT_HINGE, JOINT_SLIDE

from .layout import Columns
from .plan import Plan

#: the force limit PhysX drives get for "no limit" (finite: PhysX rejects inf)
NO_FORCE_LIMIT = 3.0e38
#: ``joint_forces(states) -> qfrc``: generalized forces ``(N, nv)`` (the contract's qvel layout) to add
#: before a substep, computed outside PhysX for the ``(N, pack_size)`` serialised CPU states PhysX is in
#: (delegated physics: :mod:`.mujoco_forces`); the per-substep hook of the CPU path
JointForces = Callable[[np.ndarray], np.ndarray]


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


def physx_failures(qacc: Any, rows: Any, timestep: float) -> Any:
    """``(N,)`` bool: envs whose last substep PhysX could not integrate.

    PhysX answers a force it cannot integrate (1e30 N, say) by zeroing the
    articulation's velocities and leaving its positions: a finite state that no
    threshold on qpos/qvel sees. Its joint accelerations keep the failure: a
    non-finite ``qacc``, or ``|qacc| dt > MAX_QVEL`` (one substep would take a
    velocity past the contract's bound), is PhysX's report of a failed step, as
    MuJoCo's bad-qacc warning is MuJoCo's.

    Args:
        qacc: ``(R, D)`` joint accelerations per buffer row (padding zeros),
            numpy or torch.
        rows: ``(N, A)`` buffer rows of each env's articulations (same kind and device).
        timestep: one substep, s.

    Returns:
        numpy for numpy input, a tensor on ``qacc``'s device for torch (no host read).
    """
    bad_row = (~(abs(qacc) * timestep <= MAX_QVEL)).any(1)  # NaN compares false: caught
    return bad_row[rows].any(1)


class PhysxPath(abc.ABC):
    """One physics path over ``num_envs`` envs of one plan.

    Subclasses build the scenes, then set:

    * ``rows`` ``(N, A)`` host int64: buffer row of env n's articulation a;
    * ``origins`` ``(N, 3)``: each env's origin in the physics scene;
    * ``cols``: the :class:`~.layout.Columns` read from the built articulations;
    * ``systems``, ``arts[n][a]``, ``comps[n][a][l]`` (link components in plan order).

    and implement the reads, :meth:`write_state`, :meth:`close` and the pieces
    of :meth:`step` and :meth:`revert` (:meth:`_save`, :meth:`_write_ctrl`,
    :meth:`_substep`, :meth:`_serialised`, :meth:`_qacc`, :meth:`_restore`).
    Masks are numpy on the CPU path and device bool tensors on the GPU path.
    """

    systems: list
    arts: list
    comps: list
    rows: np.ndarray
    origins: np.ndarray
    cols: Columns

    def __init__(self, plan: Plan, num_envs: int):
        self.plan = plan
        self.num_envs = num_envs
        self.num_arts = len(plan.articulations)

    # ------------------------------------------------------------------
    # reads
    # ------------------------------------------------------------------
    @abc.abstractmethod
    def link_data(
        self,
        body_ids: np.ndarray | None,
        arts: np.ndarray | None = None,
        velocities: bool = False,
        links: np.ndarray | None = None,
    ) -> Any:
        """The ``(R, L, 13)`` link buffer (torch), current for the links of ``body_ids`` (host ids,
        or None), every link of articulations ``arts`` and the ``(A, Lmax)`` bool plan links
        ``links``: pose (pos 3 in the scene frame, wxyz 4) and, if ``velocities``, centre-of-mass
        linear and angular velocity (world). A path may refresh more than asked."""

    @abc.abstractmethod
    def art_qpos(self) -> Any:
        """The ``(R, D)`` PhysX joint positions (torch), current."""

    @abc.abstractmethod
    def art_qvel(self) -> Any:
        """The ``(R, D)`` PhysX joint velocities (torch), current."""

    # ------------------------------------------------------------------
    # writes
    # ------------------------------------------------------------------
    @abc.abstractmethod
    def write_state(self, env_ids: np.ndarray, packed: dict) -> None:
        """Write the state of sorted host ``env_ids`` from :meth:`.layout.Layout.pack_state`'s rows
        (``qpos``/``qvel`` ``(n*A, D)``, ``root_pose (n*A, 7)``, ``root_vel (n*A, 6)``, ``rows (n*A,)``);
        every buffer reads the new state afterwards. The CPU path also clears their contact and
        broad-phase caches (fresh scenes), so that a replay from the same state is bit-identical."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the scenes."""

    # ------------------------------------------------------------------
    # the step, the same sequence on both paths
    # ------------------------------------------------------------------
    def step(self, drive: dict, nsteps: int, forces: tuple | None, joint_forces: JointForces | None = None) -> Any:
        """Advance every env ``nsteps`` substeps; return the ``(N,)`` envs PhysX failed (:func:`physx_failures`).

        Args:
            drive: :meth:`.layout.Layout.pack_ctrl`'s ``target``/``vel_target``/``force`` ``(N, njnt)``.
            nsteps: substeps.
            forces: ``None`` or ``(bodies (B,) host ids, force (N, B, 3), torque (N, B, 3))``, world
                frame at body origins, applied in every substep.
            joint_forces: the per-substep hook for forces computed outside PhysX (CPU path), or ``None``.

        Every env's pre-call state is kept first, for :meth:`revert`; afterwards
        :attr:`reached` holds the serialised states reached (CPU path) or ``None``.
        """
        self._saved = False
        self._save()
        self._saved = True
        self.reached = None
        self._write_ctrl(drive)
        for i in range(nsteps):
            self._substep(forces, joint_forces, i == nsteps - 1)
        self.reached = self._serialised()
        return physx_failures(self._qacc(), self._rows_index, self.plan.timestep)

    def revert(self, envs: Any) -> bool:
        """Envs ``envs`` ``(N,)`` bool (numpy on the CPU path, a device tensor on the GPU path) get back
        the state they had before the last :meth:`step`; buffers stay consistent. After a step that
        raised before it had kept the pre-call state, nothing has changed and nothing is done.
        Returns whether anything was restored."""
        if self._saved:
            self._restore(envs)
        return self._saved

    #: the ``(N, pack_size)`` serialised states the last step reached (CPU path), else ``None``
    reached: np.ndarray | None = None
    #: whether contact forces are read (the engine's ``contact_sensing`` option): the last substep of
    #: each step keeps the links' velocities and applied forces from before it (:mod:`.contact`)
    contact_sensing = False
    #: whether the pre-call state of the last step is kept (a revert has something to restore)
    _saved = False

    @property
    def _rows_index(self) -> Any:
        """``rows`` as :func:`physx_failures` indexes the path's ``_qacc()`` with it."""
        return self.rows

    @abc.abstractmethod
    def _save(self) -> None:
        """Keep every env's pre-call state."""

    @abc.abstractmethod
    def _write_ctrl(self, drive: dict) -> None:
        """Set drive targets and joint forces from ``drive`` (see :meth:`step`)."""

    @abc.abstractmethod
    def _substep(self, forces: tuple | None, joint_forces: JointForces | None, last: bool = False) -> None:
        """Apply ``forces`` and ``joint_forces`` (see :meth:`step`) and advance every env one substep;
        ``last``: the call's last substep, whose contact forces are read (:attr:`contact_sensing`: keep
        what :mod:`.contact` needs from before it)."""

    def _serialised(self) -> np.ndarray | None:
        """The ``(N, pack_size)`` serialised states reached, where the path has them (CPU), else None."""
        return None

    @abc.abstractmethod
    def _qacc(self) -> Any:
        """``(R, D)`` joint accelerations of the last substep (numpy on CPU, device tensor on GPU)."""

    @abc.abstractmethod
    def _restore(self, envs: Any) -> None:
        """Put envs ``envs`` ``(N,)`` bool back in their pre-call state (every env after an exception);
        buffers stay consistent."""

    #: per-env drive tables ``stiffness``/``damping`` ``(N, njnt)`` once gains or damping are randomized
    env_drives: dict | None = None

    def _set_drives(self, env_ids: Any | None = None) -> None:
        """Drive stiffness, damping and force limit of every driven joint (see :class:`.plan.Plan`;
        per env once randomized) in envs ``env_ids`` (default: every env)."""
        p = self.plan
        per_env = self.env_drives
        joints = (
            p.drive_joints
            if per_env is None
            else np.flatnonzero(
                (per_env["stiffness"] > 0).any(0)
                | (per_env["damping"] > 0).any(0)
                | (p.stiffness > 0)
                | (p.damping > 0)
            )
        )
        for n in range(self.num_envs) if env_ids is None else env_ids:
            comps = self.comps[n]
            k = p.stiffness if per_env is None else per_env["stiffness"][n]
            d = p.drive_damping(k, p.damping if per_env is None else per_env["damping"][n])
            for j in joints:
                a, l = p.joint_link[j]
                comps[a][l].joint.set_drive_properties(
                    float(k[j]), float(d[j]), float(min(p.force_limit[j], NO_FORCE_LIMIT)), "force"
                )

    def set_drives_of(self, env_ids: Any) -> None:
        """Apply the (per-env) drive tables to envs ``env_ids`` (domain randomization)."""
        self._set_drives(env_ids)

    # ------------------------------------------------------------------
    # model read-back (first env)
    # ------------------------------------------------------------------
    def body_comps(self) -> list:
        """``(nbody,)`` link component of every body in the first env (None for the world)."""
        return [None if a < 0 else self.comps[0][a][l] for a, l in self.plan.body_link]

    def body_masses(self) -> np.ndarray:
        """``(nbody,)`` link masses PhysX holds, kg (0 for the world)."""
        return np.array([0.0 if c is None else float(c.mass) for c in self.body_comps()])

    def gravity(self) -> np.ndarray:
        """``(3,)`` the scenes' gravity, m/s^2."""
        return np.asarray(self.systems[0].config.gravity, np.float64)

    def model_fields(self, m: Any) -> dict[str, np.ndarray]:
        """The contract's ``model_fields`` read from the first env's PhysX objects (``m``: the compiled MjModel)."""
        plan = self.plan
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
            if u in plan.mujoco_actuators:  # MuJoCo computes its force: the model's range
                if m.actuator_forcelimited[u]:
                    force[u] = m.actuator_forcerange[u]
                continue
            if info.actuator_kind[u] == "motor":
                force[u] = plan.motor_force_range[u]
                continue
            a, l = plan.joint_link[j]
            fl = float(self.comps[0][a][l].joint.force_limit)
            gear = abs(float(m.actuator_gear[u, 0])) or 1.0
            if fl < NO_FORCE_LIMIT * 0.99:
                force[u] = (-fl / gear, fl / gear)
        return {
            "body_mass": mass,
            "body_com": com,
            "body_inertia": inertia,
            "joint_range": jrange,
            "actuator_ctrl_range": np.array(plan.ctrl_range, np.float64),
            "actuator_force_range": force,
            "timestep": np.array(float(self.systems[0].timestep)),
            "gravity": self.gravity(),
        }
