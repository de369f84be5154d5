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


class RayGeoms:
    """The model's collision geoms as ``Batch.ray`` needs them; makes transparent collision geoms visible to it.

    Args:
        model: the ``MjModel`` the batch simulates.
        batch: the ``mujoco.batch.Batch``; its per-env colours are raised where alpha is 0.
    """

    def __init__(self, model: Any, batch: Any):
        m = model
        self.collides = (np.asarray(m.geom_contype) != 0) | (np.asarray(m.geom_conaffinity) != 0)
        mats = np.asarray(m.geom_matid)
        own = self.collides & (mats < 0) & (np.asarray(m.geom_rgba)[:, 3] == 0)
        if own.any():
            batch.expand("geom_rgba")[:, own, 3] = _ALPHA
        used = np.unique(mats[self.collides & (mats >= 0)])
        clear = used[np.asarray(m.mat_rgba)[used, 3] == 0] if used.size else used
        if clear.size:
            batch.expand("mat_rgba")[:, clear, 3] = _ALPHA
        planes = np.flatnonzero(self.collides & (np.asarray(m.geom_type) == int(mujoco.mjtGeom.mjGEOM_PLANE)))
        d = mujoco.MjData(m)
        mujoco.mj_kinematics(m, d)  # planes live on static bodies: their frames do not depend on the state
        self.plane_body = np.asarray(m.geom_bodyid[planes], np.int64)
        self.plane_pos = np.array(d.geom_xpos[planes], np.float64)  # (P, 3)
        self.plane_normal = np.array(d.geom_xmat[planes], np.float64).reshape(-1, 3, 3)[:, :, 2]  # local z

    def cast(self, batch: Any, pnt: np.ndarray, vec: np.ndarray, exclude_body: int) -> np.ndarray:
        """``(N, R)`` distance to the first collision geom along each unit ray; -1 for a miss."""
        origin = pnt
        total = np.zeros(pnt.shape[:2])
        result = np.full(pnt.shape[:2], np.inf)
        todo = np.ones(pnt.shape[:2], bool)
        for _ in range(PASSES):
            dist, geom = batch.ray(pnt, vec, bodyexclude=exclude_body)
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
