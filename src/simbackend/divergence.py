"""What "diverged" means: one definition, applied by every backend.

An env **diverged** during a call when, after any substep of it:

1. its state holds a non-finite value (NaN or inf) in ``qpos`` or ``qvel``; or
2. some ``|qpos|`` entry exceeds :data:`MAX_QPOS`; or
3. some ``|qvel|`` entry exceeds :data:`MAX_QVEL`; or
4. the engine reported a failure for it (MuJoCo's bad-qacc warning or a
   ``SimulationError``; a PhysX step error; MuJoCo Warp's contact or
   constraint buffer overflowing, ``capabilities.contact_buffers``); or
5. an external force or torque applied to it for the call
   (``apply_body_force``) is one no engine integrates: the speed it alone
   would give a body within the call, ``(|F| w_t + |tau| w_r) dt nsteps``
   with ``w`` the body's inverse weight at the model's reference pose
   (MuJoCo's ``body_invweight0``: translational, rotational), exceeds
   :data:`MAX_QVEL` (:func:`forced_rows`). It is judged from the inputs, so
   every engine flags the same envs: MuJoCo flags such a push by its bad-qacc
   check, while CPU PhysX drops a force it cannot integrate (a 1e30 N push
   leaves the body at rest) or zeroes the velocities without a trace.

A diverged env is reported in ``step``'s ``info["diverged"]`` and gets back its
last finite state (the state from before the call, or, with a pre-step control
function, from before the substep that diverged). Nothing resets silently.

The thresholds, and why:

* :data:`MAX_QPOS` = 1e10 is MuJoCo's ``mjMAXVAL``: beyond it MuJoCo itself
  declares the state bad. No robot coordinate (metres, radians) is near it.
* :data:`MAX_QVEL` = 1e5 (m/s or rad/s) is far beyond anything a robot or
  object reaches (1e5 rad/s is ~950,000 rpm), and below the speed at which
  PhysX saturates a blown-up articulation (about 1e6: PhysX clamps speeds
  instead of letting them grow, so it cannot report a larger value). One
  threshold below every engine's ceiling makes the mask the same on every
  engine: MuJoCo's own limit (1e10) would let an env at 1e8 rad/s pass there
  and fail on PhysX.

``set_state`` rejects a state this rule would flag at once (and any value too
large for float32), so every accepted state is one the engines can step.

The same function serves numpy arrays (CPU engines) and torch tensors (on any
device, without a host synchronisation).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from simbackend._validate import bounded

#: |qpos| entries above this count as diverged (MuJoCo's mjMAXVAL)
MAX_QPOS = 1e10
#: |qvel| entries above this (m/s, rad/s) count as diverged (below PhysX's ~1e6 speed saturation)
MAX_QVEL = 1e5


def diverged_rows(qpos: Any, qvel: Any) -> Any:
    """``(n,)`` bool: which rows of ``qpos (n, nq)`` / ``qvel (n, nv)`` break the rule.

    Works on numpy arrays and on torch tensors (the result stays on the
    tensors' device). ``nq`` or ``nv`` may be 0.
    """
    if isinstance(qpos, np.ndarray):
        with np.errstate(invalid="ignore"):
            bad_q = ~(np.abs(qpos) <= MAX_QPOS)  # NaN compares false: caught here
            bad_v = ~(np.abs(qvel) <= MAX_QVEL)
        return bad_q.any(axis=1) | bad_v.any(axis=1)
    ok = (qpos.abs() <= MAX_QPOS).all(dim=1) & (qvel.abs() <= MAX_QVEL).all(dim=1)  # NaN compares false
    return ~ok


def any_diverged(qpos: Any, qvel: Any) -> bool:
    """Whether some row of ``qpos``/``qvel`` breaks rules 1-3: one reduction per array, for a CPU
    backend's common case (no env diverged); :func:`diverged_rows` then says which."""
    if isinstance(qpos, np.ndarray):
        return not (bounded(qpos, MAX_QPOS) and bounded(qvel, MAX_QVEL))
    return not bool((qpos.abs() <= MAX_QPOS).all() & (qvel.abs() <= MAX_QVEL).all())


def forced_rows(force: Any, torque: Any, inv_weight: Any, duration: float) -> Any:
    """``(n,)`` bool: rule 5, envs whose external forces alone would change a body's speed by more
    than :data:`MAX_QVEL` within ``duration`` seconds.

    Args:
        force, torque: ``(n, B, 3)`` tensors, world frame (finite).
        inv_weight: ``(B, 2)`` the bodies' translational and rotational inverse weights
            (MuJoCo's ``body_invweight0``), same device.
        duration: seconds the forces act (substep x substeps).
    """
    dv = (force.norm(dim=-1) * inv_weight[:, 0] + torque.norm(dim=-1) * inv_weight[:, 1]) * duration
    return (dv > MAX_QVEL).any(dim=1)
