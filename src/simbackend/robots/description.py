"""A robot description: what a locomotion task needs to know about a robot model, as data.

A description names things; it holds no engine state. Every field is checked
when the description is made, in the terms and dtype it is used in: names and
lists of names (a string is not a list), numbers (finite in float32, the dtype
gains, limits and poses are used in, within the range physics gives them),
glob patterns (each must match one of the robot's joints), the option blocks.
What needs the model is checked when the scene is composed
(:func:`simbackend.robots.robot_scene`) and when a task resolves it on a backend
(:func:`simbackend.robots.resolve`): every name the model lacks, a default pose
outside a joint's range, a base that does not float. Each failure is one line
naming the field (``robot.kp``, ``robot.engine_options.mjwarp``); a field of the
wrong type raises :class:`~simbackend.errors.ArgumentTypeError` (a number or
flag: :class:`~simbackend.errors.ScalarTypeError`, as :mod:`simbackend.checks`
raises), a bad value :class:`~simbackend.errors.InvalidArgumentError`.
"""

from __future__ import annotations

import difflib
import fnmatch
import math
import numbers
import os
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

import numpy as np

from simbackend import checks
from simbackend.errors import ArgumentTypeError, InvalidArgumentError, closest_names_hint

__all__ = ["ACTUATIONS", "MAX_TIMESTEP", "RobotDescription", "Gains", "pattern_values"]

#: how a description's joints are driven
ACTUATIONS = ("servo", "pd")

#: a gain or limit: one number for every joint, or ``{joint name or glob pattern: number}``
Gains = float | Mapping[str, float] | None

#: the longest physics substep (s) a description takes. A legged robot's feet touch down and lift off
#: within a few tens of milliseconds and its servos act within a few; a substep beyond 0.1 s steps over
#: whole footfalls and no engine's contact solver holds it (MuJoCo's default is 2 ms, legged_gym's and
#: Isaac Lab's 5 ms). It also keeps the velocity task's per-episode buffers (one command per resample
#: time) the size of an episode, not of the step.
MAX_TIMESTEP = 0.1
#: MuJoCo friction cones a description may ask for (``friction_cone``)
FRICTION_CONES = ("elliptic", "pyramidal")
#: ``impratio`` when a description gives none, per cone: an elliptic cone's frictional constraints ten times
#: as stiff as the normal ones (as MuJoCo Menagerie's and mjlab's legged scenes), a pyramidal cone's MuJoCo's own
DEFAULT_IMPRATIO = {"elliptic": 10.0, "pyramidal": 1.0}
#: the largest ``impratio`` taken (MuJoCo's solver stiffens friction by this ratio)
MAX_IMPRATIO = 1000.0
#: the stiffest soft contact MuJoCo integrates: a time constant of this many substeps (its ``refsafe`` flag
#: clamps a shorter one up to it); ``contact_timeconst``'s default
STIFF_CONTACT_STEPS = 2.0
#: the longest contact time constant taken (s): MuJoCo's default is 0.02
MAX_CONTACT_TIMECONST = 1.0
#: the largest finite float32: gains, limits and angles are used in float32 (torch tensors, PhysX)
_FLOAT32_MAX = float(np.finfo(np.float32).max)
#: the model options a description takes
_MODEL_OPTIONS = ("package_dirs", "fuse_static", "balance_inertia")


