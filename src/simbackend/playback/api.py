"""Pictures of a backend through the contract: :class:`Playback`, the front end's picture service.

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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from simbackend import _validate as V
from simbackend.errors import ArgumentTypeError, InvalidArgumentError, UnsupportedFeatureError

if TYPE_CHECKING:  # imports mujoco: only when rendering
    from simbackend.playback.render import Renderer

__all__ = ["PlayCapabilities", "Playback", "CAMERA_MODES"]

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


class Playback:
    """Images, camera observations and point clouds of one backend (the public calls are ``SimBackend``'s).

    Renderers (one OpenGL context each) are created on first use, one per image
    size, kept here and freed by :meth:`close` (which the backend's ``close()``
    calls). Every argument is checked before anything is rendered.

    Args:
        sim: the front end (its model description and ``get_qpos``).
        host_ids: the front end's host copies of the id tensors it returned.
    """

    def __init__(self, sim: Any, host_ids: V.HostIds):
        self.sim = sim
        self.host_ids = host_ids
        self.renderers: OrderedDict[tuple[int, int], Renderer] = OrderedDict()

    # ------------------------------------------------------------------
    # capabilities
    # ------------------------------------------------------------------
    def capabilities(self) -> PlayCapabilities:
        """What pictures the backend can give; creates no GL context."""
        absent: dict[str, str] = {}
        reason = self._mujoco_renderer_absent()
        renderers: tuple[str, ...] = ()
        cameras: tuple[str, ...] = ()
        if reason is None:
            from simbackend.playback import render as R  # noqa: PLC0415 - imports mujoco

            renderers = ("mujoco",)
            cameras = (*R.camera_names(self.sim.info.compiled), R.FREE)
        else:
            absent["mujoco"] = reason
        absent.update(dict(self.sim.capabilities.renderers_absent))
        return PlayCapabilities(
            renderers=renderers,
            camera_modes=CAMERA_MODES if renderers else (),
            cameras=cameras,
            tiled=bool(renderers),
            video=_video_available(),
            absent=dict(absent),
        )

    def _mujoco_renderer_absent(self) -> str | None:
        if getattr(self.sim.info, "compiled", None) is None:
            return "the backend's model info carries no compiled MuJoCo model (info.compiled is None)"
        from simbackend.playback import render as R  # noqa: PLC0415 - imports mujoco

        return R.gl_unavailable_reason()

    # ------------------------------------------------------------------
    # pictures
    # ------------------------------------------------------------------
    def render(
        self, env_ids: Any, camera: Any, width: int, height: int, tile: Any, spacing: Any, dress: Any
    ) -> torch.Tensor:
        """See ``SimBackend.render``."""
        R = self._render_module()
        width = R.check_image_size(width, "width")
        height = R.check_image_size(height, "height")
        R.resolve_camera(self.sim.info.compiled, camera)
        for name, flag in (("tile", tile), ("dress", dress)):
            if not isinstance(flag, (bool, np.bool_)):
                raise ArgumentTypeError(f"{name}: expected a bool, got {type(flag).__name__} {flag!r}")
        spacing = R.check_spacing(spacing)
        if spacing is not None and not tile:
            raise InvalidArgumentError("spacing: only used with tile=True")
        ids = V.env_ids(env_ids, self.sim.num_envs, host_ids=self.host_ids)
        if tile and ids.size == 0:
            raise InvalidArgumentError("env_ids: a tiled view needs at least one env, got none")
        renderer = self.renderer(width, height)
        qpos = self._qpos(ids)
        device = self.sim.device
        if tile:
            return renderer.render_tiled(qpos, camera, modes=("rgb",), spacing=spacing, device=device, dress=dress)[
                "rgb"
            ]
        return renderer.render(qpos, camera, modes=("rgb",), device=device, dress=dress)["rgb"]

    def camera_images(
        self, cameras: Any, env_ids: Any, modes: Any, width: int, height: int, segmentation: str
    ) -> dict[str, dict[str, torch.Tensor]]:
        """See ``SimBackend.get_camera_images``."""
        R = self._render_module()
        cams = self._cameras(cameras)
        if isinstance(modes, (list, tuple)) and "point_cloud" in modes or modes == "point_cloud":
            raise InvalidArgumentError("modes: 'point_cloud' is not an image; call get_point_cloud(cameras, ...)")
        modes = R.check_modes(modes)
        renderer, qpos, kind = self._camera_call(R, env_ids, width, height, segmentation)
        return {
            key: renderer.render(qpos, cam, modes=modes, segmentation=kind, device=self.sim.device)
            for key, cam in cams.items()
        }

    def point_cloud(
        self, cameras: Any, env_ids: Any, width: int, height: int, segmentation: str
    ) -> dict[str, torch.Tensor]:
        """See ``SimBackend.get_point_cloud``."""
        R = self._render_module()
        cams = self._cameras(cameras)
        renderer, qpos, kind = self._camera_call(R, env_ids, width, height, segmentation)
        return renderer.point_cloud(qpos, list(cams.values()), segmentation=kind, device=self.sim.device)

    def _camera_call(self, R: Any, env_ids: Any, width: Any, height: Any, segmentation: Any) -> tuple:
        """The checked common arguments of the camera calls: ``(renderer, qpos (n, nq), segmentation kind)``."""
        width = R.check_image_size(width, "width")
        height = R.check_image_size(height, "height")
        kind = R.check_segmentation(segmentation)
        ids = V.env_ids(env_ids, self.sim.num_envs, host_ids=self.host_ids)
        return self.renderer(width, height), self._qpos(ids), kind

    # ------------------------------------------------------------------
    # helpers
    # ------------------------------------------------------------------
    def _render_module(self) -> Any:
        """The renderer module, once the backend is known to carry its compiled model."""
        if getattr(self.sim.info, "compiled", None) is None:
            raise UnsupportedFeatureError(
                self.sim.name, "rendering", "the backend's model info carries no compiled MuJoCo model"
            )
        from simbackend.playback import render as R  # noqa: PLC0415 - imports mujoco

        return R

    def _cameras(self, cameras: Any) -> OrderedDict[str, Any]:
        """``{key: camera}`` after checking every camera (names resolved, keys distinct)."""
        from simbackend.playback import render as R  # noqa: PLC0415

        model = self.sim.info.compiled
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
            raise ArgumentTypeError(
                f"cameras: expected a camera, a non-empty sequence of cameras or a mapping"
                f" {{key: camera}}, got {type(cameras).__name__} {cameras!r}"
            )
        out = OrderedDict()
        for i, cam in enumerate(cameras):
            key = R.resolve_camera(model, cam, f"cameras[{i}]").key
            if key in out:
                raise InvalidArgumentError(
                    f"cameras: camera {key!r} named twice; pass a mapping {{key: camera}} to name several free cameras"
                )
            out[key] = cam
        return out

    def _qpos(self, ids: np.ndarray) -> torch.Tensor:
        """``(n, nq)`` current qpos of envs ``ids``."""
        qpos = self.sim.get_qpos()
        if ids.size == self.sim.num_envs and np.array_equal(ids, np.arange(self.sim.num_envs)):
            return qpos
        return qpos[torch.as_tensor(ids, device=qpos.device)]

    def renderer(self, width: int, height: int) -> Renderer:
        """The renderer of this size (created on first use; at most ``MAX_CACHED_RENDERERS`` kept)."""
        cache = self.renderers
        key = (int(width), int(height))
        renderer = cache.get(key)
        if renderer is not None and not renderer.closed:
            cache.move_to_end(key)
            return renderer
        from simbackend.playback import render as R  # noqa: PLC0415

        renderer = R.Renderer(self.sim.info.compiled, width, height)
        cache[key] = renderer
        while len(cache) > MAX_CACHED_RENDERERS:
            _, oldest = cache.popitem(last=False)
            oldest.close()
        return renderer

    def close(self) -> None:
        """Free every renderer created (idempotent; the backend's ``close()`` calls it)."""
        cache, self.renderers = self.renderers, OrderedDict()
        errors = []
        for renderer in cache.values():
            try:
                renderer.close()
            except Exception as e:  # noqa: BLE001 - free the others, then report
                errors.append(e)
        if errors:
            raise errors[0]
