"""The parameters a calibration fits: plan terms with bounds, one number each.

A :class:`Parameter` is a randomization-plan term (:class:`~simbackend.randomization.Term`:
``kind``, ``targets``, ``operation``, ``components``) whose single value is searched
between ``low`` and ``high`` instead of drawn. Written like a plan term, in JSON::

    {"parameters": [
      {"kind": "geom_friction", "targets": ["floor"], "low": 0.3, "high": 3.0},
      {"kind": "joint_damping", "low": 0.2, "high": 5.0},
      {"kind": "body_mass", "targets": ["trunk"], "operation": "add", "low": -1.0, "high": 1.0},
      {"kind": "geom_friction", "targets": ["floor"], "bodies": ["feet"], "low": 0.3, "high": 3.0}
    ]}

``bodies`` (geom terms) names bodies whose collision geoms the term acts on (a URDF's links);
with a robot, ``feet`` stands for its description's feet (:func:`simbackend.robots.expand_aliases`).

The value goes to every target (and every component) of the term, composed with
the **model's** value by the term's operation (``scale``: the model's value times the
value; ``add``; ``set``), exactly as a plan's ``fixed`` distribution would: the fit's
result is therefore a plan (:meth:`ParameterSet.plan`) that ``--dr`` takes unchanged.

The search runs in the unit cube: ``log`` parameters (the default for ``scale`` with
``low > 0``) map ``[0, 1]`` onto ``[low, high]`` geometrically, the others linearly.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from simbackend.errors import ArgumentTypeError, InvalidArgumentError
from simbackend.randomization import TERM_KINDS, Distribution, RandomizationPlan, Term

__all__ = ["Parameter", "ParameterSet"]

#: the keys a parameter takes besides the bounds: a plan term's, without its distribution and phase
TERM_KEYS = ("kind", "targets", "bodies", "operation", "components", "name")


@dataclass(frozen=True)
class Parameter:
    """One fitted number: a plan term and the interval its value is searched in.

    Attributes:
        term: the term (its ``distribution`` is ignored; ``phase`` is set where used).
        low, high: the bounds, ``low < high``.
        log: search ``log(value)`` uniformly (needs ``low > 0``).
        name: a label for reports (default ``"<kind>[<targets>]"``).
    """

    term: Term
    low: float
    high: float
    log: bool
    name: str

    @property
    def identity(self) -> float:
        """The value that leaves the model as it is: 1 for ``scale``, 0 for ``add``; for ``set``, NaN
        (the model's value is per target: :meth:`term_with` gives NaN the term that keeps it)."""
        op = self.term.operation
        if op == "scale":
            return 1.0
        if op == "add":
            return 0.0
        return math.nan

    def from_unit(self, z: float) -> float:
        z = min(max(float(z), 0.0), 1.0)
        if self.log:
            return float(math.exp(math.log(self.low) + z * (math.log(self.high) - math.log(self.low))))
        return float(self.low + z * (self.high - self.low))

    def to_unit(self, value: float) -> float:
        if math.isnan(value):  # the model's own value (a `set` parameter's identity): start mid-bounds
            return 0.5
        v = min(max(float(value), self.low), self.high)
        if self.log:
            return (math.log(v) - math.log(self.low)) / (math.log(self.high) - math.log(self.low))
        return (v - self.low) / (self.high - self.low)

    def term_with(self, value: float, phase: str) -> Term:
        """The term with ``value`` fixed, in ``phase``; NaN: the term that restores the model's values
        (scale 1, or add 0, on the same targets)."""
        t = self.term
        op = t.operation
        if math.isnan(value):
            op = "scale" if "scale" in TERM_KINDS[t.kind].operations else "add"
            value = 1.0 if op == "scale" else 0.0
        return Term(
            t.kind,
            Distribution.fixed(value),
            phase=phase,
            targets=t.targets,
            operation=op,
            components=t.components,
            name=self.name,
            bodies=t.bodies,
        )

    def to_dict(self) -> dict:
        d: dict[str, Any] = {"kind": self.term.kind, "low": self.low, "high": self.high, "log": self.log}
        for k in ("targets", "bodies", "components"):
            v = getattr(self.term, k)
            if v is not None:
                d[k] = list(v)
        d["operation"] = self.term.operation
        d["name"] = self.name
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "parameter") -> Parameter:
        if not isinstance(d, Mapping):
            raise ArgumentTypeError(f"{where}: expected a mapping, got {type(d).__name__}")
        unknown = set(d) - set(TERM_KEYS) - {"low", "high", "log"}
        if unknown:
            raise InvalidArgumentError(f"{where}: unknown keys {sorted(unknown)}")
        for k in ("kind", "low", "high"):
            if k not in d:
                raise InvalidArgumentError(f"{where}.{k}: required")
        low, high = d["low"], d["high"]
        for k, v in (("low", low), ("high", high)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise InvalidArgumentError(f"{where}.{k}: expected a finite number, got {v!r}")
        if not low < high:
            raise InvalidArgumentError(f"{where}: low must be < high, got {low} and {high}")
        kw = {k: d[k] for k in ("targets", "bodies", "operation", "components") if k in d}
        for k in ("targets", "bodies", "components"):
            if isinstance(kw.get(k), list):
                kw[k] = tuple(kw[k])
        try:
            term = Term(d["kind"], Distribution.fixed(float(low)), **kw)
        except (InvalidArgumentError, ArgumentTypeError) as e:
            raise type(e)(f"{where}: {e}") from None
        if term.kind in ("body_velocity_delta", "body_force", "joint_default_pos"):
            raise InvalidArgumentError(
                f"{where}.kind: {term.kind!r} changes the state, not the model; it cannot be calibrated"
            )
        log = d.get("log")
        if log is None:
            log = term.operation == "scale" and low > 0
        if not isinstance(log, bool):
            raise InvalidArgumentError(f"{where}.log: expected true or false, got {log!r}")
        if log and low <= 0:
            raise InvalidArgumentError(f"{where}.log: a log-scale parameter needs low > 0, got {low}")
        name = d.get("name")
        if name is None:
            named = (term.targets or ()) + tuple(f"body:{b}" for b in term.bodies or ())
            name = term.kind + (f"[{','.join(named)}]" if named else "")
            if term.components:
                name += ":" + ",".join(term.components)
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"{where}.name: expected a non-empty string, got {name!r}")
        return cls(term=term, low=float(low), high=float(high), log=log, name=name)


