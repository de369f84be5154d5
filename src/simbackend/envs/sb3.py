"""stable-baselines3's :class:`~stable_baselines3.common.vec_env.VecEnv` over any task: :class:`SB3VecEnv`,
:func:`make_sb3_env`.

>>> from stable_baselines3 import PPO                                   # doctest: +SKIP
>>> env = make_sb3_env("cartpole", sim="mujoco", num_envs=16)           # doctest: +SKIP
>>> PPO("MlpPolicy", env).learn(20_000)                                 # doctest: +SKIP

It drives a :class:`~simbackend.envs.SimVectorEnv` in numpy mode with same-step
autoreset and speaks SB3's conventions, as ``DummyVecEnv`` does:

* ``step`` returns ``(obs, rewards, dones, infos)``: ``dones = terminated |
  truncated``; an env whose episode ended is reset in the same step and its
  returned observation is the new episode's first; ``infos`` is a list of ``N``
  dicts, with ``"terminal_observation"`` (the ended episode's last observation)
  and ``"TimeLimit.truncated"`` (the time limit, not a termination, ended it:
  SB3 bootstraps those), and the task's per-env step info (``"success"``,
  ``"reward_terms"`` ...).
* ``seed(s)`` sets the task's reset seed at the next ``reset()``; env ``i``'s
  ``k``-th episode is drawn from ``(s, i, k)``, on any engine.
* ``get_attr``, ``set_attr``, ``env_method`` reach the env and its task as
  :meth:`SimVectorEnv.call <simbackend.envs.SimVectorEnv.call>` does. The envs
  share one task, so ``set_attr`` sets one value for all envs, and a method runs
  once, on the batch. ``indices`` naming some envs only: ``env_method("reset")``
  restarts those envs only (a masked reset) and gives each its ``(obs, info)``,
  as ``DummyVecEnv`` does; an attribute, or a method that changes nothing
  (:data:`READ_ONLY_METHODS`), gives the named envs' results; any other method
  would act on every env, so it is refused (``indices=None`` runs it).
* ``render()`` / ``get_images()`` with ``render_mode="rgb_array"``.

:func:`make_sb3_env` wraps it in SB3's ``VecMonitor`` by default, as SB3's
``make_vec_env`` wraps its envs in ``Monitor``, so the training logs show
``ep_rew_mean`` and ``ep_len_mean``.
"""

from __future__ import annotations

import numbers
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from simbackend._extras import require_extra

require_extra("stable_baselines3", "gymnasium", purpose="the stable-baselines3 adapter (simbackend.envs.sb3)")

from stable_baselines3.common.vec_env import VecEnv, VecMonitor  # noqa: E402

from simbackend import _validate as V  # noqa: E402
from simbackend import checks  # noqa: E402
from simbackend.envs.gym import SimVectorEnv  # noqa: E402
from simbackend.errors import (  # noqa: E402
    ArgumentTypeError,
    InputShapeError,
    InvalidArgumentError,
    ScalarTypeError,
)

__all__ = ["READ_ONLY_METHODS", "SB3VecEnv", "make_sb3_env"]

#: SimVectorEnv info keys that SB3's per-env infos carry otherwise (or not at all)
_OWN_KEYS = ("final_obs", "final_info")

#: methods of the env and its task that change nothing, so ``env_method`` runs them on the batch for some envs
#: too and gives the named envs' results (``compute_reward`` is pure by gymnasium-robotics' ``GoalEnv`` rule,
#: which SB3's HER relies on when it calls it with ``indices=[0]``)
READ_ONLY_METHODS = frozenset(
    {"render", "get_attr", "observe", "flatten", "describe", "action_to_ctrl", "compute_reward"}
)


def _one_line(value: Any) -> str:
    """A short repr of ``value`` on one line (an array's repr spans several)."""
    return " ".join(checks.short_repr(value).split())


def _row(value: Any, i: int) -> Any:
    return {k: _row(v, i) for k, v in value.items()} if isinstance(value, Mapping) else value[i]


