"""The tier runners and :func:`run_parity` (see :mod:`simbackend.parity`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from simbackend import checks
from simbackend.errors import InvalidArgumentError
from simbackend.math import quat_angle_between
from simbackend.model_info import JOINT_FREE
from simbackend.registry import make_backend
from simbackend.sampling import random_configurations

from .report import ParityReport, ParityRow
from .tolerances import (
    CONTACT_DURATION,
    CONTACT_HEIGHT_TOL,
    DR_NUM_ENVS,
    DR_SCALE,
    DR_SEED,
    DYN_DURATION,
    DYN_INITIAL_OFFSET,
    DYN_NUM_ENVS,
    DYN_POS_TOL,
    DYN_RANDOM_HOLD,
    DYN_SINE_AMPLITUDE,
    DYN_SINE_HZ,
    JAC_TOL,
    KIN_ANGLE_TOL,
    KIN_NUM_ENVS,
    KIN_POS_TOL,
    KIN_UNLIMITED_HINGE,
    KIN_UNLIMITED_SLIDE,
    MODEL_GRAVITY_ATOL,
    MODEL_LENGTH_ATOL,
    MODEL_RTOL,
    MODEL_SCALE_FLOOR,
    ROLLOUT_TIERS,
    SERVO_DURATION,
    SERVO_OFFSET,
    SERVO_TOL,
    TIERS,
    _model_label,
    default_tiers,
)


def run_parity(
    sim: str,
    model: Any,
    *,
    reference: str = "mujoco",
    tiers: Iterable[str] | None = None,
    num_envs: int = KIN_NUM_ENVS,
    seed: int = 0,
    device: Any = None,
    options: dict | None = None,
) -> ParityReport:
    """Compare backend ``sim`` with ``reference`` on ``model``, tier by tier.

    Args:
        sim: registered name of the backend under test.
        model: a model source (built-in name such as ``"box_drop"``, MJCF/URDF
            path, ``mujoco.MjSpec``), given to both backends.
        reference: registered name of the reference backend.
        tiers: tiers to run (:data:`TIERS`); ``None`` for :func:`default_tiers`.
        num_envs: envs (random configurations) of the kinematics and jacobian tiers.
        seed: seed of the random configurations, initial states and controls,
            and of both backends.
        device: torch device of the backend under test (``None``: its default);
            the reference runs on its default device (MuJoCo: the CPU).
        options: construction options (:mod:`simbackend.options`) given to both
            backends (per-engine blocks reach only their engine), so that model
            options such as ``actuators`` build the same model on both.

    Returns:
        A :class:`ParityReport`; its rows say what held and what did not.

    Raises:
        InvalidArgumentError: unknown tier names or ``num_envs < 1``.
        SimBackendError: the *reference* cannot load the model (a bad model
            source, not a parity failure). A backend under test that cannot load
            it gives a failed ``load`` row instead.
    """
    chosen = default_tiers(model) if tiers is None else tuple(dict.fromkeys(tiers))
    unknown = [t for t in chosen if t not in TIERS]
    if unknown:
        raise InvalidArgumentError(f"tiers: unknown tier(s) {unknown}; known tiers: {', '.join(TIERS)}")
    chosen = tuple(t for t in TIERS if t in chosen)  # canonical order
    num_envs = checks.integer(num_envs, "num_envs", minimum=1)
    report = ParityReport(sim, reference, _model_label(model), chosen, num_envs, int(seed))
    ctx = _Context(sim, reference, model, seed=int(seed), device=device, options=dict(options or {}))

    # the reference first: a model it cannot load is the caller's error, not a parity failure
    ctx.build_reference(1).close()
    try:
        probe = ctx.build_sim(1)
    except Exception as e:  # any failure to build is reported as the load row
        report.rows.append(ParityRow("load", "build", None, None, False, detail=f"{type(e).__name__}: {e}"))
        return report
    report.delegated = tuple(sorted(probe.capabilities.delegated))
    report.known_differences = tuple(probe.capabilities.known_differences)
    probe.close()
    report.rows.append(ParityRow("load", "build", None, None, True, detail="the backend built the model"))

    runners: dict[str, Callable[[_Context, int], list[ParityRow]]] = {
        "model": _tier_model,
        "kinematics": _tier_kinematics,
        "jacobian": _tier_jacobian,
        "dynamics": _tier_dynamics,
        "servo": _tier_servo,
        "contact": _tier_contact,
        "randomized": _tier_randomized,
    }
    for tier in chosen:
        try:
            rows = runners[tier](ctx, num_envs)
        except Exception as e:  # a tier that cannot run is a failed tier, reported with the reason
            rows = [ParityRow(tier, "run", None, None, False, detail=f"{type(e).__name__}: {e}")]
        if report.delegated and tier in ROLLOUT_TIERS:  # the result depends on MuJoCo-computed forces
            rows = [dataclasses.replace(r, delegated=True) for r in rows]
        report.rows.extend(rows)
    return report


class _Context:
    """What every tier needs: both backend names, the model, the seed, the device and options."""

    def __init__(self, sim: str, reference: str, model: Any, *, seed: int, device: Any, options: dict):
        self.sim, self.reference, self.model, self.seed, self.device = sim, reference, model, seed, device
        self.options = options

    def build_sim(self, num_envs: int) -> Any:
        """The backend under test, on the requested device."""
        return make_backend(self.sim, self.model, num_envs, device=self.device, seed=self.seed, **self.options)

    def build_reference(self, num_envs: int) -> Any:
        """The reference, on its default device (even when it is the same backend as the one under test)."""
        return make_backend(self.reference, self.model, num_envs, seed=self.seed, **self.options)

    def pair(self, num_envs: int) -> tuple[Any, Any]:
        """(backend under test, reference), each with ``num_envs`` envs."""
        ref = self.build_reference(num_envs)
        try:
            return self.build_sim(num_envs), ref
        except BaseException:
            ref.close()
            raise

    def rng(self, tier: str) -> np.random.Generator:
        """A generator per tier, so adding a tier never changes another's inputs."""
        return np.random.default_rng([self.seed, TIERS.index(tier)])


