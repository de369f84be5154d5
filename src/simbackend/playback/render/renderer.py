"""The renderer: MuJoCo's offscreen renderer drawing batches of states of one compiled model.

:class:`Renderer` owns one OpenGL context (:mod:`~simbackend.playback.render.gl`)
and a scene; it checks its arguments (:mod:`~simbackend.playback.render.arguments`),
sets each state's kinematics, places the camera
(:mod:`~simbackend.playback.render.cameras`), assembles tiled scenes
(:mod:`~simbackend.playback.render.tiling`) and reads pixels back. The
conventions are :mod:`simbackend.playback.render`'s.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import mujoco
import numpy as np
import torch

from simbackend import checks
from simbackend.devices import require_device
from simbackend.errors import ArgumentTypeError, InvalidArgumentError, RenderingError
from simbackend.playback.render.arguments import (
    check_image_size,
    check_model,
    check_modes,
    check_qpos,
    check_segmentation,
    check_spacing,
)
from simbackend.playback.render.cameras import (
    FREE,
    FreeCamera,
    ResolvedCamera,
    camera_matrices,
    camera_names,
    metric_depth,
    pixel_rays,
    resolve_camera,
)
from simbackend.playback.render.dress import MAX_HORIZON_TILES, MAX_SQUARES, Dress
from simbackend.playback.render.framing import MovingParts, moving_parts
from simbackend.playback.render.gl import context_failure_hint, gl_context_class
from simbackend.playback.render.tiling import (
    copy_geom,
    default_spacing,
    directional_lights,
    floor_tiles,
    is_floor,
    tile_offsets,
)

__all__ = ["Renderer"]

_OBJ_GEOM = int(mujoco.mjtObj.mjOBJ_GEOM)
_GEOM_PLANE = int(mujoco.mjtGeom.mjGEOM_PLANE)
_GEOM_NONE = int(mujoco.mjtGeom.mjGEOM_NONE)
_SEGMENT = int(mujoco.mjtRndFlag.mjRND_SEGMENT)
_IDCOLOR = int(mujoco.mjtRndFlag.mjRND_IDCOLOR)
_CAT_ALL = int(mujoco.mjtCatBit.mjCAT_ALL)
#: scene geoms a dressed picture adds at most (the floor, its squares and its copies to the horizon)
_DRESS_ROOM = MAX_SQUARES + MAX_HORIZON_TILES + 2


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
        self._model = check_model(model)
        self._width = check_image_size(width, "width")
        self._height = check_image_size(height, "height")
        m = model
        quality = m.vis.quality
        if shadow_size is not None:
            shadow_size = min(
                checks.integer(shadow_size, "shadow_size", minimum=1, maximum=16384), int(quality.shadowsize)
            )
        else:
            shadow_size = int(quality.shadowsize)
        samples = (
            int(quality.offsamples) if samples is None else checks.integer(samples, "samples", minimum=0, maximum=16)
        )
        max_geom = checks.integer(max_geom, "max_geom", minimum=1)
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
            hint = context_failure_hint(cls)
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
        self._parts: MovingParts | None = None
        self._default_camera: ResolvedCamera | None = None
        self._tiled_cameras: dict[tuple[int, float], ResolvedCamera] = {}
        self._dress: Dress | None = None
        self._target = np.zeros(3)  # the camera's target in the scene built last (world frame)
        self._cover = 0.0  # how far the envs of the scene built last reach beyond the target (tiled views)
        self._reserve = 0  # scene geoms kept free for the dress

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
        self,
        qpos: Any,
        camera: Any = FREE,
        *,
        modes: Any = ("rgb",),
        segmentation: str = "geom",
        device: Any = None,
        dress: bool = False,
    ) -> dict[str, torch.Tensor]:
        """Images of each state of ``qpos`` through one camera.

        Args:
            qpos: ``(n, nq)`` states (MuJoCo's layout; numpy, torch or sequences).
            camera: a model camera name or id, ``"free"`` (frames the model's moving
                parts, :meth:`FreeCamera.framing`) or a :class:`FreeCamera`.
            modes: ``"rgb"``, ``"depth"``, ``"segmentation"`` or a sequence of them.
            segmentation: ``"geom"`` (geom ids) or ``"body"`` (body ids) for ``"segmentation"``.
            device: where the tensors go (default CPU).
            dress: add the floor, light and sky the model lacks to the rgb image
                (:mod:`~simbackend.playback.render.dress`; never to depth or segmentation).

        Returns:
            ``{mode: tensor}``: ``rgb`` ``(n, H, W, 3)`` uint8, ``depth`` ``(n, H, W, 1)``
            float32 metres (z-depth, ``inf`` where nothing is hit), ``segmentation``
            ``(n, H, W, 1)`` int32 (-1: background or not a geom). See the module docstring.
        """
        cam, modes, kind, dev = self._check_call(camera, modes, segmentation, device)
        dressed = self._check_dress(dress)
        q = check_qpos(qpos, self._model.nq)
        out = self._render_batch(q, cam, modes, kind, dress=dressed)
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
        dress: bool = False,
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
            camera, modes, segmentation, device, dress: as :meth:`render` (the dress floor
                covers the whole grid).

        Returns:
            ``{mode: tensor}`` of single pictures: ``(H, W, 3)``, ``(H, W, 1)``, ``(H, W, 1)``.
        """
        cam, modes, kind, dev = self._check_call(camera, modes, segmentation, device)
        dressed = self._check_dress(dress)
        s = check_spacing(spacing)
        q = check_qpos(qpos, self._model.nq)
        if q.shape[0] == 0:
            raise InvalidArgumentError("qpos: a tiled view needs at least one state, got (0, nq)")
        s = default_spacing(self._model) if s is None else s
        offsets = tile_offsets(q.shape[0], s)
        if cam.fixed_id < 0 and cam.free is None:
            cam = self._tiled_framing(q.shape[0], s)
        self._begin()
        self._build_tiled_scene(q, cam, offsets)
        grid = (offsets.min(0) + offsets.max(0)) / 2
        self._target = np.asarray(self.parts.center) + grid  # the dress floor is laid under the whole grid
        self._cover = float(np.linalg.norm(offsets.max(0) - offsets.min(0))) / 2
        pixels = self._draw(modes, kind, dress=dressed)
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
        q = check_qpos(qpos, self._model.nq)
        n = q.shape[0]
        intr = np.zeros((n, 3, 3), np.float32)
        pose = np.zeros((n, 4, 4), np.float32)
        ortho = False
        for i in range(n):
            self._set_state(q[i])
            self._update_scene(cam, catmask=0)
            k, c2w, ortho = camera_matrices(self._glcamera(), self._width, self._height)
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
        q = check_qpos(qpos, self._model.nq)
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
    ) -> tuple[ResolvedCamera, tuple[str, ...], str, torch.device]:
        self._check_open()
        cam = resolve_camera(self._model, camera)
        modes = check_modes(modes)
        kind = check_segmentation(segmentation)
        dev = require_device(device, allowed=("cpu", "cuda"))
        return cam, modes, kind, dev

    def _check_cameras(self, cameras: Any) -> list[ResolvedCamera]:
        self._check_open()
        if isinstance(cameras, (str, FreeCamera, numbers.Integral)):
            cameras = [cameras]
        if not isinstance(cameras, (list, tuple)) or not cameras:
            raise ArgumentTypeError(
                f"cameras: expected a camera or a non-empty sequence of cameras, got"
                f" {type(cameras).__name__} {cameras!r}"
            )
        return [resolve_camera(self._model, c, f"cameras[{i}]") for i, c in enumerate(cameras)]

    def _check_dress(self, dress: Any) -> Dress | None:
        """The dress to add (None: none), after checking the ``dress`` flag."""
        if not isinstance(dress, (bool, np.bool_)):
            raise ArgumentTypeError(f"dress: expected a bool, got {type(dress).__name__} {checks.short_repr(dress)}")
        if not dress:
            return None
        if self._dress is None:
            self._dress = Dress.of(self._model, self.parts)
            # room for the dress's geoms on top of the model's
            self._scene = mujoco.MjvScene(self._model, maxgeom=self._scene.maxgeom + _DRESS_ROOM)
            self._reserve = _DRESS_ROOM
        return self._dress

    @property
    def parts(self) -> MovingParts:
        """The model's moving parts (:func:`~simbackend.playback.render.framing.moving_parts`), read once."""
        if self._parts is None:
            self._parts = moving_parts(self._model)
        return self._parts

    def _check_open(self) -> None:
        if self._con is None:
            raise RenderingError("rendering: this Renderer was closed")

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

    def _update_scene(self, cam: ResolvedCamera, catmask: int = _CAT_ALL) -> None:
        c, d = self._camera, self._data
        if cam.fixed_id < 0 and cam.free is None:
            cam = self._framing()
        parts = self.parts
        if cam.fixed_id >= 0:
            c.type = mujoco.mjtCamera.mjCAMERA_FIXED
            c.fixedcamid = cam.fixed_id
            self._target = np.array(parts.center, np.float64)
            if parts.track >= 0:  # the box moves with the tracked body
                self._target += np.asarray(d.xpos[parts.track]) - np.asarray(parts.anchor)
        else:
            free = cam.free
            assert free is not None
            c.type = mujoco.mjtCamera.mjCAMERA_FREE
            look = np.array(free.lookat)
            if cam.track >= 0:
                look = look + d.xpos[cam.track]
            c.lookat[:] = look
            c.distance = free.distance
            c.azimuth = free.azimuth
            c.elevation = free.elevation
            self._target = look
        self._cover = 0.0
        mujoco.mjv_updateScene(self._model, d, self._option, None, c, catmask, self._scene)

    def _framing(self) -> ResolvedCamera:
        """The default free camera (``"free"``): it frames the moving parts, for this renderer's aspect."""
        if self._default_camera is None:
            framing = FreeCamera.framing(self._model, aspect=self._width / self._height, parts=self.parts)
            self._default_camera = resolve_camera(self._model, framing)
        return self._default_camera

    def _tiled_framing(self, n: int, spacing: float) -> ResolvedCamera:
        """The default free camera of a tiled view of ``n`` envs ``spacing`` apart (kept for the next frame)."""
        key = (n, spacing)
        if key not in self._tiled_cameras:
            framing = FreeCamera.framing(self._model, spacing, n, aspect=self._width / self._height, parts=self.parts)
            self._tiled_cameras = {key: ResolvedCamera(FREE, -1, framing, -1)}  # one grid at a time is drawn
        return self._tiled_cameras[key]

    def _render_batch(
        self,
        q: np.ndarray,
        cam: ResolvedCamera,
        modes: Sequence[str],
        kind: str,
        rays: bool = False,
        dress: Dress | None = None,
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
            pixels = self._draw(modes, kind, dress=dress)
            for k, v in pixels.items():
                out[k][i] = v
            if rays:
                out["origins"][i], out["rays"][i] = pixel_rays(self._glcamera(), self._width, self._height)
        return out

    def _draw(self, modes: Sequence[str], kind: str, dress: Dress | None = None) -> dict[str, np.ndarray]:
        """Render the current scene; ``{mode: (H, W, C) array}``, row 0 at the top. ``dress``
        is added to the scene for the rgb image only."""
        scn, con, rect = self._scene, self._con, self._rect
        out: dict[str, np.ndarray] = {}
        if "rgb" in modes:
            scn.flags[_SEGMENT] = 0
            scn.flags[_IDCOLOR] = 0
            undo = dress.add(scn, con, self._target, self._cover) if dress is not None else None
            try:
                mujoco.mjr_render(rect, scn, con)
            finally:
                if undo is not None:
                    Dress.remove(scn, con, undo)
            sky = dress is not None and dress.sky
            mujoco.mjr_readPixels(self._pixels, self._depth if sky else None, rect, con)
            out["rgb"] = self._pixels[::-1].copy()
            if sky:
                assert dress is not None and undo is not None
                raw = self._depth[::-1]
                background = raw >= 1.0
                if undo.haze is not None:  # the floor fully hazed is sky (its anti-aliased far edge too)
                    background |= metric_depth(self._glcamera(), raw, background) >= undo.haze[1]
                dress.paint_sky(out["rgb"], background)
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
                out["depth"] = metric_depth(self._glcamera(), self._depth[::-1], ids == 0)[..., None]
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

    def _build_tiled_scene(self, q: np.ndarray, cam: ResolvedCamera, offsets: np.ndarray) -> None:
        """The scene of every env of ``q``, env ``k`` shifted by ``offsets[k]``; the floor drawn once, tiled."""
        m = self._model
        n = q.shape[0]
        while True:
            scn = self._scene
            self._set_state(q[0])
            self._update_scene(cam)
            floors = [j for j in range(scn.ngeom) if is_floor(scn.geoms[j], self._world_plane)]
            tiles = {j: floor_tiles(scn.geoms[j], offsets) for j in floors}
            need = scn.ngeom * n + sum(len(t) for t in tiles.values()) + 16 + self._reserve
            if need > scn.maxgeom:
                self._scene = mujoco.MjvScene(m, maxgeom=int(2 ** math.ceil(math.log2(need))))
                continue
            for k in range(1, n):
                start = scn.ngeom
                self._set_state(q[k])
                mujoco.mjv_addGeoms(m, self._data, self._option, self._perturb, _CAT_ALL, scn)
                shift = offsets[k]
                for g in scn.geoms[start : scn.ngeom]:
                    if is_floor(g, self._world_plane):
                        g.type = _GEOM_NONE  # the floor is drawn once, from the first env (tiled below)
                    else:
                        g.pos[:] = np.asarray(g.pos) + shift
            for j, positions in tiles.items():
                for pos in positions:
                    if scn.ngeom >= scn.maxgeom:
                        break
                    dst = scn.geoms[scn.ngeom]
                    copy_geom(dst, scn.geoms[j])
                    dst.pos[:] = pos
                    dst.segid = scn.ngeom
                    scn.ngeom = scn.ngeom + 1
            if scn.ngeom + self._reserve < scn.maxgeom:
                break
            # the scene filled up (more decor than expected): grow it and build again
            self._scene = mujoco.MjvScene(m, maxgeom=2 * scn.maxgeom)
        # the first env's lights light every env: spot and point lights become directional ones
        directional_lights(scn)
