"""torchrl's :class:`~torchrl.envs.EnvBase` over any task: :class:`TorchRLEnv`, :func:`make_torchrl_env`.

>>> env = make_torchrl_env("cartpole", sim="mujoco", num_envs=64)       # doctest: +SKIP
>>> rollout = env.rollout(100, break_when_any_done=False)               # doctest: +SKIP

A task is already a batch of envs on one torch device, which is what torchrl's
batched envs are; :class:`TorchRLEnv` is a thin ``EnvBase`` with ``batch_size =
[N]`` whose tensors stay on ``task.device`` (no copy through numpy, as with
torchrl's gymnasium wrapper):

* ``"observation"``: the task's flat observation ``(N, observation_size)`` float32
  (``obs_mode="state"``), or one entry per term (``obs_mode="state_dict"``; image
  terms ``(N, H, W, 3)`` uint8).
* ``"action"``: ``(N, action_dim)`` in ``[-1, 1]`` (clipped by the task).
* ``"reward"`` ``(N, 1)`` float32; ``"done"``, ``"terminated"``, ``"truncated"``
  ``(N, 1)`` bool; ``"success"`` ``(N, 1)`` bool, the task's success at each step.
* Resets are torchrl's: nothing is reset inside ``step``; ``reset()`` with a
  ``"_reset"`` ``(N, 1)`` or ``(N,)`` bool mask on the env's device (what
  collectors and ``step_and_maybe_reset`` send; any other is refused before an
  env restarts) starts new episodes in those envs only. The envs step together:
  a partial ``"_step"`` mask is refused.
* ``set_seed(s)``: the task's reset seed; env ``i``'s ``k``-th episode is drawn
  from ``(s, i, k)``, on any engine.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from simbackend._extras import require_extra

require_extra("torchrl", "tensordict", purpose="the torchrl adapter (simbackend.envs.torchrl)")

from tensordict import TensorDict, TensorDictBase  # noqa: E402
from torchrl.data import Bounded, Categorical, Composite, Unbounded  # noqa: E402
from torchrl.envs import EnvBase  # noqa: E402

from simbackend import _validate as V  # noqa: E402
from simbackend.errors import ArgumentTypeError, InputDTypeError, InputShapeError, InvalidArgumentError  # noqa: E402
from simbackend.tasks import Task  # noqa: E402

__all__ = ["OBS_MODES", "TorchRLEnv", "make_torchrl_env"]

#: accepted ``obs_mode`` values
OBS_MODES = ("state", "state_dict")


def _check_obs_mode(obs_mode: Any) -> str:
    if not isinstance(obs_mode, str) or obs_mode not in OBS_MODES:
        raise InvalidArgumentError(f"obs_mode: expected one of {', '.join(map(repr, OBS_MODES))}, got {obs_mode!r}")
    return obs_mode


class TorchRLEnv(EnvBase):
    """torchrl's ``EnvBase`` over a :class:`~simbackend.tasks.Task` (module doc).

    Args:
        task: the task (its ``num_envs`` envs are the batch).
        obs_mode: ``"state"`` (flat vector under ``"observation"``) or ``"state_dict"`` (one entry per term).
        owns_task: :meth:`close` closes the task (and the backend it owns).
    """

    def __init__(self, task: Task, *, obs_mode: str = "state", owns_task: bool = True):
        if not isinstance(task, Task):
            raise ArgumentTypeError(f"task: expected a simbackend.tasks.Task, got {type(task).__name__}")
        obs_mode = _check_obs_mode(obs_mode)
        n = int(task.num_envs)
        device = torch.device(task.device)
        super().__init__(device=device, batch_size=torch.Size([n]))
        self.task = task
        self.obs_mode = obs_mode
        self.owns_task = bool(owns_task)
        self._success = torch.zeros(n, 1, dtype=torch.bool, device=device)
        if obs_mode == "state":
            terms: dict[str, Any] = {
                "observation": Unbounded(shape=(n, int(task.observation_size)), dtype=torch.float32, device=device)
            }
        else:
            terms = {}
            for key, shape in task.observation_dims.items():
                if key in task.image_terms:
                    terms[key] = Bounded(0, 255, shape=(n, *shape), dtype=torch.uint8, device=device)
                else:
                    terms[key] = Unbounded(shape=(n, *shape), dtype=torch.float32, device=device)
        terms["success"] = Categorical(2, shape=(n, 1), dtype=torch.bool, device=device)
        self.observation_spec = Composite(terms, shape=(n,), device=device)
        self.action_spec = Bounded(-1.0, 1.0, shape=(n, int(task.action_dim)), dtype=torch.float32, device=device)
        self.reward_spec = Unbounded(shape=(n, 1), dtype=torch.float32, device=device)
        self.done_spec = Composite(
            {
                k: Categorical(2, shape=(n, 1), dtype=torch.bool, device=device)
                for k in ("done", "terminated", "truncated")
            },
            shape=(n,),
            device=device,
        )
        # torchrl's EnvBase starts closed (only its gym wrappers open it); without this, close() skipped the task
        self.is_closed = False

    def _observation(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        task = self.task
        if self.obs_mode == "state":
            return {"observation": task.flatten(obs).to(torch.float32)}
        return {
            k: (v.to(torch.uint8) if k in task.image_terms else v.to(torch.float32)).clone() for k, v in obs.items()
        }

    def _reset_mask(self, mask: Any) -> torch.Tensor:
        """The ``"_reset"`` entry checked from its metadata (no host read): a bool tensor of shape ``(N,)``
        or ``(N, 1)`` (torchrl's two) on the env's device; returned as ``(N,)``."""
        n = self.batch_size[0]
        argument = "tensordict['_reset']"
        if not isinstance(mask, torch.Tensor):
            raise ArgumentTypeError(
                f"{argument}: expected a bool tensor of shape ({n},) or ({n}, 1), got {type(mask).__name__}"
            )
        if mask.dtype != torch.bool:
            raise InputDTypeError(f"{argument}: expected a bool mask, got dtype {mask.dtype}")
        if tuple(mask.shape) not in ((n,), (n, 1)):
            raise InputShapeError(argument, f"({n},) or ({n}, 1)", mask.shape)
        if mask.device != self.device:
            raise InvalidArgumentError(
                f"{argument}: expected a mask on the env's device {self.device}, got one on {mask.device}"
            )
        return mask.reshape(n)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        if kwargs:
            raise InvalidArgumentError(
                f"reset: unknown keyword arguments {sorted(kwargs)}; a TorchRLEnv's reset takes a tensordict"
                " (with an optional '_reset' mask) only"
            )
        n = self.batch_size[0]
        mask = None if tensordict is None else tensordict.get("_reset", None)
        if mask is not None:  # the task takes the mask as it is: no host read on a GPU backend
            mask = self._reset_mask(mask)
            obs = self.task.reset(mask)
            success = self._success.masked_fill(mask[:, None], False)
        else:
            obs = self.task.reset()
            success = torch.zeros(n, 1, dtype=torch.bool, device=self.device)
        self._success = success
        false = torch.zeros(n, 1, dtype=torch.bool, device=self.device)
        return TensorDict(
            {
                **self._observation(obs),
                "success": success,
                "done": false,
                "terminated": false.clone(),
                "truncated": false.clone(),
            },
            batch_size=self.batch_size,
            device=self.device,
        )

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        partial = tensordict.get("_step", None)  # torchrl leaves a partial step to the env: the task steps all
        if partial is not None and not bool(torch.as_tensor(partial).all()):
            raise InvalidArgumentError(
                "tensordict['_step']: a partial step is not supported: every env steps together"
                " (step them all; reset the ones to restart with '_reset')"
            )
        action = tensordict.get("action", None)
        if action is None:
            raise InvalidArgumentError("tensordict['action']: missing; expected the (N, action_dim) actions")
        out = self.task.step(action)
        terminated = out.terminated.to(torch.bool)[:, None]
        truncated = out.truncated.to(torch.bool)[:, None]
        success = out.info.get("success")
        n = self.batch_size[0]
        self._success = (
            success.to(torch.bool).reshape(n, 1)
            if isinstance(success, torch.Tensor)
            else torch.zeros(n, 1, dtype=torch.bool, device=self.device)
        )
        return TensorDict(
            {
                **self._observation(out.obs),
                "success": self._success,
                "reward": out.reward.to(torch.float32)[:, None],
                "done": terminated | truncated,
                "terminated": terminated,
                "truncated": truncated,
            },
            batch_size=self.batch_size,
            device=self.device,
        )

    def _set_seed(self, seed: int | None) -> None:
        if seed is None:
            seed = int(np.random.randint(0, np.iinfo(np.uint32).max, dtype=np.uint32))
        self.task.reseed(V.seed_value(seed))

    def close(self, *, raise_if_closed: bool = True) -> None:
        """Close the task (when owned) and this env; an input error still pending from deferred checks
        is raised after both are closed."""
        try:
            if not self.is_closed and self.owns_task:
                self.task.close()
        finally:
            super().close(raise_if_closed=raise_if_closed)


def make_torchrl_env(
    task_name: str,
    sim: str = "mujoco",
    num_envs: int = 1,
    *,
    config: Any = None,
    seed: int = 0,
    device: Any = None,
    obs_mode: str = "state",
    **backend_options: Any,
) -> TorchRLEnv:
    """Build task ``task_name`` on backend ``sim`` and a :class:`TorchRLEnv` over it (which owns it).

    Args: as :func:`simbackend.envs.make_vector_env`'s; ``obs_mode`` is ``"state"`` or ``"state_dict"``.
    """
    from simbackend.tasks import make_task

    _check_obs_mode(obs_mode)
    task = make_task(task_name, sim, num_envs, config=config, seed=seed, device=device, **backend_options)
    try:
        return TorchRLEnv(task, obs_mode=obs_mode)
    except BaseException:
        task.close()
        raise
