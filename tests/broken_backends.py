"""Deliberately broken engines: each breaks exactly one clause of the contract.

They subclass the MuJoCo reference engine and override one or two members of
the declared engine interface (:mod:`simbackend.engine`), so that everything
else is correct and the conformance suite must find the one fault.
``BROKEN`` lists them; each class's ``CAUGHT_BY`` names the conformance tests
written for the clause it breaks, which must report it.

Used as a pytest plugin (``-p broken_backends``), the module registers them all.
"""

from __future__ import annotations

import numpy as np
import torch

from simbackend.backends.mujoco import MuJoCoEngine
from simbackend.engine import BodyForces
from simbackend.math import cross


class XyzwQuaternions(MuJoCoEngine):
    """Body and site quaternions returned in xyzw order instead of wxyz."""

    name = "broken-xyzw"
    CAUGHT_BY = (
        "test_kinematics.py::test_quaternions_are_wxyz_hinge_about_z",
        "test_kinematics.py::test_arm7_ee_site_pose",
    )

    def body_pose(self, ids):
        pos, quat = super().body_pose(ids)
        return pos, np.roll(quat, -1, axis=-1)

    def site_pose(self, ids):
        pos, quat = super().site_pose(ids)
        return pos, np.roll(quat, -1, axis=-1)


class ComVelocity(MuJoCoEngine):
    """Body linear velocity of the centre of mass instead of the frame origin."""

    name = "broken-com-velocity"
    CAUGHT_BY = (
        "test_velocities.py::test_velocity_is_origin_not_com_single_hinge",
        "test_velocities.py::test_body_velocities_match_finite_differences",
    )

    def body_velocity(self, ids):
        lin, ang = super().body_velocity(ids)
        lever = self._field("xipos")[:, ids] - self._field("xpos")[:, ids]
        return lin + cross(ang, lever), ang


class SetStateWritesEnv0(MuJoCoEngine):
    """set_state also writes the first given row into env 0."""

    name = "broken-set-state-env0"
    CAUGHT_BY = (
        "test_state.py::test_set_state_partial_ids_any_order",
        "test_state_machine.py::test_random_call_sequences",
    )

    def write_state(self, env_ids, qpos, qvel):
        if 0 not in env_ids:
            env_ids = np.concatenate(([0], env_ids))
            qpos = torch.cat((qpos[:1], qpos))
            qvel = torch.cat((qvel[:1], qvel))
        super().write_state(env_ids, qpos, qvel)


class JacobianOfBodyOrigin(MuJoCoEngine):
    """Site Jacobian computed at the site's body origin instead of the site point."""

    name = "broken-jacobian-origin"
    CAUGHT_BY = (
        "test_jacobians.py::test_arm7_jacobian_is_of_the_site_point",
        "test_jacobians.py::test_site_jacobians_match_finite_differences",
    )

    def site_jacobian(self, site_id, cols):
        body = int(self._site_body[site_id])
        jacp, jacr = self.batch.jac(body, self._field("xpos")[:, body])
        return jacp[:, :, cols], jacr[:, :, cols]


class CtrlOneSubstepLate(MuJoCoEngine):
    """The first substep of every step still uses the previous call's ctrl."""

    name = "broken-late-ctrl"
    CAUGHT_BY = ("test_physics.py::test_ctrl_acts_in_the_same_substep",)

    def step(self, ctrl, nsteps, forces):
        late = getattr(self, "_late_ctrl", None)
        failed = super().step(torch.zeros_like(ctrl) if late is None else late, 1, forces)
        if nsteps > 1:
            before = self._prev_state.copy()
            rest = super().step(ctrl, nsteps - 1, forces)  # the engine's masks: None when no env failed
            failed = rest if failed is None else failed if rest is None else failed | rest
            self._prev_state[...] = before  # a revert goes back to before the whole call
        self._late_ctrl = ctrl.clone()
        return failed


class LaggingGetters(MuJoCoEngine):
    """Plain mj_step semantics: derived quantities describe the state one substep back."""

    name = "broken-lagging-getters"
    CAUGHT_BY = (
        "test_state.py::test_getters_describe_current_instant_arm7",
        "test_state.py::test_getters_describe_current_instant_quadruped",
    )

    def step(self, ctrl, nsteps, forces):
        self._field("xpos")  # make sure derived fields are bound, so the batch refreshes them
        failed = super().step(ctrl, nsteps, forces)
        self._stale = False  # keep what the batch computed inside its last substep
        return failed