@dataclass(frozen=True)
class RobotDescription:
    """A legged robot, by name: the model and how a task drives and reads it.

    Attributes:
        name: registry name (letters, digits, ``_``, ``-``).
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
        saturation_effort, velocity_limit: a DC motor's stall torque (N m) and no-load speed (rad/s),
            > 0, for ``actuation="pd"`` only: the PD law's torque is clipped to the motor's torque-speed
            curve (:class:`~simbackend.controllers.JointPDConfig`), so no joint is driven faster than its
            velocity limit. A joint no pattern names has no such limit. With ``"servo"`` they are refused
            (the engines' position servos cannot saturate with speed).
        held_joints: actuated joints the policy does not drive: held at their default pose by
            the same actuation (a humanoid's arms, say).
        termination_bodies: bodies whose contact with anything ends an episode (base, thighs);
            default: the base body.
        imu_site: a site on the base whose frame the base observations are taken in
            (``None``: the base body's frame).
        add_floor: add a floor plane (the robot file is the robot alone); ``False`` for a model
            that has its own ground.
        add_free_joint: give ``base_body`` a free joint (a URDF's root link has none).
        self_collisions: whether the robot's bodies collide with each other (default ``False``, as legged_gym's
            robot configs, ``self_collisions = 1``, and Isaac Lab's, ``enabled_self_collisions=False``: a URDF's chassis mesh, taken as its convex hull, often swallows the
            upper legs). ``False`` turns off every contact between two of the robot's bodies in the composed
            scene (its ``contype``/``conaffinity`` bits, which every engine honours), keeping each body's
            contacts with everything else; ``True`` keeps the model's own filtering (parent and child never
            collide; the model's ``<exclude>`` pairs).
        collision_exclude: with ``self_collisions=True``, pairs of bodies ``[[body_a, body_b], ...]`` that never
            collide (MuJoCo ``<exclude>`` pairs in the scene, which every engine honours), as Isaac Lab's and
            mjlab's lists of excluded pairs: self-collisions on, but not where two links overlap by design.
        timestep: the physics substep of the scene (s).
        friction_cone: MuJoCo's friction cone in the scene, ``"elliptic"`` (default) or ``"pyramidal"``
            (MuJoCo's own default). impratio: MuJoCo's ratio of frictional to normal constraint impedance
            (default 10 with the elliptic cone, 1 with the pyramidal). With MuJoCo's defaults (pyramidal,
            1) a foot under a steady sideways load creeps where a rigid engine's Coulomb friction (PhysX's)
            holds it, and a policy trained on MuJoCo learns to use the creep (docs/sim-to-sim.md); the
            elliptic cone at 10 stands every robot where they do. PhysX reads neither (its contact friction
            is always Coulomb's cone), nor do plugin engines with their own friction; MuJoCo Warp reads both.
        contact_timeconst: the time constant (s) of MuJoCo's soft contacts in the scene (``solref``'s first
            number) for every collision geom of the robot and of the ground that keeps MuJoCo's default
            solref (0.02 s, damping ratio 1). Default ``None``: two substeps (``2 * timestep``), the stiffest
            contact MuJoCo integrates, as mjlab's velocity tasks set on the feet; at 0.02 s a 15 kg robot's
            feet sag and slide under its weight where PhysX's rigid contacts do not, and its
            policy learns from it (docs/sim-to-sim.md). ``"model"`` keeps the model's own solref; a number
            sets that time constant (at least two substeps). MuJoCo Warp reads it with the model, and
            a plugin engine's own MJCF loader may (docs/robots.md); PhysX's contacts are rigid and read none.
        base_keyframe: a keyframe supplying the default angles ``default_pose`` does not name.
        model_options: construction options for the model: ``package_dirs``; ``fuse_static`` (merge
            bodies welded to their parent, a URDF's fixed links, into it; default: kept);
            ``balance_inertia`` (MuJoCo's ``balanceinertia``: correct inertias that violate the
            triangle inequality; default: an error naming the body).
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
    saturation_effort: Gains = None
    velocity_limit: Gains = None
    held_joints: Sequence[str] = ()
    termination_bodies: Sequence[str] | None = None
    imu_site: str | None = None
    add_floor: bool = True
    add_free_joint: bool = False
    self_collisions: bool = False
    collision_exclude: Sequence[Sequence[str]] = ()
    timestep: float = 0.005
    friction_cone: str = "elliptic"
    impratio: float | None = None
    contact_timeconst: float | str | None = None
    base_keyframe: str | None = None
    model_options: Mapping[str, Any] = field(default_factory=dict)
    engine_options: Mapping[str, Any] = field(default_factory=dict)
    base_dir: str | None = None

    def __post_init__(self) -> None:
        _set(self, "name", _name(self.name, "robot.name"))
        if not all(c.isalnum() or c in "_-" for c in self.name):
            raise InvalidArgumentError(f"robot.name: expected letters, digits, '_' or '-', got {self.name!r}")
        _set(self, "model", _path(self.model, "robot.model", "a built-in model name or a file path"))
        if self.base_dir is not None:
            _set(self, "base_dir", _path(self.base_dir, "robot.base_dir", "a folder path or None"))
        _set(self, "joints", _names(self.joints, "joints", "joint"))
        _set(self, "held_joints", _names(self.held_joints, "held_joints", "joint", allow_empty=True))
        both = sorted(set(self.joints) & set(self.held_joints))
        if both:
            raise InvalidArgumentError(f"robot.held_joints: joints the policy drives cannot be held too: {both}")
        _set(self, "feet", _names(self.feet, "feet", "foot body or geom"))
        _name(self.base_body, "robot.base_body")
        if self.termination_bodies is None:
            _set(self, "termination_bodies", (self.base_body,))
        else:
            _set(self, "termination_bodies", _names(self.termination_bodies, "termination_bodies", "body", True))
        for name in ("imu_site", "base_keyframe"):
            if getattr(self, name) is not None:
                _name(getattr(self, name), f"robot.{name}", "a non-empty name or None")
        driven = self.driven_joints
        if isinstance(self.default_pose, str):
            _name(self.default_pose, "robot.default_pose")
        elif isinstance(self.default_pose, Mapping):
            pose = _values(self.default_pose, "default_pose", minimum=None)
            pattern_values(pose, driven, "robot.default_pose")  # every pattern matches a joint
            _set(self, "default_pose", pose)
        else:
            raise ArgumentTypeError(
                "robot.default_pose: expected a keyframe name or {joint or glob: angle},"
                f" got {type(self.default_pose).__name__}"
            )
        _set(self, "actuation", checks.choice(self.actuation, "robot.actuation", ACTUATIONS))
        for name, strict in (
            ("kp", True),
            ("kd", False),
            ("effort_limit", True),
            ("saturation_effort", True),
            ("velocity_limit", True),
        ):
            gains = _gains(getattr(self, name), name, strict=strict)
            pattern_values(gains, driven, f"robot.{name}")  # every pattern matches a joint
            _set(self, name, gains)
        if self.actuation == "servo":
            for name in ("saturation_effort", "velocity_limit"):
                if getattr(self, name) is not None:
                    raise InvalidArgumentError(
                        f'robot.{name}: a DC-motor limit is a PD law\'s: use actuation "pd" (motors); the'
                        ' engines\' position servos of actuation "servo" cannot saturate with speed'
                    )
        if self.actuation == "pd":
            if self.kp is None or self.kd is None:
                raise InvalidArgumentError("robot.kp, robot.kd: required with actuation='pd'")
            for name in ("kp", "kd"):
                covered = pattern_values(getattr(self, name), driven, f"robot.{name}")
                missing = [n for n in driven if n not in covered]
                if missing:
                    raise InvalidArgumentError(
                        f"robot.{name}: no value for joints {missing}; actuation='pd' needs a gain for every"
                        " driven joint"
                    )
        for name in ("add_floor", "add_free_joint", "self_collisions"):
            _set(self, name, checks.boolean(getattr(self, name), f"robot.{name}"))
        _set(self, "collision_exclude", _pairs(self.collision_exclude, "robot.collision_exclude"))
        if self.collision_exclude and not self.self_collisions:
            raise InvalidArgumentError(
                "robot.collision_exclude: only with self_collisions true (false already keeps every pair of the"
                " robot's bodies apart)"
            )
        _set(self, "timestep", _float32(self.timestep, "robot.timestep", minimum=0.0, maximum=MAX_TIMESTEP))
        if not isinstance(self.friction_cone, str):
            raise ArgumentTypeError(
                f"robot.friction_cone: expected 'elliptic' or 'pyramidal', got {type(self.friction_cone).__name__}"
            )
        if self.friction_cone not in FRICTION_CONES:
            raise InvalidArgumentError(
                f"robot.friction_cone: expected 'elliptic' or 'pyramidal', got {checks.short_repr(self.friction_cone, 40)}"
            )
        if self.impratio is None:
            _set(self, "impratio", DEFAULT_IMPRATIO[self.friction_cone])
        else:
            _set(self, "impratio", _float32(self.impratio, "robot.impratio", minimum=0.0, maximum=MAX_IMPRATIO))
        _set(self, "contact_timeconst", _contact_timeconst(self.contact_timeconst, self.timestep))
        _set(self, "model_options", _model_options(self.model_options))
        _set(self, "engine_options", _engine_options(self.engine_options))

    @property
    def driven_joints(self) -> tuple[str, ...]:
        """The policy's joints, then the held ones: every joint the actuation drives."""
        return tuple(self.joints) + tuple(self.held_joints)

    @property
    def scene_contact_timeconst(self) -> float | None:
        """The contact time constant (s) the composed scene writes (``None``: the model's own)."""
        if self.contact_timeconst == "model":
            return None
        if self.contact_timeconst is None:
            return STIFF_CONTACT_STEPS * float(self.timestep)
        return float(self.contact_timeconst)

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
        """A description from :meth:`to_dict`'s output (or a config file's mapping); unknown keys and
        missing required fields raise, naming them."""
        if not isinstance(d, Mapping):
            raise ArgumentTypeError(f"robot: expected a mapping of its fields, got {type(d).__name__}")
        known = [f.name for f in fields(cls)]
        unknown = sorted((k for k in d if k not in known), key=str)
        if unknown:
            close = [c for k in unknown for c in difflib.get_close_matches(str(k), known, n=1, cutoff=0.6)]
            hint = f"closest known: {', '.join(map(repr, close))}" if close else f"known: {', '.join(known)}"
            raise InvalidArgumentError(f"robot: unknown fields {unknown}; {hint}")
        required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
        missing = [k for k in required if k not in d]
        if missing:
            raise InvalidArgumentError(
                f"{', '.join('robot.' + k for k in missing)}: required, missing from the description"
            )
        kw = dict(d)
        if base_dir is not None and kw.get("base_dir") is None:
            kw["base_dir"] = base_dir
        return cls(**kw)


