"""Gymnasium's three stateful vector wrappers, on torch tensors: for :class:`~simbackend.envs.SimVectorEnv`
in its default torch mode.

gymnasium's vector wrappers are written for numpy arrays. In numpy mode
(``tensors="numpy"``) they all run on :class:`~simbackend.envs.SimVectorEnv`
unchanged. In torch mode, where the env's tensors may live on a GPU, these three
do the same work on the env's device:

- :class:`RecordEpisodeStatistics`: ``info["episode"] = {"r", "l", "t"}`` and
  ``"_episode"`` in steps where some episode ended; ``return_queue``,
  ``length_queue``, ``time_queue``, ``episode_count``.
- :class:`NormalizeObservation`: observations centred, unit variance, from
  running statistics (``obs_rms``; freeze them with ``update_running_mean``).
- :class:`NormalizeReward`: rewards scaled by the running standard deviation of
  the discounted return (``return_rms``).

Each takes the arguments of gymnasium's wrapper of the same name, honours the
env's ``metadata["autoreset_mode"]`` as it does, and gives the same numbers
(``tests/test_gym_adapter.py`` runs both side by side). Any other gymnasium
wrapper runs in torch mode behind gymnasium's own conversion::

    from gymnasium.wrappers.vector import ArrayConversion, ClipReward, NumpyToTorch
    env = NumpyToTorch(ClipReward(ArrayConversion(env, env_xp=torch, target_xp=np), -1, 1))
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import numpy as np
import torch

from simbackend._extras import require_extra

require_extra("gymnasium", purpose="the gymnasium wrappers (simbackend.envs.wrappers)")

from gymnasium import spaces  # noqa: E402
from gymnasium.vector import AutoresetMode, VectorEnv, VectorWrapper  # noqa: E402
from gymnasium.vector.utils import batch_space  # noqa: E402

from simbackend.errors import ArgumentTypeError, InvalidArgumentError  # noqa: E402

__all__ = ["NormalizeObservation", "NormalizeReward", "RecordEpisodeStatistics", "RunningMeanStd"]


def _tensor(x: Any, wrapper: str, what: str) -> torch.Tensor:
    """``x`` when it is a tensor; else a one-line error pointing at gymnasium's numpy wrapper."""
    if not isinstance(x, torch.Tensor):
        raise ArgumentTypeError(
            f"{wrapper}: expected the env's {what} as torch tensors, got {type(x).__name__}; for a numpy env"
            f" (tensors='numpy') use gymnasium.wrappers.vector.{wrapper}"
        )
    return x


def _autoreset_mode(env: VectorEnv, wrapper: str) -> AutoresetMode:
    mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    if not isinstance(mode, AutoresetMode):
        raise ArgumentTypeError(
            f"{wrapper}: expected env.metadata['autoreset_mode'] to be a gymnasium.vector.AutoresetMode,"
            f" got {type(mode).__name__}"
        )
    return mode


