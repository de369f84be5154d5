"""Fit one engine's model parameters to reference trajectories: a population of candidates, one
per group of envs, replaying the same commands from the same recorded states (multiple shooting).

How a candidate is scored (:class:`Replayer`):

1. The reference segments are cut into **windows** of ``window`` rows. Every window starts from
   the reference's own state (``set_state``: multiple shooting), so one early divergence cannot
   dominate the loss and a long reference costs no more than its rows.
2. The env batch holds the population: candidate ``c`` owns envs ``[c B, (c + 1) B)``, one
   window each, and its parameter values reach those envs through the contract
   (``apply_interval_randomization`` with a plan of fixed values: the same composition with
   the model's values as any plan). All candidates replay the same windows at once.
3. Along each window, the state reached is compared with the reference row by row, per
   **channel**: ``joint_pos``, ``joint_vel`` (hinge and slide joints), ``base_pos``,
   ``base_quat`` (the rotation angle between the two orientations), ``base_lin_vel``,
   ``base_ang_vel`` (free joints), ``ball_quat``, ``ball_vel``. Each column's squared error is
   divided by how far the reference itself moves within its windows (the error of predicting
   "nothing moves"; a floor keeps still columns from dominating), so 1.0 means "as good as a
   model that does nothing" on every channel, in any units. The loss is the weighted mean
   over channels of the mean over their columns.
4. An env that diverges scores :data:`DIVERGED_LOSS`.

:func:`calibrate` runs CMA-ES (the ``cmaes`` package: seeded, bounded, ask-and-tell) over the
parameters in the unit cube, starting at the values that leave the model unchanged, keeps the
best candidate seen, and reports the errors before and after on the fitted references and on
held-out ones.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from simbackend import checks
from simbackend.errors import InvalidArgumentError
from simbackend.model_info import JOINT_BALL, JOINT_FREE

from .commands import TargetDriver
from .params import ParameterSet
from .reference import Reference, Segment

__all__ = ["CHANNELS", "DIVERGED_LOSS", "MIN_POPSIZE", "CalibrationResult", "Replayer", "calibrate"]

#: channel -> (floor of the per-column normaliser in its units, units)
CHANNELS: Mapping[str, tuple[float, str]] = {
    "joint_pos": (1e-3, "rad or m"),
    "joint_vel": (1e-2, "rad/s or m/s"),
    "base_pos": (1e-3, "m"),
    "base_quat": (1e-3, "rad"),
    "base_lin_vel": (1e-2, "m/s"),
    "base_ang_vel": (1e-2, "rad/s"),
    "ball_quat": (1e-3, "rad"),
    "ball_vel": (1e-2, "rad/s"),
}
#: the loss of a candidate whose replay diverged (normalised losses are of order 1)
DIVERGED_LOSS = 1e3
#: the smallest CMA-ES population: two parents at least (``popsize // 2``), else its rank-mu update
#: has no weight and the ``cmaes`` package divides by zero
MIN_POPSIZE = 4


def _quat_angle(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Rotation angle between unit quaternions (``(..., 4)``), up to sign."""
    na = np.linalg.norm(a, axis=-1)
    nb = np.linalg.norm(b, axis=-1)
    dot = np.abs((a * b).sum(-1)) / np.maximum(na * nb, 1e-12)
    return 2.0 * np.arccos(np.clip(dot, 0.0, 1.0))


