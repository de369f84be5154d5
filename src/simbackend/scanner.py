"""The height scanner: rays from points fixed to a body, cast in every env at once.

Built once (``SimBackend.create_height_scanner``, which validates the
arguments here) and queried every step. It reads the body's pose and casts
the rays through the engine's public members (``body_pose``, ``cast_rays``),
so every engine that declares ``capabilities.ray_casting`` gets it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from simbackend import _validate as V
from simbackend import checks
from simbackend.engine import Engine
from simbackend.errors import ArgumentTypeError, InputShapeError, InvalidArgumentError
from simbackend.math import quat_apply, quat_yaw

#: alignments of a height scanner's points and rays to its body
SCANNER_ALIGNMENTS = ("yaw", "full", "world")


def grid_offsets(size_x: float, size_y: float, resolution: float, height: float = 0.0) -> np.ndarray:
    """``(R, 3)`` a regular grid of points centred on the origin, ``size_x`` by ``size_y`` metres,
    ``resolution`` apart (both ends included), at ``height`` above the frame: the usual scanner pattern."""
    size_x = checks.real(size_x, "size_x", minimum=0.0)
    size_y = checks.real(size_y, "size_y", minimum=0.0)
    resolution = checks.real(resolution, "resolution", minimum=0.0, above=True)
    height = checks.real(height, "height")
    xs = np.arange(-size_x / 2, size_x / 2 + 1e-9, resolution)
    ys = np.arange(-size_y / 2, size_y / 2 + 1e-9, resolution)
    gx, gy = np.meshgrid(xs, ys, indexing="ij")
    return np.stack([gx.ravel(), gy.ravel(), np.full(gx.size, float(height))], axis=1)


@dataclass
class HeightScanner:
    """Rays cast from points fixed to a body, every env at once (see ``create_height_scanner``).

    Attributes:
        body: the body id the points follow.
        offsets: ``(R, 3)`` points in the body frame (float64).
        direction: ``(3,)`` unit ray direction (world for ``yaw``/``world``, body frame for ``full``).
        alignment: ``yaw``, ``full`` or ``world``.
        max_distance: rays longer than this report a miss.
        exclude_body: the body's own geoms are ignored.
        out: converts a result to what the caller gets (the front end's float32 copy on its device).
        check_open: raises once the backend is closed.
    """

    engine: Engine
    body: int
    offsets: np.ndarray
    direction: np.ndarray
    alignment: str
    max_distance: float
    exclude_body: bool
    out: Callable[[Any], torch.Tensor]
    check_open: Callable[[], None]

    def __post_init__(self) -> None:
        dev, dt = self.engine.device, self.engine.dtype
        self._offsets = torch.as_tensor(self.offsets, dtype=dt, device=dev)
        self._direction = torch.as_tensor(self.direction, dtype=dt, device=dev)
        self._ids = np.array([self.body], np.int64)

    @property
    def num_rays(self) -> int:
        return int(self.offsets.shape[0])

    def _rays(self) -> tuple[torch.Tensor, torch.Tensor]:
        pos, quat = self.engine.body_pose(self._ids)
        pos = torch.as_tensor(pos, device=self._offsets.device)[:, 0].to(self._offsets.dtype)  # (N, 3)
        quat = torch.as_tensor(quat, device=self._offsets.device)[:, 0].to(self._offsets.dtype)  # (N, 4)
        n, r = pos.shape[0], self.num_rays
        if self.alignment == "world":
            rot = torch.zeros_like(quat)
            rot[:, 0] = 1.0
        elif self.alignment == "yaw":
            yaw = quat_yaw(quat)
            rot = torch.stack(
                [torch.cos(yaw / 2), torch.zeros_like(yaw), torch.zeros_like(yaw), torch.sin(yaw / 2)], -1
            )
        else:
            rot = quat
        rot_r = rot[:, None].expand(n, r, 4)
        origins = pos[:, None] + quat_apply(rot_r, self._offsets[None].expand(n, r, 3))
        if self.alignment == "full":
            dirs = quat_apply(rot_r, self._direction.expand(n, r, 3))
        else:
            dirs = self._direction.expand(n, r, 3)
        return origins, dirs.contiguous()

    def _cast(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        self.check_open()
        origins, dirs = self._rays()
        dist = self.engine.cast_rays(origins, dirs, self.body if self.exclude_body and self.body > 0 else -1)
        dist = torch.as_tensor(dist, dtype=origins.dtype, device=origins.device)
        dist = torch.where((dist < 0) | (dist > self.max_distance), torch.full_like(dist, self.max_distance), dist)
        return origins, dirs, dist

    def distances(self) -> torch.Tensor:
        """``(N, R)`` distance along each ray to the first hit; ``max_distance`` where nothing is hit."""
        return self.out(self._cast()[2])

    def hit_points(self) -> torch.Tensor:
        """``(N, R, 3)`` world points where the rays hit (or end, at ``max_distance``)."""
        origins, dirs, dist = self._cast()
        return self.out(origins + dirs * dist[..., None])

    def heights(self) -> torch.Tensor:
        """``(N, R)`` world z of the hit points (terrain height under a downward ray)."""
        origins, dirs, dist = self._cast()
        return self.out(origins[..., 2] + dirs[..., 2] * dist)


def check_scanner_arguments(
    offsets: Any, direction: Any, alignment: Any, max_distance: Any, exclude_body: Any
) -> tuple[np.ndarray, np.ndarray, str, float, bool]:
    """Validated ``(offsets (R, 3), unit direction (3,), alignment, max_distance, exclude_body)`` of
    ``SimBackend.create_height_scanner`` (whose docstring is the reference), each error naming its argument."""
    try:
        shape = tuple(offsets.shape) if isinstance(offsets, (torch.Tensor, np.ndarray)) else np.shape(offsets)
    except ValueError:  # ragged nested lists
        shape = ("ragged",)
    if len(shape) != 2 or shape[1] != 3:
        raise InputShapeError("offsets", "(R, 3)", tuple(s if isinstance(s, int) else -1 for s in shape))
    off = V.real_tensor(offsets, "offsets", shape, device=torch.device("cpu"), dtype=torch.float64).numpy()
    if not off.shape[0] or not np.isfinite(off).all():
        raise InvalidArgumentError("offsets: expected a non-empty (R, 3) array of finite points")
    d = np.asarray(V.real_tensor(direction, "direction", (3,), device=torch.device("cpu"), dtype=torch.float64).numpy())
    norm = float(np.linalg.norm(d))
    if not np.isfinite(norm) or norm < 1e-9:
        raise InvalidArgumentError(f"direction: expected a non-zero finite vector, got {d.tolist()}")
    checks.choice(alignment, "alignment", SCANNER_ALIGNMENTS)
    checks.real(max_distance, "max_distance", minimum=0.0, above=True)
    if not isinstance(exclude_body, (bool, np.bool_)):
        raise ArgumentTypeError(f"exclude_body: expected a bool, got {type(exclude_body).__name__}")
    return off, d / norm, alignment, float(max_distance), bool(exclude_body)
