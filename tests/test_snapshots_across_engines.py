"""Snapshots stay with their engine; named states and qpos/qvel move between engines.

Needs both registered engines (the conformance suite covers each alone).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from simbackend import make_backend
from simbackend.errors import SnapshotMismatchError
from simbackend.randomization import Distribution, RandomizationPlan, Term
from simbackend.state import NamedState


@pytest.fixture
def pair():
    mj, sp = make_backend("mujoco", "quadruped", 3), make_backend("sapien", "quadruped", 3)
    yield mj, sp
    mj.close()
    sp.close()


def test_a_snapshot_is_refused_by_the_other_engine_naming_its_maker(pair) -> None:
    mj, sp = pair
    assert mj.info.fingerprint == sp.info.fingerprint
    before = sp.get_qpos().clone()
    with pytest.raises(SnapshotMismatchError, match=r"backend 'mujoco', not 'sapien'.*set_named_state"):
        sp.set_physics_state(None, mj.get_physics_state())
    with pytest.raises(SnapshotMismatchError, match=r"backend 'sapien', not 'mujoco'"):
        mj.set_physics_state(None, sp.get_physics_state())
    assert torch.equal(sp.get_qpos(), before)


def test_a_named_state_moves_from_mujoco_to_physx_with_its_parameters(pair) -> None:
    mj, sp = pair
    mj.set_state(None, mj.get_keyframe_qpos("stand").expand(3, -1))
    mj.apply_init_randomization(
        RandomizationPlan(
            (Term("body_mass", Distribution.uniform(0.8, 1.2)), Term("joint_damping", Distribution.uniform(0.5, 1.5))),
            seed=3,
        )
    )
    for _ in range(10):
        mj.step(torch.full((3, mj.num_actuators), 0.2), nsteps=2)
    state = NamedState.from_dict(mj.get_named_state().to_dict())
    sp.set_named_state(None, state)
    np.testing.assert_allclose(sp.get_qpos().numpy(), mj.get_qpos().numpy(), atol=1e-6)
    np.testing.assert_allclose(sp.get_qvel().numpy(), mj.get_qvel().numpy(), atol=1e-5)
    np.testing.assert_allclose(sp.get_body_pos_w().numpy(), mj.get_body_pos_w().numpy(), atol=1e-5)
    np.testing.assert_allclose(sp.get_env_body_mass().numpy(), mj.get_env_body_mass().numpy(), rtol=1e-6)
    np.testing.assert_allclose(sp.get_env_joint_damping().numpy(), mj.get_env_joint_damping().numpy(), rtol=1e-6)
    assert torch.equal(sp.get_time(), mj.get_time())
