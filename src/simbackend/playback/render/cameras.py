"""Cameras: the camera arguments, and the geometry of a camera's pixels.

A camera argument is a model camera (name or id), ``"free"`` or a
:class:`FreeCamera`; :func:`resolve_camera` checks one against a model. The
projection functions turn MuJoCo's OpenGL camera of a scene into OpenCV
intrinsics, an OpenGL ``cam2world`` pose, metric depth and per-pixel rays (the
conventions are those of :mod:`simbackend.playback.render`).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import mujoco
import numpy as np

from simbackend import checks
from simbackend.errors import ArgumentTypeError, IndexRangeError, UnknownNameError
from simbackend.playback.render.arguments import check_model, check_spacing, check_vec3
from simbackend.playback.render.framing import MovingParts, moving_parts
from simbackend.playback.render.tiling import default_spacing, tile_offsets

__all__ = [
    "FREE",
    "FreeCamera",
    "ResolvedCamera",
    "body_names",
    "camera_matrices",
    "camera_names",
    "metric_depth",
    "pixel_rays",
    "resolve_camera",
]

#: name of the free camera in camera arguments
FREE = "free"

_OBJ_CAMERA = int(mujoco.mjtObj.mjOBJ_CAMERA)
_OBJ_BODY = int(mujoco.mjtObj.mjOBJ_BODY)


@dataclass(frozen=True)
class FreeCamera:
    """A camera orbiting a point, as MuJoCo's free camera (validated on construction).

    Attributes:
        lookat: ``(3,)`` the point looked at, world frame, metres; with
            ``track_body``, an offset from that body's position (world axes).
        distance: from the camera to ``lookat``, metres, > 0.
        azimuth: degrees about the world z axis; 90 looks along +y, so that +x
            is to the right of the picture.
        elevation: degrees in ``[-90, 90]``; negative looks down.
        track_body: a body name, or ``None``; the camera follows that body's
            frame origin (``lookat`` = body position + ``lookat``), env by env.
    """

    lookat: Any = (0.0, 0.0, 0.0)
    distance: float = 2.0
    azimuth: float = 90.0
    elevation: float = -45.0
    track_body: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "lookat", check_vec3(self.lookat, "FreeCamera.lookat"))
        object.__setattr__(self, "distance", checks.real(self.distance, "FreeCamera.distance", minimum=0.0, above=True))
        object.__setattr__(self, "azimuth", checks.real(self.azimuth, "FreeCamera.azimuth"))
        object.__setattr__(
            self, "elevation", checks.real(self.elevation, "FreeCamera.elevation", minimum=-90.0, maximum=90.0)
        )
        if self.track_body is not None and not isinstance(self.track_body, str):
            raise ArgumentTypeError(
                f"FreeCamera.track_body: expected a body name or None, got"
                f" {type(self.track_body).__name__} {checks.short_repr(self.track_body)}"
            )

    @classmethod
    def framing(
        cls,
        model: Any,
        spacing: float | None = None,
        num_envs: int = 1,
        *,
        aspect: float | None = None,
        parts: MovingParts | None = None,
    ) -> FreeCamera:
        """The camera framing the model's moving parts (:func:`~simbackend.playback.render.framing.moving_parts`).

        It looks at the centre of the box the parts sweep, from just far enough for the
        whole box to be in the picture (``aspect`` = width / height; ``None``: a square
        picture), and follows a floating base or any body that carries the whole model
        about (``track_body``). Its direction is the model's ``<visual><global azimuth
        elevation>`` where the model sets them (anything but MuJoCo's 90 and -45);
        otherwise a side view (azimuth 90, elevation -12) of a model that moves in the
        x-z plane, and a three-quarter view (azimuth 135, elevation -22) of any other.

        With ``num_envs > 1``, it frames the grid of a tiled view of that many envs
        ``spacing`` apart (default :func:`default_spacing`) and follows nothing.
        ``parts``: the model's :func:`moving_parts` when the caller has them already.
        """
        model = check_model(model)
        n = checks.integer(num_envs, "num_envs", minimum=1)
        wide = 1.0 if aspect is None else checks.real(aspect, "aspect", minimum=0.0, above=True)
        parts = moving_parts(model) if parts is None else parts
        g = model.vis.global_
        if (float(g.azimuth), float(g.elevation)) != _MUJOCO_DEFAULT_VIEW:
            azimuth, elevation = float(g.azimuth), float(np.clip(g.elevation, -90, 90))
        else:
            azimuth, elevation = _SIDE_VIEW if parts.planar else _THREE_QUARTER_VIEW
        tan_y = math.tan(math.radians(float(g.fovy)) / 2)
        tan_x = tan_y * wide
        center = np.array(parts.center, dtype=np.float64)
        if n > 1:
            s = check_spacing(spacing)
            offsets = tile_offsets(n, default_spacing(model) if s is None else s)
            center = center + (offsets.min(0) + offsets.max(0)) / 2
            half_diagonal = float(np.linalg.norm(offsets.max(0) - offsets.min(0))) / 2
            distance = _FRAME_MARGIN * (half_diagonal + parts.radius) / min(tan_x, tan_y)
            return cls(tuple(center), max(distance, 1e-3), azimuth, elevation)
        distance = _fit_box(np.array(parts.half_extent), azimuth, elevation, tan_x, tan_y)
        if parts.track >= 0:
            lookat = center - np.array(parts.anchor)
            return cls(tuple(lookat), distance, azimuth, elevation, body_names(model)[parts.track])
        return cls(tuple(center), distance, azimuth, elevation)


def _fit_box(half: np.ndarray, azimuth: float, elevation: float, tan_x: float, tan_y: float) -> float:
    """The distance from which a camera looking at the centre of a box of world-axis half sizes
    ``half`` (MuJoCo's free camera at ``azimuth``/``elevation`` degrees) sees all of it, with a
    :data:`_FRAME_MARGIN` border (``tan_x``, ``tan_y``: tangents of the half-angles of view)."""
    az, el = math.radians(azimuth), math.radians(elevation)
    forward = np.array([math.cos(el) * math.cos(az), math.cos(el) * math.sin(az), math.sin(el)])
    right = np.array([math.sin(az), -math.cos(az), 0.0])  # forward x world z, normalised
    up = np.cross(right, forward)
    corners = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)]) * half
    x, y, z = np.abs(corners @ right), np.abs(corners @ up), corners @ forward
    # a corner at depth d + z must lie within the picture: |x| <= (d + z) tan_x, |y| <= (d + z) tan_y
    need = np.maximum(x * _FRAME_MARGIN / tan_x, y * _FRAME_MARGIN / tan_y) - z
    return max(float(need.max()), float((-z).max()) + 1e-3, 1e-3)


#: MuJoCo's default ``<visual><global azimuth elevation>``: a model that keeps them chose no view
_MUJOCO_DEFAULT_VIEW = (90.0, -45.0)
#: (azimuth, elevation) of the default view of a model moving in the x-z plane, and of any other
_SIDE_VIEW = (90.0, -12.0)
_THREE_QUARTER_VIEW = (135.0, -22.0)
#: the framed box is fitted into a picture this many times smaller than the real one (a border around it)
_FRAME_MARGIN = 1.15


@dataclass(frozen=True)
class ResolvedCamera:
    """A camera argument checked against a model."""

    key: str  # the name results are keyed by
    fixed_id: int  # model camera id, or -1 for a free camera
    free: FreeCamera | None  # the free camera (None: the model's default framing)
    track: int  # body id the free camera follows, or -1


def camera_names(model: Any) -> tuple[str, ...]:
    """The model's camera names in id order (an unnamed camera is ``camera<id>``)."""
    model = check_model(model)
    return tuple(mujoco.mj_id2name(model, _OBJ_CAMERA, i) or f"camera{i}" for i in range(model.ncam))


def body_names(model: Any) -> tuple[str, ...]:
    """The model's body names in id order (``world`` for body 0, ``body<id>`` for unnamed ones)."""
    names = []
    for i in range(model.nbody):
        name = mujoco.mj_id2name(model, _OBJ_BODY, i)
        names.append("world" if i == 0 else (name or f"body{i}"))
    return tuple(names)


def resolve_camera(model: Any, camera: Any, argument: str = "camera") -> ResolvedCamera:
    """Check a camera argument: a model camera name or id, ``"free"`` or a :class:`FreeCamera`.

    Raises:
        UnknownNameError: an unknown camera name (or ``track_body`` name), with the closest ones.
        IndexRangeError: a camera id out of range.
        ArgumentTypeError: anything else.
    """
    if isinstance(camera, FreeCamera):
        track = -1
        if camera.track_body is not None:
            names = body_names(model)
            if camera.track_body not in names:
                raise UnknownNameError("body", camera.track_body, names)
            track = names.index(camera.track_body)
        return ResolvedCamera(FREE, -1, camera, track)
    if isinstance(camera, str):
        if camera == FREE:
            return ResolvedCamera(FREE, -1, None, -1)
        names = camera_names(model)
        if camera not in names:
            raise UnknownNameError("camera", camera, (FREE, *names))
        return ResolvedCamera(camera, names.index(camera), None, -1)
    if isinstance(camera, (numbers.Integral, np.integer)) and not isinstance(camera, (bool, np.bool_)):
        if not 0 <= int(camera) < model.ncam:
            raise IndexRangeError(f"{argument}: camera ids must be in [0, {model.ncam}), got {int(camera)}")
        return ResolvedCamera(camera_names(model)[int(camera)], int(camera), None, -1)
    raise ArgumentTypeError(
        f"{argument}: expected a camera name, a camera id, 'free' or a FreeCamera, got"
        f" {type(camera).__name__} {checks.short_repr(camera)}"
    )


# ----------------------------------------------------------------------
# projection (from MuJoCo's mjvGLCamera of a scene)
# ----------------------------------------------------------------------
def metric_depth(glcam: Any, raw: np.ndarray, background: np.ndarray) -> np.ndarray:
    """Depth buffer values (0 at the near plane, 1 at the far one) -> metres along the optical axis;
    ``inf`` where ``background`` or at the far plane."""
    near, far = float(glcam.frustum_near), float(glcam.frustum_far)
    r = raw.astype(np.float64)
    if glcam.orthographic:
        z = near + r * (far - near)
    else:
        z = near * far / (far - r * (far - near))
    z[background | (r >= 1.0)] = np.inf
    return z.astype(np.float32)


def camera_matrices(glcam: Any, width: int, height: int) -> tuple[np.ndarray, np.ndarray, bool]:
    """``(intrinsic_cv (3, 3), cam2world_gl (4, 4), orthographic)`` of ``glcam`` for a
    ``width`` x ``height`` image."""
    h, w = height, width
    near, top, bottom, center = (
        float(glcam.frustum_near),
        float(glcam.frustum_top),
        float(glcam.frustum_bottom),
        float(glcam.frustum_center),
    )
    ortho = bool(glcam.orthographic)
    scale = 1.0 if ortho else near  # frustum sizes: on the near plane (perspective), metres (orthographic)
    f = h * scale / (top - bottom)  # square pixels: the width follows the aspect ratio
    cx = w / 2 - center * f / scale
    cy = h * top / (top - bottom)
    k = np.array([[f, 0, cx - 0.5], [0, f, cy - 0.5], [0, 0, 1]], np.float64)
    fwd = np.array(glcam.forward, np.float64)
    fwd /= np.linalg.norm(fwd)
    up = np.array(glcam.up, np.float64)
    up -= fwd * (up @ fwd)
    up /= np.linalg.norm(up)
    right = np.cross(fwd, up)
    c2w = np.eye(4)
    c2w[:3, 0], c2w[:3, 1], c2w[:3, 2], c2w[:3, 3] = right, up, -fwd, np.array(glcam.pos, np.float64)
    return k, c2w, ortho


def pixel_rays(glcam: Any, width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    """``(H*W, 3)`` origins and directions, world frame, such that a pixel's point is
    ``origin + depth * direction`` (directions have unit component along the optical axis)."""
    k, c2w, ortho = camera_matrices(glcam, width, height)
    f, cx, cy = k[0, 0], k[0, 2], k[1, 2]
    v, u = np.mgrid[0:height, 0:width]
    x = ((u - cx) / f).reshape(-1)  # camera x (right), per unit depth (perspective) or metres (ortho)
    y = (-(v - cy) / f).reshape(-1)  # camera y (up)
    right, up, back, pos = c2w[:3, 0], c2w[:3, 1], c2w[:3, 2], c2w[:3, 3]
    lateral = x[:, None] * right + y[:, None] * up
    if ortho:
        return pos + lateral, np.broadcast_to(-back, lateral.shape)
    return np.broadcast_to(pos, lateral.shape), lateral - back
