"""Importing warp and MuJoCo Warp the one way this backend does: quiet, with a known kernel cache.

MuJoCo Warp compiles its kernels for each model the first time it is built
(about 15 to 40 s on a CPU; then loaded from warp's kernel cache in about a
second). The cache is warp's own (``~/.cache/warp/<version>`` by default);
``SIMBACKEND_WARP_CACHE`` names another folder (for CI, or a shared cache),
set before the first import.
"""

from __future__ import annotations

import os
from typing import Any

from simbackend._extras import require_extra

#: environment variable naming the kernel cache folder
CACHE_ENV = "SIMBACKEND_WARP_CACHE"


def import_warp() -> tuple[Any, Any]:
    """``(warp, mujoco_warp)``, imported and configured (``MissingExtraError`` names the extra)."""
    require_extra("warp", "mujoco_warp", purpose="the MuJoCo Warp engine")
    import warp as wp

    if not getattr(wp, "_simbackend_configured", False):
        wp.config.log_level = 30  # warnings and up (logging.WARNING): no line per kernel module loaded
        cache = os.environ.get(CACHE_ENV)
        if cache:
            wp.config.kernel_cache_dir = cache
        wp.init()
        wp._simbackend_configured = True  # type: ignore[attr-defined]
    import mujoco_warp as mjw

    return wp, mjw
