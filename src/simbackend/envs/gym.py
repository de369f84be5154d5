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
  ``set_attr`` sets what a user may set (``metadata``, the task's plain data, the
  user's own names), each value checked, and refuses what would break the env
  (:meth:`~SimVectorEnv.set_attr`).
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

import inspect
import numbers
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
from simbackend import checks
from simbackend.errors import (
    ArgumentTypeError,
    BackendClosedError,
    InputShapeError,
    InvalidArgumentError,
    NonFiniteError,
    format_shape,
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
#: the task's attributes that hold plain data but are its structure or its bookkeeping (``set_attr`` refuses
#: them, saying why and what changes them); objects, methods, properties and class attributes are refused anyway
_TASK_FIXED = {
    "config": ("the task's configuration", "build another env with make_vector_env(..., config=...)"),
    "seed": ("the task's reset seed", "reset(seed=s) sets it and restarts the episode counts"),
    "episode_count": ("the task's episode bookkeeping", "reset() restarts it"),
    "episode_step": ("the task's episode bookkeeping", "reset() restarts it"),
    "episode_return": ("the task's episode bookkeeping", "reset() restarts it"),
    **{
        name: ("the task's structure", "build another env to change it")
        for name in (
            "num_envs",
            "device",
            "control_dt",
            "reset_key",
            "action_dim",
            "observation_dims",
            "owns_backend",
            "backend",
            "controller",
            "plan",
        )
    },
}


def _is_plain(value: Any) -> bool:
    """Plain data: numbers, strings, ``None``, tensors, arrays, and tuples, lists and dicts of them."""
    if value is None or isinstance(value, (bool, int, float, str, np.generic, np.ndarray, torch.Tensor)):
        return True
    if isinstance(value, (tuple, list)):
        return all(_is_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain(v) for k, v in value.items())
    return False


def _describe(value: Any) -> str:
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return f"a {type(value).__name__} of shape {tuple(value.shape)} and dtype {value.dtype}"
    return type(value).__name__


def _like(new: Any, old: Any, where: str, argument: str) -> Any:
    """``new`` checked against the plain data ``old`` holds, converted to its kind: a bool for a bool, an
    integer for an integer, a finite number for a float, a str for a str, ``None`` for ``None``; a
    sequence of its length, a dict of its keys (each entry checked in turn); a tensor or array of its shape
    whose values are of its kind (finite where real), converted to its dtype and device (a copy)."""
    at = f"{argument}: {where}"
    if isinstance(old, (bool, np.bool_)):
        return checks.boolean(new, at)
    if isinstance(old, (int, np.integer)):
        return checks.integer(new, at)
    if isinstance(old, (float, np.floating)):
        return checks.real(new, at)
    if isinstance(old, str) or old is None:
        if not (isinstance(new, str) if old is not None else new is None):
            raise InvalidArgumentError(f"{at}: expected {_describe(old)}, got {_describe(new)}")
        return new
    if isinstance(old, (tuple, list)):
        if not isinstance(new, (tuple, list)) or len(new) != len(old):
            got = f"{len(new)} entries" if isinstance(new, (tuple, list)) else _describe(new)
            raise InvalidArgumentError(f"{at}: expected a sequence of {len(old)} entries, got {got}")
        return type(old)(_like(n, o, f"{where}[{i}]", argument) for i, (n, o) in enumerate(zip(new, old)))
    if isinstance(old, dict):
        if not isinstance(new, Mapping) or set(new) != set(old):
            keys = sorted(new) if isinstance(new, Mapping) else _describe(new)
            raise InvalidArgumentError(f"{at}: expected the keys {sorted(old)}, got {keys}")
        return {k: _like(new[k], o, f"{where}[{k!r}]", argument) for k, o in old.items()}
    return _like_array(new, old, at)


def _like_array(new: Any, old: np.ndarray | torch.Tensor, at: str) -> Any:
    """``new`` as a tensor or array like ``old`` (:func:`_like`); finite after the conversion to its dtype."""
    if not isinstance(new, (torch.Tensor, np.ndarray, list, tuple, numbers.Number)):
        raise InvalidArgumentError(f"{at}: expected a tensor or array like {_describe(old)}, got {_describe(new)}")
    try:
        a = new.detach().cpu().numpy() if isinstance(new, torch.Tensor) else np.asarray(new)
    except (TypeError, ValueError, RuntimeError, NotImplementedError) as e:  # ragged lists, meta tensors
        raise InvalidArgumentError(f"{at}: cannot be read as an array ({' '.join(str(e).split())})") from None
    if tuple(a.shape) != tuple(old.shape):
        raise InputShapeError(at, tuple(old.shape), a.shape)
    is_bool = old.dtype in (torch.bool, np.bool_)
    is_real = not is_bool and (old.is_floating_point() if isinstance(old, torch.Tensor) else old.dtype.kind == "f")
    kinds, what = ("b", "bools") if is_bool else ("iuf", "real numbers") if is_real else ("iu", "integers")
    if a.dtype.kind not in kinds:
        raise InvalidArgumentError(f"{at}: expected {what} like {_describe(old)}, got dtype {a.dtype}")
    with np.errstate(over="ignore", invalid="ignore"):  # too large for old's dtype: inf, refused below
        out = torch.as_tensor(np.array(a)).to(old.dtype) if isinstance(old, torch.Tensor) else a.astype(old.dtype)
    bad = int((~torch.isfinite(torch.as_tensor(out))).sum()) if is_real else 0
    if bad:
        raise InvalidArgumentError(f"{at}: expected finite numbers (in {old.dtype}), got {bad} that are not")
    return out.to(old.device) if isinstance(out, torch.Tensor) else out


def _metadata(value: Any, mode: AutoresetMode, argument: str) -> dict:
    """A new ``metadata`` dict: gymnasium's keys checked; the autoreset mode is the env's (structure)."""
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(f"{argument}: metadata: expected a dict, got {type(value).__name__}")
    if not all(isinstance(k, str) for k in value):
        raise InvalidArgumentError(f"{argument}: metadata: expected str keys, got {sorted(map(repr, value))}")
    out = dict(value)
    fps = out.get("render_fps")
    if fps is not None:
        checks.real(fps, f"{argument}: metadata['render_fps']", minimum=0.0, above=True)
    modes = out.get("render_modes", [])
    if not isinstance(modes, (list, tuple)) or not all(isinstance(m, str) for m in modes):
        raise InvalidArgumentError(f"{argument}: metadata['render_modes']: expected a list of str, got {modes!r}")
    if out.setdefault("autoreset_mode", mode) != mode:
        raise InvalidArgumentError(
            f"{argument}: metadata['autoreset_mode']: expected the env's, {mode}, got {out['autoreset_mode']!r}"
            " (the autoreset mode is fixed when the env is built)"
        )
    return out


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
        #: the env's own attributes: its structure (``set_attr`` refuses them, ``metadata`` aside)
        self._built = frozenset(vars(self))

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

    def check_actions(self, actions: Any) -> torch.Tensor:
        """``actions`` as :meth:`step` takes them, checked (shape, type), as a ``(N, action_dim)`` tensor on
        the env's device: for an adapter that holds actions between two calls (SB3's ``step_async``)."""
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

    def check_open(self, method: str) -> None:
        """Raise ``BackendClosedError`` naming ``method`` (an adapter's own) when this env is closed."""
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
        self.check_open("reset")
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
        self.check_open("step")
        action = self.check_actions(actions)
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
        self.check_open("render")
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
    def _attribute(self, name: Any, method: str, argument: str) -> str:
        """``name`` checked (a public attribute name), as the env holds it (``"observation_space"`` is the
        single-env space, as a sub-environment's is)."""
        if not isinstance(name, str) or not name.isidentifier():
            raise ArgumentTypeError(f"{method}: {argument}: expected an attribute name (str), got {name!r}")
        if name.startswith("_"):
            raise InvalidArgumentError(f"{method}: {argument}: {name!r} is private; expected a public attribute")
        return _PER_ENV_SPACES.get(name, name)

    def attribute_owner(self, name: Any, method: str, argument: str = "name") -> tuple[Any, str]:
        """Where ``name`` lives: ``(self or the task, attribute)``; ``AttributeError`` when neither has it."""
        attr = self._attribute(name, method, argument)
        for owner in (self, self.task):
            if hasattr(owner, attr):
                return owner, attr
        raise AttributeError(
            f"{method}: {argument}: neither this SimVectorEnv nor its task {self.task.name!r} has {name!r}"
        )

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
        """``value`` once per env: each env's rows of a per-env value (:meth:`_rows`); for a tuple holding
        per-env values (``reset``'s ``(obs, info)``), each env's tuple of its parts' rows; else ``value``."""
        rows = self._rows(value)
        if rows is not None:
            return tuple(rows)
        if isinstance(value, tuple) and value:
            parts = [self._rows(part) for part in value]
            if any(part is not None for part in parts):
                return tuple(
                    tuple(part[i] if part is not None else whole for part, whole in zip(parts, value))
                    for i in range(self.num_envs)
                )
        return tuple(value for _ in range(self.num_envs))

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """What ``SyncVectorEnv.call`` gives: one result per env, as a tuple.

        ``name`` is looked up on this env, then on its task (``"observation_space"`` and
        ``"action_space"`` are the single-env spaces, as a sub-environment's are). A method
        is called once, on the whole batch; a per-env result (an array or tensor whose
        leading dimension is ``num_envs``, or a dict of them) is split into its rows, in
        the env's array type, a tuple of results part by part (``call("reset")`` gives each env its
        ``(obs, info)``, as ``SyncVectorEnv``'s does), and any other result is repeated for every env. So
        ``call("render")`` gives the ``N`` pictures of :meth:`render`. An attribute that is not a method
        takes no arguments.
        """
        return self.call_named(name, args, kwargs, "call", "name", "args")

    def call_named(self, name: Any, args: tuple, kwargs: dict, method: str, name_arg: str, args_arg: str) -> tuple:
        """:meth:`call`, its errors naming ``method`` and its arguments as the caller (SB3's ``env_method``) does."""
        self.check_open(method)
        value = getattr(*self.attribute_owner(name, method, name_arg))
        if not callable(value):
            if args or kwargs:
                raise InvalidArgumentError(
                    f"{method}: {args_arg}: {name!r} is not a method, so it takes no arguments;"
                    f" got {len(args)} positional and {sorted(kwargs)} keyword"
                )
            return self._per_env(value)
        return self._per_env(value(*args, **kwargs))

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """What ``SyncVectorEnv.get_attr`` gives: the attribute once per env (see :meth:`call`)."""
        return self.get_attr_named(name, "get_attr", "name")

    def get_attr_named(self, name: Any, method: str, name_arg: str) -> tuple[Any, ...]:
        """:meth:`get_attr`, its errors naming ``method`` and ``name_arg`` as the caller (SB3's ``get_attr``) does."""
        self.check_open(method)
        return self._per_env(getattr(*self.attribute_owner(name, method, name_arg)))

    def set_attr(self, name: str, values: Any) -> None:
        """Set an attribute of every env, as ``SyncVectorEnv.set_attr`` does: what a user may set is set and
        checked, what would break the env is refused (docs/rl-libraries.md), before anything changes.

        ``values`` is one value for all envs, or a list or tuple of ``num_envs`` values. The envs
        share one task, so the values of a list must all be equal, except for the task's per-env
        tensors and arrays (leading dimension ``num_envs``), which take a row per env (or one row
        for every env, or the whole batch). Settable:

        * ``metadata``: a dict (``render_fps`` a number > 0, ``render_modes`` a list of str); its
          ``"autoreset_mode"`` is the env's.
        * the task's plain data (tensors, arrays, numbers, strings, and lists and dicts of them, such
          as the velocity task's ``commands`` or ``weights``): a value like the one it holds (a
          tensor of its shape with finite values, a dict of its keys, a number for a number),
          converted to its dtype and device.
        * any other name: the user's own attribute, set on this env (as gymnasium's
          ``set_wrapper_attr`` does).

        Refused: the env's own attributes (task, spaces, modes, sizes, methods, properties), the task's
        methods, properties, class attributes and objects (backend, controller, robot), its config, seed
        and episode bookkeeping. Build another env to change those.
        """
        self.set_attr_named(name, values, "set_attr", "name", "values", one_value=False)

    def set_attr_named(
        self, name: Any, values: Any, method: str, name_arg: str, value_arg: str, *, one_value: bool
    ) -> None:
        """:meth:`set_attr`; ``one_value``: ``values`` is one value for every env (SB3's ``set_attr``)."""
        self.check_open(method)
        owner, attr, current = self._settable(name, method, name_arg)
        argument = f"{method}: {value_arg}"
        n = self.num_envs
        if (
            owner is self.task
            and isinstance(current, (torch.Tensor, np.ndarray))
            and current.ndim >= 1
            and current.shape[0] == n
        ):
            value = self._per_env_value(attr, current, values, argument, one_value)
        else:
            value = values if one_value else self._one_value(name, values, argument)
            if owner is self and attr == "metadata":
                value = _metadata(value, self.autoreset_mode, argument)
            elif owner is self.task:
                value = _like(value, current, attr, argument)
        setattr(owner, attr, value)

    def _one_value(self, name: str, values: Any, argument: str) -> Any:
        """The one value of ``values`` (one value, or a list or tuple of ``num_envs`` equal values)."""
        if not isinstance(values, (list, tuple)):
            return values
        if len(values) != self.num_envs:
            raise InvalidArgumentError(
                f"{argument}: expected one value or a list of num_envs={self.num_envs} values, got {len(values)}"
            )
        differ = [i for i, v in enumerate(values) if not _same(v, values[0])]
        if differ:
            raise InvalidArgumentError(
                f"{argument}: the {self.num_envs} envs share one task, so {name!r} takes one value"
                f" for all; envs {differ} differ from env 0"
            )
        return values[0]

    def _per_env_value(self, attr: str, current: Any, values: Any, argument: str, one_value: bool) -> Any:
        """A per-env tensor or array of the task from a row per env, one row for every env, or the batch."""
        n = self.num_envs
        if not one_value and isinstance(values, (list, tuple)) and len(values) == n:
            rows = [_like(v, current[i], f"{attr}[{i}]", argument) for i, v in enumerate(values)]
        else:
            shape = None  # what is not an array or tensor, nor numbers (nested), _like refuses
            if isinstance(values, (torch.Tensor, np.ndarray)):
                shape = tuple(values.shape)
            elif isinstance(values, (list, tuple, numbers.Number)):
                try:
                    shape = np.shape(values)
                except (TypeError, ValueError):  # ragged: _like says where
                    shape = None
            full, row = tuple(current.shape), tuple(current.shape[1:])
            if shape is not None and shape not in (full, row):
                expected = f"{format_shape(full)} (the batch) or {format_shape(row)} (one row for every env)"
                raise InputShapeError(f"{argument}: {attr}", expected, shape)
            if shape != row:
                return _like(values, current, attr, argument)
            rows = [_like(values, current[0], attr, argument)] * n
        return torch.stack(rows) if isinstance(current, torch.Tensor) else np.stack(rows)

    def _settable(self, name: Any, method: str, argument: str) -> tuple[Any, str, Any]:
        """``(owner, attribute, value it holds)`` of an attribute ``set_attr`` may set (a new name: this env,
        ``None``); raises, saying why, for one that is the env's or the task's structure."""
        attr = self._attribute(name, method, argument)

        def fixed(why: str, hint: str = "build another env to change it") -> InvalidArgumentError:
            return InvalidArgumentError(
                f"{method}: {argument}: {name!r} is fixed when the env is built ({why}); {hint}"
            )

        missing = object()
        task = self.task
        if attr in vars(self) and attr not in self._built:
            return self, attr, None  # the user's own attribute
        if attr == "metadata":
            return self, attr, self.metadata
        for owner, whose in ((self, "SimVectorEnv"), (task, "the task")):
            static = inspect.getattr_static(type(owner), attr, missing)
            if static is not missing:
                if isinstance(static, property):
                    raise fixed(f"a property of {whose}")
                if callable(static) or isinstance(static, (staticmethod, classmethod)):
                    raise fixed(f"a method of {whose}")
                raise fixed(f"a class attribute of {whose}")
            if owner is self and attr in self._built:
                raise fixed("the env's structure: its task, spaces, modes and sizes")
        if attr not in vars(task):
            return self, attr, None  # a new name: the user's own, on this env
        value = vars(task)[attr]
        if attr in _TASK_FIXED:
            raise fixed(*_TASK_FIXED[attr])
        if callable(value) or not _is_plain(value):
            raise fixed(f"an object of the task, not plain data: a {type(value).__name__}")
        return task, attr, value

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
