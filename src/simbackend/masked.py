"""Per-env updates selected by a device mask, with nothing read back to the host.

On a GPU, which envs end their episode is a device tensor; turning it into
host ids (``mask.nonzero()``) waits for the device. The task layer instead
runs a per-env update (new targets, commands, controller anchors) for *every*
env and keeps it only where the mask is set: :func:`rows_kept` saves the
``(N, ...)`` tensors an object holds, lets the update run, and puts the saved
rows back wherever the mask is clear (``torch.where``, no host read). Used by
:meth:`simbackend.tasks.Task.reset` and the controllers' ``reset`` when the
backend defers its checks (``SimBackend.deferred_checks``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["rows_kept"]


@contextlib.contextmanager
def rows_kept(owner: Any, mask: torch.Tensor) -> Iterator[None]:
    """Inside, update ``owner``'s per-env tensors for every env; on exit, the rows where ``mask`` (``(N,)``
    bool, on the tensors' device) is clear get back what they held before.

    A per-env tensor is an attribute of ``owner`` that is a tensor whose first dimension is ``N`` on
    ``mask``'s device, found when the block starts; the merged rows are written into whatever tensor the
    attribute holds at the end (one the update replaced by a tensor of another shape or dtype is left as it is).
    """
    n = mask.shape[0]
    saved = {
        name: value.clone()
        for name, value in vars(owner).items()
        if isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[0] == n and value.device == mask.device
    }
    yield
    keep = ~mask
    for name, before in saved.items():
        now = getattr(owner, name, None)
        if not isinstance(now, torch.Tensor) or now.shape != before.shape or now.dtype != before.dtype:
            continue
        now.copy_(torch.where(keep.view(-1, *(1,) * (before.dim() - 1)), before, now))
