"""Combined readouts: several getters in one call, selected env rows, into a caller's buffer.

:class:`Readout` is the front end's service for what UniLab's backend
contract calls the state API beyond the single getters: body pose, velocity
and state in one call, several sensors concatenated, each for selected env
rows and optionally written into a caller-owned buffer (so a hot loop
allocates nothing). It is built on the front end's public getters, so every
row equals the single getters' rows bit for bit, on every engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from simbackend import _validate as V
from simbackend.errors import ArgumentTypeError, InputDTypeError, InputShapeError, InvalidArgumentError


class Readout:
    """Combined readouts of one backend (the public calls are ``SimBackend``'s)."""

    def __init__(self, sim: Any, host_ids: V.HostIds):
        self.sim = sim
        self.host_ids = host_ids

    def rows_and_out(
        self, lead: tuple, width: int, env_ids: Any, out: Any, argument: str = "out"
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Validated rows (``None``: all envs, else a device index tensor) and ``out`` for a result
        ``(n, *lead, width)``; raises before anything is read or written."""
        sim = self.sim
        rows = None
        n = sim.num_envs
        if env_ids is not None:
            host = V.env_ids(env_ids, sim.num_envs, host_ids=self.host_ids)
            rows, n = torch.as_tensor(host, device=sim.device), int(host.size)
        if out is None:
            return rows, None
        shape = (n, *lead, width)
        if not isinstance(out, torch.Tensor):
            raise ArgumentTypeError(f"{argument}: expected a torch.Tensor, got {type(out).__name__}")
        if out.dtype != torch.float32:
            raise InputDTypeError(f"{argument}: expected float32, got {out.dtype}")
        want = sim.device
        if want.type == "cuda" and want.index is None:
            want = torch.device("cuda", torch.cuda.current_device())
        if out.device != want:
            raise InvalidArgumentError(f"{argument}: expected a tensor on {sim.device}, got one on {out.device}")
        if tuple(out.shape) != shape:
            raise InputShapeError(argument, shape, tuple(out.shape))
        if not out.is_contiguous():
            raise InvalidArgumentError(f"{argument}: must be contiguous (strides {tuple(out.stride())})")
        if out.requires_grad:
            raise InvalidArgumentError(f"{argument}: must not require grad (it is written in place)")
        return rows, out

    def fill(self, parts: Sequence[torch.Tensor], rows: torch.Tensor | None, out: torch.Tensor | None) -> torch.Tensor:
        """``parts`` ``(N, ..., k_i)`` side by side on the last axis, rows ``rows``, into ``out`` if given."""
        if out is None:
            pieces = [p if rows is None else p[rows] for p in parts]
            return torch.cat(pieces, dim=-1).to(torch.float32)
        col = 0
        for p in parts:  # each part straight into its columns: no concatenated copy
            k = p.shape[-1]
            out[..., col : col + k].copy_(p if rows is None else p[rows])
            col += k
        return out

    def combined(self, getters: Sequence[Any], ids: np.ndarray, width: int, env_ids: Any, out: Any) -> torch.Tensor:
        """The body getters ``getters`` (``sim.get_body_pos_w`` & co.) of bodies ``ids`` side by side,
        ``(n, B, width)``, rows ``env_ids``, into ``out`` if given; checked before anything is read."""
        rows, out = self.rows_and_out((ids.size,), width, env_ids, out)
        return self.fill([g(ids) for g in getters], rows, out)

    def sensors(self, sids: Sequence[int], names: Sequence[str], env_ids: Any, out: Any) -> torch.Tensor:
        """Sensors ``names`` (ids ``sids``, checked) concatenated, rows ``env_ids``, into ``out`` if given."""
        info = self.sim.info
        width = int(sum(int(info.sensor_dim[sid]) for sid in sids))
        rows, out = self.rows_and_out((), width, env_ids, out)
        return self.fill([self.sim.get_sensor_data(n) for n in names], rows, out)
