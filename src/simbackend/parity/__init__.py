"""Parity suite: how far a backend is from the MuJoCo reference, tier by tier.

:func:`run_parity` loads one model into the backend under test and into the
reference (``"mujoco"``), drives both through the same inputs and measures the
difference of each quantity against its own stated tolerance. It talks only to
the contract (backends come from :func:`simbackend.registry.make_backend`), so
it runs unchanged against any registered backend.

Tiers (:data:`TIERS`), in order:

* ``load``: the backend builds the model. A backend that rejects it
  (``ModelLoadError``, ``UnsupportedFeatureError``, ...) gives one failed row
  with its message, and no other tier runs.
* ``model``: names and order of bodies, joints, sites, actuators and sensors;
  sizes (nq, nv, nu, num_dof); and the physical model each engine holds
  (:meth:`~simbackend.contract.SimBackend.model_fields`): masses, centres of
  mass, inertia tensors, joint ranges, ctrl and force ranges, timestep, gravity.
  Values the backend declares it cannot hold as compiled
  (``capabilities.known_differences``, e.g. a massless body given 1e-6 kg on
  PhysX) are excused for exactly the declared elements, where they hold the
  declared value within the tolerance: such a row has status ``KNOWN`` (passed,
  :attr:`ParityRow.known` naming the declaration), not ``FAIL``.
* ``kinematics``: body and site poses at :data:`KIN_NUM_ENVS` random
  configurations, one per env, written with one ``set_state``.
* ``jacobian``: world-frame site Jacobians (all qvel columns) at the same kind
  of random configurations.
* ``dynamics``: the same initial states and control sequences (zero, a
  sinusoid, seeded random steps) rolled out for :data:`DYN_DURATION` of
  simulated time; every dof's trajectory is compared substep by substep, and
  the row names the **first** substep where it leaves tolerance.
* ``servo``: position actuators commanded to a target offset from the first
  keyframe (or ``qpos0``); final dof positions after :data:`SERVO_DURATION`.
* ``contact``: free bodies released from their initial pose settle for
  :data:`CONTACT_DURATION`; their resting heights are compared.
* ``randomized``: one domain-randomization plan (body masses with their
  inertias, actuator kp and kv, scaled by up to :data:`DR_SCALE`, seed
  :data:`DR_SEED`) applied to :data:`DR_NUM_ENVS` envs of both engines: the
  per-env values each engine holds must agree (:data:`MODEL_RTOL`), then the
  randomized models are rolled out as in ``servo`` (position actuators) or
  ``dynamics`` (zero ctrl) at those tiers' tolerances.

Which tiers run by default depends on the model (:func:`default_tiers`): the
static tiers (model, kinematics, jacobian) on every model, ``dynamics`` on the
contact-free built-ins (pendulum, double_pendulum, cartpole), ``servo`` on
``arm7`` (``randomized`` on these four) and ``contact`` on ``box_drop``. Any tier can be asked for explicitly.

The package: :mod:`.tolerances` (tiers, tolerances, default tiers per model),
:mod:`.report` (rows and reports), :mod:`.tiers` (the runners). Random
configurations come from :mod:`simbackend.sampling` and the quaternion angle
from :func:`simbackend.math.quat_angle_between`, shared with the conformance
suite.

Errors are measured in float64 from the contract's float32 outputs, so the
tolerances sit well above float32 rounding (~1e-7 relative).
"""

from __future__ import annotations

from simbackend.sampling import random_configurations

from . import tolerances
from .report import ParityReport, ParityRow
from .tiers import dynamics_controls, run_parity
from .tolerances import *  # noqa: F403 (the tiers, tolerances and settings are part of the API)

__all__ = [
    "ParityRow",
    "ParityReport",
    "run_parity",
    "random_configurations",
    "dynamics_controls",
    *tolerances.__all__,
]
