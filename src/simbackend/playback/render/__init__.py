"""Pictures of any backend's state, drawn by MuJoCo's offscreen renderer.

Every backend is built from one compiled MuJoCo model (``backend.info.compiled``),
so MuJoCo's renderer can draw the state ``qpos`` of any backend (MuJoCo, PhysX,
...) on a machine without a GPU. This package is the one place outside
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
  (0, 1, 2), with its lights, materials and textures; with ``dress=True`` (rgb
  only), also the floor, light and sky the model lacks
  (:mod:`~simbackend.playback.render.dress`). Sites are not drawn (they
  are markers, not objects). Kinematics come from ``qpos`` alone
  (``mj_kinematics``, ``mj_comPos``, ``mj_camlight``, and ``mj_tendon`` /
  ``mj_flex`` where the model has tendons or flexes); mocap bodies stay at their
  model pose.
* **Cameras.** A model camera (by name or id), ``"free"`` (the default free
  camera, which frames the model's moving parts and follows a floating base:
  :meth:`FreeCamera.framing`, :mod:`~simbackend.playback.render.framing`) or a
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
``WAYLAND_DISPLAY`` unset) and mujoco is not imported yet, importing this package
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

Modules
-------
* :mod:`~simbackend.playback.render.gl`: the OpenGL context (imported first: it
  chooses the GL platform before mujoco loads).
* :mod:`~simbackend.playback.render.arguments`: checks of sizes, modes, spacing, states.
* :mod:`~simbackend.playback.render.framing`: where the moving parts are (the default camera, the floor height).
* :mod:`~simbackend.playback.render.cameras`: camera arguments and pixel geometry.
* :mod:`~simbackend.playback.render.dress`: the floor, light and sky added to pictures of models lacking them.
* :mod:`~simbackend.playback.render.tiling`: the layout and scene of tiled views.
* :mod:`~simbackend.playback.render.renderer`: :class:`Renderer`, which draws.
"""

from __future__ import annotations

# gl first: it sets MUJOCO_GL before anything imports mujoco
from simbackend.playback.render.gl import gl_context_class, gl_unavailable_reason  # isort: skip
from simbackend.playback.render.arguments import (
    MAX_IMAGE_SIDE,
    MODES,
    SEGMENTATION_KINDS,
    check_image_size,
    check_modes,
    check_segmentation,
    check_spacing,
)
from simbackend.playback.render.cameras import FREE, FreeCamera, camera_names, resolve_camera
from simbackend.playback.render.renderer import Renderer
from simbackend.playback.render.tiling import default_spacing, tile_offsets

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
