"""mp4 and PNG output of rendered frames (``backend.render()``, :mod:`simbackend.playback.render`).

``write_video`` encodes H.264 (``libx264``, ``yuv420p``, the pixel format every
player reads) with the ffmpeg binary bundled by ``imageio-ffmpeg``, so no system
ffmpeg is needed. ``yuv420p`` needs even sizes: a frame of odd width or height is
padded by one column/row repeating its last one. Frames are ``(H, W, 3)`` uint8
RGB, numpy arrays or torch tensors (any device), from any iterable, so a
generator streams a long rollout without holding it in memory.

Imports no engine.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from simbackend import checks
from simbackend.errors import ArgumentTypeError, InputDTypeError, InputShapeError, InvalidArgumentError

__all__ = ["VideoWriter", "write_video", "write_png"]


def _check_path(path: Any, suffix: str) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise ArgumentTypeError(f"path: expected a file path (str or os.PathLike), got {type(path).__name__}")
    p = Path(path)
    if p.suffix.lower() != suffix:
        raise InvalidArgumentError(f"path: expected a file name ending in {suffix}, got {str(p)!r}")
    if p.is_dir():
        raise InvalidArgumentError(f"path: {str(p)!r} is a folder")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise InvalidArgumentError(f"path: folder {str(parent)!r} does not exist")
    return p


def _frame(frame: Any, argument: str, channels: tuple[int, ...] = (3,)) -> np.ndarray:
    """``frame`` as a C-contiguous ``(H, W, C)`` uint8 numpy array."""
    try:
        import torch  # noqa: PLC0415 - frames may be tensors; torch is a dependency
    except ImportError:  # pragma: no cover
        torch = None
    if torch is not None and isinstance(frame, torch.Tensor):
        if frame.dtype != torch.uint8:
            raise InputDTypeError(f"{argument}: expected uint8 values, got {frame.dtype}")
        a = frame.detach().cpu().numpy()
    elif isinstance(frame, np.ndarray):
        if frame.dtype != np.uint8:
            raise InputDTypeError(f"{argument}: expected uint8 values, got {frame.dtype}")
        a = frame
    else:
        raise ArgumentTypeError(
            f"{argument}: expected an (H, W, 3) uint8 numpy array or torch tensor, got {type(frame).__name__}"
        )
    want = "(H, W, 3)" if channels == (3,) else "(H, W), (H, W, 1) or (H, W, 3)"
    if a.ndim == 2 and 1 in channels:
        a = a[..., None]
    if a.ndim != 3 or a.shape[2] not in channels or a.shape[0] < 1 or a.shape[1] < 1:
        raise InputShapeError(argument, want, a.shape)
    return np.ascontiguousarray(a)


def _even(a: np.ndarray) -> np.ndarray:
    """Pad an odd height or width by repeating the last row/column (yuv420p needs even sizes)."""
    h, w = a.shape[:2]
    if h % 2 == 0 and w % 2 == 0:
        return a
    return np.pad(a, ((0, h % 2), (0, w % 2), (0, 0)), mode="edge")


class VideoWriter:
    """An mp4 written frame by frame (:meth:`append`): for loops that produce frames as they go
    (a rollout, a replay), so no frame is kept. A context manager; :func:`write_video` is the
    iterable form.

    Args:
        path: the ``.mp4`` file to write (its folder must exist; an existing file is replaced).
        fps: frames per second, > 0.
        progress: show a ``rich`` progress bar on stderr.
        total: the number of frames expected, for the progress bar (or ``None``).

    The file is created with the first frame. On an exception inside the ``with`` block, or a bad
    frame, the partly written file is removed; closing a writer that got no frame writes nothing.
    """

    def __init__(self, path: Any, fps: float = 30.0, progress: bool = True, total: int | None = None):
        self.path = _check_path(path, ".mp4")
        fps = checks.real(fps, "fps", minimum=0.0, above=True)
        total = checks.integer(total, "total", minimum=0, allow_none=True)
        self.fps, self.count = fps, 0
        self._writer: Any = None
        self._shape: tuple[int, ...] | None = None
        self._bar = _progress(self.path, total) if progress else None
        if self._bar is not None:
            self._bar[0].start()

    def append(self, frame: Any) -> None:
        """Add one ``(H, W, 3)`` uint8 RGB frame (numpy or torch on any device) of the first frame's size."""
        try:
            a = _frame(frame, f"frames[{self.count}]")
            if self._shape is None:
                from simbackend._extras import require_extra  # noqa: PLC0415

                require_extra("imageio", "imageio_ffmpeg", purpose="videos")
                import imageio  # noqa: PLC0415 - only when writing

                self._shape = a.shape
                self._writer = imageio.get_writer(
                    str(self.path),
                    format="FFMPEG",
                    mode="I",
                    fps=self.fps,
                    codec="libx264",
                    pixelformat="yuv420p",
                    macro_block_size=1,
                    ffmpeg_log_level="error",
                )
            elif a.shape != self._shape:
                raise InputShapeError(f"frames[{self.count}]", self._shape, a.shape)
            self._writer.append_data(_even(a))
        except BaseException:
            self.abort()
            raise
        self.count += 1
        if self._bar is not None:
            self._bar[0].advance(self._bar[1])

    def close(self) -> int:
        """Finish the file; returns the frames written. Idempotent."""
        if self._bar is not None:
            self._bar[0].stop()
            self._bar = None
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.close()
        return self.count

    def abort(self) -> None:
        """Stop and remove the partly written file."""
        writer, self._writer = self._writer, None
        try:
            if writer is not None:
                writer.close()
        finally:
            if writer is not None:
                self.path.unlink(missing_ok=True)
            if self._bar is not None:
                self._bar[0].stop()
                self._bar = None

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is not None:
            self.abort()
        else:
            self.close()


