"""Net contact forces on PhysX links, friction included, shared by the CPU and GPU paths.

PhysX reports each contact point's impulse along the contact normal only
(``PxContactPairPoint::impulse`` on the CPU, the per-point force of the GPU
contact buffers that SAPIEN's body-impulse query sums): its friction impulses
are not reported by PhysX 5.3 (SAPIEN 3.0). A box held by static friction on a
20-degree slope would read ``m g cos(a)`` along the slope's normal, leaning by
20 degrees, instead of ``m g`` straight up. So the net contact force on a
moving link is derived from the solver's own result, Newton's law over the
last substep ``dt``::

    C = m (v1 - v0) / dt - m g - J_in + sum(J_in of the link's children) - F_applied

``v0``/``v1``: the link's centre-of-mass linear velocity before and after the
substep (PhysX integrates ``v1 = v0 + dt * (total force) / m`` for links with
no damping and no speed clamp, which the scene builder sets); ``J_in``: the
incoming joint force of the link (PhysX's ``linkIncomingJointForce``: the
spatial force the parent applies through the joint, drives, limits and
constraint included, in the child joint frame) and its children's
(the reaction on this link); ``F_applied``: forces applied outside the solver
(body forces, gravity compensation, delegated free-joint forces). Every PhysX
body is an articulation link (free bodies are one-link floating
articulations), so one formula covers free boxes and the feet of a legged
robot. Its normal part equals PhysX's reported normal impulse to float32
rounding (measured: docs/engines.md).

Limits: a body reads the derived force only in a substep where PhysX reports a
non-zero contact impulse on it (otherwise exactly zero: friction needs a
normal force); the root link of a fixed-root articulation (a body welded to the
world) has no equation of motion to read a force from, and reads the reported
normal impulses only.

Pure torch on the buffers' device (no ``sapien`` import): the CPU-side tests
check it on CPU tensors.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from simbackend.math import quat_apply, quat_mul

from .layout import Columns, to_tensor
from .plan import Plan


def contact_bodies(plan: Plan) -> tuple[np.ndarray, np.ndarray]:
    """The bodies that can read a contact force: ``(K,)`` the MuJoCo bodies whose links carry
    collision shapes, in body order, and ``(nbody,)`` each body's column among them (-1: the world,
    shapeless bodies). Per-env tables list env n's body ``bodies[k]`` at ``[n, k]`` (a GPU
    body-impulse query at position ``n * K + k``)."""
    nbody = plan.info.nbody
    bodies = np.array(
        [
            b
            for b in range(nbody)
            if plan.body_link[b, 0] >= 0 and plan.articulations[plan.body_link[b, 0]].links[plan.body_link[b, 1]].shapes
        ],
        np.int64,
    )
    columns = np.full(nbody, -1, np.int64)
    columns[bodies] = np.arange(bodies.size)
    return bodies, columns


def gather_contact_forces(
    forces: torch.Tensor | None, columns: torch.Tensor, body_ids: torch.Tensor, num_envs: int
) -> torch.Tensor:
    """``(N, B, 3)`` float64 contact forces of bodies ``body_ids`` from the ``(N, K, 3)`` forces of
    :func:`contact_bodies`' bodies (``None`` when K = 0). Bodies without a column (the world,
    shapeless bodies) read zero."""
    col = columns[body_ids]  # (B,)
    out = torch.zeros((num_envs, body_ids.numel(), 3), dtype=torch.float64, device=columns.device)
    if forces is None:
        return out
    picked = forces.to(torch.float64)[:, col.clamp(min=0)]  # (N, B, 3)
    return torch.where((col >= 0)[None, :, None], picked, out)


class ContactDerivation:
    """Index tables for the net contact force of :func:`contact_bodies`' bodies (module docstring).

    Args:
        plan: the build plan.
        cols: where each link sits in a buffer row.
        joint_frames: ``(A, Lmax, 4)`` wxyz orientation of each plan link's incoming joint frame in
            the link's frame (PhysX's ``joint.pose_in_child``; unused for roots).
        device: where the tables live.

    Attributes:
        bodies, columns: :func:`contact_bodies`.
        art, col: ``(K,)`` articulation and buffer column of each body's link.
        derived: ``(K,)`` bool host mask: the force is derived (every moving link); False for the
            root link of a fixed-root articulation (reported normal impulses only).
        joint_arts: articulations whose incoming joint forces the derivation reads (those with a
            derived body that has a parent or a child link).
    """

    def __init__(self, plan: Plan, cols: Columns, joint_frames: np.ndarray, device: torch.device):
        self.bodies, self.columns = contact_bodies(plan)
        bl = plan.body_link[self.bodies] if self.bodies.size else np.zeros((0, 2), np.int64)
        self.art = bl[:, 0].astype(np.int64)
        self.col = cols.link_col[bl[:, 0], bl[:, 1]] if self.bodies.size else np.zeros(0, np.int64)
        self.derived = np.array([not (plan.articulations[a].fixed_root and l == 0) for a, l in bl], bool)
        # joint terms: (k, articulation, plan link, sign): +J_in of body k's link, -J_in of each child link
        terms: list[tuple[int, int, int, float]] = []
        for k, (a, l) in enumerate(bl):
            if not self.derived[k]:
                continue
            if l > 0:
                terms.append((k, int(a), int(l), 1.0))
            terms += [(k, int(a), c, -1.0) for c, lk in enumerate(plan.articulations[a].links) if lk.parent == l]
        t = np.array(terms, np.float64).reshape(-1, 4)
        ta, tl = t[:, 1].astype(np.int64), t[:, 2].astype(np.int64)
        self.joint_arts = np.unique(ta)
        self._links_shape = (len(plan.articulations), cols.max_links)
        self._body_al = bl.astype(np.int64)
        self._term_host = (t[:, 0].astype(np.int64), ta, tl)
        dev = self.device = torch.device(device)
        self._term_k = to_tensor(t[:, 0], dev, torch.long)
        self._term_art = to_tensor(ta, dev, torch.long)
        self._term_col = to_tensor(cols.link_col[ta, tl], dev, torch.long)
        self._term_sign = to_tensor(t[:, 3], dev)
        self._term_frame = to_tensor(np.asarray(joint_frames, np.float64)[ta, tl].reshape(-1, 4), dev)
        self._art_t = to_tensor(self.art, dev, torch.long)
        self._col_t = to_tensor(self.col, dev, torch.long)
        self._derived_t = to_tensor(self.derived, dev, torch.bool)

    def links_of(self, touching: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(A, Lmax)`` bool masks of plan links: the links whose pose (their own, their joint terms') and
        whose velocity :meth:`forces` reads for the bodies ``touching`` ``(K,)`` bool."""
        pose = np.zeros(self._links_shape, bool)
        vel = np.zeros(self._links_shape, bool)
        al = self._body_al[touching & self.derived]
        vel[al[:, 0], al[:, 1]] = True
        k, ta, tl = self._term_host
        hit = touching[k]
        pose[ta[hit], tl[hit]] = True
        return pose | vel, vel

    def link_rows(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(n, K)`` buffer rows and columns of the bodies' links for the envs whose ``(n, A)`` rows are given."""
        r = rows[:, self._art_t]
        return r, self._col_t[None].expand_as(r)

    def forces(
        self,
        rows: torch.Tensor,
        links: torch.Tensor,
        v0: torch.Tensor,
        mass: torch.Tensor,
        gravity: torch.Tensor,
        joint_forces: torch.Tensor | None,
        applied: torch.Tensor | None,
        reported: torch.Tensor,
        touching: torch.Tensor,
        dt: float,
    ) -> torch.Tensor:
        """``(n, K, 3)`` float64 net contact force on each body in the last substep, world frame.

        Args:
            rows: ``(n, A)`` buffer rows of the envs' articulations.
            links: the ``(R, L, >=10)`` link buffer after the substep: pose (3 + wxyz 4), centre-of-mass
                linear velocity (3), current for the bodies' links and the joint terms' links.
            v0: ``(n, K, 3)`` the bodies' centre-of-mass linear velocity before the substep.
            mass: ``(n, K)`` their masses during the substep.
            gravity: ``(n, 3)`` or ``(3,)``.
            joint_forces: ``(R, L, >=3)`` incoming joint forces (force first, child joint frame), or
                ``None`` when no derived body has a joint.
            applied: ``(n, K, 3)`` forces applied outside the solver in the substep, or ``None``.
            reported: ``(n, K, 3)`` PhysX's reported (normal) contact impulses over the substep, / dt.
            touching: ``(n, K)`` bool: PhysX reported a non-zero contact impulse on the body.
            dt: the substep, s.
        """
        f64 = torch.float64
        r, c = self.link_rows(rows)
        v1 = links[r, c, 7:10].to(f64)
        m = mass.to(f64)[..., None]
        g = gravity.to(f64).reshape(-1, 1, 3)
        out = m * (v1 - v0.to(f64)) / dt - m * g
        if applied is not None:
            out = out - applied.to(f64)
        if joint_forces is not None and self._term_k.numel():
            tr = rows[:, self._term_art]  # (n, T)
            tc = self._term_col[None].expand_as(tr)
            q = quat_mul(links[tr, tc, 3:7].to(f64), self._term_frame[None].expand(tr.shape[0], -1, -1))
            jw = quat_apply(q, joint_forces[tr, tc, :3].to(f64)) * self._term_sign[None, :, None]
            out = out.index_add(1, self._term_k, -jw)
        out = torch.where(self._derived_t[None, :, None], out, reported.to(f64))
        return torch.where(touching[..., None], out, torch.zeros((), dtype=f64, device=out.device))


def joint_frames(plan: Plan, comps: Sequence[Sequence]) -> np.ndarray:
    """``(A, Lmax, 4)`` wxyz orientation of each link's incoming joint frame in the link's frame, read
    from one env's link components ``comps[a][l]`` (identity past an articulation's last link)."""
    lmax = max((len(a.links) for a in plan.articulations), default=1) or 1
    out = np.zeros((len(plan.articulations), lmax, 4))
    out[..., 0] = 1.0
    for a, links in enumerate(comps):
        for l, comp in enumerate(links):
            out[a, l] = np.asarray(comp.joint.pose_in_child.q, np.float64)
    return out
