"""MuJoCo reference engine (``mujoco.batch.Batch``)."""

from simbackend._extras import require_extra

require_extra("mujoco", purpose="the MuJoCo engine")

from simbackend.backends.mujoco.engine import MuJoCoEngine  # noqa: E402

__all__ = ["MuJoCoEngine"]
