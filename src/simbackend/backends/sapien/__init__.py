"""SAPIEN 3 / PhysX 5 engine (CPU PhysX everywhere, GPU PhysX where CUDA is)."""

import warnings

from simbackend._extras import require_extra

require_extra("mujoco", purpose="the SAPIEN engine (it builds its scenes from MuJoCo's compiled model)")

with warnings.catch_warnings():
    # SAPIEN looks for a Vulkan loader at import for its renderer, which this backend never uses
    warnings.filterwarnings("ignore", message="Failed to find system libvulkan")
    require_extra("sapien", purpose="the SAPIEN engine")

from .backend import SapienEngine  # noqa: E402

__all__ = ["SapienEngine"]
