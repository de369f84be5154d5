"""Actuators added to a model before it is compiled, so that ``step`` can drive a robot that has none (a URDF).

The ``actuators`` option takes a sequence of specs, each an
:class:`ActuatorSpec` or a plain dict with the same keys (so a JSON config or
the command line can carry it)::

    make_backend("mujoco", "robot.urdf", 64, actuators=[
        {"joints": "arm_.*", "kind": "position", "kp": 200.0, "kv": 20.0},
        ActuatorSpec(joints=["finger"], kind="motor", force_range=(-20.0, 20.0)),
    ])

Each spec selects hinge and slide joints and adds one MuJoCo actuator per
joint, in the model's joint order (specs in the order given), each driving
its joint through a joint transmission with ratio ``gear``:

=============  ==========================================  ======================================
``kind``       force on the actuator                       ``ctrl`` means
=============  ==========================================  ======================================
``position``   ``kp * (ctrl - gear*q) - kv * gear*qdot``   target position ``gear*q`` (rad or m)
``velocity``   ``kv * (ctrl - gear*qdot)``                 target velocity ``gear*qdot``
``motor``      ``ctrl``                                    force (N) or torque (N m)
=============  ==========================================  ======================================

The joint receives ``gear`` times that force, clamped first to
``force_range`` when one is given. ``ctrl`` is clamped to ``ctrl_range``;
for a position servo on a limited joint it defaults to the joint's range
(times ``gear``), otherwise ``ctrl`` is unlimited.

``joints`` is a regular expression matched with ``re.fullmatch`` against
joint names (free and ball joints never match: an actuator drives one scalar
coordinate), or a list of joint names (naming a free or ball joint is an
error). ``name`` formats each actuator's name from ``{joint}``.

Errors name the spec and its field (``actuators[1].kp: ...``):
:class:`ArgumentTypeError` for a value of the wrong type or an unknown field,
:class:`InvalidArgumentError` for a bad value or one the model cannot take (a
pattern matching no joint, an unknown joint, a joint two specs select, an
actuator name the model has already).
"""

from __future__ import annotations

import math
import numbers
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from simbackend.errors import ArgumentTypeError, InvalidArgumentError, closest_names_hint

if TYPE_CHECKING:
    import mujoco

KINDS = ("position", "velocity", "motor")


@dataclass(frozen=True)
class ActuatorSpec:
    """Actuators of one kind for the joints ``joints`` selects (see :mod:`simbackend.models.actuators`).

    Attributes:
        joints: a regular expression (``re.fullmatch`` on joint names) or a list
            of joint names; default every hinge and slide joint.
        kind: ``"position"``, ``"velocity"`` or ``"motor"``.
        kp: stiffness of a position servo, > 0 (N m/rad or N/m); position only.
        kv: damping of a position servo (>= 0, default 0) or gain of a
            velocity servo (> 0); not for motors.
        gear: transmission ratio, nonzero (default 1).
        ctrl_range: ``(low, high)`` control limits; ``None``: the joint's range
            times ``gear`` for a position servo on a limited joint, else unlimited.
        force_range: ``(low, high)`` limits of the actuator force, or ``None``.
        name: actuator name, a format string with ``{joint}`` (default the joint's name).
    """

    joints: str | Sequence[str] = ".*"
    kind: str = "position"
    kp: float | None = None
    kv: float | None = None
    gear: float = 1.0
    ctrl_range: tuple[float, float] | None = None
    force_range: tuple[float, float] | None = None
    name: str = "{joint}"


def actuator_specs(value: Any) -> tuple[ActuatorSpec, ...]:
    """Validate the ``actuators`` option (``None``, a spec, or a list/tuple of specs; dicts converted).

    Checks every field that does not depend on the model; :func:`add_actuators`
    checks the rest.
    """
    if value is None:
        return ()
    if isinstance(value, (ActuatorSpec, Mapping)):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise ArgumentTypeError(
            f"actuators: expected a list of actuator specs (dicts or ActuatorSpec), got {type(value).__name__}"
        )
    known = [f.name for f in fields(ActuatorSpec)]
    specs = []
    for i, item in enumerate(value):
        where = f"actuators[{i}]"
        if isinstance(item, Mapping):
            unknown = sorted(str(k) for k in item if k not in known)
            if unknown:
                raise ArgumentTypeError(f"{where}: unknown field(s) {unknown}; fields: {known}")
            item = ActuatorSpec(**item)
        elif not isinstance(item, ActuatorSpec):
            raise ArgumentTypeError(f"{where}: expected a dict or an ActuatorSpec, got {type(item).__name__}")
        specs.append(_checked(item, where))
    return tuple(specs)


