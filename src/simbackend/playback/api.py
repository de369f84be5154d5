"""Pictures of a backend through the contract: :class:`PlaybackMixin`, a mixin of ``SimBackend``.

Written only against the contract (``get_qpos``, ``info``, ``num_envs``,
``device``, ``name``), so every backend gets it: the images are drawn by
MuJoCo's offscreen renderer (:mod:`simbackend.playback.render`) from the
compiled model every backend shares (``info.compiled``) at the backend's current
state, PhysX's included, on a machine without a GPU. This module imports no
engine; the renderer is imported on the first call that needs it.

Conventions (shapes, units, frames, ids) are :mod:`simbackend.playback.render`'s:
``rgb`` ``(n, H, W, 3)`` uint8, ``depth`` ``(n, H, W, 1)`` float32 metres along the
optical axis (``inf`` where nothing is hit), ``segmentation`` ``(n, H, W, 1)`` int32
geom or body ids (-1: background), point clouds in the world frame. Every output
is a torch tensor on ``backend.device``. Every argument is checked before
anything is rendered, and a bad one raises a one-line contract error naming it.

Typical use::

    from simbackend.playback.video import write_video
    frames = []
    for _ in range(200):
        sim.step(ctrl)
        frames.append(sim.render(env_ids=0, camera="free")[0])
    write_video("rollout.mp4", frames, fps=50)
"""

from __future__ import annotations

import importlib.util
import numbers
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Optional

import numpy as np
import torch

from simbackend import _validate as V
from simbackend.errors import ArgumentTypeError, InvalidArgumentError, UnsupportedFeatureError

if TYPE_CHECKING:  # imports mujoco: only when rendering
    from simbackend.playback.render import Renderer

__all__ = ["PlayCapabilities", "PlaybackMixin", "CAMERA_MODES"]

#: what ``get_camera_images`` (rgb, depth, segmentation) and ``get_point_cloud`` can give
CAMERA_MODES = ("rgb", "depth", "segmentation", "point_cloud")
#: renderers (one GL context each) a backend keeps, one per image size; the least recently used is closed
MAX_CACHED_RENDERERS = 4


@dataclass(frozen=True)
class PlayCapabilities:
    """What pictures a backend can give (``backend.get_play_capabilities()``).

    Attributes:
        renderers: renderers that can draw this backend: ``("mujoco",)`` where the
            backend carries its compiled MuJoCo model (``info.compiled``) and an
            OpenGL context class is available; ``()`` otherwise.
        camera_modes: what the cameras give (``rgb``, ``depth``, ``segmentation``,
            ``point_cloud``); empty without a renderer.
        cameras: the model's camera names, then ``"free"``; empty without a renderer.
        tiled: ``render(tile=True)`` can draw several envs in one picture.
        video: ``simbackend.playback.video.write_video`` can write mp4 (imageio and
            imageio-ffmpeg are installed).
        absent: renderer name -> one-line reason it is absent (e.g. a backend may
            say ``{"sapien": "needs a Vulkan GPU"}``).
    """

    renderers: tuple[str, ...]
    camera_modes: tuple[str, ...]
    cameras: tuple[str, ...]
    tiled: bool
    video: bool
    absent: Mapping[str, str] = field(default_factory=dict)


def _video_available() -> bool:
    return importlib.util.find_spec("imageio") is not None and importlib.util.find_spec("imageio_ffmpeg") is not None


