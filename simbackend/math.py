"""Quaternion and frame helpers on torch tensors. Quaternions are wxyz.

Every function broadcasts over leading dimensions: ``q`` is ``(..., 4)`` and
vectors are ``(..., 3)``.
"""

from __future__ import annotations

import torch

__all__ = [
    "quat_mul",
    "quat_conj",
    "quat_apply",
    "quat_apply_inverse",
    "quat_to_matrix",
    "quat_normalize",
    "quat_canonical",
    "quat_angle_between",
]


def quat_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Hamilton product ``a * b`` (rotate by b, then by a), ``(..., 4)``."""
    aw, ax, ay, az = a.unbind(-1)
    bw, bx, by, bz = b.unbind(-1)
    return torch.stack(
        (
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ),
        dim=-1,
    )


def quat_conj(q: torch.Tensor) -> torch.Tensor:
    """Conjugate (the inverse of a unit quaternion), ``(..., 4)``."""
    return torch.cat((q[..., :1], -q[..., 1:]), dim=-1)


def quat_apply(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Rotate vectors ``v (..., 3)`` by unit quaternions ``q (..., 4)``."""
    w, xyz = q[..., :1], q[..., 1:]
    t = 2.0 * torch.linalg.cross(xyz, v, dim=-1)
    return v + w * t + torch.linalg.cross(xyz, t, dim=-1)


def quat_apply_inverse(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Rotate vectors ``v`` by the inverse of unit quaternions ``q``: world -> frame."""
    return quat_apply(quat_conj(q), v)


def quat_to_matrix(q: torch.Tensor) -> torch.Tensor:
    """Rotation matrices ``(..., 3, 3)`` of unit quaternions ``(..., 4)``."""
    w, x, y, z = q.unbind(-1)
    return torch.stack(
        (
            1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
            2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
            2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
        ),
        dim=-1,
    ).reshape(*q.shape[:-1], 3, 3)


def quat_normalize(q: torch.Tensor) -> torch.Tensor:
    """``q / |q|`` along the last axis."""
    return q / torch.linalg.vector_norm(q, dim=-1, keepdim=True)


def quat_canonical(q: torch.Tensor) -> torch.Tensor:
    """The representative of ``{q, -q}`` with ``w >= 0`` (for comparisons)."""
    return torch.where(q[..., :1] < 0, -q, q)


def quat_angle_between(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Rotation angle (radians) between unit quaternions, insensitive to sign, ``(...)``."""
    d = (a * b).sum(-1).abs().clamp(max=1.0)
    return 2.0 * torch.acos(d)