def write_video(
    path: Any, frames: Iterable[Any], fps: float = 30.0, progress: bool = True, total: int | None = None
) -> int:
    """Encode ``frames`` as an H.264 mp4 at ``path``; returns the number of frames written.

    Args:
        path: the ``.mp4`` file to write (its folder must exist; an existing file is replaced).
        frames: an iterable of ``(H, W, 3)`` uint8 RGB frames (numpy arrays or torch
            tensors on any device), all of the same size; consumed once.
        fps: frames per second, > 0.
        progress: show a ``rich`` progress bar on stderr.
        total: the number of frames, for the progress bar, where ``frames`` has no ``len()``.

    Raises:
        InvalidArgumentError: a bad path (wrong suffix, missing folder), ``fps`` or
            ``total``, or no frames at all (nothing is written).
        ArgumentTypeError, InputDTypeError, InputShapeError: a frame that is not an
            ``(H, W, 3)`` uint8 array, or whose size differs from the first frame's,
            naming it (``frames[i]``); the partly written file is removed.
    """
    _check_path(path, ".mp4")
    if isinstance(frames, (str, bytes)) or not hasattr(frames, "__iter__"):
        raise ArgumentTypeError(f"frames: expected an iterable of (H, W, 3) uint8 frames, got {type(frames).__name__}")
    if total is None and hasattr(frames, "__len__"):
        total = len(frames)  # type: ignore[arg-type]
    if hasattr(frames, "shape") and len(frames.shape) != 4:  # one array/tensor of frames
        raise InputShapeError("frames", "(T, H, W, 3) or an iterable of (H, W, 3) frames", tuple(frames.shape))
    with VideoWriter(path, fps, progress, total) as writer:
        for frame in frames:
            writer.append(frame)
        if not writer.count:
            raise InvalidArgumentError("frames: no frames to write; nothing was written")
    return writer.count


def _progress(path: Path, total: int | None) -> tuple[Any, Any]:
    from rich.console import Console  # noqa: PLC0415
    from rich.markup import escape  # noqa: PLC0415
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: PLC0415

    bar = Progress(
        TextColumn("[bold]writing[/bold] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=False,
    )
    task = bar.add_task(escape(path.name), total=total)  # the column is markup: a name's [..] kept
    return bar, task


def write_png(path: Any, frame: Any) -> Path:
    """Write one image as PNG; returns the path.

    Args:
        path: the ``.png`` file (its folder must exist; an existing file is replaced).
        frame: ``(H, W, 3)`` uint8 RGB, or ``(H, W)`` / ``(H, W, 1)`` uint8 grey, a numpy
            array or a torch tensor on any device.

    Raises:
        InvalidArgumentError: a bad path; ArgumentTypeError / InputDTypeError /
        InputShapeError: a bad ``frame``.
    """
    p = _check_path(path, ".png")
    a = _frame(frame, "frame", channels=(1, 3))
    from simbackend._extras import require_extra  # noqa: PLC0415

    require_extra("imageio", purpose="PNG stills")
    import imageio.v3 as iio  # noqa: PLC0415

    iio.imwrite(str(p), a[..., 0] if a.shape[2] == 1 else a, extension=".png")
    return p
