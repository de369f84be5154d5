"""simbackend.math: quaternion helpers (wxyz) against rotation matrices built independently."""

from __future__ import annotations

import numpy as np
import torch

from simbackend import math as sm


def _axis_angle(axis, angle):
    axis = np.asarray(axis, float) / np.linalg.norm(axis)
    return torch.tensor(np.r_[np.cos(angle / 2), np.sin(angle / 2) * axis], dtype=torch.float64)


def _rodrigues(axis, angle):
    k = np.asarray(axis, float) / np.linalg.norm(axis)
    K = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * K @ K


def test_quat_to_matrix_matches_rodrigues():
    rng = np.random.default_rng(0)
    for _ in range(20):
        axis, angle = rng.normal(size=3), rng.uniform(-np.pi, np.pi)
        np.testing.assert_allclose(sm.quat_to_matrix(_axis_angle(axis, angle)).numpy(), _rodrigues(axis, angle), atol=1e-12)


def test_apply_and_inverse_and_mul_compose_like_matrices():
    rng = np.random.default_rng(1)
    a = sm.quat_normalize(torch.tensor(rng.normal(size=(8, 4))))
    b = sm.quat_normalize(torch.tensor(rng.normal(size=(8, 4))))
    v = torch.tensor(rng.normal(size=(8, 3)))
    Ra, Rb = sm.quat_to_matrix(a), sm.quat_to_matrix(b)
    torch.testing.assert_close(sm.quat_apply(a, v), (Ra @ v[..., None])[..., 0])
    torch.testing.assert_close(sm.quat_apply_inverse(a, v), (Ra.transpose(-1, -2) @ v[..., None])[..., 0])
    torch.testing.assert_close(sm.quat_to_matrix(sm.quat_mul(a, b)), Ra @ Rb)


def test_canonical_and_angle_between_ignore_sign():
    q = _axis_angle([0, 0, 1], 0.3)
    torch.testing.assert_close(sm.quat_canonical(-q), q)
    assert float(sm.quat_angle_between(q, -q)) < 1e-6
    assert abs(float(sm.quat_angle_between(q, _axis_angle([0, 0, 1], 0.5))) - 0.2) < 1e-9
