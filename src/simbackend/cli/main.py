"""The ``simbackend`` command line: run a backend, inspect it, check it against the contract.

Commands:

* ``simbackend info``: registered backends, engine and torch versions, devices,
  and the capability table of every backend.
* ``simbackend run --sim NAME --model MODEL ...``: step a batch of envs with
  random actions and report throughput, divergence and a few state values.
* ``simbackend contract --sim NAME [PYTEST_ARGS...]``: run the conformance
  suite shipped in the package against a registered backend.
* ``simbackend parity --sim NAME --model MODEL [--tier T ...] [--json]``:
  compare a backend with the MuJoCo reference, tier by tier.
* ``simbackend models``: the built-in models.
* ``simbackend robots [ROBOT] [--sim NAME ...]``: the registered robots, or what one
  resolves to on each engine (:mod:`simbackend.robots`).
* ``simbackend compare ROBOT --sims mujoco,sapien [--json OUT] [--out DIR]``: the same robot driven
  through the same experiments on several engines, and where they part (:mod:`simbackend.cli.compare`).
* ``simbackend record --sim NAME --model MODEL --out RUN.h5 ...``: run with random
  or zero controls and record chosen envs (:mod:`simbackend.cli.play`).
* ``simbackend play RUN.h5 [--sim NAME] [--dynamic] --out VIDEO.mp4``: replay a
  recording on any backend, into a video or a sim-to-sim divergence report.
* ``simbackend train --task TASK --sim NAME [--num-envs N] [--dr PLAN.json] ...``:
  PPO (rsl-rl) on a task; checkpoints, CSV/JSON log, learning curve
  (:mod:`simbackend.cli.train`).
* ``simbackend eval --checkpoint CKPT.pt [--sim NAME] [--seeds 0,1,2] ...``: a
  checkpoint's deterministic policy on any engine, with 95 % confidence intervals.
* ``simbackend excite --robot R --sim NAME --out LOG.npz`` and ``simbackend calibrate --reference
  LOG.npz --params PARAMS.json --sim NAME --out PLAN.json``: references worth fitting to, and the fit
  of one engine's parameters to them (:mod:`simbackend.cli.calibrate`).

Importing this module (and ``simbackend --help``) loads neither torch nor any
engine: backends are listed from their entry points without being imported,
and everything heavy is imported inside the command that needs it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Any

import typer
from rich.text import Text

import simbackend
from simbackend.registry import available_backends

from .common import (
    CAPABILITY_PROBE_MODEL,
    BuildFlags,
    PictureFlags,
    RandomControls,
    app,
    check_model,
    check_output,
    check_sim,
    check_writable,
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
from .layout import columns, fields, show


# ----------------------------------------------------------------------
# info
# ----------------------------------------------------------------------
def _missing_extra(name: str) -> str | None:
    """The extra that installs backend ``name``'s engine where it is not installed (``""``: an engine
    missing without a named extra), else ``None``."""
    from simbackend import plugins
    from simbackend.errors import MissingExtraError

    try:
        plugins.get_backend_factory(name)
    except MissingExtraError as e:
        return e.extra or ""
    except Exception:  # a backend that fails to load is reported by the capability table
        return None
    return None


def _install_note(missing: dict[str, str]) -> Text:
    """One line: which engines are not installed and the ``pip install`` line that installs them."""
    extras = sorted({extra for extra in missing.values() if extra})
    how = f"; install them with pip install 'simbackend[{','.join(extras)}]'" if extras else ""
    return Text(f"not installed (left out of the capabilities): {', '.join(missing)}{how}", style="yellow")


def _engine_version(name: str) -> str:
    """``"<distribution> <version>, ..."``: the distributions backend ``name``'s engine class declares
    (``Engine.distributions``); for a plugin that declares none, what its distribution requires besides
    simbackend (read from metadata). A backend whose extra is missing reads ``not installed``."""
    import re
    from importlib import metadata

    from simbackend import plugins

    if _missing_extra(name) is not None:
        return "not installed"
    try:
        factory = plugins.get_backend_factory(name)
    except Exception:  # a backend that fails to load is reported by the capability table
        factory = None
    names = [str(d) for d in getattr(factory, "distributions", None) or ()]
    if not names:
        ep = next((e for e in metadata.entry_points(group="simbackend.backends") if e.name.lower() == name), None)
        dist = getattr(ep, "dist", None)
        if dist is not None and dist.name.lower() != "simbackend":  # a plugin's own requirements
            for req in dist.requires or []:
                dep = re.split(r"[\s<>=!~;\[(]", req.strip(), maxsplit=1)[0]
                if "extra ==" not in req and dep and dep.lower() != "simbackend":
                    names.append(dep)
                    break
    versions = []
    for dist_name in names:
        try:
            versions.append(f"{dist_name} {metadata.version(dist_name)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{dist_name} (not installed)")
    return ", ".join(versions) or "-"


def _provider(name: str) -> str:
    """Where backend ``name`` comes from: its entry point and distribution, or a runtime factory."""
    from simbackend import registry

    try:
        return registry.backend_provider(name)
    except Exception:  # listed a moment ago; a concurrent unregister is not worth a crash
        return "?"


def _probe_capabilities(
    name: str, model: str = CAPABILITY_PROBE_MODEL, device: str | None = None, options: dict | None = None
) -> tuple[list[tuple[str, str]] | None, str]:
    """(capability rows, status) of backend ``name`` built on ``model`` with one env; the
    domain-randomization terms come as rows ``dr:<term>`` listing their phases."""
    from simbackend.registry import make_backend

    try:
        sim = make_backend(name, model, 1, device=device, **(options or {}))
    except Exception as e:  # a broken backend is reported, not fatal
        return None, f"failed to load: {type(e).__name__}: {e}"
    try:
        caps = sim.capabilities
        rows = [(k, "by phase in the dr: rows" if k == "domain_randomization" else v) for k, v in caps.as_rows()]
        if "max_envs" not in dict(rows):  # capabilities from before the field: say what they allow
            limit = getattr(caps, "max_envs", None)
            rows.append(("max_envs", "unlimited" if limit is None else str(limit)))
        from simbackend.randomization import PHASES, TERM_KINDS

        dr = sim.get_dr_capabilities() if hasattr(sim, "get_dr_capabilities") else {}
        for term in TERM_KINDS:
            phases = [p for p in PHASES if p in dr.get(term, ())]
            rows.append((f"dr:{term}", ", ".join(phases) if phases else "-"))
        return rows, "ok"
    except Exception as e:
        return None, f"capabilities failed: {type(e).__name__}: {e}"
    finally:
        try:
            sim.close()
        except Exception:
            pass


def _abbreviate(key: str, text: str, limit: int = 8) -> str:
    """A long ``'a, b, ...'`` capability value shortened for the table (``--full`` shows it all)."""
    if key in ("delegated", "known_differences"):  # one line per element, each may hold commas
        items = [] if text == "-" else text.split("; ")
        if len(items) <= 3:
            return text
        return f"{'; '.join(items[:2])}; ... {len(items)} elements in all (--full lists them)"
    items = [] if text == "-" else text.split(", ")
    if len(items) <= limit:
        return text
    if key == "sensor_types":
        from simbackend.capabilities import CORE_SENSOR_TYPES

        missing = sorted(CORE_SENSOR_TYPES - set(items))
        core = f"core missing: {', '.join(missing)}" if missing else f"all {len(CORE_SENSOR_TYPES)} core"
        return f"{core}; {len(items)} in all (--full lists them)"
    return f"{', '.join(items[: limit - 2])}, ... {len(items)} in all (--full lists them)"


@app.command()
@with_build_flags
def info(
    capabilities: bool = typer.Option(
        True, "--capabilities/--no-capabilities", help="Build every backend to read its capability table."
    ),
    full: bool = typer.Option(False, "--full", help="List long capability values (e.g. sensor types) in full."),
    model: str = typer.Option(
        CAPABILITY_PROBE_MODEL,
        "--model",
        "-m",
        help="Model every backend is built on for the capability table (a built-in name or an MJCF/URDF path):"
        " some capabilities depend on it (delegated).",
    ),
    *,
    build: BuildFlags,
) -> None:
    """Registered backends, engine and torch versions, devices, and capabilities.

    The capability table builds every backend on --model (default: the
    pendulum) with the construction flags; max_envs is the largest batch a
    backend takes ("unlimited": only memory limits it); delegated lists the
    model's elements whose physics a backend takes from MuJoCo each substep
    ("-": none); the dr:<term> rows list the phases in which each
    domain-randomization term applies ("-": not on this backend and device).
    A backend that cannot build the model shows why in its status.
    """
    import platform

    check_model(model, build)
    names = available_backends()
    missing = {name: extra for name in names if (extra := _missing_extra(name)) is not None}

    show(
        console,
        "Registered backends",
        ("backend", "engine", "provided by"),
        [(name, _engine_version(name), _provider(name)) for name in names],
        wrap=(1, 2),
    )
    if missing:
        console.print(_install_note(missing), soft_wrap=True)

    import torch

    devices = ["cpu"]
    if torch.cuda.is_available():
        devices += [f"cuda:{i} ({torch.cuda.get_device_name(i)})" for i in range(torch.cuda.device_count())]
    environment = [
        ("simbackend", simbackend.__version__),
        ("python", f"{platform.python_version()} ({sys.executable})"),
        ("torch", torch.__version__),
        ("devices", ", ".join(devices)),
        ("cpu count", str(os.cpu_count())),
    ]
    show(console, "Environment", ("key", "value"), environment, wrap=(1,), show_header=False)

    names = tuple(name for name in names if name not in missing)
    if not capabilities or not names:
        return
    probed = {name: _probe_capabilities(name, model, build.device, build.options) for name in names}
    keys: list[str] = []
    for caps, _ in probed.values():
        for key, _value in caps or ():
            if key not in keys:
                keys.append(key)
    rows: list[list[Text]] = [["status", *(Text(s, style="green" if s == "ok" else "red") for _, s in probed.values())]]
    for key in keys:
        cells = []
        for caps, _ in probed.values():
            text = dict(caps)[key] if caps and key in dict(caps) else "?"
            cells.append(Text(text if full else _abbreviate(key, text)))
        rows.append([key, *cells])
    show(
        console,
        f"Capabilities (probe model: {model})",
        ("capability", *names),
        rows,
        wrap=range(1, len(names) + 1),
        plain=[("backends", [", ".join(names)])] + [(str(row[0]), _grouped(names, row[1:])) for row in rows],
    )


def _grouped(names: tuple[str, ...], cells: list[Text]) -> list[Text]:
    """One capability's values, each once, after the backends that have it (``mujoco, sapien: yes``;
    ``all: yes`` when every backend has the same), for the plain layout."""
    groups: dict[str, list[str]] = {}
    styles: dict[str, Any] = {}
    for name, cell in zip(names, cells, strict=True):
        groups.setdefault(cell.plain, []).append(name)
        styles[cell.plain] = cell.style
    if len(groups) == 1 and len(names) > 1:
        value = next(iter(groups))
        return [Text(f"all: {value}", style=styles[value])]
    return [Text(f"{', '.join(who)}: {value}", style=styles[value]) for value, who in groups.items()]


# ----------------------------------------------------------------------
# models
# ----------------------------------------------------------------------
@app.command()
def models() -> None:
    """List the built-in models (usable as --model NAME)."""
    from simbackend.models import builtin_model_path, builtin_models

    rows = [(name, Text(str(builtin_model_path(name)))) for name in builtin_models()]
    show(console, "Built-in models", ("name", "file"), rows, wrap=(1,))


# ----------------------------------------------------------------------
# robots
# ----------------------------------------------------------------------
@app.command()
def robots(
    name: str | None = typer.Argument(None, metavar="ROBOT", help="A robot name or JSON description file."),
    sims: list[str] | None = typer.Option(
        None, "--sim", "-s", help="Engines to resolve it on (repeatable; default: every registered one)."
    ),
    settle: bool = typer.Option(
        False, "--settle", help="Hold the default pose under the robot's actuation on each engine and report."
    ),
    seconds: float = typer.Option(2.0, "--seconds", min=0.0, help="How long --settle holds the pose (s)."),
    strict: bool = typer.Option(False, "--strict", help="With --settle: exit 1 where it does not stand."),
    as_json: bool = typer.Option(False, "--json", help="With --settle: print the report as JSON (stdout)."),
) -> None:
    """List the registered robots, or show what ROBOT resolves to on each engine.

    For ROBOT: its description (model, joints in policy order, default pose, actuation, base, feet) and, per engine,
    whether its scene builds there, its sizes, its total mass (the bodies' masses as the engine holds them), the
    feet's bodies and the base's standing height, and a warning where its collision geometry overlaps itself.
    Exit code 2: an unknown robot or engine, a description that does not fit its model (a name it lacks, a
    missing model file; checked on MuJoCo, which composes every scene; the message names the field); 1: an
    installed engine, or one ``--sim`` names, cannot build it; an engine not installed is a failure only where
    named.

    With ``--settle``: per engine, the base height the robot settles at after ``--seconds`` holding its default
    pose, its tilt, each foot's share of its weight, the other bodies touching anything, whether it stands, and a
    warning for each way it does not (docs/robots.md, "Settle check"). Warnings exit 0 unless ``--strict``.
    """
    from simbackend.errors import ArgumentTypeError, InvalidArgumentError, SimBackendError
    from simbackend.robots import (
        available_robots,
        check_robot,
        get_robot,
        make_robot_backend,
        resolve,
        robot_scene,
        self_overlap_warnings,
    )

    if not settle:
        given = [flag for flag, on in (("--seconds", seconds != 2.0), ("--strict", strict), ("--json", as_json)) if on]
        if given:
            raise fail(f"{given[0]}: only with --settle", code=2)
    elif name is None:
        raise fail("--settle: name a ROBOT to settle", code=2)
    elif not 0 < seconds <= 3600:
        raise fail(f"--seconds: expected a number of seconds in (0, 3600], got {seconds:g}", code=2)
    if name is None:
        listed = [(r, get_robot(r)) for r in available_robots()]
        rows = [(r, os.path.basename(os.fspath(d.model)), str(len(d.joints)), d.actuation, ", ".join(d.feet))
                for r, d in listed]  # fmt: skip
        show(
            console,
            "Robots (--robot NAME)",
            ("name", "model", "policy joints", "actuation", "feet"),
            rows,
            wrap=(4,),
            plain=[(r, [f"{m}, {j} policy joints, {a}", f"feet: {f}"]) for r, m, j, a, f in rows],
        )
        return
    try:
        desc = get_robot(name)
    except SimBackendError as e:
        raise fail(str(e), code=2) from None  # it names the robot's field (robot.kp) or file
    for sim in sims or []:
        try:
            check_sim(sim)
        except typer.BadParameter as e:
            raise fail(f"--sim: {e}", code=2) from None
    try:
        check_robot(desc)  # the description against its model: bad input on every engine (exit 2)
        scene = robot_scene(desc)
    except (InvalidArgumentError, ArgumentTypeError) as e:
        raise fail(str(e), code=2) from None
    except SimBackendError as e:
        raise fail(str(e)) from None
    for line in self_overlap_warnings(desc):
        err_console.print(Text("warning: ", style="bold yellow") + Text(line), soft_wrap=True)
    if settle:
        _settle_report(desc, [s.strip().lower() for s in sims] if sims else None, seconds, strict, as_json)
        return
    fields = [
        ("model", str(desc.model_path())),
        ("scene", scene.path),
        ("policy joints", ", ".join(desc.joints)),
        *([("held joints", ", ".join(desc.held_joints))] if desc.held_joints else []),
        ("actuation", desc.actuation),
        ("base | feet", f"{desc.base_body} | {', '.join(desc.feet)}"),
        ("default base height", f"{scene.default_qpos[2]:.4f} m"),
    ]
    show(console, f"Robot {desc.name!r}", ("field", "value"), fields, wrap=(1,), show_header=False)

    resolved: list[tuple[str, ...]] = []
    failed = False
    for sim in sims or list(available_backends()):
        try:
            with make_robot_backend(desc, sim, 1) as b:
                r = resolve(desc, b, scene.default_qpos)
                mass = float(b.model_fields()["body_mass"].sum())  # kg, the bodies' masses as the engine holds them
                resolved.append(
                    (
                        sim,
                        "yes",
                        f"{b.nq} / {b.nv} / {b.num_actuators}",
                        f"{mass:.3f} kg",
                        ", ".join(f"{b.body_names[i]} ({i})" for i in r.feet),
                        "yes" if b.capabilities.contact_forces else "no",
                    )
                )
        except ImportError as e:  # an engine whose extra is missing: a failure only where --sim names it
            failed = failed or bool(sims)
            resolved.append((sim, "no", " ".join(str(e).split()), "", "", ""))
        except SimBackendError as e:  # an installed engine refuses the description
            failed = True
            resolved.append((sim, "no", " ".join(str(e).split()), "", "", ""))
    show(
        console,
        "Resolved on each engine",
        ("engine", "loads", "nq / nv / nu", "mass", "feet (body ids)", "contact forces"),
        resolved,
        wrap=(2, 4),
        plain=[
            (sim, [f"loads: {ok}", f"nq / nv / nu: {sizes}", f"mass: {mass}", f"feet: {feet}",
                   f"contact forces: {forces}"])
            if ok == "yes"
            else (sim, [f"loads: no ({sizes})"])
            for sim, ok, sizes, mass, feet, forces in resolved
        ],
    )  # fmt: skip
    if failed:
        raise typer.Exit(1)


def _settle_report(desc: Any, sims: list[str] | None, seconds: float, strict: bool, as_json: bool) -> None:
    """``robots ROBOT --settle``: the settle check's table (or JSON), its warnings; the exit code."""
    import json
    import math

    from simbackend.robots.settle import CONTACT_THRESHOLD, SettleReport, settle

    report: SettleReport = settle(desc, sims, seconds)
    # as without --settle: a refusing engine fails, a missing one only where --sim names it
    failed = bool(report.refused) or (bool(sims) and bool(report.skipped)) or not report.results
    failed = failed or (strict and not report.stands)
    if as_json:
        console.print_json(json.dumps(report.to_dict()))
        if failed:
            raise typer.Exit(1)
        return
    rows: list[tuple[Any, ...]] = []
    for r in report.results:
        feet = ", ".join(f"{n} {v:.0%}" for n, v in r.feet.items()) if r.contact_forces else "no contact forces"
        mine = r.self_touching
        touching = ", ".join(f"{n} {f:.1f} N" + (" (self-contact)" if n in mine else "")
                             for n, f in r.touching.items()) or "none"  # fmt: skip
        verdict = Text("yes" if r.stands else f"no ({', '.join(r.failed)})", style="green" if r.stands else "red")
        sag = max(r.sag, key=lambda n: abs(r.sag[n])) if r.sag else None
        rows.append((
            r.engine,
            f"{r.height:.3f} m ({r.height_fraction:.0%})",
            f"{math.degrees(r.tilt):.1f}",
            f"{r.feet_share:.0%}" if r.contact_forces else "-",
            feet,
            touching,
            f"{r.sag[sag]:+.3f} rad ({sag})" if sag is not None else "-",
            verdict,
        ))  # fmt: skip
    for engine, why in {**report.skipped, **report.refused}.items():
        rows.append((engine, "-", "-", "-", f"not settled: {why}", "-", "-", Text("-")))
    default = report.results[0].default_height if report.results else float("nan")
    show(
        console,
        f"Settle: {desc.name!r} holding its default pose {report.seconds:g} s (default base height {default:.3f} m)",
        ("engine", "base height", "tilt deg", "feet: m g", "per foot (share of m g)",
         f"other bodies in contact (> {CONTACT_THRESHOLD:g} N)", "largest joint sag", "stands"),
        rows,
        wrap=(4, 5),
        plain=[
            (row[0], [f"base height: {row[1]}", f"tilt: {row[2]} deg", f"feet carry: {row[3]} of m g",
                      f"per foot: {row[4]}", f"other bodies in contact: {row[5]}", f"largest joint sag: {row[6]}",
                      Text("stands: ") + row[7]])
            if row[1] != "-" else (row[0], [row[4]])
            for row in rows
        ],
    )  # fmt: skip
    for line in report.warnings:
        err_console.print(Text("warning: ", style="bold yellow") + Text(line), soft_wrap=True)
    console.print(Text(report.summary(), style="green" if report.stands else "yellow"), soft_wrap=True)
    if failed:
        raise typer.Exit(1)


# ----------------------------------------------------------------------
# run
# ----------------------------------------------------------------------
def _fmt_vec(values: Any) -> str:
    return "[" + ", ".join(f"{float(v):+.4f}" for v in values) + "]"


def _tracked_point(backend: Any) -> tuple[str, Any]:
    """``(label, (3,) position)``: where env 0's model is, in one point, read through the contract.

    A floating base: the base's position. A fixed base (an arm): its end effector, the last site of
    the deepest body of the base's kinematic chain (that body's origin where it holds no site).
    """
    base = backend.base_body_id
    if backend.has_floating_base or base == 0:
        return "env 0 base position", backend.get_base_pos()[0].cpu()
    parent = backend.info.body_parent
    depth: dict[int, int] = {}
    for body in backend.get_body_subtree_ids(base).tolist():  # parents before children
        depth[body] = 0 if body == base else depth[int(parent[body])] + 1
    end = max(depth, key=lambda b: (depth[b], b))
    sites = [i for i, body in enumerate(backend.info.site_body.tolist()) if body == end]
    if sites:
        site = sites[-1]
        return f"env 0 end effector (site {backend.site_names[site]})", backend.get_site_pos_w([site])[0, 0].cpu()
    return f"env 0 end effector (body {backend.body_names[end]})", backend.get_body_pos_w([end])[0, 0].cpu()


@app.command()
@with_build_flags
@with_picture_flags
def run(
    sim: str = sim_option(),
    model: str = typer.Option(..., "--model", "-m", help="Built-in model name or path to an MJCF/URDF file."),
    num_envs: int = typer.Option(1024, "--num-envs", "-n", min=1, help="Number of parallel envs N."),
    steps: int = typer.Option(500, "--steps", "-s", min=1, help="Number of step() calls."),
    nsteps: int = typer.Option(1, "--nsteps", "-k", min=1, help="Physics substeps per step() call (decimation)."),
    seed: int = typer.Option(0, "--seed", min=0, max=2**63 - 1, help="Seed of the backend and of the random actions."),
    json_path: str | None = typer.Option(
        None, "--json", metavar="PATH", help="Also write the figures to this JSON file (checked before the run)."
    ),
    dr_path: str | None = typer.Option(
        None,
        "--dr",
        metavar="PLAN.json",
        help="Domain-randomization plan: init terms before the run, reset terms with a reset of every env to"
        " its default pose, interval terms on their interval_s schedule.",
    ),
    video_path: str | None = typer.Option(
        None,
        "--video",
        metavar="OUT.mp4",
        help="Also write an mp4 of the first envs (up to 4, tiled) through MuJoCo's renderer (no GPU needed);"
        " frames are captured outside the timed figures' hot loop only in wall time, so expect lower"
        " throughput figures with it.",
    ),
    video_every: int = typer.Option(1, "--video-every", min=1, help="Capture a frame every this many steps."),
    video_fps: int = typer.Option(30, "--video-fps", min=1, help="Frames per second of the video."),
    overwrite: bool = overwrite_option(),
    *,
    build: BuildFlags,
    picture: PictureFlags,
) -> None:
    """Step N envs S times with uniform random actions and report throughput.

    Actions are drawn uniformly within each actuator's ctrl range ([-1, 1] where
    the range is unlimited) from a torch generator seeded with --seed. The
    construction flags (-o, --nthread, ..., --device) build the backend.
    Bad arguments (an unknown --sim or --model, malformed flags or options, a
    device this machine lacks, a --json or --video path that cannot be written
    or that exists without --overwrite) stop with exit 2 before anything is
    built; a failure while running exits 1.
    """
    if json_path:
        check_writable(json_path, "--json", overwrite)
    if video_path:
        check_output(video_path, "--video", (".mp4",), overwrite)
    check_model(model, build)
    plan = load_plan(dr_path, num_envs)
    with staged_outputs(json_path, video_path) as (json_tmp, video_tmp), contextlib.ExitStack() as cleanup:
        backend, build_s = _build_for_run(sim, model, num_envs, seed, build, picture if video_path else None)
        with backend:
            scheduler, dr_figures = start_plan(backend, plan, dr_path)
            controls = RandomControls(backend, seed)
            frames = VideoCapture(backend, video_tmp, video_every, video_fps, steps, picture) if video_tmp else None
            if frames is not None:
                cleanup.push(frames.abort_on_error)  # a run that fails stops the encoder before its file goes
            threads = getattr(backend.engine, "nthread", None)  # engines that run a thread pool say how big
            _print_run_header(backend, sim, model, steps, nsteps, threads, build_s)
            stepped = _step_all(backend, controls, steps, nsteps, scheduler, dr_figures, frames)
            if frames is not None:
                console.print(Text(f"{frames.close()} frames written to {video_path}"))
            end = _end_state(backend)
        figures = {
            "sim": sim,
            "model": model,
            "num_envs": num_envs,
            "steps": steps,
            "nsteps": nsteps,
            "seed": seed,
            "device": str(backend.device),
            "nthread": threads,
            "physics_dt": backend.physics_dt,
            "build_s": build_s,
            **_rates(stepped, num_envs * steps, nsteps, dr_figures),
            "diverged_env_steps": stepped["diverged"],
            "base_pos_env0": [float(v) for v in end["base_pos"]],
            "dof_pos_env0": [float(v) for v in end["dof_pos"]],
            "mean_abs_qvel": end["mean_abs_qvel"],
        }
        _print_run_figures(figures, end)
        if json_path:
            _write_figures(figures, json_path, json_tmp)


def _build_for_run(
    sim: str, model: str, num_envs: int, seed: int, build: BuildFlags, picture: PictureFlags | None
) -> tuple[Any, float]:
    """``run``'s backend and the seconds its build took; with ``picture`` (``--video``), its camera and size
    checked against it (exit 2). A backend that fails to build exits 1."""
    from simbackend.errors import SimBackendError
    from simbackend.registry import make_backend

    t_build = time.perf_counter()
    try:
        backend = make_backend(sim, model, num_envs, device=build.device, seed=seed, **build.options)
    except (SimBackendError, ValueError, TypeError, RuntimeError) as e:
        raise fail(f"could not build backend {sim!r} for model {model!r}: {e}") from None
    build_s = time.perf_counter() - t_build
    if picture is not None:
        try:
            picture.check(backend)
        except SimBackendError as e:
            backend.close()
            raise fail(str(e), code=2) from None
    return backend, build_s


def _print_run_header(
    backend: Any, sim: str, model: str, steps: int, nsteps: int, threads: int | None, build_s: float
) -> None:
    """What ``run`` is about to do, and on what: three lines."""
    console.print(
        Text(sim, style="bold") + Text(f" | {model} | {backend.num_envs} envs x {steps} steps x {nsteps} substeps")
    )
    console.print(
        Text(
            f"device {backend.device}"
            + (f" | nthread {threads}" if threads is not None else "")
            + f" | built in {build_s:.2f} s"
        )
    )
    console.print(
        Text(
            f"nq {backend.nq}, nv {backend.nv}, nu {backend.num_actuators}, num_dof {backend.num_dof},"
            f" physics_dt {backend.physics_dt:g} s"
        )
    )


def _step_all(
    backend: Any,
    controls: RandomControls,
    steps: int,
    nsteps: int,
    scheduler: Any,
    dr_figures: dict | None,
    frames: VideoCapture | None,
) -> dict[str, Any]:
    """``run``'s timed loop: ``steps`` steps of random controls (the interval randomization on its schedule,
    counted in ``dr_figures``; a frame captured where asked), with a progress bar on a terminal. Returns the
    wall time and the step timings' sums: ``{"wall_s", "physics_s", "step_total_s", "diverged"}``."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    physics_s = step_total_s = 0.0
    diverged = 0
    progress = Progress(
        TextColumn("stepping"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=err_console,
        transient=True,
        disable=not err_console.is_terminal,  # a bar is for a terminal: nothing in a pipe or a file
    )
    t0 = time.perf_counter()
    with progress:
        task = progress.add_task("step", total=steps)
        for _ in range(steps):
            out = backend.step(controls(), nsteps=nsteps)
            if scheduler is not None:
                fired = scheduler.advance(backend, nsteps * backend.physics_dt)
                dr_figures["interval_applications"] += sum(len(ids) for ids in fired.values())  # type: ignore[index]
            timing = out.get("timing", {})
            physics_s += float(timing.get("physics", 0.0))
            step_total_s += float(timing.get("total", 0.0))
            diverged += int(out["diverged"].sum())
            progress.advance(task)
            if frames is not None:
                frames.capture()
    return {"wall_s": time.perf_counter() - t0, "physics_s": physics_s, "step_total_s": step_total_s,
            "diverged": diverged}  # fmt: skip


def _rates(stepped: dict[str, Any], env_steps: int, nsteps: int, dr_figures: dict | None) -> dict[str, Any]:
    """``run``'s throughput figures from the loop's timings (the randomization's among them, in the JSON's order)."""
    wall_s = stepped["wall_s"]
    return {
        "wall_s": wall_s,
        "env_steps": env_steps,
        "env_steps_per_s": env_steps / wall_s,
        "substeps_per_s": env_steps * nsteps / wall_s,
        "physics_s": stepped["physics_s"],
        "step_total_s": stepped["step_total_s"],
        "domain_randomization": dr_figures,
        "physics_share": stepped["physics_s"] / wall_s if wall_s > 0 else 0.0,
    }


def _end_state(backend: Any) -> dict[str, Any]:
    """Where env 0 ends up: base position, the tracked point (:func:`_tracked_point`), its first dofs, and
    the mean ``|qvel|`` over every env."""
    point_label, point = _tracked_point(backend)
    return {
        "base_pos": backend.get_base_pos()[0].cpu(),
        "point_label": point_label,
        "point": point,
        "dof_pos": backend.get_dof_pos()[0, :4].cpu(),
        "mean_abs_qvel": float(backend.get_qvel().abs().mean()) if backend.nv else 0.0,
    }


def _print_run_figures(figures: dict[str, Any], end: dict[str, Any]) -> None:
    """``run``'s figures as ``key  value`` lines."""
    dof_pos = end["dof_pos"]
    fields(
        console,
        [
            ("env-steps/s", [f"{figures['env_steps_per_s']:,.0f}"]),
            ("substeps/s", [f"{figures['substeps_per_s']:,.0f}"]),
            ("wall time", [f"{figures['wall_s']:.3f} s"]),
            ("physics share", [f"{100 * figures['physics_share']:.1f} %"]),
            ("diverged env-steps", [f"{figures['diverged_env_steps']}"]),
            (end["point_label"], [_fmt_vec(end["point"])]),
            ("env 0 dof pos[:4]", [_fmt_vec(dof_pos) if dof_pos.numel() else "(no dofs)"]),
            ("mean |qvel|", [f"{figures['mean_abs_qvel']:.4f}"]),
        ],
    )


def _write_figures(figures: dict[str, Any], json_path: str, json_tmp: str | None) -> None:
    """``run --json``: the figures into the staged file (moved onto ``json_path`` when the command succeeds)."""
    import json

    try:
        with open(str(json_tmp), "w", encoding="utf-8") as f:
            json.dump(figures, f, indent=2)
            f.write("\n")
    except OSError as e:
        raise fail(f"could not write {json_path}: {e}") from None
    console.print(Text(f"figures written to {json_path}"))


class VideoCapture:
    """Frames of the first envs of ``backend`` (up to 4, tiled in one scene) streamed to an mp4,
    one every ``every`` calls of :meth:`capture`, drawn as ``picture`` says."""

    def __init__(
        self, backend: Any, path: str, every: int, fps: int, steps: int, picture: PictureFlags, max_envs: int = 4
    ):
        from simbackend.playback.video import VideoWriter

        self.backend, self.every, self.calls, self.picture = backend, every, 0, picture
        self.envs = list(range(min(backend.num_envs, max_envs)))
        self.writer = VideoWriter(path, fps=fps, progress=False, total=steps // every)

    def capture(self) -> None:
        if self.calls % self.every == 0:
            self.writer.append(self.picture.render(self.backend, self.envs))
        self.calls += 1

    def close(self) -> int:
        return self.writer.close()

    def abort_on_error(self, exc_type: Any, *exc: Any) -> None:
        """``__exit__`` of the capture: a block that raised stops the encoder and removes its file."""
        if exc_type is not None:
            self.writer.abort()


# ----------------------------------------------------------------------
# parity
# ----------------------------------------------------------------------
#: tier names of ``simbackend.parity.TIERS`` (listed here so that --help needs no import; a test keeps them equal)
PARITY_TIERS = ("model", "kinematics", "jacobian", "dynamics", "servo", "contact", "randomized")


def _check_tiers(values: list[str] | None) -> list[str] | None:
    """Validate ``--tier`` values (usage error, exit 2, for an unknown one)."""
    if not values:
        return None
    out = []
    for v in values:
        name = v.strip().lower()
        if name not in PARITY_TIERS:
            raise typer.BadParameter(f"{v!r} is not a parity tier; tiers: {', '.join(PARITY_TIERS)}")
        out.append(name)
    return out


#: styles of the parity rows' results
_RESULT_STYLES = {"pass": "green", "FAIL": "bold red", "skip": "yellow", "KNOWN": "cyan"}


def _print_parity(report: Any) -> None:
    """A parity report's rows: a boxed table where it fits, else plain columns with each row's detail
    on the line below (``dof_pos[elbow]`` and the other names are literal text, never markup)."""
    rows, details = [], []
    for r in report.rows:
        rows.append(
            (
                r.tier,
                r.quantity,
                "-" if r.max_error is None else f"{r.max_error:.3g}",
                "-" if r.tolerance is None else f"{r.tolerance:.3g}",
                Text(r.status + ("*" if r.delegated else ""), style=_RESULT_STYLES[r.status]),
                "-" if r.first_step is None else str(r.first_step),
                r.detail,
            )
        )
        details.append(r.detail)
    right = (False, False, True, True, False, True)
    show(
        console,
        f"{report.sim} vs {report.reference} on {report.model}",
        ("tier", "quantity", "max error", "tolerance", "result", "first failing step", "detail"),
        rows,
        wrap=(6,),
        right=(2, 3, 5),
        least=24,
        plain=lambda: columns(
            console,
            ("tier", "quantity", "max error", "tolerance", "result", "fail step"),
            [row[:6] for row in rows],
            right,
            details,
        ),
    )


@app.command()
@with_build_flags
def parity(
    sim: str = sim_option(),
    model: list[str] = typer.Option(
        ...,
        "--model",
        "-m",
        help="Built-in model name (e.g. pendulum, arm7, box_drop) or path to an MJCF/URDF file; repeatable: several"
        " models print one summary table.",
    ),
    tier: list[str] | None = typer.Option(
        None,
        "--tier",
        "-t",
        callback=_check_tiers,
        metavar="TIER",
        help=f"Tier to run, repeatable ({', '.join(PARITY_TIERS)}); default: the tiers that apply to the model.",
    ),
    reference: str = typer.Option(
        "mujoco", "--reference", callback=check_sim, metavar="NAME", help="Registered reference backend."
    ),
    num_envs: int = typer.Option(
        64, "--num-envs", "-n", min=1, help="Random configurations (envs) of the kinematics and jacobian tiers."
    ),
    seed: int = typer.Option(
        0, "--seed", min=0, max=2**63 - 1, help="Seed of the random configurations, states and controls."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON (stdout) instead of a table."),
    ray: bool = typer.Option(
        False, "--ray", help="Run the models as Ray tasks, in parallel (pip install 'simbackend[ray]'; --ray-address)."
    ),
    *,
    build: BuildFlags,
) -> None:
    """Compare backend --sim with the MuJoCo reference on one model, tier by tier.

    With several --model (or --ray) each model is one job, run as a Ray task with
    --ray (a local Ray, or the cluster at --ray-address), and one summary table
    (or a JSON list) follows a progress bar.

    Prints each quantity's largest error, its tolerance, pass/FAIL, and for
    rollouts the first substep where it left tolerance. KNOWN marks a row whose
    only excess is a difference the backend declares it cannot avoid
    (capabilities.known_differences, e.g. a massless body given a positive mass
    on PhysX), within the declared value: it counts as passed. The construction flags
    (-o, --nthread, ...) build both backends, so that both hold the same model;
    --device moves only the backend under test (the reference stays on its
    default device, the CPU for MuJoCo). Exit code: 0 when every tier passed, 1
    when one failed (a model the backend cannot load included), 2 for bad
    arguments (unknown backend or tier, malformed flags, a device this machine
    lacks, a model the reference cannot load).
    """
    import json

    from simbackend.errors import SimBackendError
    from simbackend.parity import run_parity

    for m in model:
        check_model(m, build)
    if len(model) > 1 or ray:
        _parity_sweep(sim, model, reference, tier, num_envs, seed, as_json, ray, build)
        return
    try:
        report = run_parity(
            sim,
            model[0],
            reference=reference,
            tiers=tier,
            num_envs=num_envs,
            seed=seed,
            device=build.device,
            options=build.options,
        )
    except (SimBackendError, ValueError, TypeError) as e:
        raise fail(f"could not run parity for model {model[0]!r}: {e}", code=2) from None
    if as_json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
    else:
        _print_parity(report)
        known = report.known_note()
        if known:
            console.print(Text(known, style="cyan"), soft_wrap=True)
        note = report.delegation_note()
        if note:
            console.print(Text(f"* {note}", style="yellow"), soft_wrap=True)
        if report.passed:
            held = len(report.known_rows)
            extra = f" ({held} of them KNOWN: declared differences)" if held else ""
            console.print(Text(f"PASSED: {len(report.rows)} rows within tolerance{extra}", style="bold green"))
        else:
            first = report.first_failure()
            step = f" at step {first.first_step}" if first.first_step is not None else ""
            console.print(
                Text(
                    f"FAILED: {len(report.failures)} of {len(report.rows)} rows;"
                    f" first failure {first.tier}/{first.quantity}{step}",
                    style="bold red",
                )
            )
    raise typer.Exit(0 if report.passed else 1)


def _parity_job(
    sim: str, model: str, reference: str, tiers: Any, num_envs: int, seed: int, device: Any, options: dict
) -> Any:
    """One model of a parity sweep (a Ray task: importable, positional)."""
    from simbackend.parity import run_parity

    return run_parity(
        sim, model, reference=reference, tiers=tiers, num_envs=num_envs, seed=seed, device=device, options=options
    )


def _parity_sweep(
    sim: str,
    models: list[str],
    reference: str,
    tiers: Any,
    num_envs: int,
    seed: int,
    as_json: bool,
    use_ray: bool,
    build: BuildFlags,
) -> None:
    """``simbackend parity`` over several models: one job each, one summary table; exit 1 if any failed."""
    import json

    from simbackend.errors import SimBackendError
    from simbackend.sharding.sweep import JobFailed, fan_out

    jobs = [(sim, m, reference, tiers, num_envs, seed, build.device, build.options) for m in models]
    try:
        reports = fan_out(_parity_job, jobs, use_ray=use_ray, address=build.ray_address, label="parity models")
    except SimBackendError as e:  # the ray extra missing
        raise fail(str(e), code=2) from None
    ok = all(not isinstance(r, JobFailed) and r.passed for r in reports)
    if as_json:
        out = [
            {"model": m, "error": r.error} if isinstance(r, JobFailed) else r.to_dict()
            for m, r in zip(models, reports, strict=True)
        ]
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
        raise typer.Exit(0 if ok else 1)
    rows, notes = [], []
    for m, r in zip(models, reports, strict=True):
        if isinstance(r, JobFailed):
            rows.append((m, "-", "-", r.error, Text("ERROR", style="bold red")))
            notes.append(f"error: {r.error}")
            continue
        worst = max(
            (x for x in r.rows if x.max_error is not None and x.tolerance), key=lambda x: x.max_error / x.tolerance,
            default=None,
        )  # fmt: skip
        where = "-" if worst is None else f"{worst.max_error / worst.tolerance:.3g} ({worst.tier}/{worst.quantity})"
        known = f" ({len(r.known_rows)} KNOWN)" if r.known_rows else ""  # rows excused as declared differences
        verdict = Text(f"pass{known}", style="green") if r.passed else Text("FAIL", style="bold red")
        rows.append((m, str(len(r.rows)), str(len(r.failures)), where, verdict))
        notes.append(f"worst error / tolerance: {where}")
    show(
        console,
        f"parity: {sim} against {reference}, {len(models)} models",
        ("model", "rows", "failed", "worst error / tolerance", "result"),
        rows,
        wrap=(3,),
        right=(1, 2),
        least=24,
        plain=lambda: columns(
            console,
            ("model", "rows", "failed", "result"),
            [(m, n, f, verdict) for m, n, f, _, verdict in rows],
            (False, True, True, False),
            notes,
        ),
    )
    raise typer.Exit(0 if ok else 1)


# ----------------------------------------------------------------------
# contract
# ----------------------------------------------------------------------
def contract_suite_dir() -> str:
    """Directory of the conformance suite shipped in the package."""
    import importlib.util

    spec = importlib.util.find_spec("simbackend.contract_tests")
    if spec is None or not spec.submodule_search_locations:
        raise fail("the conformance suite (simbackend.contract_tests) is not installed")
    return list(spec.submodule_search_locations)[0]


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
@with_build_flags
def contract(
    ctx: typer.Context,
    sim: str = sim_option(checked=False),
    *,
    build: BuildFlags,
) -> None:
    """Run the conformance suite against backend --sim; extra arguments go to pytest.

    The construction flags (-o, --nthread, --solver-iterations, --timestep,
    --package-dir) and --device reach every backend the suite builds (they
    become pytest's --sim-option and --device). Example: simbackend contract
    --sim sapien -o sapien.solver=tgs --nthread 2 -q -x -k "names or shapes"

    --sim may be a mix of engines (mujoco,sapien: docs/mixed.md), or name a
    backend that a pytest plugin given with -p registers (the suite checks the
    name once its plugins are loaded; without -p it is checked at once). Exit
    status: pytest's, except a usage error (an unknown --sim, a bad pytest
    argument), which exits 2.
    """
    from simbackend._extras import require_extra
    from simbackend.errors import MissingExtraError
    from simbackend.mixing import is_mix

    if is_mix(sim):  # a mix of registered engines (simbackend.mixing): each checked now
        from simbackend.errors import SimBackendError
        from simbackend.mixing import spec_engines

        sim = "".join(sim.split()).lower()
        try:
            spec_engines(sim)
        except SimBackendError as e:
            raise fail(f"--sim: {e}", code=2) from None
    elif not any(a == "-p" or (a.startswith("-p") and not a.startswith("--")) for a in ctx.args):
        try:  # no plugin that could register it: an unknown name is a bad argument, as for every command
            sim = check_sim(sim) or sim
        except typer.BadParameter as e:
            raise fail(f"--sim: {e}", code=2) from None

    try:
        require_extra("pytest", "hypothesis", purpose="the conformance suite")
    except MissingExtraError as e:
        raise fail(str(e), code=2) from None
    import pytest

    args = [contract_suite_dir(), "--sim", sim, "-p", "no:cacheprovider"]
    if build.device is not None:
        args += ["--device", build.device]
    for text in build.texts:
        args += ["--sim-option", text]
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        args += ["-p", "simbackend.contract_tests.plugin"]
    code = int(pytest.main([*args, *ctx.args]))
    raise typer.Exit(2 if code == int(pytest.ExitCode.USAGE_ERROR) else code)


from . import calibrate as _calibrate  # noqa: E402,F401 - registers `excite` and `calibrate` on the app
from . import compare as _compare  # noqa: E402,F401 - registers `compare` on the app
from . import play as _play  # noqa: E402,F401 - registers `record` and `play` on the app
from . import train as _train  # noqa: E402,F401 - registers `train` and `eval` on the app


def main() -> None:
    """Console entry point (``simbackend``)."""
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
