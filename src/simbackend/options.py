"""Construction options: one set every backend accepts, plus per-engine blocks.

``make_backend(sim, model, num_envs, *, device=None, seed=0, **options)`` takes
the same keyword options on every backend, so that changing ``sim`` is the
only edit needed to move code between engines:

========================  ===========================  ===========================================
option                    value                        meaning
========================  ===========================  ===========================================
``nthread``               int >= 0 (default 0)         at most this many CPU threads step the
                                                       physics; 0: as many as the engine can use
``solver_iterations``     int >= 1 or None             constraint-solver iterations (None: the
                                                       model's / engine's own default)
``timestep``              float > 0 or None            physics substep in seconds, replacing the
                                                       model's ``opt.timestep`` (None: keep it)
``package_dirs``          path or sequence of paths    where ``package://NAME/...`` URIs of a
                                                       URDF resolve (see :mod:`simbackend.models`)
``actuators``             sequence of specs            actuators added to the model before it is
                                                       compiled (a URDF has none)
``fuse_static``           True, False or None (None)   let MuJoCo fuse bodies welded to their parent;
                                                       None follows the file (a URDF's links are kept)
``shards``                int >= 1 or None (None)      run the envs in this many Ray actors, each an
                                                       ordinary backend of about N/K envs (None: in
                                                       this process); see :mod:`simbackend.sharding`
``sharding``              dict                         the shards' options: ``address``, ``restart``,
                                                       ``timeout``, ``pool``, ``cpus``
                                                       (:data:`SHARDING_OPTIONS`)
``deferred_checks``       True, False or None (None)   check input values on the device and report
                                                       a bad one at the next call, as a GPU backend
                                                       does (None: on for GPU backends); True on a
                                                       CPU backend runs a GPU training loop's code
                                                       path, to count its host reads on the CPU
``contact_sensing``       True or False (False)        compute each body's net contact force every
                                                       substep (``get_body_contact_force_w``); off by
                                                       default, as it costs MuJoCo a pass per substep
``<engine name>``         dict                         options of that engine only; blocks named
                                                       after other registered engines are ignored
========================  ===========================  ===========================================

An engine block is keyed by a registered backend name, e.g.
``make_backend(sim, "arm7", 64, nthread=2, sapien={"solver": "tgs"},
mujoco={"integrator": "implicitfast"})`` works for ``sim`` = ``"mujoco"`` and
``"sapien"`` alike. Each backend declares its block's keys in
``engine_options`` (a mapping of :class:`EngineOption`), and the core
validates them with messages naming ``<engine>.<key>``.

The model options (``package_dirs``, ``actuators``, ``fuse_static``) are passed
unchanged to :func:`simbackend.models.compile_model`, which validates them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from simbackend import checks
from simbackend.errors import ArgumentTypeError, InvalidArgumentError

#: options every backend accepts (documented in the module docstring and docs/usage.md)
COMMON_OPTIONS = (
    "nthread",
    "solver_iterations",
    "timestep",
    "package_dirs",
    "actuators",
    "fuse_static",
    "shards",
    "sharding",
    "deferred_checks",
    "contact_sensing",
)
#: the subset passed to the model compiler
MODEL_OPTIONS = ("package_dirs", "actuators", "fuse_static")


@dataclass(frozen=True)
class EngineOption:
    """One key of an engine's option block.

    Attributes:
        default: value when the key is not given.
        check: ``check(value, argument) -> value`` validates (and may normalise)
            a given value, raising a contract error naming ``argument``.
        doc: one line for tables and error messages.
    """

    default: Any
    check: Callable[[Any, str], Any]
    doc: str = ""


@dataclass(frozen=True)
class BackendOptions:
    """Validated construction options of one backend.

    ``engine`` holds the backend's own block with every key present (defaults
    filled in); ``model`` the keyword arguments for ``compile_model``.
    """

    nthread: int = 0
    solver_iterations: int | None = None
    timestep: float | None = None
    model: Mapping[str, Any] = field(default_factory=dict)
    engine: Mapping[str, Any] = field(default_factory=dict)
    shards: int | None = None
    sharding: Mapping[str, Any] = field(default_factory=dict)
    deferred_checks: bool | None = None
    contact_sensing: bool = False


# ----------------------------------------------------------------------
# value checks, shared by the core and the engines' blocks
# ----------------------------------------------------------------------
def check_int(value: Any, argument: str, *, minimum: int = 0, maximum: int | None = None) -> int:
    """An integer in ``[minimum, maximum]`` (``bool`` and floats refused); :func:`simbackend.checks.integer`."""
    return checks.integer(value, argument, minimum=minimum, maximum=maximum)


def check_positive_float(value: Any, argument: str) -> float:
    """A finite real number > 0; :func:`simbackend.checks.real`."""
    return checks.real(value, argument, minimum=0.0, above=True)


def check_bool(value: Any, argument: str) -> bool:
    """``True`` or ``False`` (numbers and strings refused: ``"false"`` is truthy)."""
    return checks.boolean(value, argument)


def check_choice(*choices: str) -> Callable[[Any, str], str]:
    """A check accepting one of ``choices`` (strings, case-insensitive)."""

    def check(value: Any, argument: str) -> str:
        return checks.choice(value, argument, choices, case_sensitive=False)

    return check


def optional(check: Callable[[Any, str], Any]) -> Callable[[Any, str], Any]:
    """``check`` that also accepts ``None``."""

    def wrapped(value: Any, argument: str) -> Any:
        return None if value is None else check(value, argument)

    return wrapped


def _check_address(value: Any, argument: str) -> str:
    if not isinstance(value, str):
        raise ArgumentTypeError(
            f"{argument}: expected 'auto', 'HOST:PORT' or 'ray://HOST:PORT', got {type(value).__name__} {value!r}"
        )
    if not value.strip():
        raise InvalidArgumentError(f"{argument}: expected 'auto', 'HOST:PORT' or 'ray://HOST:PORT', got {value!r}")
    return value.strip()


def _check_cpus(value: Any, argument: str) -> float:
    return checks.real(value, argument, minimum=0.0)


#: the keys of ``sharding={...}`` (the options of a sharded backend, ``shards=K``)
SHARDING_OPTIONS: Mapping[str, EngineOption] = {
    "address": EngineOption(
        None, optional(_check_address), "Ray cluster to join ('auto', 'HOST:PORT'); None: start Ray in this process"
    ),
    "restart": EngineOption(
        False, check_bool, "restart a shard that dies and restore its envs from the state it last returned"
    ),
    "timeout": EngineOption(300.0, check_positive_float, "seconds a shard may take to answer one call"),
    "pool": EngineOption(False, check_bool, "on close, keep the actors for the next sharded backend of this process"),
    "cpus": EngineOption(
        None, optional(_check_cpus), "CPUs each shard reserves in Ray (None: 0 locally, 1 on a cluster)"
    ),
}

#: the scalar common options: ``check(value, argument) -> value`` (the command line checks its flags with these)
SCALAR_OPTIONS: Mapping[str, Callable[[Any, str], Any]] = {
    "nthread": lambda v, a: check_int(v, a, minimum=0),
    "solver_iterations": optional(lambda v, a: check_int(v, a, minimum=1, maximum=100_000)),
    "timestep": optional(check_positive_float),
    "shards": optional(lambda v, a: check_int(v, a, minimum=1, maximum=4096)),
    "deferred_checks": optional(check_bool),
    "contact_sensing": check_bool,
}


def unknown_option_error(
    where: str, unknown: list[str], known: Any, accepted: str | None = None
) -> InvalidArgumentError:
    """The error for option keys ``unknown`` that ``where`` does not take (``where=""``: the top level).

    The message names each key (``where.key``) and the closest of the ``known``
    keys, or, when none is close, every accepted key (``accepted``, else ``known``).
    """
    import difflib

    known = sorted(str(k) for k in known)
    prefix = f"{where}." if where else ""
    named = ", ".join(prefix + str(k) for k in unknown)
    close: list[str] = []
    for key in unknown:
        close += [k for k in difflib.get_close_matches(str(key), known, n=3, cutoff=0.6) if k not in close]
    if close:
        hint = f"closest known keys: {', '.join(prefix + k for k in close)}"
    elif known or accepted:
        hint = f"accepted: {accepted or ', '.join(prefix + k for k in known)}"
    else:
        hint = f"{where or 'it'} takes no options"
    return InvalidArgumentError(f"{named}: unknown option{'s' if len(unknown) > 1 else ''}; {hint}")


def _parse_sharding(options: Mapping[str, Any]) -> tuple[int | None, dict[str, Any]]:
    shards = SCALAR_OPTIONS["shards"](options.get("shards"), "shards")
    block = options.get("sharding") or {}
    if not isinstance(block, Mapping):
        raise ArgumentTypeError(f"sharding: expected a dict of the shards' options, got {type(block).__name__}")
    bad = [str(k) for k in block if k not in SHARDING_OPTIONS]
    if bad:
        raise unknown_option_error("sharding", bad, SHARDING_OPTIONS)
    if block and shards is None:
        raise InvalidArgumentError("sharding: given without shards=K (the number of shards)")
    out = {
        k: spec.check(block[k], f"sharding.{k}") if k in block else spec.default for k, spec in SHARDING_OPTIONS.items()
    }
    return shards, out


# ----------------------------------------------------------------------
# parsing
# ----------------------------------------------------------------------
def parse_options(
    backend: str | None,
    options: Mapping[str, Any],
    engine_options: Mapping[str, EngineOption],
    *,
    other_engines: tuple[str, ...] | None = None,
) -> BackendOptions:
    """Validate ``**options`` given to backend ``backend``.

    The errors follow the contract's (docs/conventions.md): an unknown key
    raises :class:`InvalidArgumentError` naming it and the closest known keys,
    a value of the wrong type :class:`ArgumentTypeError` (a scalar's,
    :class:`~simbackend.errors.ScalarTypeError`: both), a value out of range
    :class:`InvalidArgumentError`; each message names the option
    (``sharding.timeout``, ``sapien.solver``).

    Args:
        backend: the backend's registered name (its block's key); ``None``
            checks every option but an engine block (:func:`check_options`).
        options: the keyword options as given.
        engine_options: the keys of the backend's own block.
        other_engines: names whose blocks are ignored; default: every
            registered backend (read from the registry).

    Raises:
        InvalidArgumentError: an unknown option, or a value out of range, naming the option.
        ArgumentTypeError: a value of the wrong type, naming the option.
    """
    if other_engines is None:
        from simbackend.plugins import available_backends

        other_engines = available_backends()
    own = backend.lower() if backend is not None else None
    unknown = [str(k) for k in options if k not in COMMON_OPTIONS and k != own and k not in other_engines]
    if unknown:
        example = f"{own}={{{', '.join(sorted(engine_options)) or 'none'}}}" if own else "ENGINE={...}"
        raise unknown_option_error(
            "",
            unknown,
            [*COMMON_OPTIONS, *other_engines],
            f"{', '.join(COMMON_OPTIONS)} and per-engine blocks keyed by backend name (e.g. {example})",
        )
    for k, v in options.items():
        if k not in COMMON_OPTIONS and not isinstance(v, Mapping):
            raise ArgumentTypeError(
                f"{k}: an engine block must be a dict of that engine's options, got {type(v).__name__}"
            )
    block = dict(options.get(own) or {}) if own else {}
    bad = [str(k) for k in block if k not in engine_options]
    if bad:
        raise unknown_option_error(str(own), bad, engine_options)
    engine = {}
    for key, spec in engine_options.items():
        engine[key] = spec.check(block[key], f"{own}.{key}") if key in block else spec.default
    nthread = SCALAR_OPTIONS["nthread"](options.get("nthread", 0), "nthread")
    iters = SCALAR_OPTIONS["solver_iterations"](options.get("solver_iterations"), "solver_iterations")
    timestep = SCALAR_OPTIONS["timestep"](options.get("timestep"), "timestep")
    model = {k: options[k] for k in MODEL_OPTIONS if k in options}
    shards, sharding = _parse_sharding(options)
    return BackendOptions(
        nthread=nthread,
        solver_iterations=iters,
        timestep=timestep,
        model=model,
        engine=engine,
        shards=shards,
        sharding=sharding,
        deferred_checks=SCALAR_OPTIONS["deferred_checks"](options.get("deferred_checks"), "deferred_checks"),
        contact_sensing=SCALAR_OPTIONS["contact_sensing"](options.get("contact_sensing", False), "contact_sensing"),
    )


def check_options(backend: str | None, options: Mapping[str, Any]) -> BackendOptions:
    """Validate ``options`` as ``make_backend(backend, ...)`` would, without building anything.

    Every common option, the ``sharding`` block, the model options
    (``package_dirs``, ``actuators``, ``fuse_static``, checked as
    :func:`simbackend.models.compile_model` checks them, without compiling) and,
    when ``backend`` names a registered engine class and the options hold its
    block, that block (the engine's module is imported only then). An engine
    that cannot even be imported is left to ``make_backend`` to report.
    The command line calls this before it builds; the errors are
    :func:`parse_options`'s.
    """
    from simbackend.plugins import available_backends

    engine_options: Mapping[str, EngineOption] = {}
    name, others = None, available_backends()
    if backend is not None and backend.lower() in others and backend.lower() in options:  # its block: its keys
        from simbackend.plugins import get_backend_factory

        try:
            factory = get_backend_factory(backend)
        except Exception:  # a plugin that fails to import: make_backend says so when it is built
            factory = None
        declared = getattr(factory, "options", None)  # an engine class's block (simbackend.engine.Engine.options)
        if isinstance(factory, type) and isinstance(declared, Mapping):
            name, engine_options = backend, declared
    elif backend is not None:  # not registered (yet: a pytest plugin may register it): its block is not judged
        others = (*others, backend.lower())
    parsed = parse_options(name, options, engine_options, other_engines=others)
    from simbackend.models.actuators import actuator_specs
    from simbackend.models.compiler import check_fuse_static
    from simbackend.models.packages import package_dirs_option

    package_dirs_option(options.get("package_dirs"))
    actuator_specs(options.get("actuators"))
    check_fuse_static(options.get("fuse_static"))
    return parsed


def parse_cli_option(text: str, argument: str = "--option") -> tuple[str, Any]:
    """``KEY=VALUE`` from the command line into ``(key, value)``.

    ``VALUE`` is read as JSON where it parses (``2``, ``1e-3``, ``true``,
    ``["a", "b"]``, ``{"joints": ".*"}``), else kept as a string. A dotted key
    ``ENGINE.KEY`` puts the value into that engine's block: merge the pairs
    with :func:`merge_cli_options`.
    """
    import json

    if "=" not in text:
        raise InvalidArgumentError(f"{argument}: expected KEY=VALUE, got {text!r}")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key:
        raise InvalidArgumentError(f"{argument}: empty key in {text!r}")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return key, value


def merge_cli_options(pairs: list[tuple[str, Any]], argument: str = "--option") -> dict[str, Any]:
    """Options dict from ``(key, value)`` pairs; ``engine.key`` pairs go into ``{engine: {key: value}}``."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if "." in key:
            engine, sub = key.split(".", 1)
            block = out.setdefault(engine, {})
            if not isinstance(block, dict):
                raise InvalidArgumentError(f"{argument}: {engine!r} given both as a value and as an engine block")
            block[sub] = value
        else:
            out[key] = value
    return out
