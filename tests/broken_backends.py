"""Deliberately broken backends: each breaks exactly one clause of the contract.

They subclass the MuJoCo reference backend and override one hook, so that
everything else is correct and the conformance suite must find the one fault.
``BROKEN`` lists them; each class's ``CAUGHT_BY`` names the conformance tests
written for the clause it breaks, which must report it.

Used as a pytest plugin (``-p broken_backends``), the module registers them all.
"""

from __future__ import annotations

import numpy as np
import torch

from simbackend.backends.mujoco import MuJoCoBackend


class XyzwQuaternions(MuJoCoBackend):
    """Body and site quaternions returned in xyzw order instead of wxyz."""

    name = "broken-xyzw"
    CAUGHT_BY = ("test_kinematics.py::test_quaternions_are_wxyz_hinge_about_z", "test_kinematics.py::test_arm7_ee_site_pose")

    def _body_quat_w(self, ids):
        return torch.roll(super()._body_quat_w(ids), -1, dims=-1)

    def _site_quat_w(self, ids):
        return torch.roll(super()._site_quat_w(ids), -1, dims=-1)


class ComVelocity(MuJoCoBackend):
    """Body linear velocity of the centre of mass instead of the frame origin."""

    name = "broken-com-velocity"
    CAUGHT_BY = ("test_velocities.py::test_velocity_is_origin_not_com_single_hinge", "test_velocities.py::test_body_velocities_match_finite_differences")

    def _body_lin_vel_w(self, ids):
        ang, lin_origin = self._body_vel_w(ids)
        lever = self._field("xipos")[:, ids] - self._field("xpos")[:, ids]
        return self._out(lin_origin + np.cross(ang, lever))


class SetStateWritesEnv0(MuJoCoBackend):
    """set_state also writes the first given row into env 0."""

    name = "broken-set-state-env0"
    CAUGHT_BY = ("test_state.py::test_set_state_partial_ids_any_order", "test_state_machine.py::test_random_call_sequences")

    def _set_state(self, env_ids, qpos, qvel):
        if 0 not in env_ids:
            env_ids = np.concatenate(([0], env_ids))
            qpos = torch.cat((qpos[:1], qpos))
            qvel = torch.cat((qvel[:1], qvel))
        super()._set_state(env_ids, qpos, qvel)


class JacobianOfBodyOrigin(MuJoCoBackend):
    """Site Jacobian computed at the site's body origin instead of the site point."""

    name = "broken-jacobian-origin"
    CAUGHT_BY = ("test_jacobians.py::test_arm7_jacobian_is_of_the_site_point", "test_jacobians.py::test_site_jacobians_match_finite_differences")

    def _site_jacobian_w(self, site_id, cols):
        body = int(self._site_body[site_id])
        jacp, jacr = self.batch.jac(body, self._field("xpos")[:, body])
        return self._out(jacp[:, :, cols]), self._out(jacr[:, :, cols])


class CtrlOneSubstepLate(MuJoCoBackend):
    """The first substep of every step still uses the previous call's ctrl."""

    name = "broken-late-ctrl"
    CAUGHT_BY = ("test_physics.py::test_ctrl_acts_in_the_same_substep",)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._last_ctrl = torch.zeros((self.num_envs, self.num_actuators), dtype=self.hook_dtype)

    def _step(self, ctrl, nsteps, hold=None):
        diverged = super()._step(self._last_ctrl, 1, hold)
        if nsteps > 1:
            diverged |= super()._step(ctrl, nsteps - 1, hold)
        self._last_ctrl = ctrl.clone()
        return diverged


class LaggingGetters(MuJoCoBackend):
    """Plain mj_step semantics: derived quantities describe the state one substep back."""

    name = "broken-lagging-getters"
    CAUGHT_BY = ("test_state.py::test_getters_describe_current_instant_arm7", "test_state.py::test_getters_describe_current_instant_quadruped")

    def _step(self, ctrl, nsteps, hold=None):
        self._field("xpos")  # make sure derived fields are bound, so the batch refreshes them
        diverged = super()._step(ctrl, nsteps, hold)
        self._stale = False  # keep what the batch computed inside its last substep
        return diverged


class BodyFrameAngularVelocity(MuJoCoBackend):
    """Body angular velocity expressed in the body frame instead of the world frame."""

    name = "broken-local-ang-vel"
    CAUGHT_BY = ("test_velocities.py::test_free_joint_qvel_convention", "test_velocities.py::test_body_velocities_match_finite_differences")

    def _body_ang_vel_w(self, ids):
        w = self._field("cvel")[:, ids, :3]
        xmat = self._field("xmat")[:, ids].reshape(*w.shape[:-1], 3, 3)
        return self._out(np.einsum("...ji,...j->...i", xmat, w))


class ForceAtCentreOfMass(MuJoCoBackend):
    """apply_body_force acts at the centre of mass instead of the body frame origin."""

    name = "broken-force-at-com"
    CAUGHT_BY = ("test_physics.py::test_body_force_acts_at_frame_origin",)

    def _write_xfrc(self, force, torque):
        b = self._force_bodies
        self._xfrc[:, b, :3] = force
        self._xfrc[:, b, 3:] = torque


class StickyForces(MuJoCoBackend):
    """Forces from apply_body_force are never cleared."""

    name = "broken-sticky-forces"
    CAUGHT_BY = ("test_physics.py::test_body_force_cleared_after_step",)

    def _clear_body_forces(self):
        pass


class NoQuaternionNormalisation(MuJoCoBackend):
    """set_state writes free/ball quaternions as given, without normalising them."""

    name = "broken-unnormalised-quat"
    CAUGHT_BY = ("test_state.py::test_set_state_normalises_free_quaternions", "test_state.py::test_set_state_normalises_ball_quaternions")

    def _normalised_quaternions(self, qpos):
        _, zero = super()._normalised_quaternions(qpos)  # keep the zero check
        return qpos, zero


class RandomizedMassOnlyOnPaper(MuJoCoBackend):
    """Randomized body masses are recorded and read back, but the engine keeps simulating the model's."""

    name = "broken-dr-mass-on-paper"
    CAUGHT_BY = ("test_randomization.py::test_heavier_body_accelerates_less",)

    def _write_env_params(self, env_ids, values):
        values = dict(values)
        self._paper_mass = getattr(self, "_paper_mass", None)
        if "body_mass" in values:
            if self._paper_mass is None:
                self._paper_mass = np.tile(self._info.body_mass, (self.num_envs, 1))
            self._paper_mass[env_ids] = values.pop("body_mass")
        super()._write_env_params(env_ids, values)

    def _read_env_params(self, name):
        if name == "body_mass" and getattr(self, "_paper_mass", None) is not None:
            return self._paper_mass
        return super()._read_env_params(name)


class SnapshotWithoutWarmStart(MuJoCoBackend):
    """A restored snapshot loses the solver's warm start (as set_state rightly clears it)."""

    name = "broken-snapshot-warm-start"
    CAUGHT_BY = ("test_snapshot.py::test_restored_snapshot_reproduces_the_trajectory",)

    def _set_physics_state(self, env_ids, rows):
        super()._set_physics_state(env_ids, rows)
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
    NoQuaternionNormalisation,
    RandomizedMassOnlyOnPaper,
    SnapshotWithoutWarmStart,
]


def pytest_configure(config) -> None:
    """Register every broken backend when loaded as a plugin (``-p broken_backends``)."""
    from simbackend.registry import register_backend

    for cls in BROKEN:
        register_backend(cls.name, cls, replace=True)
