"""MuJoCo Warp engine (``mujoco_warp``: MuJoCo's pipeline as warp kernels, on CUDA or warp's CPU device)."""

from simbackend._extras import require_extra

require_extra("mujoco", "warp", "mujoco_warp", purpose="the MuJoCo Warp engine")

from simbackend.backends.mjwarp.engine import MJWarpEngine  # noqa: E402

__all__ = ["MJWarpEngine"]
