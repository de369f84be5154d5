"""Gymnasium vector environments over any task: :class:`SimVectorEnv`, :func:`make_vector_env`.

A :class:`~simbackend.tasks.Task` is already batched; :class:`SimVectorEnv` gives
it the ``gymnasium.vector.VectorEnv`` API (gymnasium 1.x) without a Python loop
over envs:

>>> env = make_vector_env("cartpole", sim="mujoco", num_envs=64)        # doctest: +SKIP
>>> obs, info = env.reset(seed=0)                                       # doctest: +SKIP
>>> obs, reward, terminated, truncated, info = env.step(env.action_space.sample())  # doctest: +SKIP

Conventions:

* Observations: ``obs_mode="state"`` gives the flat ``(N, observation_size)``
  float32 vector of :meth:`Task.flatten` (image terms left out);
  ``"state_dict"`` the per-term dict, image terms as ``(N, H, W, 3)`` uint8.
  State terms have bounds ``-inf..inf``.
* Arrays: ``tensors="torch"`` (default) returns torch tensors on ``task.device``
  (obs float32, reward float32, terminated/truncated bool, info arrays and masks);
  ``tensors="numpy"`` returns numpy arrays everywhere. Actions may be tensors,
  numpy arrays or nested lists in either mode, shape ``(N, action_dim)`` in
  ``[-1, 1]`` (clipped).
* Autoreset: ``metadata["autoreset_mode"]`` is a ``gymnasium.vector.AutoresetMode``,
  implemented as in gymnasium's ``SyncVectorEnv``
  (https://farama.org/Vector-Autoreset-Mode):

  - ``NEXT_STEP``: the step after an env's episode ended resets that env and
    returns its first observation, reward 0 and terminated/truncated False; its
    action is ignored (replaced by zeros, so even NaN is fine there).
  - ``SAME_STEP``: an env whose episode ends is reset in the same step; the
    returned obs is the new episode's first, reward/terminated/truncated are the
    ending step's, and ``info["final_obs"]`` / ``info["final_info"]`` hold the
    last observation and info (masks ``"_final_obs"``, ``"_final_info"``). These
    two keys appear only in steps where some episode ended. ``final_obs`` is
    batched like ``obs`` (rows of the other envs hold their current obs), so
    ``info["final_obs"][i]`` works as with gymnasium's object array.
  - ``DISABLED``: nothing is reset; stepping an env whose episode ended raises
    until ``reset(options={"reset_mask": mask})`` restarts it.

* Info (gymnasium's vector convention, key plus ``"_key"`` bool mask): every
  per-env entry of the task's step info (``"success"``, ``"diverged"``,
  ``"reward_terms"`` ...), masked out for envs that were autoreset in this step.
  Episode statistics are a wrapper's job, as with ``SyncVectorEnv``: gymnasium's
  ``RecordEpisodeStatistics`` in numpy mode, :mod:`simbackend.envs.wrappers`'
  torch one in torch mode. ``episode_key="episode"`` writes them without a
  wrapper, in steps where some episode ended: ``info["episode"] = {"r": return,
  "l": length, "t": seconds}`` with ``"_episode"`` the envs whose episode ended,
  as that wrapper writes them (the wrapper then refuses the env: the key is taken).
* Sub-environment API: :meth:`~SimVectorEnv.call`, :meth:`~SimVectorEnv.get_attr`
  and :meth:`~SimVectorEnv.set_attr` answer as ``SyncVectorEnv``'s do (a tuple
  with one entry per env; ``call("render")`` gives the ``N`` pictures), so code
  and libraries written for gymnasium's vector envs (skrl's ``render()``) run.
* Wrappers: gymnasium's vector wrappers work unchanged in numpy mode. In torch
  mode use :mod:`simbackend.envs.wrappers` (episode statistics, observation and
  reward normalization on the env's device), or convert: gymnasium's
  ``ArrayConversion(env, env_xp=torch, target_xp=numpy)``, then any gymnasium
  wrapper, then ``NumpyToTorch`` (needs ``gymnasium[torch]``, which the ``gym``
  extra installs). docs/training.md lists what the tests run.
* Seeding: env ``i``'s ``k``-th episode is drawn from ``(seed, task, i, k)``.
  ``reset(seed=s)`` sets the task seed to ``s`` and restarts the episode counts
  of the reset envs at 0, so it always replays the same episodes, on any engine.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from simbackend._extras import require_extra

require_extra("gymnasium", purpose="the gymnasium adapter (simbackend.envs.gym)")

from gymnasium import logger, spaces  # noqa: E402
from gymnasium.vector import AutoresetMode, VectorEnv  # noqa: E402
from gymnasium.vector.utils import batch_space  # noqa: E402

from simbackend import _validate as V
from simbackend.errors import (
    ArgumentTypeError,
    BackendClosedError,
    InputShapeError,
    InvalidArgumentError,
    NonFiniteError,
)
from simbackend.tasks import Task

__all__ = ["AUTORESET_MODES", "OBS_MODES", "RENDER_MODES", "TENSOR_TYPES", "SimVectorEnv", "make_vector_env"]

#: accepted ``obs_mode`` values
OBS_MODES = ("state", "state_dict")
#: accepted ``tensors`` values
TENSOR_TYPES = ("torch", "numpy")
#: accepted ``autoreset_mode`` strings (a ``gymnasium.vector.AutoresetMode`` or its value works too)
AUTORESET_MODES = {
    "next_step": AutoresetMode.NEXT_STEP,
    "same_step": AutoresetMode.SAME_STEP,
    "disabled": AutoresetMode.DISABLED,
}
#: accepted ``render_mode`` values
RENDER_MODES = (None, "rgb_array")

#: task step-info keys that ``info["episode"]`` replaces
_EPISODE_SO_FAR = ("episode_return", "episode_length")


#: a sub-environment's spaces are this env's single-env spaces (``call``, ``get_attr``)
_PER_ENV_SPACES = {"observation_space": "single_observation_space", "action_space": "single_action_space"}
#: what ``set_attr`` refuses: the env's structure, fixed when it is built
_FIXED_ATTRS = frozenset(
    {
        "task",
        "num_envs",
        "device",
        "obs_mode",
        "tensors",
        "autoreset_mode",
        "episode_key",
        "owns_task",
        "metadata",
        "closed",
        "observation_space",
        "action_space",
        "single_observation_space",
        "single_action_space",
        "render_mode",
        "render_camera",
        "render_size",
        "spec",
        "unwrapped",
        "np_random",
        "np_random_seed",
        "backend",
        "control_dt",
        "action_dim",
        "observation_size",
        "observation_dims",
        "image_terms",
        "name",
    }
)


def _same(a: Any, b: Any) -> bool:
    """Whether two values given for two envs are one value (arrays and tensors by content)."""
    if a is b:
        return True
    if isinstance(a, (np.ndarray, torch.Tensor)) or isinstance(b, (np.ndarray, torch.Tensor)):
        try:
            return bool(np.array_equal(np.asarray(_host(a)), np.asarray(_host(b))))
        except (TypeError, ValueError):
            return False
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


def _host(x: Any) -> Any:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x


def _choice(value: Any, allowed: tuple, argument: str) -> Any:
    if not any(value is a or (isinstance(value, str) and value == a) for a in allowed):
        shown = ", ".join(repr(a) for a in allowed)
        raise InvalidArgumentError(f"{argument}: expected one of {shown}, got {value!r}")
    return value


def _autoreset_mode(value: Any) -> AutoresetMode:
    if isinstance(value, AutoresetMode):
        return value
    if isinstance(value, str):
        norm = value.strip().lower().replace("-", "").replace("_", "")
        for name, mode in AUTORESET_MODES.items():
            if norm == name.replace("_", ""):
                return mode
    shown = ", ".join(repr(a) for a in AUTORESET_MODES)
    raise InvalidArgumentError(
        f"autoreset_mode: expected one of {shown} or a gymnasium.vector.AutoresetMode, got {value!r}"
    )


def _check_options(
    obs_mode: Any,
    tensors: Any,
    autoreset_mode: Any,
    render_mode: Any,
    render_camera: Any,
    render_size: Any,
    episode_key: Any,
) -> tuple[AutoresetMode, tuple[int, int]]:
    _choice(obs_mode, OBS_MODES, "obs_mode")
    _choice(tensors, TENSOR_TYPES, "tensors")
    mode = _autoreset_mode(autoreset_mode)
    _choice(render_mode, RENDER_MODES, "render_mode")
    if not isinstance(render_camera, str) or not render_camera:
        raise ArgumentTypeError(f"render_camera: expected a camera name (or 'free'), got {render_camera!r}")
    if (
        not isinstance(render_size, (tuple, list))
        or len(render_size) != 2
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in render_size)
    ):
        raise InvalidArgumentError(f"render_size: expected (width, height) positive ints, got {render_size!r}")
    if episode_key is not None and (not isinstance(episode_key, str) or not episode_key or episode_key[0] == "_"):
        raise InvalidArgumentError(
            f"episode_key: expected an info key (a non-empty str not starting with '_') or None, got {episode_key!r}"
        )
    return mode, (int(render_size[0]), int(render_size[1]))


def _bcast(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``(N,)`` mask viewed to broadcast against ``like`` ``(N, ...)``."""
    return mask.view(-1, *([1] * (like.dim() - 1)))


