"""The settle check: does a robot hold its default pose under its own actuation, on each engine?

:func:`settle` places the robot at its description's default state (base level,
the lowest geom 2 mm above the floor), drives every driven joint to its default
angle with the description's actuation (:func:`simbackend.robots.actuation.joint_controller`)
for ``seconds`` (2 s), and reads, through the contract only:

* the settled base height, and its fraction of the default (kinematic) height;
* the base's tilt from upright;
* each foot's share of the robot's weight: the vertical contact force on the
  foot's body (averaged over the last :data:`WINDOW` s) over ``m g``;
* the robot's bodies other than the feet in contact with anything (floor, each
  other), with their contact force (N); those whose collision geometry overlaps
  another body of the robot at the default pose (self-contacts, found in the
  scene file by :func:`simbackend.models.overlaps.self_overlaps`) are named as such;
* each driven joint's sag: its settled angle less its default angle (rad).

It **stands** when the base is above ``1 - SINK_LIMIT`` of its default height
(half the velocity task's fall margin, ``min_height`` 0.5), tilted less than
:data:`MAX_TILT`, no non-foot body touches anything, the feet carry ``m g``
within :data:`WEIGHT_TOLERANCE`, and every foot carries at least
:data:`MIN_FOOT_SHARE` of an equal share (``m g / F`` for ``F`` feet). Each way it
fails gives one warning line naming the robot, the engine, the figures, and what
to change. Engines that settle differently (base heights more than
:data:`HEIGHT_TOLERANCE` of the default height apart, or different bodies
resting) get one line (:func:`compare_engines`).

A foot named by a geom counts its whole body (the contract gives contact forces
per body): a calf whose foot sphere is the foot is a foot.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from simbackend import checks
from simbackend.errors import InvalidArgumentError, SimBackendError, closest_names_hint
from simbackend.models.overlaps import contact_pairs

from .description import RobotDescription

__all__ = [
    "CONTACT_THRESHOLD",
    "HEIGHT_TOLERANCE",
    "MAX_TILT",
    "MIN_FOOT_SHARE",
    "SINK_LIMIT",
    "WEIGHT_TOLERANCE",
    "WINDOW",
    "EngineSettle",
    "SettleReport",
    "compare_engines",
    "engine_warnings",
    "settle",
    "settle_engine",
    "settle_warnings",
]

#: a robot "sinks" when its base settles more than this fraction below its default height
#: (half the velocity task's fall margin, ``min_height`` 0.5)
SINK_LIMIT = 0.25
#: the most tilt (rad) of the base's up axis from vertical of a standing robot: 0.2 rad (11.5 deg), where the
#: projected gravity a policy observes is already a fifth of g sideways. The default pose is placed level, so
#: a tilt is the legs sagging unequally or a pose that does not balance; a robot leaning more starts every
#: episode from a lean its policy must first undo. (Go1 settles at 9 deg on the MuJoCo engines, its most.)
MAX_TILT = 0.2
#: the least share of ``m g`` each foot carries, as a fraction of an equal share ``1 / F`` (``F`` distinct
#: foot bodies): a third, 8 % of ``m g`` on four feet, 17 % on two. A foot carrying less is nearly lifted: the
#: others hold the robot, and a push or the first step unloads it. (Go1's front feet carry 11 % each on the
#: MuJoCo engines, 0.43 of an equal share, the least of the built-in robots.)
MIN_FOOT_SHARE = 1 / 3
#: the feet carry ``m g`` when their vertical forces sum to within this fraction of it
WEIGHT_TOLERANCE = 0.1
#: a body is in contact when its mean contact force over the window exceeds this (N; the velocity task's)
CONTACT_THRESHOLD = 1.0
#: the contact forces are averaged over the last this many seconds of the settle (a quarter of it if shorter)
WINDOW = 0.2
#: engines disagree when their settled base heights differ by more than this fraction of the default height
HEIGHT_TOLERANCE = 0.05


@dataclass(frozen=True)
class EngineSettle:
    """One engine's settled pose.

    Attributes:
        engine: the backend name.
        seconds: how long the default pose was held (s).
        default_height: the base's default (kinematic) height, m.
        height: the settled base height, m.
        tilt: the base's up axis from vertical, rad.
        mass: the robot's total mass, kg. gravity: ``|g|``, m/s^2.
        feet: ``{foot name: share of m g}`` (its body's mean vertical contact force / (m g));
            empty where the engine serves no contact forces.
        touching: ``{body name: mean contact force, N}`` of the robot's bodies other than the feet
            in contact with anything.
        contact_forces: whether the engine served contact forces (else ``feet`` and ``touching``
            are empty and only height and tilt are judged).
        shared_feet: feet whose body another foot named first already counts (its share is 0).
        self_contacts: ``((body_a, body_b, penetration m), ...)``: the robot's bodies in contact with each
            other at the default pose, in the scene file (the same on every engine).
        sag: ``{driven joint: settled angle - default angle}``, rad.
    """

    engine: str
    seconds: float
    default_height: float
    height: float
    tilt: float
    mass: float
    gravity: float
    feet: dict[str, float] = field(default_factory=dict)
    touching: dict[str, float] = field(default_factory=dict)
    contact_forces: bool = True
    shared_feet: tuple[str, ...] = ()
    self_contacts: tuple[tuple[str, str, float], ...] = ()
    sag: dict[str, float] = field(default_factory=dict)

    @property
    def height_fraction(self) -> float:
        """The settled height over the default height."""
        return self.height / self.default_height if self.default_height > 0 else float("nan")

    @property
    def feet_share(self) -> float:
        """The feet's vertical contact force over ``m g`` (1: they carry the robot)."""
        return sum(self.feet.values())

    @property
    def sinks(self) -> bool:
        return not self.height_fraction >= 1.0 - SINK_LIMIT

    @property
    def upright(self) -> bool:
        return self.tilt < MAX_TILT

    @property
    def feet_carry(self) -> bool:
        return not self.contact_forces or abs(self.feet_share - 1.0) <= WEIGHT_TOLERANCE

    @property
    def least_foot(self) -> tuple[str, float] | None:
        """``(foot, its share over an equal share)`` of the foot carrying least (``None`` without contact forces)."""
        shares = {n: v for n, v in self.feet.items() if n not in self.shared_feet}
        if not self.contact_forces or not shares:
            return None
        name = min(shares, key=lambda n: shares[n])
        return name, shares[name] * len(shares)

    @property
    def feet_even(self) -> bool:
        """Every foot carries at least :data:`MIN_FOOT_SHARE` of an equal share of ``m g``."""
        least = self.least_foot
        return least is None or least[1] >= MIN_FOOT_SHARE

    @property
    def self_touching(self) -> dict[str, float]:
        """The bodies of ``touching`` that overlap another body of the robot at the default pose."""
        mine = {b for a, b2, _ in self.self_contacts for b in (a, b2)}
        return {n: f for n, f in self.touching.items() if n in mine}

    @property
    def failed(self) -> list[str]:
        """The limits it fails, in words (empty when it stands)."""
        out = []
        if self.sinks:
            out.append("sinks")
        if self.self_touching:
            out.append("self-contacts")
        if len(self.self_touching) < len(self.touching):
            out.append("rests on other bodies")
        if not self.upright:
            out.append("tilt")
        if not self.feet_carry:
            out.append("feet carry")
        if not self.feet_even:
            out.append("foot loads")
        return out

    @property
    def stands(self) -> bool:
        """Above ``1 - SINK_LIMIT`` of the default height, upright, no non-foot body in contact, the
        feet carrying ``m g``, each foot its share."""
        return not self.failed

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields, with the derived figures and the verdict."""
        return {
            **asdict(self),
            "height_fraction": self.height_fraction,
            "feet_share": self.feet_share if self.contact_forces else None,
            "upright": self.upright,
            "feet_even": self.feet_even,
            "failed": self.failed,
            "stands": self.stands,
        }


@dataclass(frozen=True)
class SettleReport:
    """:func:`settle`'s result.

    Attributes:
        robot: the robot's name. seconds: how long each engine held the pose.
        results: one :class:`EngineSettle` per engine that built the robot, in the order asked.
        skipped: ``{engine: why}`` for engines not installed.
        refused: ``{engine: why}`` for engines whose model refuses the description (the line names the field).
        warnings: one line per problem (:func:`engine_warnings`), then the engines' disagreement
            (:func:`compare_engines`), if any.
    """

    robot: str
    seconds: float
    results: tuple[EngineSettle, ...]
    skipped: dict[str, str]
    refused: dict[str, str]
    warnings: tuple[str, ...]

    @property
    def stands(self) -> bool:
        """Whether the robot stands on every engine that built it (and at least one did)."""
        return bool(self.results) and all(r.stands for r in self.results)

    def summary(self) -> str:
        """One line: the engines it stands on, those it does not (with the limits failed), those not checked."""
        good = [r.engine for r in self.results if r.stands]
        bad = [f"{r.engine} ({', '.join(r.failed)})" for r in self.results if not r.stands]
        unchecked = list(self.skipped) + list(self.refused)
        parts = []
        if good:
            parts.append(f"stands on {', '.join(good)}")
        if bad:
            parts.append(f"does not stand on {', '.join(bad)}")
        if unchecked:
            parts.append(f"not checked on {', '.join(unchecked)}")
        return f"{self.robot}: {'; '.join(parts) or 'not checked on any engine'}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the robot, the figures per engine, the skipped engines, the warnings, the verdict."""
        return {
            "robot": self.robot,
            "seconds": self.seconds,
            "stands": self.stands,
            "summary": self.summary(),
            "engines": {r.engine: r.to_dict() for r in self.results},
            "skipped": dict(self.skipped),
            "refused": dict(self.refused),
            "warnings": list(self.warnings),
        }


def _seconds(seconds: Any) -> float:
    return checks.real(seconds, "seconds", minimum=0.0, maximum=3600.0, above=True)


def settle_engine(robot: Any, sim: str, seconds: float = 2.0, *, device: Any = None, plan: Any = None) -> EngineSettle:
    """Hold ``robot``'s default pose on engine ``sim`` (one env) for ``seconds`` and read the settled pose.

    ``robot`` is a description, a registered name or a JSON file; ``plan`` a
    :class:`~simbackend.randomization.RandomizationPlan` whose init terms are applied first (a calibrated
    plan, say). Raises what
    :func:`~simbackend.robots.make_robot_backend` raises (an engine not installed: ``ImportError``;
    a description its model refuses: one line naming the field).
    """
    from simbackend.math import quat_apply
    from simbackend.models.overlaps import self_overlaps

    from .actuation import joint_controller, target_bounds
    from .registry import get_robot
    from .resolved import make_robot_backend, resolve
    from .scene import robot_scene

    desc = get_robot(robot)
    seconds = _seconds(seconds)
    scene = robot_scene(desc)
    with make_robot_backend(desc, sim, 1, device=device, contact_sensing=True) as b:
        r = resolve(desc, b, scene.default_qpos)
        if plan is not None:
            b.apply_init_randomization(plan)
        b.set_state(None, r.default_qpos[None])
        low, high = target_bounds(r, 0.5)
        controller, _, _ = joint_controller(desc, b, r, low, high)
        hold = torch.zeros((1, len(desc.driven_joints)), dtype=torch.float32, device=b.device)  # the default pose
        dt = b.physics_dt
        total = max(1, round(seconds / dt))
        window = max(1, min(round(WINDOW / dt), total // 4))
        if total > window:
            controller.apply(hold, total - window)
        bodies = b.get_body_subtree_ids(r.base_body).cpu().tolist()
        foot_bodies = sorted(set(int(f) for f in r.feet))
        others = [i for i in bodies if i not in foot_bodies]
        sensed = bool(b.capabilities.contact_forces) and bool(b.contact_sensing)
        feet_sum = torch.zeros(len(foot_bodies), dtype=torch.float64)
        other_sum = torch.zeros(len(others), dtype=torch.float64)
        for _ in range(window):
            controller.apply(hold, 1)
            if sensed:
                feet_sum += b.get_body_contact_force_w(foot_bodies)[0, :, 2].double().cpu()
                if others:
                    other_sum += b.get_body_contact_force_w(others)[0].double().cpu().norm(dim=-1)
        q = b.get_dof_pos()[0, b.get_joint_dof_pos_indices(list(desc.driven_joints))].double().cpu()
        default = torch.cat([r.default_joints.double().cpu(), r.held_default.double().cpu()])
        sag = dict(zip(desc.driven_joints, (q - default).tolist(), strict=True))
        height = float(b.get_base_pos()[0, 2])
        up = quat_apply(b.get_base_quat()[:1], torch.tensor([[0.0, 0.0, 1.0]], device=b.device))
        tilt = math.acos(max(-1.0, min(1.0, float(up[0, 2]))))
        mass = float(b.info.body_mass[bodies].sum())
        gravity = float(b.get_env_gravity()[0].norm())
        weight = mass * gravity
        feet: dict[str, float] = {}
        touching: dict[str, float] = {}
        shared: list[str] = []
        if sensed:
            per_body = (feet_sum / window).tolist()
            for name, fb in zip(desc.feet, r.feet.tolist(), strict=True):
                feet[name] = per_body[foot_bodies.index(int(fb))] / weight if weight > 0 else float("nan")
            # two feet on one body (two geoms of it) share its force: count it once
            seen: set[int] = set()
            for name, fb in zip(desc.feet, r.feet.tolist(), strict=True):
                if int(fb) in seen:
                    feet[name] = 0.0
                    shared.append(name)
                seen.add(int(fb))
            mean_other = (other_sum / window).tolist()
            touching = {b.body_names[i]: f for i, f in zip(others, mean_other, strict=True) if f > CONTACT_THRESHOLD}
        return EngineSettle(
            engine=sim,
            seconds=total * dt,
            default_height=float(r.default_qpos[2]),
            height=height,
            tilt=tilt,
            mass=mass,
            gravity=gravity,
            feet=feet,
            touching=touching,
            contact_forces=sensed,
            shared_feet=tuple(shared),
            self_contacts=self_overlaps(scene.path, scene.default_qpos, desc.base_body).contacts,
            sag=sag,
        )


def engine_warnings(robot: str, result: EngineSettle) -> list[str]:
    """One line per way ``result`` fails to stand, each naming the robot, the engine, the figures and what
    to change."""
    where = f"{robot} on {result.engine}"
    out = []
    mine = result.self_touching
    if mine:
        bodies = ", ".join(f"{n} ({f:.1f} N)" for n, f in sorted(mine.items(), key=lambda x: -x[1]))
        pairs = contact_pairs(result.self_contacts)
        out.append(
            f"{where}: collides with itself: {bodies}: its collision geometry overlaps at the default pose ({pairs});"
            " these forces push its own bodies apart, not on the floor. Set robot.self_collisions to false (the"
            " default), exclude the pairs (robot.collision_exclude), or give the links collision geometry that"
            " clears each other (a mesh collides as its convex hull: primitives instead)"
        )
    resting = {n: f for n, f in result.touching.items() if n not in mine}
    if resting:
        bodies = ", ".join(f"{n} ({f:.1f} N)" for n, f in sorted(resting.items(), key=lambda x: -x[1]))
        out.append(
            f"{where}: rests on bodies other than its feet: {bodies}; change the default pose (robot.default_pose)"
            " so they clear the floor, or raise kp / kd (robot.kp, robot.kd); check robot.effort_limit"
        )
    if result.sinks:
        out.append(
            f"{where}: sinks to {result.height:.3f} m, {result.height_fraction:.0%} of its default height"
            f" {result.default_height:.3f} m (more than {SINK_LIMIT:.0%} below it); raise kp / kd (robot.kp, robot.kd),"
            " check robot.effort_limit (the actuators may saturate)"
        )
    if not result.upright:
        out.append(
            f"{where}: tilts {math.degrees(result.tilt):.1f} deg from upright (limit {math.degrees(MAX_TILT):.1f});"
            " raise kp / kd (robot.kp, robot.kd), or check that the default pose balances (robot.default_pose)"
        )
    least = result.least_foot
    if least is not None and not result.feet_even and not result.touching:
        n = len(result.feet) - len(result.shared_feet)
        out.append(
            f"{where}: uneven foot loads: {least[0]} carries {result.feet[least[0]]:.0%} of m g, less than"
            f" {MIN_FOOT_SHARE:.2f} of an equal share ({MIN_FOOT_SHARE / n:.0%} with {n} feet): the pose does not"
            " balance over its feet; check that robot.default_pose is symmetric and puts the centre of mass over"
            " the feet, and raise kp (robot.kp) where a leg sags"
        )
    if result.contact_forces and not result.feet_carry and not result.touching:  # else the bodies named carry it
        out.append(
            f"{where}: its feet carry {result.feet_share:.0%} of m g ({result.mass:.2f} kg), not"
            f" 100 +- {WEIGHT_TOLERANCE:.0%}: it has not come to rest; raise kd (robot.kd), and check that robot.feet"
            " names the bodies that touch the ground"
        )
    return out


def compare_engines(results: Sequence[EngineSettle], tolerance: float = HEIGHT_TOLERANCE) -> list[str]:
    """One line when the engines settle differently: base heights more than ``tolerance`` of the default
    height apart, or different bodies resting; else none."""
    if len(results) < 2:
        return []
    parts = []
    fractions = {r.engine: r.height_fraction for r in results}
    spread = max(fractions.values()) - min(fractions.values())
    if not spread <= tolerance:
        heights = ", ".join(f"{r.engine} {r.height:.3f} m ({r.height_fraction:.0%})" for r in results)
        parts.append(f"base height {heights}: {spread:.0%} of the default height apart (tolerance {tolerance:.0%})")
    resting = {r.engine: tuple(sorted(r.touching)) for r in results if r.contact_forces}
    if len(set(resting.values())) > 1:
        listed = "; ".join(f"{e}: {', '.join(b) if b else 'none'}" for e, b in resting.items())
        parts.append(f"non-foot bodies resting {listed}")
    why = " (`simbackend compare` shows where they part: docs/sim-to-sim.md)"
    return [f"engines disagree on the settled pose: {'; '.join(parts)}{why}"] if parts else []


def settle(robot: Any, sims: Sequence[str] | None = None, seconds: float = 2.0, *, device: Any = None) -> SettleReport:
    """Hold ``robot``'s default pose under its own actuation for ``seconds`` on each engine and report.

    Args:
        robot: a :class:`~simbackend.robots.RobotDescription`, a registered name or a JSON file.
        sims: the engines (default: every registered one; those not installed are skipped).
        seconds: how long to hold the pose, > 0.
        device: the backends' device.

    Returns:
        A :class:`SettleReport`. An engine not installed is listed in ``skipped``, one whose model
        refuses the description in ``refused``, each with the reason; the others' figures are in ``results``.
    """
    from simbackend.registry import available_backends

    from .registry import get_robot

    desc: RobotDescription = get_robot(robot)
    seconds = _seconds(seconds)
    if sims is None:
        names = list(available_backends())
    else:
        if isinstance(sims, str):
            sims = [sims]
        registered = available_backends()
        names = []
        for s in sims:
            if not isinstance(s, str) or s.lower() not in registered:
                raise InvalidArgumentError(
                    f"sims: {s!r} is not a registered backend{closest_names_hint(str(s), list(registered))}"
                )
            if s.lower() not in names:
                names.append(s.lower())
    results: list[EngineSettle] = []
    skipped: dict[str, str] = {}
    refused: dict[str, str] = {}
    for sim in names:
        try:
            results.append(settle_engine(desc, sim, seconds, device=device))
        except ImportError as e:  # the engine's extra is missing
            skipped[sim] = " ".join(str(e).split())
        except SimBackendError as e:
            refused[sim] = " ".join(str(e).split())
    warnings = [w for r in results for w in engine_warnings(desc.name, r)] + compare_engines(results)
    return SettleReport(desc.name, seconds, tuple(results), skipped, refused, tuple(warnings))


def settle_warnings(robot: Any, sim: str, seconds: float = 2.0, *, device: Any = None) -> list[str]:
    """The settle check's warnings for one engine (1 env): none when the robot stands there.

    What a trainer calls at start on its engine; raises what :func:`settle_engine` raises.
    """
    from .registry import get_robot

    desc = get_robot(robot)
    return engine_warnings(desc.name, settle_engine(desc, sim, seconds, device=device))
