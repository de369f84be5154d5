"""Quaternion and frame helpers. Quaternions are wxyz.

Every function takes torch tensors or numpy arrays (and returns the same
kind), and broadcasts over leading dimensions: ``q`` is ``(..., 4)`` and
vectors are ``(..., 3)``.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import torch

__all__ = [
    "quat_yaw",
    "quat_mul",
    "quat_conj",
    "quat_apply",
    "quat_apply_inverse",
    "quat_to_matrix",
    "quat_normalize",
    "quat_canonical",
    "quat_angle_between",
    "cross",
]

Array = TypeVar("Array", torch.Tensor, np.ndarray)


def _stack(parts: tuple, like: Array) -> Array:
    return torch.stack(parts, -1) if isinstance(like, torch.Tensor) else np.stack(parts, -1)


def cross(a: Array, b: Array) -> Array:
    """Cross product along the last axis, ``(..., 3)``."""
    ax, ay, az = a[..., 0], a[..., 1], a[..., 2]
    bx, by, bz = b[..., 0], b[..., 1], b[..., 2]
    return _stack((ay * bz - az * by, az * bx - ax * bz, ax * by - ay * bx), a)


def quat_mul(a: Array, b: Array) -> Array:
    """Hamilton product ``a * b`` (rotate by b, then by a), ``(..., 4)``."""
    aw, ax, ay, az = a[..., 0], a[..., 1], a[..., 2], a[..., 3]
    bw, bx, by, bz = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
    return _stack(
        (
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ),
        a,
    )


def quat_conj(q: Array) -> Array:
    """Conjugate (the inverse of a unit quaternion), ``(..., 4)``."""
    return _stack((q[..., 0], -q[..., 1], -q[..., 2], -q[..., 3]), q)


def quat_apply(q: Array, v: Array) -> Array:
    """Rotate vectors ``v (..., 3)`` by unit quaternions ``q (..., 4)``."""
    w, xyz = q[..., :1], q[..., 1:]
    t = 2.0 * cross(xyz, v)
    return v + w * t + cross(xyz, t)


def quat_apply_inverse(q: Array, v: Array) -> Array:
    """Rotate vectors ``v`` by the inverse of unit quaternions ``q``: world -> frame."""
    return quat_apply(quat_conj(q), v)


def quat_to_matrix(q: Array) -> Array:
    """Rotation matrices ``(..., 3, 3)`` of unit quaternions ``(..., 4)``."""
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    m = _stack(
        (
            1 - 2 * (y * y + z * z),
            2 * (x * y - w * z),
            2 * (x * z + w * y),
            2 * (x * y + w * z),
            1 - 2 * (x * x + z * z),
            2 * (y * z - w * x),
            2 * (x * z - w * y),
            2 * (y * z + w * x),
            1 - 2 * (x * x + y * y),
        ),
        q,
    )
    return m.reshape(*q.shape[:-1], 3, 3)


def quat_normalize(q: Array) -> Array:
    """``q / |q|`` along the last axis."""
    if isinstance(q, torch.Tensor):
        return q / torch.linalg.vector_norm(q, dim=-1, keepdim=True)
    return q / np.linalg.norm(q, axis=-1, keepdims=True)


def quat_canonical(q: Array) -> Array:
    """The representative of ``{q, -q}`` with ``w >= 0`` (for comparisons)."""
    if isinstance(q, torch.Tensor):
        return torch.where(q[..., :1] < 0, -q, q)
    return np.where(q[..., :1] < 0, -q, q)


def quat_yaw(q: torch.Tensor) -> torch.Tensor:
    """Heading (radians, about world z) of wxyz quaternions ``(..., 4)``: the yaw of a z-y-x Euler split."""
    w, x, y, z = q.unbind(-1)
    return torch.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))


def quat_angle_between(a: Array, b: Array) -> Array:
    """Rotation angle (radians) between quaternions ``(..., 4)``, insensitive to sign and to their norms.

    Computed as ``2 atan2(|v|, |w|)`` of ``conj(a) b``, which keeps full
    precision for tiny angles where ``acos`` of a dot product loses it.
    """
    r = quat_mul(quat_conj(quat_normalize(a)), quat_normalize(b))
    if isinstance(r, torch.Tensor):
        return 2.0 * torch.atan2(torch.linalg.vector_norm(r[..., 1:], dim=-1), r[..., 0].abs())
    return 2.0 * np.arctan2(np.linalg.norm(r[..., 1:], axis=-1), np.abs(r[..., 0]))
