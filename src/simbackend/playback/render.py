"""Pictures of any backend's state, drawn by MuJoCo's offscreen renderer.

Every backend is built from one compiled MuJoCo model (``backend.info.compiled``),
so MuJoCo's renderer can draw the state ``qpos`` of any backend (MuJoCo, PhysX,
...) on a machine without a GPU. This module is the one place outside
``backends/`` and ``models/`` that imports mujoco (``docs/architecture.md``, "The
dependency rule"); it imports no backend. :class:`~simbackend.playback.api.PlaybackMixin`
puts it behind the contract (``backend.render()``, ``get_camera_images``,
``get_point_cloud``).

Conventions
-----------
* **Images.** Row 0 is the top of the picture, column 0 its left. ``rgb`` is
  ``(n, H, W, 3)`` uint8; ``depth`` is ``(n, H, W, 1)`` float32 **metres**, the
  z-depth: the distance from the camera's centre along its optical axis (not
  along the pixel's ray), ``inf`` where nothing is hit (also beyond the far
  clipping plane, ``model.vis.map.zfar * model.stat.extent``); ``segmentation``
  is ``(n, H, W, 1)`` int32, the id of the geom (``"geom"``) or of the body
  owning it (``"body"``, the world body is 0) seen at each pixel, ``-1`` for the
  background and for objects that are not geoms (tendons, flexes, skins).
  Outputs are torch tensors, on the CPU unless a ``device`` is given.
* **What is drawn.** The model's geoms of the groups MuJoCo shows by default
  (0, 1, 2), with its lights, materials and textures. Sites are not drawn (they
  are markers, not objects). Kinematics come from ``qpos`` alone
  (``mj_kinematics``, ``mj_comPos``, ``mj_camlight``, and ``mj_tendon`` /
  ``mj_flex`` where the model has tendons or flexes); mocap bodies stay at their
  model pose.
* **Cameras.** A model camera (by name or id), ``"free"`` (the default free
  camera, which frames the whole model: :meth:`FreeCamera.framing`) or a
  :class:`FreeCamera`. The camera frame is MuJoCo's and OpenGL's: x right, y up,
  looking along -z. :meth:`Renderer.camera_params` gives the intrinsics in
  OpenCV's convention (``intrinsic_cv``: pixel centres at integer coordinates,
  square pixels, ``fy = H / (2 tan(fovy / 2))``) and the camera pose
  ``cam2world_gl`` (the camera frame above, in the world frame).
* **Point clouds** (:meth:`Renderer.point_cloud`): every pixel of every camera
  unprojected with its depth, in the **world frame**, fused camera after camera
  (camera ``c``'s pixels are points ``c*H*W ... (c+1)*H*W - 1``, row-major).
  ``xyz`` ``(n, P, 3)`` float32 metres, ``rgb`` ``(n, P, 3)`` uint8,
  ``segmentation`` ``(n, P)`` int32 and ``valid`` ``(n, P)`` bool: False where
  nothing was hit (``xyz`` is 0 there). ManiSkill, for comparison, reports depth
  as int16 millimetres with 0 for "nothing hit", and its fused point cloud as
  homogeneous ``xyzw`` in the world frame with ``w = 0`` marking points at
  infinity; here depth is float32 metres with ``inf`` for "nothing hit", and the
  cloud keeps ``xyz`` and a separate ``valid`` mask. Both use OpenGL's camera
  frame for poses (ManiSkill's ``cam2world_gl``) and OpenCV's for intrinsics.
* **Tiled views** (:meth:`Renderer.render_tiled`): the states of several envs
  in one 3D scene, env ``k`` of the list shifted by :func:`tile_offsets`
  (a grid of ``ceil(sqrt(n))`` columns along +x and rows along +y, ``spacing``
  metres apart, the first env unshifted). Each env's geoms are added to one
  scene (``mjv_updateScene`` for the first, ``mjv_addGeoms`` for the others,
  their positions then shifted). The floor (planes of the world body facing
  up) is drawn once: the first env's floor, repeated edge to edge at its own
  size until it covers every env's cell (an infinite plane once); every other
  geom, static ones (a table, a height field) included, is drawn for every env.
  The first env's lights light every env (spot and point lights are made
  directional, so that envs far from the first are lit as it is). The default
  spacing is ``1.1 * model.stat.extent``.

Headless OpenGL
---------------
If ``MUJOCO_GL`` is unset, no display is reachable (``DISPLAY`` and
``WAYLAND_DISPLAY`` unset) and mujoco is not imported yet, importing this module
sets ``MUJOCO_GL=egl``, so MuJoCo renders through EGL (a GPU's, or Mesa's
software rasteriser). When mujoco was imported before, with ``MUJOCO_GL`` unset
(so it chose GLFW, which needs a display) and no display exists, the renderer
uses MuJoCo's EGL context directly; where even that fails, or where
``MUJOCO_GL`` names a platform that cannot work here, it raises
:class:`~simbackend.errors.RenderingError` with a one-line message saying to set
``MUJOCO_GL=egl`` before importing mujoco or simbackend.

Framebuffer size
----------------
MuJoCo renders offscreen into a framebuffer of the model's ``<visual><global
offwidth offheight>`` (640 x 480 by default). A :class:`Renderer` owns its GL
context, so it enlarges its own framebuffer (``mjr_resizeOffscreen``) to the
image size asked for instead of refusing it; the model is neither changed nor
copied. Sizes above :data:`MAX_IMAGE_SIDE` pixels are refused with an error
naming ``width`` or ``height``.
"""

from __future__ import annotations

import math
import numbers
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


def _prefer_headless_gl() -> None:
    """Choose EGL for MuJoCo when nothing else was chosen and no display exists (before mujoco loads)."""
    if "mujoco" in sys.modules or os.environ.get("MUJOCO_GL"):
        return
    if os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"):
        return
    os.environ["MUJOCO_GL"] = "egl"


_prefer_headless_gl()

import mujoco  # noqa: E402  (after the GL platform is chosen)
import numpy as np  # noqa: E402
import torch  # noqa: E402

