"""``simbackend record`` and ``simbackend play``: recordings, replays and videos from the command line.

Registered on the application (:mod:`simbackend.cli.common`) when :mod:`simbackend.cli.main` is
imported; nothing here loads torch or an engine before a command runs.
"""

from __future__ import annotations

import math
import time
from typing import Any

import typer
from rich.text import Text

from .common import (
    BuildFlags,
    PictureFlags,
    RandomControls,
    app,
    check_model,
    check_output,
    check_sim,
    console,
    err_console,
    fail,
    load_plan,
    overwrite_option,
    sim_option,
    staged_outputs,
    start_plan,
    with_build_flags,
    with_picture_flags,
)


def _parse_envs(text: str | None, flag: str = "--envs") -> list[int] | None:
    """``"0,1,2"`` or ``"0-3"`` (or a mix) as ints; None for None; exit 2 when malformed."""
    if text is None:
        return None
    out: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part[1:]:
                lo, hi = part.split("-", 1) if not part.startswith("-") else (part, "")
                out.extend(range(int(lo), int(hi) + 1))
            else:
                out.append(int(part))
    except ValueError:
        raise fail(f"{flag}: expected env ids like 0,1,2 or 0-3, got {text!r}", code=2) from None
    if not out or len(set(out)) != len(out) or min(out) < 0:
        raise fail(f"{flag}: expected distinct non-negative env ids, got {text!r}", code=2)
    return out


