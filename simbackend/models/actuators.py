"""Actuators added to a model that has none (a URDF robot), so that ``step`` can drive it.

The ``actuators`` construction option takes a sequence of specs, each an
:class:`ActuatorSpec` or a plain dict with the same keys (so a JSON config or
the command line can carry it)::

    make_backend("mujoco", "robot.urdf", 64, actuators=[
        {"joints": ".*", "kind": "position", "kp": 200.0, "kv": 20.0},        # every hinge/slide joint
        ActuatorSpec(joints=["gripper_left"], kind="motor", gear=1.0, force_range=(-20, 20)),
    ])

Each spec matches joints (a regular expression, ``re.fullmatch`` against joint
names, or an explicit list of names) and adds one MuJoCo actuator per joint,
in joint order, named by ``name`` (a format string with ``{joint}``; default
the joint's name). Kinds: ``position`` (servo with stiffness ``kp`` > 0 and
damping ``kv`` >= 0; ctrl is the target position, its range the joint's
range when the joint is limited), ``velocity`` (``kv`` > 0; ctrl is the
target velocity), ``motor`` (ctrl times ``gear`` is the force). A spec never
matches free or ball joints; naming one, matching no joint, or matching a
joint another spec took is an error naming the spec and its field.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields
from typing import Any, Mapping, Optional, Sequence, Union

from simbackend.errors import ModelLoadError

KINDS = ("position", "velocity", "motor")


@dataclass(frozen=True)
class ActuatorSpec:
    """Actuators of one kind for the joints ``joints`` selects (see the module docstring).

    Attributes:
        joints: a regular expression (``re.fullmatch`` on joint names) or a list
            of joint names; default every hinge and slide joint.
        kind: ``"position"``, ``"velocity"`` or ``"motor"``.
        kp: position gain (position servos), N m/rad or N/m.
        kv: damping (position servos, >= 0) or velocity gain (velocity servos, > 0).
        gear: transmission gear (motors: force = gear * ctrl).
        ctrl_range: ``(low, high)``; ``None``: the joint's range for position
            servos on limited joints, unlimited otherwise.
        force_range: ``(low, high)`` actuator force limit, or ``None``.
        name: actuator name, a format string with ``{joint}``.
    """

    joints: Union[str, Sequence[str]] = ".*"
    kind: str = "position"
    kp: float = 0.0
    kv: float = 0.0
    gear: float = 1.0
    ctrl_range: Optional[tuple[float, float]] = None
    force_range: Optional[tuple[float, float]] = None
    name: str = "{joint}"


def actuator_specs(value: Any) -> tuple[ActuatorSpec, ...]:
    """Validate the ``actuators`` option into :class:`ActuatorSpec` s (dicts are converted)."""
    if value is None:
        return ()
    if isinstance(value, (ActuatorSpec, Mapping)):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise ModelLoadError(f"actuators: expected a list of actuator specs (dicts or ActuatorSpec), got"
                             f" {type(value).__name__}")
    known = {f.name for f in fields(ActuatorSpec)}
    specs = []
    for i, item in enumerate(value):
        where = f"actuators[{i}]"
        if isinstance(item, Mapping):
            unknown = sorted(set(item) - known)
            if unknown:
                raise ModelLoadError(f"{where}: unknown field(s) {unknown}; fields: {sorted(known)}")
            item = ActuatorSpec(**{k: (tuple(v) if k.endswith("_range") and v is not None else v) for k, v in item.items()})
        elif not isinstance(item, ActuatorSpec):
            raise ModelLoadError(f"{where}: expected a dict or an ActuatorSpec, got {type(item).__name__}")
        specs.append(_checked(item, where))
    return tuple(specs)


def _number(value: Any, where: str, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ModelLoadError(f"{where}.{field}: expected a finite number, got {value!r}")
    return float(value)


def _range(value: Any, where: str, field: str) -> Optional[tuple[float, float]]:
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ModelLoadError(f"{where}.{field}: expected (low, high), got {value!r}")
    lo, hi = (_number(v, where, field) for v in value)
    if not lo < hi:
        raise ModelLoadError(f"{where}.{field}: low must be below high, got {value!r}")
    return lo, hi


def _checked(spec: ActuatorSpec, where: str) -> ActuatorSpec:
    if spec.kind not in KINDS:
        raise ModelLoadError(f"{where}.kind: expected one of {list(KINDS)}, got {spec.kind!r}")
    kp, kv, gear = (_number(getattr(spec, f), where, f) for f in ("kp", "kv", "gear"))
    if spec.kind == "position" and kp <= 0:
        raise ModelLoadError(f"{where}.kp: a position servo needs kp > 0, got {kp}")
    if spec.kind == "position" and kv < 0:
        raise ModelLoadError(f"{where}.kv: damping must be >= 0, got {kv}")
    if spec.kind == "velocity" and kv <= 0:
        raise ModelLoadError(f"{where}.kv: a velocity servo needs kv > 0, got {kv}")
    if gear == 0:
        raise ModelLoadError(f"{where}.gear: must not be 0")
    if isinstance(spec.joints, str):
        try:
            re.compile(spec.joints)
        except re.error as e:
            raise ModelLoadError(f"{where}.joints: not a regular expression ({e})") from e
    elif not isinstance(spec.joints, (list, tuple)) or not all(isinstance(j, str) for j in spec.joints):
        raise ModelLoadError(f"{where}.joints: expected a regular expression or a list of joint names")
    if not isinstance(spec.name, str) or "{joint}" not in spec.name and spec.name.count("{") != 0:
        raise ModelLoadError(f"{where}.name: expected a format string using {{joint}}, got {spec.name!r}")
    return ActuatorSpec(spec.joints, spec.kind, kp, kv, gear, _range(spec.ctrl_range, where, "ctrl_range"),
                        _range(spec.force_range, where, "force_range"), spec.name)


def add_actuators(spec: "mujoco.MjSpec", specs: Sequence[ActuatorSpec]) -> None:  # noqa: F821
    """Add the actuators ``specs`` describe to ``spec`` (a ``mujoco.MjSpec``, edited in place)."""
    import mujoco

    from simbackend.errors import closest_names_hint

    scalar = (mujoco.mjtJoint.mjJNT_HINGE, mujoco.mjtJoint.mjJNT_SLIDE)
    joints = [j for j in spec.joints]
    # joint limits as compiled (radians, autolimits resolved): a spec holds what the file wrote
    compiled = spec.copy().compile() if any(s.kind == "position" and s.ctrl_range is None for s in specs) else None
    limits = {} if compiled is None else {
        mujoco.mj_id2name(compiled, mujoco.mjtObj.mjOBJ_JOINT, k): tuple(float(x) for x in compiled.jnt_range[k])
        for k in range(compiled.njnt) if compiled.jnt_limited[k]}
    names = [j.name for j in joints]
    taken: dict[str, int] = {}
    existing = {a.name for a in spec.actuators if a.name}
    for i, s in enumerate(specs):
        where = f"actuators[{i}]"
        if isinstance(s.joints, str):
            chosen = [j for j in joints if j.name and re.fullmatch(s.joints, j.name) and j.type in scalar]
            if not chosen:
                raise ModelLoadError(f"{where}.joints: {s.joints!r} matches no hinge or slide joint"
                                     f"{closest_names_hint(s.joints, names)}")
        else:
            chosen = []
            for name in s.joints:
                if name not in names:
                    raise ModelLoadError(f"{where}.joints: unknown joint {name!r}{closest_names_hint(name, names)}")
                j = joints[names.index(name)]
                if j.type not in scalar:
                    raise ModelLoadError(f"{where}.joints: joint {name!r} is not a hinge or slide joint;"
                                         " actuators drive one scalar coordinate")
                chosen.append(j)
        for j in chosen:
            if j.name in taken:
                raise ModelLoadError(f"{where}.joints: joint {j.name!r} already has an actuator from"
                                     f" actuators[{taken[j.name]}]")
            taken[j.name] = i
            act_name = s.name.format(joint=j.name)
            if act_name in existing:
                raise ModelLoadError(f"{where}.name: an actuator named {act_name!r} exists already")
            existing.add(act_name)
            act = spec.add_actuator(name=act_name, target=j.name, trntype=mujoco.mjtTrn.mjTRN_JOINT)
            if s.kind == "position":
                act.set_to_position(kp=s.kp, kv=s.kv)
                ctrl = s.ctrl_range if s.ctrl_range is not None else limits.get(j.name)
            elif s.kind == "velocity":
                act.set_to_velocity(kv=s.kv)
                ctrl = s.ctrl_range
            else:
                act.set_to_motor()
                ctrl = s.ctrl_range
            act.gear[0] = s.gear
            if ctrl is not None:
                act.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
                act.ctrlrange = list(ctrl)
            if s.force_range is not None:
                act.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
                act.forcerange = list(s.force_range)