def _np(t: Any) -> np.ndarray:
    """float64 numpy copy of a contract output tensor (any device)."""
    return t.detach().cpu().double().numpy()


# ----------------------------------------------------------------------
# error measures
# ----------------------------------------------------------------------
def _abs_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| elementwise, 0 where both are the same infinity."""
    with np.errstate(invalid="ignore"):
        d = np.abs(a - b)
    same = a == b  # equal infinities included
    return np.where(same, 0.0, np.where(np.isnan(d), np.inf, d))


def _row_from_errors(
    tier: str,
    quantity: str,
    err: np.ndarray,
    tol: float,
    where: Callable[[tuple[int, ...]], str],
) -> ParityRow:
    """Row of an error array: its max, and ``where(index)`` of the worst element in the detail."""
    if err.size == 0:
        return ParityRow(tier, quantity, 0.0, tol, True, detail="nothing to compare")
    idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(err)), err.shape))  # ints: details read (7,)
    worst = float(err[idx])
    detail = f"identical ({err.size} values)" if worst == 0 else f"worst: {where(idx)}"
    return ParityRow(tier, quantity, worst, tol, bool(worst <= tol), detail=detail)


def _mismatch_row(tier: str, quantity: str, detail: str) -> ParityRow:
    return ParityRow(tier, quantity, math.inf, 0.0, False, detail=detail)


# ----------------------------------------------------------------------
# model
# ----------------------------------------------------------------------
_NAME_TABLES = ("body_names", "joint_names", "site_names", "actuator_names", "sensor_names")
_SIZES = ("nq", "nv", "num_actuators", "num_dof")


def _tier_model(ctx: _Context, num_envs: int) -> list[ParityRow]:
    sim, ref = ctx.pair(1)
    with sim, ref:
        rows = [_names_row(q, getattr(sim, q), getattr(ref, q)) for q in _NAME_TABLES]
        bad = [f"{k} {getattr(sim, k)} vs {getattr(ref, k)}" for k in _SIZES if getattr(sim, k) != getattr(ref, k)]
        rows.append(
            ParityRow(
                "model",
                "sizes",
                float(len(bad)),
                0.0,
                not bad,
                detail="; ".join(bad) or ", ".join(f"{k} {getattr(ref, k)}" for k in _SIZES),
            )
        )
        try:
            mine = sim.model_fields()
        except Exception as e:
            return rows + [_mismatch_row("model", "model_fields", f"{type(e).__name__}: {e}")]
        theirs = ref.model_fields()
        names = {"body": ref.body_names, "joint": ref.joint_names, "actuator": ref.actuator_names}
        rows += _field_rows(mine, theirs, names, tuple(sim.capabilities.known_differences))
    return rows


def _names_row(quantity: str, mine: Sequence[str], theirs: Sequence[str]) -> ParityRow:
    mine, theirs = tuple(mine), tuple(theirs)
    diffs = [
        i for i in range(max(len(mine), len(theirs))) if i >= len(mine) or i >= len(theirs) or mine[i] != theirs[i]
    ]
    if not diffs:
        return ParityRow("model", quantity, 0.0, 0.0, True, detail=f"{len(theirs)} names, same order")
    i = diffs[0]
    a = repr(mine[i]) if i < len(mine) else "(none)"
    b = repr(theirs[i]) if i < len(theirs) else "(none)"
    return ParityRow(
        "model",
        quantity,
        float(len(diffs)),
        0.0,
        False,
        detail=f"{len(diffs)} ids differ; first id {i}: {a} vs reference {b} ({len(mine)} vs {len(theirs)} names)",
    )


#: model_fields keys compared by the model tier: (key, kind of the first axis, measure)
_FIELD_SPECS = (
    ("body_mass", "body", "rel"),
    ("body_com", "body", "abs"),
    ("body_inertia", "body", "rel_tensor"),
    ("joint_range", "joint", "abs"),
    ("actuator_ctrl_range", "actuator", "rel"),
    ("actuator_force_range", "actuator", "rel"),
    ("timestep", None, "rel"),
    ("gravity", None, "abs_gravity"),
)
_PLURAL = {"body": "bodies", "joint": "joints", "actuator": "actuators"}


def _field_errors(key: str, measure: str, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, float]:
    """(error array shaped as ``a``, tolerance) of engine values ``a`` against values ``b`` (the reference's
    or, for a known difference, the declared ones): the measure's scale always comes from ``b``."""
    diff = _abs_diff(a, b)
    if measure == "abs":
        return diff, MODEL_LENGTH_ATOL
    if measure == "abs_gravity":
        return diff, MODEL_GRAVITY_ATOL
    if measure == "rel_tensor":  # relative to each body's largest inertia element
        scale = np.maximum(np.abs(b).reshape(len(b), -1).max(axis=1), MODEL_SCALE_FLOOR[key])
        return diff / scale[:, None, None], MODEL_RTOL
    scale = np.where(np.isfinite(b), np.maximum(np.abs(b), MODEL_SCALE_FLOOR[key]), 1.0)
    return diff / scale, MODEL_RTOL


