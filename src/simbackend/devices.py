"""Device arguments: one check shared by the backends, the CLI and the test plugins.

Imports no engine.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from simbackend.errors import ArgumentTypeError, InvalidArgumentError, SimBackendError


class DeviceUnavailableError(SimBackendError):
    """A well-formed device that this machine does not have (``cuda`` without CUDA)."""


def require_device(
    device: Any, *, default: str = "cpu", allowed: Iterable[str] | None = ("cpu", "cuda"), argument: str = "device"
) -> torch.device:
    """``device`` as a ``torch.device`` this machine has.

    Args:
        device: ``None`` (``default``), a string such as ``"cpu"``, ``"cuda"`` or
            ``"cuda:1"``, or a ``torch.device``.
        default: the device ``None`` stands for.
        allowed: device types the caller supports (``None``: cpu and cuda).
        argument: the name used in error messages.

    Raises:
        ArgumentTypeError: not a string or ``torch.device``.
        InvalidArgumentError: a malformed device, or a type not in ``allowed``
            (``meta`` holds no data and is never allowed).
        DeviceUnavailableError: CUDA requested where torch sees none, or a
            CUDA index beyond the device count.
    """
    if device is None:
        device = default
    if not isinstance(device, (str, torch.device)):
        raise ArgumentTypeError(
            f"{argument}: expected a device string such as 'cpu' or 'cuda', got {type(device).__name__} {device!r}"
        )
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError) as e:
        raise InvalidArgumentError(f"{argument}: {device!r} is not a device ({' '.join(str(e).split())})") from e
    kinds = tuple(allowed) if allowed is not None else ("cpu", "cuda")
    if dev.type not in kinds or dev.type == "meta":
        raise InvalidArgumentError(f"{argument}: expected one of {list(kinds)}, got {str(dev)!r}")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceUnavailableError(
                f"{argument}: device {str(dev)!r} requested, but torch sees no CUDA device (torch {torch.__version__})"
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise DeviceUnavailableError(
                f"{argument}: device {str(dev)!r} requested, but torch sees {torch.cuda.device_count()} CUDA device(s)"
            )
    return dev