class PlaybackMixin:
    """Images, camera observations and point clouds of :class:`~simbackend.contract.SimBackend`.

    Renderers (one OpenGL context each) are created on first use, one per image
    size, kept on the backend and freed by :meth:`_close_playback` (which the
    backend's ``close()`` calls).
    """

    # ------------------------------------------------------------------
    # capabilities
    # ------------------------------------------------------------------
    def get_play_capabilities(self) -> PlayCapabilities:
        """What pictures this backend can give; see :class:`PlayCapabilities`. Creates no GL context."""
        self._check_open()
        absent: dict[str, str] = {}
        reason = self._mujoco_renderer_absent()
        renderers: tuple[str, ...] = ()
        cameras: tuple[str, ...] = ()
        if reason is None:
            from simbackend.playback import render as R  # noqa: PLC0415 - imports mujoco

            renderers = ("mujoco",)
            cameras = (*R.camera_names(self.info.compiled), R.FREE)
        else:
            absent["mujoco"] = reason
        extra = self._play_renderers_absent()
        if not isinstance(extra, Mapping):
            raise ArgumentTypeError(f"_play_renderers_absent: expected a dict, got {type(extra).__name__}")
        absent.update({str(k): str(v) for k, v in extra.items()})
        return PlayCapabilities(renderers=renderers, camera_modes=CAMERA_MODES if renderers else (),
                                cameras=cameras, tiled=bool(renderers), video=_video_available(),
                                absent=dict(absent))

    def _play_renderers_absent(self) -> dict[str, str]:
        """Renderers this backend could offer but cannot here, with a one-line reason each
        (added to :attr:`PlayCapabilities.absent`). Backends override it; default: none."""
        return {}

    def _mujoco_renderer_absent(self) -> Optional[str]:
        if getattr(self.info, "compiled", None) is None:
            return "the backend's model info carries no compiled MuJoCo model (info.compiled is None)"
        from simbackend.playback import render as R  # noqa: PLC0415 - imports mujoco

        return R.gl_unavailable_reason()

    # ------------------------------------------------------------------
    # pictures
    # ------------------------------------------------------------------
    def render(self, env_ids: Any = None, *, camera: Any = "free", width: int = 320, height: int = 240,
               tile: bool = False, spacing: Optional[float] = None) -> torch.Tensor:
        """Pictures of envs at their current state.

        Args:
            env_ids: envs to draw (ids or a ``(N,)`` bool mask; ``None``: all), in that order.
            camera: a model camera name or id, ``"free"`` (frames the model, or with
                ``tile`` the whole grid) or a :class:`~simbackend.playback.render.FreeCamera`.
            width, height: image size, pixels.
            tile: draw the chosen envs side by side in ONE scene and picture, env ``k``
                of the list shifted by ``tile_offsets(n, spacing)[k]`` (a grid along
                +x and +y, the first env in place); the floor is drawn once.
            spacing: metres between neighbouring envs of a tiled view (default
                ``1.1 * model extent``).

        Returns:
            ``(n, H, W, 3)`` uint8, or ``(H, W, 3)`` with ``tile=True``, on ``backend.device``.

        Raises:
            UnsupportedFeatureError: the backend carries no compiled MuJoCo model.
            RenderingError: no OpenGL context can be created here.
        """
        self._check_open()
        R = self._render_module()
        width = R.check_image_size(width, "width")
        height = R.check_image_size(height, "height")
        R.resolve_camera(self.info.compiled, camera)
        if not isinstance(tile, (bool, np.bool_)):
            raise ArgumentTypeError(f"tile: expected a bool, got {type(tile).__name__} {tile!r}")
        spacing = R.check_spacing(spacing)
        if spacing is not None and not tile:
            raise InvalidArgumentError("spacing: only used with tile=True")
        ids = V.env_ids(env_ids, self.num_envs, host_ids=self._host_ids)
        if tile and ids.size == 0:
            raise InvalidArgumentError("env_ids: a tiled view needs at least one env, got none")
        renderer = self._playback_renderer(width, height)
        qpos = self._playback_qpos(ids)
        if tile:
            return renderer.render_tiled(qpos, camera, modes=("rgb",), spacing=spacing, device=self.device)["rgb"]
        return renderer.render(qpos, camera, modes=("rgb",), device=self.device)["rgb"]

    def get_camera_images(self, cameras: Any, env_ids: Any = None, *, modes: Any = ("rgb",), width: int = 320,
                          height: int = 240, segmentation: str = "geom") -> dict[str, dict[str, torch.Tensor]]:
        """Camera observations of envs at their current state.

        Args:
            cameras: a camera (model camera name or id, ``"free"``, a ``FreeCamera``), a
                sequence of cameras, or a mapping ``{key: camera}`` naming them.
            env_ids: envs (ids or a ``(N,)`` bool mask; ``None``: all), in that order.
            modes: ``"rgb"``, ``"depth"``, ``"segmentation"`` or a sequence of them.
            width, height: image size, pixels.
            segmentation: ``"geom"`` (geom ids) or ``"body"`` (body ids).

        Returns:
            ``{camera key: {mode: tensor}}``, keys the camera names (``"free"`` for a free
            camera) or the mapping's keys: ``rgb`` ``(n, H, W, 3)`` uint8, ``depth``
            ``(n, H, W, 1)`` float32 metres along the optical axis (``inf``: nothing hit),
            ``segmentation`` ``(n, H, W, 1)`` int32 (-1: background or not a geom).
        """
        self._check_open()
        R = self._render_module()
        cams = self._playback_cameras(cameras)
        if isinstance(modes, (list, tuple)) and "point_cloud" in modes or modes == "point_cloud":
            raise InvalidArgumentError("modes: 'point_cloud' is not an image; call get_point_cloud(cameras, ...)")
        modes = R.check_modes(modes)
        renderer, qpos, kind = self._camera_call(R, env_ids, width, height, segmentation)
        return {key: renderer.render(qpos, cam, modes=modes, segmentation=kind, device=self.device)
                for key, cam in cams.items()}

    def get_point_cloud(self, cameras: Any, env_ids: Any = None, *, width: int = 320, height: int = 240,
                        segmentation: str = "geom") -> dict[str, torch.Tensor]:
        """Points the cameras see, fused, in the world frame, for envs at their current state.

        Args:
            cameras: a camera or a sequence (or mapping) of cameras, as :meth:`get_camera_images`.
            env_ids: envs (``None``: all), in that order.
            width, height: each camera's image size, pixels.
            segmentation: ``"geom"`` or ``"body"`` ids for the ``segmentation`` field.

        Returns:
            ``xyz`` ``(n, P, 3)`` float32 world-frame metres (0 where invalid), ``rgb``
            ``(n, P, 3)`` uint8, ``segmentation`` ``(n, P)`` int32 and ``valid`` ``(n, P)``
            bool (False where nothing was hit), ``P = cameras * H * W``, each camera's pixels
            row-major in turn. ManiSkill's ``pointcloud`` gives ``xyzw`` with ``w = 0`` for
            points at infinity instead of the mask (see :mod:`simbackend.playback.render`).
        """
        self._check_open()
        R = self._render_module()
        cams = self._playback_cameras(cameras)
        renderer, qpos, kind = self._camera_call(R, env_ids, width, height, segmentation)
        return renderer.point_cloud(qpos, list(cams.values()), segmentation=kind, device=self.device)

    def _camera_call(self, R: Any, env_ids: Any, width: Any, height: Any, segmentation: Any) -> tuple:
        """The checked common arguments of the camera calls: ``(renderer, qpos (n, nq), segmentation kind)``."""
        width = R.check_image_size(width, "width")
        height = R.check_image_size(height, "height")
        kind = R.check_segmentation(segmentation)
        ids = V.env_ids(env_ids, self.num_envs, host_ids=self._host_ids)
        return self._playback_renderer(width, height), self._playback_qpos(ids), kind

    # ------------------------------------------------------------------
    # helpers
    # ------------------------------------------------------------------
    def _render_module(self) -> Any:
        """The renderer module, once the backend is known to carry its compiled model."""
        if getattr(self.info, "compiled", None) is None:
            raise UnsupportedFeatureError(self.name, "rendering",
                                          "the backend's model info carries no compiled MuJoCo model")
        from simbackend.playback import render as R  # noqa: PLC0415 - imports mujoco

        return R

    def _playback_cameras(self, cameras: Any) -> "OrderedDict[str, Any]":
        """``{key: camera}`` after checking every camera (names resolved, keys distinct)."""
        from simbackend.playback import render as R  # noqa: PLC0415

        model = self.info.compiled
        if isinstance(cameras, Mapping):
            if not cameras:
                raise InvalidArgumentError("cameras: expected at least one camera, got an empty mapping")
            out: OrderedDict[str, Any] = OrderedDict()
            for key, cam in cameras.items():
                if not isinstance(key, str):
                    raise ArgumentTypeError(f"cameras: mapping keys must be str, got {type(key).__name__} {key!r}")
                R.resolve_camera(model, cam, f"cameras[{key!r}]")
                out[key] = cam
            return out
        if isinstance(cameras, (str, R.FreeCamera, numbers.Integral)) and not isinstance(cameras, bool):
            cameras = [cameras]
        if not isinstance(cameras, (list, tuple)) or not cameras:
            raise ArgumentTypeError(f"cameras: expected a camera, a non-empty sequence of cameras or a mapping"
                                    f" {{key: camera}}, got {type(cameras).__name__} {cameras!r}")
        out = OrderedDict()
        for i, cam in enumerate(cameras):
            key = R.resolve_camera(model, cam, f"cameras[{i}]").key
            if key in out:
                raise InvalidArgumentError(f"cameras: camera {key!r} named twice; pass a mapping {{key: camera}}"
                                           " to name several free cameras")
            out[key] = cam
        return out

    def _playback_qpos(self, ids: np.ndarray) -> torch.Tensor:
        """``(n, nq)`` current qpos of envs ``ids``."""
        qpos = self.get_qpos()
        if ids.size == self.num_envs and np.array_equal(ids, np.arange(self.num_envs)):
            return qpos
        return qpos[torch.as_tensor(ids, device=qpos.device)]

    def _playback_renderer(self, width: int, height: int) -> "Renderer":
        """The renderer of this size (created on first use; at most ``MAX_CACHED_RENDERERS`` kept)."""
        cache: Optional[OrderedDict] = self.__dict__.get("_playback_renderers")
        if cache is None:
            cache = self.__dict__["_playback_renderers"] = OrderedDict()
        key = (int(width), int(height))
        renderer = cache.get(key)
        if renderer is not None and not renderer.closed:
            cache.move_to_end(key)
            return renderer
        from simbackend.playback import render as R  # noqa: PLC0415

        renderer = R.Renderer(self.info.compiled, width, height)
        cache[key] = renderer
        while len(cache) > MAX_CACHED_RENDERERS:
            _, oldest = cache.popitem(last=False)
            oldest.close()
        return renderer

    def _close_playback(self) -> None:
        """Free every renderer this backend created (idempotent; the backend's ``close()`` calls it)."""
        cache = self.__dict__.pop("_playback_renderers", None)
        if not cache:
            return
        errors = []
        for renderer in cache.values():
            try:
                renderer.close()
            except Exception as e:  # noqa: BLE001 - free the others, then report
                errors.append(e)
        if errors:
            raise errors[0]
