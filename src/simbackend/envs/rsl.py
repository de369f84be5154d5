"""rsl-rl's :class:`~rsl_rl.env.VecEnv` over a :class:`~simbackend.tasks.Task` (IsaacLab's and mjlab's PPO).

:class:`RslRlVecEnv` adds what rsl-rl expects and a task leaves to its caller:

* **Same-step autoreset.** :meth:`RslRlVecEnv.step` steps the task, and the envs
  whose episode ended (terminated or truncated) start a new one inside the same
  call (``task.reset(done)``): the returned observation of a done env is the first
  one of its next episode, as in IsaacLab and mjlab.
* **Observations** as a :class:`~tensordict.TensorDict` of batch size ``[N]`` with
  the groups ``"policy"`` and ``"critic"``, both the task's flat observation
  ``(N, task.observation_size)`` (images stay out). The runner's ``obs_groups``
  maps ``actor -> ["policy"]`` and ``critic -> ["critic"]``.
* **Dones** ``(N,)`` long (``terminated | truncated``), and in ``extras``:

  - ``"time_outs"`` ``(N,)`` bool: the time limit ended the episode (rsl-rl
    bootstraps the value of those);
  - ``"log"``: ``"/episode/return"``, ``"/episode/length"``, ``"/episode/success"``,
    each the mean over the envs whose episode ended in this step (absent when
    none did); rsl-rl's logger averages them over an iteration. A backend with
    deferred checks (GPU) leaves ``"log"`` out: deciding whether any episode
    ended reads the device; ``"final"`` carries the same statistics, on the
    device, and the step then reads nothing back to the host (the done envs
    are reset by mask, :meth:`simbackend.tasks.Task.reset`);
  - ``"final"`` (simbackend's own): ``{"done", "episode_return", "episode_length",
    "success"}``, ``(N,)`` tensors of every env at the end of the step, *before*
    the resets, for callers that count episodes themselves (the trainer of
    :mod:`simbackend.training`).

* **Episode lengths.** ``episode_length_buf`` *is* the task's ``episode_step``:
  reading it gives the task's counter, and assigning to it (as
  ``OnPolicyRunner.learn(init_at_random_ep_len=True)`` does) copies the values into
  ``task.episode_step`` at once, so that the task truncates those episodes early
  (an env set to step ``k`` ends after ``max_episode_length - k`` more steps; a
  value past the end is the last step). It takes ``(N,)`` whole numbers >= 0 (an
  integer or float tensor on the env's device, or host numbers) and refuses any
  other, naming ``episode_length_buf``, before the counter changes. The
  task's ``episode_length`` info then counts from ``k``, and a task whose success
  needs the full length (``cartpole``) scores such a shortened first episode as a
  success; evaluation runs on fresh tasks, and the trainer of
  :mod:`simbackend.training` does not count such first episodes in its figures.

Building the adapter starts no new episode: the task's constructor already
reset every env, and :meth:`RslRlVecEnv.get_observations` returns the current
observation (:meth:`RslRlVecEnv.reset` starts new episodes in every env).

Imports neither an engine nor a backend.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from simbackend._extras import require_extra

require_extra("rsl_rl", "tensordict", purpose="the rsl-rl adapter (simbackend.envs.rsl)")

from rsl_rl.env import VecEnv  # noqa: E402
from tensordict import TensorDict  # noqa: E402

from simbackend import _validate as V  # noqa: E402
from simbackend import checks  # noqa: E402
from simbackend.errors import (  # noqa: E402
    ArgumentTypeError,
    InputDTypeError,
    InputShapeError,
    InvalidArgumentError,
    NonFiniteError,
)

__all__ = ["CRITIC_GROUP", "LOG_KEYS", "POLICY_GROUP", "RslRlVecEnv"]

#: observation groups of the TensorDict
POLICY_GROUP = "policy"
CRITIC_GROUP = "critic"
#: keys of ``extras["log"]``
LOG_KEYS = ("/episode/return", "/episode/length", "/episode/success")


class RslRlVecEnv(VecEnv):
    """A :class:`~simbackend.tasks.Task` as an rsl-rl vectorized environment (see the module docstring).

    Args:
        task: the task to wrap (any engine); the adapter does not own it unless
            ``owns_task`` (then :meth:`close` closes it).
        owns_task: close the task in :meth:`close`.

    Attributes:
        task: the wrapped task.
        num_envs, num_actions, max_episode_length, device: the task's.
        cfg: ``task.describe()`` (rsl-rl's logger stores it).
    """

    def __init__(self, task: Any, *, owns_task: bool = False):
        for attr in ("step", "reset", "flatten", "observe", "episode_step", "action_dim", "num_envs"):
            if not hasattr(task, attr):
                raise ArgumentTypeError(
                    f"task: expected a simbackend Task, got {type(task).__name__} (no attribute {attr!r})"
                )
        self.task = task
        self.owns_task = checks.boolean(owns_task, "owns_task")
        self.num_envs = int(task.num_envs)
        self.num_actions = int(task.action_dim)
        self.max_episode_length = int(task.max_episode_length)
        self.device = task.device
        self.cfg = task.describe()
        self._deferred = bool(getattr(getattr(task, "backend", None), "deferred_checks", False))
        self._obs = self._pack(task.observe())

    # ------------------------------------------------------------------
    # episode lengths: the task's own counter
    # ------------------------------------------------------------------
    @property
    def episode_length_buf(self) -> torch.Tensor:  # type: ignore[override]
        """``(N,)`` int64: policy steps of every env's current episode (the task's ``episode_step``)."""
        return self.task.episode_step

    @episode_length_buf.setter
    def episode_length_buf(self, value: Any) -> None:
        steps = self._episode_steps(value)  # checked whole before the task's counter changes
        self.task.episode_step.copy_(steps)

    def _episode_steps(self, value: Any) -> torch.Tensor:
        """``value`` checked as ``episode_length_buf``: ``(N,)`` whole numbers >= 0 (an integer or float
        tensor on the env's device, or host numbers), as int64 on the device, at most
        ``max_episode_length - 1``. One host read: whether every value is a whole number >= 0."""
        argument = "episode_length_buf"
        current = self.task.episode_step
        if isinstance(value, torch.Tensor):
            if value.device != current.device:
                raise InvalidArgumentError(
                    f"{argument}: expected a tensor on the env's device {current.device}, got one on {value.device}"
                )
            V.check_tensor_storage(value, argument)
            steps = value.detach()
        else:
            array = np.asarray(value) if not isinstance(value, np.ndarray) else value
            if array.dtype.kind not in "iuf":
                raise InputDTypeError(f"{argument}: expected step counts, got dtype {array.dtype}")
            steps = torch.as_tensor(np.array(array), device=current.device)
        if steps.dtype == torch.bool or steps.is_complex():
            raise InputDTypeError(f"{argument}: expected step counts, got dtype {steps.dtype}")
        if tuple(steps.shape) != tuple(current.shape):
            raise InputShapeError(argument, tuple(current.shape), tuple(steps.shape))
        bad = steps < 0
        if steps.is_floating_point():  # a fraction, NaN or inf
            bad = bad | (steps != steps.floor()) | ~torch.isfinite(steps)
        if bool(bad.any()):
            first = steps[bad][0].item()
            raise InvalidArgumentError(f"{argument}: expected whole numbers of steps >= 0, got {first}")
        # the task truncates at episode_step >= episode_length: keep every env at least one step from it
        return steps.clamp(max=self.max_episode_length - 1).to(current.dtype)

    # ------------------------------------------------------------------
    # VecEnv
    # ------------------------------------------------------------------
    def _pack(self, obs: dict) -> TensorDict:
        flat = self.task.flatten(obs)
        return TensorDict({POLICY_GROUP: flat, CRITIC_GROUP: flat}, batch_size=[self.num_envs], device=self.device)

    def get_observations(self) -> TensorDict:
        """The current observations ``{"policy", "critic"}``, each ``(N, observation_size)``."""
        return self._obs

    def reset(self) -> tuple[TensorDict, dict]:
        """Start new episodes in every env; ``(observations, extras)``."""
        self._obs = self._pack(self.task.reset())
        return self._obs, {}

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        """One policy step of every env, with same-step autoreset of the envs whose episode ended.

        Args:
            actions: ``(N, num_actions)``; the task clips them to ``[-1, 1]``.

        Returns:
            ``(observations, rewards (N,) float32, dones (N,) long, extras)``; see the module docstring.
        """
        actions = V.real_tensor(
            actions, "actions", (self.num_envs, self.num_actions), device=self.device, dtype=torch.float32
        )
        try:
            out = self.task.step(actions)  # refuses NaN before it steps (a GPU backend: at its next call)
        except NonFiniteError as e:
            if e.argument != "action":  # the backend's own (a deferred error of an earlier call)
                raise
            raise NonFiniteError("actions", e.env_ids) from None
        info = out.info
        done = out.terminated | out.truncated
        final = {
            "done": done,
            "episode_return": info["episode_return"],
            "episode_length": info["episode_length"],
            "success": info["success"],
        }
        extras: dict[str, Any] = {"time_outs": out.truncated, "final": final}
        if self._deferred:  # no host read: every step resets by mask (a no-op for envs not done), no "log"
            self._obs = self._pack(self.task.reset(done))
            return self._obs, out.reward, done.long(), extras
        if bool(done.any()):
            extras["log"] = {
                LOG_KEYS[0]: info["episode_return"][done].float().mean(),
                LOG_KEYS[1]: info["episode_length"][done].float().mean(),
                LOG_KEYS[2]: info["success"][done].float().mean(),
            }
            obs = self.task.reset(done)
        else:
            obs = out.obs
        self._obs = self._pack(obs)
        return self._obs, out.reward, done.long(), extras

    def close(self) -> None:
        """Close the task if the adapter owns it."""
        if self.owns_task:
            self.task.close()

    def __repr__(self) -> str:
        return f"RslRlVecEnv({self.task!r})"
