"""Delegated physics: MuJoCo's own forces for the model features PhysX lacks.

PhysX gives a joint one drive and has no soft equality constraints, tendons
that follow MuJoCo's laws, or fluid. Where a model needs them, the CPU path
asks MuJoCo, before every substep, for the forces it would apply in the state
PhysX is in, and applies them as joint forces (and root wrenches for free
joints) through its per-substep hook (:data:`.paths.JointForces`). The engine
declares every such element in ``capabilities.delegated`` (a parity figure on
one partly compares MuJoCo with itself), and ``sapien={"delegate": False}``
refuses such models instead (:attr:`.plan.Plan.delegated`). :class:`MujocoForces`
is always present; on a model that needs none of it, it holds nothing and
every call returns at once.

* constraint forces, from MuJoCo's solver: frictionloss on joints whose
  PhysX drive is taken, equalities (joint, tendon, connect, weld), tendon
  frictionloss and tendon limits;
* passive forces: tendon springs and dampers, fluid forces;
* the forces of actuators PhysX has no drive for (:func:`.plan.mujoco_actuators`:
  other gain/bias laws, tendon, site and slider-crank transmissions, free
  joints; motors on fixed tendons reach their joints through the coefficients).

MuJoCo runs on a private copy of the compiled model that keeps only those
(contacts, joint limits, joint springs and dampers, gravity compensation,
the frictionloss PhysX models as a drive and the other actuators are PhysX's
and are removed there). Per env and substep: ``mj_fwdPosition`` and
``mj_fwdVelocity`` on PhysX's ``qpos``/``qvel`` give the passive forces and
the constraint rows (Jacobian, impedance, regulariser, reference
acceleration), ``mj_fwdActuation`` the actuator forces, and
``mj_fwdConstraint`` solves the rows with MuJoCo's solver for the
unconstrained acceleration ``a0``.

``a0`` is what PhysX cannot say: it is the acceleration PhysX realised in the
previous substep (``(qvel - qvel_last) / dt``) less what the forces given
then added (``M^-1 qfrc_last``), plus what the passive and actuator forces
of now add. Constraint forces thus lag PhysX's own forces (contacts, drives,
gravity) by one substep; at rest and in slow motion they are MuJoCo's. After
a fresh scene (``set_state``) the first substep has no previous one and takes
zero for PhysX's part. That memory of the previous substep is part of the
engine's snapshot rows (:meth:`MujocoForces.memory`), so a restored snapshot
continues as the original did. Randomized masses, centres of mass, inertias and
armature are written into the private model per env, so MuJoCo's mass matrix
is the one PhysX holds (with MuJoCo's derived constants recomputed, as the
MuJoCo backend does).
"""

from __future__ import annotations

import copy

import mujoco
import numpy as np