class SimVectorEnv(VectorEnv):
    """A ``gymnasium.vector.VectorEnv`` over a batched :class:`~simbackend.tasks.Task` (see the module doc).

    Args:
        task: the task (its ``num_envs`` envs are the sub-environments).
        obs_mode: ``"state"`` (flat vector) or ``"state_dict"`` (dict of terms).
        tensors: ``"torch"`` (tensors on ``task.device``) or ``"numpy"``.
        autoreset_mode: ``"next_step"``, ``"same_step"``, ``"disabled"`` or a
            ``gymnasium.vector.AutoresetMode``.
        render_mode: ``None`` or ``"rgb_array"`` (:meth:`render` gives ``(N, H, W, 3)`` uint8).
        render_camera: camera of :meth:`render`: a model camera name or ``"free"``.
        render_size: ``(width, height)`` of :meth:`render`'s pictures.
        episode_key: info key of the episode statistics, or ``None`` for none.
        owns_task: :meth:`close` closes the task (and the backend it owns).
    """

    def __init__(
        self,
        task: Task,
        *,
        obs_mode: str = "state",
        tensors: str = "torch",
        autoreset_mode: Any = "next_step",
        render_mode: str | None = None,
        render_camera: str = "free",
        render_size: tuple[int, int] = (320, 240),
        episode_key: str | None = None,
        owns_task: bool = True,
    ):
        if not isinstance(task, Task):
            raise ArgumentTypeError(f"task: expected a simbackend.tasks.Task, got {type(task).__name__}")
        mode, size = _check_options(
            obs_mode, tensors, autoreset_mode, render_mode, render_camera, render_size, episode_key
        )
        self.task = task
        self.num_envs = int(task.num_envs)
        self.device = task.device
        self.obs_mode = obs_mode
        self.tensors = tensors
        self.autoreset_mode = mode
        self.render_mode = render_mode
        self.render_camera = render_camera
        self.render_size = size
        self.episode_key = episode_key
        self.owns_task = bool(owns_task)
        self.metadata = {"autoreset_mode": mode, "render_modes": ["rgb_array"], "render_fps": 1.0 / task.control_dt}

        self.single_action_space = spaces.Box(-1.0, 1.0, (int(task.action_dim),), np.float32)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.single_observation_space = self._make_observation_space()
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)

        n = self.num_envs
        #: envs whose last step ended their episode and that were not reset since
        self._ended = np.zeros(n, dtype=bool)
        self._episode_start = np.full(n, time.perf_counter())

    # ------------------------------------------------------------------
    # spaces and conversions
    # ------------------------------------------------------------------
    def _make_observation_space(self) -> spaces.Space:
        task = self.task
        if self.obs_mode == "state":
            return spaces.Box(-np.inf, np.inf, (int(task.observation_size),), np.float32)
        terms = {}
        for key, shape in task.observation_dims.items():
            if key in task.image_terms:
                terms[key] = spaces.Box(0, 255, tuple(shape), np.uint8)
            else:
                terms[key] = spaces.Box(-np.inf, np.inf, tuple(shape), np.float32)
        return spaces.Dict(terms)

    def _observation(self, obs: Mapping[str, torch.Tensor]) -> Any:
        """The returned observation (torch, fresh tensors) from the task's observation dict."""
        if self.obs_mode == "state":
            return self.task.flatten(obs).to(torch.float32)  # torch.cat: a new tensor
        images = self.task.image_terms
        return {k: (v.to(torch.uint8) if k in images else v.to(torch.float32)).clone() for k, v in obs.items()}

    def _export(self, x: Any) -> Any:
        """``x`` (tensors, dicts of them) in the env's array type; numpy arrays are copies."""
        if isinstance(x, dict):
            return {k: self._export(v) for k, v in x.items()}
        if isinstance(x, torch.Tensor) and self.tensors == "numpy":
            return x.detach().to("cpu", copy=True).numpy()
        return x

    def _actions(self, actions: Any) -> torch.Tensor:
        expected = (self.num_envs, int(self.task.action_dim))
        if isinstance(actions, torch.Tensor):
            if actions.is_complex() or actions.dtype == torch.bool:
                raise ArgumentTypeError(f"actions: expected real numbers, got a tensor of dtype {actions.dtype}")
            t = actions.detach()
        else:
            try:
                a = np.asarray(actions)
            except (ValueError, TypeError) as e:
                raise ArgumentTypeError(
                    f"actions: expected an array of shape {expected}, got"
                    f" {type(actions).__name__} that is not one ({e})"
                ) from None
            if a.dtype.kind not in "fiu":
                raise ArgumentTypeError(
                    f"actions: expected real numbers of shape {expected}, got an array of dtype {a.dtype}"
                )
            t = torch.from_numpy(np.array(a, dtype=np.float32))
        if tuple(t.shape) != expected:
            raise InputShapeError("actions", expected, tuple(t.shape))
        return t.to(device=self.device, dtype=torch.float32)

    def _reset_mask(self, mask: Any) -> np.ndarray:
        if isinstance(mask, torch.Tensor):
            mask = mask.detach().cpu().numpy()
        if not isinstance(mask, np.ndarray):
            raise ArgumentTypeError(
                f"options['reset_mask']: expected a numpy array (or tensor) of bool, got {type(mask).__name__}"
            )
        if mask.shape != (self.num_envs,):
            raise InputShapeError("options['reset_mask']", (self.num_envs,), mask.shape)
        if mask.dtype != np.bool_:
            raise ArgumentTypeError(f"options['reset_mask']: expected dtype bool, got {mask.dtype}")
        if not mask.any():
            raise InvalidArgumentError("options['reset_mask']: expected at least one True (an env to reset)")
        return mask.copy()

    def _check_open(self, method: str) -> None:
        if self.closed:
            raise BackendClosedError(f"{method}: this SimVectorEnv is closed")

    # ------------------------------------------------------------------
    # gymnasium API
    # ------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        """Start new episodes in every env, or in ``options["reset_mask"]``'s envs ((N,) bool).

        ``seed`` (an int >= 0) sets the task's reset seed and restarts the episode
        counts of the envs reset, so the same seed replays the same episodes. Returns
        ``(obs, info)`` with the observation of every env (the others unchanged) and
        an empty info. ``options`` is not modified.
        """
        self._check_open("reset")
        mask = None
        if options is not None:
            if not isinstance(options, Mapping):
                raise ArgumentTypeError(f"options: expected a dict or None, got {type(options).__name__}")
            unknown = sorted(set(options) - {"reset_mask"})
            if unknown:
                raise InvalidArgumentError(f"options: unknown keys {unknown}; known: ['reset_mask']")
            if "reset_mask" in options:
                mask = self._reset_mask(options["reset_mask"])
        if seed is not None:
            seed = V.seed_value(seed)
        super().reset(seed=seed)
        if seed is not None:
            self.task.reseed(seed, mask)
        obs = self.task.reset(mask)
        sel = mask if mask is not None else slice(None)
        self._ended[sel] = False
        self._episode_start[sel] = time.perf_counter()
        return self._export(self._observation(obs)), {}

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict]:
        """One policy step of every env; see the module doc for autoreset and info."""
        self._check_open("step")
        action = self._actions(actions)
        mode = self.autoreset_mode
        if mode is AutoresetMode.DISABLED and self._ended.any():
            ids = np.flatnonzero(self._ended).tolist()
            raise InvalidArgumentError(
                f"step: envs {ids} ended their episodes; restart them with reset(options={{'reset_mask': mask}})"
                " before stepping (autoreset_mode=DISABLED)"
            )
        restart = self._ended.copy() if mode is AutoresetMode.NEXT_STEP else np.zeros(self.num_envs, dtype=bool)
        any_restart = bool(restart.any())
        restart_t = torch.as_tensor(restart, device=self.device)
        if any_restart:  # their actions are ignored
            action = action.masked_fill(restart_t[:, None], 0.0)
        try:
            out = self.task.step(action)
        except NonFiniteError as e:
            raise NonFiniteError("actions", e.env_ids) from None
        reward = out.reward.to(torch.float32)
        terminated = out.terminated.to(torch.bool)
        truncated = out.truncated.to(torch.bool)
        obs_dict = out.obs
        now = time.perf_counter()
        if any_restart:
            obs_dict = self.task.reset(restart)
            reward = reward.masked_fill(restart_t, 0.0)
            terminated = terminated & ~restart_t
            truncated = truncated & ~restart_t
            self._episode_start[restart] = now
        ended_t = terminated | truncated
        ended = ended_t.cpu().numpy()
        info = self._step_info(out.info, ~restart_t, ended_t, ended, now)
        obs = self._observation(obs_dict)
        if mode is AutoresetMode.SAME_STEP:
            if ended.any():
                final_info = dict(info)
                info["final_obs"] = obs
                info["_final_obs"] = ended_t.clone()
                info["final_info"] = final_info
                info["_final_info"] = ended_t.clone()
                obs = self._observation(self.task.reset(ended))
                self._episode_start[ended] = now
            self._ended[:] = False
        else:
            self._ended = ended.copy()
        return (
            self._export(obs),
            self._export(reward),
            self._export(terminated),
            self._export(truncated),
            self._export(info),
        )

    def _step_info(
        self, task_info: Mapping[str, Any], valid: torch.Tensor, ended_t: torch.Tensor, ended: np.ndarray, now: float
    ) -> dict:
        """Gymnasium's vector info from the task's step info; ``valid``: envs whose step counted."""
        n = self.num_envs

        def masked(value: Any) -> Any:
            if isinstance(value, Mapping):
                return {k: masked(v) for k, v in value.items()}
            if isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[0] == n:
                keep = _bcast(valid, value)
                return value & keep if value.dtype == torch.bool else torch.where(keep, value, torch.zeros_like(value))
            return value

        info: dict[str, Any] = {}
        for key, value in task_info.items():
            if key in _EPISODE_SO_FAR:
                continue
            info[key] = masked(value)
            if isinstance(value, Mapping) or (
                isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[0] == n
            ):
                info[f"_{key}"] = valid.clone()
        if self.episode_key is not None and ended.any():
            ret = task_info["episode_return"].to(torch.float32)
            length = task_info["episode_length"].to(torch.int64)
            seconds = torch.as_tensor(np.round(now - self._episode_start, 6), dtype=torch.float32, device=self.device)
            info[self.episode_key] = {
                "r": torch.where(ended_t, ret, torch.zeros_like(ret)),
                "l": torch.where(ended_t, length, torch.zeros_like(length)),
                "t": torch.where(ended_t, seconds, torch.zeros_like(seconds)),
            }
            info[f"_{self.episode_key}"] = ended_t.clone()
        return info

    def render(self) -> Any:
        """``(N, H, W, 3)`` uint8 pictures of every env (``render_mode="rgb_array"``), in the env's array type;
        with ``render_mode=None`` a warning and ``None``, as gymnasium's environments do."""
        self._check_open("render")
        if self.render_mode is None:
            logger.warn(
                "You are calling render method without specifying any render mode. You can specify the"
                " render_mode at initialization, e.g. make_vector_env(..., render_mode='rgb_array')"
            )
            return None
        width, height = self.render_size
        images = self.task.backend.render(None, camera=self.render_camera, width=width, height=height)
        return self._export(images)

    # ------------------------------------------------------------------
    # the sub-environment API of gymnasium's Sync/AsyncVectorEnv
    # ------------------------------------------------------------------
    def _owner(self, name: Any, method: str) -> tuple[Any, str] | None:
        """Where ``name`` lives: ``(self or the task, attribute)``, or ``None`` when neither has it."""
        if not isinstance(name, str) or not name.isidentifier():
            raise ArgumentTypeError(f"{method}: name: expected an attribute name (str), got {name!r}")
        if name.startswith("_"):
            raise InvalidArgumentError(f"{method}: name: {name!r} is private; expected a public attribute")
        name = _PER_ENV_SPACES.get(name, name)
        for owner in (self, self.task):
            if hasattr(owner, name):
                return owner, name
        return None

    def _rows(self, value: Any) -> list[Any] | None:
        """Env ``i``'s part of a per-env value (an array or tensor whose leading dimension is ``num_envs``,
        in the env's array type, or a dict of them), or ``None`` for a value of the whole batch."""
        n = self.num_envs
        if isinstance(value, (torch.Tensor, np.ndarray)) and value.ndim >= 1 and value.shape[0] == n:
            rows = self._export(value) if isinstance(value, torch.Tensor) else value
            return [rows[i] for i in range(n)]
        if isinstance(value, Mapping) and value:
            parts = {k: self._rows(v) for k, v in value.items()}
            if all(p is not None for p in parts.values()):
                return [{k: p[i] for k, p in parts.items()} for i in range(n)]  # type: ignore[index]
        return None

    def _per_env(self, value: Any) -> tuple[Any, ...]:
        """``value`` once per env: each env's rows of a per-env value (:meth:`_rows`), else ``value``."""
        rows = self._rows(value)
        return tuple(rows) if rows is not None else tuple(value for _ in range(self.num_envs))

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """What ``SyncVectorEnv.call`` gives: one result per env, as a tuple.

        ``name`` is looked up on this env, then on its task (``"observation_space"`` and
        ``"action_space"`` are the single-env spaces, as a sub-environment's are). A method
        is called once, on the whole batch; a per-env result (an array or tensor whose
        leading dimension is ``num_envs``, or a dict of them) is split into its rows, in
        the env's array type, and any other result is repeated for every env. So ``call("render")`` gives
        the ``N`` pictures of :meth:`render`.
        """
        self._check_open("call")
        found = self._owner(name, "call")
        if found is None:
            raise AttributeError(f"call: neither this SimVectorEnv nor its task {self.task.name!r} has {name!r}")
        value = getattr(*found)
        return self._per_env(value(*args, **kwargs) if callable(value) else value)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """What ``SyncVectorEnv.get_attr`` gives: the attribute once per env (see :meth:`call`)."""
        self._check_open("get_attr")
        found = self._owner(name, "get_attr")
        if found is None:
            raise AttributeError(f"get_attr: neither this SimVectorEnv nor its task {self.task.name!r} has {name!r}")
        return self._per_env(getattr(*found))

    def set_attr(self, name: str, values: Any) -> None:
        """Set an attribute of every env, as ``SyncVectorEnv.set_attr`` does.

        ``values`` is one value for all envs, or a list or tuple of ``num_envs`` values.
        The envs share one task, so the values of a list must all be equal. The
        attribute is set where :meth:`call` finds it (this env, then its task), or on
        this env when neither has it. The env's structure (its task, spaces, modes and
        sizes) cannot be set: build another env instead.
        """
        self._check_open("set_attr")
        found = self._owner(name, "set_attr")
        if name in _FIXED_ATTRS or (found is not None and found[1] in _FIXED_ATTRS):
            raise InvalidArgumentError(
                f"set_attr: name: {name!r} is fixed when the env is built; build another env to change it"
            )
        if isinstance(values, (list, tuple)):
            if len(values) != self.num_envs:
                raise InvalidArgumentError(
                    f"set_attr: values: expected one value or a list of num_envs={self.num_envs} values,"
                    f" got {len(values)}"
                )
            differ = [i for i, v in enumerate(values) if not _same(v, values[0])]
            if differ:
                raise InvalidArgumentError(
                    f"set_attr: values: the {self.num_envs} envs share one task, so {name!r} takes one value"
                    f" for all; envs {differ} differ from env 0"
                )
            value = values[0]
        else:
            value = values
        owner, attr = found if found is not None else (self, name)
        setattr(owner, attr, value)

    def close_extras(self, **kwargs: Any) -> None:
        """Close the task (and the backend it owns) when ``owns_task``."""
        if self.owns_task:
            self.task.close()

    def __repr__(self) -> str:
        return (
            f"SimVectorEnv({self.task.name!r}, sim={getattr(self.task.backend, 'name', '?')!r},"
            f" num_envs={self.num_envs}, obs_mode={self.obs_mode!r}, tensors={self.tensors!r},"
            f" autoreset_mode={self.autoreset_mode.name})"
        )