def pattern_values(values: Any, names: Sequence[str], where: str) -> dict[str, float]:
    """``{joint: value}`` for the ``names`` a gain or pose (a number, or ``{name or glob: value}``) covers, a
    later pattern overriding an earlier one; a pattern that matches none of ``names`` raises naming ``where``
    (a typo must not pass unnoticed)."""
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        return {n: float(values) for n in names}
    out: dict[str, float] = {}
    for pattern, v in values.items():
        hit = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
        if not hit:
            raise InvalidArgumentError(
                f"{where}: {pattern!r} matches none of the robot's joints{closest_names_hint(pattern, list(names))}"
            )
        for n in hit:
            out[n] = float(v)
    return out


def _set(obj: Any, name: str, value: Any) -> None:
    object.__setattr__(obj, name, value)


def _name(v: Any, where: str, what: str = "a non-empty name") -> str:
    if not isinstance(v, str):
        raise ArgumentTypeError(f"{where}: expected {what}, got {checks.short_repr(v)}")
    if not v:
        raise InvalidArgumentError(f"{where}: expected {what}, got ''")
    return v


def _path(v: Any, where: str, what: str) -> str:
    if not isinstance(v, (str, os.PathLike)):
        raise ArgumentTypeError(f"{where}: expected {what}, got {checks.short_repr(v)}")
    text = os.fspath(v)
    if not isinstance(text, str) or not text:
        raise InvalidArgumentError(f"{where}: expected {what}, got {text!r}")
    return text


