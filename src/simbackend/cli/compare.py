"""``simbackend compare ROBOT --sims mujoco,sapien``: where engines part on one robot
(:mod:`simbackend.robots.compare`).

Registered on the application (:mod:`simbackend.cli.common`) when :mod:`simbackend.cli.main` is
imported; nothing here loads torch or an engine before the command runs.
"""

from __future__ import annotations

import math
import os
from typing import Any

import typer
from rich.text import Text

from .common import (
    app,
    check_output_folder,
    check_paths_apart,
    check_sim,
    check_writable,
    console,
    err_console,
    fail,
    load_plan,
    overwrite_option,
    staged_folder,
    staged_outputs,
)
from .layout import columns, show

#: the arguments of simbackend.robots.compare.compare that are flags of the same name
COMPARE_FLAGS = (
    "seconds", "amplitude", "step_seconds", "gait_seconds", "frequency", "lift", "push_speed", "track_seconds"
)  # fmt: skip


def _number(value: float, unit: str) -> str:
    if not math.isfinite(value):
        return "-"
    if unit == "m":
        return f"{value:.4f}"
    if unit.startswith("of ") and unit[3:].isdigit():  # a count: falls of the envs
        return f"{value:.0f}"
    if unit in ("m g", "of step", "of time", ""):
        return f"{value:.3f}"
    return f"{value:.3f}"


def _engines(text: str) -> list[str]:
    names = [s.strip().lower() for s in text.split(",") if s.strip()]
    for s in names:
        try:
            check_sim(s)
        except typer.BadParameter as e:
            raise fail(f"--sims: {e}", code=2) from None
    names = list(dict.fromkeys(names))
    if len(names) < 2:
        raise fail(f"--sims: name two or more engines, comma-separated (got {text!r})", code=2)
    return names


