"""MuJoCo's soft-constraint laws, applied by the engine as forces where PhysX has no counterpart.

PhysX gives a joint one drive and has no soft equality constraints. Where a
model needs more (frictionloss on a joint whose drive is taken, joint
equalities), the CPU engine applies the force MuJoCo's solver would give that
one constraint, before every substep. MuJoCo solves, per constraint row,

    f = (aref - J a0) / (A + R),    aref = -b (J v) - k d r

with ``r`` the violation, ``J v`` its rate, ``a0`` the acceleration without
the constraint, ``b``/``k`` from ``solref``, the impedance ``d`` from
``solimp`` at ``r``, ``A = J M^-1 J'`` and the regulariser
``R = (1 - d) / d * diag`` (``diag``: MuJoCo's ``invweight0`` approximation).
Frictionloss clamps ``f`` to the friction limit; equalities leave it free.

PhysX does not give ``a0``: each row takes it from the previous substep,
``J a0 = J acc - A f_last`` (the acceleration PhysX reached less what the
row's own last force added), with ``A`` approximated by ``invweight0``. Each
substep is then one step of a fixed-point iteration whose fixed point is
MuJoCo's ``f`` for the current ``aref`` and ``a0`` (it converges while the
true ``A`` is below twice the estimate plus ``R``); a row's steady state is
MuJoCo's whatever the estimate.

Pure numpy, no sapien: the laws are built from the compiled model and
evaluated over ``(N, ...)`` batches of envs.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np


def reference_gains(m: mujoco.MjModel, solref: np.ndarray, solimp: np.ndarray) -> tuple[float, float]:
    """``(k, b)`` of MuJoCo's reference acceleration for ``solref`` ``(2,)`` and ``solimp`` ``(5,)``:
    ``(timeconst, dampratio)`` gives ``b = 2 / (dmax tc)``, ``k = 1 / (dmax tc dampratio)^2``
    (``tc`` at least two timesteps unless refsafe is disabled); non-positive values are direct
    ``(-stiffness, -damping)``: ``k = -solref[0] / dmax^2``, ``b = -solref[1] / dmax``."""
    tc, ratio = float(solref[0]), float(solref[1])
    dmax = float(np.clip(solimp[1], 1e-4, 0.9999))
    if tc > 0:
        if not m.opt.disableflags & int(mujoco.mjtDisableBit.mjDSBL_REFSAFE):
            tc = max(tc, 2.0 * float(m.opt.timestep))
        return 1.0 / (dmax * dmax * tc * tc * ratio * ratio), 2.0 / (dmax * tc)
    return -tc / (dmax * dmax), -ratio / dmax


def impedance(solimp: np.ndarray, r: np.ndarray) -> np.ndarray:
    """MuJoCo's impedance ``d(r)`` (elementwise): from ``dmin`` at ``r = 0`` to ``dmax`` at
    ``|r| >= width`` along the sigmoid of ``(midpoint, power)``; ``solimp`` is ``(..., 5)`` or ``(5,)``."""
    s = np.asarray(solimp, np.float64)
    dmin, dmax, width, mid, power = (np.clip(s[..., 0], 1e-4, 0.9999), np.clip(s[..., 1], 1e-4, 0.9999),
                                     s[..., 2], s[..., 3], s[..., 4])
    x = np.clip(np.abs(r) / np.maximum(width, 1e-10), 0.0, 1.0)
    lower = x ** power / mid ** (power - 1)
    upper = 1.0 - (1.0 - x) ** power / (1.0 - mid) ** (power - 1)
    y = np.where(x <= mid, lower, upper)
    y = np.where(power == 1, x, y)
    return np.where(width <= 0, dmax, dmin + y * (dmax - dmin))


@dataclass
class JointFriction:
    """MuJoCo's frictionloss on ``k`` joints, each row ``f = clip(-d/diag (b v + a0), +-limit)``.

    ``joints`` ``(k,)`` MuJoCo joint ids; ``limit``, ``b``, ``d`` (impedance at zero violation)
    and ``diag`` (the dof's ``invweight0``) ``(k,)``.
    """

    joints: np.ndarray
    limit: np.ndarray
    b: np.ndarray
    d: np.ndarray
    diag: np.ndarray

    @classmethod
    def of(cls, m: mujoco.MjModel, joints: list[int], limits: list[float]) -> "JointFriction":
        dofs = np.asarray(m.jnt_dofadr, np.int64)[np.asarray(joints, np.int64)]
        b = np.array([reference_gains(m, m.dof_solref[d], m.dof_solimp[d])[1] for d in dofs])
        d = impedance(np.asarray(m.dof_solimp)[dofs], np.zeros(len(dofs)))
        return cls(np.asarray(joints, np.int64), np.asarray(limits, np.float64), b, d,
                   np.asarray(m.dof_invweight0, np.float64)[dofs])

    def force(self, v: np.ndarray, acc: np.ndarray, last: np.ndarray) -> np.ndarray:
        """``(N, k)`` forces from joint velocities ``v`` and last-substep accelerations ``acc``
        ``(N, k)`` and this law's forces of that substep, ``last``."""
        free = acc - self.diag * last
        return np.clip(-(self.d / self.diag) * (self.b * v + free), -self.limit, self.limit)


@dataclass
class JointEquality:
    """MuJoCo's joint equalities: ``q1 - q1_0 = poly(q2 - q2_0)`` (``poly(x) = sum c_i x^i``,
    ``i < 5``), or ``q1 - q1_0 = c_0`` without a second joint.

    Per row: ``joint1``/``joint2`` (``-1``: none) MuJoCo ids, ``coef`` ``(k, 5)``, ``k``/``b``
    (reference gains), ``solimp`` ``(k, 5)`` and ``diag`` (sum of the two dofs' ``invweight0``,
    MuJoCo's regulariser base). Joint coordinates are relative to ``qpos0`` (PhysX's zero).
    """

    names: list[str]
    joint1: np.ndarray
    joint2: np.ndarray
    coef: np.ndarray
    k: np.ndarray
    b: np.ndarray
    solimp: np.ndarray
    diag: np.ndarray
    inv1: np.ndarray
    inv2: np.ndarray

    @classmethod
    def of(cls, m: mujoco.MjModel, eqs: list[int], names: list[str]) -> "JointEquality":
        e = np.asarray(eqs, np.int64)
        j1 = np.asarray(m.eq_obj1id, np.int64)[e]
        j2 = np.asarray(m.eq_obj2id, np.int64)[e]
        inv = np.asarray(m.dof_invweight0, np.float64)
        inv1 = inv[np.asarray(m.jnt_dofadr)[j1]]
        inv2 = np.where(j2 >= 0, inv[np.asarray(m.jnt_dofadr)[np.maximum(j2, 0)]], 0.0)
        gains = np.array([reference_gains(m, m.eq_solref[i], m.eq_solimp[i]) for i in e]).reshape(-1, 2)
        return cls(names, j1, j2, np.array(m.eq_data[e, :5], np.float64), gains[:, 0], gains[:, 1],
                   np.array(m.eq_solimp[e], np.float64), inv1 + inv2, inv1, inv2)

    def force(self, q1: np.ndarray, v1: np.ndarray, a1: np.ndarray, q2: np.ndarray, v2: np.ndarray,
              a2: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(f1, f2)`` ``(N, k)``: the joint forces on joint1 and joint2 from their coordinates,
        velocities and last-substep accelerations ``(N, k)`` (zeros where there is no joint2) and
        the rows' forces ``last`` ``(N, k)`` of that substep (``f1``)."""
        c = self.coef
        powers = np.stack([q2 ** i for i in range(5)], -1)                    # (N, k, 5)
        slope = np.sum(c[:, 1:] * np.arange(1, 5) * powers[..., :4], -1)      # d poly / d q2
        r = q1 - np.sum(c * powers, -1)
        d = impedance(self.solimp[None], r)
        jv = v1 - slope * v2
        A = self.inv1 + slope * slope * self.inv2
        free = (a1 - slope * a2) - A * last
        aref = -self.b * jv - self.k * d * r
        f = (aref - free) / (A + (1.0 - d) / d * self.diag)
        return f, -slope * f


class JointForces:
    """The joint forces of a plan's laws (:class:`JointFriction`, :class:`JointEquality`) over
    ``num_envs`` envs, and the state their next evaluation needs (each row's last force).

    Joint columns are gathered from the PhysX ``(N, D)`` arrays of the articulations
    :attr:`arts` into one flat ``(N, W + 1)`` array whose last column is zero (the
    missing second joint of a one-joint equality).
    """

    def __init__(self, plan, cols, num_envs: int):
        self.friction: JointFriction | None = plan.friction
        self.equality: JointEquality | None = plan.joint_equality
        joints: list[int] = []
        if self.friction is not None:
            joints += self.friction.joints.tolist()
        if self.equality is not None:
            joints += self.equality.joint1.tolist() + [j for j in self.equality.joint2.tolist() if j >= 0]
        self.active = bool(joints)
        self.needs_qpos = self.equality is not None
        self.arts = sorted({int(plan.joint_link[j, 0]) for j in joints})
        widths = [int(cols.art_dofs[a]) for a in self.arts]
        offset = dict(zip(self.arts, np.cumsum([0] + widths[:-1]).tolist()))
        self._split = np.cumsum(widths)[:-1]
        self._zero = int(sum(widths))

        def column(j: int) -> int:
            return self._zero if j < 0 else offset[int(plan.joint_link[j, 0])] + int(cols.joint_dof[j])

        fr, eq = self.friction, self.equality
        self._fcol = np.array([column(j) for j in fr.joints], np.int64) if fr is not None else None
        self._c1 = np.array([column(j) for j in eq.joint1], np.int64) if eq is not None else None
        self._c2 = np.array([column(j) for j in eq.joint2], np.int64) if eq is not None else None
        self.last = {"friction": np.zeros((num_envs, 0 if fr is None else len(fr.joints))),
                     "equality": np.zeros((num_envs, 0 if eq is None else len(eq.joint1)))}
        self._saved = {k: v.copy() for k, v in self.last.items()}

    def _flat(self, per_art: dict) -> np.ndarray:
        parts = [np.asarray(per_art[a], np.float64) for a in self.arts]
        return np.concatenate(parts + [np.zeros((parts[0].shape[0], 1))], 1)

    def step(self, qpos: dict | None, qvel: dict, qacc: dict) -> dict:
        """Joint forces ``{articulation: (N, D)}`` from each articulation's ``(N, D)`` joint
        positions (needed by equalities only), velocities and last-substep accelerations."""
        v, acc = self._flat(qvel), self._flat(qacc)
        extra = np.zeros_like(v)
        if self.friction is not None:
            f = self.friction.force(v[:, self._fcol], acc[:, self._fcol], self.last["friction"])
            self.last["friction"] = f
            np.add.at(extra, (slice(None), self._fcol), f)
        if self.equality is not None:
            q = self._flat(qpos)
            c1, c2 = self._c1, self._c2
            f1, f2 = self.equality.force(q[:, c1], v[:, c1], acc[:, c1], q[:, c2], v[:, c2], acc[:, c2],
                                         self.last["equality"])
            self.last["equality"] = f1
            np.add.at(extra, (slice(None), c1), f1)
            np.add.at(extra, (slice(None), c2), f2)
        parts = np.split(extra[:, :-1], self._split, axis=1)
        return dict(zip(self.arts, parts))

    def save(self) -> None:
        """Keep the pre-call state of a step."""
        self._saved = {k: v.copy() for k, v in self.last.items()}

    def restore(self, envs: np.ndarray) -> None:
        """Envs ``envs`` ``(N,)`` bool get their pre-call state back."""
        for k, v in self.last.items():
            v[envs] = self._saved[k][envs]

    def forget(self, env_ids: np.ndarray) -> None:
        """Envs given a fresh scene have no last substep to estimate from."""
        for v in self.last.values():
            v[env_ids] = 0.0
