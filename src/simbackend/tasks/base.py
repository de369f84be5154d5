"""The task base class: batched episodes written only against :class:`~simbackend.contract.SimBackend`.

A task turns a backend into episodes: it resets selected envs to randomized
initial states, turns a policy action into actuator commands (through a
controller from :mod:`simbackend.controllers`, or straight into the ctrl
range), steps the physics ``decimation`` substeps, and computes observations,
rewards, terminations and truncations, all as ``(N, ...)`` torch tensors on
the backend's device, with no Python loop over envs.

Reproducible resets: env ``i``'s initial state (and target, command, ...) in
its ``k``-th episode is drawn from the counter-based streams of
:mod:`simbackend.randomization.sampling` keyed by ``(seed, task, i, k)``, so
it is the same whatever ``num_envs`` is and whichever engine runs it; an
evaluation on another engine sees the same episodes.

Autoreset is left to the caller (:mod:`simbackend.envs` adapters): ``step``
reports the post-step state of every env, and :meth:`Task.reset` starts new
episodes in the envs it names.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import numpy as np
import torch

from simbackend import _validate as V
from simbackend import checks
from simbackend.errors import ArgumentTypeError, InvalidArgumentError, NonFiniteError
from simbackend.masked import rows_kept
from simbackend.randomization import IntervalScheduler, RandomizationPlan, uniforms, uniforms_torch

__all__ = ["Task", "TaskConfig", "TaskStep", "check_non_negative", "load_plan"]


def check_non_negative(config: Any, *names: str) -> None:
    """Raise naming ``config.<name>`` unless each field is a finite real number >= 0 (not a bool)."""
    for name in names:
        checks.real(getattr(config, name), f"config.{name}", minimum=0.0)


def load_plan(plan: Any) -> RandomizationPlan | None:
    """A :class:`RandomizationPlan` from a plan, a mapping, a JSON file path, or ``None``."""
    if plan is None or isinstance(plan, RandomizationPlan):
        return plan
    if isinstance(plan, Mapping):
        return RandomizationPlan.from_dict(plan)
    if isinstance(plan, (str, Path)):
        return RandomizationPlan.load(plan)
    raise ArgumentTypeError(
        f"randomization: expected a RandomizationPlan, a mapping or a JSON file path, got {type(plan).__name__}"
    )


@dataclass(frozen=True)
class TaskConfig:
    """Settings every task shares; a task's own config subclasses it.

    Attributes:
        episode_length: policy steps before an episode is truncated.
        decimation: physics substeps per policy step (the control period is
            ``decimation * physics_dt``).
        randomization: a domain-randomization plan (a
            :class:`~simbackend.randomization.RandomizationPlan`, its dict or a
            JSON path), or ``None``. Its ``init`` terms are applied when the
            task is built, its ``reset`` terms at every reset, its ``interval``
            terms on their schedule during episodes.
        camera: a model camera name (or ``"free"``) whose RGB image joins the
            observation dict as ``"rgb"`` ``(N, H, W, 3)`` uint8 (the model alone, without
            the floor, light and sky pictures are dressed with); ``None`` for none.
            Images stay out of the flat observation vector.
        image_size: ``(width, height)`` of that image, pixels.
    """

    episode_length: int = 500
    decimation: int = 4
    randomization: Any = None
    camera: str | None = None
    image_size: tuple[int, int] = (64, 64)

    def __post_init__(self) -> None:
        for name in ("episode_length", "decimation"):
            object.__setattr__(self, name, checks.integer(getattr(self, name), f"config.{name}", minimum=1))
        object.__setattr__(self, "randomization", load_plan(self.randomization))
        size = self.image_size
        if (
            not isinstance(size, (tuple, list))
            or len(size) != 2
            or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in size)
        ):
            raise InvalidArgumentError(f"config.image_size: expected (width, height) positive ints, got {size!r}")
        object.__setattr__(self, "image_size", tuple(size))
        if self.camera is not None and not isinstance(self.camera, str):
            raise ArgumentTypeError(f"config.camera: expected a camera name or None, got {type(self.camera).__name__}")

    def to_dict(self) -> dict:
        """The config as JSON-ready values (a plan becomes its dict)."""
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            out[f.name] = v.to_dict() if isinstance(v, RandomizationPlan) else (list(v) if isinstance(v, tuple) else v)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> TaskConfig:
        """A config from :meth:`to_dict`'s output or a partial mapping (missing keys keep defaults)."""
        if d is None:
            return cls()
        if not isinstance(d, Mapping):
            raise ArgumentTypeError(f"config: expected a mapping, got {type(d).__name__}")
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - set(known))
        if unknown:
            raise InvalidArgumentError(f"config: unknown keys {unknown} for {cls.__name__}; known: {sorted(known)}")
        kw = {k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items()}
        return cls(**kw)