class BodyFrameAngularVelocity(MuJoCoEngine):
    """Body angular velocity expressed in the body frame instead of the world frame."""

    name = "broken-local-ang-vel"
    CAUGHT_BY = (
        "test_velocities.py::test_free_joint_qvel_convention",
        "test_velocities.py::test_body_velocities_match_finite_differences",
    )

    def body_velocity(self, ids):
        lin, w = super().body_velocity(ids)
        xmat = self._field("xmat")[:, ids].reshape(*w.shape[:-1], 3, 3)
        return lin, np.einsum("...ji,...j->...i", xmat, w)


class ForceAtCentreOfMass(MuJoCoEngine):
    """apply_body_force acts at the centre of mass instead of the body frame origin."""

    name = "broken-force-at-com"
    CAUGHT_BY = ("test_physics.py::test_body_force_acts_at_frame_origin",)

    def step(self, ctrl, nsteps, forces):
        if forces is not None:  # cancel the shift from the frame origin to the centre of mass
            b = forces.bodies
            lever = torch.as_tensor(self._field("xpos")[:, b] - self._field("xipos")[:, b])
            forces = BodyForces(b, forces.force, forces.torque - cross(lever, forces.force))
        return super().step(ctrl, nsteps, forces)


class StickyForces(MuJoCoEngine):
    """Forces from apply_body_force are never cleared."""

    name = "broken-sticky-forces"
    CAUGHT_BY = ("test_physics.py::test_body_force_cleared_after_step",)

    def step(self, ctrl, nsteps, forces):
        if forces is not None:
            self._sticky = forces
        return super().step(ctrl, nsteps, getattr(self, "_sticky", None))


class UnnormalisedQuaternions(MuJoCoEngine):
    """set_state writes free and ball quaternions scaled by 2 (not unit) instead of the normalised ones it is given."""

    name = "broken-unnormalised-quat"
    CAUGHT_BY = (
        "test_state.py::test_set_state_normalises_free_quaternions",
        "test_state.py::test_set_state_normalises_ball_quaternions",
    )

    def write_state(self, env_ids, qpos, qvel):
        cols = (self.info.quat_qpos_index[:, None] + np.arange(4)).reshape(-1)
        qpos = qpos.clone()
        qpos[:, torch.as_tensor(cols, dtype=torch.long)] *= 2.0
        super().write_state(env_ids, qpos, qvel)


class RandomizedMassOnlyOnPaper(MuJoCoEngine):
    """Randomized body masses are recorded and read back, but the engine keeps simulating the model's."""

    name = "broken-dr-mass-on-paper"
    CAUGHT_BY = ("test_randomization.py::test_heavier_body_accelerates_less",)

    def write_params(self, env_ids, values):
        values = dict(values)
        self._paper_mass = getattr(self, "_paper_mass", None)
        if "body_mass" in values:
            if self._paper_mass is None:
                self._paper_mass = np.tile(self.info.body_mass, (self.num_envs, 1))
            self._paper_mass[env_ids] = values.pop("body_mass")
        super().write_params(env_ids, values)

    def read_params(self, field):
        if field == "body_mass" and getattr(self, "_paper_mass", None) is not None:
            return self._paper_mass
        return super().read_params(field)


class SnapshotWithoutWarmStart(MuJoCoEngine):
    """A restored snapshot loses the solver's warm start (as set_state rightly clears it)."""

    name = "broken-snapshot-warm-start"
    CAUGHT_BY = ("test_snapshot.py::test_restored_snapshot_reproduces_the_trajectory",)

    def restore_state(self, env_ids, rows):
        super().restore_state(env_ids, rows)
        self._warmstart[env_ids] = 0.0


BROKEN = [
    XyzwQuaternions,
    ComVelocity,
    SetStateWritesEnv0,
    JacobianOfBodyOrigin,
    CtrlOneSubstepLate,
    LaggingGetters,
    BodyFrameAngularVelocity,
    ForceAtCentreOfMass,
    StickyForces,
    UnnormalisedQuaternions,
    RandomizedMassOnlyOnPaper,
    SnapshotWithoutWarmStart,
]


def pytest_configure(config) -> None:
    """Register every broken engine when loaded as a plugin (``-p broken_backends``)."""
    from simbackend.registry import register_backend

    for cls in BROKEN:
        register_backend(cls.name, cls, replace=True)
