"""What the ``simbackend`` commands share: the application, its consoles, the --sim and construction flags.

:mod:`simbackend.cli.main` defines the commands on this application (and
imports :mod:`.play` and :mod:`.train`, which add theirs); every command module
imports from here, and nothing here imports a command module. Importing it
loads neither torch nor any engine.

It is also the one home of the command line's error rule (docs/cli.md, "Errors
and exit codes"): a bad argument prints one line ``error: ...`` on stderr and
exits 2 before anything is built or written (:func:`fail` with ``code=2``; the
usage errors typer and click detect go the same way through :class:`Commands`),
a failure while running prints one line and exits 1 (:func:`fail`). The checks
every command shares live here: ``--sim`` (:func:`check_sim`), the construction
flags and options (:func:`with_build_flags`, :func:`check_options_for`), the
model (:func:`check_model`), output paths and ``--overwrite``
(:func:`check_output`, :func:`check_writable`, :func:`check_output_folder`, :func:`check_paths_apart`), and
the writing of outputs under a temporary name moved into place only when the
command succeeds (:func:`staged_outputs`, :func:`staged_folder`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import sys
import time
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
import typer.core
from rich.console import Console
from rich.text import Text

import simbackend
from simbackend.errors import SimBackendError
from simbackend.registry import available_backends

try:  # typer 0.2x carries its own copy of click
    from typer._click import core as click_core
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover - an older typer, on click itself
    from click import core as click_core  # type: ignore[no-redef]
    from click import exceptions as click_exceptions  # type: ignore[no-redef]

#: model every backend is built on to read its capabilities
CAPABILITY_PROBE_MODEL = "pendulum"

# Everything the commands print is literal text: no rich markup, so that ``dof_pos[elbow]``, a path such as
# ``runs/arm[2]`` or ``pip install 'simbackend[ray]'`` is printed as it is (a string, a table cell or a title).
console = Console(highlight=False, markup=False)
err_console = Console(stderr=True, highlight=False, markup=False)

#: the logger the sharded engine says how it runs on (simbackend.sharding.engine); the commands print it
SHARDING_LOGGER = "simbackend.sharding"


def usage_message(e: click_exceptions.ClickException) -> str:
    """A usage error click or typer detected, as the one line :func:`fail` prints: the flag first
    (``--num-envs: ...``), as the commands' own checks name it."""
    message = " ".join(e.format_message().split())
    param = getattr(e, "param", None)
    bad = isinstance(e, click_exceptions.BadParameter) and not isinstance(e, click_exceptions.MissingParameter)
    if bad and param is not None:
        names = [o for o in getattr(param, "opts", ()) if o.startswith("--")] or list(getattr(param, "opts", ()))
        flag = names[0] if names and param.param_type_name == "option" else (param.human_readable_name or "")
        ctx = getattr(e, "ctx", None)
        source = ctx.get_parameter_source(param.name) if ctx is not None and param.name else None
        envvar = getattr(param, "envvar", None)
        given = f" (from the environment variable {envvar})" if source is click_core.ParameterSource.ENVIRONMENT else ""
        message = f"{flag}{given}: {' '.join(e.message.split())}"
    ctx = getattr(e, "ctx", None)
    if ctx is not None:
        message += f" (see {ctx.command_path} --help)"
    return message


def literal_help(command: Any) -> None:
    """Escape the rich markup in the help texts of ``command``, its parameters and its subcommands.

    typer renders help through rich markup, which takes ``[ray]`` in ``pip install 'simbackend[ray]'``
    for a style and drops it. Every help text of this application is literal, so each is escaped once,
    here, when the application's click command is built (:class:`Commands`); a new command or option is
    covered without escapes of its own.
    """
    from rich.markup import escape

    for attr in ("help", "short_help", "epilog"):
        text = getattr(command, attr, None)
        if isinstance(text, str):
            setattr(command, attr, escape(text))
    for param in getattr(command, "params", ()):
        if isinstance(getattr(param, "help", None), str):
            param.help = escape(param.help)
    for sub in getattr(command, "commands", {}).values():
        literal_help(sub)


