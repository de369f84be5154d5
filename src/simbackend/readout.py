"""Model lookups, combined readouts and the height scanner: members of :class:`~simbackend.contract.SimBackend`.

:class:`ReadoutMixin` holds what UniLab's backend contract calls the model and
state API beyond the single getters: geom tables, one-name and subtree body
lookups, body pose/velocity/state in one call (selected env rows, optionally
into a caller-owned buffer, so a hot loop allocates nothing), several sensors
concatenated, and a height scanner built once and queried every step.
Everything here is written against the contract's hooks; an engine adds only
``_ray_cast`` (and ``capabilities.ray_casting``) for the scanner.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
import torch

from simbackend import _validate as V
from simbackend.errors import (
    ArgumentTypeError,
    InputDTypeError,
    InputShapeError,
    InvalidArgumentError,
    UnsupportedFeatureError,
)
from simbackend.math import quat_apply

#: alignments of a height scanner's points and rays to its body
SCANNER_ALIGNMENTS = ("yaw", "full", "world")


def grid_offsets(size_x: float, size_y: float, resolution: float, height: float = 0.0) -> np.ndarray:
    """``(R, 3)`` a regular grid of points centred on the origin, ``size_x`` by ``size_y`` metres,
    ``resolution`` apart (both ends included), at ``height`` above the frame: the usual scanner pattern."""
    for name, v in (("size_x", size_x), ("size_y", size_y), ("resolution", resolution), ("height", height)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
            raise InvalidArgumentError(f"{name}: expected a finite number, got {v!r}")
    if size_x < 0 or size_y < 0 or not resolution > 0:
        raise InvalidArgumentError("grid_offsets: sizes must be >= 0 and resolution > 0")
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
    """

    sim: Any
    body: int
    offsets: np.ndarray
    direction: np.ndarray
    alignment: str
    max_distance: float
    exclude_body: bool

    def __post_init__(self) -> None:
        dev, dt = self.sim.device, self.sim.hook_dtype
        self._offsets = torch.as_tensor(self.offsets, dtype=dt, device=dev)
        self._direction = torch.as_tensor(self.direction, dtype=dt, device=dev)
        self._ids = np.array([self.body], np.int64)

    @property
    def num_rays(self) -> int:
        return int(self.offsets.shape[0])

    def _rays(self) -> tuple[torch.Tensor, torch.Tensor]:
        sim = self.sim
        pos = sim._body_pos_w(self._ids)[:, 0].to(self._offsets.dtype)       # (N, 3)
        quat = sim._body_quat_w(self._ids)[:, 0].to(self._offsets.dtype)     # (N, 4)
        n, r = pos.shape[0], self.num_rays
        if self.alignment == "world":
            rot = torch.zeros_like(quat)
            rot[:, 0] = 1.0
        elif self.alignment == "yaw":
            w, x, y, z = quat.unbind(-1)
            yaw = torch.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
            rot = torch.stack([torch.cos(yaw / 2), torch.zeros_like(yaw), torch.zeros_like(yaw),
                               torch.sin(yaw / 2)], -1)
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
        self.sim._check_open()
        origins, dirs = self._rays()
        dist = self.sim._ray_cast(origins, dirs, self.body if self.exclude_body and self.body > 0 else -1)
        dist = torch.as_tensor(dist, dtype=origins.dtype, device=origins.device)
        dist = torch.where((dist < 0) | (dist > self.max_distance), torch.full_like(dist, self.max_distance), dist)
        return origins, dirs, dist

    def distances(self) -> torch.Tensor:
        """``(N, R)`` distance along each ray to the first hit; ``max_distance`` where nothing is hit."""
        return self.sim._out(self._cast()[2])

    def hit_points(self) -> torch.Tensor:
        """``(N, R, 3)`` world points where the rays hit (or end, at ``max_distance``)."""
        origins, dirs, dist = self._cast()
        return self.sim._out(origins + dirs * dist[..., None])

    def heights(self) -> torch.Tensor:
        """``(N, R)`` world z of the hit points (terrain height under a downward ray)."""
        origins, dirs, dist = self._cast()
        return self.sim._out(origins[..., 2] + dirs[..., 2] * dist)