def add_actuators(spec: mujoco.MjSpec, specs: Sequence[ActuatorSpec]) -> None:
    """Add the actuators ``specs`` (validated by :func:`actuator_specs`) to ``spec``, edited in place.

    Raises:
        InvalidArgumentError: a spec the model cannot take, naming the spec,
            its field and the joint or name.
    """
    import mujoco

    scalar = (mujoco.mjtJoint.mjJNT_HINGE, mujoco.mjtJoint.mjJNT_SLIDE)
    joints = {j.name: j for j in spec.joints if j.name}
    taken: dict[str, int] = {}
    existing = {a.name for a in spec.actuators if a.name}
    for i, s in enumerate(specs):
        where = f"actuators[{i}]"
        if isinstance(s.joints, str):
            chosen = [j for name, j in joints.items() if j.type in scalar and re.fullmatch(s.joints, name)]
            if not chosen:
                raise InvalidArgumentError(
                    f"{where}.joints: {s.joints!r} matches no hinge or slide joint"
                    f"{closest_names_hint(s.joints, list(joints))}"
                )
        else:
            chosen = []
            for name in s.joints:
                if name not in joints:
                    raise InvalidArgumentError(
                        f"{where}.joints: unknown joint {name!r}{closest_names_hint(name, list(joints))}"
                    )
                if joints[name].type not in scalar:
                    raise InvalidArgumentError(
                        f"{where}.joints: joint {name!r} is a {_joint_kind(joints[name])}"
                        " joint; an actuator drives one hinge or slide joint"
                    )
                chosen.append(joints[name])
        for j in chosen:
            if j.name in taken:
                other = "twice" if taken[j.name] == i else f"by actuators[{taken[j.name]}] too"
                raise InvalidArgumentError(f"{where}.joints: joint {j.name!r} is selected {other}")
            taken[j.name] = i
            act_name = s.name.format(joint=j.name)
            if act_name in existing:
                raise InvalidArgumentError(
                    f"{where}.name: the model has an actuator named {act_name!r} already"
                    + (" (use {joint} in name to name one per joint)" if "{joint}" not in s.name else "")
                )
            existing.add(act_name)
            _add(spec, act_name, j, s)


def _add(spec: mujoco.MjSpec, name: str, joint: Any, s: ActuatorSpec) -> None:
    """Add one actuator named ``name`` of spec ``s`` on ``joint`` (a ``mujoco.MjsJoint``)."""
    import mujoco

    act = spec.add_actuator(name=name, target=joint.name, trntype=mujoco.mjtTrn.mjTRN_JOINT)
    ctrl = s.ctrl_range
    if s.kind == "position":
        act.set_to_position(kp=s.kp, kv=s.kv or 0.0)
        limits = _joint_limits(joint)
        if ctrl is None and limits is not None:
            ctrl = tuple(sorted((s.gear * limits[0], s.gear * limits[1])))
    elif s.kind == "velocity":
        act.set_to_velocity(kv=s.kv)
    else:
        act.set_to_motor()
    act.gear[0] = s.gear
    if ctrl is not None:
        act.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
        act.ctrlrange = list(ctrl)
    if s.force_range is not None:
        act.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
        act.forcerange = list(s.force_range)


def _joint_limits(joint: Any) -> tuple[float, float] | None:
    """The range of a hinge/slide ``mujoco.MjsJoint`` as the compiler will read it (radians, metres), or None.

    MuJoCo's rules: ``limited="true"``, or ``"auto"`` with ``autolimits`` and a
    range given (not ``0 0``); hinge ranges are in degrees when the element's
    compiler says ``angle="degree"``.
    """
    import mujoco

    lo, hi = (float(x) for x in joint.range)
    limited = joint.limited == mujoco.mjtLimited.mjLIMITED_TRUE or (
        joint.limited == mujoco.mjtLimited.mjLIMITED_AUTO and joint.compiler.autolimits and (lo, hi) != (0.0, 0.0)
    )
    if not limited:
        return None
    if joint.type == mujoco.mjtJoint.mjJNT_HINGE and joint.compiler.degree:
        lo, hi = math.radians(lo), math.radians(hi)
    return lo, hi


