"""Engine-neutral domain-randomization plans: terms, distributions, phases.

A :class:`RandomizationPlan` is plain data: a seed and a tuple of
:class:`Term`, each naming what it randomizes (``kind``), when (``phase``),
which elements (``targets``: names or regular expressions), how values are
drawn (a :class:`Distribution`) and how they combine with the model's value
(``operation``). Plans are frozen dataclasses, validated on construction, and
round-trip through :meth:`RandomizationPlan.to_dict` / ``from_dict`` (and
JSON), so a training config can hold one.

Values are always computed from the **model's** value, never from the value a
previous sample left: ``scale`` gives ``model * sample``, ``add`` gives
``model + sample``, ``set`` gives ``sample``. Resampling therefore never
compounds.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from simbackend.errors import ArgumentTypeError, InvalidArgumentError

PHASES = ("init", "reset", "interval")
#: the ``bodies`` entry that stands for a robot description's ``feet`` where a robot is given
#: (:func:`simbackend.robots.expand_plan`)
FEET = "feet"
OPERATIONS = ("scale", "add", "set")
FRICTION_COMPONENTS = ("sliding", "torsional", "rolling")
#: contact compliance, MuJoCo's standard solref: the contact's spring-damper time constant (s) and damping ratio
COMPLIANCE_COMPONENTS = ("timeconst", "dampratio")
#: contact impedance, the first three numbers of MuJoCo's solimp: the impedance at zero and at ``width``
#: penetration, and that width (m); its midpoint and power stay the model's
IMPEDANCE_COMPONENTS = ("dmin", "dmax", "width")
#: the term kinds that draw a chosen subset of their field's columns (``Term.components``): kind -> the
#: field's columns in order; a term without ``components`` draws the first
COMPONENTS: Mapping[str, tuple[str, ...]] = {
    "geom_friction": FRICTION_COMPONENTS,
    "geom_compliance": COMPLIANCE_COMPONENTS,
    "geom_impedance": IMPEDANCE_COMPONENTS,
}


@dataclass(frozen=True)
class TermKind:
    """What a term kind randomizes.

    Attributes:
        element: the kind of name its targets resolve against (``body``,
            ``geom``, ``joint``, ``actuator``) or ``None`` (no targets: gravity).
        width: values per target (1, 3, 6; geom friction: its components).
        operations: the operations it takes; the first is the default.
        field: the per-env model field it writes (see
            :data:`simbackend.randomization.FIELDS`), or ``None`` for terms the
            contract applies itself (state changes and forces).
        doc: one line for tables.
    """

    element: str | None
    width: int
    operations: tuple[str, ...]
    field: str | None
    doc: str


#: every term kind the contract defines
TERM_KINDS: Mapping[str, TermKind] = {
    "body_mass": TermKind(
        "body", 1, ("scale", "add", "set"), "body_mass", "body mass, kg (scale_inertia=True scales the inertia with it)"
    ),
    "body_com": TermKind("body", 3, ("add", "set"), "body_com", "centre of mass in the body frame, m (add: an offset)"),
    "body_inertia": TermKind("body", 1, ("scale",), "body_inertia", "principal moments of inertia, scaled together"),
    "geom_friction": TermKind(
        "geom",
        1,
        ("scale", "add", "set"),
        "geom_friction",
        "geom friction coefficients (components: sliding, torsional, rolling)",
    ),
    "geom_compliance": TermKind(
        "geom",
        1,
        ("scale", "add", "set"),
        "geom_compliance",
        "contact compliance of geoms: time constant, s, and damping ratio of the contact's mass-normalized"
        " spring-damper (components: timeconst, dampratio; MuJoCo's standard solref)",
    ),
    "geom_impedance": TermKind(
        "geom",
        1,
        ("scale", "add", "set"),
        "geom_impedance",
        "contact impedance of geoms: the share of the contact's spring-damper against a rigid constraint at"
        " zero and at full penetration, and that penetration, m (components: dmin, dmax, width; MuJoCo's"
        " solimp[:3])",
    ),
    "actuator_kp": TermKind(
        "actuator", 1, ("scale", "add", "set"), "actuator_kp", "position gain of position actuators"
    ),
    "actuator_kv": TermKind(
        "actuator", 1, ("scale", "add", "set"), "actuator_kv", "velocity gain of position and velocity actuators"
    ),
    "actuator_strength": TermKind(
        "actuator",
        1,
        ("scale",),
        "actuator_strength",
        "motor strength: the actuator's whole output force (kp, kv, motor gain and force limit together) times the factor",
    ),
    "action_latency": TermKind(
        None,
        1,
        ("set",),
        None,
        "whole physics substeps before a step's ctrl reaches the actuators (rounded; at most the step's nsteps)",
    ),
    "joint_damping": TermKind("joint", 1, ("scale", "add", "set"), "dof_damping", "joint damping"),
    "joint_armature": TermKind("joint", 1, ("scale", "add", "set"), "dof_armature", "joint armature"),
    "joint_frictionloss": TermKind(
        "joint", 1, ("scale", "add", "set"), "dof_frictionloss", "joint dry friction (frictionloss)"
    ),
    "joint_default_pos": TermKind(
        "joint", 1, ("add", "set"), None, "per-env default position of hinge/slide joints (get_env_default_qpos)"
    ),
    "gravity": TermKind(None, 3, ("add", "scale", "set"), "gravity", "gravity vector, world frame, m/s^2"),
    "body_velocity_delta": TermKind(
        "body", 6, ("add",), None, "push: a change of a free body's linear (3) and angular (3) velocity, world"
    ),
    "body_force": TermKind(
        "body", 6, ("set",), None, "external force (3) and torque (3), world, at the body origin, held for `duration`"
    ),
}

Number = float | int
Bounds = Number | Sequence[Number]


def _vector(value: Any, argument: str) -> tuple[float, ...]:
    """A float or a sequence of floats, as a tuple (length 1 for a scalar)."""
    if isinstance(value, bool):
        raise ArgumentTypeError(f"{argument}: expected a number or a list of numbers, got bool")
    if isinstance(value, (int, float)):
        values: tuple = (float(value),)
    elif (
        isinstance(value, (list, tuple))
        and value
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    ):
        values = tuple(float(v) for v in value)
    else:
        raise ArgumentTypeError(f"{argument}: expected a number or a non-empty list of numbers, got {value!r}")
    if not all(math.isfinite(v) for v in values):
        raise InvalidArgumentError(f"{argument}: values must be finite, got {list(values)}")
    return values


@dataclass(frozen=True)
class Distribution:
    """How a value is drawn, per env and per target.

    Build with the constructors :meth:`uniform`, :meth:`log_uniform`,
    :meth:`gaussian` and :meth:`fixed`. Bounds are a number or a list with one
    entry per value of the term (a number stands for every value; each value
    is still drawn on its own).

    Attributes:
        kind: ``uniform``, ``log_uniform``, ``gaussian`` or ``fixed``.
        low, high: uniform and log-uniform bounds (log-uniform: both > 0);
            a gaussian's optional truncation bounds.
        mean, std: the gaussian's parameters (``std >= 0``).
        value: the fixed value.
    """

    kind: str
    low: tuple[float, ...] | None = None
    high: tuple[float, ...] | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    value: tuple[float, ...] | None = None

    @classmethod
    def uniform(cls, low: Bounds, high: Bounds) -> Distribution:
        return cls("uniform", low=_vector(low, "uniform.low"), high=_vector(high, "uniform.high"))

    @classmethod
    def log_uniform(cls, low: Bounds, high: Bounds) -> Distribution:
        return cls("log_uniform", low=_vector(low, "log_uniform.low"), high=_vector(high, "log_uniform.high"))

    @classmethod
    def gaussian(cls, mean: Bounds, std: Bounds, low: Bounds | None = None, high: Bounds | None = None) -> Distribution:
        return cls(
            "gaussian",
            mean=_vector(mean, "gaussian.mean"),
            std=_vector(std, "gaussian.std"),
            low=None if low is None else _vector(low, "gaussian.low"),
            high=None if high is None else _vector(high, "gaussian.high"),
        )

    @classmethod
    def fixed(cls, value: Bounds) -> Distribution:
        return cls("fixed", value=_vector(value, "fixed.value"))

    def __post_init__(self) -> None:
        k = self.kind
        need = {
            "uniform": ("low", "high"),
            "log_uniform": ("low", "high"),
            "gaussian": ("mean", "std"),
            "fixed": ("value",),
        }
        if k not in need:
            raise InvalidArgumentError(f"distribution.kind: expected one of {sorted(need)}, got {k!r}")
        for name in ("low", "high", "mean", "std", "value"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, tuple):
                object.__setattr__(self, name, _vector(v, f"{k}.{name}"))
        for name in need[k]:
            if getattr(self, name) is None:
                raise InvalidArgumentError(f"{k}: {name!r} is required")
        allowed = set(need[k]) | ({"low", "high"} if k == "gaussian" else set())
        extra = [
            n for n in ("low", "high", "mean", "std", "value") if getattr(self, n) is not None and n not in allowed
        ]
        if extra:
            raise InvalidArgumentError(f"{k}: does not take {extra}")
        widths = {len(getattr(self, n)) for n in allowed if getattr(self, n) is not None}
        if len(widths - {1}) > 1:
            raise InvalidArgumentError(f"{k}: bounds of different lengths {sorted(widths)}")
        if self.low is not None and self.high is not None:
            bad = [(lo, hi) for lo, hi in _pairs(self.low, self.high) if lo > hi]
            if bad:
                raise InvalidArgumentError(f"{k}: low > high ({bad[0][0]} > {bad[0][1]})")
        if k == "log_uniform" and min(self.low) <= 0:
            raise InvalidArgumentError(f"log_uniform.low: must be > 0, got {min(self.low)}")
        if k == "gaussian" and min(self.std) < 0:
            raise InvalidArgumentError(f"gaussian.std: must be >= 0, got {min(self.std)}")

    @property
    def width(self) -> int:
        """Values per draw the bounds describe (1: any width)."""
        return max(len(v) for v in (self.low, self.high, self.mean, self.std, self.value) if v is not None)

    def to_dict(self) -> dict:
        d: dict[str, Any] = {"kind": self.kind}
        for name in ("low", "high", "mean", "std", "value"):
            v = getattr(self, name)
            if v is not None:
                d[name] = v[0] if len(v) == 1 else list(v)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Distribution:
        if not isinstance(d, Mapping):
            raise ArgumentTypeError(f"distribution: expected a mapping, got {type(d).__name__}")
        unknown = set(d) - {"kind", "low", "high", "mean", "std", "value"}
        if unknown:
            raise InvalidArgumentError(f"distribution: unknown keys {sorted(unknown)}")
        if "kind" not in d:
            raise InvalidArgumentError("distribution: 'kind' is required")
        return cls(str(d["kind"]), **{k: _vector(v, f"{d['kind']}.{k}") for k, v in d.items() if k != "kind"})


def _pairs(a: tuple, b: tuple) -> list[tuple[float, float]]:
    n = max(len(a), len(b))
    return [(a[0] if len(a) == 1 else a[i], b[0] if len(b) == 1 else b[i]) for i in range(n)]


@dataclass(frozen=True)
class Term:
    """One randomized quantity.

    Attributes:
        kind: a key of :data:`TERM_KINDS`.
        distribution: how the values are drawn.
        phase: ``init`` (per-env model parameters set once, before the first
            step: ``apply_init_randomization``), ``reset`` (resampled with a
            state: ``set_state(..., randomization=plan)``) or ``interval``
            (during an episode: ``apply_interval_randomization``).
        targets: names or regular expressions (``re.fullmatch``) over the
            names of the term's element kind; an exact name always matches
            itself. ``None`` for every element (a body term: every body but
            the world). Gravity takes none.
        operation: ``scale``, ``add`` or ``set`` (see the module docstring);
            ``None`` for the kind's default.
        shared: one draw per env for all targets, instead of one per target.
        scale_inertia: ``body_mass`` only: scale the inertia by the same
            factor as the mass (a uniformly denser body).
        components: the columns drawn, for the kinds of :data:`COMPONENTS`
            only: ``geom_friction``'s friction coefficients, a subset of
            ``sliding``, ``torsional``, ``rolling`` (default sliding);
            ``geom_compliance``'s ``timeconst``, ``dampratio`` (default
            timeconst); ``geom_impedance``'s ``dmin``, ``dmax``, ``width``
            (default dmin). The term's width is their number; each column is
            drawn on its own.
        duration: ``body_force`` only: seconds the force is held (counted in
            whole ``step`` calls); ``None`` until the next application.
        interval_s: ``interval`` phase: ``(low, high)`` seconds between
            applications, drawn per env (:class:`IntervalScheduler`).
        name: the term's name in the plan (default ``"<index>:<kind>"``); its
            random stream is keyed by the plan's seed and the term's content
            and position, so two plans with the same term at the same
            position draw the same values.
        bodies: geom terms only (``geom_friction``, ``geom_compliance``,
            ``geom_impedance``): body names or regular expressions
            (``re.fullmatch``) over body names; the term acts on every
            collision geom (``contype`` or ``conaffinity`` not 0) of the bodies
            they match, besides the geoms ``targets`` names (without
            ``targets``: those geoms alone). A URDF's geoms are auto-named, its
            links are not: ``bodies=(".*_foot",)`` reaches its feet. A body
            entry that matches no body, or only bodies without a collision
            geom, raises naming the entry. ``"world"`` is the ground (the
            world body's geoms: floor planes, terrain). With a robot
            description (the velocity task, ``calibrate``/``excite --robot``), the entry
            ``"feet"`` stands for the description's ``feet``
            (:func:`simbackend.robots.expand_plan`).
    """

    kind: str
    distribution: Distribution
    phase: str = "init"
    targets: tuple[str, ...] | None = None
    operation: str | None = None
    shared: bool = False
    scale_inertia: bool = False
    components: tuple[str, ...] | None = None
    duration: float | None = None
    interval_s: tuple[float, float] | None = None
    name: str | None = None
    bodies: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.kind not in TERM_KINDS:
            from simbackend.errors import closest_names_hint

            raise InvalidArgumentError(
                f"term.kind: unknown kind {self.kind!r}{closest_names_hint(str(self.kind), TERM_KINDS)}"
            )
        spec = TERM_KINDS[self.kind]
        where = f"term {self.kind!r}"
        if not isinstance(self.distribution, Distribution):
            raise ArgumentTypeError(
                f"{where}: distribution must be a Distribution, got {type(self.distribution).__name__}"
            )
        if self.phase not in PHASES:
            raise InvalidArgumentError(f"{where}: phase must be one of {list(PHASES)}, got {self.phase!r}")
        if self.operation is None:
            object.__setattr__(self, "operation", spec.operations[0])
        if self.operation not in spec.operations:
            raise InvalidArgumentError(
                f"{where}: operation must be one of {list(spec.operations)}, got {self.operation!r}"
            )
        if self.targets is not None:
            targets = (self.targets,) if isinstance(self.targets, str) else self.targets
            if not isinstance(targets, (list, tuple)) or not targets or not all(isinstance(t, str) for t in targets):
                raise ArgumentTypeError(f"{where}: targets must be a name, a pattern or a non-empty list of them")
            object.__setattr__(self, "targets", tuple(targets))
        if spec.element is None and self.targets is not None:
            raise InvalidArgumentError(f"{where}: takes no targets")
        if self.bodies is not None:
            if spec.element != "geom":
                hint = " (body terms take body names in targets)" if spec.element == "body" else ""
                raise InvalidArgumentError(f"{where}: bodies applies to geom terms only{hint}")
            bodies = (self.bodies,) if isinstance(self.bodies, str) else self.bodies
            if not isinstance(bodies, (list, tuple)) or not bodies or not all(isinstance(b, str) for b in bodies):
                raise ArgumentTypeError(f"{where}: bodies must be a body name, a pattern or a non-empty list of them")
            object.__setattr__(self, "bodies", tuple(bodies))
        if self.scale_inertia and self.kind != "body_mass":
            raise InvalidArgumentError(f"{where}: scale_inertia applies to body_mass only")
        if self.scale_inertia and self.operation != "scale":
            raise InvalidArgumentError(f"{where}: scale_inertia needs operation 'scale'")
        if self.components is not None:
            columns = COMPONENTS.get(self.kind)
            if columns is None:
                raise InvalidArgumentError(f"{where}: components apply to {', '.join(COMPONENTS)} only")
            comps = (self.components,) if isinstance(self.components, str) else tuple(self.components)
            bad = [c for c in comps if c not in columns]
            if bad or not comps or len(set(comps)) != len(comps):
                raise InvalidArgumentError(
                    f"{where}: components must be distinct entries of {list(columns)}, got {list(comps)}"
                )
            object.__setattr__(self, "components", comps)
        if self.duration is not None:
            if self.kind != "body_force":
                raise InvalidArgumentError(f"{where}: duration applies to body_force only")
            if not isinstance(self.duration, (int, float)) or isinstance(self.duration, bool) or not self.duration > 0:
                raise InvalidArgumentError(
                    f"{where}: duration must be a positive number of seconds, got {self.duration!r}"
                )
        if self.interval_s is not None:
            if self.phase != "interval":
                raise InvalidArgumentError(f"{where}: interval_s applies to the interval phase only")
            lo_hi = _vector(
                list(self.interval_s) if isinstance(self.interval_s, (list, tuple)) else self.interval_s,
                f"{where}: interval_s",
            )
            if len(lo_hi) != 2 or not 0 < lo_hi[0] <= lo_hi[1]:
                raise InvalidArgumentError(
                    f"{where}: interval_s must be (low, high) seconds with 0 < low <= high, got {self.interval_s!r}"
                )
            object.__setattr__(self, "interval_s", lo_hi)
        w = self.width
        if self.distribution.width not in (1, w):
            raise InvalidArgumentError(
                f"{where}: the distribution has {self.distribution.width} values per draw, the term takes 1 or {w}"
            )
        if self.name is not None and not isinstance(self.name, str):
            raise ArgumentTypeError(f"{where}: name must be a string")

    @property
    def width(self) -> int:
        """Values drawn per env and target."""
        if self.kind in COMPONENTS:
            return len(self.component_columns)
        return TERM_KINDS[self.kind].width

    @property
    def component_columns(self) -> tuple[int, ...]:
        """The field columns a :data:`COMPONENTS` kind's term draws, in its components' order (default:
        the first column); ``()`` for the other kinds."""
        columns = COMPONENTS.get(self.kind)
        if columns is None:
            return ()
        return tuple(columns.index(c) for c in (self.components or columns[:1]))

    def to_dict(self) -> dict:
        d: dict[str, Any] = {
            "kind": self.kind,
            "phase": self.phase,
            "distribution": self.distribution.to_dict(),
            "operation": self.operation,
        }
        for name in ("targets", "bodies", "components", "interval_s"):
            v = getattr(self, name)
            if v is not None:
                d[name] = list(v)
        for name, default in (("shared", False), ("scale_inertia", False), ("duration", None), ("name", None)):
            v = getattr(self, name)
            if v != default:
                d[name] = v
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Term:
        if not isinstance(d, Mapping):
            raise ArgumentTypeError(f"term: expected a mapping, got {type(d).__name__}")
        known = {
            "kind",
            "phase",
            "distribution",
            "targets",
            "operation",
            "shared",
            "scale_inertia",
            "components",
            "duration",
            "interval_s",
            "name",
            "bodies",
        }
        unknown = set(d) - known
        if unknown:
            raise InvalidArgumentError(f"term: unknown keys {sorted(unknown)}")
        if "kind" not in d or "distribution" not in d:
            raise InvalidArgumentError("term: 'kind' and 'distribution' are required")
        kw = {k: v for k, v in d.items() if k != "distribution"}
        for k in ("targets", "bodies", "components", "interval_s"):
            if isinstance(kw.get(k), list):
                kw[k] = tuple(kw[k])
        return cls(distribution=Distribution.from_dict(d["distribution"]), **kw)


@dataclass(frozen=True)
class RandomizationPlan:
    """A seed and the terms it randomizes (see :class:`Term`).

    The values drawn for env ``i`` depend only on the seed, the term (its
    content and position in the plan), ``i`` and how many times that term was
    drawn for env ``i`` before: not on ``num_envs``, the backend or the device
    (:mod:`simbackend.randomization.sampling`).
    """

    terms: tuple[Term, ...]
    seed: int = 0

    def __post_init__(self) -> None:
        terms = self.terms
        if isinstance(terms, Term):
            terms = (terms,)
        if not isinstance(terms, (list, tuple)) or not all(isinstance(t, Term) for t in terms):
            raise ArgumentTypeError("plan.terms: expected a sequence of Term")
        object.__setattr__(self, "terms", tuple(terms))
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2**63:
            raise InvalidArgumentError(f"plan.seed: expected an int in [0, 2**63), got {self.seed!r}")
        names = [t.name for t in self.terms if t.name is not None]
        if len(names) != len(set(names)):
            raise InvalidArgumentError(
                f"plan.terms: duplicate term names {sorted({n for n in names if names.count(n) > 1})}"
            )

    def phase_terms(self, phase: str) -> tuple[tuple[int, Term], ...]:
        """(position, term) of the terms of ``phase``."""
        if phase not in PHASES:
            raise InvalidArgumentError(f"phase: expected one of {list(PHASES)}, got {phase!r}")
        return tuple((i, t) for i, t in enumerate(self.terms) if t.phase == phase)

    def term_name(self, index: int) -> str:
        t = self.terms[index]
        return t.name if t.name is not None else f"{index}:{t.kind}"

    def stream_key(self, index: int) -> int:
        """The 64-bit key of term ``index``'s random stream (its content and position)."""
        text = json.dumps([index, self.terms[index].to_dict()], sort_keys=True, separators=(",", ":"))
        return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")

    def to_dict(self) -> dict:
        return {"version": 1, "seed": self.seed, "terms": [t.to_dict() for t in self.terms]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RandomizationPlan:
        if not isinstance(d, Mapping):
            raise ArgumentTypeError(f"plan: expected a mapping, got {type(d).__name__}")
        unknown = set(d) - {"version", "seed", "terms"}
        if unknown:
            raise InvalidArgumentError(f"plan: unknown keys {sorted(unknown)}")
        if d.get("version", 1) != 1:
            raise InvalidArgumentError(f"plan.version: this simbackend reads version 1, got {d.get('version')!r}")
        terms = d.get("terms")
        if not isinstance(terms, list):
            raise InvalidArgumentError("plan.terms: expected a list of terms")
        out = []
        for i, t in enumerate(terms):
            try:
                out.append(Term.from_dict(t))
            except (InvalidArgumentError, ArgumentTypeError) as e:
                raise type(e)(f"plan.terms[{i}]: {e}") from None
        return cls(tuple(out), seed=d.get("seed", 0))

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_json(cls, text: str) -> RandomizationPlan:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise InvalidArgumentError(f"plan: not valid JSON ({e})") from None
        return cls.from_dict(data)

    @classmethod
    def load(cls, path: Any) -> RandomizationPlan:
        """Read a plan from a JSON file."""
        from pathlib import Path

        p = Path(path)
        if not p.is_file():
            raise InvalidArgumentError(f"plan: no such file {str(p)!r}")
        return cls.from_json(p.read_text())


def plan_field_names() -> list[str]:
    """The per-env model fields terms write (engine-neutral names)."""
    return sorted({k.field for k in TERM_KINDS.values() if k.field is not None})