class SB3VecEnv(VecEnv):
    """SB3's ``VecEnv`` over a :class:`~simbackend.envs.SimVectorEnv` (module doc).

    Args:
        env: a ``SimVectorEnv`` built with ``tensors="numpy"`` and ``autoreset_mode="same_step"``
            (:func:`make_sb3_env` builds one).
    """

    def __init__(self, env: SimVectorEnv):
        if not isinstance(env, SimVectorEnv):
            raise ArgumentTypeError(f"env: expected a simbackend.envs.SimVectorEnv, got {type(env).__name__}")
        if env.tensors != "numpy" or env.autoreset_mode.name != "SAME_STEP":
            raise InvalidArgumentError(
                "env: expected a SimVectorEnv with tensors='numpy' and autoreset_mode='same_step' (SB3's"
                f" conventions), got tensors={env.tensors!r}, autoreset_mode={env.autoreset_mode.name};"
                " make_sb3_env builds one"
            )
        self.env = env
        self._actions: torch.Tensor | None = None
        self._seed: int | None = None
        super().__init__(env.num_envs, env.single_observation_space, env.single_action_space)

    # ------------------------------------------------------------------
    # stepping
    # ------------------------------------------------------------------
    def reset(self) -> Any:
        """New episodes in every env (seeded when :meth:`seed` was called since the last reset)."""
        if any(self._options):
            raise InvalidArgumentError(
                f"options: a simbackend env's resets take no options, got {self._options[0]!r};"
                " clear them with set_options(None)"
            )
        seed, self._seed = self._seed, None
        obs, _ = self.env.reset(seed=seed)
        self.reset_infos = [{} for _ in range(self.num_envs)]
        self._reset_seeds()
        self._reset_options()
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        """Take the actions of the next :meth:`step_wait`, checked here (shape and type; a refused call
        keeps nothing)."""
        self._actions = None
        self._actions = self.env.check_actions(actions)

    def step_wait(self) -> tuple[Any, np.ndarray, np.ndarray, list[dict]]:
        """Step every env with the actions :meth:`step_async` took (once: a refused step takes them too)."""
        if self._actions is None:
            raise InvalidArgumentError("step_wait: no actions; call step_async(actions) first")
        actions, self._actions = self._actions, None
        obs, reward, terminated, truncated, info = self.env.step(actions)
        dones = terminated | truncated
        infos = self._infos(info, terminated, truncated)
        return obs, reward.astype(np.float32, copy=False), dones, infos

    def _infos(self, info: dict, terminated: np.ndarray, truncated: np.ndarray) -> list[dict]:
        """gymnasium's vector info (key + ``"_key"`` mask) as SB3's list of per-env dicts."""
        infos: list[dict] = [{} for _ in range(self.num_envs)]
        for key, value in info.items():
            if key.startswith("_") or key in _OWN_KEYS:
                continue
            mask = info.get(f"_{key}")
            if mask is None:  # one value for the batch
                for entry in infos:
                    entry[key] = value
                continue
            for i in np.flatnonzero(mask):
                infos[i][key] = _row(value, int(i))
        for i in np.flatnonzero(terminated | truncated):
            infos[i]["terminal_observation"] = _row(info["final_obs"], int(i))
        for i, flag in enumerate(truncated & ~terminated):
            infos[i]["TimeLimit.truncated"] = bool(flag)
        return infos

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        """Seed the next :meth:`reset`: the task's reset seed becomes ``seed`` (a random one for ``None``)."""
        if seed is None:
            seed = int(np.random.randint(0, np.iinfo(np.uint32).max, dtype=np.uint32))
        self._seed = V.seed_value(seed)
        return [self._seed] * self.num_envs

    def close(self) -> None:
        self.env.close()

    # ------------------------------------------------------------------
    # attributes and methods of the envs
    # ------------------------------------------------------------------
    def _indices(self, indices: Any) -> list[int]:
        """SB3's ``indices``: ``None`` (every env), an env id, or a sequence, array or tensor of env ids
        (duplicates allowed, order kept); bools are not ids."""
        n = self.num_envs
        if indices is None:
            return list(range(n))
        if isinstance(indices, (np.ndarray, torch.Tensor)):
            if indices.ndim > 1:
                raise InputShapeError("indices", "(n,)", tuple(indices.shape))
            indices = indices.tolist()  # an integer array's ids as ints, a bool mask's as bools (refused)
        if isinstance(indices, (numbers.Integral, np.bool_)):
            ids = [indices]
        elif isinstance(indices, (str, bytes, Mapping)) or not isinstance(indices, Iterable):
            raise InvalidArgumentError(
                f"indices: expected an env id, a sequence of env ids or None, got {_one_line(indices)}"
            )
        else:
            ids = list(indices)
        bad = [i for i in ids if isinstance(i, (bool, np.bool_)) or not isinstance(i, numbers.Integral)]
        if bad:
            raise ScalarTypeError(f"indices: expected env ids (integers, not bools), got {_one_line(bad)}")
        out = [i for i in ids if not 0 <= i < n]
        if out:
            raise InvalidArgumentError(f"indices: expected env ids in [0, {n}), got {_one_line(out)}")
        return [int(i) for i in ids]

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        ids = self._indices(indices)
        values = self.env.get_attr_named(attr_name, "get_attr", "attr_name")  # SB3's names in its errors
        return [values[i] for i in ids]

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        """Set ``value`` on every env (SB3's meaning: one value, a list too), by :meth:`SimVectorEnv.set_attr
        <simbackend.envs.SimVectorEnv.set_attr>`'s rule; ``indices`` must name every env (they share a task)."""
        if indices is not None and sorted(set(self._indices(indices))) != list(range(self.num_envs)):
            raise InvalidArgumentError(
                f"indices: the {self.num_envs} envs share one task, so set_attr({attr_name!r}) sets every env;"
                " pass indices=None"
            )
        self.env.set_attr_named(attr_name, value, "set_attr", "attr_name", "value", one_value=True)

    def env_method(self, method_name: str, *method_args: Any, indices: Any = None, **method_kwargs: Any) -> list[Any]:
        """Call ``method_name`` of the envs ``indices`` (every env for ``None``), all arguments checked first.

        ``"reset"`` restarts the named envs only (an env named twice restarts twice, as ``DummyVecEnv``'s
        loop does) and gives each named env's ``(obs, info)``; it takes ``seed`` (for every env only: the
        envs share one reset seed) and no options. Any other method runs once, on the batch
        (:meth:`SimVectorEnv.call <simbackend.envs.SimVectorEnv.call>`), and the results of ``indices``
        come back; naming some envs only, it must change nothing (:data:`READ_ONLY_METHODS`), since it would
        act on every env."""
        ids = self._indices(indices)
        self.env.check_open("env_method")
        owner, attr = self.env.attribute_owner(method_name, "env_method", "method_name")
        if owner is self.env and attr == "reset":
            return self._reset_envs(ids, method_args, method_kwargs)
        if not self._every(ids) and attr not in READ_ONLY_METHODS and callable(getattr(owner, attr)):
            raise InvalidArgumentError(
                f"indices: the {self.num_envs} envs share one task, so env_method({method_name!r}) runs once and"
                f" would act on every env, not on envs {_one_line(ids)} only; pass indices=None (reset and the"
                f" methods that change nothing take some envs: {sorted(READ_ONLY_METHODS)})"
            )
        values = self.env.call_named(  # SB3's names in its errors
            method_name, method_args, method_kwargs, "env_method", "method_name", "method_args"
        )
        return [values[i] for i in ids]

    def _every(self, ids: list[int]) -> bool:
        """Whether ``ids`` names every env."""
        return len(set(ids)) == self.num_envs

    def _reset_envs(self, ids: list[int], args: tuple, kwargs: dict) -> list[tuple[Any, dict]]:
        """``env_method("reset", indices=ids)``: new episodes in the envs ``ids`` only (a masked reset, a
        round for each repetition of an id), ``[(obs, info)]`` in the order of ``ids``."""
        if args:
            raise InvalidArgumentError(
                f"env_method: method_args: reset takes keyword arguments only (seed, options), got {len(args)}"
                " positional"
            )
        unknown = sorted(set(kwargs) - {"seed", "options"})
        if unknown:
            raise InvalidArgumentError(
                f"env_method: method_kwargs: reset takes seed and options, got unknown keywords {unknown}"
            )
        options = kwargs.get("options")
        if options is not None and (not isinstance(options, Mapping) or options):
            raise InvalidArgumentError(
                f"env_method: method_kwargs: a simbackend env's resets take no options, got options="
                f"{_one_line(options)}; indices names the envs to reset"
            )
        seed = kwargs.get("seed")
        if seed is not None:
            seed = V.seed_value(seed)
            if not self._every(ids):
                raise InvalidArgumentError(
                    f"indices: the {self.num_envs} envs share one reset seed, so reset(seed={seed}) would reseed"
                    f" the next episodes of every env, not of envs {_one_line(ids)} only; pass indices=None, or"
                    " reset these envs without a seed"
                )
        repeats = Counter(ids)
        rows: dict[int, list[Any]] = {i: [] for i in repeats}
        for k in range(max(repeats.values(), default=0)):
            mask = np.zeros(self.num_envs, dtype=bool)
            mask[[i for i, times in repeats.items() if times > k]] = True
            obs, _ = self.env.reset(seed=seed, options={"reset_mask": mask})
            for i in np.flatnonzero(mask):
                rows[int(i)].append(_row(obs, int(i)))
        taken = Counter[int]()
        out = []
        for i in ids:
            out.append((rows[i][taken[i]], {}))
            taken[i] += 1
        return out

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        """Always ``False``: the envs are rows of one batch, not gymnasium envs in wrappers."""
        if not isinstance(wrapper_class, type):
            raise ArgumentTypeError(
                f"env_is_wrapped: wrapper_class: expected a class, got {type(wrapper_class).__name__}"
            )
        return [False for _ in self._indices(indices)]

    def get_images(self) -> Sequence[np.ndarray | None]:
        """One ``(H, W, 3)`` uint8 picture per env (``render_mode="rgb_array"``), else ``None`` per env."""
        images = self.env.render()
        if images is None:
            return [None] * self.num_envs
        return list(images)

    def __repr__(self) -> str:
        return f"SB3VecEnv({self.env!r})"