@contextlib.contextmanager
def whole_option_names() -> Iterator[None]:
    """Within the block, typer's --help tables never cut an option name short.

    typer lays each option out as one row of a rich table (names, type, help) as wide as the console
    (80 columns in a pipe). Where the row is wider, rich narrows the widest columns that may wrap, the
    names' among them, and ends a cut name with "…" (``--stop-at-succe…``). Here the names' columns of
    an options row (all but its last two: type and help) do not wrap, so the type and help columns
    narrow instead, and a word longer than their width folds onto the next line instead of being cut.
    """
    from rich.columns import Columns
    from rich.table import Table
    from typer import rich_utils

    class HelpTable(Table):
        def add_row(self, *renderables: Any, **kwargs: Any) -> None:
            super().add_row(*renderables, **kwargs)
            if len(renderables) < 6:  # not an options row: [required,] names (4 columns), type, help
                return
            for column in self.columns[:-2]:
                column.no_wrap = True
            for cell in renderables[-2:]:  # typer's own, made for this row: the help's Text items in Columns
                for text in cell.renderables if isinstance(cell, Columns) else [cell]:
                    if isinstance(text, Text):
                        text.overflow = "fold"

    before = rich_utils.Table
    rich_utils.Table = HelpTable  # type: ignore[misc]
    try:
        yield
    finally:
        rich_utils.Table = before  # type: ignore[misc]


class ShardNotices(logging.Handler):
    """Prints on stderr what the sharded engine says of how it runs (:data:`SHARDING_LOGGER`): on how many
    Ray actors, and whether ``--shards`` was capped to the number of envs. One line per engine and shard
    count: a training's evaluation task on as many shards says nothing new; one capped to fewer does."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.seen: set[Any] = set()

    def emit(self, record: logging.LogRecord) -> None:
        key = getattr(record, "shards", None) or record.getMessage()
        if key not in self.seen:
            self.seen.add(key)
            err_console.print(Text(record.getMessage()), soft_wrap=True)

    @classmethod
    @contextlib.contextmanager
    def shown(cls) -> Iterator[None]:
        """Within the block, the sharding notices are printed (here only: not again by a handler that
        something else set on the root logger)."""
        logger = logging.getLogger(SHARDING_LOGGER)
        handler, level, propagate = cls(), logger.level, logger.propagate
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
        try:
            yield
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)
            logger.propagate = propagate


class Commands(typer.core.TyperGroup):
    """The application's command group. Every usage error click or typer detects (an unknown flag or
    command, a missing or malformed value, a value out of a flag's range, a callback's
    ``typer.BadParameter``) is printed as one line ``error: ...`` on stderr with exit 2, like the
    commands' own checks (:func:`fail`), instead of a framed panel; a contract error or an OS error
    a command lets through while it runs is one line with exit 1. Help texts are literal
    (:func:`literal_help`) and show every option name whole (:func:`whole_option_names`), and a sharded
    backend says how it runs (:class:`ShardNotices`)."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        literal_help(self)

    def main(  # type: ignore[override]
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            with ShardNotices.shown(), whole_option_names():
                return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            with ShardNotices.shown(), whole_option_names():
                rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click_exceptions.ClickException as e:
            if type(e).__name__ != "NoArgsIsHelpError":  # typer has printed the help already
                fail(usage_message(e), code=e.exit_code)
            sys.exit(e.exit_code)
        except typer.Abort:
            err_console.print("Aborted.")
            sys.exit(1)
        except (SimBackendError, OSError) as e:  # a failure while running: one line, not a traceback
            fail(f"{type(e).__name__}: {e}" if isinstance(e, OSError) else str(e))
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)  # an exit code, or a command's return value (None)