def _names(v: Any, field_name: str, what: str, allow_empty: bool = False) -> tuple[str, ...]:
    """A list of distinct names; a string is refused (it is not a list of one name)."""
    where = f"robot.{field_name}"
    if isinstance(v, (str, bytes, bytearray)) or not isinstance(v, Sequence):
        raise ArgumentTypeError(
            f"{where}: expected a list of {what} names, got {type(v).__name__} {checks.short_repr(v)}"
        )
    out = tuple(_name(x, f"{where}[{i}]") for i, x in enumerate(v))
    if not out and not allow_empty:
        raise InvalidArgumentError(f"{where}: expected at least one {what} name")
    dup = sorted({x for x in out if out.count(x) > 1})
    if dup:
        raise InvalidArgumentError(f"{where}: names must be distinct, repeated: {dup}")
    return out


def _pairs(v: Any, where: str) -> tuple[tuple[str, str], ...]:
    """A list of ``[body_a, body_b]`` pairs of two distinct names, no pair twice (either order)."""
    if isinstance(v, (str, bytes, bytearray)) or not isinstance(v, Sequence):
        raise ArgumentTypeError(f"{where}: expected a list of [body, body] pairs, got {checks.short_repr(v)}")
    out: list[tuple[str, str]] = []
    for i, pair in enumerate(v):
        if isinstance(pair, (str, bytes, bytearray)) or not isinstance(pair, Sequence) or len(pair) != 2:
            raise ArgumentTypeError(f"{where}[{i}]: expected a pair [body, body], got {checks.short_repr(pair)}")
        a, b = (_name(x, f"{where}[{i}]") for x in pair)
        if a == b:
            raise InvalidArgumentError(f"{where}[{i}]: a body with itself ({a!r}); name two bodies")
        if (a, b) in out or (b, a) in out:
            raise InvalidArgumentError(f"{where}[{i}]: the pair {[a, b]} is given twice")
        out.append((a, b))
    return tuple(out)