def _positive(value: Any, argument: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or not np.isfinite(value):
        raise InvalidArgumentError(f"{argument}: expected a finite number > 0, got {value!r}")
    return float(value)


class RunningMeanStd:
    """Running mean, variance and count of batches of values (Chan et al.'s parallel update), on a device.

    The torch twin of ``gymnasium.wrappers.utils.RunningMeanStd``: same start
    (mean 0, variance 1, count ``epsilon``), same update.
    """

    def __init__(
        self, shape: tuple[int, ...] = (), *, device: Any = None, dtype: torch.dtype = torch.float64, epsilon=1e-4
    ):
        self.mean = torch.zeros(shape, dtype=dtype, device=device)
        self.var = torch.ones(shape, dtype=dtype, device=device)
        #: a 0-d float64 tensor on the device: a masked update reads nothing back to the host
        self.count = torch.tensor(float(epsilon), dtype=torch.float64, device=device)

    def to(self, device: Any) -> None:
        """Move the statistics to ``device``."""
        self.mean, self.var, self.count = self.mean.to(device), self.var.to(device), self.count.to(device)

    def update(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        """Add the rows of ``x`` ``(B, *shape)``, or only those ``mask`` ``(B,)`` selects (none: no change),
        without a host read."""
        x = x.to(self.mean.dtype)
        w = torch.ones(x.shape[0], dtype=x.dtype, device=x.device) if mask is None else mask.to(x.dtype)
        w = w.view(-1, *([1] * (x.dim() - 1)))
        batch = w.sum(dim=0).reshape(()) if x.shape[0] else x.new_zeros(())
        per = batch.clamp(min=1.0)
        batch_mean = (w * x).sum(dim=0) / per
        batch_var = (w * (x - batch_mean).square()).sum(dim=0) / per
        delta = batch_mean - self.mean
        total = self.count + batch
        self.mean = self.mean + delta * (batch / total).to(self.mean.dtype)
        m2 = self.var * self.count + batch_var * batch + delta.square() * (self.count * batch / total)
        self.var = (m2 / total).to(self.var.dtype)
        self.count = total


class RecordEpisodeStatistics(VectorWrapper):
    """gymnasium's ``RecordEpisodeStatistics`` on torch tensors (module doc).

    Args:
        env: a vector env that returns torch tensors.
        buffer_length: length of ``return_queue``, ``length_queue`` and ``time_queue``.
        stats_key: the info key of the statistics.
    """

    def __init__(self, env: VectorEnv, buffer_length: int = 100, stats_key: str = "episode"):
        super().__init__(env)
        if isinstance(buffer_length, bool) or not isinstance(buffer_length, int) or buffer_length < 1:
            raise InvalidArgumentError(f"buffer_length: expected an int >= 1, got {buffer_length!r}")
        if not isinstance(stats_key, str) or not stats_key:
            raise InvalidArgumentError(f"stats_key: expected a non-empty str, got {stats_key!r}")
        if getattr(env.unwrapped, "episode_key", None) == stats_key:  # a SimVectorEnv that writes it already
            raise InvalidArgumentError(
                f"RecordEpisodeStatistics: stats_key: the env writes {stats_key!r} itself (episode_key);"
                " pick another stats_key, or build the env with episode_key=None"
            )
        self._stats_key = stats_key
        self._autoreset = _autoreset_mode(env, "RecordEpisodeStatistics")
        self.episode_count = 0
        self.time_queue: deque[float] = deque(maxlen=buffer_length)
        self.return_queue: deque[float] = deque(maxlen=buffer_length)
        self.length_queue: deque[int] = deque(maxlen=buffer_length)
        self._device: Any = None
        self._clear(None)

    def _clear(self, mask: np.ndarray | None) -> None:
        n = self.num_envs
        now = time.perf_counter()
        if mask is None or self._device is None:
            self.episode_start_times = np.full(n, now)
            self.episode_returns = torch.zeros(n, dtype=torch.float64, device=self._device)
            self.episode_lengths = torch.zeros(n, dtype=torch.int64, device=self._device)
            self.prev_dones = torch.zeros(n, dtype=torch.bool, device=self._device)
            self._prev_host = np.zeros(n, dtype=bool)  # the same, read once per step already
            return
        self.episode_start_times[mask] = now
        m = torch.as_tensor(mask, device=self._device)
        self.episode_returns = self.episode_returns.masked_fill(m, 0.0)
        self.episode_lengths = self.episode_lengths.masked_fill(m, 0)
        self.prev_dones = self.prev_dones.masked_fill(m, False)
        self._prev_host[mask] = False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        obs, info = super().reset(seed=seed, options=options)
        mask = None if options is None else options.get("reset_mask")
        if isinstance(mask, torch.Tensor):
            mask = mask.detach().cpu().numpy()
        self._clear(None if mask is None else np.asarray(mask, dtype=bool))
        return obs, info

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict]:
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        rewards = _tensor(rewards, "RecordEpisodeStatistics", "rewards")
        if self._device != rewards.device:  # the first step tells the env's device
            self._device = rewards.device
            self.episode_returns = self.episode_returns.to(rewards.device)
            self.episode_lengths = self.episode_lengths.to(rewards.device)
            self.prev_dones = self.prev_dones.to(rewards.device)
        if self._autoreset is AutoresetMode.SAME_STEP:
            self.episode_returns += rewards
            self.episode_lengths += 1
        else:  # the step after an end resets that env and does not count
            counted = ~self.prev_dones
            self.episode_returns = torch.where(counted, self.episode_returns + rewards, 0.0)
            self.episode_lengths = torch.where(counted, self.episode_lengths + 1, 0)
            self.episode_start_times[self._prev_host] = time.perf_counter()
        dones = _tensor(terminations, "RecordEpisodeStatistics", "terminations") | truncations
        self.prev_dones = dones
        done_np = dones.cpu().numpy()  # the step's one host read: gymnasium adds the key only when some ended
        self._prev_host = done_np.copy()
        if done_np.any():
            key = self._stats_key
            if key in infos or f"_{key}" in infos:
                raise InvalidArgumentError(
                    f"RecordEpisodeStatistics: stats_key: info already holds {key!r} (keys {sorted(infos)});"
                    " pick another stats_key, or build the env with episode_key=None"
                )
            seconds = np.round(time.perf_counter() - self.episode_start_times, 6)
            seconds_t = torch.as_tensor(seconds, device=dones.device)
            infos[key] = {
                "r": torch.where(dones, self.episode_returns, 0.0),
                "l": torch.where(dones, self.episode_lengths, 0),
                "t": torch.where(dones, seconds_t, 0.0),
            }
            infos[f"_{key}"] = dones.clone()
            self.episode_count += int(done_np.sum())
            self.time_queue.extend(seconds[done_np].tolist())
            self.return_queue.extend(self.episode_returns[dones].tolist())
            self.length_queue.extend(self.episode_lengths[dones].tolist())
            if self._autoreset is AutoresetMode.SAME_STEP:  # already reset: start their new episodes
                self._clear(done_np)
        return obs, rewards, terminations, truncations, infos


class NormalizeObservation(VectorWrapper):
    """gymnasium's ``NormalizeObservation`` on torch tensors (module doc): ``(obs - mean) / sqrt(var + epsilon)``.

    Args:
        env: a vector env with a flat ``Box`` observation (``obs_mode="state"``) that returns torch tensors.
        epsilon: keeps the division away from zero (> 0).

    Like gymnasium's, it needs next-step autoreset (or none) and refuses partial resets.
    """

    def __init__(self, env: VectorEnv, epsilon: float = 1e-8):
        super().__init__(env)
        self.epsilon = _positive(epsilon, "epsilon")
        mode = _autoreset_mode(env, "NormalizeObservation")
        if mode is not AutoresetMode.NEXT_STEP:
            raise InvalidArgumentError(
                f"NormalizeObservation: expected an env with autoreset_mode NEXT_STEP (as gymnasium's), got {mode}"
            )
        single = env.single_observation_space
        if not isinstance(single, spaces.Box):
            raise ArgumentTypeError(
                f"NormalizeObservation: expected a Box observation space (obs_mode='state'),"
                f" got {type(single).__name__}"
            )
        self.single_observation_space = spaces.Box(-np.inf, np.inf, single.shape, np.float32)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.obs_rms = RunningMeanStd(single.shape, dtype=torch.float32)
        self.update_running_mean = True

    def _normalize(self, obs: Any) -> torch.Tensor:
        obs = _tensor(obs, "NormalizeObservation", "observations")
        rms = self.obs_rms
        if rms.mean.device != obs.device:
            rms.to(obs.device)
        if self.update_running_mean:
            rms.update(obs)
        return ((obs - rms.mean) / torch.sqrt(rms.var + self.epsilon)).to(torch.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        mask = None if options is None else options.get("reset_mask")
        if mask is not None and not bool(np.all(mask.cpu().numpy() if isinstance(mask, torch.Tensor) else mask)):
            raise InvalidArgumentError(
                "NormalizeObservation: options['reset_mask']: partial resets are not supported (as in gymnasium's)"
            )
        obs, info = super().reset(seed=seed, options=options)
        return self._normalize(obs), info

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict]:
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        return self._normalize(obs), rewards, terminations, truncations, infos


class NormalizeReward(VectorWrapper):
    """gymnasium's ``NormalizeReward`` on torch tensors (module doc): rewards divided by the running
    standard deviation of the discounted return.

    Args:
        env: a vector env that returns torch tensors.
        gamma: the discount of the return, in ``[0, 1]``.
        epsilon: keeps the division away from zero (> 0).
    """

    def __init__(self, env: VectorEnv, gamma: float = 0.99, epsilon: float = 1e-8):
        super().__init__(env)
        if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not 0 <= gamma <= 1:
            raise InvalidArgumentError(f"gamma: expected a number in [0, 1], got {gamma!r}")
        self.gamma = float(gamma)
        self.epsilon = _positive(epsilon, "epsilon")
        self._autoreset = _autoreset_mode(env, "NormalizeReward")
        self.return_rms = RunningMeanStd(())
        self.update_running_mean = True
        self.accumulated_reward = torch.zeros(self.num_envs, dtype=torch.float32)
        self._prev_dones = torch.zeros(self.num_envs, dtype=torch.bool)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        out = super().reset(seed=seed, options=options)  # checks its arguments: a refused reset changes nothing
        self.accumulated_reward.zero_()
        self._prev_dones.zero_()
        return out

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict]:
        obs, reward, terminated, truncated, info = self.env.step(actions)
        reward = _tensor(reward, "NormalizeReward", "rewards")
        device = reward.device
        if self.accumulated_reward.device != device:
            self.accumulated_reward = self.accumulated_reward.to(device)
            self._prev_dones = self._prev_dones.to(device)
            self.return_rms.to(device)
        if self._autoreset is AutoresetMode.SAME_STEP:
            active = torch.ones_like(self._prev_dones)
        else:  # the autoreset step after an end does not count
            active = ~self._prev_dones
        keep = self.gamma * (~terminated).to(torch.float32)
        self.accumulated_reward = torch.where(active, self.accumulated_reward * keep + reward, self.accumulated_reward)
        if self.update_running_mean:  # masked: no host read
            self.return_rms.update(self.accumulated_reward, active)
        self._prev_dones = terminated | truncated
        if self._autoreset is AutoresetMode.SAME_STEP:
            self.accumulated_reward = self.accumulated_reward.masked_fill(self._prev_dones, 0.0)
        scaled = (reward / torch.sqrt(self.return_rms.var + self.epsilon)).to(reward.dtype)
        return obs, scaled, terminated, truncated, info