app = typer.Typer(
    name="simbackend",
    help="One contract between robot-learning code and physics engines.",
    cls=Commands,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


# ----------------------------------------------------------------------
# --sim: a registered backend, case-insensitive
# ----------------------------------------------------------------------
def check_sim(value: str | None) -> str | None:
    """Normalise ``--sim`` to a registered lower-case name or a mix of them (``mujoco,sapien``, ``mujoco:96,
    sapien:32``: docs/mixed.md), or fail with a usage error (exit 2)."""
    if value is None:
        return None
    name = value.strip().lower()
    registered = available_backends()  # read at call time: runtime registrations count
    from simbackend.mixing import is_mix

    if is_mix(name):
        from simbackend.errors import SimBackendError
        from simbackend.mixing import spec_engines

        name = "".join(name.split())
        try:
            spec_engines(name, registered)
        except SimBackendError as e:
            raise typer.BadParameter(str(e).removeprefix("sim: ")) from None
        return name
    if name not in registered:
        listing = ", ".join(registered) if registered else "(none)"
        raise typer.BadParameter(f"{value!r} is not a registered backend; registered backends: {listing}")
    return name


def complete_sim(incomplete: str) -> list[str]:
    return [n for n in available_backends() if n.startswith(incomplete.lower())]


def _normalise_sim(value: str | None) -> str | None:
    return None if value is None else value.strip().lower()


def sim_option(checked: bool = True) -> Any:
    """The ``--sim`` option; ``checked=False`` leaves the name to be checked later (by the
    conformance suite, once the pytest plugins named with ``-p``, which may register it, are loaded)."""
    return typer.Option(
        "mujoco",
        "--sim",
        envvar="SIMBACKEND_SIM",
        callback=check_sim if checked else _normalise_sim,
        autocompletion=complete_sim,
        metavar="NAME",
        help=f"Registered backend, case-insensitive ({', '.join(available_backends()) or 'none registered'}).",
    )


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print ``error: message`` on stderr as one line (the terminal wraps it, not rich) and return the exit."""
    err_console.print(Text("error: ", style="bold red") + Text(" ".join(message.split())), soft_wrap=True)
    return typer.Exit(code)


def version_callback(value: bool) -> None:
    if value:
        console.print(f"simbackend {simbackend.__version__}")
        raise typer.Exit(0)


# ----------------------------------------------------------------------
# construction options and device, shared by run, parity and contract
# ----------------------------------------------------------------------
@dataclass(frozen=True)
class BuildFlags:
    """What a command's construction flags say, checked.

    Attributes:
        options: keyword options for ``make_backend(..., **options)``
            (:mod:`simbackend.options`): the ``--option`` pairs, then the
            convenience flags over them.
        device: the ``--device`` text (``None``: each backend's default).
        texts: the same options as ``KEY=VALUE`` texts, in order (for
            ``pytest --sim-option``; a later text overrides an earlier one).
        ray_address: ``--ray-address`` (also in ``options`` when ``--shards`` is given).
    """

    options: dict[str, Any]
    device: str | None
    texts: tuple[str, ...]
    ray_address: str | None = None


#: the construction flags: (parameter, annotation, typer option); see :func:`with_build_flags`
BUILD_FLAGS: tuple[tuple[str, Any, Any], ...] = (
    (
        "option",
        list[str] | None,
        typer.Option(
            None,
            "--option",
            "-o",
            metavar="KEY=VALUE",
            help="Construction option of the backend, repeatable. VALUE is read as JSON where it parses (2, 1e-3,"
            ' true, \'["a", "b"]\'), else as text. ENGINE.KEY=VALUE sets a key of that engine\'s block'
            " (e.g. -o sapien.solver=tgs); blocks of other engines are ignored. The flags below override the"
            " same key given here.",
        ),
    ),
    (
        "nthread",
        int | None,
        typer.Option(
            None,
            "--nthread",
            metavar="N",
            help="At most N CPU threads step the physics (0: as many as the engine uses).",
        ),
    ),
    (
        "solver_iterations",
        int | None,
        typer.Option(
            None, "--solver-iterations", metavar="N", help="Constraint-solver iterations (default: the model's)."
        ),
    ),
    (
        "timestep",
        float | None,
        typer.Option(None, "--timestep", metavar="SECONDS", help="Physics substep, replacing the model's timestep."),
    ),
    (
        "package_dir",
        list[str] | None,
        typer.Option(
            None, "--package-dir", metavar="PATH", help="Folder where a URDF's package:// URIs resolve, repeatable."
        ),
    ),
    (
        "shards",
        int | None,
        typer.Option(
            None,
            "--shards",
            metavar="K",
            help="Run the envs in K Ray actors, each an ordinary backend of about N/K envs (pip install"
            " 'simbackend[ray]'); with --ray-address on a cluster, across machines.",
        ),
    ),
    (
        "ray_address",
        str | None,
        typer.Option(
            None,
            "--ray-address",
            metavar="ADDRESS",
            help="Ray cluster the shards (--shards) or a sweep's tasks (--ray) run on: auto (the one started here"
            " with `ray start`) or HOST:PORT (default: a Ray started in this process).",
        ),
    ),
    (
        "device",
        str | None,
        typer.Option(
            None,
            "--device",
            metavar="DEVICE",
            help="Torch device of the backend: cpu, cuda or cuda:N (default: the backend's own). Asking for CUDA on a"
            " machine without it stops at once.",
        ),
    ),
)


def _with_flags(command: Any, param: str, flags: tuple[tuple[str, Any, Any], ...], make: Any) -> Any:
    """``command`` with its parameter ``param`` replaced, for typer, by the options ``flags``
    (``(name, annotation, typer option)``); the wrapper gives ``make(kwargs, **flag values)``
    (which checks them, exit 2 on a usage error) as ``param``."""
    import functools
    import inspect
    import typing

    hints = typing.get_type_hints(command)
    own = [
        p.replace(annotation=hints.get(p.name, p.annotation))
        for p in inspect.signature(command).parameters.values()
        if p.name != param
    ]
    extra = [
        inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default, annotation=annotation)
        for name, annotation, default in flags
    ]

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> Any:
        given = {name: kwargs.pop(name) for name, _, _ in flags}
        return command(**kwargs, **{param: make(kwargs, **given)})

    del wrapper.__wrapped__  # typer must read the signature below, not the command's
    keyword_only = [p for p in own if p.kind is inspect.Parameter.KEYWORD_ONLY]  # another wrapper's, such as build
    params = [p for p in own if p not in keyword_only] + extra + keyword_only
    wrapper.__signature__ = inspect.Signature(params)
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    return wrapper


def with_build_flags(command: Any) -> Any:
    """Give ``command`` the construction flags (``-o``, ``--nthread``, ..., ``--device``).

    ``command`` declares a parameter ``build: BuildFlags`` instead of the
    flags; the wrapper typer sees has the flags in its place, checks them
    before the command body runs (malformed option text, or a device this
    machine lacks: one-line error, exit 2) and passes the result as ``build``.
    """
    import inspect

    sweeps = "ray" in inspect.signature(command).parameters

    def make(kwargs: dict[str, Any], **given: Any) -> BuildFlags:
        build = build_flags(**given)
        if build.ray_address is not None and given["shards"] is None and not (sweeps and kwargs.get("ray")):
            raise fail(
                "--ray-address: needs --shards K" + (" or --ray" if sweeps else "") + " (it names the Ray cluster"
                " they run on)",
                code=2,
            )
        # the options against the engine(s) the command names (an engine block's keys and values); a command
        # without --sim (info) checks every registered engine's block, eval its checkpoint's once it is read
        sims = [kwargs[k] for k in ("sim", "reference") if isinstance(kwargs.get(k), str)]
        for sim in sims or ([None] if "sim" in kwargs else available_backends()):
            check_options_for(sim, build)
            if sim is not None and given["shards"] is not None and ("," in sim or ":" in sim):  # a mix spec
                raise fail(
                    f"--shards: a mixed backend ({sim}) runs its engines in this process; shards compose copies of"
                    " one engine (name one engine in --sim, or leave --shards out)",
                    code=2,
                )
            check_mix(sim, kwargs.get("num_envs"))
        return build

    return _with_flags(command, "build", BUILD_FLAGS, make)


# ----------------------------------------------------------------------
# pictures: camera, size and dress, shared by run --video and play
# ----------------------------------------------------------------------
@dataclass(frozen=True)
class PictureFlags:
    """What a command's picture flags say, checked: ``backend.render``'s camera, size and dress."""

    camera: str
    width: int
    height: int
    dress: bool

    def render(self, backend: Any, envs: list[int]) -> Any:
        """The picture of ``envs``: ``(H, W, 3)``, tiled in one scene when there are several."""
        tile = len(envs) > 1
        image = backend.render(
            envs, camera=self.camera, width=self.width, height=self.height, tile=tile, dress=self.dress
        )
        return image if tile else image[0]

    def check(self, backend: Any) -> None:
        """Check the camera and the size against a built backend (a bad one raises ``SimBackendError``)."""
        backend.render([0], camera=self.camera, width=self.width, height=self.height, dress=False)


PICTURE_FLAGS: tuple[tuple[str, Any, Any], ...] = (
    (
        "camera",
        str,
        typer.Option(
            "free",
            "--camera",
            metavar="NAME|free",
            help="A camera of the model, or 'free': framing the model's moving parts, following a floating base.",
        ),
    ),
    ("size", str, typer.Option("320x240", "--size", metavar="WxH", help="Frame size in pixels, e.g. 640x480.")),
    (
        "dress",
        bool,
        typer.Option(
            True, "--dress/--no-dress", help="Add the floor, light and sky the model lacks (default), or draw it alone."
        ),
    ),
)


def with_picture_flags(command: Any) -> Any:
    """Give ``command`` the picture flags (``--camera``, ``--size``, ``--no-dress``) as ``picture: PictureFlags``."""

    def make(kwargs: dict[str, Any], camera: str, size: str, dress: bool) -> PictureFlags:
        width, height = parse_size(size)
        return PictureFlags(camera, width, height, dress)

    return _with_flags(command, "picture", PICTURE_FLAGS, make)


def parse_size(text: str) -> tuple[int, int]:
    """``"WxH"`` -> ``(W, H)``, each in [16, 8192] pixels; a usage error (exit 2) naming ``--size`` otherwise."""
    import re

    found = re.fullmatch(r"\s*([0-9]+)\s*[xX]\s*([0-9]+)\s*", text)
    if found is None:  # digits only: int() alone would also take "+640" or "6_40"
        raise fail(f"--size: expected WIDTHxHEIGHT in pixels such as 640x480, got {text!r}", code=2)
    width, height = int(found[1]), int(found[2])
    for name, value in (("width", width), ("height", height)):
        if not 16 <= value <= 8192:
            raise fail(f"--size: the {name} must be in [16, 8192] pixels, got {value}", code=2)
    return width, height


def build_flags(
    option: list[str] | None,
    nthread: int | None,
    solver_iterations: int | None,
    timestep: float | None,
    package_dir: list[str] | None,
    shards: int | None,
    ray_address: str | None,
    device: str | None,
) -> BuildFlags:
    """Check the construction flags: a flag's value out of range, malformed option text, an option no
    backend takes or an absent device is a usage error (exit 2) naming the flag or the option."""
    import json

    from simbackend.errors import SimBackendError
    from simbackend.options import SCALAR_OPTIONS, merge_cli_options, parse_cli_option

    try:
        for flag, key, number in (
            ("--nthread", "nthread", nthread),
            ("--solver-iterations", "solver_iterations", solver_iterations),
            ("--timestep", "timestep", timestep),
            ("--shards", "shards", shards),
        ):
            if number is not None:
                SCALAR_OPTIONS[key](number, flag)
    except SimBackendError as e:
        raise fail(str(e), code=2) from None
    for folder in package_dir or ():
        if not Path(folder).expanduser().is_dir():
            raise fail(f"--package-dir: {folder!r} is not a folder", code=2)
    if ray_address is not None and not ray_address.strip():
        raise fail("--ray-address: expected 'auto', 'HOST:PORT' or 'ray://HOST:PORT', got ''", code=2)
    texts = list(option or [])
    for key, value in (
        ("nthread", nthread),
        ("solver_iterations", solver_iterations),
        ("timestep", timestep),
        ("package_dirs", list(package_dir) if package_dir else None),
        ("shards", shards),
        ("sharding.address", ray_address if shards is not None else None),
    ):
        if value is not None:
            texts.append(f"{key}={json.dumps(value)}")
    try:
        options = merge_cli_options([parse_cli_option(text) for text in texts])
    except SimBackendError as e:
        raise fail(str(e), code=2) from None
    if device is not None:
        from simbackend.devices import require_device

        try:
            require_device(device, argument="--device")
        except SimBackendError as e:
            raise fail(str(e), code=2) from None
    return BuildFlags(options, device, tuple(texts), ray_address)


def check_mix(sim: str | None, num_envs: int | None) -> None:
    """A mix spec's counts against the number of envs (``--sim mujoco:4,sapien:4`` with ``--num-envs 6``),
    before anything is built: a usage error (exit 2) naming ``--sim``. Nothing to check for one engine,
    for shares, or while N is not known."""
    from simbackend.mixing import is_mix, parse_mix

    if sim is None or num_envs is None or not is_mix(sim):
        return
    from simbackend.errors import SimBackendError

    try:
        parse_mix(sim, int(num_envs))
    except SimBackendError as e:
        raise fail(f"--sim: {str(e).removeprefix('sim: ').replace('num_envs', '--num-envs')}", code=2) from None


def check_options_for(sim: str | None, build: BuildFlags) -> None:
    """Check the construction options as ``make_backend(sim, ...)`` will, before it runs: an unknown key,
    a value of the wrong type or out of range (``-o sharding.bogus=1``, ``-o mujoco.integrator=x``) is a
    usage error (exit 2). ``sim=None`` checks every option but the engine blocks
    (:func:`simbackend.options.check_options`)."""
    from simbackend.errors import SimBackendError
    from simbackend.options import check_options

    try:
        check_options(sim, build.options)
    except SimBackendError as e:
        raise fail(str(e), code=2) from None


def check_model(model: str, build: BuildFlags | None = None, flag: str = "--model") -> Any:
    """Fail at once (exit 2) for a model that cannot be read or compiled: an unknown built-in name, a
    missing file, a malformed MJCF or URDF (compiled with MuJoCo's compiler, which every backend builds
    from, and the model options of ``build``), before any backend is built. Returns the compiled
    ``mujoco.MjModel`` (for further checks: a keyframe's name)."""
    from simbackend.errors import ModelLoadError, SimBackendError
    from simbackend.models import compile_model
    from simbackend.options import MODEL_OPTIONS

    options = {k: v for k, v in (build.options if build is not None else {}).items() if k in MODEL_OPTIONS}
    try:
        return compile_model(model, **options)
    except ModelLoadError as e:
        raise fail(f"{flag}: {e}", code=2) from None
    except SimBackendError as e:
        raise fail(str(e), code=2) from None


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=version_callback, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """One contract between robot-learning code and physics engines."""


def load_plan(dr_path: str | None, num_envs: int, flag: str = "--dr") -> Any:
    """The ``--dr`` plan (or ``flag``'s), checked before anything is built (exit 2), or None."""
    if not dr_path:
        return None
    from simbackend.errors import SimBackendError
    from simbackend.randomization import IntervalScheduler, RandomizationPlan

    try:
        plan = RandomizationPlan.load(dr_path)
        if plan.phase_terms("interval"):
            IntervalScheduler(plan, num_envs)  # checks every interval term has its schedule
    except (SimBackendError, ValueError, TypeError) as e:
        raise fail(f"{flag}: {e}", code=2) from None
    return plan


def start_plan(backend: Any, plan: Any, dr_path: str | None) -> tuple[Any, dict | None]:
    """Apply a plan's init terms and a reset of every env with its reset terms; the interval
    scheduler (or None) and the figures to report."""
    if plan is None:
        return None, None
    from simbackend.errors import SimBackendError
    from simbackend.randomization import IntervalScheduler

    try:
        t_dr = time.perf_counter()
        backend.apply_init_randomization(plan)
        if plan.phase_terms("reset"):
            backend.set_state(None, backend.get_env_default_qpos(), None, randomization=plan)
        init_s = time.perf_counter() - t_dr
        scheduler = IntervalScheduler(plan, backend.num_envs) if plan.phase_terms("interval") else None
    except (SimBackendError, ValueError, TypeError) as e:
        raise fail(f"--dr: {e}") from None
    console.print(
        Text(
            f"domain randomization: {len(plan.terms)} terms from {dr_path},"
            f" init and reset applied in {init_s * 1e3:.1f} ms"
        )
    )
    return scheduler, {"plan": dr_path, "terms": len(plan.terms), "init_s": init_s, "interval_applications": 0}


class RandomControls:
    """Uniform random controls within each actuator's ctrl range ([-1, 1] where unlimited), from a
    torch generator seeded with ``seed``; ``zero=True`` gives zeros. Calling it gives the next ``(N, nu)``
    (``None`` for a model without actuators)."""

    def __init__(self, backend: Any, seed: int, zero: bool = False):
        import torch

        dev = backend.device
        self.shape = (backend.num_envs, backend.num_actuators)
        ctrl_range = backend.get_actuator_ctrl_range().to(dev)
        low, high = ctrl_range[:, 0].clone(), ctrl_range[:, 1].clone()
        unlimited = ~(torch.isfinite(low) & torch.isfinite(high))
        low[unlimited], high[unlimited] = -1.0, 1.0
        self.low, self.span, self.zero = low, high - low, zero
        self.gen = torch.Generator(device=dev)
        self.gen.manual_seed(seed)

    def __call__(self) -> Any:
        import torch

        if not self.shape[1]:
            return None
        if self.zero:
            return torch.zeros(self.shape, device=self.low.device)
        return self.low + self.span * torch.rand(self.shape, generator=self.gen, device=self.low.device)


# ----------------------------------------------------------------------
# outputs: checked before anything is built, written under a temporary name, moved into place at the end
# ----------------------------------------------------------------------
def overwrite_option() -> Any:
    """The ``--overwrite`` flag of a command that writes files (one definition for every command)."""
    return typer.Option(
        False,
        "--overwrite",
        help="Replace output files (or an output folder) that already exist; without it an existing output stops"
        " the command at once (exit 2). Either way outputs are written under a temporary name and moved into"
        " place only when the command succeeds, so a failed or interrupted run leaves an earlier file as it was.",
    )


def _refuse_existing(path: str, flag: str, overwrite: bool) -> None:
    if not overwrite and os.path.lexists(path):
        raise fail(f"{flag}: {path} exists; give --overwrite to replace it", code=2)


def check_output(path: str, flag: str, suffixes: tuple[str, ...], overwrite: bool = False) -> None:
    """Fail at once (exit 2) for an output file with the wrong suffix, in a missing folder, or that
    exists without ``--overwrite``."""
    from simbackend.errors import SimBackendError
    from simbackend.playback.recording import check_output_path

    try:
        check_output_path(path, flag, suffixes)
    except SimBackendError as e:
        raise fail(str(e), code=2) from None
    _refuse_existing(path, flag, overwrite)


def check_writable(path: str, flag: str = "--json", overwrite: bool = False) -> None:
    """Fail at once (exit 2) when ``path`` cannot be written, instead of after a long run, or exists
    without ``--overwrite``."""
    target = os.path.abspath(path)
    parent = os.path.dirname(target) or "."
    if os.path.isdir(target):
        raise fail(f"{flag}: {path} is a folder, not a file", code=2)
    if not os.path.isdir(parent):
        raise fail(f"{flag}: the folder {parent} does not exist", code=2)
    if not os.access(parent, os.W_OK) or (os.path.exists(target) and not os.access(target, os.W_OK)):
        raise fail(f"{flag}: {path} is not writable", code=2)
    _refuse_existing(path, flag, overwrite)


def check_output_folder(path: str, flag: str = "--out", overwrite: bool = False, make_parents: bool = False) -> None:
    """Fail at once (exit 2) for an output folder that is a file, that holds files without
    ``--overwrite`` (an empty folder is taken), whose parent folder does not exist (as for every output:
    a missing folder is refused, not created), or whose parent cannot be written. ``make_parents``: a
    default path whose missing parents :func:`staged_folder` makes (``runs/``); the nearest existing
    one must be writable."""
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise fail(f"{flag}: {path} is a file, not a folder", code=2)
    if target.is_dir() and any(target.iterdir()):
        _refuse_existing(path, flag, overwrite)
    parent = target.absolute().parent
    if not make_parents and not parent.is_dir():
        raise fail(f"{flag}: folder {str(target.parent)!r} does not exist", code=2)
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise fail(f"{flag}: {path} cannot be created ({parent} is not a writable folder)", code=2)


def check_paths_apart(
    outputs: Sequence[tuple[str, str | None]],
    inputs: Sequence[tuple[str, str | None]] = (),
    folders: Collection[str] = (),
) -> None:
    """Fail at once (exit 2), before any work, when two outputs are one path (the one moved into place last
    would replace the other), when an output is one of the files the command reads, or when an output or an
    input lies in an output folder (``folders``: the flags of ``outputs`` that are folders, replaced as a
    whole). ``outputs`` and ``inputs`` are ``(flag, path)`` pairs (``None``: not given); paths are compared
    resolved (``..``, symbolic links)."""
    given = [(flag, path, Path(path).resolve()) for flag, path in outputs if path]
    for i, (flag, path, where) in enumerate(given):
        for other, _, there in given[:i]:
            if where == there:
                raise fail(f"{flag}: {path} is also {other}'s output; give each output its own path", code=2)
        for other, other_path in inputs:
            if other_path and Path(other_path).resolve() == where:
                raise fail(f"{flag}: {path} is also {other} ({other_path}), which the command reads", code=2)
    for flag, path, where in given:
        if flag not in folders:
            continue
        inside = [(f, p, w) for f, p, w in given if f != flag] + [(f, p, Path(p).resolve()) for f, p in inputs if p]
        for other, other_path, there in inside:
            if where in there.parents:
                raise fail(
                    f"{flag}: {other} {other_path} lies in the folder {path}, which the command replaces as a whole",
                    code=2,
                )


def _temporary_name(path: str, tag: str = "partial") -> str:
    """A name in the folder of ``path``, hidden, unique to this run, with the same suffix (the writers
    choose their format by it): ``run.h5`` -> ``.run.partial-1234-9f3a2c.h5``."""
    p = Path(path)
    return str(p.with_name(f".{p.stem}.{tag}-{os.getpid()}-{secrets.token_hex(3)}{p.suffix}"))


def _succeeded(error: BaseException) -> bool:
    return isinstance(error, typer.Exit) and error.exit_code == 0


@contextlib.contextmanager
def staged_outputs(*paths: str | None) -> Iterator[list[str | None]]:
    """Temporary paths for the output files ``paths`` (``None`` gives ``None``), in their folders.

    The command writes the temporary files; when the block ends normally each
    one written is moved onto its output with ``os.replace`` (atomic: the
    output is the earlier file or the new one, never half of one). When the
    block raises (a failure, Ctrl-C, a non-zero ``typer.Exit``) the temporary
    files are removed and every earlier output is left as it was.
    """
    temps = [None if p is None else _temporary_name(p) for p in paths]
    try:
        yield temps
    except BaseException as e:
        if not _succeeded(e):
            for temp in temps:
                if temp is not None and os.path.lexists(temp):
                    os.remove(temp)
            raise
        _commit(paths, temps)
        raise
    _commit(paths, temps)


def _commit(paths: tuple[str | None, ...], temps: list[str | None]) -> None:
    for path, temp in zip(paths, temps, strict=True):
        if path is not None and temp is not None and os.path.exists(temp):
            os.replace(temp, path)


@contextlib.contextmanager
def staged_folder(path: str, make_parents: bool = False) -> Iterator[str]:
    """A temporary folder beside the output folder ``path``, made now (``make_parents``: with the
    missing parent folders of a default path, see :func:`check_output_folder`).

    When the block ends normally the temporary folder takes the place of
    ``path`` (an earlier folder there is removed only once the new one is in
    place); when it raises, the temporary folder is removed and an earlier
    ``path`` is left as it was.
    """
    import shutil

    target = Path(path)
    if make_parents:
        target.absolute().parent.mkdir(parents=True, exist_ok=True)
    temp = _temporary_name(str(target))
    os.mkdir(temp)  # with the permissions a folder made by hand gets (mkdtemp's are 0700)
    try:
        yield temp
    except BaseException as e:
        if not _succeeded(e):
            shutil.rmtree(temp, ignore_errors=True)
            raise
        _commit_folder(target, temp)
        raise
    _commit_folder(target, temp)


def _commit_folder(target: Path, temp: str) -> None:
    import shutil

    if not target.exists():
        os.rename(temp, target)
        return
    aside = _temporary_name(str(target), "replaced")
    os.rename(target, aside)
    os.rename(temp, target)
    shutil.rmtree(aside, ignore_errors=True)