@dataclass(frozen=True)
class _Channels:
    """Which state columns feed which channel (from the model's joint layout)."""

    columns: dict[str, tuple[str, np.ndarray]]  # channel -> ("qpos"|"qvel"|"quat", columns or quat starts)

    @classmethod
    def of(cls, info: Any) -> _Channels:
        parts: dict[str, tuple[str, list[int]]] = {}

        def add(ch: str, where: str, cols: range | list[int]) -> None:
            parts.setdefault(ch, (where, []))[1].extend(cols)

        for j in range(len(info.joint_type)):
            t, qa, da = int(info.joint_type[j]), int(info.joint_qposadr[j]), int(info.joint_dofadr[j])
            if t == JOINT_FREE:
                add("base_pos", "qpos", range(qa, qa + 3))
                add("base_quat", "quat", [qa + 3])
                add("base_lin_vel", "qvel", range(da, da + 3))
                add("base_ang_vel", "qvel", range(da + 3, da + 6))
            elif t == JOINT_BALL:
                add("ball_quat", "quat", [qa])
                add("ball_vel", "qvel", range(da, da + 3))
            else:
                add("joint_pos", "qpos", [qa])
                add("joint_vel", "qvel", [da])
        return cls({ch: (w, np.asarray(c, np.int64)) for ch, (w, c) in parts.items()})

    def errors(self, qpos: np.ndarray, qvel: np.ndarray, rq: np.ndarray, rv: np.ndarray) -> dict[str, np.ndarray]:
        """Squared errors per channel ``(..., columns)`` between a state and the reference's."""
        out = {}
        for ch, (where, cols) in self.columns.items():
            if where == "quat":
                ang = np.stack([_quat_angle(qpos[..., c : c + 4], rq[..., c : c + 4]) for c in cols], -1)
                out[ch] = ang**2
            else:
                a, b = (qpos, rq) if where == "qpos" else (qvel, rv)
                out[ch] = (a[..., cols] - b[..., cols]) ** 2
        return out


@dataclass(frozen=True)
class _Window:
    segment: int
    start: int


def _windows(reference: Reference, window: int) -> list[_Window]:
    """The windows of ``window`` rows the reference's segments are cut into; none (every segment
    too short) refused in one line naming ``window`` and the files."""
    window = checks.integer(window, "window", minimum=1)
    out = [_Window(s, a) for s, seg in enumerate(reference.segments) for a in range(0, seg.rows - window, window)]
    if not out:
        longest = max(seg.rows for seg in reference.segments)
        raise InvalidArgumentError(
            f"window: {window} rows is longer than every segment of {', '.join(reference.files) or 'the reference'}"
            f" (the longest has {longest} rows)"
        )
    return out


@dataclass
class Scores:
    """What :meth:`Replayer.score` measured for each candidate.

    Attributes:
        loss: ``(C,)`` the weighted normalised loss (:data:`DIVERGED_LOSS` for a diverged candidate).
        normalised: channel -> ``(C,)`` normalised error (mean over its columns).
        rms: channel -> ``(C,)`` root mean square error in the channel's units.
        diverged: ``(C,)`` bool.
    """

    loss: np.ndarray
    normalised: dict[str, np.ndarray]
    rms: dict[str, np.ndarray]
    diverged: np.ndarray

    def row(self, c: int) -> dict[str, Any]:
        return {
            "loss": float(self.loss[c]),
            "diverged": bool(self.diverged[c]),
            "channels": {
                ch: {"normalised": float(self.normalised[ch][c]), "rms": float(self.rms[ch][c])}
                for ch in self.normalised
            },
        }