@app.command()
@with_build_flags
def record(
    sim: str = sim_option(),
    model: str = typer.Option(..., "--model", "-m", help="Built-in model name or path to an MJCF/URDF file."),
    out: str = typer.Option(..., "--out", metavar="RUN.h5", help="The recording to write (.h5 or .hdf5)."),
    steps: int = typer.Option(200, "--steps", "-s", min=1, help="Number of step() calls."),
    num_envs: int = typer.Option(4, "--num-envs", "-n", min=1, help="Number of parallel envs N."),
    nsteps: int = typer.Option(1, "--nsteps", "-k", min=1, help="Physics substeps per step() call."),
    envs: str | None = typer.Option(
        None, "--envs", metavar="IDS", help="Envs to record, e.g. 0,1,2 or 0-3 (default: all)."
    ),
    ctrl: str = typer.Option("random", "--ctrl", help="Controls: 'random' (uniform in each ctrl range) or 'zero'."),
    keyframe: str | None = typer.Option(
        None, "--keyframe", metavar="NAME", help="Start every env from this keyframe of the model (default: qpos0)."
    ),
    dr_path: str | None = typer.Option(
        None,
        "--dr",
        metavar="PLAN.json",
        help="Domain-randomization plan (init and reset terms before the run, interval terms on their schedule);"
        " the recording stores it and every env's randomized parameters.",
    ),
    seed: int = typer.Option(0, "--seed", min=0, max=2**63 - 1, help="Seed of the backend and of the random controls."),
    overwrite: bool = overwrite_option(),
    *,
    build: BuildFlags,
) -> None:
    """Run a backend with random (or zero) controls and record chosen envs to an HDF5 file.

    The file holds the model, every recorded row (time, qpos, qvel, ctrl, diverged) and each env's complete
    state at every reset and randomization; `simbackend play` replays it on any backend. An existing --out is
    refused without --overwrite; the file is written under a temporary name and moved into place at the end.
    """
    from simbackend.errors import SimBackendError
    from simbackend.playback.recording import SUFFIXES, Recorder
    from simbackend.registry import make_backend

    if ctrl not in ("random", "zero"):
        raise fail(f"--ctrl: expected 'random' or 'zero', got {ctrl!r}", code=2)
    check_output(out, "--out", SUFFIXES, overwrite)
    ids = _parse_envs(envs)
    if ids is not None and max(ids) >= num_envs:
        raise fail(f"--envs: env {max(ids)} is not among the {num_envs} envs (--num-envs)", code=2)
    compiled = check_model(model, build)
    if keyframe is not None and keyframe not in (names := [compiled.key(i).name for i in range(compiled.nkey)]):
        from simbackend.errors import UnknownNameError

        raise fail(f"--keyframe: {UnknownNameError('keyframe', keyframe, names)}", code=2)
    plan = load_plan(dr_path, num_envs)
    try:
        backend = make_backend(sim, model, num_envs, device=build.device, seed=seed, **build.options)
    except (SimBackendError, ValueError, TypeError, RuntimeError) as e:
        raise fail(f"could not build backend {sim!r} for model {model!r}: {e}") from None
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    with backend, staged_outputs(out) as (staged_out,):
        if keyframe is not None:
            try:
                backend.set_state(None, backend.get_keyframe_qpos(keyframe).expand(num_envs, -1))
            except SimBackendError as e:
                raise fail(f"--keyframe: {e}", code=2) from None
        scheduler, _ = start_plan(backend, plan, dr_path)
        controls = RandomControls(backend, seed, zero=ctrl == "zero")
        diverged = 0
        t0 = time.perf_counter()
        with (
            Recorder(
                backend,
                staged_out,
                env_ids=ids,
                plan=plan,
                metadata={"command": "record", "model": model, "ctrl": ctrl, "seed": seed},
            ) as rec,
            Progress(
                TextColumn("recording"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=err_console,
                transient=True,
            ) as progress,
        ):
            task = progress.add_task("record", total=steps)
            for _ in range(steps):
                info = backend.step(controls(), nsteps=nsteps)
                diverged += int(info["diverged"].sum())
                if scheduler is not None:
                    scheduler.advance(backend, nsteps * backend.physics_dt)
                progress.advance(task)
        wall = time.perf_counter() - t0
    console.print(
        Text(
            f"{sim} | {model} | recorded envs {rec.env_ids.tolist()} | {rec.rows_written} rows"
            f" ({steps} steps x {nsteps} substeps) in {wall:.2f} s | diverged env-steps {diverged}"
        )
    )
    console.print(Text(f"recording written to {out}"))


@app.command()
@with_picture_flags
def play(
    recording: str = typer.Argument(
        ..., metavar="RUN.h5", help="A recording made by `simbackend record` or a Recorder."
    ),
    out: str | None = typer.Option(None, "--out", metavar="VIDEO.mp4", help="The video to write."),
    sim: str | None = typer.Option(
        None,
        "--sim",
        metavar="NAME",
        help="Backend to replay on (default: the recording's; any registered backend builds the recorded model).",
    ),
    envs: str | None = typer.Option(
        None, "--envs", metavar="IDS", help="Recorded envs to show, e.g. 0,1,2,3 (default: all recorded)."
    ),
    tile: bool = typer.Option(
        True, "--tile/--first", help="All shown envs in one scene at grid offsets (default), or the first one only."
    ),
    every: int = typer.Option(1, "--every", min=1, help="Show every this many rows."),
    fps: int = typer.Option(30, "--fps", min=1, help="Frames per second."),
    png: str | None = typer.Option(None, "--png", metavar="STILL.png", help="Also write the last frame as a PNG."),
    dynamic: bool = typer.Option(
        False,
        "--dynamic",
        help="Dynamic replay on --sim: apply the recorded controls and"
        " report where that engine parts from the recording (exit 1 if it does); the"
        " video then shows the replay.",
    ),
    tolerance: float = typer.Option(1e-3, "--tolerance", min=0.0, help="Dynamic replay: qpos tolerance (m, rad)."),
    overwrite: bool = overwrite_option(),
    *,
    picture: PictureFlags,
) -> None:
    """Replay a recording on any backend: kinematically into a video, or dynamically with a divergence report."""
    from simbackend.errors import SimBackendError
    from simbackend.playback.recording import Recording
    from simbackend.playback.replay import kinematic_replay
    from simbackend.playback.video import VideoWriter, write_png

    try:
        sim = check_sim(sim)
    except typer.BadParameter as e:
        raise fail(f"--sim: {e}", code=2) from None
    if not (math.isfinite(tolerance) and tolerance > 0):  # min=0.0 lets 0 and inf (passes any error) in
        raise fail(f"--tolerance: expected a finite number > 0 (m, rad), got {tolerance:g}", code=2)
    if out is None and png is None and not dynamic:
        raise fail("nothing to do: give --out VIDEO.mp4, --png STILL.png or --dynamic", code=2)
    if out is not None:
        check_output(out, "--out", (".mp4",), overwrite)
    if png is not None:
        check_output(png, "--png", (".png",), overwrite)
    ids = _parse_envs(envs)
    try:
        rec = Recording(recording)
    except SimBackendError as e:
        raise fail(str(e), code=2) from None
    with rec:
        try:
            shown = rec.env_ids[rec.env_positions(ids)].tolist()
            backend = rec.make_backend(sim, num_envs=len(shown))
            picture.check(backend)
        except SimBackendError as e:
            raise fail(str(e), code=2) from None
        with backend, staged_outputs(out, png) as (out_tmp, png_tmp):
            frames = Picture(backend, list(range(len(shown))) if tile else [0], picture)
            stepped = int((rec.nsteps > 0).sum())
            writer = None
            if out is not None:
                writer = VideoWriter(out_tmp, fps=fps, total=(stepped if dynamic else len(rec)) // every)
            console.print(
                Text(
                    f"{rec.backend} recording: {len(rec)} rows ({stepped} steps), envs {shown};"
                    f" {'dynamic' if dynamic else 'kinematic'} replay on {backend.name}"
                )
            )
            try:
                if dynamic:
                    report = _dynamic(rec, backend, shown, tolerance, writer, frames, every)
                    console.print(Text(report.summary()))
                elif writer is not None:
                    for _ in kinematic_replay(rec, backend, shown, every=every):
                        writer.append(frames())
            except BaseException:
                if writer is not None:
                    writer.abort()
                raise
            if writer is not None:
                console.print(Text(f"{writer.close()} frames written to {out}"))
            if png is not None:
                if frames.last is None:  # nothing drawn yet: the last recorded state
                    for _ in kinematic_replay(rec, backend, shown, rows=slice(len(rec) - 1, None)):
                        frames()
                write_png(png_tmp, frames.last)
                console.print(Text(f"still written to {png}"))
            parted = dynamic and report.parted
        if parted:  # once the video and still are in place
            raise typer.Exit(1)


class Picture:
    """Draws the shown envs of a replaying backend (tiled, or the first alone); keeps the last frame."""

    def __init__(self, backend: Any, envs: list[int], flags: PictureFlags):
        self.backend, self.envs, self.flags = backend, envs, flags
        self.last: Any = None

    def __call__(self) -> Any:
        self.last = self.flags.render(self.backend, self.envs)
        return self.last


def _dynamic(
    rec: Any, backend: Any, shown: list[int], tolerance: float, writer: Any, picture: Picture, every: int
) -> Any:
    """Dynamic replay with a progress bar, a frame every ``every`` stepped rows to ``writer`` (if any)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from simbackend.playback.replay import dynamic_replay

    class Capture:
        count = 0

        def on_step(self, sim: Any, nsteps: int, info: dict) -> None:
            if writer is not None and self.count % every == 0:
                writer.append(picture())
            self.count += 1

        def on_write(self, *args: Any) -> None:
            pass

    capture = Capture()
    backend.add_observer(capture)
    try:
        with Progress(
            TextColumn("replaying"), BarColumn(), MofNCompleteColumn(), console=err_console, transient=True
        ) as progress:
            task = progress.add_task("replay", total=int((rec.nsteps > 0).sum()))
            return dynamic_replay(
                rec,
                backend,
                shown,
                qpos_tolerance=tolerance,
                progress=lambda done, total: progress.update(task, completed=done),
            )
    finally:
        backend.remove_observer(capture)
