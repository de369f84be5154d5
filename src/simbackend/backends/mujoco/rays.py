"""Rays against the collision geoms of every env (the height scanner's engine part), on ``Batch.ray``.

``Batch.ray`` is ``mj_ray`` for every env at once, from the state rows (it runs
the kinematics itself). Three of ``mj_ray``'s rules differ from what the
contract's rays see, the collision geoms, and are corrected here:

* visual-only geoms (``contype`` and ``conaffinity`` 0) are hits for
  ``mj_ray``: such a hit is passed through, the ray going on from just past it
  (at most :data:`PASSES` casts per query);
* ``mj_ray`` clips a plane to its rendered rectangle (``size``), while a
  collision plane is unbounded: planes (static in MuJoCo) are intersected
  here, unbounded and, as in ``mj_ray``, one-sided;
* ``mj_ray`` skips geoms whose colour (or material) has alpha 0: the alpha of
  such *collision* geoms is raised to 1e-30 in the batch's per-env colours
  (``Batch.expand``; the same colour to any renderer), where a model has them.

As in ``mj_ray``, a ray reports the first point at distance ``t >= 0`` where
it crosses a geom's surface: one starting inside a geom reports where it leaves
it. Meshes are intersected as their triangles (collision uses their convex hull).
"""

from __future__ import annotations

from typing import Any

import mujoco
import numpy as np

#: casts per query at most: a ray passes through at most about half this many visual-only geoms
PASSES = 8
#: how far past a visual-only geom's surface the next cast starts, m
_NUDGE = 1e-6
#: alpha given to transparent collision geoms so that mj_ray sees them
_ALPHA = 1e-30


def collision_geoms(m: Any) -> np.ndarray:
    """``(ngeom,)`` bool: the geoms that collide (``contype`` or ``conaffinity`` nonzero)."""
    return (np.asarray(m.geom_contype) != 0) | (np.asarray(m.geom_conaffinity) != 0)


def transparent_collision(m: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(geoms, materials)``: collision geoms whose own colour has alpha 0 (bool, ``(ngeom,)``), and
    the ids of materials of collision geoms with alpha 0; a ray caster skipping alpha-0 geoms must see
    them (their alpha is raised to :data:`ALPHA`)."""
    collides = collision_geoms(m)
    mats = np.asarray(m.geom_matid)
    own = collides & (mats < 0) & (np.asarray(m.geom_rgba)[:, 3] == 0)
    used = np.unique(mats[collides & (mats >= 0)])
    clear = used[np.asarray(m.mat_rgba)[used, 3] == 0] if used.size else used
    return own, clear


#: alpha given to transparent collision geoms so that a ray caster sees them
ALPHA = _ALPHA


class RayGeoms:
    """The model's collision geoms as ``mj_ray``-like casters need them (see the module docstring).

    Args:
        model: the ``MjModel`` simulated.
        batch: a ``mujoco.batch.Batch`` whose per-env colours are raised where a collision geom's
            alpha is 0, or ``None`` where the caller raised them in its own model copy already.
    """

    def __init__(self, model: Any, batch: Any = None):
        m = model
        self.collides = collision_geoms(m)
        if batch is not None:
            own, clear = transparent_collision(m)
            if own.any():
                batch.expand("geom_rgba")[:, own, 3] = _ALPHA
            if clear.size:
                batch.expand("mat_rgba")[:, clear, 3] = _ALPHA
        planes = np.flatnonzero(self.collides & (np.asarray(m.geom_type) == int(mujoco.mjtGeom.mjGEOM_PLANE)))
        d = mujoco.MjData(m)
        mujoco.mj_kinematics(m, d)  # planes live on static bodies: their frames do not depend on the state
        self.plane_body = np.asarray(m.geom_bodyid[planes], np.int64)
        self.plane_pos = np.array(d.geom_xpos[planes], np.float64)  # (P, 3)
        self.plane_normal = np.array(d.geom_xmat[planes], np.float64).reshape(-1, 3, 3)[:, :, 2]  # local z

    def cast(self, ray: Any, pnt: np.ndarray, vec: np.ndarray, exclude_body: int) -> np.ndarray:
        """``(N, R)`` distance to the first collision geom along each unit ray; -1 for a miss.

        ``ray(pnt, vec, bodyexclude=...) -> (dist, geom)``: an ``mj_ray`` for every env (``Batch.ray``),
        numpy ``(N, R)`` each, ``geom`` -1 for a miss."""
        origin = pnt
        total = np.zeros(pnt.shape[:2])
        result = np.full(pnt.shape[:2], np.inf)
        todo = np.ones(pnt.shape[:2], bool)
        for _ in range(PASSES):
            dist, geom = ray(pnt, vec, bodyexclude=exclude_body)
            hit = todo & (geom >= 0)
            solid = hit & self.collides[np.maximum(geom, 0)]
            result[solid] = total[solid] + dist[solid]
            todo &= hit & ~solid  # missed: done; hit a visual-only geom: go on from just past it
            if not todo.any():
                break
            step = np.where(todo, dist + _NUDGE, 0.0)
            pnt = pnt + vec * step[..., None]
            total += step
        result = np.minimum(result, self._planes(origin, vec, exclude_body))
        return np.where(np.isfinite(result), result, -1.0)

    def _planes(self, pnt: np.ndarray, vec: np.ndarray, exclude_body: int) -> np.ndarray:
        """``(N, R)`` distance to the nearest unbounded plane, from its front side only; inf for none."""
        best = np.full(pnt.shape[:2], np.inf)
        for body, pos, nrm in zip(self.plane_body, self.plane_pos, self.plane_normal):
            if body == exclude_body:
                continue
            den = vec @ nrm
            toward = den < -1e-15  # mj_ray's test (mjMINVAL)
            t = -((pnt - pos) @ nrm) / np.where(toward, den, -1.0)
            best = np.minimum(best, np.where(toward & (t >= 0), t, np.inf))
        return best
