"""Joint position targets through a robot description's own joint controller (shared by the
excitation that writes logs and the replay that fits to them)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

__all__ = ["TargetDriver"]


class TargetDriver:
    """Sends absolute joint position targets of a robot's driven joints through the controller its
    description names (position servos for ``actuation="servo"``, the PD law on motors for ``"pd"``),
    as the velocity task does: the targets are clipped to the joint ranges.

    Args:
        robot: a :class:`~simbackend.robots.RobotDescription`, a registered name or a description file.
        backend: a backend built on the robot's scene.
    """

    def __init__(self, robot: Any, backend: Any):
        from simbackend.robots import get_robot, resolve
        from simbackend.robots.actuation import joint_controller

        self.description = desc = get_robot(robot)
        self.backend = backend
        self.resolved = resolve(desc, backend)
        self.joint_names = tuple(desc.driven_joints)
        ids = [backend.joint_names.index(n) for n in self.joint_names]
        rng = np.asarray(backend.info.joint_range, np.float64)[ids]
        limited = np.isfinite(rng).all(1) & (rng[:, 1] > rng[:, 0])
        self.low = np.where(limited, rng[:, 0], -math.pi)
        self.high = np.where(limited, rng[:, 1], math.pi)
        self.controller, _, _ = joint_controller(desc, backend, self.resolved, self.low.tolist(), self.high.tolist())

    @property
    def default_targets(self) -> np.ndarray:
        """``(k,)`` the default pose of the driven joints (policy joints, then held ones)."""
        r = self.resolved
        return torch.cat([r.default_joints, r.held_default]).cpu().numpy().astype(np.float64)

    def reset(self) -> None:
        self.controller.reset()

    def step(self, targets: np.ndarray, nsteps: int) -> dict:
        """Step every env with targets ``(N, k)`` held for ``nsteps`` substeps; ``step``'s info."""
        action = 2.0 * (np.clip(targets, self.low, self.high) - self.low) / (self.high - self.low) - 1.0
        return self.controller.apply(torch.as_tensor(action, dtype=torch.float32, device=self.backend.device), nsteps)