def _plans(values: list[str], engines: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    plans, paths = {}, {}
    for value in values:
        sim, sep, path = value.partition("=")
        sim = sim.strip().lower()
        if not sep or not path:
            raise fail(f"--plan: expected SIM=PLAN.json, got {value!r}", code=2)
        if sim not in engines:
            raise fail(f"--plan: {sim!r} is not one of --sims ({', '.join(engines)})", code=2)
        plans[sim] = load_plan(path, 1, flag="--plan")
        paths[sim] = path
    return plans, paths


@app.command()
def compare(
    robot: str = typer.Argument(..., metavar="ROBOT", help="A robot name or JSON description file."),
    sims: str = typer.Option(
        "mujoco,sapien",
        "--sims",
        help="Engines, comma-separated; the first is the reference the others are taken against.",
    ),
    seconds: float = typer.Option(1.0, "--seconds", help="How long the robot stands before the experiments (s)."),
    amplitude: float = typer.Option(0.3, "--amplitude", help="Each joint's target step, and the gait's widest (rad)."),
    step_seconds: float = typer.Option(0.5, "--step-seconds", help="How long each step response is read (s)."),
    gait_seconds: float = typer.Option(2.0, "--gait-seconds", help="How long the gait and the push run (s)."),
    frequency: float = typer.Option(2.0, "--frequency", help="The gait's steps per second (Hz)."),
    lift: float = typer.Option(0.25, "--lift", help="The gait's foot lift, a fraction of the default base height."),
    push_speed: float = typer.Option(0.5, "--push-speed", help="The push's sideways speed change (m/s)."),
    joints: list[str] | None = typer.Option(
        None, "--joint", help="Read the step response of this policy joint only (repeatable; default: every one)."
    ),
    checkpoint: str | None = typer.Option(
        None,
        "--checkpoint",
        metavar="CKPT.pt",
        help="Replay, open loop, this policy's joint targets from its own rollout on the first engine instead of"
        " the scripted gait, and run it closed loop on each engine holding fixed commands (a velocity-task"
        " checkpoint of ROBOT).",
    ),
    track_seconds: float = typer.Option(
        4.0, "--track-seconds", help="With --checkpoint: how long the policy holds each command (s)."
    ),
    plan: list[str] | None = typer.Option(
        None, "--plan", metavar="SIM=PLAN.json", help="Apply this plan's init terms on that engine (repeatable)."
    ),
    json_out: str | None = typer.Option(None, "--json", metavar="OUT.json", help="Write the report as JSON."),
    out: str | None = typer.Option(None, "--out", metavar="DIR", help="Write the pictures (PNG) into this folder."),
    overwrite: bool = overwrite_option(),
) -> None:
    """Drive ROBOT through the same experiments on two or more engines and report where they part.

    From the same default state on every engine: the settled pose and each foot's load; each policy joint's
    servo step response (final error, overshoot, rise time, time at the effort limit); each foot's contact
    under the same scripted stepping gait (or, with ``--checkpoint``, a policy's own rollout on the first engine
    replayed open loop, and the policy tracking fixed commands closed loop on each engine: its velocity and
    falls); each foot's slip under the same sideways push. A table of the
    figures per engine, then one line per figure on which an engine parts from the first by more than its
    tolerance (docs/sim-to-sim.md). Exit code 2: bad input (the message names the flag); 1: an engine
    cannot build the robot or is not installed.
    """
    from simbackend.errors import ArgumentTypeError, InvalidArgumentError, SimBackendError
    from simbackend.robots import check_robot, get_robot

    engines = _engines(sims)
    given = {"seconds": seconds, "amplitude": amplitude, "step_seconds": step_seconds, "gait_seconds": gait_seconds,
             "frequency": frequency, "lift": lift, "push_speed": push_speed, "track_seconds": track_seconds}  # fmt: skip
    if json_out:
        check_writable(json_out, "--json", overwrite)
    if out:
        check_output_folder(out, "--out", overwrite)
        from simbackend._extras import require_extra
        from simbackend.errors import MissingExtraError

        try:
            require_extra("matplotlib", purpose="--out's pictures")
        except MissingExtraError as e:
            raise fail(f"--out: {e}", code=2) from None
    check_paths_apart([("--json", json_out), ("--out", out)], [("--checkpoint", checkpoint)], folders=("--out",))
    if checkpoint is not None and not os.path.isfile(checkpoint):
        raise fail(f"--checkpoint: {checkpoint} is not a file", code=2)
    plans, plan_paths = _plans(plan or [], engines)
    try:
        desc = get_robot(robot)
        check_robot(desc)
    except (InvalidArgumentError, ArgumentTypeError) as e:
        raise fail(str(e), code=2) from None
    except SimBackendError as e:
        raise fail(str(e)) from None
    from simbackend.robots.compare import compare as run_compare
    from simbackend.robots.compare import write_pictures

    try:
        report = run_compare(desc, engines, joints=joints or None, plans=plans, checkpoint=checkpoint, **given)
    except (InvalidArgumentError, ArgumentTypeError) as e:
        text = str(e)
        name, sep, rest = text.partition(":")
        if sep and name in (*COMPARE_FLAGS, "joints", "checkpoint"):
            flag = {"joints": "--joint"}.get(name, "--" + name.replace("_", "-"))
            text = f"{flag}:{rest}"
        raise fail(text, code=2) from None
    _print(report, plan_paths)
    with staged_outputs(json_out) as (json_tmp,):
        if json_tmp:
            import json

            data = report.to_dict()
            data["settings"]["plans"] = plan_paths
            with open(json_tmp, "w") as f:
                json.dump(data, f, indent=2, allow_nan=True)
                f.write("\n")
        if out:
            with staged_folder(out) as folder:
                written = write_pictures(report, folder)
            console.print(Text(f"pictures: {', '.join(p.name for p in written.values())} in {out}"), soft_wrap=True)
    if json_out:
        console.print(Text(f"report: {json_out}"), soft_wrap=True)
    if report.refused or report.skipped or len(report.results) < 2:
        raise typer.Exit(1)


def _print(report: Any, plan_paths: dict[str, str]) -> None:
    engines = [r.engine for r in report.results]
    rows = []
    for name, values, unit in report.rows():
        ref = values[0]
        cells = [_number(v, unit) for v in values]
        diff = [v - ref for v in values[1:]]
        spread = max((abs(d) for d in diff if math.isfinite(d)), default=float("nan"))
        rows.append((name, *cells, _number(spread, unit), unit))
    plans = "; ".join(f"{s}: {p}" for s, p in plan_paths.items())
    heading = f"Compare: {report.robot!r} on {', '.join(engines)} (reference {engines[0] if engines else '-'})"
    if plans:
        heading += f", plans {plans}"
    show(
        console,
        heading,
        ("figure", *engines, "|diff|", "unit"),
        rows,
        wrap=(0,),
        right=tuple(range(1, len(engines) + 2)),
        plain=lambda: columns(console, ("figure", *engines, "|diff|", "unit"), rows,
                              right=(False, *([True] * (len(engines) + 1)), False)),
    )  # fmt: skip
    for engine, why in {**report.skipped, **report.refused}.items():
        err_console.print(
            Text("warning: ", style="bold yellow") + Text(f"{engine}: not compared: {why}"), soft_wrap=True
        )
    parts = report.parts()
    if parts:
        console.print(Text("Where they part:", style="bold"), soft_wrap=True)
        for line in parts:
            console.print(Text(f"  {line}"), soft_wrap=True)
    elif len(report.results) > 1:
        console.print(Text("No figure parts from the reference by more than its tolerance.", style="green"))