def make_vector_env(
    task_name: str,
    sim: str = "mujoco",
    num_envs: int = 1,
    *,
    config: Any = None,
    seed: int = 0,
    device: Any = None,
    obs_mode: str = "state",
    tensors: str = "torch",
    autoreset_mode: Any = "next_step",
    render_mode: str | None = None,
    render_camera: str = "free",
    render_size: tuple[int, int] = (320, 240),
    episode_key: str | None = None,
    **backend_options: Any,
) -> SimVectorEnv:
    """Build task ``task_name`` on backend ``sim`` and a :class:`SimVectorEnv` over it (which owns it).

    Args:
        task_name: a registered task (``simbackend.tasks.available_tasks()``).
        sim: a registered backend name.
        num_envs: N.
        config: the task's config, a mapping of its fields, or ``None``.
        seed: the task's reset seed (and the backend's).
        device: torch device of the backend.
        obs_mode, tensors, autoreset_mode, render_mode, render_camera, render_size, episode_key:
            as in :class:`SimVectorEnv` (checked before anything is built).
        **backend_options: passed to the backend factory.
    """
    from simbackend.tasks import make_task

    _check_options(obs_mode, tensors, autoreset_mode, render_mode, render_camera, render_size, episode_key)
    task = make_task(task_name, sim, num_envs, config=config, seed=seed, device=device, **backend_options)
    try:
        return SimVectorEnv(
            task,
            obs_mode=obs_mode,
            tensors=tensors,
            autoreset_mode=autoreset_mode,
            render_mode=render_mode,
            render_camera=render_camera,
            render_size=render_size,
            episode_key=episode_key,
        )
    except BaseException:
        task.close()
        raise
