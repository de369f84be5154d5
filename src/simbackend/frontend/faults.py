"""Input value checks of a GPU backend, computed on the device and raised at the next call.

A CPU backend raises a bad input value (NaN, too large, a zero quaternion) at
once. A GPU backend cannot without reading the device back: it records which
envs' inputs were bad with device reductions, leaves those envs as they were,
and the next mutating call (or ``synchronize``) raises the error naming them,
once the marks' copy to the host has arrived.
"""

from __future__ import annotations

import numpy as np
import torch

from simbackend.errors import InvalidQuaternionError, NonFiniteError, ValueRangeError


class DeferredFaults:
    """Input value checks of a GPU backend, computed on the device and read at the next call.

    One ``(K, N)`` bool tensor marks, per (argument, problem) pair, the envs
    whose input was bad; a CUDA backend copies it to pinned host memory
    without waiting, and the next call reads the copy once the copy's event
    has completed (``query`` never blocks). The envs marked were left as they
    were by the call that saw the bad input.
    """

    def __init__(self, num_envs: int, device: torch.device):
        self.kinds: list[tuple[str, str]] = []
        self.num_envs, self.device = num_envs, device
        self.masks = torch.zeros((0, num_envs), dtype=torch.bool, device=device)
        self.host: np.ndarray | None = None
        self.event: torch.cuda.Event | None = None
        self.pending = False

    def _row(self, argument: str, problem: str) -> int:
        key = (argument, problem)
        if key not in self.kinds:
            self.kinds.append(key)
            shape = (len(self.kinds), self.num_envs)
            if self.device.type == "cpu":  # the marks live in host memory: numpy and torch share it
                self.host = np.zeros(shape, dtype=bool)
                grown = torch.from_numpy(self.host)
            else:
                grown = torch.zeros(shape, dtype=torch.bool, device=self.device)
                self.host = None
            grown[: self.masks.shape[0]] = self.masks
            self.masks = grown
        return self.kinds.index(key)

    def record(self, argument: str, problem: str, env_ids: torch.Tensor | None, bad: torch.Tensor) -> None:
        """Mark ``env_ids[bad]`` (device tensors; ``None``: every env, ``bad`` ``(N,)``) for ``argument``;
        reads nothing back."""
        k = self._row(argument, problem)  # may grow self.masks: index it afterwards
        row = self.masks[k]
        if env_ids is None:
            row.logical_or_(bad)
        else:
            row[env_ids] = row[env_ids] | bad  # ids are distinct
        self.pending = True

    def _capturing(self) -> bool:
        """Whether a ``torch.cuda.graph`` is being captured: then the marks are kept on the device (the
        graph's owner reads them between replays, :meth:`raise_if_any` with ``wait``)."""
        return self.device.type == "cuda" and torch.cuda.is_current_stream_capturing()

    def publish(self) -> None:
        """Start the copy of the marks to the host (no wait)."""
        if not self.pending or self._capturing():
            return
        if self.device.type == "cuda":
            if self.host is None or self.host.shape != tuple(self.masks.shape):
                self._pinned = torch.zeros(tuple(self.masks.shape), dtype=torch.bool, pin_memory=True)
                self.host = self._pinned.numpy()  # a view of pinned host memory: no device read
                self.event = torch.cuda.Event()
            self._pinned.copy_(self.masks, non_blocking=True)
            assert self.event is not None  # made with the pinned buffer above
            self.event.record()

    def raise_if_any(self, wait: bool = False) -> None:
        """Raise the first recorded problem (clearing the marks), once its copy has arrived."""
        if not self.pending or self._capturing():
            return
        if self.host is None:
            return
        if self.event is not None and not (wait or self.event.query()):
            return
        if self.event is not None and wait:
            self.event.synchronize()
        self.pending = False
        if not self.host.any():
            return
        rows = [(k, np.flatnonzero(self.host[k])) for k in range(len(self.kinds)) if self.host[k].any()]
        self.masks.zero_()
        self.host[...] = False
        (argument, problem), ids = self.kinds[rows[0][0]], rows[0][1]
        note = " (a GPU backend checks input values on the device and reports them at the next call; those envs were left as they were)"
        if problem == "nonfinite":
            err: Exception = NonFiniteError(argument, ids.tolist())
        elif problem == "zero quaternion":
            err = InvalidQuaternionError(f"{argument}: zero quaternion in env ids {ids[:8].tolist()}")
        else:
            err = ValueRangeError(argument, ids.tolist(), float(problem))
        err.args = (str(err) + note,)
        raise err