def _declared(
    known: Sequence[Any], theirs: dict, names: dict[str, Sequence[str]]
) -> tuple[dict[str, dict[int, tuple[np.ndarray, str]]], list[str]]:
    """The known differences the backend declares, checked against the reference: ``({quantity: {id:
    (declared value, text)}}, problems)``. A declaration that names an element the reference does not
    have under that id, a quantity the model tier does not compare per element, or a value of the wrong
    shape is a problem, and excuses nothing."""
    kinds = {key: kind for key, kind, _ in _FIELD_SPECS if kind}
    out: dict[str, dict[int, tuple[np.ndarray, str]]] = {}
    problems = []
    for d in known:
        kind = kinds.get(d.quantity)
        if kind is None or d.quantity not in theirs:
            problems.append(f"{d.quantity!r} is not a per-element quantity of the model tier ({d.text})")
            continue
        ref = np.asarray(theirs[d.quantity], dtype=np.float64)
        table = names[kind]
        for i, name, value in zip(d.ids, d.names, d.values, strict=True):
            v = np.asarray(value, dtype=np.float64)
            if not 0 <= int(i) < len(table) or table[int(i)] != name:
                have = repr(table[int(i)]) if 0 <= int(i) < len(table) else "no element"
                problems.append(f"{d.quantity}: {kind} {name!r} declared as id {i}, the reference has {have} there")
            elif v.shape != ref.shape[1:]:
                problems.append(
                    f"{d.quantity} of {kind} {name!r}: declared value of shape {v.shape}, not {ref.shape[1:]}"
                )
            else:
                out.setdefault(d.quantity, {})[int(i)] = (v, d.text)
    return out, problems


