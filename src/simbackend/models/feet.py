"""Where a robot's feet are in its scene file, and which joint changes raise them: kinematics read with MuJoCo.

A foot is named by a geom (Go1's ``FR_foot_collision``) or by a body (a URDF's
toe link, or a calf whose foot sphere was fused into it). Its **point** is the
centre of that geom, or of the body's lowest collision geom at the pose (the
body's origin where it has none): a calf body's origin is its knee, which the
knee joint does not move. Geometry of the file, the same for every engine that
builds from it; engine-neutral callers (``simbackend.robots.compare``) get plain
numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from simbackend.models.mujoco_extra import import_mujoco

__all__ = ["FootPoints", "foot_points"]


@dataclass(frozen=True)
class FootPoints:
    """What :func:`foot_points` found.

    Attributes:
        bodies: ``(F,)`` the name of the body each foot's point rides on.
        offsets: ``(F, 3)`` the point in its body's frame, m.
        lift: ``(F, k)`` ``d height / d angle`` of each foot's point per joint given (m/rad), base fixed.
    """

    bodies: tuple[str, ...]
    offsets: np.ndarray
    lift: np.ndarray


def foot_points(path: str, qpos: Any, feet: Sequence[str], joints: Sequence[str], delta: float = 1e-3) -> FootPoints:
    """The feet's points in scene file ``path`` at state ``qpos`` ``(nq,)`` and their heights' gradient over
    ``joints`` (hinge or slide joints: a central finite difference of ``delta``).

    ``feet`` are geom or body names (a name that is both is the body's, as the robot descriptions read it).
    """
    mujoco = import_mujoco()
    m = mujoco.MjSpec.from_file(str(path)).compile()
    d = mujoco.MjData(m)
    q0 = np.asarray(qpos, dtype=np.float64)
    d.qpos[:] = q0
    mujoco.mj_kinematics(m, d)
    geom_ids = []
    for name in feet:
        body = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, name)
        if body >= 0:
            own = [
                g for g in range(m.ngeom) if m.geom_bodyid[g] == body and (m.geom_contype[g] or m.geom_conaffinity[g])
            ]
            geom_ids.append(min(own, key=lambda g: d.geom_xpos[g, 2]) if own else -1 - body)
        else:
            geom_ids.append(mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, name))
    ids = [int(m.geom_bodyid[g]) if g >= 0 else -1 - g for g in geom_ids]
    bodies = tuple(mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, b) for b in ids)
    offsets = np.array([m.geom_pos[g] if g >= 0 else np.zeros(3) for g in geom_ids], dtype=np.float64)
    # geom_pos is in its body's frame for a geom of that body

    def heights(q: np.ndarray) -> np.ndarray:
        d.qpos[:] = q
        mujoco.mj_kinematics(m, d)
        return np.array([d.geom_xpos[g, 2] if g >= 0 else d.xpos[-1 - g, 2] for g in geom_ids])

    lift = np.zeros((len(feet), len(joints)))
    for j, name in enumerate(joints):
        col = m.jnt_qposadr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, name)]
        up, down = q0.copy(), q0.copy()
        up[col] += delta
        down[col] -= delta
        lift[:, j] = (heights(up) - heights(down)) / (2 * delta)
    return FootPoints(bodies=bodies, offsets=offsets, lift=lift)
