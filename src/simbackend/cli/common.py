"""What the ``simbackend`` commands share: the application, its consoles, the --sim and construction flags.

:mod:`simbackend.cli.main` defines the commands on this application (and
imports :mod:`.play` and :mod:`.train`, which add theirs); every command module
imports from here, and nothing here imports a command module. Importing it
loads neither torch nor any engine.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import typer
from rich.console import Console
from rich.text import Text

import simbackend
from simbackend.registry import available_backends

#: distribution names of the engines behind the known backends (for version reports)
ENGINE_DISTRIBUTIONS = {"mujoco": ("mujoco",), "sapien": ("sapien",)}

#: model every backend is built on to read its capabilities
CAPABILITY_PROBE_MODEL = "pendulum"

app = typer.Typer(
    name="simbackend",
    help="One contract between robot-learning code and physics engines.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


# ----------------------------------------------------------------------
# --sim: a registered backend, case-insensitive
# ----------------------------------------------------------------------
def check_sim(value: str | None) -> str | None:
    """Normalise ``--sim`` to a registered lower-case name, or fail with a usage error (exit 2)."""
    if value is None:
        return None
    name = value.strip().lower()
    registered = available_backends()  # read at call time: runtime registrations count
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
    """Check the construction flags; malformed option text or an absent device is a usage error (exit 2)."""
    import json

    from simbackend.errors import SimBackendError
    from simbackend.options import merge_cli_options, parse_cli_option

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


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=version_callback, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """One contract between robot-learning code and physics engines."""


def load_plan(dr_path: str | None, num_envs: int) -> Any:
    """The ``--dr`` plan, checked before anything is built (exit 2), or None."""
    if not dr_path:
        return None
    from simbackend.errors import SimBackendError
    from simbackend.randomization import IntervalScheduler, RandomizationPlan

    try:
        plan = RandomizationPlan.load(dr_path)
        if plan.phase_terms("interval"):
            IntervalScheduler(plan, num_envs)  # checks every interval term has its schedule
    except (SimBackendError, ValueError, TypeError) as e:
        raise fail(f"--dr: {e}", code=2) from None
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


def check_output(path: str, flag: str, suffixes: tuple[str, ...]) -> None:
    """Fail at once (exit 2) for an output file with the wrong suffix or in a missing folder."""
    from simbackend.errors import SimBackendError
    from simbackend.playback.recording import check_output_path

    try:
        check_output_path(path, flag, suffixes)
    except SimBackendError as e:
        raise fail(str(e), code=2) from None


def check_writable(path: str) -> None:
    """Fail at once (exit 2) when ``path`` cannot be written, instead of after a long run."""
    target = os.path.abspath(path)
    parent = os.path.dirname(target) or "."
    if os.path.isdir(target):
        raise fail(f"--json: {path} is a folder, not a file", code=2)
    if not os.path.isdir(parent):
        raise fail(f"--json: the folder {parent} does not exist", code=2)
    if not os.access(parent, os.W_OK) or (os.path.exists(target) and not os.access(target, os.W_OK)):
        raise fail(f"--json: {path} is not writable", code=2)