class Replayer:
    """Scores candidate parameter values on reference windows (see the module docstring).

    Args:
        backend: a :class:`~simbackend.contract.SimBackend` whose ``num_envs`` is a multiple
            of ``popsize``; built on the reference's model.
        reference: the reference (:func:`~simbackend.calibration.load_reference`).
        parameters: the fitted parameters.
        popsize: candidates scored per call.
        window: rows per window (>= 1 step).
        weights: channel -> weight (default 1 each; 0 leaves a channel out).
        robot: for ``targets`` references: the robot description whose joint controller turns
            targets into actuator commands (a :class:`~simbackend.robots.RobotDescription`, a
            registered name or a description file).
    """

    def __init__(
        self,
        backend: Any,
        reference: Reference,
        parameters: ParameterSet,
        *,
        popsize: int,
        window: int,
        weights: Mapping[str, float] | None = None,
        robot: Any = None,
    ):
        window = checks.integer(window, "window", minimum=1)
        popsize = checks.integer(popsize, "popsize", minimum=1)
        if backend.num_envs % popsize:
            raise InvalidArgumentError(f"popsize: {popsize} does not divide the backend's {backend.num_envs} envs")
        self.sim, self.ref, self.params = backend, reference, parameters
        self.popsize, self.window = popsize, window
        self.group = backend.num_envs // popsize
        parameters.check_backend(backend)
        self.channels = _Channels.of(backend.info)
        weights = dict(weights or {})
        unknown = sorted(set(weights) - set(CHANNELS))
        if unknown:
            raise InvalidArgumentError(f"weights: unknown channels {unknown}; channels: {list(CHANNELS)}")
        given = {ch: checks.real(w, f"weights[{ch!r}]", minimum=0) for ch, w in weights.items()}
        self.weights = {ch: given.get(ch, 1.0) for ch in self.channels.columns}
        if not any(self.weights.values()):
            raise InvalidArgumentError(f"weights: expected weights >= 0, not all 0, got {self.weights}")
        self.windows = _windows(reference, window)
        self._driver = self._make_driver(robot) if reference.command == "targets" else None
        self._norm = self._normalisers()

    # ------------------------------------------------------------------
    def _make_driver(self, robot: Any) -> TargetDriver:
        robot = self.ref.robot if robot is None else robot
        if robot is None:
            raise InvalidArgumentError(
                "robot: a reference of joint targets needs the robot whose controller sends them"
            )
        driver = TargetDriver(robot, self.sim)
        if tuple(self.ref.command_names) != driver.joint_names:
            raise InvalidArgumentError(
                f"reference: target_names {list(self.ref.command_names)} are not robot"
                f" {driver.description.name!r}'s driven joints {list(driver.joint_names)} in order"
            )
        return driver

    def _command(self, rows: np.ndarray, nsteps: int) -> dict:
        """Step every env with its window's commands for one row (``(N, c)``)."""
        if self._driver is None:
            return self.sim.step(torch.as_tensor(rows, dtype=torch.float32, device=self.sim.device), nsteps)
        return self._driver.step(rows, nsteps)

    def _normalisers(self) -> dict[str, np.ndarray]:
        """Per channel and column: the mean squared motion of the reference within its windows, floored."""
        sums: dict[str, np.ndarray] = {}
        count = 0
        for w in self.windows:
            seg = self.ref.segments[w.segment]
            sl = slice(w.start + 1, w.start + self.window + 1)
            q, v = seg.qpos[sl], seg.qvel[sl]
            e = self.channels.errors(q, v, np.broadcast_to(seg.qpos[w.start], q.shape), seg.qvel[w.start])
            for ch, x in e.items():
                sums[ch] = sums.get(ch, 0.0) + x.sum(0)
            count += q.shape[0]
        return {ch: np.maximum(s / count, CHANNELS[ch][0] ** 2) for ch, s in sums.items()}

    # ------------------------------------------------------------------
    def apply(self, values: np.ndarray) -> None:
        """Give candidate ``c`` the parameter values ``values[c]`` (``(popsize, d)``)."""
        for c in range(self.popsize):
            ids = np.arange(c * self.group, (c + 1) * self.group)
            self.sim.apply_interval_randomization(self.params.plan(values[c], phase="interval"), ids)

    def score(self, values: np.ndarray, *, windows: list | None = None) -> Scores:
        """Score ``values`` (``(C, d)``, ``C <= popsize``; the rest of the population repeats the last)
        on every window (or ``windows``)."""
        values = np.asarray(values, np.float64)
        C = values.shape[0]
        if values.ndim != 2 or values.shape[1] != len(self.params) or not 1 <= C <= self.popsize:
            raise InvalidArgumentError(
                f"values: expected (1..{self.popsize}, {len(self.params)}), got {tuple(values.shape)}"
            )
        full = np.concatenate([values, np.repeat(values[-1:], self.popsize - C, 0)])
        self.apply(full)
        wins = self.windows if windows is None else windows
        P, B, W = self.popsize, self.group, self.window
        sq = {ch: np.zeros((P, len(cols))) for ch, (_, cols) in self.channels.columns.items()}
        diverged = np.zeros(P, bool)
        rows = 0
        by_nsteps: dict[int, list[_Window]] = {}
        for w in wins:
            by_nsteps.setdefault(self.ref.segments[w.segment].nsteps, []).append(w)
        for nsteps, group in by_nsteps.items():
            for k in range(0, len(group), B):
                chunk = group[k : k + B]
                used = len(chunk)
                chunk = chunk + [chunk[0]] * (B - used)
                segs = [self.ref.segments[w.segment] for w in chunk]
                starts = np.array([w.start for w in chunk])
                q0 = np.stack([s.qpos[a] for s, a in zip(segs, starts)])
                v0 = np.stack([s.qvel[a] for s, a in zip(segs, starts)])
                dev = self.sim.device
                self.sim.set_state(
                    None,
                    torch.as_tensor(np.tile(q0, (P, 1)), device=dev),
                    torch.as_tensor(np.tile(v0, (P, 1)), device=dev),
                )
                if self._driver is not None:
                    self._driver.reset()
                live = np.zeros((P, B), bool)
                live[:, :used] = True
                for r in range(1, W + 1):
                    cmd = np.stack([s.commands[a + r - 1] for s, a in zip(segs, starts)])
                    info = self._command(np.tile(cmd, (P, 1)), nsteps)
                    bad = info["diverged"].detach().cpu().numpy().reshape(P, B)
                    diverged |= (bad & live).any(1)
                    rq = np.stack([s.qpos[a + r] for s, a in zip(segs, starts)])
                    rv = np.stack([s.qvel[a + r] for s, a in zip(segs, starts)])
                    q = self.sim.get_qpos().detach().cpu().numpy().astype(np.float64).reshape(P, B, -1)
                    v = self.sim.get_qvel().detach().cpu().numpy().astype(np.float64).reshape(P, B, -1)
                    e = self.channels.errors(q, v, rq[None], rv[None])
                    for ch, x in e.items():
                        x = np.where(np.isfinite(x), x, 0.0)
                        sq[ch] += (x * live[..., None]).sum(1)
                rows += used * W
        normalised = {ch: (sq[ch] / rows / self._norm[ch]).mean(1) for ch in sq}
        rms = {ch: np.sqrt(sq[ch].mean(1) / rows) for ch in sq}
        total = sum(self.weights.values())
        loss = sum(self.weights[ch] * normalised[ch] for ch in sq) / total
        loss = np.where(diverged | ~np.isfinite(loss), DIVERGED_LOSS, loss)
        return Scores(
            loss=loss[:C],
            normalised={ch: v[:C] for ch, v in normalised.items()},
            rms={ch: v[:C] for ch, v in rms.items()},
            diverged=diverged[:C],
        )

    def rollout(self, values: np.ndarray, segment: Segment, rows: int) -> tuple[np.ndarray, np.ndarray]:
        """Open-loop replay of ``segment``'s first ``rows`` commands from its first state, one env per
        candidate ``values[c]``: ``(C, rows + 1, nq)`` qpos and ``(C, rows + 1, nv)`` qvel (for pictures)."""
        values = np.asarray(values, np.float64)
        C, P, B = values.shape[0], self.popsize, self.group
        self.apply(np.concatenate([values, np.repeat(values[-1:], P - C, 0)]))
        dev = self.sim.device
        n = self.sim.num_envs
        self.sim.set_state(
            None,
            torch.as_tensor(np.tile(segment.qpos[0], (n, 1)), device=dev),
            torch.as_tensor(np.tile(segment.qvel[0], (n, 1)), device=dev),
        )
        if self._driver is not None:
            self._driver.reset()
        envs = np.arange(C) * B
        qs, vs = [segment.qpos[0][None].repeat(C, 0)], [segment.qvel[0][None].repeat(C, 0)]
        for r in range(rows):
            self._command(np.tile(segment.commands[r], (n, 1)), segment.nsteps)
            qs.append(self.sim.get_qpos().detach().cpu().numpy().astype(np.float64)[envs])
            vs.append(self.sim.get_qvel().detach().cpu().numpy().astype(np.float64)[envs])
        return np.stack(qs, 1), np.stack(vs, 1)