def _joint_kind(joint: Any) -> str:
    """``"free"``, ``"ball"``, ... for a ``mujoco.MjsJoint``."""
    return joint.type.name[len("mjJNT_") :].lower()


# ----------------------------------------------------------------------------
# field checks (model-independent)
# ----------------------------------------------------------------------------


def _checked(spec: ActuatorSpec, where: str) -> ActuatorSpec:
    """``spec`` with numbers as floats and ranges as tuples; raises naming ``where.<field>``."""
    if not isinstance(spec.kind, str) or spec.kind not in KINDS:
        raise InvalidArgumentError(f"{where}.kind: expected one of {list(KINDS)}, got {spec.kind!r}")
    kp = _number(spec.kp, where, "kp", optional=True)
    kv = _number(spec.kv, where, "kv", optional=True)
    gear = _number(spec.gear, where, "gear")
    if spec.kind == "position":
        if kp is None or kp <= 0:
            got = "none given" if kp is None else f"got {kp}"
            raise InvalidArgumentError(f"{where}.kp: a position servo needs a stiffness kp > 0, {got}")
        if kv is not None and kv < 0:
            raise InvalidArgumentError(f"{where}.kv: the damping of a position servo must be >= 0, got {kv}")
    elif kp is not None:
        raise InvalidArgumentError(f"{where}.kp: only position servos have a stiffness; remove it from a {spec.kind}")
    if spec.kind == "velocity" and (kv is None or kv <= 0):
        got = "none given" if kv is None else f"got {kv}"
        raise InvalidArgumentError(f"{where}.kv: a velocity servo needs a gain kv > 0, {got}")
    if spec.kind == "motor" and kv is not None:
        raise InvalidArgumentError(f"{where}.kv: a motor has no gain; remove kv, or use kind 'velocity'/'position'")
    if gear == 0:
        raise InvalidArgumentError(f"{where}.gear: must not be 0")
    if isinstance(spec.joints, str):
        try:
            re.compile(spec.joints)
        except re.error as e:
            raise InvalidArgumentError(f"{where}.joints: {spec.joints!r} is not a regular expression ({e})") from None
        joints: str | tuple[str, ...] = spec.joints
    elif isinstance(spec.joints, (list, tuple)) and all(isinstance(j, str) for j in spec.joints):
        if not spec.joints:
            raise InvalidArgumentError(f"{where}.joints: an empty list selects no joint")
        joints = tuple(spec.joints)
    else:
        raise ArgumentTypeError(
            f"{where}.joints: expected a regular expression or a list of joint names, got {spec.joints!r}"
        )
    _check_name(spec.name, where)
    return ActuatorSpec(
        joints,
        spec.kind,
        kp,
        kv,
        gear,
        _range(spec.ctrl_range, where, "ctrl_range"),
        _range(spec.force_range, where, "force_range"),
        spec.name,
    )


def _number(value: Any, where: str, field: str, optional: bool = False) -> float | None:
    """A finite real (ints, floats, numpy scalars) as float; ``None`` passes when ``optional``."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(f"{where}.{field}: expected a number, got {type(value).__name__} {value!r}")
    if not math.isfinite(value):
        raise InvalidArgumentError(f"{where}.{field}: expected a finite number, got {value!r}")
    return float(value)


def _range(value: Any, where: str, field: str) -> tuple[float, float] | None:
    """``None`` or ``(low, high)`` floats with ``low < high``."""
    if value is None:
        return None
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__len__") or len(value) != 2:
        raise ArgumentTypeError(f"{where}.{field}: expected (low, high), got {value!r}")
    lo, hi = (_number(v, where, field) for v in value)
    if not lo < hi:
        raise InvalidArgumentError(f"{where}.{field}: low must be below high, got {list(value)}")
    return lo, hi


def _check_name(name: Any, where: str) -> None:
    """``name`` is a string whose only format field is ``{joint}``."""
    if not isinstance(name, str) or not name:
        raise ArgumentTypeError(f"{where}.name: expected a non-empty string such as '{{joint}}_servo', got {name!r}")
    try:
        used = {f for _, f, _, _ in string.Formatter().parse(name) if f is not None}
    except ValueError as e:
        raise InvalidArgumentError(f"{where}.name: {name!r} is not a format string ({e})") from None
    if used - {"joint"}:
        raise InvalidArgumentError(
            f"{where}.name: {name!r} may only use the field {{joint}}, not {sorted(used - {'joint'})}"
        )