def _field_rows(
    mine: dict, theirs: dict, names: dict[str, Sequence[str]], known: Sequence[Any] = ()
) -> list[ParityRow]:
    """The model tier's rows of the physical fields; ``known``: the backend's ``capabilities.known_differences``.

    An element a known difference declares is excused (the row's status is ``KNOWN``, not ``FAIL``) where it
    differs from the reference beyond the tolerance **and** agrees with the declared value within it; any
    other element, or a declared one holding neither value, is judged as usual.
    """
    rows = []
    declared, problems = _declared(known, theirs, names)
    if problems:
        rows.append(
            ParityRow(
                "model",
                "known_differences",
                float(len(problems)),
                0.0,
                False,
                detail="the backend declares known differences the reference contradicts: " + "; ".join(problems),
            )
        )

    def label(kind: str, i: int) -> str:
        table = names[kind]
        return repr(table[i]) if i < len(table) else f"#{i}"

    for key, kind, measure in _FIELD_SPECS:
        if key not in mine or key not in theirs:
            rows.append(_mismatch_row("model", key, f"model_fields() lacks {key!r}"))
            continue
        a = np.asarray(mine[key], dtype=np.float64)
        b = np.asarray(theirs[key], dtype=np.float64)
        if a.shape != b.shape:
            rows.append(_mismatch_row("model", key, f"shape {a.shape} vs reference {b.shape}"))
            continue
        err, tol = _field_errors(key, measure, a, b)
        claims = declared.get(key, {})

        def where(idx: tuple[int, ...], key=key, kind=kind, a=a, b=b, claims=claims) -> str:
            head = f"{kind} {label(kind, idx[0])}" if kind else key
            rest = f"[{', '.join(map(str, idx[1:]))}]" if kind and len(idx) > 1 else ""
            text = f"{head}{rest}: {a[idx]:.9g} vs reference {b[idx]:.9g}"
            if kind and idx[0] in claims:
                text += f", declared {claims[idx[0]][0][idx[1:]]:.9g}"
            return text

        excused: list[int] = []
        for i, (value, _text) in claims.items():
            own = err[i].max() if err[i].size else 0.0
            off = _field_errors(key, measure, a[i : i + 1], value[None])[0]
            if own > tol and off.max() <= tol:
                excused.append(i)
        if not excused:
            rows.append(_row_from_errors("model", key, err, tol, where))
            continue
        judged = err.copy()
        judged[excused] = 0.0
        row = _row_from_errors("model", key, judged, tol, where)
        assert kind is not None  # only per-element quantities are declared (_declared)
        worst = max(excused, key=lambda i: float(err[i].max()))
        sub = tuple(int(x) for x in np.unravel_index(int(np.argmax(err[worst])), err[worst].shape))
        plural = _PLURAL[kind] if len(excused) > 1 else kind
        others = f"every other {kind} identical" if row.max_error == 0 else f"the others: {row.detail}"
        texts = "; ".join(dict.fromkeys(claims[i][1] for i in excused))
        detail = (
            f"known difference of {plural} {', '.join(label(kind, i) for i in excused)}, worst:"
            f" {where((worst, *sub))} ({float(err[worst].max()):.3g} from the reference); {others}"
        )
        rows.append(
            dataclasses.replace(row, detail=detail, known=texts, known_error=float(max(err[i].max() for i in excused)))
        )
    return rows


# ----------------------------------------------------------------------
# kinematics and jacobian
# ----------------------------------------------------------------------
def _random_state_pair(ctx: _Context, tier: str, n: int) -> tuple[Any, Any]:
    sim, ref = ctx.pair(n)
    try:
        if (sim.nq, sim.nv) != (ref.nq, ref.nv):
            raise InvalidArgumentError(f"nq, nv {sim.nq}, {sim.nv} vs reference {ref.nq}, {ref.nv}: cannot compare")
        qpos = random_configurations(
            ref.info, n, ctx.rng(tier), unlimited_hinge=KIN_UNLIMITED_HINGE, unlimited_slide=KIN_UNLIMITED_SLIDE
        )
        ref.set_state(None, qpos)
        sim.set_state(None, qpos)
    except BaseException:
        sim.close()
        ref.close()
        raise
    return sim, ref


