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
        np.testing.assert_allclose(
            sm.quat_to_matrix(_axis_angle(axis, angle)).numpy(), _rodrigues(axis, angle), atol=1e-12
        )


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


def test_numpy_arrays_give_the_same_results_as_tensors():
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(5, 4)), rng.normal(size=(5, 4))
    a, b = a / np.linalg.norm(a, axis=-1, keepdims=True), b / np.linalg.norm(b, axis=-1, keepdims=True)
    v = rng.normal(size=(5, 3))
    ta, tb, tv = map(torch.tensor, (a, b, v))
    for fn, args, targs in [
        (sm.quat_mul, (a, b), (ta, tb)),
        (sm.quat_conj, (a,), (ta,)),
        (sm.quat_apply, (a, v), (ta, tv)),
        (sm.quat_apply_inverse, (a, v), (ta, tv)),
        (sm.quat_to_matrix, (a,), (ta,)),
        (sm.quat_canonical, (-a,), (-ta,)),
        (sm.quat_angle_between, (a, b), (ta, tb)),
        (sm.cross, (v, v[::-1].copy()), (tv, tv.flip(0))),
    ]:
        out = fn(*args)
        assert isinstance(out, np.ndarray), fn.__name__
        np.testing.assert_allclose(out, fn(*targs).numpy(), atol=1e-12, err_msg=fn.__name__)
    np.testing.assert_allclose(sm.cross(v, v[::-1]), np.cross(v, v[::-1]), atol=1e-12)


def test_quat_angle_is_precise_for_tiny_angles_and_sign_blind():
    rng = np.random.default_rng(0)
    q = rng.normal(size=(5, 4))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    angle = 3e-7
    axis = np.array([0.0, 0.6, 0.8])
    dq = np.concatenate(([np.cos(angle / 2)], np.sin(angle / 2) * axis))
    rotated = sm.quat_mul(q, np.broadcast_to(dq, q.shape))
    np.testing.assert_allclose(sm.quat_angle_between(q, rotated), angle, rtol=1e-6)
    np.testing.assert_allclose(sm.quat_angle_between(q, -rotated), angle, rtol=1e-6)
    np.testing.assert_allclose(sm.quat_angle_between(q, q), 0.0, atol=1e-12)
    # the same on torch tensors, and on quaternions that are not unit norm
    tq, tr = torch.as_tensor(q), torch.as_tensor(rotated)
    torch.testing.assert_close(
        sm.quat_angle_between(3.0 * tq, tr), torch.full((5,), angle, dtype=torch.float64), rtol=1e-6, atol=0
    )
