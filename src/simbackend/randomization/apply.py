"""How a plan reaches an engine: resolution, sampling, validation, then one write.

:class:`Randomizer` is the front end's domain-randomization service: it keeps
the per-env parameters, draw counters, default poses and held forces, and
reaches the engine only through its public members (``capabilities``,
``read_params``, ``write_params``, ``read_state``, ``write_state``).
Applying a plan's terms of one phase to some envs runs in two steps:

1. **prepare** (no writes): check every term against the engine's declared
   support for the phase, resolve targets (cached per term), draw the values
   (:mod:`.sampling`), compose the envs' new per-env model fields from the
   **model's** values, and validate them (positive masses and inertias,
   non-negative friction, damping, armature, frictionloss and gains, float32
   range). Any failure raises here, and nothing has changed.
2. **commit**: one ``Engine.write_params`` call with the complete new rows
   of every field touched, then the contract's own terms (the per-env default
   pose, pushes through the state, held forces), then the draw counters
   advance.

Per-env model fields have engine-neutral names (:data:`FIELDS`); an engine
implements ``write_params(env_ids, values)`` and ``read_params(field)`` for
the fields of the terms it declares in ``capabilities.domain_randomization``
(entries ``"<term>:<phase>"``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch

from simbackend import _validate as V
from simbackend.divergence import MAX_QPOS, MAX_QVEL
from simbackend.engine import Engine
from simbackend.errors import (
    ArgumentTypeError,
    IndexRangeError,
    InputShapeError,
    InvalidArgumentError,
    UnknownNameError,
    UnsupportedFeatureError,
    ValueRangeError,
)
from simbackend.math import quat_apply_inverse
from simbackend.model_info import JOINT_BALL, JOINT_FREE, JOINT_HINGE, JOINT_SLIDE, ModelInfo

from .plan import COMPONENTS, FEET, PHASES, TERM_KINDS, RandomizationPlan, Term
from .sampling import draw, uniforms

#: per-env model fields: name -> (ModelInfo attribute holding the model's values, lower bound, what)
FIELDS: Mapping[str, tuple[str, float | None, str]] = {
    "body_mass": ("body_mass", 0.0, "mass"),
    "body_com": ("body_com", None, "centre of mass"),
    "body_inertia": ("body_inertia", 0.0, "principal inertia"),
    "geom_friction": ("geom_friction", -1.0, "friction"),
    # (timeconst s, dampratio) of MuJoCo's standard solref: finite here; > 0 and timeconst >= 2 timesteps
    # where a value differs from the model's (a direct-form solref, negative, stays): check_contact
    "geom_compliance": ("geom_compliance", None, "contact compliance"),
    # (dmin, dmax, width m) of MuJoCo's solimp: finite here; where a value differs from the model's,
    # IMPEDANCE_RANGE holds dmin <= dmax and width >= 0: check_contact
    "geom_impedance": ("geom_impedance", None, "contact impedance"),
    "actuator_kp": ("actuator_kp", -1.0, "kp"),
    "actuator_kv": ("actuator_kv", -1.0, "kv"),
    # a factor on the actuator's whole output force (1 in the model): engines compose it with kp/kv
    "actuator_strength": ("actuator_strength", -1.0, "actuator strength"),
    "dof_damping": ("dof_damping", -1.0, "damping"),
    "dof_armature": ("dof_armature", -1.0, "armature"),
    "dof_frictionloss": ("dof_frictionloss", -1.0, "frictionloss"),
    "gravity": ("gravity", None, "gravity"),
}
#: bounds: 0.0 means "> 0" (masses, inertias), -1.0 means ">= 0"

#: the per-env contact fields whose rules span columns (:meth:`Randomizer.contact_rules`), checked once
#: every term of an application is composed
CONTACT_FIELDS = ("geom_compliance", "geom_impedance")
#: the impedance MuJoCo acts with, [mjMINIMP, mjMAXIMP]: it clamps solimp's dmin and dmax into it silently
IMPEDANCE_RANGE = (0.0001, 0.9999)

#: terms the contract applies itself, from the state and the pending forces (no engine field)
CORE_TERMS = ("joint_default_pos", "body_velocity_delta", "body_force", "action_latency")

#: the largest action latency a term may draw, substeps (a step call caps it at its nsteps anyway)
MAX_LATENCY = 1_000_000


def _welded_to_world(info: Any) -> np.ndarray:
    """``(nbody,)`` bool: the world body and the bodies with no joint on their path to it (they never move)."""
    jointed = np.zeros(info.nbody, bool)
    jointed[np.asarray(info.joint_body, np.int64)] = True
    out = np.zeros(info.nbody, bool)
    out[0] = True
    for b in range(1, info.nbody):  # parents come before their children in the compiled order
        out[b] = out[int(info.body_parent[b])] and not jointed[b]
    return out


def core_dr_support(body_forces: bool) -> frozenset[str]:
    """The ``"<term>:<phase>"`` entries every backend has through the contract alone."""
    terms = ["joint_default_pos", "body_velocity_delta", "action_latency"] + (["body_force"] if body_forces else [])
    return frozenset(f"{t}:{p}" for t in terms for p in PHASES)


def element_names(info: ModelInfo, element: str) -> tuple[str, ...]:
    """The names a term's targets resolve against: ``element`` is ``body``, ``geom``, ``joint`` or ``actuator``."""
    return {
        "body": info.body_names,
        "geom": info.geom_names,
        "joint": info.joint_names,
        "actuator": info.actuator_names,
    }[element]