from simbackend import _validate as V  # noqa: E402
from simbackend.devices import require_device  # noqa: E402
from simbackend.errors import (  # noqa: E402
    ArgumentTypeError,
    IndexRangeError,
    InputShapeError,
    InvalidArgumentError,
    NonFiniteError,
    RenderingError,
    UnknownNameError,
)

__all__ = [
    "FreeCamera",
    "Renderer",
    "FREE",
    "MODES",
    "SEGMENTATION_KINDS",
    "MAX_IMAGE_SIDE",
    "camera_names",
    "check_image_size",
    "check_modes",
    "check_segmentation",
    "check_spacing",
    "default_spacing",
    "gl_context_class",
    "gl_unavailable_reason",
    "resolve_camera",
    "tile_offsets",
]

#: image kinds a :class:`Renderer` produces
MODES = ("rgb", "depth", "segmentation")
#: what a segmentation pixel names: the geom, or the body owning it
SEGMENTATION_KINDS = ("geom", "body")
#: the largest image width or height accepted, pixels
MAX_IMAGE_SIDE = 8192
#: name of the free camera in camera arguments
FREE = "free"

_OBJ_GEOM = int(mujoco.mjtObj.mjOBJ_GEOM)
_OBJ_CAMERA = int(mujoco.mjtObj.mjOBJ_CAMERA)
_OBJ_BODY = int(mujoco.mjtObj.mjOBJ_BODY)
_GEOM_PLANE = int(mujoco.mjtGeom.mjGEOM_PLANE)
_GEOM_NONE = int(mujoco.mjtGeom.mjGEOM_NONE)
_SEGMENT = int(mujoco.mjtRndFlag.mjRND_SEGMENT)
_IDCOLOR = int(mujoco.mjtRndFlag.mjRND_IDCOLOR)
_CAT_ALL = int(mujoco.mjtCatBit.mjCAT_ALL)
_LIGHT_SPOT = int(mujoco.mjtLightType.mjLIGHT_SPOT)
_LIGHT_POINT = int(mujoco.mjtLightType.mjLIGHT_POINT)
_LIGHT_DIRECTIONAL = int(mujoco.mjtLightType.mjLIGHT_DIRECTIONAL)


# ----------------------------------------------------------------------
# OpenGL context
# ----------------------------------------------------------------------
_DEFAULT_GL = ("", "enable", "enabled", "on", "true", "1")


def _has_display() -> bool:
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _mujoco_gl_at_import() -> str:
    """The ``MUJOCO_GL`` value mujoco chose its GL platform with (read when mujoco was imported)."""
    module = sys.modules.get("mujoco.rendering.classic.gl_context")
    value = getattr(module, "_MUJOCO_GL", None)
    if not isinstance(value, str):
        value = os.environ.get("MUJOCO_GL", "")
    return value.lower().strip()


_GL_CLASS: Any = None


def gl_context_class() -> Any:
    """The class of OpenGL context the renderer creates (MuJoCo's ``GLContext`` for its GL platform).

    Raises:
        RenderingError: mujoco was imported with a GL platform that cannot work
            here (GLFW without a display, rendering disabled) and MuJoCo's EGL
            context cannot stand in for it.
    """
    global _GL_CLASS
    if _GL_CLASS is not None:
        return _GL_CLASS
    cls = getattr(mujoco, "GLContext", None)
    module = getattr(cls, "__module__", "") or ""
    chosen = _mujoco_gl_at_import()
    if cls is not None and (not module.startswith("mujoco.glfw") or _has_display()):
        _GL_CLASS = cls
        return cls
    if chosen in _DEFAULT_GL:
        # MuJoCo picked GLFW only because MUJOCO_GL was unset: its EGL context needs no display
        try:
            from mujoco.egl import GLContext as egl_context  # noqa: PLC0415
        except Exception:  # noqa: BLE001 - any failure: no EGL here; explained below
            egl_context = None
        if egl_context is not None:
            _GL_CLASS = egl_context
            return egl_context
    shown = f"MUJOCO_GL={chosen!r}" if chosen else "MUJOCO_GL unset"
    why = (
        "which needs a display (DISPLAY and WAYLAND_DISPLAY are unset)"
        if cls is not None
        else "which gives no OpenGL context"
    )
    raise RenderingError(
        f"rendering: mujoco was imported with {shown}, {why}; set MUJOCO_GL=egl in the"
        " environment before importing mujoco or simbackend"
    )


def gl_unavailable_reason() -> str | None:
    """``None`` where a GL context class is available, else the one-line reason (no context is created)."""
    try:
        gl_context_class()
    except RenderingError as e:
        return str(e)
    return None


# ----------------------------------------------------------------------
# argument checks
# ----------------------------------------------------------------------
def _real(x: Any, argument: str) -> float:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Real):
        raise ArgumentTypeError(f"{argument}: expected a real number, got {type(x).__name__} {x!r}")
    v = float(x)
    if not math.isfinite(v):
        raise InvalidArgumentError(f"{argument}: expected a finite number, got {v}")
    return v


def _vec3(x: Any, argument: str) -> tuple[float, float, float]:
    if isinstance(x, (str, bytes)):
        raise ArgumentTypeError(f"{argument}: expected 3 numbers, got a string")
    try:
        shape = tuple(x.shape) if isinstance(x, (torch.Tensor, np.ndarray)) else np.shape(x)
    except ValueError:
        shape = ("ragged",)
    if shape != (3,):
        raise InputShapeError(argument, (3,), tuple(s if isinstance(s, int) else -1 for s in shape))
    a = V.real_tensor(x, argument, (3,), device=torch.device("cpu"), dtype=torch.float64).numpy()
    if not np.isfinite(a).all():
        raise InvalidArgumentError(f"{argument}: expected finite values, got {a.tolist()}")
    return (float(a[0]), float(a[1]), float(a[2]))


