"""Controller configs: frozen dataclasses, validated when they are made.

A config holds only what can be checked without a model (types, signs, lengths
against ``joints``, the frame string). What needs the model (joint and site
names, actuator kinds, ranges) is checked when :func:`~simbackend.controllers.make_controller`
builds the controller on a backend. Bounds given as one number apply to every
joint (or axis); per-joint bounds are sequences as long as ``joints``. Sequences
are stored as tuples of floats.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from simbackend import checks
from simbackend.errors import ArgumentTypeError, InvalidArgumentError

__all__ = [
    "EE_FRAMES",
    "Bound",
    "EEPoseConfig",
    "JointPDConfig",
    "JointPositionConfig",
    "PassiveConfig",
]

#: a bound: one number for every joint (axis), or one per joint (axis)
Bound = float | Sequence[float] | None

#: the frames of :class:`EEPoseConfig`: ``<translation>:<rotation>``
EE_FRAMES = (
    "root_translation:root_aligned_rotation",
    "root_translation:body_aligned_rotation",
    "body_translation:root_aligned_rotation",
    "body_translation:body_aligned_rotation",
)


# ----------------------------------------------------------------------
# field checks (each names the field as ``<Config>.<field>``)
# ----------------------------------------------------------------------
def _set(obj: Any, name: str, value: Any) -> None:
    object.__setattr__(obj, name, value)


def _arg(obj: Any, name: str) -> str:
    return f"{type(obj).__name__}.{name}"


def _check_bool(obj: Any, name: str) -> None:
    checks.boolean(getattr(obj, name), _arg(obj, name))


def _check_names(obj: Any, name: str, what: str) -> tuple[str, ...]:
    v = getattr(obj, name)
    if isinstance(v, str):
        v = (v,)
    elif isinstance(v, (bytes, bytearray)) or not hasattr(v, "__iter__"):
        raise ArgumentTypeError(
            f"{_arg(obj, name)}: expected a {what} name or a sequence of names, got {type(v).__name__}"
        )
    v = tuple(v)
    for n in v:
        if not isinstance(n, str):
            raise ArgumentTypeError(f"{_arg(obj, name)}: expected {what} names (strings), got {type(n).__name__}")
    if not v:
        raise InvalidArgumentError(f"{_arg(obj, name)}: expected at least one {what} name, got none")
    dup = sorted({n for n in v if v.count(n) > 1})
    if dup:
        raise InvalidArgumentError(f"{_arg(obj, name)}: {what} names must be distinct, repeated: {dup}")
    _set(obj, name, v)
    return v


def _real(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _check_values(
    obj: Any,
    name: str,
    n: int,
    *,
    allow_none: bool,
    minimum: float | None = None,
    strict: bool = False,
    what: str = "joint",
    allow_inf: bool = False,
) -> tuple[float, ...] | None:
    """A number or a length-``n`` sequence of numbers, finite (``+inf`` too with ``allow_inf``) and
    ``> / >= minimum``; stored as given (a float or a tuple); returns it as an ``n``-tuple (``None`` if
    allowed and absent)."""
    v = getattr(obj, name)
    if v is None:
        if allow_none:
            return None
        raise InvalidArgumentError(f"{_arg(obj, name)}: required, got None")
    if _real(v):
        values = (float(v),) * n
        stored: Any = float(v)
    else:
        if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
            raise ArgumentTypeError(
                f"{_arg(obj, name)}: expected a number or a sequence of {n} numbers, got {type(v).__name__}"
            )
        try:  # numpy arrays and tensors become plain floats
            items = list(v.tolist()) if hasattr(v, "tolist") else list(v)
        except TypeError:
            raise ArgumentTypeError(
                f"{_arg(obj, name)}: expected a number or a sequence of {n} numbers, got {type(v).__name__}"
            ) from None
        if not all(_real(x) for x in items):
            bad = next(x for x in items if not _real(x))
            raise ArgumentTypeError(f"{_arg(obj, name)}: expected numbers, got {type(bad).__name__}")
        if len(items) != n:
            raise InvalidArgumentError(
                f"{_arg(obj, name)}: expected one number or {n} (one per {what}), got {len(items)}"
            )
        values = stored = tuple(float(x) for x in items)
    for x in values:
        if not (math.isfinite(x) or (allow_inf and x == math.inf)):
            finite = "finite numbers or inf" if allow_inf else "finite numbers"
            raise InvalidArgumentError(f"{_arg(obj, name)}: expected {finite}, got {x}")
        if minimum is not None and (x <= minimum if strict else x < minimum):
            cmp = ">" if strict else ">="
            raise InvalidArgumentError(f"{_arg(obj, name)}: expected values {cmp} {minimum:g}, got {x:g}")
    _set(obj, name, stored)
    return values


def _check_low_high(obj: Any, low: str, high: str, n: int, *, required: bool, why: str, what: str = "joint") -> None:
    lo = _check_values(obj, low, n, allow_none=True, what=what)
    hi = _check_values(obj, high, n, allow_none=True, what=what)
    if (lo is None) != (hi is None):
        raise InvalidArgumentError(f"{_arg(obj, low)}, {_arg(obj, high)}: give both bounds or neither")
    if lo is None or hi is None:  # neither given
        if required:
            raise InvalidArgumentError(f"{_arg(obj, low)}, {_arg(obj, high)}: required {why}")
        return
    for i, (a, b) in enumerate(zip(lo, hi)):
        if not a < b:
            raise InvalidArgumentError(
                f"{_arg(obj, low)}: must be below {high} for every {what}, got {a:g} >= {b:g} at index {i}"
            )


def _check_delta_flags(obj: Any) -> None:
    for name in ("use_delta", "use_target", "normalize_action"):
        _check_bool(obj, name)
    if obj.use_target and not obj.use_delta:
        raise InvalidArgumentError(
            f"{_arg(obj, 'use_target')}: only meaningful with use_delta=True (absolute actions are targets themselves)"
        )


# ----------------------------------------------------------------------
# configs
# ----------------------------------------------------------------------
@dataclass(frozen=True)
class JointPositionConfig:
    """Joint position targets for joints driven by **position** actuators (servos).

    Action ``(N, len(joints))``, one value per joint, in joint units (rad or m):

    * absolute (``use_delta=False``): the target position itself;
    * delta (``use_delta=True``): added to the current joint position, or to
      the previous target with ``use_target=True``.

    Targets are clipped to each actuator's ctrl range (divided by its gear), and
    the actuator's ctrl is ``gear * target``.

    Attributes:
        joints: hinge/slide joint names (or one name), each driven by exactly one
            position actuator.
        low, high: action bounds, a number or one per joint. Absolute: ``None``
            (default) means each actuator's ctrl range. Delta: required.
        use_delta: actions are changes of the target, not targets.
        use_target: deltas add to the previous target instead of the current
            position (delta only). The targets are re-anchored at the current
            positions by ``reset``.
        normalize_action: actions come in ``[-1, 1]`` and map linearly onto
            ``[low, high]`` (which must then be finite).
    """

    joints: Sequence[str]
    low: Bound = None
    high: Bound = None
    use_delta: bool = False
    use_target: bool = False
    normalize_action: bool = True

    def __post_init__(self) -> None:
        n = len(_check_names(self, "joints", "joint"))
        _check_delta_flags(self)
        _check_low_high(self, "low", "high", n, required=self.use_delta, why="when use_delta=True")


@dataclass(frozen=True)
class JointPDConfig:
    """A PD law on joints driven by **motor** actuators, evaluated at the physics rate.

    Every substep: ``torque = kp * (target - q) - kd * qdot``, limited by the DC
    motor's torque-speed curve when one is given (below), and
    ``ctrl = torque / (gear * gain)`` of each joint's motor, clipped to its
    ctrl range. The action sets the targets as :class:`JointPositionConfig`
    does (absolute or delta); targets are clipped to the joint range.

    **DC motor** (the model of Isaac Lab's ``DCMotor`` and mjlab's
    ``DcMotorActuator``): a motor's torque falls linearly with its speed. At
    joint speed ``v`` the torque is clipped to::

        [max(-E, S * (-1 - v / V)), min(E, S * (1 - v / V))]

    ``S`` is ``saturation_effort`` (the stall torque), ``V`` is
    ``velocity_limit`` (the no-load speed) and ``E`` the motor's own limit, its
    ctrl range times ``gear * gain``. At rest the motor gives ``min(E, S)``;
    driving the joint it gives less the faster the joint turns, and nothing at
    ``V``, so the motor alone cannot drive the joint beyond ``V`` (gravity or a
    contact can, and the motor then brakes). Braking against the motion it
    gives up to ``E``. Beyond the corner speed ``V * (1 + E / S)`` the curve
    lies outside ``[-E, E]`` and the torque is ``-E`` (``+E`` below
    ``-V * (1 + E / S)``), as Isaac Lab's clip of the speed to the corner
    speed gives. Computed by the controller from the state at each substep,
    so every engine applies the same torque.

    * ``velocity_limit`` without ``saturation_effort``: ``S = E`` (the motor
      needs a finite ctrl range).
    * ``saturation_effort`` without ``velocity_limit``: a torque limit
      ``min(E, S)`` at any speed.
    * ``inf`` in a per-joint sequence leaves that joint without the limit.

    Attributes:
        joints: hinge/slide joint names, each driven by exactly one motor.
        kp: stiffness, > 0 (N m/rad or N/m), a number or one per joint.
        kd: damping, >= 0 (N m s/rad or N s/m), a number or one per joint.
        low, high: action bounds (a number or one per joint). Absolute: ``None``
            means the joint range. Delta: required.
        use_delta, use_target, normalize_action: as in :class:`JointPositionConfig`.
        saturation_effort: the motor's stall torque ``S``, > 0 (N m or N), a
            number or one per joint; ``None`` (default): no stall torque.
        velocity_limit: the motor's no-load speed ``V``, > 0 (rad/s or m/s), a
            number or one per joint; ``None`` (default): no speed limit.
    """

    joints: Sequence[str]
    kp: float | Sequence[float]
    kd: float | Sequence[float]
    low: Bound = None
    high: Bound = None
    use_delta: bool = False
    use_target: bool = False
    normalize_action: bool = True
    saturation_effort: Bound = None
    velocity_limit: Bound = None

    def __post_init__(self) -> None:
        n = len(_check_names(self, "joints", "joint"))
        _check_values(self, "kp", n, allow_none=False, minimum=0.0, strict=True)
        _check_values(self, "kd", n, allow_none=False, minimum=0.0)
        for name in ("saturation_effort", "velocity_limit"):
            _check_values(self, name, n, allow_none=True, minimum=0.0, strict=True, allow_inf=True)
        _check_delta_flags(self)
        _check_low_high(self, "low", "high", n, required=self.use_delta, why="when use_delta=True")


@dataclass(frozen=True)
class EEPoseConfig:
    """End-effector (site) pose control by inverse kinematics onto position actuators.

    Action ``(N, 6)``: ``[x, y, z, rx, ry, rz]``, a translation (m) and a
    rotation vector (axis times angle, rad).

    Delta (``use_delta=True``, default): the target pose is the current site
    pose (or the previous target with ``use_target=True``) moved as ``frame``
    says (``"<translation>:<rotation>"``, one of :data:`EE_FRAMES`):

    * ``root_translation``: the translation is along the root body's axes;
      ``body_translation``: along the site's own axes.
    * ``root_aligned_rotation``: the rotation vector is in the root body's axes
      and the site turns about its own origin:
      ``R_target = (R_root R(r) R_root^T) R_site``;
      ``body_aligned_rotation``: in the site's axes: ``R_target = R_site R(r)``.

    Absolute (``use_delta=False``): the action is the target pose in the root
    body's frame (position, and orientation as a rotation vector); ``frame`` is
    not used.

    Attributes:
        joints: hinge/slide joints that move the site, each driven by exactly
            one position actuator.
        site: the controlled site.
        pos_low, pos_high: bounds of the translation part (m), a number or one
            per axis.
        rot_bound: bound of each rotation-vector component, > 0 (rad): the
            rotation part lies in ``[-rot_bound, rot_bound]``.
        frame: see above.
        use_delta, use_target, normalize_action: as in :class:`JointPositionConfig`.
        damping: lambda of the damped least squares, > 0 (m or rad).
        root_body: the body whose frame is the root frame. ``None``: the parent
            of the body that carries the controlled joint nearest the model's
            root (the arm's base).
        ik_iterations: damped-least-squares iterations per action, 1 to 100; 1 is
            the plain one-step solve (see :class:`~simbackend.controllers.EEPoseController`).
    """

    joints: Sequence[str]
    site: str
    pos_low: float | Sequence[float]
    pos_high: float | Sequence[float]
    rot_bound: float
    frame: str = "root_translation:root_aligned_rotation"
    use_delta: bool = True
    use_target: bool = False
    damping: float = 0.05
    normalize_action: bool = True
    root_body: str | None = None
    ik_iterations: int = 4

    def __post_init__(self) -> None:
        _check_names(self, "joints", "joint")
        if not isinstance(self.site, str):
            raise ArgumentTypeError(f"{_arg(self, 'site')}: expected a site name, got {type(self.site).__name__}")
        _check_low_high(self, "pos_low", "pos_high", 3, required=True, why="", what="axis")
        if not _real(self.rot_bound):
            raise ArgumentTypeError(
                f"{_arg(self, 'rot_bound')}: expected a number (rad), got {type(self.rot_bound).__name__}"
            )
        if not (math.isfinite(self.rot_bound) and self.rot_bound > 0):
            raise InvalidArgumentError(f"{_arg(self, 'rot_bound')}: expected a finite number > 0, got {self.rot_bound}")
        _set(self, "rot_bound", float(self.rot_bound))
        if not isinstance(self.frame, str):
            raise ArgumentTypeError(f"{_arg(self, 'frame')}: expected a string, got {type(self.frame).__name__}")
        if self.frame not in EE_FRAMES:
            raise InvalidArgumentError(f"{_arg(self, 'frame')}: expected one of {list(EE_FRAMES)}, got {self.frame!r}")
        _check_delta_flags(self)
        _set(self, "damping", checks.real(self.damping, _arg(self, "damping"), minimum=0.0, above=True))
        if self.root_body is not None and not isinstance(self.root_body, str):
            raise ArgumentTypeError(
                f"{_arg(self, 'root_body')}: expected a body name or None, got {type(self.root_body).__name__}"
            )
        _set(
            self,
            "ik_iterations",
            checks.integer(self.ik_iterations, _arg(self, "ik_iterations"), minimum=1, maximum=100),
        )

    @property
    def translation_frame(self) -> str:
        """``"root"`` or ``"body"``."""
        return self.frame.split(":")[0].split("_")[0]

    @property
    def rotation_frame(self) -> str:
        """``"root"`` or ``"body"`` (aligned)."""
        return self.frame.split(":")[1].split("_")[0]


@dataclass(frozen=True)
class PassiveConfig:
    """Joints left to the physics: no action (``action_dim`` 0); their motors get ctrl 0.

    Attributes:
        joints: joint names; each may have motor actuators (held at 0) or none.
            A joint with a position, velocity or other actuator cannot be
            passive (a servo at ctrl 0 is not passive).
    """

    joints: Sequence[str]

    def __post_init__(self) -> None:
        _check_names(self, "joints", "joint")