def _match(names: Sequence[str], entry: str, element: str, where: str, what: str = "target") -> list[int]:
    """Ids of ``names`` that ``entry`` names exactly or matches as a pattern (``re.fullmatch``); raises
    naming ``entry`` when it is not a pattern or matches nothing."""
    if entry in names:
        return [list(names).index(entry)]
    try:
        pattern = re.compile(entry)
    except re.error as e:
        raise InvalidArgumentError(
            f"{where}: {what} {entry!r} is neither a {element} name nor a valid regular expression ({e})"
        ) from None
    hits = [i for i, n in enumerate(names) if pattern.fullmatch(n)]
    if not hits:
        err = UnknownNameError(element, entry, names)
        err.args = (f"{where}: {err} (no {element} name matches it as a pattern either)",)
        raise err
    return hits


def collision_geoms(info: ModelInfo, bodies: Sequence[int] | np.ndarray) -> np.ndarray:
    """Sorted ids of the collision geoms (``contype`` or ``conaffinity`` not 0) of ``bodies``."""
    collides = (np.asarray(info.geom_contype) != 0) | (np.asarray(info.geom_conaffinity) != 0)
    owned = np.isin(np.asarray(info.geom_body), np.asarray(bodies, np.int64))
    return np.flatnonzero(owned & collides).astype(np.int64)


def body_geoms(info: ModelInfo, entry: str, where: str) -> np.ndarray:
    """The collision geoms of the bodies a term's ``bodies`` entry names (a name or a pattern); raises
    naming the entry when it matches no body, or only bodies without a collision geom."""
    try:
        hits = _match(info.body_names, entry, "body", where, "bodies entry")
    except UnknownNameError as e:
        if entry == FEET:  # the alias, where no robot description was there to expand it
            e.args = (
                f"{e.args[0]}; {FEET!r} stands for a robot's feet only where a robot is given (the velocity"
                " task, calibrate/excite --robot, simbackend.robots.expand_plan)",
            )
        raise
    geoms = collision_geoms(info, hits)
    if not geoms.size:
        shown = [info.body_names[b] for b in hits[:5]]
        raise InvalidArgumentError(
            f"{where}: bodies entry {entry!r} resolves to no collision geom (bodies {shown}"
            f"{' ...' if len(hits) > 5 else ''} have none with contype or conaffinity set)"
        )
    return geoms


def resolve_targets(info: ModelInfo, term: Term, where: str = "term") -> np.ndarray:
    """Element ids of ``term``'s targets on a model, sorted, checked for the term kind (read-only).

    ``targets`` are names or patterns over the names of the kind's element; a geom term's ``bodies``
    add the collision geoms of the bodies they name. No targets and no bodies: every element that can
    take the term (a body term: every body but the world). Raises naming the entry that matches
    nothing, a named element that cannot take the term, or a term no element of the model takes.
    """
    spec = TERM_KINDS[term.kind]
    if spec.element is None:
        ids = np.zeros(0, np.int64)
    elif term.targets is None and term.bodies is None:
        ids = np.arange(len(element_names(info, spec.element)), dtype=np.int64)
        if spec.element == "body":
            ids = ids[1:]
        ids = _eligible(info, term, ids, where, implicit=True)
    else:
        found: set[int] = set()
        names = element_names(info, spec.element)
        for entry in term.targets or ():
            found.update(_match(names, entry, spec.element, where))
        for entry in term.bodies or ():
            found.update(int(g) for g in body_geoms(info, entry, where))
        ids = _eligible(info, term, np.array(sorted(found), np.int64), where, implicit=False)
    if spec.element is not None and not ids.size:
        raise InvalidArgumentError(f"{where}: no {spec.element} of this model can take this term")
    ids.flags.writeable = False
    return ids


