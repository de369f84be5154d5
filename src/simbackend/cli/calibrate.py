"""``simbackend excite`` and ``simbackend calibrate``: references worth fitting to, and the fit.

Registered on the application (:mod:`simbackend.cli.common`) when :mod:`simbackend.cli.main` is
imported; nothing here loads torch or an engine before a command runs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import typer
from rich.text import Text

from .common import (
    app,
    check_output,
    check_output_folder,
    check_paths_apart,
    console,
    err_console,
    fail,
    load_plan,
    overwrite_option,
    sim_option,
    staged_folder,
    staged_outputs,
)
from .layout import columns, show


def _progress(label: str) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        console=err_console,
        transient=False,
        disable=not err_console.is_terminal,  # a bar is for a terminal: nothing in a pipe or a file
    )


#: the arguments of simbackend.calibration.excite and calibrate that are flags of the same name
EXCITE_FLAGS = ("seconds", "episode_s", "amplitude", "f0", "f1", "control_dt", "num_envs", "signal", "seed")
CALIBRATE_FLAGS = ("window", "popsize", "generations", "sigma", "max_envs", "weights", "seed")


def _flagged(error: Exception, names: tuple[str, ...]) -> str:
    """The Python API's message with its argument named as the command's flag (``control_dt:`` ->
    ``--control-dt:``) where it is one of ``names``."""
    text = str(error)
    name, sep, rest = text.partition(":")
    base = name.split("[", 1)[0]  # weights['joint_pos']
    return f"--{base.replace('_', '-')}{name[len(base) :]}:{rest}" if sep and base in names else text


def _file_inputs(*values: str | None) -> list[str | None]:
    """Of ``--robot``/``--model`` values, those that name files (the others are registered names)."""
    return [v if v is not None and os.path.isfile(v) else None for v in values]


@app.command()
def excite(
    robot: str | None = typer.Option(
        None, "--robot", "-r", help="Registered robot name or a robot description file (.json)."
    ),
    policy: str | None = typer.Option(
        None, "--policy", metavar="CKPT.pt", help="Instead of a signal: log this checkpoint's episodes (its task)."
    ),
    sim: str = sim_option(),
    out: str = typer.Option(..., "--out", metavar="LOG.npz", help="The log to write (simbackend-log, .npz)."),
    signal: str = typer.Option("chirp", "--signal", help="chirp (a frequency sweep) or steps (random held targets)."),
    seconds: float = typer.Option(10.0, "--seconds", min=0.0, help="Seconds logged per env."),
    episode_s: float = typer.Option(
        5.0, "--episode-s", min=0.0, help="Seconds per episode (each from the default pose)."
    ),
    num_envs: int = typer.Option(4, "--num-envs", "-n", min=1, help="Envs, each an independent excitation."),
    amplitude: float = typer.Option(0.3, "--amplitude", min=0.0, help="rad (or m) around the default pose."),
    f0: float = typer.Option(0.3, "--f0", min=0.0, help="Chirp start frequency, Hz."),
    f1: float = typer.Option(3.0, "--f1", min=0.0, help="Chirp end frequency, Hz."),
    control_dt: float = typer.Option(0.02, "--control-dt", min=0.0, help="Seconds between targets."),
    dr_path: str | None = typer.Option(
        None, "--dr", metavar="PLAN.json", help="A plan whose init terms set the engine's parameters first."
    ),
    seed: int = typer.Option(0, "--seed", min=0, max=2**63 - 1, help="Seed of the phases, steps and backend."),
    overwrite: bool = overwrite_option(),
) -> None:
    """Drive a robot's joints open loop (chirps or steps around its default pose), or play a trained policy
    (--policy), on any engine and log it.

    The log (joints, base, the targets sent) is what `simbackend calibrate --reference` reads, in the format a
    robot's own logger can write (docs/calibration.md).
    """
    from simbackend.calibration import excite as run_excite
    from simbackend.calibration import excite_policy
    from simbackend.errors import SimBackendError

    if (robot is None) == (policy is None):
        raise fail("--robot, --policy: give exactly one (a robot to excite, or a checkpoint to play)", code=2)
    if policy is not None and dr_path is not None:
        raise fail("--dr: a policy plays its task's nominal model; --dr goes with --robot", code=2)
    if policy is not None and not os.path.isfile(policy):
        raise fail(f"--policy: no such file {policy!r}", code=2)
    check_output(out, "--out", (".npz",), overwrite)
    check_paths_apart([("--out", out)], [("--policy", policy), ("--dr", dr_path), ("--robot", _file_inputs(robot)[0])])
    plan = load_plan(dr_path, num_envs)
    with _progress("exciting") as bar, staged_outputs(out) as (staged,):
        task = bar.add_task("excite", total=100, info=f"{robot or policy} on {sim}")
        try:
            if policy is not None:
                summary = excite_policy(
                    policy, sim, staged, seconds=seconds, num_envs=num_envs, seed=seed,
                    progress=lambda f: bar.update(task, completed=round(100 * f)),
                )  # fmt: skip
            else:
                summary = run_excite(
                    robot,
                    sim,
                    staged,
                    signal=signal,
                    seconds=seconds,
                    episode_s=episode_s,
                    num_envs=num_envs,
                    amplitude=amplitude,
                    f0=f0,
                    f1=f1,
                    control_dt=control_dt,
                    seed=seed,
                    plan=plan,
                    progress=lambda f: bar.update(task, completed=round(100 * f)),
                )
        except (SimBackendError, ValueError, TypeError) as e:
            raise fail(_flagged(e, EXCITE_FLAGS), code=2) from None
    console.print(
        Text(
            f"wrote {out}: {summary['rows']} rows, {summary['episodes']} episodes of {robot or policy} on"
            f" {summary['sim']} ({summary['signal']})"
        ),
        soft_wrap=True,
    )


def _weights(text: str | None) -> dict[str, float] | None:
    if not text:
        return None
    out = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            raise fail(
                f"--weights: expected channel=weight pairs like base_pos=0,joint_vel=0.5, got {text!r}", 2
            ) from None
        if not sep:
            raise fail(f"--weights: expected channel=weight pairs like base_pos=0,joint_vel=0.5, got {text!r}", 2)
    return out


def _show_parameters(params: Any, resolved: list[list[str]], source: str) -> None:
    """The parameters a fit searches, their bounds and the elements each one reaches on the model."""
    headers = ("parameter", "term", "bounds", "resolves to")
    rows = []
    for p, names in zip(params.parameters, resolved):
        term = f"{p.term.kind} {p.term.operation}" + (f" ({','.join(p.term.components)})" if p.term.components else "")
        rows.append((p.name, term, f"[{p.low:g}, {p.high:g}]{' log' if p.log else ''}", ", ".join(names)))
    show(console, f"parameters ({source})", headers, rows, wrap=(3,),
         plain=lambda: columns(console, headers[:3], [r[:3] for r in rows], (False, False, False),
                               notes=[f"-> {r[3]}" for r in rows]))  # fmt: skip


@app.command()
def calibrate(
    reference: list[str] = typer.Option(
        ..., "--reference", metavar="FILE", help="Recording (.h5) or log (.npz) to fit to; repeat for more."
    ),
    parameters: str | None = typer.Option(
        None,
        "--params",
        metavar="PARAMS.json",
        help="The parameters and their bounds (docs/calibration.md). Default with a robot: its default set"
        " (feet and floor friction, contact compliance, base mass, servo gain, joint damping and armature).",
    ),
    sim: str = sim_option(),
    robot: str | None = typer.Option(
        None,
        "--robot",
        "-r",
        help="The robot (a name or description file): its scene is the model, its controller sends log targets. Default: the log's robot.",
    ),
    model: str | None = typer.Option(
        None, "--model", "-m", help="Without a robot: the model (default: the first recording's own)."
    ),
    validation: list[str] = typer.Option(
        [], "--validate", metavar="FILE", help="Held-out recording or log, scored before and after; repeat for more."
    ),
    out: str = typer.Option(
        ..., "--out", metavar="PLAN.json", help="The fitted values as a plan of fixed init terms (--dr takes it)."
    ),
    report: str | None = typer.Option(
        None, "--report", metavar="DIR", help="Folder for report.json, loss.png, trajectory.png."
    ),
    training_plan: str | None = typer.Option(
        None,
        "--training-plan",
        metavar="PLAN.json",
        help="Also write a training plan centred on the fit (see --spread).",
    ),
    spread: float = typer.Option(
        0.2, "--spread", min=0.0, max=0.99, help="Half-width of --training-plan's ranges, relative to each value."
    ),
    window: int = typer.Option(25, "--window", min=1, help="Rows per multiple-shooting window."),
    popsize: int = typer.Option(
        16,
        "--popsize",
        min=4,  # simbackend.calibration.fit.MIN_POPSIZE (not imported here: it loads torch)
        help="Candidates per generation (CMA-ES population: 4 at least, two parents).",
    ),
    generations: int = typer.Option(30, "--generations", "-g", min=0, help="CMA-ES generations."),
    sigma: float = typer.Option(0.25, "--sigma", min=0.0, max=1.0, help="CMA-ES initial step in the unit cube."),
    max_envs: int = typer.Option(
        512, "--max-envs", min=1, help="Envs of the backend: each candidate replays max-envs/popsize windows at once."
    ),
    weights: str | None = typer.Option(None, "--weights", metavar="CH=W,...", help="Channel weights (default 1 each)."),
    seed: int = typer.Option(0, "--seed", min=0, max=2**31 - 1, help="CMA-ES seed."),
    overwrite: bool = overwrite_option(),
) -> None:
    """Fit --sim's model parameters (--params, or a robot's default set) so that it reproduces reference
    recordings or logs.

    Every candidate is one group of envs replaying the same commands from the same recorded states, re-anchored
    every --window rows; CMA-ES searches the bounds. Ctrl-C stops after the current generation and keeps the
    best so far. Writes the fitted plan, and with --report the errors before and after (fitted and held-out)
    per channel and two pictures.
    """
    from simbackend.calibration import ParameterSet, load_reference
    from simbackend.calibration import calibrate as run_calibrate
    from simbackend.calibration.report import error_table, write_report
    from simbackend.calibration.robot import robot_parameters
    from simbackend.errors import SimBackendError

    check_output(out, "--out", (".json",), overwrite)
    if training_plan:
        check_output(training_plan, "--training-plan", (".json",), overwrite)
    if report:
        check_output_folder(report, "--report", overwrite)
    robot_file, model_file = _file_inputs(robot, model)
    check_paths_apart(
        [("--out", out), ("--training-plan", training_plan), ("--report", report)],
        [("--reference", f) for f in reference]
        + [("--validate", f) for f in validation]
        + [("--params", parameters), ("--robot", robot_file), ("--model", model_file)],
        folders={"--report"},
    )
    for flag, files in (("--reference", reference), ("--validate", validation)):
        for f in files:
            if not os.path.isfile(f):
                raise fail(f"{flag}: no such file {f!r}", code=2)
    try:
        params = None if parameters is None else ParameterSet.load(parameters)
    except (SimBackendError, ValueError, TypeError) as e:
        raise fail(f"--params: {e}", code=2) from None
    weight_map = _weights(weights)

    robot_name = robot
    if robot_name is None and model is None and reference[0].lower().endswith(".npz"):
        import numpy as np

        with np.load(reference[0], allow_pickle=False) as d:
            robot_name = str(d["robot"]) if "robot" in d else None
        if robot_name is None:
            raise fail("--robot: the log names no robot; give --robot (or --model for a log of actuator controls)", 2)
    if params is None and robot_name is None:
        raise fail("--params: required without a robot (--robot, or a log naming one, has a default set)", 2)

    def make(n: int) -> Any:
        if robot_name is not None:
            from simbackend.robots import make_robot_backend

            return make_robot_backend(robot_name, sim, n)
        from simbackend.registry import make_backend

        if model is not None:
            return make_backend(sim, model, n)
        from simbackend.playback.recording import Recording

        with Recording(reference[0]) as rec:
            return make_backend(sim, rec.model(), n)

    try:
        probe = make(1)
        with probe:
            ref = load_reference(reference, probe.info, probe.physics_dt)
            val = load_reference(validation, probe.info, probe.physics_dt) if validation else None
            try:
                params, resolved = robot_parameters(params, robot_name, probe)
                params.check_backend(probe)  # every bound gives valid values: refused now, not mid-search
            except (SimBackendError, ValueError, TypeError) as e:
                raise fail(f"--params: {e}", code=2) from None
    except (SimBackendError, ValueError, TypeError) as e:
        raise fail(str(e), code=2) from None
    _show_parameters(params, resolved, "the robot's default set" if parameters is None else parameters)

    with _progress("calibrating") as bar:
        task = bar.add_task("fit", total=generations, info="")

        def progress(entry: dict) -> None:
            bar.update(task, completed=entry["generation"], info=f"best {entry['best']:.4g}")

        try:
            result = run_calibrate(
                make,
                ref,
                params,
                validation=val,
                window=window,
                popsize=popsize,
                generations=generations,
                seed=seed,
                sigma=sigma,
                max_envs=max_envs,
                weights=weight_map,
                robot=robot_name,
                progress=progress,
            )
        except (SimBackendError, ValueError, TypeError) as e:
            raise fail(_flagged(e, CALIBRATE_FLAGS), code=2) from None
    if result.interrupted:
        console.print("interrupted: keeping the best values found so far")

    staged_paths = [out, training_plan]
    with staged_outputs(*staged_paths) as (plan_out, train_out):
        assert plan_out is not None
        Path(plan_out).write_text(result.plan(seed=0).to_json(indent=2) + "\n")
        if train_out is not None:
            Path(train_out).write_text(params.training_plan(result.values.tolist(), spread).to_json(indent=2) + "\n")
    if report:
        with staged_folder(report) as folder:
            write_report(result, folder, title=f"{sim} fitted to {Path(reference[0]).name}")

    sens = result.sensitivity or {}
    rows = []
    for p, v in zip(params.parameters, result.values):
        s = sens.get(p.name)
        shown = "the model's" if v != v else f"{v:.4g}"  # NaN: a `set` parameter left as the model has it
        rows.append((p.name, shown, f"[{p.low:g}, {p.high:g}]", f"x{s['down']:.3g} / x{s['up']:.3g}" if s else ""))
    headers = ("parameter", "value", "bounds", "loss at -10 % / +10 %")
    show(console, "fitted parameters", headers, rows, wrap=(0,), right=(1,),
         plain=lambda: columns(console, headers, rows, (False, True, False, False)))  # fmt: skip
    errors = error_table(result)
    error_headers = ("set", "channel", "norm. before", "norm. after", "rms before", "rms after", "units")

    def plain_errors() -> None:  # one block per set: its rows fit 80 columns
        for label in dict.fromkeys(row[0] for row in errors):
            console.print(Text(f"{label}:"), soft_wrap=True)
            rows = [row[1:] for row in errors if row[0] == label]
            columns(console, error_headers[1:], rows, (False, True, True, True, True, False))

    show(console, "errors before and after (normalised: 1 = a model that does not move)", error_headers, errors,
         right=(2, 3, 4, 5), plain=plain_errors)  # fmt: skip
    console.print(
        Text(
            f"{result.evaluations} candidates in {result.seconds:.1f} s; wrote {out}"
            + (f", {training_plan}" if training_plan else "")
            + (f", {os.path.join(report, '')}" if report else "")
        ),
        soft_wrap=True,
    )