class ReadoutMixin:
    """Model lookups, combined readouts and the height scanner of :class:`~simbackend.contract.SimBackend`."""

    # ------------------------------------------------------------------
    # geoms
    # ------------------------------------------------------------------
    @property
    def geom_names(self) -> tuple[str, ...]:
        """Geom names in id order (unnamed geoms: ``geom<id>``)."""
        return self._info.geom_names

    def get_geom_ids(self, names: Any) -> torch.Tensor:
        """``(n,)`` geom ids of ``names`` (a name or a sequence of names)."""
        return self._id_tensor(self._resolve_many("geom", names))

    def _geom_index(self, geom_ids: Any) -> np.ndarray:
        return V.index_array(geom_ids, self._info.ngeom, "geom", "geom_ids", host_ids=self._host_ids)

    def get_geom_body_ids(self, geom_ids: Any = None) -> torch.Tensor:
        """``(G,)`` id of the body owning each geom; ``None`` for all geoms."""
        return self._id_tensor(self._info.geom_body[self._geom_index(geom_ids)])

    def get_geom_size(self, geom_ids: Any = None) -> torch.Tensor:
        """``(G, 3)`` MuJoCo's size parameters of each geom (model values)."""
        return self._out(self._info.geom_size[self._geom_index(geom_ids)])

    def get_geom_contact_masks(self, geom_ids: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(contype (G,), conaffinity (G,))`` int64 contact bit masks: two geoms may touch when
        ``contype_a & conaffinity_b or contype_b & conaffinity_a``."""
        ids = self._geom_index(geom_ids)
        return self._id_tensor(self._info.geom_contype[ids]), self._id_tensor(self._info.geom_conaffinity[ids])

    # ------------------------------------------------------------------
    # bodies
    # ------------------------------------------------------------------
    def get_body_id(self, name: str) -> int:
        """The id of body ``name``, a plain int."""
        return self._resolve("body", name)

    def get_body_subtree_ids(self, body: Any) -> torch.Tensor:
        """``(k,)`` ids of ``body`` (a name or an id) and all its descendants, in id order."""
        if isinstance(body, str):
            root = self._resolve("body", body)
        else:
            root = V.scalar_id(body, self._info.nbody, "body", "body", self._host_ids)
        parent = self._info.body_parent
        inside = np.zeros(self._info.nbody, bool)
        inside[root] = True
        for b in range(root + 1, self._info.nbody):  # MuJoCo orders parents before children
            inside[b] = inside[parent[b]]
        return self._id_tensor(np.flatnonzero(inside))

    def get_zero_qvel(self) -> torch.Tensor:
        """``(N, nv)`` zeros: the initial velocity of every env (``set_state``'s default).

        Its columns are qvel's; :meth:`get_joint_qvel_indices` is the way to find a joint's columns.
        """
        self._check_open()
        return torch.zeros((self.num_envs, self.nv), dtype=torch.float32, device=self._device)

    # ------------------------------------------------------------------
    # combined readouts
    # ------------------------------------------------------------------
    def _rows_and_out(self, lead: tuple, width: int, env_ids: Any, out: Any,
                      argument: str = "out") -> tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
        """Validated rows (``None``: all envs, else a device index tensor) and ``out`` for a result
        ``(n, *lead, width)``; raises before anything is read or written."""
        rows = None
        n = self.num_envs
        if env_ids is not None:
            host = V.env_ids(env_ids, self.num_envs, host_ids=self._host_ids)
            rows, n = torch.as_tensor(host, device=self._device), int(host.size)
        if out is None:
            return rows, None
        shape = (n, *lead, width)
        if not isinstance(out, torch.Tensor):
            raise ArgumentTypeError(f"{argument}: expected a torch.Tensor, got {type(out).__name__}")
        if out.dtype != torch.float32:
            raise InputDTypeError(f"{argument}: expected float32, got {out.dtype}")
        want = self._device
        if want.type == "cuda" and want.index is None:
            want = torch.device("cuda", torch.cuda.current_device())
        if out.device != want:
            raise InvalidArgumentError(f"{argument}: expected a tensor on {self._device}, got one on {out.device}")
        if tuple(out.shape) != shape:
            raise InputShapeError(argument, shape, tuple(out.shape))
        if not out.is_contiguous():
            raise InvalidArgumentError(f"{argument}: must be contiguous (strides {tuple(out.stride())})")
        if out.requires_grad:
            raise InvalidArgumentError(f"{argument}: must not require grad (it is written in place)")
        return rows, out

    def _fill(self, parts: Sequence[torch.Tensor], rows: Optional[torch.Tensor],
              out: Optional[torch.Tensor]) -> torch.Tensor:
        """``parts`` ``(N, ..., k_i)`` side by side on the last axis, rows ``rows``, into ``out`` if given."""
        if out is None:
            pieces = [p if rows is None else p[rows] for p in parts]
            return torch.cat(pieces, dim=-1).to(torch.float32)
        col = 0
        for p in parts:  # each part straight into its columns: no concatenated copy
            k = p.shape[-1]
            out[..., col : col + k].copy_(p if rows is None else p[rows])
            col += k
        return out

    def get_body_pose_w(self, body_ids: Any = None, env_ids: Any = None, out: Any = None) -> torch.Tensor:
        """``(n, B, 7)`` body frame position (3) and orientation (wxyz, 4), world frame.

        Each row equals the rows of :meth:`get_body_pos_w` and :meth:`get_body_quat_w`
        side by side, bit for bit.

        Args:
            body_ids: bodies (``None``: all).
            env_ids: env rows in the order given (ids or a ``(N,)`` bool mask; ``None``: all).
            out: a contiguous float32 tensor of exactly the result's shape on the backend's
                device, written in place and returned (nothing is allocated for the result);
                a wrong one raises, naming ``out``, before anything is written.
        """
        ids = self._body_index(body_ids)
        rows, out = self._rows_and_out((ids.size,), 7, env_ids, out)
        return self._fill([self._body_pos_w(ids), self._body_quat_w(ids)], rows, out)

    def get_body_vel_w(self, body_ids: Any = None, env_ids: Any = None, out: Any = None) -> torch.Tensor:
        """``(n, B, 6)`` linear velocity of each body frame's origin (3) and angular velocity (3), world
        frame: :meth:`get_body_lin_vel_w` and :meth:`get_body_ang_vel_w` side by side (arguments as
        :meth:`get_body_pose_w`)."""
        ids = self._body_index(body_ids)
        rows, out = self._rows_and_out((ids.size,), 6, env_ids, out)
        return self._fill([self._body_lin_vel_w(ids), self._body_ang_vel_w(ids)], rows, out)

    def get_body_state_w(self, body_ids: Any = None, env_ids: Any = None, out: Any = None) -> torch.Tensor:
        """``(n, B, 13)`` pose (7) then velocities (6), as :meth:`get_body_pose_w` and :meth:`get_body_vel_w`."""
        ids = self._body_index(body_ids)
        rows, out = self._rows_and_out((ids.size,), 13, env_ids, out)
        return self._fill([self._body_pos_w(ids), self._body_quat_w(ids), self._body_lin_vel_w(ids),
                           self._body_ang_vel_w(ids)], rows, out)

    def get_sensors(self, names: Any, env_ids: Any = None, out: Any = None) -> torch.Tensor:
        """``(n, sum of dims)`` the named sensors' readings concatenated in the order named
        (each as :meth:`get_sensor_data` gives it, bit for bit), rows ``env_ids``, into ``out``
        if given (see :meth:`get_body_pose_w`). A sensor type the backend does not serve raises
        ``UnsupportedFeatureError`` as :meth:`get_sensor_data` does."""
        if isinstance(names, str):
            names = [names]
        if not isinstance(names, (list, tuple)) or not names:
            raise ArgumentTypeError("names: expected a sensor name or a non-empty sequence of names")
        sids = [self._resolve("sensor", n) for n in names]
        for sid, n in zip(sids, names):
            stype = self._info.sensor_type[sid]
            if stype not in self.capabilities.sensor_types:
                raise UnsupportedFeatureError(self.name, f"sensor type {stype}", f"sensor {n!r}")
        width = int(sum(int(self._info.sensor_dim[sid]) for sid in sids))
        rows, out = self._rows_and_out((), width, env_ids, out)
        return self._fill([self.get_sensor_data(n) for n in names], rows, out)

    # ------------------------------------------------------------------
    # height scanner
    # ------------------------------------------------------------------
    def create_height_scanner(self, body: Any, offsets: Any, *, direction: Any = (0.0, 0.0, -1.0),
                              alignment: str = "yaw", max_distance: float = 10.0,
                              exclude_body: bool = True) -> HeightScanner:
        """A scanner of rays from points fixed to ``body``, created once and queried every step.

        Args:
            body: a body name or id.
            offsets: ``(R, 3)`` ray origins in the body frame (:func:`grid_offsets` builds a grid).
            direction: the rays' direction (normalised); world frame for ``yaw``
                and ``world``, body frame for ``full``.
            alignment: ``yaw`` (points turn with the body's heading only, rays
                keep the world direction: the usual terrain scan), ``full``
                (points and rays turn with the body) or ``world`` (points only
                translate with the body).
            max_distance: longest ray, m; a miss, or a hit farther away, reads this distance.
            exclude_body: ignore the body's own geoms (never the world body's:
                a scanner on the world body sees the terrain).

        Queries (``distances``, ``heights``, ``hit_points``) see the collision
        geoms (``contype`` or ``conaffinity`` non-zero; visual-only geoms are
        transparent, whatever their colour) of every env at the current state,
        with the same rules on every engine: a ray reports the first point at
        distance >= 0 where it crosses a geom's surface (one starting inside a
        geom reports where it leaves it); planes are unbounded, as in
        collision, and one-sided (a ray hits one only from its front, moving
        towards it). Raises ``UnsupportedFeatureError`` where
        ``capabilities.ray_casting`` is false.
        """
        self._check_open()
        if not getattr(self.capabilities, "ray_casting", False):
            raise UnsupportedFeatureError(self.name, "ray_casting")
        b = self._resolve("body", body) if isinstance(body, str) else V.scalar_id(
            body, self._info.nbody, "body", "body", self._host_ids)
        try:
            shape = tuple(offsets.shape) if isinstance(offsets, (torch.Tensor, np.ndarray)) else np.shape(offsets)
        except ValueError:  # ragged nested lists
            shape = ("ragged",)
        if len(shape) != 2 or shape[1] != 3:
            raise InputShapeError("offsets", "(R, 3)", tuple(s if isinstance(s, int) else -1 for s in shape))
        off = V.real_tensor(offsets, "offsets", shape, device=torch.device("cpu"), dtype=torch.float64).numpy()
        if not off.shape[0] or not np.isfinite(off).all():
            raise InvalidArgumentError("offsets: expected a non-empty (R, 3) array of finite points")
        d = np.asarray(V.real_tensor(direction, "direction", (3,), device=torch.device("cpu"),
                                     dtype=torch.float64).numpy())
        norm = float(np.linalg.norm(d))
        if not np.isfinite(norm) or norm < 1e-9:
            raise InvalidArgumentError(f"direction: expected a non-zero finite vector, got {d.tolist()}")
        if alignment not in SCANNER_ALIGNMENTS:
            raise InvalidArgumentError(f"alignment: expected one of {list(SCANNER_ALIGNMENTS)}, got {alignment!r}")
        if isinstance(max_distance, (bool, np.bool_)) or not isinstance(max_distance, numbers.Real) or not (
                np.isfinite(float(max_distance)) and max_distance > 0):
            raise InvalidArgumentError(f"max_distance: expected a positive finite number, got {max_distance!r}")
        if not isinstance(exclude_body, (bool, np.bool_)):
            raise ArgumentTypeError(f"exclude_body: expected a bool, got {type(exclude_body).__name__}")
        return HeightScanner(self, int(b), off, d / norm, alignment, float(max_distance), bool(exclude_body))

    def _ray_cast(self, origins: torch.Tensor, directions: torch.Tensor, exclude_body: int) -> Any:
        """``(N, R)`` distance along unit ``directions`` ``(N, R, 3)`` from ``origins`` ``(N, R, 3)``
        (:attr:`hook_dtype` on the device) to the first collision geom of each env, ignoring body
        ``exclude_body`` (-1: none; never 0, the world); -1 for a miss; a numpy array or a tensor.
        The rules are :meth:`create_height_scanner`'s (first surface crossing at distance >= 0,
        unbounded one-sided planes, visual-only geoms transparent), at the current state (no step
        may be needed to bring the engine's query structures up to date). Backends declaring
        ``ray_casting`` implement it."""
        raise UnsupportedFeatureError(self.name, "ray_casting")
