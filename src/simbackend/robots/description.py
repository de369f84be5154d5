"""A robot description: what a locomotion task needs to know about a robot model, as data.

A description names things; it holds no engine state. Its fields are checked
when it is made (types, signs, finiteness), and against the model when a task
resolves it on a backend (:func:`simbackend.robots.resolve`): every name the
model lacks, a default pose outside a joint's range, a base that does not
float, fails there in one line naming the field.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from simbackend.errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["ACTUATIONS", "RobotDescription", "Gains"]

#: how a description's joints are driven
ACTUATIONS = ("servo", "pd")

#: a gain or limit: one number for every joint, or ``{joint name or glob pattern: number}``
Gains = float | Mapping[str, float] | None


@dataclass(frozen=True)
class RobotDescription:
    """A legged robot, by name: the model and how a task drives and reads it.

    Attributes:
        name: registry name (lower case letters, digits, ``_``, ``-``).
        model: the model source: a built-in model name, or a path to an MJCF or URDF file
            (a relative path is relative to ``base_dir``, else to the working directory).
        joints: the actuated joints the policy drives, in the policy's order.
        default_pose: each driven joint's default angle: a keyframe name of the model, or
            ``{joint name or glob pattern: angle}`` (a joint no pattern matches defaults to 0,
            or to the keyframe ``base_keyframe``'s value when given).
        base_body: the floating base body (on a free joint; see ``add_free_joint``).
        feet: the bodies, or geoms (their bodies are used), that touch the ground when walking.
        actuation: ``"servo"``: position actuators (the model's own, or added on every driven
            joint when it has none), with ``kp``/``kd``/``effort_limit`` replacing the model's
            values where given; ``"pd"``: a PD law at the physics rate on motors (the model's
            own, or added), ``kp`` and ``kd`` required (:class:`~simbackend.controllers.JointPDConfig`).
        kp, kd: stiffness (N m/rad) and damping (N m s/rad), > 0 and >= 0.
        effort_limit: the most torque each joint's actuator gives (N m), > 0; ``None``: the model's.
        held_joints: actuated joints the policy does not drive: held at their default pose by
            the same actuation (a humanoid's arms, say).
        termination_bodies: bodies whose contact with anything ends an episode (base, thighs);
            default: the base body.
        imu_site: a site on the base whose frame the base observations are taken in
            (``None``: the base body's frame).
        add_floor: add a floor plane (the robot file is the robot alone); ``False`` for a model
            that has its own ground.
        add_free_joint: give ``base_body`` a free joint (a URDF's root link has none).
        timestep: the physics substep of the scene (s).
        base_keyframe: a keyframe supplying the default angles ``default_pose`` does not name.
        model_options: construction options for the model (``package_dirs``, ``fuse_static``).
        engine_options: engine blocks the robot needs (``{"mjwarp": {"njmax": 512}}``).
        base_dir: the folder relative ``model`` paths are read from (set by the registry for
            descriptions that come from a file).
    """

    name: str
    model: str | os.PathLike
    joints: Sequence[str]
    default_pose: str | Mapping[str, float]
    base_body: str
    feet: Sequence[str]
    actuation: str = "servo"
    kp: Gains = None
    kd: Gains = None
    effort_limit: Gains = None
    held_joints: Sequence[str] = ()
    termination_bodies: Sequence[str] | None = None
    imu_site: str | None = None
    add_floor: bool = True
    add_free_joint: bool = False
    timestep: float = 0.005
    base_keyframe: str | None = None
    model_options: Mapping[str, Any] = field(default_factory=dict)
    engine_options: Mapping[str, Any] = field(default_factory=dict)
    base_dir: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or not all(c.isalnum() or c in "_-" for c in self.name):
            raise InvalidArgumentError(f"robot.name: expected letters, digits, '_' or '-', got {self.name!r}")
        if not isinstance(self.model, (str, os.PathLike)) or not os.fspath(self.model):
            raise ArgumentTypeError(f"robot.model: expected a built-in model name or a file path, got {self.model!r}")
        _set(self, "joints", _names(self.joints, "joints", "joint"))
        _set(self, "held_joints", _names(self.held_joints, "held_joints", "joint", allow_empty=True))
        both = sorted(set(self.joints) & set(self.held_joints))
        if both:
            raise InvalidArgumentError(f"robot.held_joints: joints the policy drives cannot be held too: {both}")
        _set(self, "feet", _names(self.feet, "feet", "foot body or geom"))
        for name in ("base_body",):
            _name(getattr(self, name), f"robot.{name}")
        if self.termination_bodies is None:
            _set(self, "termination_bodies", (self.base_body,))
        else:
            _set(self, "termination_bodies", _names(self.termination_bodies, "termination_bodies", "body", True))
        for name in ("imu_site", "base_keyframe"):
            if getattr(self, name) is not None:
                _name(getattr(self, name), f"robot.{name}")
        if isinstance(self.default_pose, str):
            _name(self.default_pose, "robot.default_pose")
        elif isinstance(self.default_pose, Mapping):
            pose = {}
            for k, v in self.default_pose.items():
                _name(k, "robot.default_pose")
                pose[k] = _number(v, f"robot.default_pose[{k!r}]")
            _set(self, "default_pose", pose)
        else:
            raise ArgumentTypeError(
                "robot.default_pose: expected a keyframe name or {joint: angle},"
                f" got {type(self.default_pose).__name__}"
            )
        if self.actuation not in ACTUATIONS:
            raise InvalidArgumentError(f"robot.actuation: expected one of {list(ACTUATIONS)}, got {self.actuation!r}")
        _set(self, "kp", _gains(self.kp, "kp", strict=True))
        _set(self, "kd", _gains(self.kd, "kd", strict=False))
        _set(self, "effort_limit", _gains(self.effort_limit, "effort_limit", strict=True))
        if self.actuation == "pd" and (self.kp is None or self.kd is None):
            raise InvalidArgumentError("robot.kp, robot.kd: required with actuation='pd'")
        for name in ("add_floor", "add_free_joint"):
            if not isinstance(getattr(self, name), bool):
                raise ArgumentTypeError(f"robot.{name}: expected True or False, got {getattr(self, name)!r}")
        ts = _number(self.timestep, "robot.timestep")
        if ts <= 0:
            raise InvalidArgumentError(f"robot.timestep: expected a number > 0, got {ts:g}")
        _set(self, "timestep", ts)
        for name in ("model_options", "engine_options"):
            if not isinstance(getattr(self, name), Mapping):
                raise ArgumentTypeError(f"robot.{name}: expected a mapping, got {type(getattr(self, name)).__name__}")
            _set(self, name, dict(getattr(self, name)))
        unknown = sorted(set(self.model_options) - {"package_dirs", "fuse_static"})
        if unknown:
            raise InvalidArgumentError(f"robot.model_options: unknown keys {unknown}; known: package_dirs, fuse_static")

    @property
    def driven_joints(self) -> tuple[str, ...]:
        """The policy's joints, then the held ones: every joint the actuation drives."""
        return tuple(self.joints) + tuple(self.held_joints)

    def model_path(self) -> str:
        """``model`` as a source for the model compiler: a built-in name, or an absolute path."""
        text = os.fspath(self.model)
        from simbackend.models import builtin_models

        if text in builtin_models():
            return text
        if not os.path.isabs(text) and self.base_dir is not None:
            text = os.path.join(self.base_dir, text)
        return os.path.abspath(os.path.expanduser(text))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (a registry file holds this)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            out[f.name] = list(v) if isinstance(v, tuple) else (os.fspath(v) if isinstance(v, os.PathLike) else v)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], base_dir: str | None = None) -> RobotDescription:
        """A description from :meth:`to_dict`'s output (or a config file's mapping); unknown keys raise."""
        if not isinstance(d, Mapping):
            raise ArgumentTypeError(f"robot: expected a mapping, got {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise InvalidArgumentError(f"robot: unknown keys {unknown}; known: {sorted(known)}")
        kw = dict(d)
        if base_dir is not None and kw.get("base_dir") is None:
            kw["base_dir"] = base_dir
        try:
            return cls(**kw)
        except TypeError as e:  # a required field missing
            raise InvalidArgumentError(f"robot: {e}") from None


def _set(obj: Any, name: str, value: Any) -> None:
    object.__setattr__(obj, name, value)


def _name(v: Any, where: str) -> str:
    if not isinstance(v, str) or not v:
        raise ArgumentTypeError(f"{where}: expected a non-empty name, got {v!r}")
    return v


def _names(v: Any, field_name: str, what: str, allow_empty: bool = False) -> tuple[str, ...]:
    where = f"robot.{field_name}"
    if isinstance(v, str):
        v = (v,)
    if not isinstance(v, Sequence) or isinstance(v, (bytes, bytearray)):
        raise ArgumentTypeError(f"{where}: expected a sequence of {what} names, got {type(v).__name__}")
    out = tuple(_name(x, where) for x in v)
    if not out and not allow_empty:
        raise InvalidArgumentError(f"{where}: expected at least one {what} name")
    dup = sorted({x for x in out if out.count(x) > 1})
    if dup:
        raise InvalidArgumentError(f"{where}: names must be distinct, repeated: {dup}")
    return out


def _number(v: Any, where: str) -> float:
    if not isinstance(v, numbers.Real) or isinstance(v, bool):
        raise ArgumentTypeError(f"{where}: expected a number, got {type(v).__name__} {v!r}")
    x = float(v)
    if not math.isfinite(x):
        raise InvalidArgumentError(f"{where}: expected a finite number, got {x}")
    return x


def _gains(v: Any, name: str, *, strict: bool) -> Any:
    """A number or ``{pattern: number}``, finite, > 0 (``strict``) or >= 0, or ``None``."""
    if v is None:
        return None
    where = f"robot.{name}"
    items = dict(v) if isinstance(v, Mapping) else {"*": v}
    out = {}
    for k, x in items.items():
        _name(k, where)
        val = _number(x, f"{where}[{k!r}]" if isinstance(v, Mapping) else where)
        if val < 0 or (strict and val == 0):
            raise InvalidArgumentError(f"{where}: expected values {'>' if strict else '>='} 0, got {val:g}")
        out[k] = val
    return out if isinstance(v, Mapping) else out["*"]