def _tier_kinematics(ctx: _Context, num_envs: int) -> list[ParityRow]:
    sim, ref = _random_state_pair(ctx, "kinematics", num_envs)
    with sim, ref:
        rows = []
        for what, names, pos, quat in (
            ("body", ref.body_names, "get_body_pos_w", "get_body_quat_w"),
            ("site", ref.site_names, "get_site_pos_w", "get_site_quat_w"),
        ):
            if not names:
                rows.append(
                    ParityRow(
                        "kinematics",
                        f"{what}_pos",
                        None,
                        KIN_POS_TOL,
                        True,
                        skipped=True,
                        detail=f"the model has no {what}s",
                    )
                )
                continue
            a, b = _np(getattr(sim, pos)()), _np(getattr(ref, pos)())
            qa, qb = _np(getattr(sim, quat)()), _np(getattr(ref, quat)())
            if a.shape != b.shape or qa.shape != qb.shape:
                rows.append(_mismatch_row("kinematics", f"{what}_pos", f"shape {a.shape} vs reference {b.shape}"))
                continue

            def where(idx: tuple[int, ...], names=names, what=what) -> str:
                return f"{what} {names[idx[1]]!r} in env {idx[0]}"

            rows.append(
                _row_from_errors("kinematics", f"{what}_pos", np.linalg.norm(a - b, axis=-1), KIN_POS_TOL, where)
            )
            rows.append(
                _row_from_errors("kinematics", f"{what}_quat", quat_angle_between(qa, qb), KIN_ANGLE_TOL, where)
            )
    return rows


def _tier_jacobian(ctx: _Context, num_envs: int) -> list[ParityRow]:
    sim, ref = _random_state_pair(ctx, "jacobian", num_envs)
    with sim, ref:
        names = ref.site_names
        if not names:
            return [
                ParityRow("jacobian", q, None, JAC_TOL, True, skipped=True, detail="the model has no sites")
                for q in ("site_jacp", "site_jacr")
            ]
        errs = {"site_jacp": [], "site_jacr": []}
        for s in range(len(names)):
            pa, ra = sim.get_site_jacobian_w(s)
            pb, rb = ref.get_site_jacobian_w(s)
            errs["site_jacp"].append(np.abs(_np(pa) - _np(pb)))  # (N, 3, nv)
            errs["site_jacr"].append(np.abs(_np(ra) - _np(rb)))
        rows = []
        for q, per_site in errs.items():
            err = np.stack(per_site)  # (S, N, 3, nv)

            def where(idx: tuple[int, ...]) -> str:
                return f"site {names[idx[0]]!r} in env {idx[1]}, row {idx[2]}, qvel column {idx[3]}"

            rows.append(_row_from_errors("jacobian", q, err, JAC_TOL, where))
    return rows