@dataclass(frozen=True)
class ParameterSet:
    """The parameters of one calibration, in order (names unique)."""

    parameters: tuple[Parameter, ...]

    def __post_init__(self) -> None:
        if not self.parameters:
            raise InvalidArgumentError("parameters: at least one parameter is required")
        names = [p.name for p in self.parameters]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise InvalidArgumentError(f"parameters: duplicate names {dup}; give each a distinct 'name'")

    def __len__(self) -> int:
        return len(self.parameters)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parameters)

    def identity(self) -> np.ndarray:
        """``(d,)`` the values that leave the model as it is."""
        return np.array([p.identity for p in self.parameters])

    def from_unit(self, z: np.ndarray) -> np.ndarray:
        return np.array([p.from_unit(v) for p, v in zip(self.parameters, np.asarray(z, float))])

    def to_unit(self, values: Sequence[float] | np.ndarray) -> np.ndarray:
        return np.array([p.to_unit(v) for p, v in zip(self.parameters, values)])

    def plan(self, values: Sequence[float] | np.ndarray, *, phase: str = "init", seed: int = 0) -> RandomizationPlan:
        """The plan that sets the parameters to ``values`` (fixed distributions)."""
        return RandomizationPlan(tuple(p.term_with(float(v), phase) for p, v in zip(self.parameters, values)), seed)

    def check_backend(self, backend: Any) -> None:
        """Check, before a fit, that ``backend`` takes every parameter as the fit applies it (per env, in
        the interval phase) and that each parameter's bounds give valid values on its model: each bound
        applied alone to env 0 (the other parameters at :meth:`identity`); env 0 gets the model's values
        back after.

        Raises:
            UnsupportedFeatureError: the engine cannot set a parameter's term per env; names the parameter.
            InvalidArgumentError: a bound gives invalid values (a negative damping, a mass not > 0);
                names the parameter (``parameters[i]``, its name) and the bound.
        """
        from simbackend.errors import UnsupportedFeatureError

        caps = backend.capabilities.domain_randomization
        for p in self.parameters:
            if f"{p.term.kind}:interval" not in caps:
                raise UnsupportedFeatureError(
                    backend.name, f"calibrating {p.name!r} ({p.term.kind} per env, interval phase)"
                )
        identity = self.identity()
        try:
            for k, p in enumerate(self.parameters):
                for label, bound in (("low", p.low), ("high", p.high)):
                    values = identity.copy()
                    values[k] = bound
                    try:
                        backend.apply_interval_randomization(self.plan(values, phase="interval"), [0])
                    except ValueError as e:  # the plan's value checks: InvalidArgumentError, ValueRangeError, ...
                        raise InvalidArgumentError(
                            f"parameters[{k}].{label}: {p.name!r} at {bound:g} gives invalid values on"
                            f" {backend.name}'s model ({' '.join(str(e).split())}); narrow its bounds"
                        ) from None
        finally:
            backend.apply_interval_randomization(self.plan(identity, phase="interval"), [0])

    def training_plan(self, values: Sequence[float] | np.ndarray, spread: float, *, seed: int = 0) -> RandomizationPlan:
        """A plan centred on ``values``: each drawn uniformly at init within ``spread`` of it (relative for
        ``scale`` and ``set`` parameters, absolute for ``add``), kept inside the bounds."""
        if not 0 <= spread < 1:
            raise InvalidArgumentError(f"spread: expected a fraction in [0, 1), got {spread!r}")
        terms = []
        for p, v in zip(self.parameters, values):
            v = float(v)
            if math.isnan(v):  # the model's own value: kept as it is
                terms.append(p.term_with(v, "init"))
                continue
            half = spread * (abs(v) if p.term.operation != "add" else (p.high - p.low) / 2)
            lo, hi = max(p.low, v - half), min(p.high, v + half)
            dist = Distribution.fixed(v) if hi <= lo else Distribution.uniform(lo, hi)
            t = p.term
            terms.append(
                Term(
                    t.kind,
                    dist,
                    phase="init",
                    targets=t.targets,
                    operation=t.operation,
                    components=t.components,
                    name=p.name,
                    bodies=t.bodies,
                )
            )
        return RandomizationPlan(tuple(terms), seed)

    def to_dict(self) -> dict:
        return {"parameters": [p.to_dict() for p in self.parameters]}

    @classmethod
    def from_dict(cls, d: Any) -> ParameterSet:
        if isinstance(d, Mapping):
            unknown = set(d) - {"parameters"}
            if unknown:
                raise InvalidArgumentError(f"parameters: unknown keys {sorted(unknown)}")
            d = d.get("parameters")
        if not isinstance(d, list):
            raise InvalidArgumentError("parameters: expected a list of parameters (or {'parameters': [...]})")
        return cls(tuple(Parameter.from_dict(p, f"parameters[{i}]") for i, p in enumerate(d)))

    @classmethod
    def load(cls, path: Any) -> ParameterSet:
        p = Path(path)
        if not p.is_file():
            raise InvalidArgumentError(f"parameters: no such file {str(p)!r}")
        try:
            data = json.loads(p.read_text())
        except json.JSONDecodeError as e:
            raise InvalidArgumentError(f"parameters: {str(p)!r} is not valid JSON ({e})") from None
        return cls.from_dict(data)
