"""How a plan reaches a backend: resolution, sampling, validation, then one write.

:class:`RandomizationMixin` is part of :class:`~simbackend.contract.SimBackend`.
Applying a plan's terms of one phase to some envs runs in two steps:

1. **prepare** (no writes): check every term against the backend's declared
   support for the phase, resolve targets (cached per term), draw the values
   (:mod:`.sampling`), compose the envs' new per-env model fields from the
   **model's** values, and validate them (positive masses and inertias,
   non-negative friction, damping, armature, frictionloss and gains, float32
   range). Any failure raises here, and nothing has changed.
2. **commit**: one call of the backend's ``_write_env_params`` hook with the
   complete new rows of every field touched, then the contract's own terms
   (the per-env default pose, pushes through the state, held forces), then
   the draw counters advance.

Per-env model fields have engine-neutral names (:data:`FIELDS`); a backend
implements ``_write_env_params(env_ids, values)`` and
``_read_env_params(field)`` for the fields of the terms it declares in
``capabilities.domain_randomization`` (entries ``"<term>:<phase>"``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import torch

from simbackend import _validate as V
from simbackend.divergence import MAX_QVEL
from simbackend.errors import (
    ArgumentTypeError,
    IndexRangeError,
    InvalidArgumentError,
    NonFiniteError,
    UnknownNameError,
    UnsupportedFeatureError,
    ValueRangeError,
)
from simbackend.math import quat_apply_inverse
from simbackend.model_info import JOINT_BALL, JOINT_FREE, JOINT_HINGE, JOINT_SLIDE

from .plan import FRICTION_COMPONENTS, PHASES, TERM_KINDS, RandomizationPlan, Term
from .sampling import draw, uniforms

#: per-env model fields: name -> (ModelInfo attribute holding the model's values, lower bound, what)
FIELDS: Mapping[str, tuple[str, Optional[float], str]] = {
    "body_mass": ("body_mass", 0.0, "mass"),
    "body_com": ("body_com", None, "centre of mass"),
    "body_inertia": ("body_inertia", 0.0, "principal inertia"),
    "geom_friction": ("geom_friction", -1.0, "friction"),
    "actuator_kp": ("actuator_kp", -1.0, "kp"),
    "actuator_kv": ("actuator_kv", -1.0, "kv"),
    "dof_damping": ("dof_damping", -1.0, "damping"),
    "dof_armature": ("dof_armature", -1.0, "armature"),
    "dof_frictionloss": ("dof_frictionloss", -1.0, "frictionloss"),
    "gravity": ("gravity", None, "gravity"),
}
#: bounds: 0.0 means "> 0" (masses, inertias), -1.0 means ">= 0"

#: terms the contract applies itself, from the state and the pending forces (no engine field)
CORE_TERMS = ("joint_default_pos", "body_velocity_delta", "body_force")


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
    terms = ["joint_default_pos", "body_velocity_delta"] + (["body_force"] if body_forces else [])
    return frozenset(f"{t}:{p}" for t in terms for p in PHASES)


@dataclass
class _Prepared:
    """Everything one application writes, computed and validated before any write."""

    ids: np.ndarray                                    # (n,) sorted env ids
    fields: dict[str, np.ndarray] = field(default_factory=dict)     # field -> (n, ...) new rows
    default_qpos: Optional[np.ndarray] = None          # (n, nq)
    qvel_delta: Optional[np.ndarray] = None            # (n, nv), world/local per the contract
    lin_ang_delta: list = field(default_factory=list)  # (free joint dofadr, (n, 3) lin world, (n, 3) ang world)
    forces: list = field(default_factory=list)         # (body ids (T,), (n, T, 6), duration or None)
    counted: list = field(default_factory=list)        # stream keys drawn
    dropped: list = field(default_factory=list)


class RandomizationMixin:
    """Domain randomization members of :class:`~simbackend.contract.SimBackend`."""

    # ------------------------------------------------------------------
    # public API
    # ------------------------------------------------------------------
    def get_dr_capabilities(self) -> dict[str, frozenset[str]]:
        """``{term kind: phases}`` this backend (on this device) applies; absent kinds are unsupported."""
        self._check_open()
        out: dict[str, set[str]] = {}
        for entry in self._dr_support():
            kind, phase = entry.split(":")
            out.setdefault(kind, set()).add(phase)
        return {k: frozenset(v) for k, v in sorted(out.items())}

    def apply_init_randomization(self, plan: RandomizationPlan, *, strict: bool = True) -> list[str]:
        """Apply the plan's ``init`` terms to every env: per-env model parameters, set on the cold path.

        Call it before the first ``step`` (it may recompute derived model
        constants for every env). Every env draws its values from
        ``(plan.seed, term, env id, draw count)`` (:mod:`simbackend.randomization`).

        Args:
            plan: a :class:`RandomizationPlan`.
            strict: ``True``: a term this backend does not support in this
                phase raises ``UnsupportedFeatureError`` before anything
                changes. ``False``: such terms are skipped.

        Returns:
            The names of the terms skipped (``"<index>:<kind>"`` unless named).
        """
        self._enter_mutation("apply_init_randomization")
        prepared = self._dr_prepare(plan, "init", np.arange(self.num_envs), strict)
        self._dr_commit(prepared)
        self._notify_write(prepared.ids, "apply_init_randomization")
        return prepared.dropped

    def apply_interval_randomization(self, plan: RandomizationPlan, env_ids: Any = None, *,
                                     terms: Optional[Sequence[str]] = None, strict: bool = True) -> list[str]:
        """Apply the plan's ``interval`` terms to ``env_ids`` (``None``: all) during an episode.

        Args:
            plan: a :class:`RandomizationPlan`.
            env_ids: envs to resample (ids, a bool mask or ``None``); the others are untouched.
            terms: names of the interval terms to apply (default: all of them);
                :class:`~simbackend.randomization.IntervalScheduler` passes the due ones.
            strict: as in :meth:`apply_init_randomization`.

        Returns:
            The names of the terms skipped (``strict=False``).
        """
        self._enter_mutation("apply_interval_randomization")
        ids = np.unique(V.env_ids(env_ids, self.num_envs, host_ids=self._host_ids))
        prepared = self._dr_prepare(plan, "interval", ids, strict, only=terms)
        self._dr_commit(prepared)
        self._notify_write(ids, "apply_interval_randomization")
        return prepared.dropped

    def apply_body_velocity_delta(self, body_ids: Any, delta: Any, env_ids: Any = None) -> None:
        """Change the velocity of free bodies (a push): ``(n, B, 6)`` linear (3) and angular (3), world frame.

        Each body must be attached to the world by a free joint; its frame
        origin's linear velocity and its angular velocity change by exactly
        ``delta``. The positions are untouched; the envs not named keep their state.
        """
        self._enter_mutation("apply_body_velocity_delta")
        ids = V.env_ids(env_ids, self.num_envs, host_ids=self._host_ids)
        bodies = V.index_array(body_ids, self._info.nbody, "body", "body_ids", allow_duplicates=False,
                               host_ids=self._host_ids)
        adrs = [self._free_dofadr(int(b), "body_ids") for b in bodies]
        d = V.real_tensor(delta, "delta", (ids.size, bodies.size, 6), device=torch.device("cpu"),
                          dtype=torch.float64).numpy()
        if not np.isfinite(d).all():
            raise NonFiniteError("delta", ids[~np.isfinite(d).all(axis=(1, 2))])
        if not ids.size or not bodies.size:
            return
        order = np.argsort(ids, kind="stable")
        p = _Prepared(ids=ids[order])
        p.lin_ang_delta = [(adr, d[order, k, :3], d[order, k, 3:]) for k, adr in enumerate(adrs)]
        self._dr_commit(p)
        self._notify_write(p.ids, "apply_body_velocity_delta")

    # per-env model values --------------------------------------------------
    def get_env_body_mass(self) -> torch.Tensor:
        """``(N, nbody)`` mass of every body in every env as the engine holds it, kg (world 0)."""
        return self._env_field("body_mass")

    def get_env_body_com(self) -> torch.Tensor:
        """``(N, nbody, 3)`` centre of mass of every body in its body frame, m."""
        return self._env_field("body_com")

    def get_env_body_inertia(self) -> torch.Tensor:
        """``(N, nbody, 3)`` principal moments of inertia about the centre of mass, kg m^2.

        The principal axes are the model's (``info.body_iquat``, relative to the body frame).
        """
        return self._env_field("body_inertia")

    def get_env_geom_friction(self) -> torch.Tensor:
        """``(N, ngeom, 3)`` friction coefficients (sliding, torsional, rolling) of every geom."""
        return self._env_field("geom_friction")

    def get_env_actuator_gains(self) -> Any:
        """Per-env servo gains: :class:`~simbackend.contract.ActuatorGains` of ``(N, nu)`` tensors."""
        from simbackend.contract import ActuatorGains

        return ActuatorGains(self._env_field("actuator_kp"), self._env_field("actuator_kv"))

    def get_env_joint_damping(self) -> torch.Tensor:
        """``(N, nv)`` joint damping per qvel column (``get_joint_qvel_indices`` gives a joint's)."""
        return self._env_field("dof_damping")

    def get_env_joint_armature(self) -> torch.Tensor:
        """``(N, nv)`` joint armature (rotor inertia) per qvel column."""
        return self._env_field("dof_armature")

    def get_env_joint_frictionloss(self) -> torch.Tensor:
        """``(N, nv)`` joint dry friction (frictionloss) per qvel column."""
        return self._env_field("dof_frictionloss")

    def get_env_gravity(self) -> torch.Tensor:
        """``(N, 3)`` gravity of every env, world frame, m/s^2."""
        return self._env_field("gravity")

    def get_env_default_qpos(self) -> torch.Tensor:
        """``(N, nq)`` each env's default configuration: the model's ``qpos0`` plus any
        ``joint_default_pos`` randomization (an encoder-offset model for resets and action offsets)."""
        self._check_open()
        if self._dr_default_qpos is None:
            return self._out(np.broadcast_to(self._info.qpos0, (self.num_envs, self.nq)))
        return self._out(self._dr_default_qpos)

    # ------------------------------------------------------------------
    # backend hooks
    # ------------------------------------------------------------------
    def _write_env_params(self, env_ids: np.ndarray, values: dict[str, np.ndarray]) -> None:
        """Write per-env model fields: ``values[field]`` ``(n, ...)`` float64 rows for sorted ``env_ids``.

        Only fields of terms the backend declares are passed; the rows are
        complete (untouched entries hold their current values) and validated.
        A backend that must refuse a value (an engine limit) raises before it
        writes anything.
        """
        raise UnsupportedFeatureError(self.name, "domain_randomization")

    def _read_env_params(self, name: str) -> np.ndarray:
        """``(N, ...)`` the engine's current per-env values of field ``name`` (default: the model's)."""
        return np.broadcast_to(self._dr_model_value(name), (self.num_envs,) + self._dr_model_value(name).shape)

    # ------------------------------------------------------------------
    # internals
    # ------------------------------------------------------------------
    def _dr_init_state(self) -> None:
        self._dr_counts: dict[int, np.ndarray] = {}
        self._dr_resolved: dict[tuple, np.ndarray] = {}
        self._dr_values: dict[str, np.ndarray] = {}
        self._dr_default_qpos: Optional[np.ndarray] = None
        # held forces (body_force terms): (N, nbody, 6) and seconds left (inf: until replaced)
        self._dr_force: Optional[np.ndarray] = None
        self._dr_force_left: Optional[np.ndarray] = None

    def _dr_support(self) -> frozenset[str]:
        caps = self.capabilities  # capabilities objects from before these fields declare no engine terms
        return (frozenset(getattr(caps, "domain_randomization", frozenset()))
                | core_dr_support(bool(getattr(caps, "body_forces", False))))

    def _dr_model_value(self, name: str) -> np.ndarray:
        return np.asarray(getattr(self._info, FIELDS[name][0]), np.float64)

    def _env_field(self, name: str) -> torch.Tensor:
        self._check_open()
        return self._out(np.asarray(self._read_env_params(name), np.float64))

    def _free_dofadr(self, body: int, argument: str) -> int:
        info = self._info
        for j in np.flatnonzero(info.joint_body == body):
            if info.joint_type[j] == JOINT_FREE:
                return int(info.joint_dofadr[j])
        raise IndexRangeError(f"{argument}: body {info.body_names[body]!r} is not attached by a free joint;"
                              " a velocity change needs a free body")

    # resolution -------------------------------------------------------------
    def _dr_names(self, element: str) -> tuple[str, ...]:
        info = self._info
        return {"body": info.body_names, "geom": info.geom_names, "joint": info.joint_names,
                "actuator": info.actuator_names}[element]

    def _dr_targets(self, term: Term, where: str) -> np.ndarray:
        """Element ids of ``term``'s targets, sorted, checked for the term kind (cached)."""
        key = (term.kind, term.targets)
        hit = self._dr_resolved.get(key)
        if hit is not None:
            return hit
        spec = TERM_KINDS[term.kind]
        info = self._info
        if spec.element is None:
            ids = np.zeros(0, np.int64)
        else:
            names = self._dr_names(spec.element)
            if term.targets is None:
                ids = np.arange(len(names), dtype=np.int64)
                if spec.element == "body":
                    ids = ids[1:]
                ids = self._dr_eligible(term, ids, where, implicit=True)
            else:
                found: set[int] = set()
                for entry in term.targets:
                    if entry in names:
                        found.add(names.index(entry))
                        continue
                    try:
                        pattern = re.compile(entry)
                    except re.error as e:
                        raise InvalidArgumentError(f"{where}: target {entry!r} is neither a {spec.element} name"
                                                   f" nor a valid regular expression ({e})") from None
                    hits = [i for i, n in enumerate(names) if pattern.fullmatch(n)]
                    if not hits:
                        err = UnknownNameError(spec.element, entry, names)
                        err.args = (f"{where}: {err} (no {spec.element} name matches it as a pattern either)",)
                        raise err
                    found.update(hits)
                ids = self._dr_eligible(term, np.array(sorted(found), np.int64), where, implicit=False)
        if spec.element is not None and not ids.size:
            raise InvalidArgumentError(f"{where}: no {spec.element} of this model can take this term")
        ids.flags.writeable = False
        self._dr_resolved[key] = ids
        return ids

    def _dr_eligible(self, term: Term, ids: np.ndarray, where: str, implicit: bool) -> np.ndarray:
        """``ids`` the term kind applies to; named ones that do not qualify raise, implicit ones are dropped."""
        info = self._info
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
        elif kind == "joint_default_pos":
            ok = np.isin(info.joint_type[ids], (JOINT_HINGE, JOINT_SLIDE))
            why = "not a hinge or slide joint"
        else:
            ok = np.ones(ids.size, bool)
            why = ""
        if not implicit and not ok.all():
            names = self._dr_names(TERM_KINDS[kind].element)
            bad = [names[i] for i in ids[~ok]]
            raise InvalidArgumentError(f"{where}: {TERM_KINDS[kind].element}(s) {bad[:5]} cannot take it ({why})")
        return ids[ok]

    # prepare ------------------------------------------------------------------
    def _dr_prepare(self, plan: Any, phase: str, ids: np.ndarray, strict: Any,
                    only: Optional[Sequence[str]] = None) -> _Prepared:
        if not isinstance(plan, RandomizationPlan):
            raise ArgumentTypeError(f"plan: expected a RandomizationPlan, got {type(plan).__name__}"
                                    " (RandomizationPlan.from_dict reads a dict)")
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
        support = self._dr_support()
        p = _Prepared(ids=ids)
        n = ids.size
        for index, term in selected:
            name = plan.term_name(index)
            if f"{term.kind}:{phase}" not in support:
                if strict:
                    raise UnsupportedFeatureError(self.name, f"domain randomization term {term.kind!r} in phase {phase!r}",
                                                  f"plan term {name!r} (get_dr_capabilities() lists what this backend"
                                                  " applies; strict=False skips such terms)")
                p.dropped.append(name)
                continue
            where = f"plan term {name!r} ({term.kind})"
            targets = self._dr_targets(term, where)
            if not n:
                continue
            key = plan.stream_key(index)
            counts = self._dr_counts.get(key)
            drawn = np.zeros(n, np.int64) if counts is None else counts[ids]
            groups = 1 if term.shared or TERM_KINDS[term.kind].element is None else targets.size
            u = uniforms(plan.seed, key, ids, drawn, groups * term.width).reshape(n, groups, term.width)
            values = draw(term.distribution, u)
            if groups == 1 and targets.size > 1:
                values = np.broadcast_to(values, (n, targets.size, term.width))
            self._dr_compose(p, term, targets, values, where)
            p.counted.append(key)
        self._dr_validate(p)
        return p

    def _dr_rows(self, p: _Prepared, name: str) -> np.ndarray:
        """The prepared new rows of field ``name`` (from the envs' current values on first use)."""
        rows = p.fields.get(name)
        if rows is None:
            current = self._dr_values.get(name)
            if current is None:
                model = self._dr_model_value(name)
                rows = np.broadcast_to(model, (p.ids.size,) + model.shape).copy()
            else:
                rows = current[p.ids].copy()
            p.fields[name] = rows
        return rows

    def _dr_compose(self, p: _Prepared, term: Term, targets: np.ndarray, values: np.ndarray, where: str) -> None:
        """Fold one term's ``values`` ``(n, T, width)`` into the prepared writes."""
        info = self._info
        kind, op = term.kind, term.operation

        def combine(model: np.ndarray, v: np.ndarray) -> np.ndarray:
            return model * v if op == "scale" else model + v if op == "add" else v

        if kind == "joint_default_pos":
            if p.default_qpos is None:
                base = self._dr_default_qpos
                p.default_qpos = (np.broadcast_to(info.qpos0, (p.ids.size, self.nq)).copy() if base is None
                                  else base[p.ids].copy())
            cols = info.joint_qposadr[targets]
            p.default_qpos[:, cols] = combine(info.qpos0[cols], values[..., 0])
            return
        if kind == "body_velocity_delta":
            for k, b in enumerate(targets):
                p.lin_ang_delta.append((self._free_dofadr(int(b), where), values[:, k, :3], values[:, k, 3:]))
            return
        if kind == "body_force":
            if not self.capabilities.body_forces:
                raise UnsupportedFeatureError(self.name, "body_forces", where)
            p.forces.append((targets, values.copy(), term.duration))
            return
        fname = TERM_KINDS[kind].field
        model = self._dr_model_value(fname)
        rows = self._dr_rows(p, fname)
        if fname == "gravity":
            rows[:] = combine(model, values[:, 0, :])
        elif fname == "geom_friction":
            comps = [FRICTION_COMPONENTS.index(c) for c in (term.components or ("sliding",))]
            for c_i, c in enumerate(comps):
                rows[:, targets, c] = combine(model[targets, c], values[..., c_i])
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
        else:  # body_mass, actuator_kp, actuator_kv: one value per target
            rows[:, targets] = combine(model[targets], values[..., 0])
            if term.scale_inertia:
                inertia = self._dr_rows(p, "body_inertia")
                inertia[:, targets] = self._dr_model_value("body_inertia")[targets] * values[..., :1]

    def _dr_validate(self, p: _Prepared) -> None:
        """Physical bounds of every new value, before anything is written."""
        limit = V.MAX_REAL_INPUT
        for name, rows in p.fields.items():
            _, bound, what = FIELDS[name]
            bad = ~np.isfinite(rows) | (np.abs(rows) > limit)
            if name in ("body_mass", "body_inertia"):
                bad |= ~(rows > 0)
                bad[:, 0] = False  # the world body holds zeros and takes no term
            elif bound is not None:
                bad |= rows < 0
            if bad.any():
                env_rows = bad.reshape(bad.shape[0], -1).any(1)
                rule = "> 0" if bound == 0.0 else ">= 0" if bound is not None else "finite"
                raise ValueRangeError(f"randomized {what}", p.ids[env_rows], limit,
                                      problem=f"sampled values that are not {rule} (or beyond float32)")
        if p.default_qpos is not None and not np.isfinite(p.default_qpos).all():
            raise ValueRangeError("randomized default qpos", p.ids[~np.isfinite(p.default_qpos).all(1)], limit,
                                  problem="non-finite sampled values")
        for _, lin, ang in p.lin_ang_delta:
            if (np.abs(lin) > MAX_QVEL).any() or (np.abs(ang) > MAX_QVEL).any():
                bad = (np.abs(lin) > MAX_QVEL).any(1) | (np.abs(ang) > MAX_QVEL).any(1)
                raise ValueRangeError("body velocity delta", p.ids[bad], MAX_QVEL)
        for _, v, _ in p.forces:
            if (np.abs(v) > limit).any():
                raise ValueRangeError("body force", p.ids[(np.abs(v) > limit).reshape(v.shape[0], -1).any(1)], limit)

    # commit -------------------------------------------------------------------
    def _dr_commit(self, p: _Prepared, qpos: Optional[torch.Tensor] = None,
                   qvel: Optional[torch.Tensor] = None) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
        """Write ``p``. With ``qpos``/``qvel`` (a reset's new state rows), pushes are added to ``qvel``
        and the pair is returned for the caller to write; otherwise pushes write the current state."""
        ids = p.ids
        if p.lin_ang_delta and qpos is None:  # check the pushed state before writing anything
            qpos = self.get_qpos()[torch.as_tensor(ids, device=self._device)].to(self.hook_dtype)
            qvel = self.get_qvel()[torch.as_tensor(ids, device=self._device)].to(self.hook_dtype)
            write_state = True
        else:
            write_state = False
        if p.lin_ang_delta:
            qvel = self._dr_pushed(ids, qpos, qvel, p.lin_ang_delta)
        if p.fields:
            self._write_env_params(ids, p.fields)
            for name, rows in p.fields.items():
                table = self._dr_values.get(name)
                if table is None:
                    model = self._dr_model_value(name)
                    table = self._dr_values[name] = np.broadcast_to(model, (self.num_envs,) + model.shape).copy()
                table[ids] = rows
        if p.default_qpos is not None:
            if self._dr_default_qpos is None:
                self._dr_default_qpos = np.broadcast_to(self._info.qpos0, (self.num_envs, self.nq)).copy()
            self._dr_default_qpos[ids] = p.default_qpos
        for bodies, v, duration in p.forces:
            if self._dr_force is None:
                self._dr_force = np.zeros((self.num_envs, self._info.nbody, 6))
                self._dr_force_left = np.zeros((self.num_envs, self._info.nbody))
            self._dr_force[np.ix_(ids, bodies)] = v
            self._dr_force_left[np.ix_(ids, bodies)] = np.inf if duration is None else duration
        for key in p.counted:
            counts = self._dr_counts.get(key)
            if counts is None:
                counts = self._dr_counts[key] = np.zeros(self.num_envs, np.int64)
            counts[ids] += 1
        if write_state:
            self._set_state(ids, qpos.contiguous(), qvel.contiguous())
            return None
        return None if qpos is None else (qpos, qvel)

    def _dr_pushed(self, ids: np.ndarray, qpos: torch.Tensor, qvel: torch.Tensor, deltas: list) -> torch.Tensor:
        """``qvel`` with the pushes added (free joints: linear world, angular body-local), checked."""
        info = self._info
        qvel = qvel.clone()
        for adr, lin, ang in deltas:
            j = next(j for j in np.flatnonzero(info.joint_type == JOINT_FREE) if info.joint_dofadr[j] == adr)
            q = int(info.joint_qposadr[j])
            quat = qpos[:, q + 3:q + 7]
            lin_t = torch.as_tensor(lin, dtype=qvel.dtype, device=qvel.device)
            ang_t = torch.as_tensor(ang, dtype=qvel.dtype, device=qvel.device)
            qvel[:, adr:adr + 3] += lin_t
            qvel[:, adr + 3:adr + 6] += quat_apply_inverse(quat / quat.norm(dim=-1, keepdim=True), ang_t)
        bad = (qvel.abs() > MAX_QVEL).any(1)
        if bool(bad.any()):
            raise ValueRangeError("qvel after the velocity change", ids[bad.cpu().numpy()], MAX_QVEL,
                                  "values the divergence rule would flag")
        return qvel

    # held forces ---------------------------------------------------------------
    def _dr_add_held_forces(self) -> Optional[tuple[np.ndarray, torch.Tensor, torch.Tensor]]:
        """Add the held ``body_force`` terms to the pending forces of this step; returns what was added."""
        if self._dr_force is None:
            return None
        active = self._dr_force_left > 0
        bodies = np.flatnonzero(active.any(0))
        if not bodies.size:
            return None
        held = np.where(active[:, bodies, None], self._dr_force[:, bodies], 0.0)
        f = torch.as_tensor(held[..., :3], dtype=self.hook_dtype, device=self._device)
        t = torch.as_tensor(held[..., 3:], dtype=self.hook_dtype, device=self._device)
        self._apply_body_force(bodies, f, t)
        return bodies, f, t

    def _dr_age_held_forces(self, seconds: float) -> None:
        if self._dr_force is not None:
            self._dr_force_left -= seconds
            expired = self._dr_force_left <= 0
            self._dr_force[expired] = 0.0
            self._dr_force_left[expired] = 0.0
