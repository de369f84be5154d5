"""MuJoCo's own constraint forces for the model features PhysX lacks.

PhysX gives a joint one drive and has no soft equality constraints. Where a
model needs more - frictionloss on a joint whose drive is taken, joint,
connect and weld equalities - the CPU engine asks MuJoCo, before every
substep, for the force its solver gives those constraints in the state PhysX
is in, and applies it as joint forces (and root wrenches for free joints).

MuJoCo runs on a private copy of the compiled model that keeps only those
constraints (contacts, joint limits and the frictionloss PhysX already models
are disabled there). Per env and substep: ``mj_fwdPosition`` and
``mj_fwdVelocity`` on PhysX's ``qpos``/``qvel`` give the constraint rows,
their Jacobian, impedance, regulariser and reference acceleration;
``mj_fwdConstraint`` then solves them with MuJoCo's solver for the
unconstrained acceleration ``a0``.

``a0`` is what PhysX cannot say: it is taken from the previous substep, the
acceleration PhysX realised (``(qvel - qvel_last) / dt``) less what the last
constraint force added (``M^-1 qfrc_last``). Constraint forces thus lag
PhysX's other forces by one substep; at rest and in slow motion they are
MuJoCo's. After a fresh scene (``set_state``) the first substep has no
``a0`` and takes zero. MuJoCo's masses are the model's: randomized masses
change PhysX's response, not the constraint's inertia estimate.
"""

from __future__ import annotations

import copy

import mujoco
import numpy as np


class MujocoConstraints:
    """The constraint forces of :attr:`.plan.Plan.forced_friction` joints and the active
    equalities of ``m``, for ``num_envs`` envs.

    Args:
        m: the compiled model (not modified).
        forced_friction: joint ids whose frictionloss is MuJoCo's here (the others' is PhysX's
            saturating drive, or none).
        num_envs: N.
    """

    def __init__(self, m: mujoco.MjModel, forced_friction: np.ndarray, num_envs: int):
        mm = copy.deepcopy(m)
        off = mujoco.mjtDisableBit
        mm.opt.disableflags |= int(off.mjDSBL_CONTACT) | int(off.mjDSBL_LIMIT)
        keep = np.zeros(mm.nv, bool)
        keep[np.asarray(mm.jnt_dofadr)[np.asarray(forced_friction, np.int64)]] = True
        mm.dof_frictionloss[~keep] = 0.0
        mm.tendon_frictionloss[:] = 0.0
        self.model, self.dt = mm, float(m.opt.timestep)
        self.datas = [mujoco.MjData(mm) for _ in range(num_envs)]
        self.last = {"qvel": np.zeros((num_envs, mm.nv)), "qfrc": np.zeros((num_envs, mm.nv)),
                     "seen": np.zeros(num_envs, bool)}
        self._saved = {k: v.copy() for k, v in self.last.items()}

    def qfrc(self, qpos: np.ndarray, qvel: np.ndarray) -> np.ndarray:
        """``(N, nv)`` generalized constraint forces for the envs' ``(N, nq)``/``(N, nv)`` state."""
        mm, last = self.model, self.last
        out = np.zeros_like(qvel)
        inv_f = np.zeros(mm.nv)
        for n, d in enumerate(self.datas):
            d.qpos[:], d.qvel[:] = qpos[n], qvel[n]
            mujoco.mj_fwdPosition(mm, d)
            mujoco.mj_fwdVelocity(mm, d)
            if d.nefc == 0:
                continue
            if last["seen"][n]:
                mujoco.mj_solveM(mm, d, inv_f[None], last["qfrc"][n][None])
                a0 = (qvel[n] - last["qvel"][n]) / self.dt - inv_f
            else:
                a0 = np.zeros(mm.nv)
            d.qacc_smooth[:] = a0
            mujoco.mj_mulM(mm, d, d.qfrc_smooth, a0)
            mujoco.mj_fwdConstraint(mm, d)
            out[n] = d.qfrc_constraint
        last["qvel"], last["qfrc"], last["seen"] = qvel.copy(), out.copy(), np.ones_like(last["seen"])
        return out

    def save(self) -> None:
        """Keep the pre-call state of a step."""
        self._saved = {k: v.copy() for k, v in self.last.items()}

    def restore(self, envs: np.ndarray) -> None:
        """Envs ``envs`` ``(N,)`` bool get their pre-call state back."""
        for k, v in self.last.items():
            v[envs] = self._saved[k][envs]

    def forget(self, env_ids: np.ndarray) -> None:
        """Envs given a fresh scene have no last substep to estimate ``a0`` from."""
        self.last["qfrc"][env_ids] = 0.0
        self.last["seen"][env_ids] = False