def _float32(v: Any, where: str, *, minimum: float | None, strict: bool = True, maximum: float | None = None) -> float:
    """A finite number ``> minimum`` (``>=`` unless ``strict``), ``<= maximum``, that stays finite (and, above 0,
    non-zero) in float32, the dtype it is used in."""
    if isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_)) and abs(int(v)) > _FLOAT32_MAX:
        raise InvalidArgumentError(
            f"{where}: {checks.short_repr(v, 20)} is not finite in float32, the dtype it is used in"
        )
    x = checks.real(v, where, minimum=minimum, maximum=maximum, above=strict and minimum is not None)
    if abs(x) > _FLOAT32_MAX:
        raise InvalidArgumentError(f"{where}: {x:g} is not finite in float32, the dtype it is used in")
    if x != 0 and np.float32(x) == 0 and minimum is not None and strict:
        raise InvalidArgumentError(f"{where}: {x:g} is 0 in float32, the dtype it is used in; expected a number > 0")
    return x


def _values(v: Mapping, field_name: str, *, minimum: float | None, strict: bool = False) -> dict[str, float]:
    """``{name or glob: number}``, each number checked by :func:`_float32`."""
    where = f"robot.{field_name}"
    out = {}
    for k, x in v.items():
        _name(k, where, "joint names or glob patterns as keys")
        out[k] = _float32(x, f"{where}[{k!r}]", minimum=minimum, strict=strict)
    return out


def _gains(v: Any, name: str, *, strict: bool) -> Any:
    """A number or ``{pattern: number}``, finite in float32, > 0 (``strict``) or >= 0, or ``None``."""
    if v is None:
        return None
    if isinstance(v, Mapping):
        return _values(v, name, minimum=0.0, strict=strict)
    if isinstance(v, (Sequence, set, np.ndarray)) and not isinstance(v, (str, bytes)):
        raise ArgumentTypeError(f"robot.{name}: expected a number or {{joint or glob: number}}, got {type(v).__name__}")
    return _float32(v, f"robot.{name}", minimum=0.0, strict=strict)


