"""``velocity``: a legged robot tracks a commanded planar velocity, on flat ground; any robot description.

The legged_gym / Isaac Lab recipe, over :mod:`simbackend.robots`:
``make_task("velocity", config={"robot": "go1"})`` (``--task velocity --robot
go1``). ``quadruped`` is the same task on the built-in toy quadruped.

Episode: a start at the robot's default pose (base level on the floor, random
heading, joint angles ``default +- joint_noise``), and a command (forward and
lateral velocity and yaw rate, in the base's frame: the IMU site's where the
robot names one; the velocity error is measured in it) drawn anew every
``resample_time`` seconds. All draws of an episode come from the task's
counter-based reset streams, so every engine sees the same episodes.

Action: ``(N, k)`` in ``[-1, 1]`` for the robot's ``joints``: joint targets
``default + action_scale * action``, driven by the robot's actuation (position
servos, or a PD law on motors at the physics rate); ``held_joints`` keep their
default targets.

Observations (the base's frame, or the IMU site's when the robot names one):
``base_lin_vel`` (3), ``base_ang_vel`` (3), ``projected_gravity`` (3),
``command`` (3), ``joint_pos`` (k, from the default), ``joint_vel`` (k),
``last_action`` (k).

Reward (per policy step, each term scaled by the control period), by default
mjlab's minimal recipe: velocity and yaw-rate tracking ``exp(-err^2 /
sigma)``, a pose term ``exp(-mean(((q - default) / pose_std)^2))`` over the
policy's joints, and penalties on joints beyond 90 % of their range and on the
action rate. Every default term but the two penalties is positive, so a robot
that stays up near its default pose, with smooth actions, earns each step and
has nothing to gain from ending its episode (0.9.0's penalty-heavy recipe made a standing robot's steps
negative, and its policies learnt to end their episodes). Options, weight 0
by default: penalties on vertical velocity, roll/pitch rate, tilt, joint
velocity, joint torque (the actuation's PD estimate); with contact forces,
feet air time (steps of at least ``air_time`` s, when commanded to move) and
foot slip (a foot's planar speed while in contact). With
``only_positive_rewards`` (legged_gym's) a step's summed terms are clipped at
0 (the ``clip`` term is what was added back), and a ``termination`` weight
costs a fall once (not scaled by the control period), after the clip.

From the description: ``action_scale=None`` (an option; the default is 0.5 rad) gives each joint
``effort / kp`` rad (a unit action asks for the joint's full torque at rest),
at most half its range and 1 rad (:func:`default_action_scale`); ``command_range=None`` gives forward commands up to
``min(1, sqrt(0.35 g h))`` m/s (``h`` the base's default height: a Froude
number of 0.35, Go1's 1 m/s), half that sideways, and 1 rad/s of yaw.

Command curriculum (training only, :meth:`VelocityTask.begin_training`): the
commands start at ``curriculum_start`` of their ranges and widen by
``curriculum_step`` each time the training episodes that ended over the last
fifth of ``episode_length`` steps tracked their commands: on average they
tracked ``curriculum_threshold`` of the commanded planar speed (``1 - error /
command``, the command counted at least ``success_error`` so that standing
still does not pass on small commands; a fall tracked nothing). Evaluations
and a task that is not training draw from the full ranges.

Observation noise (training only, as the command curriculum): with ``obs_noise`` > 0
each step's observation terms get uniform noise of half-width ``obs_noise``
times :data:`OBS_NOISE` (Isaac Lab's and mjlab's velocity environments: base
linear velocity 0.1 m/s, angular velocity 0.2 rad/s, projected gravity 0.05,
joint positions 0.01 rad, joint velocities 1.5 rad/s; mjlab trains with 1),
drawn from the task's counter-based streams (seed, env, observation count).
Evaluations see the noiseless observation, as Isaac Lab's and mjlab's play
configurations turn observation corruption off; 0 (the default) leaves the
observations as they were.

Terminated when the robot falls: base below ``min_height`` of its default
height, tilted more than ``max_tilt`` rad, or, with contact forces, a
``termination_bodies`` body touching anything. Success: the episode reaches
its time limit with the mean planar velocity error at most ``success_error``
m/s.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from simbackend import _validate as V
from simbackend import checks
from simbackend.errors import InvalidArgumentError, closest_names_hint
from simbackend.math import quat_apply, quat_apply_inverse, quat_yaw
from simbackend.randomization import uniforms_torch
from simbackend.robots import expand_plan, get_robot, resolve, robot_scene
from simbackend.robots.actuation import joint_controller, joint_controller_gains, joint_efforts, target_bounds
from simbackend.scanner import grid_offsets
from simbackend.terrains import TerrainConfig, generate_terrain

from . import register_task
from .base import Task, TaskConfig, check_non_negative

#: reward weights (per second of control), overridable through ``VelocityConfig.reward_weights``
REWARD_WEIGHTS = {
    "track_lin_vel": 1.0,
    "track_yaw_rate": 1.0,
    "pose": 1.0,
    "joint_limits": -1.0,
    "action_rate": -0.1,
    "lin_vel_z": 0.0,
    "ang_vel_xy": 0.0,
    "tilt": 0.0,
    "joint_vel": 0.0,
    "torques": 0.0,
    "feet_air_time": 0.0,
    "foot_slip": 0.0,
    "termination": 0.0,
}
#: reward terms that are not weights of REWARD_WEIGHTS: what ``only_positive_rewards`` added back
CLIP_TERM = "clip"
#: the curriculum judges the episodes that ended over the last ``episode_length / CURRICULUM_WINDOWS`` steps
CURRICULUM_WINDOWS = 5
#: the largest derived action scale (rad)
MAX_ACTION_SCALE = 1.0
#: observation noise half-widths at ``obs_noise = 1`` (the module docstring), per observation term
OBS_NOISE = {
    "base_lin_vel": 0.1,
    "base_ang_vel": 0.2,
    "projected_gravity": 0.05,
    "joint_pos": 0.01,
    "joint_vel": 1.5,
}
#: the terrain curriculum moves an env down a level when it fell or its mean velocity error exceeded this many
#: times ``success_error``
TERRAIN_DEMOTE = 2.0
#: the default height scan: Isaac Lab's and mjlab's grid of 1.6 x 1.0 m every 0.1 m under the base
SCAN_SIZE = (1.6, 1.0)
SCAN_RESOLUTION = 0.1
#: the most rays a height scan casts per env
MAX_SCAN_RAYS = 4096
#: the height scan observes ``base z - ground z - base's default height``, clipped to +- this (m)
SCAN_CLIP = 1.0
#: noise half-width of the height scan at ``obs_noise = 1`` (Isaac Lab's), m
SCAN_NOISE = 0.1
#: the Froude number of the default forward command (v^2 / (g h) with h the base's default height)
FROUDE = 0.35
#: fraction of a joint's range beyond which the joint-limit penalty grows
SOFT_LIMIT = 0.9


@dataclass(frozen=True)
class VelocityConfig(TaskConfig):
    """Velocity tracking. Defaults: 500 policy steps of 20 ms (10 s) for a robot at a 5 ms substep.

    Attributes:
        robot: a registered robot name (:func:`simbackend.robots.available_robots`) or a JSON description file.
        command_range: ``((vx_lo, vx_hi), (vy_lo, vy_hi), (yaw_lo, yaw_hi))``, m/s and rad/s;
            ``None``: from the robot's default height (module docstring).
        resample_time: seconds between command draws within an episode.
        action_scale: joint-target offset (rad) of a unit action; ``None``: per joint from its servo's
            effort and stiffness (:func:`default_action_scale`).
        joint_noise: start joint angles uniform in ``default +- joint_noise`` (clipped to the range).
        min_height: fall when the base is below this fraction of its default height.
        max_tilt: fall when the base's up axis is this far from vertical (rad).
        tracking_sigma: width of the tracking rewards, (m/s)^2.
        success_error: mean planar velocity error (m/s) of a successful episode.
        contact_threshold: a foot or body is in contact above this force (N).
        air_time: the step duration (s) the air-time reward asks for.
        pose_std: the joint deviation (rad) from the default pose at which the pose term pays ``1/e`` of
            its weight, when every policy joint deviates by it.
        reward_weights: ``{term: weight}`` replacing :data:`REWARD_WEIGHTS`' (0 drops a term).
        only_positive_rewards: clip each step's summed terms at 0 (the ``termination`` term comes after).
        command_curriculum: widen the commands as training tracks them (:meth:`VelocityTask.begin_training`);
            off by default: on Go1 it held the commands at their first level for 250 iterations while the
            policy learnt to stand on them (docs/training.md).
        curriculum_start: fraction of the command ranges at the curriculum's first level, in [0, 1].
        curriculum_step: widening per promotion (fraction of the ranges), in (0, 1].
        curriculum_threshold: the share of the commanded planar speed the ended episodes tracked, on
            average, that promotes (``1 - error / max(command, success_error)``, 0 for a fall), in (0, 1].
        obs_noise: scale of the uniform observation noise of :data:`OBS_NOISE` while training (0: none;
            mjlab's and Isaac Lab's velocity environments use 1); evaluations observe without noise.
        terrain: a :class:`~simbackend.terrains.TerrainConfig` (its fields, or a JSON file): the robot walks
            on its tiles instead of a floor plane (``None``: flat ground).
        height_scan: observe the terrain's height on a grid under the base (``height_scan``, last term).
        scan_size: ``(x, y)`` extent (m) of the scan grid, in the base's heading frame (Isaac Lab's and
            mjlab's 1.6 x 1.0 m).
        scan_resolution: spacing (m) of the scan grid's points.
        terrain_curriculum: while training on a terrain, move an env a level up when its episode was a
            success (the evaluation's measure: its time limit reached with a mean velocity error at most
            ``success_error``) and down when it fell or its mean error exceeded twice that
            (:data:`TERRAIN_DEMOTE`); off: a random level each episode.
        init_level: training starts every env on a level drawn from ``0..init_level``.
        eval_levels: the levels evaluations play (``None``: every level); env ``i``'s ``k``-th episode
            plays tile ``(i + k N) mod (types x levels)``, so every engine plays the same tiles.
    """

    episode_length: int = 500
    decimation: int = 4
    robot: str = "go1"
    command_range: tuple | None = None
    resample_time: float = 5.0
    action_scale: float | None = 0.5
    joint_noise: float = 0.1
    min_height: float = 0.5
    max_tilt: float = 1.0
    tracking_sigma: float = 0.25
    success_error: float = 0.3
    contact_threshold: float = 1.0
    air_time: float = 0.3
    pose_std: float = 0.4
    reward_weights: Mapping[str, float] = field(default_factory=dict)
    only_positive_rewards: bool = False
    command_curriculum: bool = False
    curriculum_start: float = 0.25
    curriculum_step: float = 0.25
    curriculum_threshold: float = 0.7
    obs_noise: float = 0.0
    terrain: Any = None
    height_scan: bool = False
    scan_size: tuple[float, float] = SCAN_SIZE
    scan_resolution: float = SCAN_RESOLUTION
    terrain_curriculum: bool = True
    init_level: int = 0
    eval_levels: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_terrain()
        for name in ("only_positive_rewards", "command_curriculum"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidArgumentError(f"config.{name}: expected true or false, got {getattr(self, name)!r}")
        for name, low_open in (("curriculum_start", False), ("curriculum_step", True), ("curriculum_threshold", True)):
            v = getattr(self, name)
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            if not ok or not (0 < v <= 1 if low_open else 0 <= v <= 1):
                span = "(0, 1]" if low_open else "[0, 1]"
                raise InvalidArgumentError(f"config.{name}: expected a number in {span}, got {v!r}")
            object.__setattr__(self, name, float(v))
        if self.command_range is not None:
            self._check_command_range()
        if self.action_scale is not None:
            check_non_negative(self, "action_scale")
        check_non_negative(
            self,
            "joint_noise",
            "min_height",
            "max_tilt",
            "tracking_sigma",
            "success_error",
            "contact_threshold",
            "air_time",
            "resample_time",
            "pose_std",
            "obs_noise",
        )
        for name in ("tracking_sigma", "resample_time", "pose_std"):
            if getattr(self, name) == 0:
                raise InvalidArgumentError(f"config.{name}: expected a number > 0, got 0")
        if not isinstance(self.robot, str) or not self.robot:
            raise InvalidArgumentError(f"config.robot: expected a robot name or a JSON file, got {self.robot!r}")
        weights = self.reward_weights
        if not isinstance(weights, Mapping):
            raise InvalidArgumentError(f"config.reward_weights: expected {{term: weight}}, got {weights!r}")
        unknown = sorted(set(weights) - set(REWARD_WEIGHTS))
        if unknown:
            raise InvalidArgumentError(
                f"config.reward_weights: unknown terms {unknown}{closest_names_hint(unknown[0], REWARD_WEIGHTS)};"
                f" known: {sorted(REWARD_WEIGHTS)}"
            )
        for k, v in weights.items():
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
                raise InvalidArgumentError(f"config.reward_weights[{k!r}]: expected a finite number, got {v!r}")
        object.__setattr__(self, "reward_weights", {k: float(v) for k, v in weights.items()})

    #: the keys ``reward_weights`` takes (``--set reward_weights.KEY=...``)
    mapping_keys: ClassVar[dict[str, tuple[str, ...]]] = {"reward_weights": tuple(REWARD_WEIGHTS)}

    def _check_terrain(self) -> None:
        set_ = object.__setattr__
        for name in ("height_scan", "terrain_curriculum"):
            checks.boolean(getattr(self, name), f"config.{name}")
        size = self.scan_size
        if isinstance(size, (str, bytes)) or not isinstance(size, (tuple, list)) or len(size) != 2:
            raise InvalidArgumentError(f"config.scan_size: expected (x, y) in metres, got {size!r}")
        set_(self, "scan_size", tuple(checks.real(v, "config.scan_size", minimum=0.0, maximum=20.0) for v in size))
        set_(
            self,
            "scan_resolution",
            checks.real(self.scan_resolution, "config.scan_resolution", minimum=0.01, maximum=10.0),
        )
        rays = len(grid_offsets(*self.scan_size, self.scan_resolution))
        if rays > MAX_SCAN_RAYS:
            raise InvalidArgumentError(
                f"config.scan_resolution: a {self.scan_size} m scan every {self.scan_resolution} m casts {rays} rays,"
                f" more than {MAX_SCAN_RAYS}"
            )
        if self.terrain is None:
            if self.height_scan:
                raise InvalidArgumentError("config.height_scan: a height scan reads a terrain; set config.terrain")
            for name in ("init_level", "eval_levels"):
                if getattr(self, name) not in (0, None):
                    raise InvalidArgumentError(f"config.{name}: levels are a terrain's; set config.terrain")
            return
        terrain = TerrainConfig.load(self.terrain)
        set_(self, "terrain", terrain)
        top = terrain.levels - 1
        set_(self, "init_level", checks.integer(self.init_level, "config.init_level", minimum=0, maximum=top))
        if self.eval_levels is not None:
            levels = self.eval_levels
            if isinstance(levels, (str, bytes)) or not isinstance(levels, (tuple, list)) or not levels:
                raise InvalidArgumentError(f"config.eval_levels: expected a non-empty list of levels, got {levels!r}")
            set_(
                self,
                "eval_levels",
                tuple(checks.integer(v, "config.eval_levels", minimum=0, maximum=top) for v in levels),
            )

    def to_dict(self) -> dict:
        out = super().to_dict()
        if isinstance(self.terrain, TerrainConfig):
            out["terrain"] = self.terrain.to_dict()
        return out

    def _check_command_range(self) -> None:
        rng = self.command_range
        try:
            rng = tuple((float(lo), float(hi)) for lo, hi in rng)
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"config.command_range: expected three (low, high) pairs, got {rng!r}") from None
        if len(rng) != 3 or any(not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi) for lo, hi in rng):
            raise InvalidArgumentError(f"config.command_range: expected three finite (low <= high) pairs, got {rng!r}")
        object.__setattr__(self, "command_range", rng)


@register_task
class VelocityTask(Task):
    name = "velocity"
    config_class = VelocityConfig

    @classmethod
    def model_source(cls, config: Any) -> str:
        """The robot's scene file (:func:`simbackend.robots.robot_scene`)."""
        return robot_scene(get_robot(config.robot), terrain=config.terrain).path

    @classmethod
    def backend_options(cls, config: Any) -> dict:
        """Contact sensing, and the engine blocks the robot asks for."""
        return {"contact_sensing": True, **get_robot(config.robot).engine_options}

    @classmethod
    def evaluation_cycle(cls, config: Any) -> int:
        """On a terrain, its evaluated tiles: ``columns x levels`` (the levels in ``eval_levels``)."""
        t = config.terrain
        if t is None:
            return 1
        return len(t.types) * (t.levels if config.eval_levels is None else len(config.eval_levels))

    def _build_controller(self) -> Any:
        b, c = self.backend, self.config
        desc = get_robot(c.robot)
        r = self.robot = resolve(desc, b, robot_scene(desc, terrain=c.terrain).default_qpos)
        k, dev, n = r.qpos_cols.numel(), self.device, self.num_envs
        self._contacts = bool(b.capabilities.contact_forces) and bool(getattr(b, "contact_sensing", False))
        self._resamples = max(1, math.ceil(c.episode_length * self.control_dt / c.resample_time - 1e-9))
        self._resample_steps = max(1, round(c.resample_time / self.control_dt))
        #: 3 draws per command of the episode, 1 heading, k joint offsets
        self.reset_draws = 3 * self._resamples + 1 + k
        self.weights = {**REWARD_WEIGHTS, **c.reward_weights}
        self.commands = torch.zeros((n, 3), dtype=torch.float32, device=dev)
        self._episode_commands = torch.zeros((n, self._resamples, 3), dtype=torch.float32, device=dev)
        self.last_action = torch.zeros((n, k), dtype=torch.float32, device=dev)
        self._prev_action = torch.zeros_like(self.last_action)
        self._error_sum = torch.zeros(n, dtype=torch.float32, device=dev)
        nf = r.feet.size
        self._air_time = torch.zeros((n, nf), dtype=torch.float32, device=dev)
        self._was_in_contact = torch.zeros((n, nf), dtype=torch.bool, device=dev)
        self._feet_read = False  # whether this step read the feet (a feet term is weighted)
        self.command_range = c.command_range or default_command_range(float(r.default_qpos[2]))
        self._command_low, self._command_high = (
            torch.tensor([rr[i] for rr in self.command_range], device=dev) for i in (0, 1)
        )
        #: the command ranges' scale: 1 (full ranges) unless training with the curriculum
        self.command_level = 1.0
        self._curriculum = False
        self._noisy = False  # observation noise: from begin_training, with obs_noise > 0
        self._noise_key = int.from_bytes(
            hashlib.blake2b(f"obs_noise:{self.name}".encode(), digest_size=8).digest(), "little"
        )
        self._noise_count = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        self._command_sum = torch.zeros(n, dtype=torch.float32, device=dev)  # the episode's summed |command|
        self._window = torch.zeros(2, dtype=torch.float32, device=dev)  # ended episodes' tracked sum, count
        self._window_steps = 0
        self._fell = torch.zeros(n, dtype=torch.bool, device=dev)
        self._gravity_w = torch.tensor([0.0, 0.0, -1.0], device=dev)
        self._up_w = torch.tensor([0.0, 0.0, 1.0], device=dev)
        self._min_z = float(r.default_qpos[2]) * c.min_height
        lo, hi = r.joint_low, r.joint_high
        mid, half = (lo + hi) / 2, (hi - lo) / 2
        finite = torch.isfinite(half)
        self._soft_lo = torch.where(finite, mid - SOFT_LIMIT * half, lo)
        self._soft_hi = torch.where(finite, mid + SOFT_LIMIT * half, hi)
        self._zeros_held = torch.zeros((n, r.held_default.numel()), dtype=torch.float32, device=dev)
        if c.action_scale is None:  # the gains first (the controller's bounds need the scale)
            kp = joint_controller_gains(desc, b)
            scale = default_action_scale(r.joint_low, r.joint_high, joint_efforts(desc, b), kp)
        else:
            scale = torch.full_like(r.default_joints, c.action_scale)
        #: ``(k,)`` joint-target offset (rad) of a unit action, per policy joint
        self.action_scale = scale
        low, high = target_bounds(r, scale)
        controller, self._kp, self._kd = joint_controller(desc, b, r, low, high)
        self._build_terrain()
        return controller

    def _build_terrain(self) -> None:
        """The terrain's tiles, each env's tile, the height scan's points."""
        c, n, dev = self.config, self.num_envs, self.device
        self.terrain = generate_terrain(c.terrain) if c.terrain is not None else None
        self._terrain_training = False
        if self.terrain is not None:
            t = self.terrain
            self.reset_draws += 1  # the level of a first (or a random) tile
            self._origins = torch.as_tensor(t.origins, dtype=torch.float32, device=dev)  # (L, T, 3)
            #: ``(N,)`` each env's tile: its level (row) and its type's column
            self.terrain_level = torch.zeros(n, dtype=torch.int64, device=dev)
            self.terrain_column = torch.arange(n, device=dev) % t.num_types
            self._played = torch.zeros(n, dtype=torch.bool, device=dev)
            #: ``(N,)`` the level of each env's first training episode; -1: drawn from ``0..init_level``
            self._first_level = torch.full((n,), -1, dtype=torch.int64, device=dev)
            levels = c.eval_levels if c.eval_levels is not None else tuple(range(t.num_levels))
            self._eval_levels = torch.tensor(levels, dtype=torch.int64, device=dev)
        self._scan_points = None
        if c.height_scan:  # with a terrain: the config refuses a scan without one
            #: ``(R, 2)`` the scan's points in the base's heading frame
            self._scan_points = torch.as_tensor(
                grid_offsets(*c.scan_size, c.scan_resolution)[:, :2], dtype=torch.float32, device=dev
            )
            self._scan_offset = float(self.robot.default_qpos[2])

    @property
    def group_names(self) -> tuple[str, ...]:
        """Evaluations count success per terrain type (``()`` on flat ground)."""
        return self.terrain.types if self.terrain is not None else ()

    def episode_groups(self) -> torch.Tensor:
        """``(N,)`` each env's terrain column (an index into :attr:`group_names`)."""
        return self.terrain_column

    def _tiles(self, env_ids: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The tiles ``(level, column)`` of the episodes about to start in ``env_ids`` (``u``: one uniform
        each): training, the curriculum's move (or a random level); else the evaluation's fixed tiles.

        The curriculum judges an episode by the evaluation's success, not by legged_gym's distance from the
        start (up beyond half a tile, down below half the commanded distance): in 10 s episodes whose command
        changes at 5 s, a robot that tracks perfectly walks 4 m in about a quarter of them, and ends less
        than half its commanded path from its start when the second command turns back. Nor by the command
        curriculum's share of the commanded speed: on a 0.4 m/s command that asks an error below 0.12 m/s,
        and Go1's first rough run stayed on level 0 for 800 of 1,500 iterations while it succeeded on 0.6 of
        the tiles there."""
        t = self.terrain
        assert t is not None
        levels, types = t.num_levels, t.num_types
        if not self._terrain_training:
            count = self.episode_count[env_ids]
            tile = (env_ids + count * self.num_envs) % (types * self._eval_levels.numel())
            return self._eval_levels[tile // types], tile % types
        column = self.terrain_column[env_ids]
        first = (u * (self.config.init_level + 1)).long().clamp(max=self.config.init_level)
        first = torch.where(self._first_level[env_ids] >= 0, self._first_level[env_ids], first)
        anywhere = (u * levels).long().clamp(max=levels - 1)
        if not self.config.terrain_curriculum:
            return anywhere, column
        level = self.terrain_level[env_ids]
        up = self._success()[env_ids]
        down = self._fell[env_ids] | (self.mean_velocity_error()[env_ids] > TERRAIN_DEMOTE * self.config.success_error)
        moved = (level + up.long() - down.long()).clamp(min=0)
        moved = torch.where(moved >= levels, anywhere, moved)  # past the last level: a random one
        return torch.where(self._played[env_ids], moved, first), column

    def _action_dim(self) -> int:
        return int(self.robot.qpos_cols.numel())

    def _plan(self, plan: Any) -> Any:
        """A plan's ``bodies: ["feet"]``: this robot's feet (:func:`simbackend.robots.expand_plan`)."""
        return None if plan is None else expand_plan(plan, self.robot.description, self.backend.info)

    def _controller_action(self, action: torch.Tensor) -> torch.Tensor:
        self._prev_action.copy_(self.last_action)
        self.last_action.copy_(action)
        return torch.cat([action, self._zeros_held], dim=1) if self._zeros_held.shape[1] else action

    def _initial_state(self, env_ids: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        u = u.to(torch.float32)
        r, c = self.robot, self.config
        n, m = env_ids.numel(), self._resamples
        lo, hi = self._command_low, self._command_high
        cmds = (lo + (hi - lo) * u[:, : 3 * m].reshape(n, m, 3)) * self.command_level
        self._episode_commands[env_ids] = cmds
        self.commands[env_ids] = cmds[:, 0]
        qpos = r.default_qpos.expand(n, -1).clone()
        yaw = (2 * u[:, 3 * m] - 1) * math.pi
        qpos[:, 3] = torch.cos(yaw / 2)
        qpos[:, 6] = torch.sin(yaw / 2)
        qpos[:, 4:6] = 0
        k = r.qpos_cols.numel()
        joints = r.default_joints + c.joint_noise * (2 * u[:, 3 * m + 1 : 3 * m + 1 + k] - 1)
        qpos[:, r.qpos_cols] = torch.maximum(torch.minimum(joints, r.joint_high), r.joint_low)
        if self.terrain is not None:
            level, column = self._tiles(env_ids, u[:, 3 * m + 1 + k])
            origin = self._origins[level, column]
            qpos[:, :3] += origin
            self.terrain_level[env_ids] = level
            self.terrain_column[env_ids] = column
            self._played[env_ids] = True
        # index_fill_, not t[ids] = 0: that copies the 0 to the device inside index_put_, which waits
        for t in (self.last_action, self._prev_action, self._error_sum, self._air_time, self._command_sum):
            t.index_fill_(0, env_ids, 0.0)
        self._was_in_contact.index_fill_(0, env_ids, False)
        return qpos, None

    def _after_physics(self) -> None:
        step = (self.episode_step + 1) // self._resample_steps  # the step about to be counted
        idx = step.clamp(max=self._resamples - 1)
        self.commands.copy_(self._episode_commands.gather(1, idx.view(-1, 1, 1).expand(-1, 1, 3)).squeeze(1))
        self._frame = self._base_frame()
        # the feet are read while a feet term is weighted (their air time counts from then)
        self._feet_read = self._contacts and (self.weights["feet_air_time"] != 0.0 or self.weights["foot_slip"] != 0.0)
        if self._feet_read:
            self._in_contact = self.backend.get_body_contact_mask(self.robot.feet, self.config.contact_threshold)
        self._fell = self._fallen()

    def _base_quat(self) -> torch.Tensor:
        if self.robot.imu_site is None:
            return self.backend.get_base_quat()
        return self.backend.get_site_quat_w(self.robot.imu_site)[:, 0]

    def _base_frame(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q = self._base_quat()
        return (
            quat_apply_inverse(q, self.backend.get_base_lin_vel()),
            quat_apply_inverse(q, self.backend.get_base_ang_vel()),
            quat_apply_inverse(q, self._gravity_w.expand(self.num_envs, 3)),
        )

    def _observations(self) -> dict[str, torch.Tensor]:
        obs = self._clean_observations()
        if self._noisy:
            self._add_noise(obs)
        return obs

    def _add_noise(self, obs: dict[str, torch.Tensor]) -> None:
        """Uniform noise of half-width ``obs_noise * OBS_NOISE[term]`` on the terms of :data:`OBS_NOISE`,
        drawn per env from ``(seed, noise stream, env, observations made)``."""
        halves = {**OBS_NOISE, **({"height_scan": SCAN_NOISE} if "height_scan" in obs else {})}
        widths = [obs[k].shape[1] for k in halves]
        u = uniforms_torch(self.seed, self._noise_key, self._every_env, self._noise_count, sum(widths))
        self._noise_count += 1
        u = u.to(torch.float32)
        col = 0
        for (k, half), w in zip(halves.items(), widths):
            obs[k] = obs[k] + (2 * u[:, col : col + w] - 1) * (half * self.config.obs_noise)
            col += w

    def _clean_observations(self) -> dict[str, torch.Tensor]:
        lin, ang, grav = self._base_frame()
        r = self.robot
        return {
            "base_lin_vel": lin,
            "base_ang_vel": ang,
            "projected_gravity": grav,
            "command": self.commands.clone(),
            "joint_pos": self.backend.get_dof_pos()[:, r.dof_cols] - r.default_joints,
            "joint_vel": self.backend.get_dof_vel()[:, r.dof_cols],
            "last_action": self.last_action.clone(),
            **({"height_scan": self._height_scan()} if self._scan_points is not None else {}),
        }

    def _height_scan(self) -> torch.Tensor:
        """``(N, R)`` base height above the ground under each scan point, less the base's default height,
        clipped to +- :data:`SCAN_CLIP` (0 on flat ground at the default height).

        The ground is the terrain's own surface (:meth:`~simbackend.terrains.Terrain.height_at_torch`, the
        triangles every engine collides, which every engine's rays read to 1e-5 m: the conformance suite's
        terrain clauses), at the grid's points turned with the base's heading: the heights a downward scan
        of the terrain alone reads, as Isaac Lab's and mjlab's ray casters (which see only the terrain) do.
        The contract's height scanner sees every collision geom, the robot's own legs under its base too."""
        assert self._scan_points is not None and self.terrain is not None
        pos = self.backend.get_base_pos()
        yaw = quat_yaw(self.backend.get_base_quat())
        cos, sin = torch.cos(yaw)[:, None], torch.sin(yaw)[:, None]
        px, py = self._scan_points[:, 0], self._scan_points[:, 1]
        wx = pos[:, 0:1] + cos * px - sin * py
        wy = pos[:, 1:2] + sin * px + cos * py
        ground = self.terrain.height_at_torch(wx, wy)
        return (pos[:, 2:3] - ground - self._scan_offset).clamp(-SCAN_CLIP, SCAN_CLIP)

    def _reward(self, action: torch.Tensor) -> dict[str, torch.Tensor]:
        lin, ang, grav = self._frame
        dt, sigma, w, r = self.control_dt, self.config.tracking_sigma, self.weights, self.robot
        err_xy = ((lin[:, :2] - self.commands[:, :2]) ** 2).sum(1)
        err_yaw = (ang[:, 2] - self.commands[:, 2]) ** 2
        self._error_sum += err_xy.sqrt()
        track = torch.exp(-err_xy / sigma)
        self._command_sum += self.commands[:, :2].norm(dim=1)
        q = self.backend.get_dof_pos()[:, r.dof_cols]

        def torques() -> torch.Tensor:  # the actuation's PD estimate
            target = self.controller.targets[:, : q.shape[1]]
            return ((self._kp * (target - q) - self._kd * self.backend.get_dof_vel()[:, r.dof_cols]) ** 2).sum(1)

        # each term is computed only when weighted (the defaults weight five of them)
        terms = {
            "track_lin_vel": lambda: track,
            "track_yaw_rate": lambda: torch.exp(-err_yaw / sigma),
            "lin_vel_z": lambda: lin[:, 2] ** 2,
            "ang_vel_xy": lambda: (ang[:, :2] ** 2).sum(1),
            "tilt": lambda: (grav[:, :2] ** 2).sum(1),
            "action_rate": lambda: ((action - self._prev_action) ** 2).sum(1),
            "joint_vel": lambda: (self.backend.get_dof_vel()[:, r.dof_cols] ** 2).sum(1),
            "torques": torques,
            "joint_limits": lambda: ((q - self._soft_hi).clamp(min=0) + (self._soft_lo - q).clamp(min=0)).sum(1),
            "pose": lambda: torch.exp(-(((q - r.default_joints) / self.config.pose_std) ** 2).mean(1)),
        }
        if self._feet_read:
            contact = self._in_contact
            first = contact & ~self._was_in_contact
            moving = (self.commands[:, :2].norm(dim=1) > 0.1).to(torch.float32)
            air = ((self._air_time - self.config.air_time) * first).sum(1) * moving
            self._air_time = torch.where(contact, torch.zeros_like(self._air_time), self._air_time + dt)
            self._was_in_contact = contact
            terms["feet_air_time"] = lambda: air
            terms["foot_slip"] = lambda: (
                (self.backend.get_body_lin_vel_w(r.feet)[..., :2] ** 2).sum(-1) * contact
            ).sum(1)
        out = {k: w[k] * dt * f() for k, f in terms.items() if w[k] != 0.0}
        if self.config.only_positive_rewards:
            total = torch.stack(list(out.values())).sum(0) if out else torch.zeros_like(err_xy)
            out[CLIP_TERM] = (-total).clamp(min=0.0)
        if w["termination"] != 0.0:
            out["termination"] = w["termination"] * self._fell.to(torch.float32)
        return out

    def _fallen(self) -> torch.Tensor:
        up = quat_apply(self.backend.get_base_quat(), self._up_w.expand(self.num_envs, 3))
        pos = self.backend.get_base_pos()
        height = pos[:, 2] if self.terrain is None else pos[:, 2] - self.terrain.height_at_torch(pos[:, 0], pos[:, 1])
        fallen = (height < self._min_z) | (up[:, 2] < math.cos(self.config.max_tilt))
        if self._contacts and self.robot.termination.size:
            hit = self.backend.get_body_contact_mask(self.robot.termination, self.config.contact_threshold)
            fallen = fallen | hit.any(1)
        return fallen

    def _terminated(self) -> torch.Tensor:
        if self._curriculum:
            self._advance_curriculum()
        return self._fell

    # ------------------------------------------------------------------
    # command curriculum
    # ------------------------------------------------------------------
    def begin_training(self) -> None:
        """Training starts: with ``command_curriculum``, the commands start at ``curriculum_start`` of
        their ranges and widen as the training episodes track them (the module docstring); on a terrain,
        every env starts a new episode on its training tile (a level from ``0..init_level``)."""
        if self.config.command_curriculum and not self._curriculum:
            self._curriculum = True
            self.command_level = self.config.curriculum_start
        self._noisy = self.config.obs_noise > 0
        if self.terrain is not None and not self._terrain_training:
            # every env restarts on its training tile: its column, a level from 0..init_level
            self._terrain_training = True
            self._played.zero_()
            self.reset()

    def curriculum_state(self) -> dict:
        """``{"command_level": fraction of the command ranges}`` (logs and checkpoints), and on a terrain
        ``"terrain_level"``, the training envs' mean level, and ``"terrain_levels"``, each env's level (what a
        resumed run starts its envs on)."""
        out: dict[str, Any] = {"command_level": self.command_level}
        if self.terrain is not None:
            levels = self.terrain_level.tolist()  # one host read
            out["terrain_level"] = sum(levels) / max(len(levels), 1)
            out["terrain_levels"] = levels
        return out

    def load_curriculum_state(self, state: Mapping[str, Any]) -> None:
        """Continue a curriculum from :meth:`curriculum_state` (a resumed run): the command level, and on a
        terrain while training, each env's level from ``"terrain_levels"``, and every env restarts on its tile
        there. With another number of envs, env ``i`` takes the level of a saved env of its own column (env
        ``i``'s column is ``i mod types``), in turn; a column no saved env played keeps its drawn levels. A
        state without ``"terrain_levels"`` (checkpoints saved before 2026-11-30) keeps the drawn levels."""
        level = state.get("command_level") if isinstance(state, Mapping) else None
        if not isinstance(level, (int, float)) or isinstance(level, bool) or not 0.0 <= level <= 1.0:
            raise InvalidArgumentError(f"curriculum state: expected a command_level in [0, 1], got {state!r}")
        saved = state.get("terrain_levels")
        if saved is not None and self.terrain is not None:
            saved = self._saved_levels(saved)
        self.command_level = float(level)
        if saved is None or self.terrain is None or not self._terrain_training:
            return
        types, dev = self.terrain.num_types, self.device
        column, turn = self._every_env % types, self._every_env // types
        count = (len(saved) - column + types - 1).div(types, rounding_mode="floor")  # saved envs of each column
        tids = torch.nonzero(count > 0).flatten()
        if tids.numel():
            pick = column[tids] + types * (turn[tids] % count[tids])  # that column's saved envs, in turn
            self._first_level[tids] = torch.tensor(saved, dtype=torch.int64, device=dev)[pick]
            self._played[tids] = False
            self.reset(tids)

    def _saved_levels(self, saved: Any) -> list[int]:
        """``saved`` (a curriculum state's ``terrain_levels``) checked: a list of levels of this terrain."""
        top = self.terrain.num_levels - 1 if self.terrain is not None else 0
        if not isinstance(saved, (list, tuple)) or not all(
            isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= top for v in saved
        ):
            raise InvalidArgumentError(
                f"curriculum state: terrain_levels: expected a list of levels in [0, {top}], got {str(saved)[:80]}"
            )
        return list(saved)

    def _advance_curriculum(self) -> None:
        """Count the episodes that end at this step (no host read); every fifth of ``episode_length`` steps, promote
        the commands a level when those episodes tracked well (one read)."""
        c = self.config
        ended = self._fell | (self.episode_step >= c.episode_length)
        tracked = self._tracked()
        self._window += torch.stack([(tracked * ended).sum(), ended.sum().to(torch.float32)])
        self._window_steps += 1
        if self._window_steps < max(1, c.episode_length // CURRICULUM_WINDOWS):
            return
        total, count = self._window.tolist()
        self._window.zero_()
        self._window_steps = 0
        if count > 0 and total / count >= c.curriculum_threshold:
            self.command_level = min(1.0, self.command_level + c.curriculum_step)

    def _tracked(self) -> torch.Tensor:
        """``(N,)`` the share of the commanded speed each env's episode has tracked so far: ``1 - error /
        command`` summed over its steps, the command counted at least ``success_error`` (standing still
        tracks none of a command, and does not pass on small ones), in [0, 1]; 0 for a fall."""
        steps = self.episode_step.clamp(min=1).to(torch.float32)
        tracked = 1.0 - self._error_sum / torch.maximum(self._command_sum, self.config.success_error * steps)
        return torch.where(self._fell, torch.zeros_like(tracked), tracked.clamp(0.0, 1.0))

    def set_commands(self, commands: Any, env_ids: Any = None) -> None:
        """Hold ``commands`` for the rest of the current episodes of ``env_ids`` (default: every env): ``(3,)``
        for all of them or ``(len(env_ids), 3)``, ``(vx, vy, yaw rate)`` in m/s and rad/s in the base's
        heading frame, any finite values (outside the training range too). The next reset draws commands
        again. What ``simbackend compare --checkpoint`` tracks a policy's commands with; bad input raises
        naming the argument and changes nothing."""
        ids = torch.as_tensor(V.env_ids(env_ids, self.num_envs), device=self.device)
        try:
            cmds = torch.as_tensor(commands, dtype=torch.float32, device=self.device)
        except (TypeError, ValueError, RuntimeError) as e:
            raise InvalidArgumentError(
                f"commands: expected (3,) or (n, 3) numbers, got {type(commands).__name__} ({' '.join(str(e).split())})"
            ) from None
        if tuple(cmds.shape) not in ((3,), (ids.numel(), 3)):
            raise InvalidArgumentError(f"commands: expected shape (3,) or ({ids.numel()}, 3), got {tuple(cmds.shape)}")
        cmds = cmds.expand(ids.numel(), 3)
        if not bool(torch.isfinite(cmds).all()):
            raise InvalidArgumentError("commands: expected finite values")
        self._episode_commands[ids] = cmds[:, None, :]
        self.commands[ids] = cmds

    def tracked_velocity(self) -> torch.Tensor:
        """``(N, 3)`` what the commands are compared with: the base's ``(vx, vy)`` (m/s) and yaw rate (rad/s) in
        its own frame (the IMU's where the description names one), after the last step."""
        lin, ang, _ = self._frame
        return torch.stack([lin[:, 0], lin[:, 1], ang[:, 2]], dim=1)

    def mean_velocity_error(self) -> torch.Tensor:
        """``(N,)`` mean planar velocity error (m/s) of the current episodes so far."""
        return self._error_sum / self.episode_step.clamp(min=1).to(torch.float32)

    def _success(self) -> torch.Tensor:
        done = self.episode_step >= self.config.episode_length
        return done & ~self._fell & (self.mean_velocity_error() <= self.config.success_error)

    def policy_io(self) -> dict:
        """The policy's boundary (:meth:`Task.policy_io`), everything a robot's controller needs to run it:
        ``kind`` ``"velocity"``; the robot's base, IMU and default state; the policy's joints in order with
        their default angles and ranges (and the held ones' targets); the actuation (servo or PD, gains,
        effort and motor limits, actuators); the action's clip, scale and offset; the commands; each
        observation term with its slice, units, frame and meaning (:data:`TERM_DOCS`); what ends an
        episode and what makes it a success (docs/deploy.md spells out every field)."""
        out = super().policy_io()
        r, c, b = self.robot, self.config, self.backend
        desc = r.description
        k = r.qpos_cols.numel()
        acts = self.controller.actuator_columns
        info = b.info

        def floats(t: Any) -> list:  # float32 values by their shortest text (0.1, not 0.10000000149): exact
            return [float(str(v)) if math.isfinite(v) else None for v in torch.as_tensor(t).float().numpy().ravel()]

        for term in out["observations"]:
            units, frame, meaning = TERM_DOCS[term["name"]]
            term.update(units=units, frame=frame, meaning=meaning)
            if term["name"] == "height_scan":
                assert self._scan_points is not None
                term["points"] = self._scan_points.tolist()
                term["offset"] = self._scan_offset
                term["clip"] = SCAN_CLIP
        out["kind"] = "velocity"
        out["quaternion"] = "wxyz"
        out["base"] = {
            "body": desc.base_body,
            "imu_site": desc.imu_site,
            "default_qpos": floats(r.default_qpos),
        }
        out["joints"] = {
            "names": list(desc.joints),
            "default": floats(r.default_joints),
            "low": floats(r.joint_low),
            "high": floats(r.joint_high),
            "held": {"names": list(desc.held_joints), "targets": floats(r.held_default)},
        }
        actuation: dict[str, Any] = {
            "kind": desc.actuation,
            "actuators": [info.actuator_names[int(a)] for a in acts[:k]],
            "kp": floats(self._kp),
            "kd": floats(self._kd),
            "effort_limit": floats(joint_efforts(desc, b)),
        }
        if desc.actuation == "pd":
            actuation["saturation_effort"] = floats(self.controller.saturation_effort[:k])
            actuation["velocity_limit"] = floats(self.controller.velocity_limit[:k])
        out["actuation"] = actuation
        out["action"].update(
            scale=floats(self.action_scale),
            offset=floats(r.default_joints),
            target="offset + scale * clip(action)",
        )
        out["commands"] = {
            "names": ["lin_vel_x", "lin_vel_y", "ang_vel_z"],
            "frame": "imu",
            "ranges": [list(rng) for rng in self.command_range],
            "resample_time": c.resample_time,
        }
        out["episode"] = {
            "length": c.episode_length,
            "min_base_height": self._min_z,
            "max_tilt": c.max_tilt,
            "success_error": c.success_error,
            "error": {
                "frame": "imu",
                "is": "after each policy step, |v_xy - command_xy| with v the base's linear velocity in the imu"
                " frame (base_lin_vel's first two values, unscaled); its mean over the episode's steps",
            },
            "termination_bodies": list(desc.termination_bodies) if self._contacts else [],
            "contact_threshold": c.contact_threshold,
            "terrain": c.terrain is not None,
            "start": {
                "qpos": "base.default_qpos (the scene's base.keyframe), the base turned to a random heading, each"
                " policy joint moved by a random offset within joint_noise and clipped to [joints.low, joints.high]"
                + ("; the base moved to its terrain tile's origin" if c.terrain is not None else ""),
                "heading": {
                    "law": "uniform",
                    "low": -math.pi,
                    "high": math.pi,
                    "quaternion": "the base's orientation becomes [cos(h/2), 0, 0, sin(h/2)] (wxyz)",
                },
                "joint_noise": {
                    "law": "uniform",
                    "low": -c.joint_noise,
                    "high": c.joint_noise,
                    "about": "joints.default",
                },
                "qvel": 0.0,
                "last_action": 0.0,
                "commands": "each uniform within commands.ranges, a new one every commands.resample_time s",
            },
        }
        out["frames"] = dict(FRAMES)
        return out


#: the frames the velocity task's metadata names (``frames`` of the exported policy's metadata)
FRAMES = {
    "world": "z up (gravity along -z), x and y horizontal",
    "imu": "the base.imu_site's frame, the base body's where it is null: base_lin_vel, base_ang_vel and"
    " projected_gravity are in it, and the commands are compared with the velocities in it",
    "heading": "the base's heading frame: origin at the base, z along world z, x the base's x axis turned onto the"
    " horizontal plane; its angle about world z is the heading atan2(2 (w z + x y), 1 - 2 (y^2 + z^2)) of the"
    " base's wxyz quaternion",
    "joints": "one value per policy joint, in joints.names order",
}


#: each observation term's units and meaning, as :meth:`VelocityTask.policy_io` records them
TERM_DOCS = {
    "base_lin_vel": ("m/s", "imu", "linear velocity of the base body's frame origin, in the IMU frame"),
    "base_ang_vel": ("rad/s", "imu", "angular velocity of the base, in the IMU frame (a gyroscope's reading)"),
    "projected_gravity": ("1", "imu", "unit vector of gravity (world -z) in the IMU frame"),
    "command": ("m/s, m/s, rad/s", "imu", "commanded forward and lateral velocity, and yaw rate"),
    "joint_pos": ("rad", "joints", "joint angle less its default angle, in joints.names order"),
    "joint_vel": ("rad/s", "joints", "joint velocity, in joints.names order"),
    "last_action": ("1", "joints", "the previous policy step's action after clipping (0 at an episode's start)"),
    "height_scan": (
        "m",
        "heading",
        "base height above the ground under each scan point, less the base's default height, clipped to +-1",
    ),
}


def default_command_range(height: float) -> tuple:
    """The command ranges of a robot whose base stands ``height`` m high: forward up to
    ``min(1, sqrt(FROUDE g h))`` m/s either way, half that sideways, 1 rad/s of yaw."""
    v = round(min(1.0, math.sqrt(FROUDE * 9.81 * max(height, 0.0))), 2)
    return ((-v, v), (-v / 2, v / 2), (-1.0, 1.0))


def default_action_scale(low: torch.Tensor, high: torch.Tensor, effort: torch.Tensor, kp: torch.Tensor) -> torch.Tensor:
    """Per joint: ``effort / kp`` (a unit action asks for the joint's full torque at rest; 0.5 rad where the
    effort or the stiffness is unknown), at most half the joint's range and :data:`MAX_ACTION_SCALE` rad.
    Actions are clipped to [-1, 1], so the scale bounds the torque a policy can ask for: a scale below
    ``effort / kp`` leaves a robot on soft servos unable to hold itself up (Go1 at 0.5 rad sank to the
    fall height under its deterministic policy), and the caps keep exploration within the joint."""
    known = torch.isfinite(effort) & (kp > 0)
    scale = torch.where(known, effort / kp.clamp(min=1e-6), torch.full_like(effort, 0.5))
    span = high - low
    scale = torch.where(torch.isfinite(span), torch.minimum(scale, 0.5 * span), scale)
    return scale.clamp(max=MAX_ACTION_SCALE)


@dataclass(frozen=True)
class QuadrupedConfig(VelocityConfig):
    """The velocity task on the built-in toy quadruped: 500 policy steps of 20 ms (10 physics substeps of 2 ms)."""

    decimation: int = 10
    robot: str = "quadruped"
    min_height: float = 0.54


@register_task
class QuadrupedTask(VelocityTask):
    name = "quadruped"
    config_class = QuadrupedConfig
