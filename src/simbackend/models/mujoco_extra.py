"""MuJoCo, which compiles every model: imported through the ``mujoco`` extra, at the point of use.

The engine-neutral core imports :mod:`simbackend.models` (for
:func:`~simbackend.models.sensor_frames`, say), so no module of the package
imports ``mujoco`` at import time; each function that needs it calls
:func:`import_mujoco`, which raises one
:class:`~simbackend.errors.MissingExtraError` naming the extra when MuJoCo
is not installed.
"""

from __future__ import annotations

from types import ModuleType

from simbackend._extras import require_extra

#: what needs MuJoCo, for the missing-extra message
PURPOSE = "the model compiler (simbackend.models)"


def import_mujoco() -> ModuleType:
    """The ``mujoco`` module; raises :class:`~simbackend.errors.MissingExtraError` naming the ``mujoco``
    extra when it is not installed."""
    require_extra("mujoco", purpose=PURPOSE)
    import mujoco

    return mujoco


def import_mujoco_batch() -> ModuleType:
    """MuJoCo's batched module ``mujoco.batch`` (``Batch``: many MjData stepped, read and ray-cast at once),
    imported as :func:`import_mujoco` imports MuJoCo; for code outside the MuJoCo backend that casts MuJoCo's
    rays on its own engine's state (a plugin's ray caster)."""
    import_mujoco()
    from mujoco import batch

    return batch
