"""What the front end keeps per env beside the engine's state: time, the controls last applied, pending forces."""

from __future__ import annotations

import numpy as np
import torch

from simbackend.engine import BodyForces
from simbackend.errors import InvalidArgumentError
from simbackend.model_info import ModelInfo


class EnvBook:
    """Per-env time, last controls and the body forces pending for the next ``step``.

    Attributes:
        time: ``(N,)`` float64 simulated time on the device, s.
        ctrl: ``(N, nu)`` the controls last applied (as given, in the engine's dtype;
            :meth:`clamped_ctrl` clamps them to the ctrl ranges as the engine applied them).
    """

    def __init__(self, info: ModelInfo, num_envs: int, device: torch.device, dtype: torch.dtype):
        self.info, self.num_envs, self.device, self.dtype = info, num_envs, device, dtype
        try:
            self._time = torch.zeros(num_envs, dtype=torch.float64, device=device)
            self._ctrl = torch.zeros((num_envs, info.nu), dtype=dtype, device=device)
        except (RuntimeError, MemoryError) as e:  # torch reports an impossible allocation as a RuntimeError
            raise InvalidArgumentError(
                f"num_envs: {num_envs} envs cannot be allocated ({' '.join(str(e).split())[:160]})"
            ) from None
        # on the CPU, time is also a numpy view: a step adds to it at numpy's cost, not torch's
        self._time_host = self._time.numpy() if device.type == "cpu" else None
        r = torch.as_tensor(np.array(info.actuator_ctrl_range), dtype=torch.float64, device=device)
        self._ctrl_lo, self._ctrl_hi = r[:, 0], r[:, 1]
        self._ctrl_bounds_host = np.array(info.actuator_ctrl_range).T
        # pending body forces (apply_body_force until the next step): (N, nbody, 3) each, on first use
        self._force: torch.Tensor | None = None
        self._torque: torch.Tensor | None = None
        self._bodies = np.zeros(0, np.int64)

    # ------------------------------------------------------------------
    # time and controls
    # ------------------------------------------------------------------
    @property
    def time(self) -> torch.Tensor:
        """``(N,)`` float64 time (edited in place only: :meth:`restore` puts back a saved copy)."""
        return self._time

    @property
    def ctrl(self) -> torch.Tensor:
        """``(N, nu)`` the controls last applied (edited in place only: :meth:`keep_ctrl`, :meth:`restore`)."""
        return self._ctrl

    def keep_ctrl(self, ctrl: torch.Tensor) -> None:
        """Remember ``ctrl`` ``(N, nu)`` as the controls last applied (a copy: the caller may reuse its tensor)."""
        self._ctrl.copy_(ctrl)

    def restore(self, time: torch.Tensor, ctrl: torch.Tensor) -> None:
        """Put back every env's time and controls from copies taken earlier."""
        self._time.copy_(time)
        self._ctrl.copy_(ctrl)

    def advance_all(self, seconds: float) -> None:
        """Add ``seconds`` to every env's time (a step in which no env stayed)."""
        if self._time_host is not None:
            self._time_host += seconds
        else:
            self._time += seconds

    def advance(self, seconds: float, stayed: torch.Tensor, defer: bool) -> None:
        """Add ``seconds`` to every env not in ``stayed`` (``(N,)`` bool on the device); ``defer``:
        no host read of the mask (a GPU backend)."""
        if defer:  # no host read of the mask
            torch.where(stayed, self._time, self._time + seconds, out=self._time)
        elif bool(stayed.any()):
            self._time[~stayed] += seconds
        else:
            self.advance_all(seconds)

    def clamped_ctrl(self, rows: torch.Tensor | None = None) -> torch.Tensor:
        """``(n, nu)`` float32 last controls of ``rows`` (all envs for ``None``), clamped to the ctrl ranges."""
        ctrl = self.ctrl if rows is None else self.ctrl[rows]
        return torch.clamp(ctrl.to(torch.float64), self._ctrl_lo, self._ctrl_hi).to(torch.float32)

    def clamp(self, ctrl: torch.Tensor) -> torch.Tensor:
        """``(n, nu)`` float32 ``ctrl`` clamped to the ctrl ranges (as :meth:`clamped_ctrl`)."""
        return torch.clamp(ctrl.to(torch.float64), self._ctrl_lo, self._ctrl_hi).to(torch.float32)

    def clamped_ctrl_host(self, env_ids: np.ndarray) -> np.ndarray:
        """``(n, nu)`` float32 host copy of :meth:`clamped_ctrl` for host ``env_ids`` (the recorder's hot path)."""
        lo, hi = self._ctrl_bounds_host
        return np.clip(self.ctrl.cpu().numpy()[env_ids].astype(np.float64), lo, hi).astype(np.float32)

    # ------------------------------------------------------------------
    # pending body forces
    # ------------------------------------------------------------------
    def add_forces(self, bodies: np.ndarray, force: torch.Tensor, torque: torch.Tensor) -> None:
        """Add ``(N, B, 3)`` world forces and torques at the origins of bodies ``bodies`` (host ids)."""
        held_force, held_torque = self._buffers()
        cols = torch.as_tensor(bodies, device=self.device)
        held_force[:, cols] += force.to(self.dtype)
        held_torque[:, cols] += torque.to(self.dtype)
        self._bodies = np.union1d(self._bodies, bodies)

    def _buffers(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``(N, nbody, 3)`` force and torque accumulators, made on first use."""
        if self._force is None or self._torque is None:
            self._force = torch.zeros((self.num_envs, self.info.nbody, 3), dtype=self.dtype, device=self.device)
            self._torque = torch.zeros_like(self._force)
        return self._force, self._torque

    def remove_forces(self, bodies: np.ndarray, force: torch.Tensor, torque: torch.Tensor) -> None:
        """Take back what :meth:`add_forces` added (forces held for one step, after the step failed)."""
        held_force, held_torque = self._buffers()
        cols = torch.as_tensor(bodies, device=self.device)
        held_force[:, cols] -= force.to(self.dtype)
        held_torque[:, cols] -= torque.to(self.dtype)

    def pending_forces(self) -> BodyForces | None:
        """The forces pending for the next step, or ``None``."""
        if not self._bodies.size:
            return None
        held_force, held_torque = self._buffers()
        cols = torch.as_tensor(self._bodies, device=self.device)
        return BodyForces(self._bodies, held_force[:, cols], held_torque[:, cols])

    def clear_forces(self) -> None:
        """Drop the pending forces (the end of every step)."""
        if self._bodies.size:
            for held in self._buffers():
                held.zero_()
            self._bodies = np.zeros(0, np.int64)
