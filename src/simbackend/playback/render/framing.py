"""Where a model's moving parts are: what the default free camera frames and where the dress floor goes.

:func:`moving_parts` reads a compiled model once and returns a
:class:`MovingParts`: the box (world axes) the model's visible moving geoms
usually sweep, the body the camera follows when the whole model travels (a
floating base, a cart on a rail), the height of the lowest thing drawn, and
whether the model moves in one vertical plane. The rules:

* **Visible geoms** are those MuJoCo draws by default: groups 0, 1 and 2, not
  fully transparent (collision-only geoms of robot descriptions sit in group 3).
  Planes are the ground, never a part.
* **Moving geoms** belong to bodies not welded to the world (``body_weldid !=
  0``). A model without any frames its static geoms instead; a model with no
  visible geom at all, ``model.stat``'s sphere.
* **Tracking.** A model whose only moving kinematic tree hangs from a free or a
  slide joint (its topmost joint) is followed: the camera moves with that body,
  and that joint stays at ``qpos0`` below.
* **The swept box.** :data:`SAMPLES` poses are drawn (seeded, so the framing
  of a model never changes): every hinge uniform in its range (a full turn when
  unlimited), every ball joint at a random orientation within its cone. Slides
  and free joints stay at ``qpos0``: their ranges are often a whole workspace
  (an object sliding on a table) that the parts only sometimes visit. The box
  holds the geoms' bounding boxes at ``qpos0`` and, of the sampled poses, the
  :data:`PERCENTILE`-th to (100 - it)-th percentile of their extents, so that a
  rare outstretched pose does not shrink every picture.
* **Planar.** Every joint of the moving trees (the tracked one aside) is a hinge
  about the world's y axis or a slide across it: a side view shows all the
  motion.

:meth:`~simbackend.playback.render.FreeCamera.framing` fits the box in the
picture; :mod:`~simbackend.playback.render.dress` puts its floor at
:attr:`MovingParts.floor_z`, under the lowest point of every sampled pose.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import mujoco
import numpy as np

from simbackend.playback.render.arguments import check_model

__all__ = ["MovingParts", "has_ground", "moving_parts"]

_GEOM_PLANE = int(mujoco.mjtGeom.mjGEOM_PLANE)
_GEOM_HFIELD = int(mujoco.mjtGeom.mjGEOM_HFIELD)
_JNT_FREE = int(mujoco.mjtJoint.mjJNT_FREE)
_JNT_SLIDE = int(mujoco.mjtJoint.mjJNT_SLIDE)
_JNT_HINGE = int(mujoco.mjtJoint.mjJNT_HINGE)
_JNT_BALL = int(mujoco.mjtJoint.mjJNT_BALL)
#: geom groups MuJoCo draws by default (``mjvOption.geomgroup``)
_SHOWN_GROUPS = 3


@dataclass(frozen=True)
class MovingParts:
    """A model's moving parts (see the module docstring).

    Attributes:
        center: ``(3,)`` world-frame centre of the box the parts sweep (at ``qpos0`` for a
            tracked body, the box then moving with it), metres.
        half_extent: ``(3,)`` half sizes of that box along the world axes, metres (> 0).
        track: the body the camera follows, or -1.
        floor_z: the height of the lowest point the parts reach and of the lowest static
            geom drawn, metres (a dress floor goes just below).
        planar: every joint of the moving trees moves in the world's x-z plane (hinges
            about y, slides along x or z): a side view shows all the motion.
        anchor: the tracked body's position at ``qpos0`` (the camera looks at
            ``center - anchor`` from the body), zeros when nothing is tracked.
    """

    center: tuple[float, float, float]
    half_extent: tuple[float, float, float]
    track: int
    floor_z: float
    planar: bool
    anchor: tuple[float, float, float] = (0.0, 0.0, 0.0)

    @property
    def radius(self) -> float:
        """Half the box's diagonal, metres: the size of the parts."""
        return float(np.linalg.norm(self.half_extent))


#: poses sampled to find the box the moving parts sweep (and the seed they are drawn with)
SAMPLES = 256
_SEED = 0
#: the framed box holds the pose at ``qpos0`` and this percentile .. 100 - it of the sampled poses' extents
PERCENTILE = 10.0


def _visible(model: Any) -> np.ndarray:
    """``(ngeom,)`` bool: the geoms MuJoCo draws by default, planes left out."""
    alpha = np.asarray(model.geom_rgba)[:, 3].copy()
    matid = np.asarray(model.geom_matid)
    has_mat = matid >= 0
    if has_mat.any():
        alpha[has_mat] = np.asarray(model.mat_rgba)[matid[has_mat], 3]
    return (np.asarray(model.geom_group) < _SHOWN_GROUPS) & (alpha > 0) & (np.asarray(model.geom_type) != _GEOM_PLANE)