def _eligible(info: ModelInfo, term: Term, ids: np.ndarray, where: str, implicit: bool) -> np.ndarray:
    """``ids`` the term kind applies to; named ones that do not qualify raise, implicit ones are dropped."""
    kind = term.kind
    if kind.startswith("body_"):
        ok = ids > 0
        why = "the world body"
        if kind in ("body_mass", "body_com", "body_inertia"):
            ok &= ~_welded_to_world(info)[ids]
            why = "the world body, or welded to it: no joint between it and the world, so its mass never acts"
        if kind == "body_velocity_delta":
            free = {int(info.joint_body[j]) for j in np.flatnonzero(info.joint_type == JOINT_FREE)}
            ok &= np.array([int(b) in free for b in ids], bool)
            why = "not attached by a free joint"
    elif kind == "actuator_kp":
        ok = np.array([info.actuator_kind[a] == "position" for a in ids], bool)
        why = "not a position actuator"
    elif kind == "actuator_kv":
        ok = np.array([info.actuator_kind[a] in ("position", "velocity") for a in ids], bool)
        why = "not a position or velocity actuator"
    elif kind == "actuator_strength":
        ok = np.array([info.actuator_kind[a] in ("motor", "position", "velocity") for a in ids], bool)
        why = "not a motor, position or velocity actuator"
    elif kind == "geom_compliance":
        ok = info.geom_compliance[ids, 0] > 0
        why = "its solref is in MuJoCo's direct form (-stiffness, -damping), which has no time constant"
    elif kind == "joint_default_pos":
        ok = np.isin(info.joint_type[ids], (JOINT_HINGE, JOINT_SLIDE))
        why = "not a hinge or slide joint"
    else:
        ok = np.ones(ids.size, bool)
        why = ""
    if not implicit and not ok.all():
        names = element_names(info, TERM_KINDS[kind].element)
        bad = [names[i] for i in ids[~ok]]
        raise InvalidArgumentError(f"{where}: {TERM_KINDS[kind].element}(s) {bad[:5]} cannot take it ({why})")
    return ids[ok]


class ActuatorGains(NamedTuple):
    """Per-actuator servo gains, ``(nu,)`` each (``(N, nu)`` per env).

    ``kp``: position gain (force per unit position error) of position
    actuators, 0 for the others. ``kv``: velocity gain (damping) of position
    and velocity actuators, 0 for motors.
    """

    kp: torch.Tensor
    kv: torch.Tensor


@dataclass
class Prepared:
    """Everything one application writes, computed and validated before any write."""

    ids: np.ndarray  # (n,) sorted env ids
    fields: dict[str, np.ndarray] = field(default_factory=dict)  # field -> (n, ...) new rows
    default_qpos: np.ndarray | None = None  # (n, nq)
    qvel_delta: np.ndarray | None = None  # (n, nv), world/local per the contract
    lin_ang_delta: list = field(default_factory=list)  # (free joint dofadr, (n, 3) lin world, (n, 3) ang world)
    forces: list = field(default_factory=list)  # (body ids (T,), (n, T, 6), duration or None)
    latency: np.ndarray | None = None  # (n,) float64 action latency drawn, substeps (rounded at commit)
    sources: dict = field(default_factory=dict)  # contact field -> [(plan term, its target ids)] composed into it
    counted: list = field(default_factory=list)  # stream keys drawn
    dropped: list = field(default_factory=list)


