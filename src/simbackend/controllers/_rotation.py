"""Axis-angle (rotation vector) helpers for the controllers, in torch; quaternions are wxyz.

Both functions broadcast over leading dimensions and stay accurate for tiny angles.
"""

from __future__ import annotations

import torch

__all__ = ["quat_from_rotvec", "rotvec_from_quat"]

_SMALL = 1e-6


def quat_from_rotvec(v: torch.Tensor) -> torch.Tensor:
    """Unit quaternions ``(..., 4)`` (wxyz) of rotation vectors ``v`` ``(..., 3)`` (axis times angle, rad)."""
    angle = torch.linalg.vector_norm(v, dim=-1, keepdim=True)
    half = 0.5 * angle
    small = angle < _SMALL
    # sin(a/2)/a, with its Taylor series 1/2 - a^2/48 near zero
    scale = torch.where(small, 0.5 - angle * angle / 48.0, torch.sin(half) / torch.where(small, 1.0, angle))
    return torch.cat([torch.cos(half), v * scale], dim=-1)


def rotvec_from_quat(q: torch.Tensor) -> torch.Tensor:
    """Rotation vectors ``(..., 3)`` of unit quaternions ``q`` ``(..., 4)``, angles in ``[0, pi]``.

    ``q`` and ``-q`` give the same vector (the shorter rotation is taken).
    """
    q = torch.where(q[..., :1] < 0, -q, q)
    w, xyz = q[..., :1], q[..., 1:]
    s = torch.linalg.vector_norm(xyz, dim=-1, keepdim=True)
    angle = 2.0 * torch.atan2(s, w)
    small = s < _SMALL
    # angle / s, with its limit 2 / w near zero
    scale = torch.where(small, 2.0 / w.clamp_min(_SMALL), angle / torch.where(small, 1.0, s))
    return xyz * scale