def _boxes(model: Any, data: Any, geoms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(lo, hi)``, each ``(len(geoms), 3)``: the world-axis bounding boxes of the geoms in ``data``'s pose."""
    aabb = np.asarray(model.geom_aabb)[geoms]  # (g, 6): centre offset, half sizes (geom frame)
    xmat = np.asarray(data.geom_xmat)[geoms].reshape(-1, 3, 3)
    center = np.asarray(data.geom_xpos)[geoms] + np.einsum("gij,gj->gi", xmat, aabb[:, :3])
    half = np.einsum("gij,gj->gi", np.abs(xmat), aabb[:, 3:])
    return center - half, center + half


def has_ground(model: Any) -> bool:
    """The model draws its own ground: a visible plane of the world body facing up, or a height field."""
    model = check_model(model)
    gtype = np.asarray(model.geom_type)
    world = np.asarray(model.geom_bodyid) == 0
    shown = np.asarray(model.geom_group) < _SHOWN_GROUPS
    if (world & shown & (gtype == _GEOM_HFIELD)).any():
        return True
    data = mujoco.MjData(model)
    mujoco.mj_kinematics(model, data)
    for g in np.flatnonzero(world & shown & (gtype == _GEOM_PLANE)):
        if float(np.asarray(data.geom_xmat)[g][8]) > 0.999:
            return True
    return False


def _sample_joint(model: Any, j: int, qpos: np.ndarray, rng: np.random.Generator) -> None:
    """Write a random value of hinge or ball joint ``j`` into ``qpos``: uniform in its range (a full
    turn for an unlimited hinge), a random orientation within its cone (any, unlimited) for a ball."""
    adr = int(model.jnt_qposadr[j])
    kind = int(model.jnt_type[j])
    limited = bool(model.jnt_limited[j])
    lo, hi = (float(v) for v in model.jnt_range[j])
    if kind == _JNT_HINGE:
        qpos[adr] = rng.uniform(lo, hi) if limited else rng.uniform(-math.pi, math.pi)
    elif kind == _JNT_BALL:
        axis = rng.normal(size=3)
        axis /= np.linalg.norm(axis)
        angle = rng.uniform(0.0, hi if limited and hi > 0 else math.pi)
        qpos[adr : adr + 4] = (math.cos(angle / 2), *(math.sin(angle / 2) * axis))


def moving_parts(model: Any) -> MovingParts:
    """The box ``model``'s moving parts sweep, the body to follow, the lowest height drawn (module docstring)."""
    model = check_model(model)
    data = mujoco.MjData(model)
    mujoco.mj_kinematics(model, data)  # qpos0 (MjData starts there); mocap bodies at their model pose
    visible = _visible(model)
    body = np.asarray(model.geom_bodyid)
    moving = visible & (np.asarray(model.body_weldid)[body] != 0)
    static_ids = np.flatnonzero(visible & ~moving)
    lowest_static = float(_boxes(model, data, static_ids)[0][:, 2].min()) if static_ids.size else math.inf
    if not moving.any():
        if static_ids.size == 0:  # nothing visible: the model's own sphere
            c = np.array(model.stat.center, np.float64)
            r = max(float(model.stat.extent), 1e-3)
            return MovingParts(_vec(c), _vec(np.full(3, r / math.sqrt(3))), -1, float(c[2] - r), True)
        lo, hi = _boxes(model, data, static_ids)
        return _parts(lo.min(0), hi.max(0), -1, lowest_static, True)

    root = np.asarray(model.body_rootid)
    jnt_body = np.asarray(model.jnt_bodyid)
    jnt_type = np.asarray(model.jnt_type)
    trees = np.unique(root[body[moving]])
    # a model whose one moving tree hangs from a free or slide joint is followed: that joint stays put
    track, held = -1, -1
    if len(trees) == 1:
        joints = np.flatnonzero(root[jnt_body] == trees[0])
        if joints.size and jnt_type[joints[0]] in (_JNT_FREE, _JNT_SLIDE):  # joints are numbered depth first
            track, held = int(jnt_body[joints[0]]), int(joints[0])
    in_trees = np.isin(root[jnt_body], trees)
    # hinges and balls turn parts about; slides stay at qpos0: their ranges are often a whole workspace
    # (an object sliding on a table, a cart's rail) where the parts only sometimes go
    sampled = [j for j in range(model.njnt) if jnt_type[j] in (_JNT_HINGE, _JNT_BALL)]
    swung = [j for j in np.flatnonzero(in_trees) if j != held]
    planar = bool(swung) and all(_in_plane(int(jnt_type[j]), np.asarray(data.xaxis)[j]) for j in swung)
    anchor = np.array(data.xpos[track]) if track >= 0 else np.zeros(3)
    geoms = np.flatnonzero(moving)
    glo, ghi = _boxes(model, data, geoms)
    lows, highs = [glo.min(0)], [ghi.max(0)]
    rng = np.random.default_rng(_SEED)
    qpos = np.array(model.qpos0, np.float64)
    for _ in range(SAMPLES if sampled else 0):
        data.qpos[:] = qpos
        for j in sampled:
            _sample_joint(model, j, data.qpos, rng)
        mujoco.mj_kinematics(model, data)
        glo, ghi = _boxes(model, data, geoms)
        lows.append(glo.min(0))
        highs.append(ghi.max(0))
    # the box of the poses the parts usually take: the extremes of rare poses are left out
    lo = np.minimum(lows[0], np.percentile(np.array(lows), PERCENTILE, axis=0))
    hi = np.maximum(highs[0], np.percentile(np.array(highs), 100 - PERCENTILE, axis=0))
    floor_z = min(lowest_static, float(np.min(lows, axis=0)[2]))
    return _parts(lo, hi, track, floor_z, planar, anchor)


def _in_plane(kind: int, axis: np.ndarray) -> bool:
    """A joint of this kind and world axis moves in the x-z plane."""
    if kind == _JNT_HINGE:
        return abs(float(axis[1])) > 0.999
    if kind == _JNT_SLIDE:
        return abs(float(axis[1])) < 1e-3
    return False


def _vec(v: Any) -> tuple[float, float, float]:
    return (float(v[0]), float(v[1]), float(v[2]))


def _parts(
    lo: np.ndarray, hi: np.ndarray, track: int, floor_z: float, planar: bool, anchor: Any = (0.0, 0.0, 0.0)
) -> MovingParts:
    half = np.maximum((hi - lo) / 2, 1e-3)
    return MovingParts(_vec((lo + hi) / 2), _vec(half), track, floor_z, planar, _vec(anchor))
