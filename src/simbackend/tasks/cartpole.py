"""``cartpole``: keep the pole of the built-in cart-pole upright (the classic balance task).

Action: ``(N, 1)`` in ``[-1, 1]``, the slider motor's command (+-10 N).
Observations: ``joint_pos`` ``(N, 2)`` (cart position m, pole angle rad, 0 =
upright) and ``joint_vel`` ``(N, 2)``. Reward: 1 per step while balanced.
Terminated when ``|pole angle| > max_angle`` or ``|cart position| > max_cart``;
an episode that reaches the time limit is a success.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import register_task
from .base import Task, TaskConfig, check_non_negative


@dataclass(frozen=True)
class CartpoleConfig(TaskConfig):
    """Cart-pole balance. Defaults: 250 policy steps of 20 ms (5 s).

    Attributes:
        init_noise: initial cart position, pole angle and both velocities are
            uniform in ``+-init_noise``.
        max_angle: pole angle (rad) beyond which the episode fails.
        max_cart: cart distance from the centre (m) beyond which it fails.
    """

    episode_length: int = 250
    decimation: int = 10
    init_noise: float = 0.05
    max_angle: float = 0.2
    max_cart: float = 2.4

    def __post_init__(self) -> None:
        super().__post_init__()
        check_non_negative(self, "init_noise", "max_angle", "max_cart")


@register_task
class CartpoleTask(Task):
    name = "cartpole"
    model = "cartpole"
    config_class = CartpoleConfig
    reset_draws = 4

    def _initial_state(self, env_ids: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        noise = self.config.init_noise * (2 * u.to(torch.float32) - 1)  # (n, 4): x, theta, xdot, thetadot
        return noise[:, :2].contiguous(), noise[:, 2:].contiguous()

    def _observations(self) -> dict[str, torch.Tensor]:
        return {"joint_pos": self.backend.get_dof_pos(), "joint_vel": self.backend.get_dof_vel()}

    def _after_physics(self) -> None:
        # reward, termination and success of this step judge one state: read it once
        pos = self.backend.get_dof_pos()
        self._fail = (pos[:, 1].abs() > self.config.max_angle) | (pos[:, 0].abs() > self.config.max_cart)

    def _reward(self, action: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"alive": (~self._fail).to(torch.float32)}

    def _terminated(self) -> torch.Tensor:
        return self._fail

    def _success(self) -> torch.Tensor:
        return (~self._fail) & (self.episode_step >= self.config.episode_length)
