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
  other), with their contact force (N).

It **stands** when the base is above ``1 - SINK_LIMIT`` of its default height,
tilted less than :data:`MAX_TILT`, no non-foot body touches anything and the feet
carry ``m g`` within :data:`WEIGHT_TOLERANCE`. The two limits are half the
velocity task's fall margins (``min_height`` 0.5, ``max_tilt`` 1 rad): a robot
that uses half its fall margin standing still has little left to walk with.
Each way it fails gives one warning line naming the robot, the engine, the
figures, and what to change. Engines that settle differently (base heights more
than :data:`HEIGHT_TOLERANCE` of the default height apart, or different bodies
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

from .description import RobotDescription

__all__ = [
    "CONTACT_THRESHOLD",
    "HEIGHT_TOLERANCE",
    "MAX_TILT",
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
#: the most tilt (rad) of the base's up axis from vertical of a standing robot (half ``max_tilt`` 1 rad)
MAX_TILT = 0.5
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
    def stands(self) -> bool:
        """Above ``1 - SINK_LIMIT`` of the default height, upright, no non-foot body in contact, the
        feet carrying ``m g``."""
        return not self.sinks and self.upright and not self.touching and self.feet_carry

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields, with the derived figures and the verdict."""
        return {
            **asdict(self),
            "height_fraction": self.height_fraction,
            "feet_share": self.feet_share if self.contact_forces else None,
            "upright": self.upright,
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

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the robot, the figures per engine, the skipped engines, the warnings, the verdict."""
        return {
            "robot": self.robot,
            "seconds": self.seconds,
            "stands": self.stands,
            "engines": {r.engine: r.to_dict() for r in self.results},
            "skipped": dict(self.skipped),
            "refused": dict(self.refused),
            "warnings": list(self.warnings),
        }


def _seconds(seconds: Any) -> float:
    return checks.real(seconds, "seconds", minimum=0.0, maximum=3600.0, above=True)


def settle_engine(robot: Any, sim: str, seconds: float = 2.0, *, device: Any = None) -> EngineSettle:
    """Hold ``robot``'s default pose on engine ``sim`` (one env) for ``seconds`` and read the settled pose.

    ``robot`` is a description, a registered name or a JSON file. Raises what
    :func:`~simbackend.robots.make_robot_backend` raises (an engine not installed: ``ImportError``;
    a description its model refuses: one line naming the field).
    """
    from simbackend.math import quat_apply

    from .actuation import joint_controller, target_bounds
    from .registry import get_robot
    from .resolved import make_robot_backend, resolve
    from .scene import robot_scene

    desc = get_robot(robot)
    seconds = _seconds(seconds)
    scene = robot_scene(desc)
    with make_robot_backend(desc, sim, 1, device=device, contact_sensing=True) as b:
        r = resolve(desc, b, scene.default_qpos)
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
        height = float(b.get_base_pos()[0, 2])
        up = quat_apply(b.get_base_quat()[:1], torch.tensor([[0.0, 0.0, 1.0]], device=b.device))
        tilt = math.acos(max(-1.0, min(1.0, float(up[0, 2]))))
        mass = float(b.info.body_mass[bodies].sum())
        gravity = float(b.get_env_gravity()[0].norm())
        weight = mass * gravity
        feet: dict[str, float] = {}
        touching: dict[str, float] = {}
        if sensed:
            per_body = (feet_sum / window).tolist()
            for name, fb in zip(desc.feet, r.feet.tolist(), strict=True):
                feet[name] = per_body[foot_bodies.index(int(fb))] / weight if weight > 0 else float("nan")
            # two feet on one body (two geoms of it) share its force: count it once
            seen: set[int] = set()
            for name, fb in zip(desc.feet, r.feet.tolist(), strict=True):
                if int(fb) in seen:
                    feet[name] = 0.0
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
        )


def engine_warnings(robot: str, result: EngineSettle) -> list[str]:
    """One line per way ``result`` fails to stand, each naming the robot, the engine, the figures and what
    to change."""
    where = f"{robot} on {result.engine}"
    out = []
    if result.touching:
        bodies = ", ".join(f"{n} ({f:.1f} N)" for n, f in sorted(result.touching.items(), key=lambda x: -x[1]))
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
            f"{where}: tilts {math.degrees(result.tilt):.0f} deg from upright (limit {math.degrees(MAX_TILT):.0f});"
            " raise kp / kd (robot.kp, robot.kd), or check that the default pose balances (robot.default_pose)"
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
    return [f"engines disagree on the settled pose: {'; '.join(parts)}"] if parts else []


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
