"""Where engines part on one robot: the same experiments, from the same default state, on each engine.

:func:`compare` runs a robot through four cheap experiments (five with a policy) on each engine,
through the contract only, and reads the figures that tell engines apart:

* **settle**: the settle check (:func:`simbackend.robots.settle.settle_engine`): the settled base
  height, the tilt, each foot's share of ``m g``;
* **step**: each policy joint's servo step response, one env per joint: the robot stands
  (``seconds`` holding its default pose), then that joint's target steps by ``amplitude`` (towards the
  middle of its range) for ``step_seconds``; read: the error before the step, the final error (the mean
  over the last fifth), the overshoot past the target, the 10-90 % rise time, and the fraction of the time
  the torque estimate ``kp (target - q) - kd qdot`` is at the joint's effort limit
  (:func:`~simbackend.robots.actuation.joint_efforts`) with its peak;
* **gait**: a deterministic stepping gait of joint targets around the default pose: each foot is lifted
  ``lift`` of the default base height at ``frequency`` Hz, its leg's joints moved along the least-norm
  joint change that raises it (a finite difference of the feet's heights per joint at the default
  pose: any leg layout), the feet in two groups half a period apart (diagonal pairs on four feet, left
  against right on two); read: each foot's contact (vertical force over
  :data:`~simbackend.robots.settle.CONTACT_THRESHOLD`) sample by sample, its duty factor, touch-down and
  lift-off times;
* **push**: a sideways push of the base (``push_speed`` m/s given over 0.1 s), then ``gait_seconds``
  holding the default pose; read: each foot's horizontal slip and the base's displacement;
* **tracking** (with a checkpoint): the policy closed loop on each engine, holding each command of
  :data:`TRACK_COMMANDS` (forward, backward, sideways, turning, combined, standing) for
  ``track_seconds``; read: the base's mean velocity and how many envs fell. The open-loop figures say
  where the physics parts; this one says what that does to the policy.

Every engine starts from the same state (the description's default), runs the same targets and the
same push; the first engine is the reference the differences are taken against
(:meth:`CompareReport.parts`: the figures that part by more than a stated tolerance). A plan per engine
(``plans``: a calibrated one, say) is applied to its backends before anything runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import torch

from simbackend import checks
from simbackend.errors import InvalidArgumentError, SimBackendError, closest_names_hint

from .settle import CONTACT_THRESHOLD, EngineSettle

__all__ = [
    "TOLERANCES",
    "CompareReport",
    "EngineCompare",
    "Experiments",
    "FootContacts",
    "PolicyTargets",
    "StepResponse",
    "compare",
    "compare_engine",
    "gait_lift_directions",
    "policy_targets",
    "write_pictures",
]

#: how far a figure may part from the reference engine's before :meth:`CompareReport.parts` names it:
#: base height, fraction of the default height (the issue's target, 2 %); foot load, share of ``m g``;
#: a joint's final error and overshoot, fraction of the step; saturation, fraction of the step's time;
#: contact agreement, fraction of the gait's samples both engines agree on; slip, m.
TOLERANCES = {
    "height": 0.02,
    "foot_load": 0.05,
    "final_error": 0.1,
    "overshoot": 0.1,
    "saturated": 0.1,
    "contact_agreement": 0.9,
    "slip": 0.01,
    "tracking": 0.1,
}
#: the commands the tracking experiment holds (``--checkpoint``), each a fraction of the largest magnitude of
#: the checkpoint's command ranges per component (vx, vy, yaw rate): forward, backward, each side, each turn,
#: two combined, standing. Found the cause of issue 51's losses: an A1 policy trained under MuJoCo's pyramidal
#: friction cone went left at 0.23 m/s on MuJoCo and 0.05 on PhysX, and fell on PhysX alone under the
#: combined command
TRACK_COMMANDS = (
    ("forward", (0.8, 0.0, 0.0)),
    ("backward", (-0.8, 0.0, 0.0)),
    ("left", (0.0, 0.8, 0.0)),
    ("right", (0.0, -0.8, 0.0)),
    ("yaw left", (0.0, 0.0, 0.8)),
    ("yaw right", (0.0, 0.0, -0.8)),
    ("mixed +", (0.5, 0.6, 0.6)),
    ("mixed -", (-0.5, -0.6, -0.6)),
    ("stand", (0.0, 0.0, 0.0)),
)
#: envs per tracked command (each starts from its own initial state of the task's seed 0)
TRACK_ENVS = 4
#: the tracked velocity is averaged from this long after the start (s): the policy's start-up left out
TRACK_SETTLE = 1.0
#: the push lasts this long (s)
PUSH_DURATION = 0.1
#: figures are sampled every this many seconds (or every physics step, if longer)
SAMPLE_DT = 0.01


@dataclass(frozen=True)
class Experiments:
    """What :func:`compare` runs (the module's docstring says how).

    Attributes:
        seconds: how long the robot stands before the experiments (and the settle check's hold), s.
        amplitude: each joint's step (rad), and the most the gait moves a joint from its default.
        step_seconds: how long each step response is read, s.
        gait_seconds: how long the gait and the push run, s.
        frequency: the gait's steps per second (Hz). lift: its foot lift, a fraction of the default
            base height. push_speed: the push's sideways speed change of the whole robot (m/s).
        joints: the policy joints whose step response is read (``None``: every one; one env each).
        track_seconds: with a checkpoint, how long the policy tracks each held command, closed loop (s).
    """

    seconds: float = 1.0
    amplitude: float = 0.3
    step_seconds: float = 0.5
    gait_seconds: float = 2.0
    frequency: float = 2.0
    lift: float = 0.25
    push_speed: float = 0.5
    joints: tuple[str, ...] | None = None
    track_seconds: float = 4.0

    def checked(self, desc: Any) -> Experiments:
        """These settings checked (each out of its range raises naming the field) against ``desc``."""
        joints = self.joints
        if joints is not None:
            joints = (joints,) if isinstance(joints, str) else tuple(dict.fromkeys(joints))
            for j in joints:
                if j not in desc.joints:
                    hint = closest_names_hint(str(j), list(desc.joints))
                    raise InvalidArgumentError(f"joints: {j!r} is not a policy joint of {desc.name!r}{hint}")
        return Experiments(
            seconds=_positive(self.seconds, "seconds", 60.0),
            amplitude=_positive(self.amplitude, "amplitude", math.pi),
            step_seconds=_positive(self.step_seconds, "step_seconds", 60.0),
            gait_seconds=_positive(self.gait_seconds, "gait_seconds", 60.0),
            frequency=_positive(self.frequency, "frequency", 20.0),
            lift=_positive(self.lift, "lift", 1.0),
            push_speed=checks.real(self.push_speed, "push_speed", minimum=0.0, maximum=10.0),
            joints=joints,
            track_seconds=checks.real(
                self.track_seconds, "track_seconds", minimum=TRACK_SETTLE, maximum=60.0, above=True
            ),
        )


@dataclass(frozen=True)
class StepResponse:
    """One joint's servo step response (angles in rad, times in s, torques in N m).

    Attributes:
        joint: the joint. step: the target's step (signed). before: ``target - q`` at the step (the sag).
        final_error: ``target - q`` averaged over the last fifth. overshoot: how far ``q`` went past the
            target, as a fraction of the step (0: never). rise_time: from 10 % to 90 % of the way from the
            angle at the step to the angle it settles at (``nan``: it moved away from the target). saturated: the fraction of the time
            the torque estimate is at the effort limit. peak_torque: the largest ``|torque estimate|``
            (clipped to the limit). effort: the effort limit (``inf``: none).
    """

    joint: str
    step: float
    before: float
    final_error: float
    overshoot: float
    rise_time: float
    saturated: float
    peak_torque: float
    effort: float


@dataclass(frozen=True)
class FootContacts:
    """One foot's contacts under the gait: ``duty`` (the fraction of samples in contact), ``onsets`` and
    ``releases`` (touch-down and lift-off times, s, from the gait's start)."""

    foot: str
    duty: float
    onsets: tuple[float, ...]
    releases: tuple[float, ...]


@dataclass(frozen=True)
class Tracked:
    """A policy holding one command, closed loop (:func:`policy_tracking`): ``command`` ``(vx, vy, yaw rate)``;
    ``velocity`` the base's mean ``(vx, vy, yaw rate)`` over the envs still up, from :data:`TRACK_SETTLE` on
    (``nan`` where none is); ``falls`` how many of ``envs`` fell."""

    command: tuple[float, float, float]
    velocity: tuple[float, float, float]
    falls: int
    envs: int


@dataclass(frozen=True)
class EngineCompare:
    """One engine's figures (:func:`compare_engine`).

    Attributes:
        engine: the backend name. settle: the settle check's result.
        steps: ``{joint: StepResponse}``. contacts: ``{foot: FootContacts}`` (empty without contact forces).
        slip: ``{foot: horizontal displacement, m}`` after the push; ``base_push``: the base's, m.
        traces: the time series the pictures draw (numpy arrays; not in :meth:`to_dict`): ``step_t``,
            ``step_q`` ``(T, k)`` (each joint's angle less its target before the step), ``step_target``
            ``(k,)``, ``gait_t``, ``gait_contact`` ``(T, F)``, ``push_t``, ``push_slip`` ``(T, F)``.
    """

    engine: str
    settle: EngineSettle
    steps: dict[str, StepResponse]
    contacts: dict[str, FootContacts]
    slip: dict[str, float]
    base_push: float
    traces: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    tracking: dict[str, Tracked] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "settle": self.settle.to_dict(),
            "steps": {k: asdict(v) for k, v in self.steps.items()},
            "contacts": {k: asdict(v) for k, v in self.contacts.items()},
            "slip": dict(self.slip),
            "base_push": self.base_push,
            "tracking": {k: asdict(v) for k, v in self.tracking.items()},
        }


def _agreement(a: np.ndarray, b: np.ndarray) -> float:
    n = min(len(a), len(b))
    return float((a[:n] == b[:n]).mean()) if n else float("nan")


def _onset_offset(ref: Sequence[float], other: Sequence[float]) -> float:
    """The mean time (s) from each of ``other``'s events to the nearest of ``ref``'s (``nan``: none)."""
    if not ref or not other:
        return float("nan")
    r = np.asarray(ref)
    return float(np.mean([np.abs(r - t).min() for t in other]))


@dataclass(frozen=True)
class CompareReport:
    """:func:`compare`'s result: ``results`` per engine (the first is the reference), ``skipped`` (engines
    not installed) and ``refused`` (engines that cannot build the robot), each ``{engine: why}``, and the
    settings."""

    robot: str
    results: tuple[EngineCompare, ...]
    skipped: dict[str, str]
    refused: dict[str, str]
    settings: dict[str, Any]

    def rows(self) -> list[tuple[str, list[float], str]]:
        """``(figure, [value per engine], unit)`` rows of the table, in the engines' order."""
        if not self.results:
            return []
        ref = self.results[0]
        out: list[tuple[str, list[float], str]] = []
        out.append(("settled height", [r.settle.height for r in self.results], "m"))
        out.append(("settled height / default", [r.settle.height_fraction for r in self.results], ""))
        out.append(("tilt", [math.degrees(r.settle.tilt) for r in self.results], "deg"))
        for foot in ref.settle.feet:
            out.append((f"load {foot}", [r.settle.feet.get(foot, float("nan")) for r in self.results], "m g"))
        for joint in ref.steps:
            s = [r.steps.get(joint) for r in self.results]
            nan = float("nan")
            out.append((f"step {joint}: final error", [x.final_error if x else nan for x in s], "rad"))
            out.append((f"step {joint}: overshoot", [x.overshoot if x else nan for x in s], "of step"))
            out.append((f"step {joint}: rise", [x.rise_time if x else nan for x in s], "s"))
            out.append((f"step {joint}: saturated", [x.saturated if x else nan for x in s], "of time"))
        for foot in ref.contacts:
            c = [r.contacts.get(foot) for r in self.results]
            out.append((f"gait {foot}: duty", [x.duty if x else float("nan") for x in c], ""))
            out.append((f"gait {foot}: agreement", self.agreement(foot), "of time"))
            out.append((
                f"gait {foot}: onset offset",
                [_onset_offset(ref.contacts[foot].onsets, x.onsets) if x else float("nan") for x in c],
                "s",
            ))  # fmt: skip
        for foot in ref.slip:
            out.append((f"push slip {foot}", [r.slip.get(foot, float("nan")) for r in self.results], "m"))
        out.append(("push base displacement", [r.base_push for r in self.results], "m"))
        for label in ref.tracking:
            t = [r.tracking.get(label) for r in self.results]
            nan = float("nan")
            for i, (part, unit) in enumerate((("vx", "m/s"), ("vy", "m/s"), ("yaw", "rad/s"))):
                cmd = ref.tracking[label].command[i]
                out.append((f"track {label}: {part}", [x.velocity[i] if x else nan for x in t], f"{unit} ({cmd:+.2f})"))
            out.append((f"track {label}: falls", [float(x.falls) if x else nan for x in t], f"of {TRACK_ENVS}"))
        return out

    def agreement(self, foot: str) -> list[float]:
        """Per engine, the fraction of the gait's samples on which ``foot``'s contact state is the reference's."""
        ref = self.results[0]
        i = list(ref.contacts).index(foot)
        out = []
        for r in self.results:
            if foot not in r.contacts or "gait_contact" not in r.traces:
                out.append(float("nan"))
                continue
            j = list(r.contacts).index(foot)
            out.append(_agreement(ref.traces["gait_contact"][:, i], r.traces["gait_contact"][:, j]))
        return out

    def parts(self) -> list[str]:
        """One line per figure on which an engine parts from the reference by more than :data:`TOLERANCES`."""
        if len(self.results) < 2:
            return []
        ref, out = self.results[0], []
        tol = TOLERANCES
        for r in self.results[1:]:
            where = f"{r.engine} vs {ref.engine}"
            dh = r.settle.height_fraction - ref.settle.height_fraction
            if abs(dh) > tol["height"]:
                out.append(
                    f"{where}: settles at {r.settle.height:.3f} m against {ref.settle.height:.3f} m"
                    f" ({dh:+.1%} of the default height; tolerance {tol['height']:.0%})"
                )
            for foot, share in ref.settle.feet.items():
                d = r.settle.feet.get(foot, float("nan")) - share
                if abs(d) > tol["foot_load"]:
                    out.append(
                        f"{where}: {foot} carries {d:+.0%} of m g more ({r.settle.feet[foot]:.0%} against {share:.0%})"
                    )
            for joint, s in ref.steps.items():
                o = r.steps.get(joint)
                if o is None:
                    continue
                size = abs(s.step) or 1.0
                for name, a, b in (
                    ("final error", o.final_error / size, s.final_error / size),
                    ("overshoot", o.overshoot, s.overshoot),
                    ("saturated", o.saturated, s.saturated),
                ):
                    if abs(a - b) > tol[name.replace(" ", "_")]:
                        out.append(f"{where}: {joint} step {name} {a:.2f} against {b:.2f} (of the step or its time)")
            for foot in ref.contacts:
                agree = self.agreement(foot)[self.results.index(r)]
                if agree < tol["contact_agreement"]:
                    out.append(
                        f"{where}: {foot} in contact when the reference is not (or not when it is) {1 - agree:.0%}"
                        f" of the gait (duty {r.contacts[foot].duty:.2f} against {ref.contacts[foot].duty:.2f})"
                    )
            for foot, slip in ref.slip.items():
                d = r.slip.get(foot, float("nan")) - slip
                if abs(d) > tol["slip"]:
                    out.append(
                        f"{where}: {foot} slips {r.slip[foot] * 100:.1f} cm under the push against {slip * 100:.1f} cm"
                    )
            for label, held in ref.tracking.items():
                o = r.tracking.get(label)
                if o is None:
                    continue
                if o.falls != held.falls:
                    out.append(f"{where}: {o.falls} of {o.envs} fall tracking {label} against {held.falls}")
                gap = np.abs(np.subtract(o.velocity, held.velocity))
                if np.nanmax(np.append(gap, 0.0)) > tol["tracking"]:
                    got = ", ".join(f"{v:+.2f}" for v in o.velocity)
                    want = ", ".join(f"{v:+.2f}" for v in held.velocity)
                    out.append(f"{where}: tracking {label} gives ({got}) against ({want}) (vx, vy m/s, yaw rate rad/s)")
        return out

    def to_dict(self) -> dict[str, Any]:
        engines = [r.engine for r in self.results]
        return {
            "robot": self.robot,
            "reference": engines[0] if engines else None,
            "settings": dict(self.settings),
            "engines": {r.engine: r.to_dict() for r in self.results},
            "table": [
                {"figure": name, "unit": unit, "values": dict(zip(engines, vals, strict=True))}
                for name, vals, unit in self.rows()
            ],
            "parts": self.parts(),
            "skipped": dict(self.skipped),
            "refused": dict(self.refused),
        }


def gait_lift_directions(lift: np.ndarray) -> np.ndarray:
    """``(F, k)``: per foot, the change of the policy joints' angles that raises that foot by 1 m, base fixed:
    the least-norm one over the joints that move that foot alone (a joint that moves several feet, a spine
    or a waist, is left still), from ``lift`` ``(F, k)``, the feet's heights' gradient
    (:func:`simbackend.models.feet.foot_points`)."""
    moves = np.abs(lift) > 1e-3
    alone = moves.sum(axis=0) == 1
    out = np.zeros_like(lift, dtype=np.float64)
    for i in range(lift.shape[0]):
        g = np.where(moves[i] & alone, lift[i], 0.0)
        norm = float(g @ g)
        if norm > 0:
            out[i] = g / norm
    return out


@dataclass(frozen=True)
class PolicyTargets:
    """A policy's own rollout as joint targets (:func:`policy_targets`): ``targets`` ``(T, k)`` the policy
    joints' targets per control step (rad), ``control_dt`` (s), ``sim`` the engine it ran on, ``source``
    the checkpoint, ``steps`` how many control steps ran before the episode ended (``T``)."""

    targets: np.ndarray
    control_dt: float
    sim: str
    source: str

    @property
    def steps(self) -> int:
        return len(self.targets)


def policy_targets(checkpoint: Any, sim: str, seconds: float, *, seed: int = 0, device: Any = None) -> PolicyTargets:
    """Run a checkpoint's deterministic policy on its task (one env, its training settings without
    randomization, ``seed``) on engine ``sim`` for ``seconds`` or until the episode ends, and record the
    joint targets its actions gave (``offset + scale * clip(action)``, what the task's controller drove).

    Raises:
        InvalidArgumentError: a checkpoint whose task drives no robot's joints (not the velocity task).
    """
    from simbackend.tasks import make_task
    from simbackend.training import load_checkpoint

    ckpt = load_checkpoint(checkpoint)
    config = {**ckpt.task_config, "randomization": None}
    task = make_task(ckpt.task, sim, 1, config=config, seed=seed, device=device)
    try:
        robot = getattr(task, "robot", None)
        controller = getattr(task, "controller", None)
        if robot is None or controller is None:
            raise InvalidArgumentError(f"checkpoint: its task {ckpt.task!r} drives no robot description's joints")
        k = len(robot.description.joints)
        policy = ckpt.policy(task.device)
        flat = task.flatten(task.reset())
        out = []
        for _ in range(max(1, round(seconds / task.control_dt))):
            step = task.step(policy(flat))
            out.append(controller.targets[0, :k].double().cpu().numpy())
            if bool((step.terminated | step.truncated)[0]):
                break
            flat = task.flatten(step.obs)
        return PolicyTargets(np.asarray(out), float(task.control_dt), sim, str(checkpoint))
    finally:
        task.close()


def policy_tracking(checkpoint: Any, sim: str, seconds: float, *, device: Any = None) -> dict[str, Tracked]:
    """Run a checkpoint's deterministic policy on its task (its training settings without randomization,
    seed 0) on engine ``sim``, :data:`TRACK_ENVS` envs per command of :data:`TRACK_COMMANDS` (scaled to the
    task's command ranges), each command held (``VelocityTask.set_commands``) for ``seconds``, closed loop:
    per command, the base's mean velocity while up and how many envs fell. An env is followed for one
    episode at most: past a fall or the episode's time limit it is no longer counted."""
    from simbackend.tasks import make_task
    from simbackend.training import load_checkpoint

    ckpt = load_checkpoint(checkpoint)
    config = {**ckpt.task_config, "randomization": None}
    n = TRACK_ENVS * len(TRACK_COMMANDS)
    task = make_task(ckpt.task, sim, n, config=config, seed=0, device=device)
    try:
        reach = np.array([max(abs(lo), abs(hi)) for lo, hi in task.command_range], np.float64)
        commands = np.array([c for _, c in TRACK_COMMANDS], np.float64) * reach
        policy = ckpt.policy(task.device)
        flat = task.flatten(task.reset())
        task.set_commands(np.repeat(commands, TRACK_ENVS, axis=0))
        live, fell = np.ones(n, bool), np.zeros(n, bool)
        total, count = np.zeros((n, 3)), np.zeros(n)
        settle = round(TRACK_SETTLE / task.control_dt)
        for k in range(max(settle + 1, round(seconds / task.control_dt))):
            step = task.step(policy(flat))
            done = step.terminated | step.truncated
            fell |= live & step.terminated.cpu().numpy()
            live &= ~done.cpu().numpy()  # an ended episode (a fall, or its time limit) is no longer counted
            if k >= settle:
                v = task.tracked_velocity().double().cpu().numpy()
                total[live] += v[live]
                count[live] += 1
            if not live.any():
                break
            # an env whose episode ended restarts with commands of its own, uncounted
            flat = task.flatten(task.reset(done) if bool(done.any()) else step.obs)
        out = {}
        for i, (label, _) in enumerate(TRACK_COMMANDS):
            rows = slice(i * TRACK_ENVS, (i + 1) * TRACK_ENVS)
            c = count[rows].sum()
            mean = total[rows].sum(0) / c if c else np.full(3, np.nan)
            out[label] = Tracked(
                command=tuple(float(x) for x in commands[i]),
                velocity=tuple(float(x) for x in mean),
                falls=int(fell[rows].sum()),
                envs=TRACK_ENVS,
            )
        return out
    finally:
        task.close()


def _check_checkpoint(checkpoint: Any, desc: Any) -> None:
    """A checkpoint of the velocity task on ``desc``'s robot (its joints, in order), or one line naming it."""
    from simbackend.training import load_checkpoint

    from .registry import get_robot

    try:
        ckpt = load_checkpoint(checkpoint)
        robot = ckpt.task_config.get("robot")
    except (OSError, KeyError, TypeError, ValueError, RuntimeError) as e:
        raise InvalidArgumentError(f"checkpoint: {checkpoint} cannot be read as a checkpoint ({e})") from None
    theirs = get_robot(robot) if robot is not None else None
    if theirs is None or tuple(theirs.joints) != tuple(desc.joints):
        name = getattr(theirs, "name", robot)
        raise InvalidArgumentError(
            f"checkpoint: its policy drives robot {name!r} ({ckpt.task}), not {desc.name!r}: compare the robot it was"
            " trained on"
        )


def _gait_phases(backend: Any, resolved: Any) -> np.ndarray:
    """``(F,)`` 0 or 0.5: the feet in two groups half a period apart: diagonal pairs (by the signs of each
    foot's position from the feet's centre, base frame, at the default pose), or left against right where
    the feet spread sideways more than twice as far as lengthways (a biped)."""
    pos = backend.get_body_pos_b(resolved.feet.tolist())[0, :, :2].double().cpu().numpy()
    rel = pos - pos.mean(axis=0)
    spread = rel.max(axis=0) - rel.min(axis=0)
    side = np.where(rel[:, 1] >= 0, 1.0, -1.0)
    if spread[0] * 2 < spread[1]:
        return np.where(side > 0, 0.0, 0.5)
    front = np.where(rel[:, 0] >= 0, 1.0, -1.0)
    return np.where(front * side > 0, 0.0, 0.5)


def _events(mask: np.ndarray, t: np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...]]:
    change = np.diff(mask.astype(np.int8))
    return tuple(t[1:][change > 0].round(6).tolist()), tuple(t[1:][change < 0].round(6).tolist())


def _step_figures(t: np.ndarray, q: np.ndarray, tau: np.ndarray, q0: float, target: float, effort: float) -> dict:
    span = target - q0
    tail = max(1, len(t) // 5)
    progress = (q - q0) / span if abs(span) > 1e-9 else np.ones_like(q)
    final = float(np.mean(progress[-tail:]))  # the rise is to the angle it settles at (a loaded joint sags)
    r10 = np.flatnonzero(progress >= 0.1 * final)
    r90 = np.flatnonzero(progress >= 0.9 * final)
    rise = float(t[r90[0]] - t[r10[0]]) if final > 0.05 and len(r90) and len(r10) else float("nan")
    limit = effort if math.isfinite(effort) else float("inf")
    return {
        "final_error": float(np.mean(target - q[-tail:])),
        "overshoot": float(max(0.0, progress.max() - 1.0)),
        "rise_time": rise,
        "saturated": float(np.mean(np.abs(tau) >= 0.999 * limit)) if math.isfinite(limit) else 0.0,
        "peak_torque": float(min(np.abs(tau).max(), limit)),
    }


def compare_engine(
    robot: Any,
    sim: str,
    experiments: Experiments | None = None,
    *,
    replay: PolicyTargets | None = None,
    plan: Any = None,
    device: Any = None,
) -> EngineCompare:
    """Run :func:`compare`'s experiments (``experiments``, default :class:`Experiments`'s) on engine ``sim``
    and read its figures; ``replay``: a policy's joint targets (:func:`policy_targets`) the gait replays
    instead of the scripted one; ``plan``: a plan whose init terms are applied first.

    Raises what :func:`~simbackend.robots.make_robot_backend` raises (an engine not installed:
    ``ImportError``; a description its model refuses: one line naming the field).
    """
    from simbackend.math import quat_apply
    from simbackend.models.feet import foot_points

    from .actuation import joint_controller, joint_efforts, target_bounds
    from .registry import get_robot
    from .resolved import make_robot_backend, resolve
    from .scene import robot_scene
    from .settle import settle_engine

    desc = get_robot(robot)
    x = (experiments or Experiments()).checked(desc)
    seconds, amplitude, lift, push_speed = x.seconds, x.amplitude, x.lift, x.push_speed
    step_seconds, gait_seconds, frequency, joints = x.step_seconds, x.gait_seconds, x.frequency, x.joints
    settled = settle_engine(desc, sim, seconds, device=device, plan=plan)
    scene = robot_scene(desc)
    k, nd = len(desc.joints), len(desc.driven_joints)
    stepped = [desc.joints.index(j) for j in (desc.joints if joints is None else joints)]
    m = len(stepped)  # env e < m steps joint stepped[e]
    gait_env, push_env = m, m + 1
    n = m + 2
    with make_robot_backend(desc, sim, n, device=device, contact_sensing=True) as b:
        r = resolve(desc, b, scene.default_qpos)
        if plan is not None:
            b.apply_init_randomization(plan)
        b.set_state(None, r.default_qpos[None].repeat(n, 1))  # every env at the description's default state
        points = foot_points(scene.path, scene.default_qpos, desc.feet, desc.joints)
        lift_dirs = gait_lift_directions(points.lift)
        point_bodies = b.get_body_ids(list(points.bodies)).tolist()
        carriers = sorted(set(point_bodies))
        rows = [carriers.index(x) for x in point_bodies]
        offsets = torch.as_tensor(points.offsets, dtype=torch.float32, device=b.device)

        def feet_xy(env: int) -> np.ndarray:
            pose = b.get_body_pose_w(carriers, [env])[0, rows]  # (F, 7): position, quaternion
            at = pose[:, :3] + quat_apply(pose[:, 3:], offsets)
            return at[:, :2].double().cpu().numpy()

        phases = _gait_phases(b, r)
        default = r.default_joints.double().cpu().numpy()
        span = amplitude  # the controller's targets reach default +- span: the step, the replay's widest
        if replay is not None:
            span = max(amplitude, float(np.abs(replay.targets - default[None]).max()))
        low, high = target_bounds(r, span)
        controller, kp, kd = joint_controller(desc, b, r, low, high)
        effort = joint_efforts(desc, b).double().cpu().numpy()
        kp_np, kd_np = kp.double().cpu().numpy(), kd.double().cpu().numpy()
        dt = b.physics_dt
        sub = max(1, round(SAMPLE_DT / dt))
        sample = sub * dt
        hold = torch.zeros((n, nd), dtype=torch.float32, device=b.device)
        controller.apply(hold, max(1, round(seconds / dt)))

        jl, jh = r.joint_low.double().cpu().numpy(), r.joint_high.double().cpu().numpy()
        sign = np.where(default + amplitude <= jh, 1.0, -1.0)  # towards where the range has room
        sign = np.where((sign < 0) & (default - amplitude < jl), 1.0, sign)
        steps = torch.zeros((n, nd), dtype=torch.float64)
        for e, j in enumerate(stepped):
            steps[e, j] = sign[j] * amplitude / span
        dof = b.get_joint_dof_pos_indices(list(desc.joints))
        dvel = b.get_joint_dof_vel_indices(list(desc.joints))
        foot_bodies = r.feet.tolist()
        unique_feet = sorted(set(foot_bodies))
        base = r.base_body
        mass = settled.mass
        force = mass * push_speed / PUSH_DURATION
        push_steps = max(1, round(PUSH_DURATION / dt))
        sensed = bool(b.capabilities.contact_forces) and bool(b.contact_sensing)

        total = max(round(step_seconds / sample), round(gait_seconds / sample))
        n_step = round(step_seconds / sample)
        omega = 2 * math.pi * frequency
        height = lift * float(r.default_qpos[2])
        q_start = b.get_dof_pos()[:, dof].double().cpu().numpy()
        foot_start = feet_xy(push_env)
        base_start = b.get_base_pos()[push_env, :2].double().cpu().numpy()
        ts, qs, taus, contact, slip = [], [], [], [], []
        for i in range(total):
            t = i * sample
            action = steps.clone()
            if replay is not None:  # the policy's target of the control step this sample is in
                dq = replay.targets[min(int(t / replay.control_dt + 1e-9), len(replay.targets) - 1)] - default
            else:
                h = height * np.maximum(0.0, np.sin(omega * t + 2 * math.pi * phases))  # (F,) lift per foot
                dq = np.clip((h[:, None] * lift_dirs).sum(axis=0), -amplitude, amplitude)  # (k,)
            action[gait_env, :k] = torch.as_tensor(np.clip(dq / span, -1.0, 1.0))
            act = action.to(b.device, torch.float32)
            for s in range(sub):
                if i * sub + s < push_steps:
                    f = torch.zeros((n, 1, 3), dtype=torch.float32, device=b.device)
                    f[push_env, 0, 1] = force
                    b.apply_body_force([base], f)
                controller.apply(act, 1)
            ts.append(t + sample)
            q = b.get_dof_pos()[:, dof].double().cpu().numpy()
            qd = b.get_dof_vel()[:, dvel].double().cpu().numpy()
            own = q[np.arange(m), stepped]  # each step env's stepped joint
            target = default[stepped] + amplitude * sign[stepped]
            tau = kp_np[stepped] * (target - own) - kd_np[stepped] * qd[np.arange(m), stepped]
            qs.append(own)
            taus.append(np.clip(tau, -effort[stepped], effort[stepped]))
            if sensed:
                fz = b.get_body_contact_force_w(unique_feet)[gait_env, :, 2].double().cpu().numpy()
                contact.append(np.array([fz[unique_feet.index(fb)] > CONTACT_THRESHOLD for fb in foot_bodies]))
            slip.append(np.linalg.norm(feet_xy(push_env) - foot_start, axis=-1))
        base_push = float(np.linalg.norm(b.get_base_pos()[push_env, :2].double().cpu().numpy() - base_start))

    t = np.asarray(ts)
    q_arr = np.asarray(qs).reshape(len(t), m)  # (T, m)
    tau_arr = np.asarray(taus).reshape(len(t), m)
    step_figs = {}
    for e, j in enumerate(stepped):
        name = desc.joints[j]
        target = default[j] + amplitude * sign[j]
        q0 = q_start[e, j]
        figs = _step_figures(t[:n_step], q_arr[:n_step, e], tau_arr[:n_step, e], q0, target, float(effort[j]))
        step_figs[name] = StepResponse(
            joint=name, step=float(amplitude * sign[j]), before=float(default[j] - q0), effort=float(effort[j]), **figs
        )
    contacts: dict[str, FootContacts] = {}
    traces = {
        "step_t": t[:n_step],
        "step_q": q_arr[:n_step] - default[None, stepped],
        "step_target": amplitude * sign[stepped],
        "push_t": t,
    }
    if sensed:
        mask = np.asarray(contact)
        traces["gait_t"] = t
        traces["gait_contact"] = mask
        for i, foot in enumerate(desc.feet):
            on, off = _events(mask[:, i], t)
            contacts[foot] = FootContacts(foot=foot, duty=float(mask[:, i].mean()), onsets=on, releases=off)
    traces["push_slip"] = np.asarray(slip)  # (T, F)
    return EngineCompare(
        engine=sim,
        settle=settled,
        steps=step_figs,
        contacts=contacts,
        slip={foot: float(traces["push_slip"][-1, i]) for i, foot in enumerate(desc.feet)},
        base_push=base_push,
        traces=traces,
    )


def _positive(value: Any, name: str, maximum: float) -> float:
    return checks.real(value, name, minimum=0.0, maximum=maximum, above=True)


def compare(
    robot: Any,
    sims: Sequence[str],
    *,
    plans: Mapping[str, Any] | None = None,
    checkpoint: Any = None,
    device: Any = None,
    **experiments: Any,
) -> CompareReport:
    """Drive ``robot`` through the same experiments on each engine of ``sims`` and report where they part.

    Args:
        robot: a :class:`~simbackend.robots.RobotDescription`, a registered name or a JSON file.
        sims: two or more engines; the first is the reference.
        plans: ``{engine: RandomizationPlan}``: init terms applied to that engine's backends first.
        checkpoint: a checkpoint of the velocity task on this robot: the gait replays, open loop, the joint
            targets its policy gave in its own rollout on the first engine (:func:`policy_targets`, for
            ``gait_seconds`` or until its episode ends) instead of the scripted gait; and on each engine the
            policy tracks :data:`TRACK_COMMANDS` closed loop for ``track_seconds`` (:func:`policy_tracking`).
        device: the backends' device.
        experiments: :class:`Experiments`'s fields (``seconds``, ``amplitude``, ``step_seconds``,
            ``gait_seconds``, ``frequency``, ``lift``, ``push_speed``, ``joints``, ``track_seconds``).

    Returns:
        A :class:`CompareReport`: an engine not installed is in ``skipped``, one that refuses the robot in
        ``refused``, each with the reason.

    Raises:
        InvalidArgumentError: an argument out of its range (named), fewer than two engines, an engine
            not registered, a plan for an engine not compared.
    """
    from simbackend.registry import available_backends

    from .registry import get_robot

    desc = get_robot(robot)
    x = Experiments(**experiments).checked(desc)
    if isinstance(sims, str):
        sims = [s for s in sims.split(",") if s.strip()]
    registered = available_backends()
    names: list[str] = []
    for s in sims:
        name = str(s).strip().lower()
        if name not in registered:
            raise InvalidArgumentError(
                f"sims: {s!r} is not a registered backend{closest_names_hint(str(s), list(registered))}"
            )
        if name not in names:
            names.append(name)
    if len(names) < 2:
        raise InvalidArgumentError(f"sims: compare needs two or more engines, got {names}")
    plans = dict(plans or {})
    for engine in plans:
        if engine not in names:
            raise InvalidArgumentError(f"plans: {engine!r} is not one of the engines compared ({', '.join(names)})")
    replay: PolicyTargets | None = None
    if checkpoint is not None:
        _check_checkpoint(checkpoint, desc)
    results: list[EngineCompare] = []
    skipped: dict[str, str] = {}
    refused: dict[str, str] = {}
    for sim in names:
        try:
            if replay is None and checkpoint is not None:  # the policy's rollout, on the reference engine
                replay = policy_targets(checkpoint, sim, x.gait_seconds, device=device)
            result = compare_engine(desc, sim, x, replay=replay, plan=plans.get(sim), device=device)
            if checkpoint is not None:  # the policy closed loop, on each engine
                result = replace(result, tracking=policy_tracking(checkpoint, sim, x.track_seconds, device=device))
            results.append(result)
        except ImportError as e:  # the engine's extra is missing
            skipped[sim] = " ".join(str(e).split())
        except SimBackendError as e:
            refused[sim] = " ".join(str(e).split())
    settings = {**asdict(x), "plans": sorted(plans), "gait": "scripted"}
    if replay is not None:
        settings.update(gait=f"{replay.source} on {replay.sim}", replay_steps=replay.steps)
    return CompareReport(desc.name, tuple(results), skipped, refused, settings)


def write_pictures(report: CompareReport, folder: Any) -> dict[str, Any]:
    """Draw the report into ``folder`` (an existing folder): ``settle.png`` (settled heights and foot loads),
    ``steps.png`` (each stepped joint's angle against time, per engine, with its target), ``contacts.png``
    (each foot's contact under the gait, per engine), ``push.png`` (each foot's slip after the push) and,
    with a checkpoint, ``tracking.png`` (the velocity the policy reached holding each command, per engine).
    Returns ``{name: path}`` of the files written (the experiments an engine did not run are left out)."""
    from pathlib import Path

    from simbackend._extras import require_extra

    require_extra("matplotlib", purpose="the compare report's pictures")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(folder)
    res = report.results
    paths: dict[str, Any] = {}
    if not res:
        return paths
    colors = [f"C{i}" for i in range(len(res))]

    def save(fig: Any, name: str) -> Path:
        fig.tight_layout()
        path = out / f"{name}.png"
        fig.savefig(path)
        plt.close(fig)
        return path

    engines = [r.engine for r in res]

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.6), dpi=110, gridspec_kw={"width_ratios": [1, 2]})
    a1.bar(engines, [r.settle.height for r in res], color=colors)
    a1.axhline(res[0].settle.default_height, color="grey", ls="--", lw=1, label="default height")
    a1.set_ylabel("settled base height (m)")
    a1.legend(fontsize=8)
    feet = list(res[0].settle.feet)
    width = 0.8 / len(res)
    for i, r in enumerate(res):
        a2.bar(np.arange(len(feet)) + i * width, [r.settle.feet.get(f, np.nan) for f in feet], width, label=r.engine,
               color=colors[i])  # fmt: skip
    a2.set_xticks(np.arange(len(feet)) + width * (len(res) - 1) / 2, feet, rotation=20, fontsize=7)
    a2.set_ylabel("share of m g")
    a2.legend(fontsize=8)
    fig.suptitle(f"{report.robot}: settled after {report.settings.get('seconds', 0):g} s")
    paths["settle"] = save(fig, "settle")

    joints = list(res[0].steps)
    if joints:
        cols = min(3, len(joints))
        rows = -(-len(joints) // cols)
        fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.3 * rows), dpi=110, squeeze=False)
        for ax, (j, name) in zip(axes.flat, enumerate(joints)):
            for i, r in enumerate(res):
                if name in r.steps:
                    ax.plot(r.traces["step_t"], r.traces["step_q"][:, j], color=colors[i], lw=1.2, label=r.engine)
            ax.axhline(res[0].traces["step_target"][j], color="black", ls="--", lw=0.8, label="target")
            ax.set_title(name, fontsize=8)
            ax.tick_params(labelsize=7)
        for ax in axes.flat[len(joints) :]:
            ax.set_visible(False)
        axes[0, 0].legend(fontsize=7)
        fig.supxlabel("time after the step (s)", fontsize=8)
        fig.supylabel("angle - default (rad)", fontsize=8)
        paths["steps"] = save(fig, "steps")

    feet = list(res[0].contacts)
    if feet:
        fig, ax = plt.subplots(figsize=(9, 0.45 * len(feet) * len(res) + 1.2), dpi=110)
        y: float = 0.0
        ticks: list[tuple[float, str]] = []
        for foot in feet:
            for i, r in enumerate(res):
                if foot not in r.contacts:
                    continue
                t, mask = r.traces["gait_t"], r.traces["gait_contact"][:, list(r.contacts).index(foot)]
                dt = t[1] - t[0] if len(t) > 1 else 1.0
                ax.broken_barh([(t[s] - dt, dt) for s in np.flatnonzero(mask)], (y, 0.8), color=colors[i])
                ticks.append((y + 0.4, f"{foot} {r.engine}"))
                y += 1
            y += 0.5
        ax.set_yticks([p for p, _ in ticks], [n for _, n in ticks], fontsize=7)
        ax.set_xlabel("time in the gait (s)")
        ax.set_title(f"{report.robot}: feet in contact under the same gait")
        paths["contacts"] = save(fig, "contacts")

    feet = list(res[0].slip)
    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=110)
    styles = ["-", "--", ":", "-."]
    for i, r in enumerate(res):
        for f, foot in enumerate(feet):
            ax.plot(r.traces["push_t"], r.traces["push_slip"][:, f] * 100, color=colors[i], ls=styles[f % 4], lw=1.1,
                    label=f"{r.engine} {foot}")  # fmt: skip
    ax.set_xlabel("time from the push (s)")
    ax.set_ylabel("foot's horizontal displacement (cm)")
    ax.set_title(f"{report.robot}: slip under a {report.settings.get('push_speed', 0):g} m/s sideways push")
    ax.legend(fontsize=6, ncol=2)
    paths["push"] = save(fig, "push")

    labels = list(res[0].tracking)
    if labels:
        fig, axes = plt.subplots(1, 3, figsize=(11, 3.8), dpi=110, sharey=True)
        ypos = np.arange(len(labels))
        height = 0.8 / len(res)
        for k, (ax, part) in enumerate(zip(axes, ("vx (m/s)", "vy (m/s)", "yaw rate (rad/s)"), strict=True)):
            for i, r in enumerate(res):
                got = [r.tracking[lb].velocity[k] if lb in r.tracking else np.nan for lb in labels]
                ax.barh(ypos + i * height, got, height, color=colors[i], label=r.engine)
                fell = [lb for lb in labels if lb in r.tracking and r.tracking[lb].falls]
                for lb in fell:
                    ax.text(0, labels.index(lb) + i * height, f" {r.tracking[lb].falls} fell", fontsize=6, va="center")
            cmd = [res[0].tracking[lb].command[k] for lb in labels]
            ax.scatter(cmd, ypos + height * (len(res) - 1) / 2, marker="|", s=120, color="black", label="command")
            ax.set_xlabel(part, fontsize=8)
            ax.tick_params(labelsize=7)
        axes[0].set_yticks(ypos + height * (len(res) - 1) / 2, labels, fontsize=7)
        axes[0].legend(fontsize=7)
        fig.suptitle(f"{report.robot}: the policy holding each command, closed loop")
        paths["tracking"] = save(fig, "tracking")
    return paths