@dataclass
class CalibrationResult:
    """What :func:`calibrate` found.

    Attributes:
        parameters: the fitted parameters.
        values: ``(d,)`` the best values found; ``initial``: the values that leave the model unchanged.
        before, after: :meth:`Scores.row` of the initial and best values on the fitted references;
        validation_before, validation_after: the same on the held-out references (``None`` without).
        history: one dict per generation: ``generation``, ``best`` (so far), ``mean``, ``min``
            (of the generation), ``seconds`` (since the start).
        interrupted: stopped by Ctrl-C (the best so far is kept).
        evaluations: candidates scored.
        seconds: wall time.
        settings: the run's settings (window, popsize, generations, seed, envs, windows, sim).
        sensitivity: per parameter, the fitted loss with that value moved 10 % down and up (inside its
            bounds; ``add`` parameters by 10 % of the bounds' width), as ratios to the best loss: a
            parameter whose ratios stay near 1 is not pinned down by these references.
        trajectory: an open-loop replay of the first held-out (else fitted) segment, for pictures:
            ``dt`` (s per row), ``source``, ``held_out`` (whether ``source`` is held out), ``reference``,
            ``before``, ``after`` (``(R, nq)`` qpos each),
            ``joint_names`` and ``qpos_columns`` (the model's joints and their first qpos column).
    """

    parameters: ParameterSet
    values: np.ndarray
    initial: np.ndarray
    before: dict
    after: dict
    validation_before: dict | None
    validation_after: dict | None
    history: list[dict] = field(default_factory=list)
    interrupted: bool = False
    evaluations: int = 0
    seconds: float = 0.0
    settings: dict = field(default_factory=dict)
    trajectory: dict | None = None
    sensitivity: dict | None = None

    def plan(self, seed: int = 0) -> Any:
        """The fitted values as a plan of fixed ``init`` terms (``--dr`` takes it)."""
        return self.parameters.plan(self.values, phase="init", seed=seed)

    def to_dict(self) -> dict:
        return {
            "parameters": [  # null: the model's own value (a `set` parameter left as the model has it)
                {**p.to_dict(), "value": _number(v), "initial": _number(i)}
                for p, v, i in zip(self.parameters.parameters, self.values, self.initial)
            ],
            "fit": {"before": self.before, "after": self.after},
            "validation": None
            if self.validation_before is None
            else {"before": self.validation_before, "after": self.validation_after},
            "history": self.history,
            "interrupted": self.interrupted,
            "evaluations": self.evaluations,
            "seconds": round(self.seconds, 2),
            "settings": self.settings,
            "sensitivity": self.sensitivity,
        }