def _int_in(value: Any, argument: str, low: int, high: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise ArgumentTypeError(f"{argument}: expected an integer, got {type(value).__name__} {value!r}")
    if not low <= int(value) <= high:
        raise InvalidArgumentError(f"{argument}: expected an integer in [{low}, {high}], got {int(value)}")
    return int(value)


def check_image_size(value: Any, argument: str) -> int:
    """An image width or height: an int in ``[1, MAX_IMAGE_SIDE]`` (``InvalidArgumentError`` naming ``argument``)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise ArgumentTypeError(
            f"{argument}: expected an integer number of pixels, got {type(value).__name__} {value!r}"
        )
    v = int(value)
    if v < 1:
        raise InvalidArgumentError(f"{argument}: expected a number of pixels >= 1, got {v}")
    if v > MAX_IMAGE_SIDE:
        raise InvalidArgumentError(
            f"{argument}: {v} pixels is above the largest image side the renderer accepts ({MAX_IMAGE_SIDE})"
        )
    return v


def check_modes(modes: Any, argument: str = "modes") -> tuple[str, ...]:
    """``modes`` (a mode name or a sequence of names from :data:`MODES`) as a tuple without repeats."""
    if isinstance(modes, str):
        modes = (modes,)
    if not isinstance(modes, (list, tuple)):
        raise ArgumentTypeError(
            f"{argument}: expected a mode name or a sequence of names from {list(MODES)}, got {type(modes).__name__}"
        )
    if not modes:
        raise InvalidArgumentError(f"{argument}: expected at least one of {list(MODES)}, got none")
    out: list[str] = []
    for m in modes:
        if not isinstance(m, str):
            raise ArgumentTypeError(f"{argument}: expected mode names (str), got {type(m).__name__} {m!r}")
        if m not in MODES:
            raise InvalidArgumentError(f"{argument}: unknown mode {m!r}; expected one of {list(MODES)}")
        if m in out:
            raise InvalidArgumentError(f"{argument}: mode {m!r} named twice")
        out.append(m)
    return tuple(out)


def check_segmentation(kind: Any, argument: str = "segmentation") -> str:
    """``"geom"`` or ``"body"``."""
    if not isinstance(kind, str) or kind not in SEGMENTATION_KINDS:
        raise InvalidArgumentError(f"{argument}: expected one of {list(SEGMENTATION_KINDS)}, got {kind!r}")
    return kind


def check_spacing(spacing: Any, argument: str = "spacing") -> float | None:
    """``None`` or a finite distance > 0, metres."""
    if spacing is None:
        return None
    v = _real(spacing, argument)
    if v <= 0:
        raise InvalidArgumentError(f"{argument}: expected a distance > 0 (metres), got {v}")
    return v


def _check_model(model: Any) -> Any:
    if not isinstance(model, mujoco.MjModel):
        raise ArgumentTypeError(
            f"model: expected a compiled mujoco.MjModel (backend.info.compiled), got {type(model).__name__}"
        )
    return model


# ----------------------------------------------------------------------
# cameras
# ----------------------------------------------------------------------
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
        object.__setattr__(self, "lookat", _vec3(self.lookat, "FreeCamera.lookat"))
        distance = _real(self.distance, "FreeCamera.distance")
        if distance <= 0:
            raise InvalidArgumentError(f"FreeCamera.distance: expected a distance > 0 (metres), got {distance}")
        object.__setattr__(self, "distance", distance)
        object.__setattr__(self, "azimuth", _real(self.azimuth, "FreeCamera.azimuth"))
        elevation = _real(self.elevation, "FreeCamera.elevation")
        if not -90.0 <= elevation <= 90.0:
            raise InvalidArgumentError(f"FreeCamera.elevation: expected degrees in [-90, 90], got {elevation}")
        object.__setattr__(self, "elevation", elevation)
        if self.track_body is not None and not isinstance(self.track_body, str):
            raise ArgumentTypeError(
                f"FreeCamera.track_body: expected a body name or None, got"
                f" {type(self.track_body).__name__} {self.track_body!r}"
            )

    @classmethod
    def framing(cls, model: Any, spacing: float | None = None, num_envs: int = 1) -> FreeCamera:
        """The camera framing the whole model (MuJoCo's default free camera): looking at
        ``model.stat.center`` from ``1.5 * model.stat.extent``, at the model's
        ``<visual><global azimuth elevation>``. With ``num_envs > 1``, it frames the grid
        of a tiled view of that many envs ``spacing`` apart (default :func:`default_spacing`)."""
        model = _check_model(model)
        n = V.positive_int(num_envs, "num_envs")
        center = np.array(model.stat.center, dtype=np.float64)
        distance = 1.5 * float(model.stat.extent)
        if n > 1:
            s = default_spacing(model) if spacing is None else check_spacing(spacing)
            offsets = tile_offsets(n, s)
            center = center + (offsets.min(0) + offsets.max(0)) / 2
            half_diagonal = float(np.linalg.norm(offsets.max(0) - offsets.min(0))) / 2
            fovy = math.radians(float(model.vis.global_.fovy))
            distance = max(distance, 0.9 * (half_diagonal + 0.5 * float(model.stat.extent)) / math.tan(fovy / 2))
        g = model.vis.global_
        return cls(tuple(center), max(distance, 1e-3), float(g.azimuth), float(np.clip(g.elevation, -90, 90)))


@dataclass(frozen=True)
class _Camera:
    """A validated camera argument."""

    key: str  # the name results are keyed by
    fixed_id: int  # model camera id, or -1 for a free camera
    free: FreeCamera | None  # the free camera (None: the model's default framing)
    track: int  # body id the free camera follows, or -1


def camera_names(model: Any) -> tuple[str, ...]:
    """The model's camera names in id order (an unnamed camera is ``camera<id>``)."""
    model = _check_model(model)
    return tuple(mujoco.mj_id2name(model, _OBJ_CAMERA, i) or f"camera{i}" for i in range(model.ncam))


def _body_names(model: Any) -> tuple[str, ...]:
    names = []
    for i in range(model.nbody):
        name = mujoco.mj_id2name(model, _OBJ_BODY, i)
        names.append("world" if i == 0 else (name or f"body{i}"))
    return tuple(names)


def resolve_camera(model: Any, camera: Any, argument: str = "camera") -> _Camera:
    """Check a camera argument: a model camera name or id, ``"free"`` or a :class:`FreeCamera`.

    Raises:
        UnknownNameError: an unknown camera name (or ``track_body`` name), with the closest ones.
        IndexRangeError: a camera id out of range.
        ArgumentTypeError: anything else.
    """
    if isinstance(camera, FreeCamera):
        track = -1
        if camera.track_body is not None:
            names = _body_names(model)
            if camera.track_body not in names:
                raise UnknownNameError("body", camera.track_body, names)
            track = names.index(camera.track_body)
        return _Camera(FREE, -1, camera, track)
    if isinstance(camera, str):
        if camera == FREE:
            return _Camera(FREE, -1, None, -1)
        names = camera_names(model)
        if camera not in names:
            raise UnknownNameError("camera", camera, (FREE, *names))
        return _Camera(camera, names.index(camera), None, -1)
    if isinstance(camera, (numbers.Integral, np.integer)) and not isinstance(camera, (bool, np.bool_)):
        if not 0 <= int(camera) < model.ncam:
            raise IndexRangeError(f"{argument}: camera ids must be in [0, {model.ncam}), got {int(camera)}")
        return _Camera(camera_names(model)[int(camera)], int(camera), None, -1)
    raise ArgumentTypeError(
        f"{argument}: expected a camera name, a camera id, 'free' or a FreeCamera, got"
        f" {type(camera).__name__} {camera!r}"
    )


# ----------------------------------------------------------------------
# tiling
# ----------------------------------------------------------------------
def default_spacing(model: Any) -> float:
    """Distance between neighbouring envs of a tiled view: ``1.1 * model.stat.extent`` metres."""
    return 1.1 * max(float(_check_model(model).stat.extent), 1e-3)


def tile_offsets(n: int, spacing: float) -> np.ndarray:
    """``(n, 3)`` float64 world-frame shifts of the envs of a tiled view, metres.

    Env ``k`` (in the order the envs are given) sits in column ``k % c`` and row
    ``k // c`` of a grid of ``c = ceil(sqrt(n))`` columns: shifted by
    ``(column * spacing, row * spacing, 0)``. The first env is not shifted.
    """
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
        raise InvalidArgumentError(f"n: expected an integer >= 0, got {n!r}")
    s = check_spacing(spacing)
    cols = max(1, math.ceil(math.sqrt(n)))
    k = np.arange(int(n))
    return np.stack([(k % cols) * s, (k // cols) * s, np.zeros(int(n))], axis=1).astype(np.float64)


# ----------------------------------------------------------------------
# the renderer
# ----------------------------------------------------------------------
class Renderer:
    """MuJoCo's offscreen renderer on one compiled model: images of batches of states.

    ``Renderer(model, width=320, height=240)``; one OpenGL context per renderer,
    created here and reused by every call; :meth:`close` frees it (also as a
    context manager). Not thread-safe: one thread at a time.

    Args:
        model: the compiled ``mujoco.MjModel`` (``backend.info.compiled``); it is
            read and left as it was (see the note below).
        width, height: image size, pixels (at most :data:`MAX_IMAGE_SIDE`; the
            framebuffer is enlarged past the model's ``offwidth``/``offheight``
            as needed, see the module docstring).
        shadow_size: side of the shadow map, pixels (at most the model's
            ``<visual><quality shadowsize>``, 4096 by default); ``None``: the
            model's. The default 1024 is plenty for images of a few hundred
            pixels and five times faster than 4096 without a GPU (software
            rasterisation renders the shadow map on every frame).
        samples: multisampling (anti-aliasing) samples per pixel of the rgb image;
            ``None``: the model's ``<visual><quality offsamples>`` (4 by
            default); 0 turns it off (about twice as fast without a GPU).
            Depth and segmentation are never multisampled.
        max_geom: initial capacity of the scene in geoms (it grows for tiled views).

    Note: the model's ``vis.quality.shadowsize``/``offsamples`` (visual settings no
    engine reads) are set to ``shadow_size``/``samples`` while the GL context is
    created and restored right after; nothing else writes to the model.

    Raises:
        RenderingError: no OpenGL context can be created here (the message says why).
    """

    def __init__(
        self,
        model: Any,
        width: int = 320,
        height: int = 240,
        *,
        shadow_size: int | None = 1024,
        samples: int | None = None,
        max_geom: int = 2000,
    ):
        self._gl: Any = None
        self._con: Any = None
        self._model = _check_model(model)
        self._width = check_image_size(width, "width")
        self._height = check_image_size(height, "height")
        m = model
        quality = m.vis.quality
        if shadow_size is not None:
            shadow_size = min(_int_in(shadow_size, "shadow_size", 1, 16384), int(quality.shadowsize))
        else:
            shadow_size = int(quality.shadowsize)
        samples = int(quality.offsamples) if samples is None else _int_in(samples, "samples", 0, 16)
        max_geom = V.positive_int(max_geom, "max_geom")
        cls = gl_context_class()
        try:
            fb_w = max(self._width, int(m.vis.global_.offwidth))
            fb_h = max(self._height, int(m.vis.global_.offheight))
            self._gl = cls(fb_w, fb_h)
            self._gl.make_current()
            saved = (int(quality.shadowsize), int(quality.offsamples))
            try:
                quality.shadowsize, quality.offsamples = shadow_size, samples
                self._con = mujoco.MjrContext(m, int(mujoco.mjtFontScale.mjFONTSCALE_100))
            finally:
                quality.shadowsize, quality.offsamples = saved
            if self._con.offWidth < self._width or self._con.offHeight < self._height:
                mujoco.mjr_resizeOffscreen(
                    max(self._width, self._con.offWidth), max(self._height, self._con.offHeight), self._con
                )
            mujoco.mjr_setBuffer(int(mujoco.mjtFramebuffer.mjFB_OFFSCREEN), self._con)
            self._con.readDepthMap = mujoco.mjtDepthMap.mjDEPTH_ZERONEAR
        except Exception as e:  # noqa: BLE001 - a GL failure of any kind: say what to do
            self.close()
            if "egl" in (getattr(cls, "__module__", "") or "") or _mujoco_gl_at_import() == "egl":
                hint = "EGL is not usable here: install an EGL driver (Mesa's libegl1, or the GPU's)"
            else:
                hint = "on a machine without a display set MUJOCO_GL=egl before importing mujoco or simbackend"
            raise RenderingError(
                f"rendering: could not create an OpenGL context ({type(e).__name__}:"
                f" {' '.join(str(e).split())}); {hint}"
            ) from e
        if self._con.offWidth < self._width or self._con.offHeight < self._height:
            got = (self._con.offWidth, self._con.offHeight)
            self.close()
            raise RenderingError(
                f"rendering: the OpenGL framebuffer could not be enlarged to"
                f" {self._width}x{self._height} (got {got[0]}x{got[1]}); ask for a smaller width"
                " or height"
            )
        self._data = mujoco.MjData(m)
        self._option = mujoco.MjvOption()
        self._option.sitegroup[:] = 0  # sites are markers, not objects
        self._scene = mujoco.MjvScene(m, maxgeom=max_geom)
        self._camera = mujoco.MjvCamera()
        self._perturb = mujoco.MjvPerturb()  # nothing selected: no perturbation decor
        self._rect = mujoco.MjrRect(0, 0, self._width, self._height)
        self._pixels = np.empty((self._height, self._width, 3), np.uint8)
        self._depth = np.empty((self._height, self._width), np.float32)
        self._geom_body = np.asarray(m.geom_bodyid, dtype=np.int32)
        # planes of the world body: those facing up (the floor) are drawn once in a tiled view
        self._world_plane = (np.asarray(m.geom_bodyid) == 0) & (np.asarray(m.geom_type) == _GEOM_PLANE)

    # ------------------------------------------------------------------
    @property
    def model(self) -> Any:
        """The compiled ``mujoco.MjModel`` drawn."""
        return self._model

    @property
    def width(self) -> int:
        return self._width

    @property
    def height(self) -> int:
        return self._height

    @property
    def closed(self) -> bool:
        return self._con is None

    @property
    def camera_names(self) -> tuple[str, ...]:
        """The model's camera names, id order."""
        return camera_names(self._model)

    def close(self) -> None:
        """Free the GL context (idempotent); later calls raise ``RenderingError``."""
        con, gl = self._con, self._gl
        self._con = self._gl = None
        try:
            if con is not None:
                if gl is not None:
                    gl.make_current()
                con.free()
        finally:
            if gl is not None:
                gl.free()

    def __enter__(self) -> Renderer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def __repr__(self) -> str:
        return f"Renderer({self._width}x{self._height}{', closed' if self.closed else ''})"

    # ------------------------------------------------------------------
    # public calls
    # ------------------------------------------------------------------
    def render(
        self, qpos: Any, camera: Any = FREE, *, modes: Any = ("rgb",), segmentation: str = "geom", device: Any = None
    ) -> dict[str, torch.Tensor]:
        """Images of each state of ``qpos`` through one camera.

        Args:
            qpos: ``(n, nq)`` states (MuJoCo's layout; numpy, torch or sequences).
            camera: a model camera name or id, ``"free"`` (frames the model) or a :class:`FreeCamera`.
            modes: ``"rgb"``, ``"depth"``, ``"segmentation"`` or a sequence of them.
            segmentation: ``"geom"`` (geom ids) or ``"body"`` (body ids) for ``"segmentation"``.
            device: where the tensors go (default CPU).

        Returns:
            ``{mode: tensor}``: ``rgb`` ``(n, H, W, 3)`` uint8, ``depth`` ``(n, H, W, 1)``
            float32 metres (z-depth, ``inf`` where nothing is hit), ``segmentation``
            ``(n, H, W, 1)`` int32 (-1: background or not a geom). See the module docstring.
        """
        cam, modes, kind, dev = self._check_call(camera, modes, segmentation, device)
        q = self._qpos(qpos)
        out = self._render_batch(q, cam, modes, kind)
        return {k: torch.from_numpy(v).to(dev) for k, v in out.items() if k in modes}

    def render_tiled(
        self,
        qpos: Any,
        camera: Any = FREE,
        *,
        modes: Any = ("rgb",),
        spacing: float | None = None,
        segmentation: str = "geom",
        device: Any = None,
    ) -> dict[str, torch.Tensor]:
        """One picture of several states side by side in one scene (the envs of ``qpos`` on a grid).

        Env ``k`` (row ``k`` of ``qpos``) is shifted by ``tile_offsets(n, spacing)[k]``;
        the floor is drawn once, repeated to cover the grid; lights become directional
        (see the module docstring). ``camera="free"`` frames the whole grid
        (:meth:`FreeCamera.framing`); a model camera or a :class:`FreeCamera`
        is placed as in the first env's state (a ``track_body`` follows the
        first env's body).

        Args:
            qpos: ``(n, nq)`` states, ``n >= 1``.
            spacing: metres between neighbouring envs (default :func:`default_spacing`).
            camera, modes, segmentation, device: as :meth:`render`.

        Returns:
            ``{mode: tensor}`` of single pictures: ``(H, W, 3)``, ``(H, W, 1)``, ``(H, W, 1)``.
        """
        cam, modes, kind, dev = self._check_call(camera, modes, segmentation, device)
        s = check_spacing(spacing)
        q = self._qpos(qpos)
        if q.shape[0] == 0:
            raise InvalidArgumentError("qpos: a tiled view needs at least one state, got (0, nq)")
        s = default_spacing(self._model) if s is None else s
        offsets = tile_offsets(q.shape[0], s)
        if cam.fixed_id < 0 and cam.free is None:
            cam = _Camera(FREE, -1, FreeCamera.framing(self._model, s, q.shape[0]), -1)
        self._begin()
        self._build_tiled_scene(q, cam, offsets)
        pixels = self._draw(modes, kind)
        return {k: torch.from_numpy(v).to(dev) for k, v in pixels.items() if k in modes}

    def camera_params(self, qpos: Any, camera: Any = FREE, *, device: Any = None) -> dict[str, Any]:
        """The camera's intrinsics and pose in each state of ``qpos`` (nothing is rendered).

        Returns:
            * ``intrinsic_cv`` ``(n, 3, 3)`` float32: OpenCV's ``[[fx, 0, cx], [0, fy, cy], [0, 0, 1]]``
              in pixels for this renderer's size, pixel centres at integer coordinates
              (an orthographic camera: ``fx = fy`` in pixels per metre);
            * ``cam2world_gl`` ``(n, 4, 4)`` float32: the camera frame (x right, y up,
              looking along -z) in the world frame, metres;
            * ``orthographic``: a bool.
        """
        cam, _, _, dev = self._check_call(camera, ("rgb",), "geom", device)
        q = self._qpos(qpos)
        n = q.shape[0]
        intr = np.zeros((n, 3, 3), np.float32)
        pose = np.zeros((n, 4, 4), np.float32)
        ortho = False
        for i in range(n):
            self._set_state(q[i])
            self._update_scene(cam, catmask=0)
            k, c2w, ortho = self._camera_matrices()
            intr[i], pose[i] = k, c2w
        return {
            "intrinsic_cv": torch.from_numpy(intr).to(dev),
            "cam2world_gl": torch.from_numpy(pose).to(dev),
            "orthographic": bool(ortho),
        }

    def point_cloud(
        self, qpos: Any, cameras: Any, *, segmentation: str = "geom", device: Any = None
    ) -> dict[str, torch.Tensor]:
        """Points seen by one or several cameras, fused, in the world frame.

        Args:
            qpos: ``(n, nq)`` states.
            cameras: a camera (as in :meth:`render`) or a sequence of cameras.
            segmentation: ``"geom"`` or ``"body"`` ids for the ``segmentation`` field.
            device: where the tensors go (default CPU).

        Returns:
            ``xyz`` ``(n, P, 3)`` float32 world-frame metres (0 where invalid), ``rgb``
            ``(n, P, 3)`` uint8, ``segmentation`` ``(n, P)`` int32 (-1: background or not
            a geom) and ``valid`` ``(n, P)`` bool (False where nothing was hit), with
            ``P = len(cameras) * H * W``: every pixel of the first camera (row-major), then
            of the next. See the module docstring for the conventions.
        """
        cams = self._check_cameras(cameras)
        kind = check_segmentation(segmentation)
        dev = require_device(device, allowed=("cpu", "cuda"))
        q = self._qpos(qpos)
        n, hw = q.shape[0], self._height * self._width
        xyz = np.zeros((n, len(cams) * hw, 3), np.float32)
        rgb = np.zeros((n, len(cams) * hw, 3), np.uint8)
        seg = np.full((n, len(cams) * hw), -1, np.int32)
        valid = np.zeros((n, len(cams) * hw), bool)
        for c, cam in enumerate(cams):
            out = self._render_batch(q, cam, ("rgb", "depth", "segmentation"), kind, rays=True)
            sl = slice(c * hw, (c + 1) * hw)
            depth = out["depth"].reshape(n, hw)
            ok = np.isfinite(depth)
            # world point = origin + depth * ray, rays scaled to unit z-depth (orthographic: origins vary)
            pts = out["origins"] + np.where(ok, depth, 0.0)[..., None] * out["rays"]
            xyz[:, sl] = np.where(ok[..., None], pts, 0.0)
            rgb[:, sl] = out["rgb"].reshape(n, hw, 3)
            seg[:, sl] = out["segmentation"].reshape(n, hw)
            valid[:, sl] = ok
        return {
            "xyz": torch.from_numpy(xyz).to(dev),
            "rgb": torch.from_numpy(rgb).to(dev),
            "segmentation": torch.from_numpy(seg).to(dev),
            "valid": torch.from_numpy(valid).to(dev),
        }

    # ------------------------------------------------------------------
    # checks
    # ------------------------------------------------------------------
    def _check_call(
        self, camera: Any, modes: Any, segmentation: Any, device: Any
    ) -> tuple[_Camera, tuple[str, ...], str, torch.device]:
        self._check_open()
        cam = resolve_camera(self._model, camera)
        modes = check_modes(modes)
        kind = check_segmentation(segmentation)
        dev = require_device(device, allowed=("cpu", "cuda"))
        return cam, modes, kind, dev

    def _check_cameras(self, cameras: Any) -> list[_Camera]:
        self._check_open()
        if isinstance(cameras, (str, FreeCamera, numbers.Integral)):
            cameras = [cameras]
        if not isinstance(cameras, (list, tuple)) or not cameras:
            raise ArgumentTypeError(
                f"cameras: expected a camera or a non-empty sequence of cameras, got"
                f" {type(cameras).__name__} {cameras!r}"
            )
        return [resolve_camera(self._model, c, f"cameras[{i}]") for i, c in enumerate(cameras)]

    def _check_open(self) -> None:
        if self._con is None:
            raise RenderingError("rendering: this Renderer was closed")

    def _qpos(self, qpos: Any) -> np.ndarray:
        nq = self._model.nq
        try:
            shape = tuple(qpos.shape) if isinstance(qpos, (torch.Tensor, np.ndarray)) else np.shape(qpos)
        except ValueError:
            shape = ("ragged",)
        if len(shape) != 2 or shape[1] != nq:
            raise InputShapeError("qpos", f"(n, {nq})", tuple(s if isinstance(s, int) else -1 for s in shape))
        q = V.real_tensor(qpos, "qpos", shape, device=torch.device("cpu"), dtype=torch.float64).numpy()
        bad = np.flatnonzero(~np.isfinite(q).all(axis=1))
        if bad.size:
            raise NonFiniteError("qpos", bad)
        return q

    # ------------------------------------------------------------------
    # drawing
    # ------------------------------------------------------------------
    def _begin(self) -> None:
        self._gl.make_current()

    def _set_state(self, q: np.ndarray) -> None:
        m, d = self._model, self._data
        d.qpos[:] = q
        mujoco.mj_kinematics(m, d)
        mujoco.mj_comPos(m, d)
        mujoco.mj_camlight(m, d)
        if m.ntendon:
            mujoco.mj_tendon(m, d)
        if m.nflex:
            mujoco.mj_flex(m, d)

    def _update_scene(self, cam: _Camera, catmask: int = _CAT_ALL) -> None:
        c, d = self._camera, self._data
        if cam.fixed_id >= 0:
            c.type = mujoco.mjtCamera.mjCAMERA_FIXED
            c.fixedcamid = cam.fixed_id
        else:
            free = cam.free if cam.free is not None else self._framing()
            c.type = mujoco.mjtCamera.mjCAMERA_FREE
            look = np.array(free.lookat)
            if cam.track >= 0:
                look = look + d.xpos[cam.track]
            c.lookat[:] = look
            c.distance = free.distance
            c.azimuth = free.azimuth
            c.elevation = free.elevation
        mujoco.mjv_updateScene(self._model, d, self._option, None, c, catmask, self._scene)

    def _framing(self) -> FreeCamera:
        cam = getattr(self, "_framing_cache", None)
        if cam is None:
            cam = self._framing_cache = FreeCamera.framing(self._model)
        return cam

    def _render_batch(
        self, q: np.ndarray, cam: _Camera, modes: Sequence[str], kind: str, rays: bool = False
    ) -> dict[str, np.ndarray]:
        n, h, w = q.shape[0], self._height, self._width
        out: dict[str, np.ndarray] = {}
        if "rgb" in modes:
            out["rgb"] = np.empty((n, h, w, 3), np.uint8)
        if "depth" in modes:
            out["depth"] = np.empty((n, h, w, 1), np.float32)
        if "segmentation" in modes:
            out["segmentation"] = np.empty((n, h, w, 1), np.int32)
        if rays:
            out["origins"] = np.empty((n, h * w, 3), np.float64)
            out["rays"] = np.empty((n, h * w, 3), np.float64)
        self._begin()
        for i in range(n):
            self._set_state(q[i])
            self._update_scene(cam)
            pixels = self._draw(modes, kind)
            for k, v in pixels.items():
                out[k][i] = v
            if rays:
                out["origins"][i], out["rays"][i] = self._pixel_rays()
        return out

    def _draw(self, modes: Sequence[str], kind: str) -> dict[str, np.ndarray]:
        """Render the current scene; ``{mode: (H, W, C) array}``, row 0 at the top."""
        scn, con, rect = self._scene, self._con, self._rect
        out: dict[str, np.ndarray] = {}
        if "rgb" in modes:
            scn.flags[_SEGMENT] = 0
            scn.flags[_IDCOLOR] = 0
            mujoco.mjr_render(rect, scn, con)
            mujoco.mjr_readPixels(self._pixels, None, rect, con)
            out["rgb"] = self._pixels[::-1].copy()
        if "depth" in modes or "segmentation" in modes:
            # segmentation colours: no lighting, reflections or skybox; depth from the same pass
            want_depth = "depth" in modes
            scn.flags[_SEGMENT] = 1
            scn.flags[_IDCOLOR] = 1
            try:
                mujoco.mjr_render(rect, scn, con)
                mujoco.mjr_readPixels(self._pixels, self._depth if want_depth else None, rect, con)
            finally:
                scn.flags[_SEGMENT] = 0
                scn.flags[_IDCOLOR] = 0
            p = self._pixels[::-1].astype(np.int64)
            ids = p[..., 0] | (p[..., 1] << 8) | (p[..., 2] << 16)  # segid + 1; 0: nothing drawn
            if "segmentation" in modes:
                out["segmentation"] = self._segment_lut(kind)[np.minimum(ids, scn.ngeom)][..., None]
            if want_depth:
                out["depth"] = self._metric_depth(self._depth[::-1], ids == 0)[..., None]
        return out

    def _segment_lut(self, kind: str) -> np.ndarray:
        """``(ngeom_scene + 1,)`` int32: segid + 1 -> geom or body id, -1 for the background and non-geoms."""
        scn = self._scene
        lut = np.full(scn.ngeom + 1, -1, np.int32)
        for g in scn.geoms[: scn.ngeom]:
            if g.objtype == _OBJ_GEOM and 0 <= g.segid < scn.ngeom and g.type != _GEOM_NONE:
                lut[g.segid + 1] = g.objid if kind == "geom" else self._geom_body[g.objid]
        return lut

    def _glcamera(self) -> Any:
        return mujoco.mjv_averageCamera(self._scene.camera[0], self._scene.camera[1])

    def _metric_depth(self, raw: np.ndarray, background: np.ndarray) -> np.ndarray:
        """Depth buffer values (0 at the near plane, 1 at the far one) -> metres along the optical axis."""
        cam = self._glcamera()
        near, far = float(cam.frustum_near), float(cam.frustum_far)
        r = raw.astype(np.float64)
        if cam.orthographic:
            z = near + r * (far - near)
        else:
            z = near * far / (far - r * (far - near))
        z[background | (r >= 1.0)] = np.inf
        return z.astype(np.float32)

    def _camera_matrices(self) -> tuple[np.ndarray, np.ndarray, bool]:
        """(intrinsic_cv (3, 3), cam2world_gl (4, 4), orthographic) of the scene's camera."""
        cam = self._glcamera()
        h, w = self._height, self._width
        near, top, bottom, center = (
            float(cam.frustum_near),
            float(cam.frustum_top),
            float(cam.frustum_bottom),
            float(cam.frustum_center),
        )
        ortho = bool(cam.orthographic)
        scale = 1.0 if ortho else near  # frustum sizes: on the near plane (perspective), metres (orthographic)
        f = h * scale / (top - bottom)  # square pixels: the width follows the aspect ratio
        cx = w / 2 - center * f / scale
        cy = h * top / (top - bottom)
        k = np.array([[f, 0, cx - 0.5], [0, f, cy - 0.5], [0, 0, 1]], np.float64)
        fwd = np.array(cam.forward, np.float64)
        fwd /= np.linalg.norm(fwd)
        up = np.array(cam.up, np.float64)
        up -= fwd * (up @ fwd)
        up /= np.linalg.norm(up)
        right = np.cross(fwd, up)
        c2w = np.eye(4)
        c2w[:3, 0], c2w[:3, 1], c2w[:3, 2], c2w[:3, 3] = right, up, -fwd, np.array(cam.pos, np.float64)
        return k, c2w, ortho

    def _pixel_rays(self) -> tuple[np.ndarray, np.ndarray]:
        """``(H*W, 3)`` origins and directions, world frame, such that a pixel's point is
        ``origin + depth * direction`` (directions have unit component along the optical axis)."""
        k, c2w, ortho = self._camera_matrices()
        h, w = self._height, self._width
        f, cx, cy = k[0, 0], k[0, 2], k[1, 2]
        v, u = np.mgrid[0:h, 0:w]
        x = ((u - cx) / f).reshape(-1)  # camera x (right), per unit depth (perspective) or metres (ortho)
        y = (-(v - cy) / f).reshape(-1)  # camera y (up)
        right, up, back, pos = c2w[:3, 0], c2w[:3, 1], c2w[:3, 2], c2w[:3, 3]
        lateral = x[:, None] * right + y[:, None] * up
        if ortho:
            return pos + lateral, np.broadcast_to(-back, lateral.shape)
        return np.broadcast_to(pos, lateral.shape), lateral - back

    def _build_tiled_scene(self, q: np.ndarray, cam: _Camera, offsets: np.ndarray) -> None:
        """The scene of every env of ``q``, env ``k`` shifted by ``offsets[k]``; the floor drawn once, tiled."""
        m = self._model
        n = q.shape[0]
        while True:
            scn = self._scene
            self._set_state(q[0])
            self._update_scene(cam)
            floors = [j for j in range(scn.ngeom) if self._is_floor(scn.geoms[j])]
            tiles = {j: self._floor_tiles(scn.geoms[j], offsets) for j in floors}
            need = scn.ngeom * n + sum(len(t) for t in tiles.values()) + 16
            if need > scn.maxgeom:
                self._scene = mujoco.MjvScene(m, maxgeom=int(2 ** math.ceil(math.log2(need))))
                continue
            for k in range(1, n):
                start = scn.ngeom
                self._set_state(q[k])
                mujoco.mjv_addGeoms(m, self._data, self._option, self._perturb, _CAT_ALL, scn)
                shift = offsets[k]
                for g in scn.geoms[start : scn.ngeom]:
                    if self._is_floor(g):
                        g.type = _GEOM_NONE  # the floor is drawn once, from the first env (tiled below)
                    else:
                        g.pos[:] = np.asarray(g.pos) + shift
            for j, positions in tiles.items():
                for pos in positions:
                    if scn.ngeom >= scn.maxgeom:
                        break
                    dst = scn.geoms[scn.ngeom]
                    _copy_geom(dst, scn.geoms[j])
                    dst.pos[:] = pos
                    dst.segid = scn.ngeom
                    scn.ngeom = scn.ngeom + 1
            if scn.ngeom < scn.maxgeom:
                break
            # the scene filled up (more decor than expected): grow it and build again
            self._scene = mujoco.MjvScene(m, maxgeom=2 * scn.maxgeom)
        # the first env's lights light every env: spot and point lights become directional ones
        for light in scn.lights[: scn.nlight]:
            if not light.headlight and light.type in (_LIGHT_SPOT, _LIGHT_POINT):
                light.type = _LIGHT_DIRECTIONAL

    def _is_floor(self, g: Any) -> bool:
        """A plane of the world body facing up or down (its normal, the local z axis, along world z)."""
        if g.objtype != _OBJ_GEOM or g.type == _GEOM_NONE or not self._world_plane[g.objid]:
            return False
        return abs(float(g.mat[2, 2] if np.ndim(g.mat) == 2 else g.mat[8])) > 0.999

    @staticmethod
    def _floor_tiles(g: Any, offsets: np.ndarray) -> list[np.ndarray]:
        """Centres of the extra copies of floor ``g`` (edge to edge, in its own frame) that, with
        ``g``, cover the floor of every env shifted by ``offsets``; none for an infinite plane."""
        hx, hy = float(g.size[0]), float(g.size[1])
        if hx <= 0 or hy <= 0:
            return []
        mat = np.asarray(g.mat, np.float64).reshape(3, 3)
        ax, ay = mat[:, 0], mat[:, 1]
        px, py = offsets @ ax, offsets @ ay
        i_range = range(math.floor(px.min() / (2 * hx) + 1e-9), math.ceil(px.max() / (2 * hx) - 1e-9) + 1)
        j_range = range(math.floor(py.min() / (2 * hy) + 1e-9), math.ceil(py.max() / (2 * hy) - 1e-9) + 1)
        pos = np.asarray(g.pos, np.float64)
        return [pos + 2 * hx * i * ax + 2 * hy * j * ay for i in i_range for j in j_range if (i, j) != (0, 0)]


_GEOM_FIELDS: tuple[str, ...] | None = None


def _copy_geom(dst: Any, src: Any) -> None:
    """Copy every field of scene geom ``src`` into scene geom ``dst``."""
    global _GEOM_FIELDS
    if _GEOM_FIELDS is None:
        _GEOM_FIELDS = tuple(a for a in dir(src) if not a.startswith("_") and not callable(getattr(src, a)))
    for name in _GEOM_FIELDS:
        value = getattr(src, name)
        if isinstance(value, np.ndarray):
            getattr(dst, name)[...] = value
        else:
            try:
                setattr(dst, name, value)
            except AttributeError:  # a read-only field
                pass
