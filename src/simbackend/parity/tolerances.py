"""Tiers, their tolerances and settings, and which tiers run on which model by default."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

__all__ = [
    "TIERS",
    "STATIC_TIERS",
    "ROLLOUT_TIERS",
    "MODEL_DEFAULT_TIERS",
    "default_tiers",
    "MODEL_RTOL",
    "MODEL_SCALE_FLOOR",
    "MODEL_LENGTH_ATOL",
    "MODEL_GRAVITY_ATOL",
    "KIN_NUM_ENVS",
    "KIN_POS_TOL",
    "KIN_ANGLE_TOL",
    "KIN_UNLIMITED_HINGE",
    "KIN_UNLIMITED_SLIDE",
    "JAC_TOL",
    "DYN_DURATION",
    "DYN_POS_TOL",
    "DYN_NUM_ENVS",
    "DYN_INITIAL_OFFSET",
    "DYN_SINE_HZ",
    "DYN_SINE_AMPLITUDE",
    "DYN_RANDOM_HOLD",
    "SERVO_DURATION",
    "SERVO_TOL",
    "SERVO_OFFSET",
    "CONTACT_DURATION",
    "CONTACT_HEIGHT_TOL",
    "DR_NUM_ENVS",
    "DR_SCALE",
    "DR_SEED",
]
#: every tier, in the order they run and are reported (``load`` always runs first)
TIERS = ("model", "kinematics", "jacobian", "dynamics", "servo", "contact", "randomized")

#: tiers that need no simulation, run on every model by default
STATIC_TIERS = ("model", "kinematics", "jacobian")
#: the tiers that step the physics: where the backend under test takes some physics from MuJoCo
#: (``capabilities.delegated``), their rows are marked: those figures partly compare MuJoCo with itself
ROLLOUT_TIERS = ("dynamics", "servo", "contact", "randomized")

#: built-in model name (or file stem) -> tiers run by default; other models get :data:`STATIC_TIERS`
MODEL_DEFAULT_TIERS = {
    "pendulum": STATIC_TIERS + ("dynamics", "randomized"),
    "double_pendulum": STATIC_TIERS + ("dynamics", "randomized"),
    "cartpole": STATIC_TIERS + ("dynamics", "randomized"),
    "arm7": STATIC_TIERS + ("servo", "randomized"),
    "box_drop": STATIC_TIERS + ("contact",),
}

# ----------------------------------------------------------------------
# tolerances and settings
# ----------------------------------------------------------------------
#: model tier: relative tolerance of masses, inertia tensors (relative to the
#: body's largest inertia element), ctrl/force ranges and the timestep. An
#: engine that stores float32 rounds at ~6e-8 relative; diagonalising and
#: rotating an inertia tensor back in float32 costs a few times that.
MODEL_RTOL = 1e-6
#: model tier: scale below which :data:`MODEL_RTOL` becomes absolute (kg, kg m^2, ctrl and force units, s)
MODEL_SCALE_FLOOR = {
    "body_mass": 1e-3,
    "body_inertia": 1e-6,
    "actuator_ctrl_range": 1.0,
    "actuator_force_range": 1.0,
    "timestep": 1e-3,
}
#: model tier: absolute tolerance of centres of mass (m) and joint ranges (rad or m)
MODEL_LENGTH_ATOL = 1e-6
#: model tier: absolute tolerance of gravity (m/s^2; 9.81 in float32 is off by 4e-7)
MODEL_GRAVITY_ATOL = 1e-5

#: kinematics/jacobian: number of random configurations (one per env, one set_state)
KIN_NUM_ENVS = 64
#: kinematics: body and site positions, m
KIN_POS_TOL = 1e-5
#: kinematics: body and site orientations, rad (rotation angle between the two, sign-insensitive)
KIN_ANGLE_TOL = 1e-5
#: kinematics: range of hinge angles where a hinge is unlimited, rad (uniform in [-pi, pi])
KIN_UNLIMITED_HINGE = math.pi
#: kinematics: range of slide positions where a slide is unlimited, m
KIN_UNLIMITED_SLIDE = 0.5
#: jacobian: every element of jacp (m/rad or 1) and jacr (1)
JAC_TOL = 1e-4

#: dynamics: simulated time of each rollout, s
DYN_DURATION = 1.0
#: dynamics: dof positions along the rollout, rad or m
DYN_POS_TOL = 1e-2
#: dynamics: envs: 0 zero ctrl, 1 sinusoid, 2 seeded random steps
DYN_NUM_ENVS = 3
#: dynamics: initial dof offsets from qpos0 are uniform in +- this (rad or m), inside the ranges
DYN_INITIAL_OFFSET = 0.5
#: dynamics: sinusoid frequency (Hz) and amplitude (fraction of the half ctrl range)
DYN_SINE_HZ = 1.0
DYN_SINE_AMPLITUDE = 0.8
#: dynamics: the random control is held for this long before a new draw, s
DYN_RANDOM_HOLD = 0.05

#: servo: simulated time until the position servos are steady, s
SERVO_DURATION = 2.5
#: servo: final dof positions, rad or m
SERVO_TOL = 1e-3
#: servo: target = start joint value + (+-) this offset (alternating sign by actuator), clipped to ctrl range
SERVO_OFFSET = 0.2

#: contact: settling time of the released free bodies, s
CONTACT_DURATION = 1.0
#: contact: resting height (z of the body frame origin), m
CONTACT_HEIGHT_TOL = 2e-3

#: randomized: envs, each with its own draw of the plan
DR_NUM_ENVS = 4
#: randomized: body masses (with their inertias) and actuator kp/kv are scaled uniformly in 1 +- this
DR_SCALE = 0.3
#: randomized: the plan's seed
DR_SEED = 2026


def _model_label(model: Any) -> str:
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model)
    return type(model).__name__


def _model_key(model: Any) -> str | None:
    """Built-in name or file stem of a model source (selects its default tiers)."""
    if isinstance(model, (str, os.PathLike)):
        return Path(os.fspath(model)).stem
    return None


def default_tiers(model: Any) -> tuple[str, ...]:
    """The tiers :func:`run_parity` runs on ``model`` when none are asked for."""
    return MODEL_DEFAULT_TIERS.get(_model_key(model) or "", STATIC_TIERS)
