"""Random valid configurations of a model: one home for the parity suite and the conformance suite.

Imports no engine: it reads the model's :class:`~simbackend.model_info.ModelInfo`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from simbackend.model_info import JOINT_BALL, JOINT_FREE, JOINT_HINGE


def random_unit_quat(rng: np.random.Generator, size: tuple[int, ...] = ()) -> np.ndarray:
    """Uniformly random unit quaternions, wxyz, ``(*size, 4)``."""
    q = rng.normal(size=(*size, 4))
    return q / np.linalg.norm(q, axis=-1, keepdims=True)


def random_configurations(
    info: Any,
    n: int,
    rng: np.random.Generator,
    *,
    margin: float = 0.0,
    free_offset: float = 0.0,
    unlimited_hinge: float = math.pi,
    unlimited_slide: float = 0.5,
) -> np.ndarray:
    """``(n, nq)`` random configurations of the model ``info`` describes.

    Joints in model order: hinge and slide joints uniform in their range shrunk
    by ``margin`` at both ends (``+-unlimited_hinge`` rad / ``+-unlimited_slide``
    m where unlimited); free and ball joints a uniformly random unit quaternion;
    free joints keep ``qpos0``'s position, moved by up to ``+-free_offset`` per axis.
    """
    qpos = np.tile(np.asarray(info.qpos0, dtype=np.float64), (n, 1))
    for j, t in enumerate(info.joint_type):
        adr = int(info.joint_qposadr[j])
        if t == JOINT_FREE:
            if free_offset:
                qpos[:, adr : adr + 3] += rng.uniform(-free_offset, free_offset, size=(n, 3))
            qpos[:, adr + 3 : adr + 7] = random_unit_quat(rng, (n,))
        elif t == JOINT_BALL:
            qpos[:, adr : adr + 4] = random_unit_quat(rng, (n,))
        else:
            lo, hi = info.joint_range[j]
            half = unlimited_hinge if t == JOINT_HINGE else unlimited_slide
            lo = lo + margin if np.isfinite(lo) else -half
            hi = hi - margin if np.isfinite(hi) else half
            qpos[:, adr] = rng.uniform(lo, max(hi, lo), size=n)
    return qpos
