"""The OpenGL context MuJoCo renders with, chosen so that a machine without a display works.

Importing this module (the first thing :mod:`simbackend.playback.render` does)
sets ``MUJOCO_GL=egl`` when ``MUJOCO_GL`` is unset, no display is reachable
(``DISPLAY`` and ``WAYLAND_DISPLAY`` unset) and mujoco is not imported yet.
:func:`gl_context_class` then picks MuJoCo's context class for the platform
mujoco chose, standing in MuJoCo's EGL context for GLFW where GLFW was chosen
only because ``MUJOCO_GL`` was unset, and raises
:class:`~simbackend.errors.RenderingError` with what to do where nothing works.
"""

from __future__ import annotations

import os
import sys
from typing import Any


def _prefer_headless_gl() -> None:
    """Choose EGL for MuJoCo when nothing else was chosen and no display exists (before mujoco loads)."""
    if "mujoco" in sys.modules or os.environ.get("MUJOCO_GL"):
        return
    if os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"):
        return
    os.environ["MUJOCO_GL"] = "egl"


_prefer_headless_gl()

import mujoco  # noqa: E402  (after the GL platform is chosen)

from simbackend.errors import RenderingError  # noqa: E402

__all__ = ["gl_context_class", "gl_unavailable_reason", "mujoco_gl_at_import"]

#: ``MUJOCO_GL`` values that mean "nothing chosen" (mujoco then tries GLFW)
_DEFAULT_GL = ("", "enable", "enabled", "on", "true", "1")


def _has_display() -> bool:
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def mujoco_gl_at_import() -> str:
    """The ``MUJOCO_GL`` value mujoco chose its GL platform with (read when mujoco was imported)."""
    module = sys.modules.get("mujoco.rendering.classic.gl_context")
    value = getattr(module, "_MUJOCO_GL", None)
    if not isinstance(value, str):
        value = os.environ.get("MUJOCO_GL", "")
    return value.lower().strip()


_GL_CLASS: Any = None


def gl_context_class() -> Any:
    """The class of OpenGL context the renderer creates (MuJoCo's ``GLContext`` for its GL platform).

    Raises:
        RenderingError: mujoco was imported with a GL platform that cannot work
            here (GLFW without a display, rendering disabled) and MuJoCo's EGL
            context cannot stand in for it.
    """
    global _GL_CLASS
    if _GL_CLASS is not None:
        return _GL_CLASS
    cls = getattr(mujoco, "GLContext", None)
    module = getattr(cls, "__module__", "") or ""
    chosen = mujoco_gl_at_import()
    if cls is not None and (not module.startswith("mujoco.glfw") or _has_display()):
        _GL_CLASS = cls
        return cls
    if chosen in _DEFAULT_GL:
        # MuJoCo picked GLFW only because MUJOCO_GL was unset: its EGL context needs no display
        try:
            from mujoco.egl import GLContext as egl_context  # noqa: PLC0415
        except Exception:  # noqa: BLE001 - any failure: no EGL here; explained below
            egl_context = None
        if egl_context is not None:
            _GL_CLASS = egl_context
            return egl_context
    shown = f"MUJOCO_GL={chosen!r}" if chosen else "MUJOCO_GL unset"
    why = (
        "which needs a display (DISPLAY and WAYLAND_DISPLAY are unset)"
        if cls is not None
        else "which gives no OpenGL context"
    )
    raise RenderingError(
        f"rendering: mujoco was imported with {shown}, {why}; set MUJOCO_GL=egl in the"
        " environment before importing mujoco or simbackend"
    )


def gl_unavailable_reason() -> str | None:
    """``None`` where a GL context class is available, else the one-line reason (no context is created)."""
    try:
        gl_context_class()
    except RenderingError as e:
        return str(e)
    return None


def context_failure_hint(cls: Any) -> str:
    """What to do when creating a context of class ``cls`` failed (one clause of a message)."""
    if "egl" in (getattr(cls, "__module__", "") or "") or mujoco_gl_at_import() == "egl":
        return "EGL is not usable here: install an EGL driver (Mesa's libegl1, or the GPU's)"
    return "on a machine without a display set MUJOCO_GL=egl before importing mujoco or simbackend"
