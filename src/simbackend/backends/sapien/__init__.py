"""SAPIEN 3 / PhysX 5 backend (CPU PhysX everywhere, GPU PhysX where CUDA is)."""

import warnings

with warnings.catch_warnings():
    # SAPIEN looks for a Vulkan loader at import for its renderer, which this backend never uses
    warnings.filterwarnings("ignore", message="Failed to find system libvulkan")
    import sapien  # noqa: F401

from .backend import SapienBackend  # noqa: E402

__all__ = ["SapienBackend"]