class MujocoForces:
    """MuJoCo's forces for what a plan leaves to it (:attr:`.plan.Plan.delegated`), for ``num_envs``
    envs: constraint forces (frictionloss of ``plan.forced_friction`` joints, active equalities,
    tendon friction and limits), passive forces (tendon springs and dampers, fluid forces) and the
    forces of ``plan.mujoco_actuators`` (set :meth:`set_ctrl` before a step).

    Args:
        m: the compiled model (not modified).
        plan: the build plan.
        num_envs: N.

    Attributes:
        elements: the delegated elements, one line each (``capabilities.delegated``).
        active: whether there is anything to compute (``False``: every call returns at once).
    """

    def __init__(self, m: mujoco.MjModel, plan, num_envs: int):
        self.elements: tuple[str, ...] = tuple(plan.delegated)
        self.active = bool(self.elements)
        self.num_envs, self.nv = num_envs, int(m.nv)
        self.dt = float(m.opt.timestep)
        self.ctrl = np.zeros((num_envs, m.nu))
        #: what the solve remembers of the previous substep, per env (part of the engine's snapshots)
        self.last = {
            "qvel": np.zeros((num_envs, m.nv)),
            "qfrc": np.zeros((num_envs, m.nv)),
            "seen": np.zeros(num_envs, bool),
        }
        self._saved = {k: v.copy() for k, v in self.last.items()}
        if not self.active:
            return
        mm = copy.deepcopy(m)
        mm.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_CONTACT)
        mm.jnt_limited[:] = 0  # PhysX keeps joint limits; tendon limits stay MuJoCo's
        keep = np.zeros(mm.nv, bool)
        keep[np.asarray(mm.jnt_dofadr)[np.asarray(plan.forced_friction, np.int64)]] = True
        mm.dof_frictionloss[~keep] = 0.0
        mm.jnt_stiffness[:] = 0.0  # joint springs, dampers and gravity compensation are PhysX's
        mm.dof_damping[:] = 0.0
        mm.body_gravcomp[:] = 0.0
        others = np.setdiff1d(np.arange(mm.nu), plan.mujoco_actuators)
        mm.actuator_gear[others] = 0.0
        self.model = mm
        #: each env's private model: the shared one until domain randomization gives an env its own
        self.models = [mm] * num_envs
        self.actuated = bool(plan.mujoco_actuators.size)
        kinds = np.array([plan.info.actuator_kind[a] for a in plan.mujoco_actuators], dtype=object)
        #: the servos among the actuators MuJoCo computes: (ids, is_position)
        self._servos = (plan.mujoco_actuators[kinds != "motor"], kinds[kinds != "motor"] == "position")
        self._com0 = np.array(m.body_ipos, np.float64)
        self.datas = [mujoco.MjData(mm) for _ in range(num_envs)]

    def _own(self, n: int) -> mujoco.MjModel:
        """Env ``n``'s own private model (copied from the shared one the first time)."""
        if self.models[n] is self.model:
            self.models[n] = copy.deepcopy(self.model)
        return self.models[n]

    def set_gains(self, kp: np.ndarray, kv: np.ndarray) -> None:
        """Per-env servo gains ``(N, nu)`` (domain randomization) of the actuators MuJoCo computes."""
        if not self.active:
            return
        ids, position = self._servos
        if not ids.size:
            return
        for n in range(len(self.models)):
            mm = self._own(n)
            p, v = np.asarray(kp[n], np.float64)[ids], np.asarray(kv[n], np.float64)[ids]
            mm.actuator_gainprm[ids, 0] = np.where(position, p, v)
            mm.actuator_biasprm[ids, 1] = np.where(position, -p, 0.0)
            mm.actuator_biasprm[ids, 2] = -v

    #: randomizable model fields that change MuJoCo's mass matrix: (contract field, MjModel field)
    INERTIA_FIELDS = (
        ("body_mass", "body_mass"),
        ("body_com", "body_ipos"),
        ("body_inertia", "body_inertia"),
        ("dof_armature", "dof_armature"),
    )

    def set_inertia(self, values: dict) -> None:
        """Per-env randomized masses, centres of mass, inertias and armature (``values``: field ->
        ``(N, ...)`` table, :class:`.randomize.EnvParams`' ``values``) in each env's private model,
        with MuJoCo's derived constants recomputed (``mj_setConst``), as the MuJoCo backend does:
        MuJoCo's mass matrix is then the one PhysX holds for that env."""
        fields = [
            (mine, np.asarray(values[field], np.float64)) for field, mine in self.INERTIA_FIELDS if field in values
        ]
        if not fields or not self.active:
            return
        for n, d in enumerate(self.datas):
            mm = self._own(n)
            for name, table in fields:
                getattr(mm, name)[:] = table[n]
            # a body compiled as "simple" has its centre of mass at its frame; one moved off it no longer is
            moved = np.flatnonzero((np.asarray(mm.body_ipos) != self._com0).any(1))
            mm.body_simple[moved] = 0
            mm.body_sameframe[moved] = 0
            mujoco.mj_setConst(mm, d)

    def set_ctrl(self, ctrl: np.ndarray) -> None:
        """The step's ``(N, nu)`` ctrl, for the actuators MuJoCo computes."""
        if self.active:
            self.ctrl[:] = ctrl

    def qfrc(self, qpos: np.ndarray, qvel: np.ndarray) -> np.ndarray:
        """``(N, nv)`` generalized forces for the envs' ``(N, nq)``/``(N, nv)`` state."""
        last = self.last
        out = np.zeros_like(qvel)
        inv = np.zeros((1, self.model.nv))
        for n, (mm, d) in enumerate(zip(self.models, self.datas)):
            d.qpos[:], d.qvel[:] = qpos[n], qvel[n]
            mujoco.mj_fwdPosition(mm, d)
            mujoco.mj_fwdVelocity(mm, d)
            explicit = d.qfrc_passive.copy()
            if self.actuated:
                d.ctrl[:] = self.ctrl[n]
                mujoco.mj_fwdActuation(mm, d)
                explicit += d.qfrc_actuator
            if d.nefc:
                # the acceleration without the forces given here: PhysX's last one less what the
                # last forces added; then the explicit forces of now are added to it
                a0 = np.zeros(mm.nv)
                if last["seen"][n]:
                    mujoco.mj_solveM(mm, d, inv, (last["qfrc"][n])[None])
                    a0 = (qvel[n] - last["qvel"][n]) / self.dt - inv[0]
                mujoco.mj_solveM(mm, d, inv, explicit[None])
                d.qacc_smooth[:] = a0 + inv[0]
                mujoco.mj_mulM(mm, d, d.qfrc_smooth, d.qacc_smooth)
                mujoco.mj_fwdConstraint(mm, d)
                explicit += d.qfrc_constraint
            out[n] = explicit
        last["qvel"], last["qfrc"], last["seen"] = qvel.copy(), out.copy(), np.ones_like(last["seen"])
        return out

    def save(self) -> None:
        """Keep the pre-call state of a step."""
        if self.active:
            self._saved = {k: v.copy() for k, v in self.last.items()}

    def restore(self, envs: np.ndarray) -> None:
        """Envs ``envs`` ``(N,)`` bool get their pre-call state back."""
        if self.active:
            for k, v in self.last.items():
                v[envs] = self._saved[k][envs]

    def forget(self, env_ids: np.ndarray) -> None:
        """Envs given a fresh scene have no last substep to estimate ``a0`` from."""
        self.last["qfrc"][env_ids] = 0.0
        self.last["seen"][env_ids] = False

    # ------------------------------------------------------------------
    # snapshots: the memory of the previous substep
    # ------------------------------------------------------------------
    @property
    def memory_width(self) -> int:
        """Columns of :meth:`memory`: the last substep's qvel (nv), forces (nv) and whether there was one (1)."""
        return 2 * self.nv + 1

    def memory(self, env_ids: np.ndarray) -> np.ndarray:
        """``(n, memory_width)`` float64 memory of envs ``env_ids`` (exact: float64 values)."""
        last = self.last
        return np.concatenate(
            [last["qvel"][env_ids], last["qfrc"][env_ids], last["seen"][env_ids, None].astype(np.float64)], axis=1
        )

    def load_memory(self, env_ids: np.ndarray, rows: np.ndarray) -> None:
        """Restore :meth:`memory` rows ``(n, memory_width)`` into envs ``env_ids``."""
        nv = self.nv
        self.last["qvel"][env_ids] = rows[:, :nv]
        self.last["qfrc"][env_ids] = rows[:, nv : 2 * nv]
        self.last["seen"][env_ids] = rows[:, 2 * nv] != 0