def _contact_timeconst(v: Any, timestep: float) -> float | str | None:
    """``contact_timeconst`` checked: ``None``, ``"model"`` or a time constant of at least two substeps."""
    where = "robot.contact_timeconst"
    if v is None or v == "model":
        return v
    if isinstance(v, str):
        raise InvalidArgumentError(
            f"{where}: expected a time constant in seconds, 'model' or null, got {checks.short_repr(v, 40)}"
        )
    value = _float32(v, where, minimum=0.0, maximum=MAX_CONTACT_TIMECONST)
    least = STIFF_CONTACT_STEPS * float(timestep)
    if value < least * (1 - 1e-6):
        raise InvalidArgumentError(
            f"{where}: {value:g} s is under two substeps ({least:g} s at robot.timestep {float(timestep):g}),"
            " which MuJoCo clamps to; give at least that, or null for exactly that"
        )
    return value


def _model_options(v: Any) -> dict[str, Any]:
    """``{package_dirs, fuse_static, balance_inertia}``, their types checked as the model compiler checks them (folders are
    looked for when the scene is composed)."""
    if not isinstance(v, Mapping):
        raise ArgumentTypeError(f"robot.model_options: expected {{option: value}}, got {type(v).__name__}")
    unknown = sorted((k for k in v if k not in _MODEL_OPTIONS), key=str)
    if unknown:
        raise InvalidArgumentError(f"robot.model_options: unknown keys {unknown}; known: {', '.join(_MODEL_OPTIONS)}")
    out = dict(v)
    dirs = out.get("package_dirs")
    if dirs is not None:
        items = [dirs] if isinstance(dirs, (str, os.PathLike)) else dirs
        if not isinstance(items, (list, tuple)) or not all(
            isinstance(p, (str, os.PathLike)) and os.fspath(p) for p in items
        ):
            raise ArgumentTypeError(
                f"robot.model_options.package_dirs: expected a folder path or a list of them, got {checks.short_repr(dirs)}"
            )
        out["package_dirs"] = [os.fspath(p) for p in items]
    for flag in ("fuse_static", "balance_inertia"):
        if out.get(flag) is not None and not isinstance(out[flag], (bool, np.bool_)):
            raise ArgumentTypeError(
                f"robot.model_options.{flag}: expected True, False or None, got {checks.short_repr(out[flag])}"
            )
    return out


def _engine_options(v: Any) -> dict[str, dict[str, Any]]:
    """``{engine: {option: value}}``: registered engines, string keys, finite numbers. The keys and values of an
    engine's block are the engine's to judge: :func:`simbackend.robots.make_robot_backend` checks them when
    it builds that engine (the messages name ``robot.engine_options.ENGINE.KEY``)."""
    if not isinstance(v, Mapping):
        raise ArgumentTypeError(f"robot.engine_options: expected {{engine: {{option: value}}}}, got {type(v).__name__}")
    from simbackend.plugins import available_backends

    engines = available_backends()
    out: dict[str, dict[str, Any]] = {}
    for engine, block in v.items():
        if not isinstance(engine, str):
            raise ArgumentTypeError(
                f"robot.engine_options: expected engine names as keys, got {checks.short_repr(engine)}"
            )
        if engine not in engines:
            raise InvalidArgumentError(
                f"robot.engine_options: unknown engine {engine!r}{closest_names_hint(str(engine), engines)}"
                " (blocks are keyed by registered backend names)"
            )
        where = f"robot.engine_options.{engine}"
        if not isinstance(block, Mapping):
            raise ArgumentTypeError(f"{where}: expected a dict of that engine's options, got {type(block).__name__}")
        for key, value in block.items():
            if not isinstance(key, str) or not key:
                raise ArgumentTypeError(f"{where}: expected option names as keys, got {checks.short_repr(key)}")
            if isinstance(value, float) and not math.isfinite(value):
                raise InvalidArgumentError(f"{where}.{key}: expected a finite value, got {value}")
        out[engine] = dict(block)
    return out