# ----------------------------------------------------------------------
# dynamics
# ----------------------------------------------------------------------
def _ctrl_bounds(ref: Any) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) ctrl per actuator; [-1, 1] where unlimited."""
    r = _np(ref.get_actuator_ctrl_range())
    lo = np.where(np.isfinite(r[:, 0]), r[:, 0], -1.0)
    hi = np.where(np.isfinite(r[:, 1]), r[:, 1], 1.0)
    return lo, hi


def dynamics_controls(lo: np.ndarray, hi: np.ndarray, dt: float, nsteps: int, rng: np.random.Generator) -> np.ndarray:
    """``(nsteps, DYN_NUM_ENVS, nu)`` control sequences of the dynamics tier.

    Env 0: zero (clipped into the range). Env 1: a sinusoid about the middle of
    each range, ``DYN_SINE_AMPLITUDE`` of its half width, ``DYN_SINE_HZ``, a
    different phase per actuator. Env 2: uniform random values held for
    ``DYN_RANDOM_HOLD``.
    """
    nu = lo.size
    t = np.arange(nsteps) * dt
    mid, half = (lo + hi) / 2, (hi - lo) / 2
    u = np.empty((nsteps, DYN_NUM_ENVS, nu))
    u[:, 0] = np.clip(0.0, lo, hi)
    phase = np.arange(nu) * (np.pi / 3)
    u[:, 1] = mid + DYN_SINE_AMPLITUDE * half * np.sin(2 * np.pi * DYN_SINE_HZ * t[:, None] + phase)
    hold = max(1, int(round(DYN_RANDOM_HOLD / dt)))
    draws = rng.uniform(lo, hi, size=(-(-nsteps // hold), nu))
    u[:, 2] = np.repeat(draws, hold, axis=0)[:nsteps]
    return u


def _tier_dynamics(ctx: _Context, num_envs: int) -> list[ParityRow]:
    n = DYN_NUM_ENVS
    sim, ref = ctx.pair(n)
    with sim, ref:
        info, rng = ref.info, ctx.rng("dynamics")
        if ref.num_dof == 0:
            return [
                ParityRow(
                    "dynamics",
                    "dof_pos",
                    None,
                    DYN_POS_TOL,
                    True,
                    skipped=True,
                    detail="the model has no hinge or slide joints",
                )
            ]
        dt = ref.physics_dt
        nsteps = int(round(DYN_DURATION / dt))
        qpos = np.tile(np.asarray(info.qpos0, dtype=np.float64), (n, 1))
        lo, hi = _np(ref.get_joint_range()).T
        offsets = rng.uniform(-DYN_INITIAL_OFFSET, DYN_INITIAL_OFFSET, size=(n, ref.num_dof))
        start = qpos[:, info.dof_qpos_index] + offsets
        margin = 0.05 * np.where(np.isfinite(hi - lo), hi - lo, 0.0)
        qpos[:, info.dof_qpos_index] = np.clip(start, lo + margin, hi - margin)
        ref.set_state(None, qpos)
        sim.set_state(None, qpos)
        lo_u, hi_u = _ctrl_bounds(ref)
        controls = dynamics_controls(lo_u, hi_u, dt, nsteps, rng)
        traj_sim = np.empty((nsteps, n, ref.num_dof))
        traj_ref = np.empty_like(traj_sim)
        diverged_at: dict[str, int | None] = {"sim": None, "reference": None}
        for k in range(nsteps):
            ctrl = controls[k] if ref.num_actuators else None
            for who, backend, traj in (("sim", sim, traj_sim), ("reference", ref, traj_ref)):
                out = backend.step(ctrl)
                if diverged_at[who] is None and bool(out["diverged"].any()):
                    diverged_at[who] = k + 1
                traj[k] = _np(backend.get_dof_pos())
        rows = []
        err = np.abs(traj_sim - traj_ref)  # (T, N, D)
        names = ref.dof_names
        for d, joint in enumerate(names):
            e = err[:, :, d]
            over = np.flatnonzero((e > DYN_POS_TOL).any(axis=1))
            k, env = np.unravel_index(int(np.argmax(e)), e.shape)
            if over.size:
                k0 = int(over[0])
                env0 = int(np.argmax(e[k0]))
                detail = (
                    f"first out at t = {(k0 + 1) * dt:.4g} s in env {env0} ({_DYN_ENV_NAMES[env0]}):"
                    f" {traj_sim[k0, env0, d]:.6g} vs reference {traj_ref[k0, env0, d]:.6g}"
                )
                first = k0 + 1
            elif e[k, env] == 0:
                detail = f"identical over {DYN_DURATION:g} s ({nsteps} substeps, {n} envs)"
                first = None
            else:
                detail = f"worst at t = {(k + 1) * dt:.4g} s in env {env} ({_DYN_ENV_NAMES[env]})"
                first = None
            worst = float(e[k, env])
            rows.append(
                ParityRow(
                    "dynamics", f"dof_pos[{joint}]", worst, DYN_POS_TOL, first is None, first_step=first, detail=detail
                )
            )
        for who, k in diverged_at.items():
            if k is not None:
                rows.append(
                    ParityRow(
                        "dynamics",
                        f"diverged[{who}]",
                        math.inf,
                        0.0,
                        False,
                        first_step=k,
                        detail=f"the {who} backend reported divergence at t = {k * dt:.4g} s",
                    )
                )
    return rows


_DYN_ENV_NAMES = ("zero ctrl", "sinusoid ctrl", "random ctrl")


# ----------------------------------------------------------------------
# servo
# ----------------------------------------------------------------------
def _start_qpos(ref: Any) -> tuple[np.ndarray, str]:
    """(qpos, label): the first keyframe if the model has one, else qpos0."""
    keys = ref.info.keyframe_names
    if keys:
        return _np(ref.get_keyframe_qpos(keys[0])), f"keyframe {keys[0]!r}"
    return np.asarray(ref.info.qpos0, dtype=np.float64), "qpos0"


def _tier_servo(ctx: _Context, num_envs: int) -> list[ParityRow]:
    sim, ref = ctx.pair(1)
    with sim, ref:
        info = ref.info
        position = [
            a for a, kind in enumerate(info.actuator_kind) if kind == "position" and info.actuator_joint[a] >= 0
        ]
        if not position:
            return [
                ParityRow(
                    "servo",
                    "final_dof_pos",
                    None,
                    SERVO_TOL,
                    True,
                    skipped=True,
                    detail="the model has no position actuators on joints",
                )
            ]
        qpos, label = _start_qpos(ref)
        lo, hi = _ctrl_bounds(ref)
        ctrl = np.clip(np.zeros(ref.num_actuators), lo, hi)
        for i, a in enumerate(position):
            joint = int(info.actuator_joint[a])
            value = qpos[int(info.joint_qposadr[joint])] + SERVO_OFFSET * (1 if i % 2 == 0 else -1)
            ctrl[a] = np.clip(value, lo[a], hi[a])
        for backend in (ref, sim):
            backend.set_state(None, qpos[None])
        nsteps = int(round(SERVO_DURATION / ref.physics_dt))
        diverged = [bool(b.step(ctrl[None], nsteps=nsteps)["diverged"].any()) for b in (sim, ref)]
        a, b = _np(sim.get_dof_pos())[0], _np(ref.get_dof_pos())[0]
        speed = float(np.abs(_np(ref.get_dof_vel())).max())
        rows = []
        for d, joint in enumerate(ref.dof_names):
            err = abs(a[d] - b[d])
            rows.append(
                ParityRow(
                    "servo",
                    f"final_dof_pos[{joint}]",
                    float(err),
                    SERVO_TOL,
                    bool(err <= SERVO_TOL),
                    detail=f"{a[d]:.6g} vs reference {b[d]:.6g} after {SERVO_DURATION:g} s from {label}",
                )
            )
        if any(diverged):
            who = "backend" if diverged[0] else "reference"
            rows.append(ParityRow("servo", "diverged", math.inf, 0.0, False, detail=f"the {who} diverged"))
        if speed > 1e-2:  # the comparison assumes a steady reference; say so when it is not
            rows.append(
                ParityRow(
                    "servo",
                    "reference_steady",
                    speed,
                    1e-2,
                    False,
                    detail="reference dof speeds (rad/s) still above 1e-2 at the end",
                )
            )
    return rows


# ----------------------------------------------------------------------
# contact
# ----------------------------------------------------------------------
def _tier_contact(ctx: _Context, num_envs: int) -> list[ParityRow]:
    sim, ref = ctx.pair(1)
    with sim, ref:
        info = ref.info
        free = [j for j, t in enumerate(info.joint_type) if t == JOINT_FREE]
        if not free:
            return [
                ParityRow(
                    "contact",
                    "rest_height",
                    None,
                    CONTACT_HEIGHT_TOL,
                    True,
                    skipped=True,
                    detail="the model has no free bodies",
                )
            ]
        qpos, label = _start_qpos(ref)
        for backend in (ref, sim):
            backend.set_state(None, qpos[None])
        nsteps = int(round(CONTACT_DURATION / ref.physics_dt))
        ctrl = None
        if ref.num_actuators:
            lo, hi = _ctrl_bounds(ref)
            ctrl = np.clip(np.zeros((1, ref.num_actuators)), lo, hi)
        diverged = [bool(b.step(ctrl, nsteps=nsteps)["diverged"].any()) for b in (sim, ref)]
        pa, pb = _np(sim.get_qpos())[0], _np(ref.get_qpos())[0]
        va = _np(sim.get_qvel())[0]
        rows = []
        for j in free:
            adr, vadr = int(info.joint_qposadr[j]), int(info.joint_dofadr[j])
            body = info.body_names[int(info.joint_body[j])]
            err = abs(pa[adr + 2] - pb[adr + 2])
            speed = float(np.linalg.norm(va[vadr : vadr + 3]))
            rows.append(
                ParityRow(
                    "contact",
                    f"rest_height[{body}]",
                    float(err),
                    CONTACT_HEIGHT_TOL,
                    bool(err <= CONTACT_HEIGHT_TOL),
                    detail=f"z {pa[adr + 2]:.6g} vs reference {pb[adr + 2]:.6g} m after {CONTACT_DURATION:g} s"
                    f" from {label} (backend speed {speed:.2g} m/s)",
                )
            )
        if any(diverged):
            who = "backend" if diverged[0] else "reference"
            rows.append(ParityRow("contact", "diverged", math.inf, 0.0, False, detail=f"the {who} diverged"))
    return rows


def _tier_randomized(ctx: _Context, num_envs: int) -> list[ParityRow]:
    from simbackend.randomization import Distribution, RandomizationPlan, Term

    n = DR_NUM_ENVS
    sim, ref = ctx.pair(n)
    with sim, ref:
        info = ref.info
        if ref.num_dof == 0:
            return [
                ParityRow(
                    "randomized",
                    "dof_pos",
                    None,
                    DYN_POS_TOL,
                    True,
                    skipped=True,
                    detail="the model has no hinge or slide joints",
                )
            ]
        scale = Distribution.uniform(1.0 - DR_SCALE, 1.0 + DR_SCALE)
        terms = [Term("body_mass", scale, scale_inertia=True)]
        position = [a for a, k in enumerate(info.actuator_kind) if k == "position" and info.actuator_joint[a] >= 0]
        if position:
            terms += [Term("actuator_kp", scale), Term("actuator_kv", scale)]
        plan = RandomizationPlan(tuple(terms), seed=DR_SEED)
        dropped = sim.apply_init_randomization(plan, strict=False)
        ref.apply_init_randomization(plan)
        rows = []
        if dropped:
            rows.append(
                ParityRow("randomized", "terms", math.inf, 0.0, False, detail=f"the backend does not apply {dropped}")
            )
        pairs = [
            ("body_mass", sim.get_env_body_mass, ref.get_env_body_mass, MODEL_SCALE_FLOOR["body_mass"]),
            ("body_inertia", sim.get_env_body_inertia, ref.get_env_body_inertia, MODEL_SCALE_FLOOR["body_inertia"]),
        ]
        if position:
            pairs += [
                ("actuator_kp", lambda: sim.get_env_actuator_gains().kp, lambda: ref.get_env_actuator_gains().kp, 1.0),
                ("actuator_kv", lambda: sim.get_env_actuator_gains().kv, lambda: ref.get_env_actuator_gains().kv, 1.0),
            ]
        for name, mine, theirs, floor in pairs:
            a, b = _np(mine()), _np(theirs())
            err = _abs_diff(a, b) / np.maximum(np.abs(b), floor)
            rows.append(
                _row_from_errors(
                    "randomized",
                    f"env_{name}",
                    err,
                    MODEL_RTOL,
                    lambda idx: f"env {idx[0]}, element {idx[1:]} (seed {DR_SEED})",
                )
            )
        qpos, label = _start_qpos(ref)
        qpos = np.tile(qpos, (n, 1))
        lo, hi = _ctrl_bounds(ref)
        ctrl = np.clip(np.zeros((n, ref.num_actuators)), lo, hi)
        if position:
            for i, a in enumerate(position):
                joint = int(info.actuator_joint[a])
                value = qpos[0, int(info.joint_qposadr[joint])] + SERVO_OFFSET * (1 if i % 2 == 0 else -1)
                ctrl[:, a] = np.clip(value, lo[a], hi[a])
            duration, tol, what = SERVO_DURATION, SERVO_TOL, "final_dof_pos"
        else:
            offsets = ctx.rng("randomized").uniform(-DYN_INITIAL_OFFSET, DYN_INITIAL_OFFSET, size=(n, ref.num_dof))
            rlo, rhi = _np(ref.get_joint_range()).T
            margin = 0.05 * np.where(np.isfinite(rhi - rlo), rhi - rlo, 0.0)
            start = qpos[:, info.dof_qpos_index] + offsets
            qpos[:, info.dof_qpos_index] = np.clip(start, rlo + margin, rhi - margin)
            duration, tol, what = DYN_DURATION, DYN_POS_TOL, "dof_pos"
        for backend in (ref, sim):
            backend.set_state(None, qpos)
        nsteps = int(round(duration / ref.physics_dt))
        worst = np.zeros((n, ref.num_dof))
        chunk = nsteps if position else 1  # the passive rollout is compared at every substep
        for _ in range(0, nsteps, chunk):
            diverged = [
                bool(b.step(ctrl if ref.num_actuators else None, nsteps=chunk)["diverged"].any()) for b in (sim, ref)
            ]
            if any(diverged):
                who = "backend" if diverged[0] else "reference"
                rows.append(ParityRow("randomized", "diverged", math.inf, 0.0, False, detail=f"the {who} diverged"))
                return rows
            worst = np.maximum(worst, np.abs(_np(sim.get_dof_pos()) - _np(ref.get_dof_pos())))
        for d, joint in enumerate(ref.dof_names):
            e = worst[:, d]
            rows.append(
                ParityRow(
                    "randomized",
                    f"{what}[{joint}]",
                    float(e.max()),
                    tol,
                    bool(e.max() <= tol),
                    detail=f"worst of {n} randomized envs (env {int(np.argmax(e))}) over {duration:g} s from {label}",
                )
            )
    return rows