def make_sb3_env(
    task_name: str,
    sim: str = "mujoco",
    num_envs: int = 1,
    *,
    config: Any = None,
    seed: int = 0,
    device: Any = None,
    obs_mode: str = "state",
    render_mode: str | None = None,
    render_camera: str = "free",
    render_size: tuple[int, int] = (320, 240),
    monitor: bool = True,
    info_keywords: Iterable[str] = (),
    **backend_options: Any,
) -> VecEnv:
    """Build task ``task_name`` on backend ``sim`` as an SB3 ``VecEnv`` (module doc).

    Args:
        task_name, sim, num_envs, config, seed, device, obs_mode, render_mode, render_camera,
            render_size, **backend_options: as in :func:`simbackend.envs.make_vector_env`.
        monitor: wrap it in SB3's ``VecMonitor`` (episode returns and lengths in the logs).
        info_keywords: per-env info keys that ``VecMonitor`` copies into its episode record
            (e.g. ``("success",)``).
    """
    from simbackend.envs.gym import make_vector_env

    if not isinstance(monitor, bool):
        raise ArgumentTypeError(f"monitor: expected a bool, got {type(monitor).__name__}")
    keywords = tuple(info_keywords) if not isinstance(info_keywords, str) else (info_keywords,)
    env = make_vector_env(
        task_name,
        sim,
        num_envs,
        config=config,
        seed=seed,
        device=device,
        obs_mode=obs_mode,
        tensors="numpy",
        autoreset_mode="same_step",
        render_mode=render_mode,
        render_camera=render_camera,
        render_size=render_size,
        **backend_options,
    )
    vec: VecEnv = SB3VecEnv(env)
    return VecMonitor(vec, info_keywords=keywords) if monitor else vec
