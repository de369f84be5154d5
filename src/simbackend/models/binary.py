"""A compiled model as bytes and back: MuJoCo's binary model format (MJB), for recordings."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from simbackend.errors import ModelLoadError
from simbackend.models.mujoco_extra import import_mujoco

if TYPE_CHECKING:
    import mujoco


def model_to_bytes(m: mujoco.MjModel) -> bytes:
    """The compiled model as MuJoCo's binary format (MJB): meshes, textures and options included,
    so a recording can rebuild the model without the files it came from."""
    mujoco = import_mujoco()

    buf = np.zeros(mujoco.mj_sizeModel(m), np.uint8)
    mujoco.mj_saveModel(m, None, buf)
    return buf.tobytes()


def model_from_bytes(data: bytes) -> mujoco.MjModel:
    """The compiled model of :func:`model_to_bytes`' output; a one-line ``ModelLoadError`` if it is not one."""
    mujoco = import_mujoco()

    try:
        return mujoco.MjModel.from_binary_path("model.mjb", {"model.mjb": bytes(data)})
    except Exception as e:  # MuJoCo raises ValueError and others for a bad buffer
        raise ModelLoadError(
            f"the stored model is not a MuJoCo binary model (MJB): {' '.join(str(e).split())}"
        ) from None