def _number(v: float) -> float | None:
    return None if math.isnan(float(v)) else float(v)


def _sensitivity(rep: Replayer, parameters: ParameterSet, best: np.ndarray, loss: float) -> dict:
    """Per parameter: the loss with its value 10 % lower and higher, over the best loss (module docstring)."""
    moved, which = [], []
    for k, p in enumerate(parameters.parameters):
        if math.isnan(best[k]):  # the model's own values, per target: no one number to move
            continue
        which.append(k)
        step = 0.1 * (p.high - p.low) / 2 if p.term.operation == "add" else 0.1 * abs(best[k])
        for sign in (-1.0, 1.0):
            v = best.copy()
            v[k] = min(max(best[k] + sign * step, p.low), p.high)
            moved.append(v)
    if not moved:
        return {p.name: None for p in parameters.parameters}
    losses = np.concatenate(
        [rep.score(np.stack(moved[i : i + rep.popsize])).loss for i in range(0, len(moved), rep.popsize)]
    )
    floor = max(loss, 1e-12)
    out: dict = {p.name: None for p in parameters.parameters}
    for i, k in enumerate(which):
        out[parameters.parameters[k].name] = {
            "down": float(losses[2 * i] / floor),
            "up": float(losses[2 * i + 1] / floor),
        }
    return out


