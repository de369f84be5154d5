"""The renderer's arguments checked before anything is drawn: image sizes, modes, spacing, model.

Scalars go through :mod:`simbackend.checks` (the same message for the same
mistake as everywhere else); each function raises an error naming the argument
and returns the value converted.
"""

from __future__ import annotations

from typing import Any

import mujoco
import numpy as np
import torch

from simbackend import _validate as V
from simbackend import checks
from simbackend.errors import ArgumentTypeError, InputShapeError, InvalidArgumentError, NonFiniteError

__all__ = [
    "MAX_IMAGE_SIDE",
    "MODES",
    "SEGMENTATION_KINDS",
    "check_image_size",
    "check_model",
    "check_modes",
    "check_qpos",
    "check_segmentation",
    "check_spacing",
    "check_vec3",
]

#: image kinds a :class:`~simbackend.playback.render.Renderer` produces
MODES = ("rgb", "depth", "segmentation")
#: what a segmentation pixel names: the geom, or the body owning it
SEGMENTATION_KINDS = ("geom", "body")
#: the largest image width or height accepted, pixels
MAX_IMAGE_SIDE = 8192


def check_image_size(value: Any, argument: str) -> int:
    """An image width or height: an int in ``[1, MAX_IMAGE_SIDE]`` (errors name ``argument``)."""
    v = checks.integer(value, argument)
    if v < 1:
        raise InvalidArgumentError(f"{argument}: expected a number of pixels >= 1, got {v}")
    if v > MAX_IMAGE_SIDE:
        raise InvalidArgumentError(
            f"{argument}: {v} pixels is above the largest image side the renderer accepts ({MAX_IMAGE_SIDE})"
        )
    return int(v)


def check_modes(modes: Any, argument: str = "modes") -> tuple[str, ...]:
    """``modes`` (a mode name or a sequence of names from :data:`MODES`) as a tuple without repeats."""
    if isinstance(modes, str):
        modes = (modes,)
    if not isinstance(modes, (list, tuple)):
        raise ArgumentTypeError(
            f"{argument}: expected a mode name or a sequence of names from {list(MODES)}, got {type(modes).__name__}"
        )
    if not modes:
        raise InvalidArgumentError(f"{argument}: expected at least one of {list(MODES)}, got none")
    out: list[str] = []
    for m in modes:
        if not isinstance(m, str):
            raise ArgumentTypeError(f"{argument}: expected mode names (str), got {type(m).__name__} {m!r}")
        if m not in MODES:
            raise InvalidArgumentError(f"{argument}: unknown mode {m!r}; expected one of {list(MODES)}")
        if m in out:
            raise InvalidArgumentError(f"{argument}: mode {m!r} named twice")
        out.append(m)
    return tuple(out)


def check_segmentation(kind: Any, argument: str = "segmentation") -> str:
    """``"geom"`` or ``"body"``."""
    return checks.choice(kind, argument, SEGMENTATION_KINDS)


def check_spacing(spacing: Any, argument: str = "spacing") -> float | None:
    """``None`` or a finite distance > 0, metres."""
    return checks.real(spacing, argument, minimum=0.0, above=True, allow_none=True)


def check_model(model: Any) -> Any:
    """``model`` if it is a compiled ``mujoco.MjModel``."""
    if not isinstance(model, mujoco.MjModel):
        raise ArgumentTypeError(
            f"model: expected a compiled mujoco.MjModel (backend.info.compiled), got {type(model).__name__}"
        )
    return model


def _shape(x: Any) -> tuple[int, ...]:
    """The shape of an array-like, ``(-1,)`` for a ragged one (for the error message)."""
    try:
        shape = tuple(x.shape) if isinstance(x, (torch.Tensor, np.ndarray)) else np.shape(x)
    except ValueError:
        return (-1,)
    return tuple(s if isinstance(s, int) else -1 for s in shape)


def check_vec3(x: Any, argument: str) -> tuple[float, float, float]:
    """Three finite numbers (a sequence, numpy array or tensor of shape ``(3,)``)."""
    if isinstance(x, (str, bytes)):
        raise ArgumentTypeError(f"{argument}: expected 3 numbers, got a string")
    shape = _shape(x)
    if shape != (3,):
        raise InputShapeError(argument, (3,), shape)
    a = V.real_tensor(x, argument, (3,), device=torch.device("cpu"), dtype=torch.float64).numpy()
    if not np.isfinite(a).all():
        raise InvalidArgumentError(f"{argument}: expected finite values, got {a.tolist()}")
    return (float(a[0]), float(a[1]), float(a[2]))


def check_qpos(qpos: Any, nq: int) -> np.ndarray:
    """``(n, nq)`` finite states as a float64 numpy array (``NonFiniteError`` names the bad rows)."""
    shape = _shape(qpos)
    if len(shape) != 2 or shape[1] != nq:
        raise InputShapeError("qpos", f"(n, {nq})", shape)
    q = V.real_tensor(qpos, "qpos", shape, device=torch.device("cpu"), dtype=torch.float64).numpy()
    bad = np.flatnonzero(~np.isfinite(q).all(axis=1))
    if bad.size:
        raise NonFiniteError("qpos", bad.tolist())
    return q