class Randomizer:
    """The domain-randomization service of one backend (see the module docstring).

    Attributes (read by the snapshot service, written only here):
        values: field -> ``(N, ...)`` float64 per-env table of every field written so far.
        default_qpos: ``(N, nq)`` per-env default configuration once a term changed it, else ``None``.
        held_force: ``(N, nbody, 6)`` world force and torque of ``body_force`` terms, or ``None``.
        held_left: ``(N, nbody)`` seconds each held force has left (``inf``: until replaced), or ``None``.
        latency: ``(N,)`` int64 action latency of every env in physics substeps once a term set one,
            else ``None`` (no env delays its controls: ``step`` takes its one-call path).
        pending_ctrl: ``(N, nu)`` the ``ctrl`` given to the last ``step`` call (engine dtype, on the
            device), kept while ``latency`` is set: what the first substeps of a delayed env apply.
        counts: plan stream key -> ``(N,)`` draws made per env.
    """

    def __init__(self, info: ModelInfo, num_envs: int, device: torch.device, engine: Engine):
        self.info, self.num_envs, self.device, self.engine = info, num_envs, device, engine
        self.dtype = engine.dtype
        self.counts: dict[int, np.ndarray] = {}
        self._resolved: dict[tuple, np.ndarray] = {}
        self.values: dict[str, np.ndarray] = {}
        self.default_qpos: np.ndarray | None = None
        self.held_force: np.ndarray | None = None
        self.held_left: np.ndarray | None = None
        self.latency: np.ndarray | None = None
        self.pending_ctrl: torch.Tensor | None = None
        self._latency_dev: torch.Tensor | None = None  # latency on the device, made on first use
        self.ctrl_source: Any = None  # the front end's bookkeeping (its ``ctrl``: the controls last applied)

    # ------------------------------------------------------------------
    # what the engine supports, and the values it holds
    # ------------------------------------------------------------------
    def support(self) -> frozenset[str]:
        """Every ``"<term>:<phase>"`` entry the backend applies: the engine's and the contract's own."""
        caps = self.engine.capabilities  # capabilities objects from before these fields declare no engine terms
        return frozenset(getattr(caps, "domain_randomization", frozenset())) | core_dr_support(
            bool(getattr(caps, "body_forces", False))
        )

    def capabilities(self) -> dict[str, frozenset[str]]:
        """``{term kind: phases}`` (see ``SimBackend.get_dr_capabilities``)."""
        out: dict[str, set[str]] = {}
        for entry in self.support():
            kind, phase = entry.split(":")
            out.setdefault(kind, set()).add(phase)
        return {k: frozenset(v) for k, v in sorted(out.items())}

    def model_value(self, name: str) -> np.ndarray:
        """The model's value of per-env field ``name``, float64."""
        return np.asarray(getattr(self.info, FIELDS[name][0]), np.float64)

    def env_field(self, name: str) -> np.ndarray:
        """``(N, ...)`` float64: every env's value of field ``name`` as the engine holds it."""
        read = self.engine.read_params(name)
        if read is None:
            model = self.model_value(name)
            return np.broadcast_to(model, (self.num_envs,) + model.shape)
        return np.asarray(read, np.float64)

    def env_default_qpos(self) -> np.ndarray:
        """``(N, nq)`` each env's default configuration."""
        if self.default_qpos is None:
            return np.broadcast_to(self.info.qpos0, (self.num_envs, self.info.nq))
        return self.default_qpos

    def table_rows(self, name: str, ids: np.ndarray) -> np.ndarray:
        """``(n, ...)`` the per-env values of field ``name`` the front end recorded for envs ``ids``."""
        table = self.values.get(name)
        if table is None:
            model = self.model_value(name)
            return np.broadcast_to(model, (ids.size,) + model.shape)
        return table[ids]

    def free_dofadr(self, body: int, argument: str) -> int:
        """The first qvel column of the free joint attaching ``body``; raises naming ``argument`` otherwise."""
        info = self.info
        for j in np.flatnonzero(info.joint_body == body):
            if info.joint_type[j] == JOINT_FREE:
                return int(info.joint_dofadr[j])
        raise IndexRangeError(
            f"{argument}: body {info.body_names[body]!r} is not attached by a free joint;"
            " a velocity change needs a free body"
        )

    # resolution -------------------------------------------------------------
    def _targets(self, term: Term, where: str) -> np.ndarray:
        """Element ids of ``term``'s targets (:func:`resolve_targets`), cached per kind and targets."""
        key = (term.kind, term.targets, term.bodies)
        hit = self._resolved.get(key)
        if hit is None:
            hit = self._resolved[key] = resolve_targets(self.info, term, where)
        return hit

    # prepare ------------------------------------------------------------------
    def prepare(
        self, plan: Any, phase: str, ids: np.ndarray, strict: Any, only: Sequence[str] | None = None
    ) -> Prepared:
        if not isinstance(plan, RandomizationPlan):
            raise ArgumentTypeError(
                f"plan: expected a RandomizationPlan, got {type(plan).__name__}"
                " (RandomizationPlan.from_dict reads a dict)"
            )
        if not isinstance(strict, bool):
            raise ArgumentTypeError(f"strict: expected a bool, got {type(strict).__name__}")
        selected = plan.phase_terms(phase)
        if only is not None:
            if isinstance(only, str) or not all(isinstance(t, str) for t in only):
                raise ArgumentTypeError("terms: expected a sequence of term names")
            known = {plan.term_name(i): i for i, _ in selected}
            for name in only:
                if name not in known:
                    raise UnknownNameError(f"{phase} term", name, known)
            selected = tuple((i, t) for i, t in selected if plan.term_name(i) in set(only))
        support = self.support()
        p = Prepared(ids=ids)
        n = ids.size
        for index, term in selected:
            name = plan.term_name(index)
            if f"{term.kind}:{phase}" not in support:
                if strict:
                    raise UnsupportedFeatureError(
                        self.engine.name,
                        f"domain randomization term {term.kind!r} in phase {phase!r}",
                        f"plan term {name!r}{self._lacking(f'{term.kind}:{phase}')} (get_dr_capabilities()"
                        " lists what this backend applies; strict=False skips such terms)",
                    )
                p.dropped.append(name)
                continue
            where = f"plan term {name!r} ({term.kind})"
            targets = self._targets(term, where)
            if not n:
                continue
            key = plan.stream_key(index)
            counts = self.counts.get(key)
            drawn = np.zeros(n, np.int64) if counts is None else counts[ids]
            groups = 1 if term.shared or TERM_KINDS[term.kind].element is None else targets.size
            u = uniforms(plan.seed, key, ids, drawn, groups * term.width).reshape(n, groups, term.width)
            values = draw(term.distribution, u)
            if groups == 1 and targets.size > 1:
                values = np.broadcast_to(values, (n, targets.size, term.width))
            self._compose(p, term, targets, values, where)
            p.counted.append(key)
        self.validate(p)
        return p

    def _lacking(self, entry: str) -> str:
        """``", which ENGINE (envs a-b) lacks"`` where the engine is a mix of engines (its ``parts`` and
        ``part_capabilities``: :mod:`simbackend.mixing`) and some of them lack randomization entry
        ``entry``; else ``""``."""
        parts = getattr(self.engine, "parts", None) or ()
        caps = getattr(self.engine, "part_capabilities", None) or ()
        who = [
            f"{name} ({'no envs' if a == b else f'env {a}' if b == a + 1 else f'envs {a}-{b - 1}'})"
            for (name, a, b), c in zip(parts, caps)
            if entry not in getattr(c, "domain_randomization", frozenset())
        ]
        return f", which {' and '.join(who)} lack{'s' if len(who) == 1 else ''}" if who else ""

    def _rows(self, p: Prepared, name: str) -> np.ndarray:
        """The prepared new rows of field ``name`` (from the envs' current values on first use)."""
        rows = p.fields.get(name)
        if rows is None:
            current = self.values.get(name)
            if current is None:
                model = self.model_value(name)
                rows = np.broadcast_to(model, (p.ids.size,) + model.shape).copy()
            else:
                rows = current[p.ids].copy()
            p.fields[name] = rows
        return rows

    def _compose(self, p: Prepared, term: Term, targets: np.ndarray, values: np.ndarray, where: str) -> None:
        """Fold one term's ``values`` ``(n, T, width)`` into the prepared writes."""
        info = self.info
        kind, op = term.kind, term.operation

        def combine(model: np.ndarray, v: np.ndarray) -> np.ndarray:
            return model * v if op == "scale" else model + v if op == "add" else v

        if kind == "joint_default_pos":
            if p.default_qpos is None:
                base = self.default_qpos
                p.default_qpos = (
                    np.broadcast_to(info.qpos0, (p.ids.size, self.info.nq)).copy()
                    if base is None
                    else base[p.ids].copy()
                )
            cols = info.joint_qposadr[targets]
            p.default_qpos[:, cols] = combine(info.qpos0[cols], values[..., 0])
            return
        if kind == "action_latency":
            p.latency = values[:, 0, 0].copy()
            return
        if kind == "body_velocity_delta":
            for k, b in enumerate(targets):
                p.lin_ang_delta.append((self.free_dofadr(int(b), where), values[:, k, :3], values[:, k, 3:]))
            return
        if kind == "body_force":
            if not self.engine.capabilities.body_forces:
                raise UnsupportedFeatureError(self.engine.name, "body_forces", where)
            p.forces.append((targets, values.copy(), term.duration))
            return
        fname = TERM_KINDS[kind].field
        model = self.model_value(fname)
        rows = self._rows(p, fname)
        if fname == "gravity":
            rows[:] = combine(model, values[:, 0, :])
        elif kind in COMPONENTS:  # geom_friction, geom_compliance, geom_impedance: the term's columns
            for c_i, c in enumerate(term.component_columns):
                rows[:, targets, c] = combine(model[targets, c], values[..., c_i])
            if fname in CONTACT_FIELDS:  # checked in validate, once composed (dmin <= dmax may take two terms)
                p.sources.setdefault(fname, []).append((where, targets))
        elif fname.startswith("dof_"):
            for k, j in enumerate(targets):
                t = int(info.joint_type[j])
                width = 6 if t == JOINT_FREE else 3 if t == JOINT_BALL else 1
                cols = np.arange(int(info.joint_dofadr[j]), int(info.joint_dofadr[j]) + width)
                rows[:, cols] = combine(model[cols], values[:, k, :1])
        elif fname == "body_com":
            rows[:, targets] = combine(model[targets], values)
        elif fname == "body_inertia":
            rows[:, targets] = combine(model[targets], values[..., :1])
        else:  # body_mass, actuator_kp, actuator_kv, actuator_strength: one value per target
            rows[:, targets] = combine(model[targets], values[..., 0])
            if term.scale_inertia:
                inertia = self._rows(p, "body_inertia")
                inertia[:, targets] = self.model_value("body_inertia")[targets] * values[..., :1]

    def compliance_floor(self) -> float:
        """The smallest contact time constant an env may hold, s: two physics timesteps. Below it MuJoCo
        (its ``refsafe`` rule) silently uses two timesteps, so a smaller value would not be what acts."""
        return 2.0 * float(self.info.timestep)

    def contact_rules(self, name: str) -> tuple[tuple[str, float, Callable[[np.ndarray], np.ndarray]], ...]:
        """``(rule, limit, holds)`` for every rule a geom's changed value of :data:`CONTACT_FIELDS` field
        ``name`` must keep, ``holds(rows (n, ngeom, k)) -> (n, ngeom)`` bool (NaN breaks every rule).

        ``geom_compliance``: timeconst >= :meth:`compliance_floor` and dampratio > 0.
        ``geom_impedance``: dmin and dmax in :data:`IMPEDANCE_RANGE` (MuJoCo would clamp them), dmin <= dmax,
        width >= 0."""
        if name == "geom_compliance":
            floor = self.compliance_floor()
            return (
                (
                    f"timeconst >= {floor:g} s (2 physics timesteps; below it MuJoCo acts with {floor:g} s)",
                    floor,
                    lambda r: r[..., 0] >= floor,
                ),
                ("dampratio > 0", 0.0, lambda r: r[..., 1] > 0),
            )
        lo, hi = IMPEDANCE_RANGE
        return (
            (
                f"{lo:g} <= dmin, dmax <= {hi:g} (MuJoCo would clamp them into it)",
                hi,
                lambda r: ((r[..., :2] >= lo) & (r[..., :2] <= hi)).all(-1),
            ),
            ("dmin <= dmax", hi, lambda r: r[..., 0] <= r[..., 1]),
            ("width >= 0", 0.0, lambda r: r[..., 2] >= 0),
        )

    def check_contact(
        self, name: str, rows: np.ndarray, ids: np.ndarray, sources: Sequence[tuple[str, np.ndarray]] = ()
    ) -> None:
        """Refuse rows ``(n, ngeom, k)`` of contact field ``name`` for envs ``ids`` where a geom whose value
        differs from the model's breaks one of :meth:`contact_rules` (the model's own values pass: a
        direct-form solref, a model's dmin > dmax). The error names the plan terms of ``sources``
        (``(term, target ids)``) that reach that geom, and the geom."""
        changed = (rows != self.model_value(name)).any(-1)
        for rule, limit, holds in self.contact_rules(name):
            bad = changed & ~holds(rows)
            if bad.any():
                g = int(np.flatnonzero(bad.any(0))[0])
                terms = [where for where, targets in sources if g in targets]
                raise ValueRangeError(
                    f"{' and '.join(terms) or f'randomized {name}'}: {FIELDS[name][2]} of geom"
                    f" {self.info.geom_names[g]!r}",
                    ids[bad.any(-1)],
                    limit,
                    problem=f"values that break {rule}",
                )

    def validate(self, p: Prepared) -> None:
        """Physical bounds of every new value, before anything is written."""
        limit = V.MAX_REAL_INPUT
        for name in CONTACT_FIELDS:
            if name in p.fields:
                self.check_contact(name, p.fields[name], p.ids, p.sources.get(name, ()))
        for name, rows in p.fields.items():
            _, bound, what = FIELDS[name]
            bad = ~np.isfinite(rows) | (np.abs(rows) > limit)
            if name in ("body_mass", "body_inertia"):
                # > 0 where the model's value is; a massless body (a frame holding sites, the world body)
                # keeps its zeros through a scale, and only a negative value is refused there
                bad |= ~(rows > 0) & (self.model_value(name) > 0) | (rows < 0)
            elif bound is not None:
                bad |= rows < 0
            if bad.any():
                env_rows = bad.reshape(bad.shape[0], -1).any(1)
                rule = "> 0" if bound == 0.0 else ">= 0" if bound is not None else "finite"
                raise ValueRangeError(
                    f"randomized {what}",
                    p.ids[env_rows],
                    limit,
                    problem=f"sampled values that are not {rule} (or beyond float32)",
                )
        if p.default_qpos is not None and not V.bounded(p.default_qpos, MAX_QPOS):
            raise ValueRangeError(
                "randomized default qpos",
                p.ids[~(np.abs(p.default_qpos) <= MAX_QPOS).all(1)],
                MAX_QPOS,
                problem="sampled values that are not finite or beyond the divergence rule's 1e10 (set_state's bound)",
            )
        if p.latency is not None:
            bad = ~np.isfinite(p.latency) | (np.rint(p.latency) < 0) | (np.rint(p.latency) > MAX_LATENCY)
            if bad.any():
                raise ValueRangeError(
                    "randomized action latency",
                    p.ids[bad],
                    MAX_LATENCY,
                    problem="sampled latencies that do not round to a whole number of substeps in [0, 1e6]",
                )
        for _, lin, ang in p.lin_ang_delta:
            if (np.abs(lin) > MAX_QVEL).any() or (np.abs(ang) > MAX_QVEL).any():
                bad = (np.abs(lin) > MAX_QVEL).any(1) | (np.abs(ang) > MAX_QVEL).any(1)
                raise ValueRangeError("body velocity delta", p.ids[bad], MAX_QVEL)
        for _, v, _ in p.forces:
            if (np.abs(v) > limit).any():
                raise ValueRangeError("body force", p.ids[(np.abs(v) > limit).reshape(v.shape[0], -1).any(1)], limit)

    # commit -------------------------------------------------------------------
    def commit(
        self, p: Prepared, qpos: torch.Tensor | None = None, qvel: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Write ``p``. With ``qpos``/``qvel`` (a reset's new state rows), pushes are added to ``qvel``
        and the pair is returned for the caller to write; otherwise pushes write the current state."""
        ids = p.ids
        if p.lin_ang_delta and qpos is None:  # check the pushed state before writing anything
            qpos, qvel = self._state_rows(ids)
            write_state = True
        else:
            write_state = False
        if p.lin_ang_delta:
            qvel = self._pushed(ids, qpos, qvel, p.lin_ang_delta)
        if p.fields:
            self.engine.write_params(ids, p.fields)
            for name, rows in p.fields.items():
                table = self.values.get(name)
                if table is None:
                    model = self.model_value(name)
                    table = self.values[name] = np.broadcast_to(model, (self.num_envs,) + model.shape).copy()
                table[ids] = rows
        if p.default_qpos is not None:
            if self.default_qpos is None:
                self.default_qpos = np.broadcast_to(self.info.qpos0, (self.num_envs, self.info.nq)).copy()
            self.default_qpos[ids] = p.default_qpos
        for bodies, v, duration in p.forces:
            if self.held_force is None:
                self.held_force = np.zeros((self.num_envs, self.info.nbody, 6))
                self.held_left = np.zeros((self.num_envs, self.info.nbody))
            self.held_force[np.ix_(ids, bodies)] = v
            self.held_left[np.ix_(ids, bodies)] = np.inf if duration is None else duration
        if p.latency is not None:
            self.set_latency(ids, np.rint(p.latency).astype(np.int64))
        for key in p.counted:
            counts = self.counts.get(key)
            if counts is None:
                counts = self.counts[key] = np.zeros(self.num_envs, np.int64)
            counts[ids] += 1
        if write_state:
            self.engine.write_state(ids, qpos.contiguous(), qvel.contiguous())
            return None
        return None if qpos is None else (qpos, qvel)

    def _pushed(self, ids: np.ndarray, qpos: torch.Tensor, qvel: torch.Tensor, deltas: list) -> torch.Tensor:
        """``qvel`` with the pushes added (free joints: linear world, angular body-local), checked."""
        info = self.info
        qvel = qvel.clone()
        for adr, lin, ang in deltas:
            j = next(j for j in np.flatnonzero(info.joint_type == JOINT_FREE) if info.joint_dofadr[j] == adr)
            q = int(info.joint_qposadr[j])
            quat = qpos[:, q + 3 : q + 7]
            lin_t = torch.as_tensor(lin, dtype=qvel.dtype, device=qvel.device)
            ang_t = torch.as_tensor(ang, dtype=qvel.dtype, device=qvel.device)
            qvel[:, adr : adr + 3] += lin_t
            qvel[:, adr + 3 : adr + 6] += quat_apply_inverse(quat / quat.norm(dim=-1, keepdim=True), ang_t)
        bad = (qvel.abs() > MAX_QVEL).any(1)
        if bool(bad.any()):
            raise ValueRangeError(
                "qvel after the velocity change",
                ids[bad.cpu().numpy()],
                MAX_QVEL,
                "values the divergence rule would flag",
            )
        return qvel

    # held forces ---------------------------------------------------------------
    def _state_rows(self, ids: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """The engine's current ``(qpos (n, nq), qvel (n, nv))`` of host ``ids``, in its dtype on the device."""
        qpos, qvel = self.engine.read_state()
        rows = torch.as_tensor(ids, device=self.device)
        return (
            torch.as_tensor(qpos, device=self.device)[rows].to(self.dtype),
            torch.as_tensor(qvel, device=self.device)[rows].to(self.dtype),
        )

    # held forces ---------------------------------------------------------------
    def held_forces(self) -> tuple[np.ndarray, torch.Tensor, torch.Tensor] | None:
        """The held ``body_force`` terms acting in the next step: ``(bodies (B,), force (N, B, 3),
        torque (N, B, 3))`` world frame, or ``None``."""
        if self.held_force is None:
            return None
        active = self.held_left > 0
        bodies = np.flatnonzero(active.any(0))
        if not bodies.size:
            return None
        held = np.where(active[:, bodies, None], self.held_force[:, bodies], 0.0)
        f = torch.as_tensor(held[..., :3], dtype=self.dtype, device=self.device)
        t = torch.as_tensor(held[..., 3:], dtype=self.dtype, device=self.device)
        return bodies, f, t

    def age_held_forces(self, seconds: float) -> None:
        """``seconds`` of simulated time passed: held forces whose time is up are dropped."""
        if self.held_force is not None:
            self.held_left -= seconds
            expired = self.held_left <= 0
            self.held_force[expired] = 0.0
            self.held_left[expired] = 0.0

    # action latency ------------------------------------------------------------------------------
    def set_latency(self, ids: np.ndarray, steps: np.ndarray, last_ctrl: torch.Tensor | None = None) -> None:
        """Envs ``ids`` delay their controls by ``steps`` ``(n,)`` whole substeps from the next ``step``.

        The first latency set starts keeping the pending command: ``last_ctrl`` (the controls last
        applied, which without latency are the last ``step``'s ``ctrl``), or :attr:`ctrl_source`'s."""
        steps = np.asarray(steps, np.int64)
        if self.latency is None:
            if not steps.any():
                return  # no env delays: step keeps its one-call path
            self.latency = np.zeros(self.num_envs, np.int64)
            source = self.ctrl_source.ctrl if last_ctrl is None else last_ctrl
            self.pending_ctrl = source.detach().clone()
        self.latency[ids] = steps
        self._latency_dev = None

    def latency_plan(self, nsteps: int) -> tuple[torch.Tensor, list[int]] | None:
        """For a ``step`` of ``nsteps`` substeps: ``(late (N,) on the device, bounds)`` where ``late`` is
        each env's latency capped at ``nsteps`` and ``bounds`` the substeps ``0 = b0 < ... < bk = nsteps``
        at which some env's control changes; ``None`` when no env delays (the one-call path)."""
        if self.latency is None:
            return None
        capped = np.minimum(self.latency, nsteps)
        cuts = np.unique(capped)
        if cuts.size == 1 and cuts[0] == 0:
            return None
        if self._latency_dev is None:
            self._latency_dev = torch.as_tensor(self.latency, device=self.device)
        late = torch.clamp(self._latency_dev, max=nsteps)
        return late, sorted({0, nsteps, *cuts.tolist()})

    def keep_command(self, ctrl: torch.Tensor, hold: torch.Tensor | None) -> None:
        """A ``step`` ended: ``ctrl`` ``(N, nu)`` (the call's command) becomes the pending command of the
        envs not held (``hold``: refused input, whose controls stay as they were)."""
        if self.pending_ctrl is None:
            return
        if hold is None:
            self.pending_ctrl.copy_(ctrl)
        else:
            self.pending_ctrl.copy_(torch.where(hold[:, None], self.pending_ctrl, ctrl.to(self.pending_ctrl.dtype)))

    def env_latency(self) -> np.ndarray:
        """``(N,)`` int64 each env's action latency, substeps (0: none)."""
        return np.zeros(self.num_envs, np.int64) if self.latency is None else self.latency.copy()

    def restore_latency(self, ids: np.ndarray, steps: np.ndarray, pending: torch.Tensor) -> None:
        """Envs ``ids``' latency ``(n,)`` and pending command ``(n, nu)`` from a snapshot."""
        steps = np.asarray(steps, np.int64)
        if self.latency is None and not steps.any():
            return
        self.set_latency(ids, steps)
        if self.pending_ctrl is not None:
            rows = torch.as_tensor(ids, device=self.pending_ctrl.device)
            self.pending_ctrl[rows] = pending.to(device=self.pending_ctrl.device, dtype=self.pending_ctrl.dtype)

    # per-env values from a snapshot or a named state ------------------------------------------
    def prepare_values(self, ids: np.ndarray, values: Mapping[str, Any], argument: str) -> Prepared:
        """The per-env fields of ``values`` (``(n, ...)`` each, sorted ``ids``) that differ from what
        the envs hold, checked (bounds, engine support) and ready for :meth:`commit`; writes nothing."""
        p = Prepared(ids=ids)
        support = self.support()
        for name, rows in values.items():
            rows = np.asarray(rows, np.float64)
            current = self.table_rows(name, ids)
            if rows.shape != current.shape:
                raise InputShapeError(f"{argument} ({name})", current.shape, rows.shape)
            if np.array_equal(rows, current):
                continue
            terms = [k for k, spec in TERM_KINDS.items() if spec.field == name]
            if not any(f"{k}:{phase}" in support for k in terms for phase in PHASES):
                raise UnsupportedFeatureError(
                    self.engine.name,
                    f"per-env {name}",
                    f"{argument} holds per-env values of {name} this backend cannot apply"
                    + (self._lacking(f"{terms[0]}:reset") if terms else ""),
                )
            p.fields[name] = rows.copy()
        self.validate(p)
        return p

    def restore_rows(self, ids: np.ndarray, default_qpos: np.ndarray, force: np.ndarray, left: np.ndarray) -> None:
        """Restore envs ``ids``' default configuration ``(n, nq)`` and held forces ``(n, nbody, 6)`` with
        their times left ``(n, nbody)`` (``inf``: until replaced), from a snapshot."""
        if self.default_qpos is not None or not (default_qpos == self.info.qpos0).all():
            if self.default_qpos is None:
                self.default_qpos = np.broadcast_to(self.info.qpos0, (self.num_envs, self.info.nq)).copy()
            self.default_qpos[ids] = default_qpos
        if self.held_force is not None or force.any():
            if self.held_force is None:
                self.held_force = np.zeros((self.num_envs, self.info.nbody, 6))
                self.held_left = np.zeros((self.num_envs, self.info.nbody))
            self.held_force[ids] = force
            self.held_left[ids] = left
