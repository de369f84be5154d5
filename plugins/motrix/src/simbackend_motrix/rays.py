"""Rays for the height scanner: MuJoCo's ``mj_ray`` on the compiled model, posed at Motrix's state.

Why not Motrix's own queries (motrixsim 0.10): ``low.raycast_closest`` answers
one ray of one world per Python call (about 23 us a ray, 1.1 s for 187 rays in
256 envs), needs a broad phase completed by a step (it raises before the
first step), and Motrix's height fields have
no sides and no base (a ray from below or from the side meets the top surface
where MuJoCo's meets the solid's wall or bottom); ``TerrainScanner`` and
``GeomHField.sample_height`` interpolate a height field bilinearly, not on its
triangles, and see one geom only. ``mj_ray`` is the reference every backend's
rays are held to, and ``mujoco.batch.Batch.ray`` casts all envs' rays at once
on MuJoCo's thread pool, from state rows (it runs the kinematics itself):
writing Motrix's ``qpos`` into those rows poses every body as Motrix holds it,
so the rays see what the getters report.

The contract's rays see the collision geoms only, unbounded planes, and no
alpha rule; the model copy cast against is changed once so that one
``mj_ray`` pass does exactly that (the MuJoCo backend corrects the same rules
after its casts, :mod:`simbackend.backends.mujoco.rays`):

* collision geoms (``contype`` or ``conaffinity`` nonzero) go to geom group 0,
  visual-only geoms to group 1, and only group 0 is cast against;
* planes get size 0 (``mj_ray`` clips a plane to a positive ``size``, the
  rendered rectangle; a collision plane is unbounded), one-sided as in ``mj_ray``;
* collision geoms lose their material and get alpha 1 (``mj_ray`` skips
  geoms drawn with alpha 0).

This copy is the plugin's own; the renderer draws the compiled model untouched.

Cost, measured (2 shared cores, load ~10, one thread): a 187-ray scan of 256
envs of go1 on the default terrain (40 height fields of 81 x 81, 74 geoms)
takes 0.21-0.24 s, as the MuJoCo backend's (about 4.5 us a ray: ``mj_ray``
visits every geom, with no spatial index); the qpos copy is negligible.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from simbackend.models.mujoco_extra import import_mujoco, import_mujoco_batch

#: geom group of the geoms a ray sees in the ray model, and the group mask cast with
_SEEN = 0
_GROUPS = np.array([1, 0, 0, 0, 0, 0], np.uint8)


def ray_model(model: Any) -> Any:
    """A copy of the compiled ``MjModel`` on which one ``mj_ray`` pass with group mask ``_GROUPS`` sees
    exactly the contract's ray targets (see the module docstring)."""
    m = copy.copy(model)  # a full copy (MjModel's copy is deep)
    collides = (np.asarray(m.geom_contype) != 0) | (np.asarray(m.geom_conaffinity) != 0)
    m.geom_group[:] = np.where(collides, _SEEN, _SEEN + 1)
    planes = collides & (np.asarray(m.geom_type) == int(import_mujoco().mjtGeom.mjGEOM_PLANE))
    m.geom_size[planes, :2] = 0.0
    m.geom_matid[collides] = -1
    m.geom_rgba[collides, 3] = 1.0
    return m


class RayCaster:
    """``mj_ray`` for every env of a Motrix batch (see the module docstring).

    Args:
        model: the compiled ``MjModel`` Motrix simulates.
        num_envs: envs of the batch.
        nthread: threads of MuJoCo's pool for the casts (0: every CPU).
    """

    def __init__(self, model: Any, num_envs: int, nthread: int):
        mjbatch = import_mujoco_batch()  # through the core's import (a missing extra names it)

        self.batch = mjbatch.Batch(ray_model(model), num_envs, nthread=nthread)
        self._qpos = self.batch.bind("qpos")

    def cast(self, qpos: np.ndarray, origins: np.ndarray, directions: np.ndarray, exclude_body: int) -> np.ndarray:
        """``(N, R)`` distance along each unit ray to the first collision geom, -1 for a miss, with the
        bodies posed by ``qpos`` ``(N, nq)``; ``exclude_body``'s geoms are skipped (-1: none)."""
        self._qpos[...] = qpos
        dist, _ = self.batch.ray(
            np.ascontiguousarray(origins, np.float64),
            np.ascontiguousarray(directions, np.float64),
            geomgroup=_GROUPS,
            flg_static=True,
            bodyexclude=int(exclude_body),
        )
        return dist