class TaskStep(NamedTuple):
    """What :meth:`Task.step` returns; every tensor has leading dimension N.

    ``obs``: the observation dict. ``reward``: ``(N,)`` float32.
    ``terminated``: ``(N,)`` bool, the episode reached a terminal state (failure,
    or the physics diverged). ``truncated``: ``(N,)`` bool, the time limit ended
    it (never together with ``terminated``). ``info``: ``"success"`` ``(N,)`` bool,
    ``"diverged"`` ``(N,)`` bool, ``"episode_return"`` / ``"episode_length"``
    ``(N,)`` of the episode so far (final where done), ``"reward_terms"`` dict of
    ``(N,)`` components.
    """

    obs: dict
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    info: dict


class Task:
    """A batched task over one backend. Subclasses declare ``name``, ``model``,
    ``config_class`` and implement the ``_``-prefixed hooks.

    Args:
        backend: the :class:`~simbackend.contract.SimBackend` to run on; it must
            hold the task's model (``model``).
        config: the task's config (an instance of ``config_class``, a mapping of
            its fields, or ``None`` for defaults).
        seed: seed of the reset streams (initial states, targets, commands).
        owns_backend: close the backend in :meth:`close`.
    """

    #: registry name
    name: ClassVar[str] = ""
    #: model source the task runs on (a built-in model name or a path)
    model: ClassVar[str] = ""
    config_class: ClassVar[type] = TaskConfig
    #: uniforms drawn per env at each reset (``_initial_state`` receives them)
    reset_draws: ClassVar[int] = 0

    def __init__(self, backend: Any, config: Any = None, *, seed: int = 0, owns_backend: bool = False):
        if config is None or isinstance(config, Mapping):
            config = self.config_class.from_dict(config)
        if not isinstance(config, self.config_class):
            raise ArgumentTypeError(
                f"config: expected {self.config_class.__name__} or a mapping, got {type(config).__name__}"
            )
        self.backend = backend
        self.config = config
        self.seed = V.seed_value(seed)
        self.owns_backend = owns_backend
        self.num_envs = backend.num_envs
        self.device = backend.device
        self.control_dt = backend.physics_dt * config.decimation
        #: the random-stream key of the task's episode starts (env i's start depends on (seed, reset_key, i, episode))
        self.reset_key = int.from_bytes(hashlib.blake2b(f"task:{self.name}".encode(), digest_size=8).digest(), "little")
        n = self.num_envs
        #: ``(N,)`` int64 episodes started per env (the reset draws' counter), on the device
        self.episode_count = torch.zeros(n, dtype=torch.int64, device=self.device)
        self.episode_step = torch.zeros(n, dtype=torch.int64, device=self.device)
        self.episode_return = torch.zeros(n, dtype=torch.float32, device=self.device)
        self.controller = self._build_controller()
        if self.controller is not None:
            self.action_dim = int(self._action_dim())
        else:
            self.action_dim = backend.num_actuators
            lo, hi = (
                torch.as_tensor(c, dtype=torch.float32, device=self.device) for c in backend.get_actuator_ctrl_range().T
            )
            if not (torch.isfinite(lo).all() and torch.isfinite(hi).all()):
                raise InvalidArgumentError(f"task {self.name!r}: direct actuator control needs finite ctrl ranges")
            self._ctrl_mid, self._ctrl_half = (hi + lo) / 2, (hi - lo) / 2
        plan = self._plan(config.randomization)
        self.plan = plan
        self._reset_plan = plan if plan is not None and plan.phase_terms("reset") else None
        self._scheduler = IntervalScheduler(plan, n) if plan is not None and plan.phase_terms("interval") else None
        if plan is not None and plan.phase_terms("init"):
            backend.apply_init_randomization(plan)
        self._obs: dict | None = None
        self._deferred = bool(getattr(backend, "deferred_checks", False))
        self._every_env = torch.arange(n, device=self.device)
        self.reset()
        self.observation_dims = {k: tuple(v.shape[1:]) for k, v in self._obs.items()}

    # ------------------------------------------------------------------
    # hooks
    # ------------------------------------------------------------------
    @classmethod
    def model_source(cls, config: Any) -> Any:
        """The model source :func:`~simbackend.tasks.make_task` builds the backend on (default: ``model``)."""
        return cls.model

    @classmethod
    def backend_options(cls, config: Any) -> dict:
        """Construction options the task needs (``contact_sensing``, engine blocks); the caller's win."""
        return {}

    @classmethod
    def evaluation_cycle(cls, config: Any) -> int:
        """How many episodes an evaluation's fixed design cycles through before it repeats (the velocity task
        on a terrain: its tiles); 1 where the episodes have no such design. Evaluations play a multiple of it
        by default (:func:`simbackend.training.evaluate`), so that every case is played, each as often."""
        return 1

    def _build_controller(self) -> Any:
        """The task's controller (:mod:`simbackend.controllers`), or ``None``: actions in ``[-1, 1]``
        map linearly onto every actuator's ctrl range."""
        return None

    def _plan(self, plan: Any) -> Any:
        """The randomization plan as the task applies it, after its controller is built (default: ``plan``
        as given; the velocity task expands a term's ``bodies: ["feet"]`` into its robot's feet)."""
        return plan

    def _action_dim(self) -> int:
        """Size of the task's action (default: the controller's)."""
        return self.controller.action_dim

    def _controller_action(self, action: torch.Tensor) -> torch.Tensor:
        """The controller's ``(N, controller.action_dim)`` action from the task's (default: the same)."""
        return action

    def _initial_state(self, env_ids: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(qpos (n, nq), qvel (n, nv))`` for envs ``env_ids`` ``(n,)`` starting an episode, from
        ``u`` ``(n, reset_draws)`` float64 uniforms in (0, 1); also (re)draw per-env targets here."""
        raise NotImplementedError

    def _observations(self) -> dict[str, torch.Tensor]:
        """The observation terms, ``{name: (N, d)}`` float32, in a fixed order."""
        raise NotImplementedError

    def _reward(self, action: torch.Tensor) -> dict[str, torch.Tensor]:
        """Reward components ``{name: (N,)}`` after a step (their sum is the reward)."""
        raise NotImplementedError

    def _terminated(self) -> torch.Tensor:
        """``(N,)`` bool: envs in a terminal (failed) state."""
        return torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)

    def _success(self) -> torch.Tensor:
        """``(N,)`` bool: envs that currently meet the task's success criterion."""
        return torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)

    def begin_training(self) -> None:
        """Training on this task starts (the trainer calls it on its training task, never on an evaluation's):
        a task with a curriculum starts it here. Default: nothing."""

    def curriculum_state(self) -> dict:
        """The curriculum's state, JSON-ready (logged each iteration, stored in checkpoints); ``{}``: none."""
        return {}

    def load_curriculum_state(self, state: Mapping[str, Any]) -> None:
        """Continue the curriculum of :meth:`curriculum_state` (a resumed run). Default: nothing to load."""

    def _after_physics(self) -> None:
        """Called after every policy step's physics, before observations (commands, caches)."""

    # ------------------------------------------------------------------
    # public
    # ------------------------------------------------------------------
    @property
    def max_episode_length(self) -> int:
        return self.config.episode_length

    @property
    def observation_size(self) -> int:
        """Length of the flat observation vector (image terms excluded)."""
        return sum(int(np.prod(s)) for k, s in self.observation_dims.items() if k not in self.image_terms)

    @property
    def image_terms(self) -> tuple[str, ...]:
        return ("rgb",) if self.config.camera is not None else ()

    def flatten(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """``(N, observation_size)`` float32: the non-image terms of ``obs`` concatenated in order."""
        parts = [v.reshape(v.shape[0], -1) for k, v in obs.items() if k not in self.image_terms]
        return torch.cat(parts, dim=1)

    def observe(self) -> dict[str, torch.Tensor]:
        """The current observation dict ``{term: (N, ...)}`` (a new dict; tensors not to be edited)."""
        obs = dict(self._observations())
        if self.config.camera is not None:
            w, h = self.config.image_size
            # an observation, not a picture for people: the model as it is, without the dress
            obs["rgb"] = self.backend.render(camera=self.config.camera, width=w, height=h, dress=False)
        self._obs = obs
        return obs

    def reset(self, env_ids: Any = None) -> dict[str, torch.Tensor]:
        """Start new episodes in ``env_ids`` (ids, a ``(N,)`` bool mask, or ``None`` for all).

        Env ``i``'s start is drawn from ``(seed, task, i, episode count of i)``. Returns the
        observation dict of every env (the others unchanged).
        """
        if self._resets_by_mask(env_ids):
            self._reset_masked(env_ids.to(self.device))
            return self.observe()
        ids = np.unique(V.env_ids(env_ids, self.num_envs))
        if ids.size:
            tids = torch.as_tensor(ids, device=self.device)
            counts = self.episode_count[tids].cpu().numpy()
            u = torch.as_tensor(
                uniforms(self.seed, self.reset_key, ids, counts, max(self.reset_draws, 1)), device=self.device
            )
            qpos, qvel = self._initial_state(tids, u)
            self.backend.set_state(ids, qpos, qvel, randomization=self._reset_plan)
            if self.controller is not None:
                self.controller.reset(ids)
            self.episode_count[tids] += 1
            self.episode_step[tids] = 0
            self.episode_return[tids] = 0
            if self._scheduler is not None:
                self._scheduler.reset(ids)
        return self.observe()

    def _resets_by_mask(self, env_ids: Any) -> bool:
        """Whether :meth:`reset` takes the path that reads nothing from the device: a boolean mask tensor
        on a backend with deferred checks, and no randomization drawn on the host at resets."""
        return (
            isinstance(env_ids, torch.Tensor)
            and env_ids.dtype == torch.bool
            and tuple(env_ids.shape) == (self.num_envs,)
            and bool(getattr(self.backend, "deferred_checks", False))
            and self._reset_plan is None
            and self._scheduler is None
        )

    def _reset_masked(self, mask: torch.Tensor) -> None:
        """:meth:`reset` of the envs ``mask`` selects, with no host read: every env's start is drawn (the
        same values as the ids' path: the draws are a function of env and episode only), the per-env
        tensors the draw rewrites keep their rows where ``mask`` is clear (:func:`simbackend.masked.rows_kept`),
        and the backend writes the selected rows (``set_state`` with a mask and N rows)."""
        every = self._every_env
        u = uniforms_torch(self.seed, self.reset_key, every, self.episode_count, max(self.reset_draws, 1))
        with rows_kept(self, mask):
            qpos, qvel = self._initial_state(every, u)
        self.backend.set_state(mask, qpos, qvel)
        if self.controller is not None:
            self.controller.reset(mask)
        self.episode_count += mask
        self.episode_step.masked_fill_(mask, 0)
        self.episode_return.masked_fill_(mask, 0)

    def reseed(self, seed: int, env_ids: Any = None) -> None:
        """Set the reset seed and restart the episode counts of ``env_ids`` (``None``: all), so the
        next :meth:`reset` of an env starts its episode 0 of ``seed`` again. A randomization plan's
        draws keep their own per-env counts (the backend's): they are not restarted."""
        seed = V.seed_value(seed)
        ids = np.unique(V.env_ids(env_ids, self.num_envs))
        self.seed = seed
        self.episode_count[torch.as_tensor(ids, device=self.device)] = 0

    def action_to_ctrl(self, action: torch.Tensor) -> torch.Tensor:
        """Direct control: ``(N, nu)`` ctrl from actions in ``[-1, 1]`` (tasks without a controller)."""
        return self._ctrl_mid + self._ctrl_half * action

    def step(self, action: Any) -> TaskStep:
        """Apply ``action`` ``(N, action_dim)`` (in ``[-1, 1]``, clipped) for one policy step.

        Raises:
            InputShapeError: wrong shape. NonFiniteError: NaN or inf (naming the envs); nothing is stepped.
        """
        action = V.real_tensor(
            action, "action", (self.num_envs, self.action_dim), device=self.device, dtype=torch.float32
        )
        # deferred: a NaN action reaches the backend as NaN ctrl, reported at the next call; on the CPU one
        # reduction clears the common case
        if not self._deferred and V.host_real(action, action.shape) is None:
            bad = V.nonfinite_rows(action)
            if bool(bad.any()):
                raise NonFiniteError("action", torch.nonzero(bad).flatten().tolist())
        action = action.clamp(-1.0, 1.0)
        if self.controller is not None:
            info = self.controller.apply(self._controller_action(action), self.config.decimation)
        else:
            info = self.backend.step(self.action_to_ctrl(action), nsteps=self.config.decimation)
        diverged = info["diverged"]
        if self._scheduler is not None:
            self._scheduler.advance(self.backend, self.control_dt)
        self._after_physics()
        self.episode_step += 1
        terms = self._reward(action)
        parts = list(terms.values())
        reward = (parts[0] if len(parts) == 1 else torch.stack(parts).sum(0)).to(torch.float32, copy=True)
        terminated = self._terminated() | diverged
        truncated = (self.episode_step >= self.config.episode_length) & ~terminated
        self.episode_return += reward
        obs = self.observe()
        info = {
            "success": self._success(),
            "diverged": diverged,
            "episode_return": self.episode_return.clone(),
            "episode_length": self.episode_step.clone(),
            "reward_terms": terms,
        }
        return TaskStep(obs, reward, terminated, truncated, info)

    def close(self) -> None:
        """Remove the controller's hooks; close the backend if the task owns it."""
        if self.controller is not None and hasattr(self.controller, "detach"):
            self.controller.detach()
        if self.owns_backend:
            self.backend.close()

    def describe(self) -> dict:
        """Name, config, sizes and timing, JSON-ready (logs and checkpoints carry it)."""
        return {
            "task": self.name,
            "sim": getattr(self.backend, "name", type(self.backend).__name__),
            "num_envs": self.num_envs,
            "seed": self.seed,
            "config": self.config.to_dict(),
            "action_dim": self.action_dim,
            "observation_dims": {k: list(v) for k, v in self.observation_dims.items()},
            "control_dt": self.control_dt,
        }

    def policy_io(self) -> dict:
        """The policy's boundary, JSON-ready: what an exported policy's metadata records
        (:mod:`simbackend.training.export`, docs/deploy.md).

        ``{"kind", "control", "observations", "action"}``: ``kind`` the task's I/O family (here
        ``"generic"``; the velocity task's is ``"velocity"``, which the deployment loop runs); ``control``
        the period (s), physics substep (s) and substeps per policy step; ``observations`` each flat term
        in order with its slice ``[start, start + size)`` of the policy's input; ``action`` its size and
        clip, and, for a task without a controller, the actuators and their ctrl ranges that an action in
        ``[-1, 1]`` maps onto linearly.
        """
        terms, start = [], 0
        for name, shape in self.observation_dims.items():
            if name in self.image_terms:
                continue
            size = int(np.prod(shape))
            terms.append({"name": name, "start": start, "size": size, "scale": 1.0})
            start += size
        action: dict[str, Any] = {"size": self.action_dim, "clip": [-1.0, 1.0]}
        if self.controller is None:
            lo, hi = (self._ctrl_mid - self._ctrl_half), (self._ctrl_mid + self._ctrl_half)
            action["mapping"] = "ctrl = low + (action + 1) / 2 * (high - low)"
            action["actuators"] = list(self.backend.info.actuator_names)
            action["ctrl_low"], action["ctrl_high"] = lo.tolist(), hi.tolist()
        return {
            "kind": "generic",
            "control": {
                "period": self.control_dt,
                "physics_dt": self.backend.physics_dt,
                "decimation": self.config.decimation,
            },
            "observations": terms,
            "action": action,
        }

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, sim={getattr(self.backend, 'name', '?')!r},"
            f" num_envs={self.num_envs})"
        )