def calibrate(
    make_backend: Callable[[int], Any],
    reference: Reference,
    parameters: ParameterSet,
    *,
    validation: Reference | None = None,
    window: int = 25,
    popsize: int = 16,
    generations: int = 30,
    seed: int = 0,
    sigma: float = 0.25,
    max_envs: int = 512,
    weights: Mapping[str, float] | None = None,
    robot: Any = None,
    progress: Callable[[dict], None] | None = None,
    picture_seconds: float = 2.0,
) -> CalibrationResult:
    """Fit ``parameters`` so that the engine ``make_backend`` builds reproduces ``reference``.

    Args:
        make_backend: ``num_envs -> SimBackend`` on the reference's model (the backend is closed here).
        reference, validation: references to fit to, and held out to check the fit on.
        window: rows per multiple-shooting window.
        popsize: CMA-ES population (candidates per generation), at least :data:`MIN_POPSIZE`.
        generations: CMA-ES generations.
        seed: seeds CMA-ES; the fit is deterministic on a deterministic engine.
        sigma: CMA-ES initial step in the unit cube of the parameters.
        max_envs: envs the backend may hold: each candidate replays up to ``max_envs // popsize``
            windows at once.
        weights, robot: as :class:`Replayer`'s.
        progress: called after each generation with its ``history`` entry.
        picture_seconds: length of the open-loop replay kept for pictures (:attr:`CalibrationResult.trajectory`).

    Ctrl-C stops the search after the current generation's scoring and keeps the best so far.
    """
    from simbackend._extras import require_extra

    require_extra("cmaes", purpose="calibration (CMA-ES)")
    from cmaes import CMA

    popsize = checks.integer(popsize, "popsize", minimum=MIN_POPSIZE)
    generations = checks.integer(generations, "generations", minimum=0)
    max_envs = checks.integer(max_envs, "max_envs", minimum=1)
    seed = checks.integer(seed, "seed", minimum=0, maximum=2**31 - 1)
    sigma = checks.real(sigma, "sigma", minimum=0, above=True, maximum=1)
    picture_seconds = checks.real(picture_seconds, "picture_seconds", minimum=0, above=True)
    _windows(reference, window)
    if validation is not None:  # a held-out reference too short for a window: refused now, not after the search
        _windows(validation, window)
    nwin = sum(max(0, -(-(s.rows - 1) // window)) for s in reference.segments)
    group = max(1, min(max(1, max_envs // popsize), nwin))
    t0 = time.perf_counter()
    sim = make_backend(popsize * group)
    try:
        rep = Replayer(sim, reference, parameters, popsize=popsize, window=window, weights=weights, robot=robot)
        initial = parameters.identity()
        base = rep.score(initial[None])
        best_v, best_loss = initial.copy(), float(base.loss[0])
        z0 = np.clip(parameters.to_unit(initial), 0.05, 0.95)
        opt = CMA(
            mean=z0,
            sigma=float(sigma),
            bounds=np.tile([0.0, 1.0], (len(parameters), 1)),
            seed=seed,
            population_size=popsize,
        )
        history, interrupted, evaluations = [], False, 1
        try:
            for g in range(generations):
                zs = np.stack([opt.ask() for _ in range(popsize)])
                vals = np.stack([parameters.from_unit(z) for z in zs])
                scores = rep.score(vals)
                evaluations += popsize
                opt.tell([(z, float(s)) for z, s in zip(zs, scores.loss)])
                i = int(np.argmin(scores.loss))
                if scores.loss[i] < best_loss:
                    best_loss, best_v = float(scores.loss[i]), vals[i].copy()
                entry = {
                    "generation": g + 1,
                    "best": best_loss,
                    "min": float(scores.loss.min()),
                    "mean": float(scores.loss.mean()),
                    "seconds": round(time.perf_counter() - t0, 2),
                }
                history.append(entry)
                if progress is not None:
                    progress(entry)
        except KeyboardInterrupt:
            interrupted = True
        after = rep.score(best_v[None]).row(0)
        sensitivity = _sensitivity(rep, parameters, best_v, after["loss"])
        vb = va = None
        settings = {
            "sim": sim.name,
            "window": window,
            "popsize": popsize,
            "generations": generations,
            "seed": seed,
            "sigma": sigma,
            "num_envs": sim.num_envs,
            "windows": len(rep.windows),
            "segments": len(reference.segments),
            "references": list(reference.files),
            "weights": rep.weights,
        }
        shown = rep
        if validation is not None:
            shown = val = Replayer(
                sim, validation, parameters, popsize=popsize, window=window, weights=weights, robot=robot
            )
            s = val.score(np.stack([initial, best_v]))
            vb, va = s.row(0), s.row(1)
            settings["validation_references"] = list(validation.files)
            settings["validation_windows"] = len(val.windows)
        seg = shown.ref.segments[0]
        rows = min(seg.rows - 1, max(1, int(round(picture_seconds / (seg.nsteps * sim.physics_dt)))))
        qs, _ = shown.rollout(np.stack([initial, best_v]), seg, rows)
        info = sim.info
        trajectory = {
            "dt": seg.nsteps * sim.physics_dt,
            "source": seg.source,
            "held_out": validation is not None,
            "reference": seg.qpos[: rows + 1],
            "before": qs[0],
            "after": qs[1],
            "joint_names": list(info.joint_names),
            "qpos_columns": [int(a) for a in info.joint_qposadr],
            "joint_types": [int(t) for t in info.joint_type],
        }
        return CalibrationResult(
            parameters=parameters,
            values=best_v,
            initial=initial,
            before=base.row(0),
            after=after,
            validation_before=vb,
            validation_after=va,
            history=history,
            interrupted=interrupted,
            evaluations=evaluations,
            seconds=time.perf_counter() - t0,
            settings=settings,
            trajectory=trajectory,
            sensitivity=sensitivity,
        )
    finally:
        sim.close()
