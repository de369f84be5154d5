"""pytest plugin of the conformance suite (entry point ``pytest11: simbackend``).

Adds ``--sim NAME`` (the backend under test, default ``mujoco``; a mix of
engines such as ``mujoco,sapien`` too: :mod:`simbackend.mixing`), ``--device``
(where the backends are built; CUDA missing is a usage error) and
``--sim-option KEY=VALUE`` (construction options for every backend built),
the fixtures the suite uses, and the hypothesis profiles:

* ``simbackend-ci`` (loaded unless ``--hypothesis-profile`` is given):
  derandomized, bounded example counts, no deadline, no example database, so a
  run is reproducible and its time bounded.
* ``simbackend-thorough``: randomized, 10x the examples, for local hunting.

It imports no engine: backends are built through the registry.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

from simbackend._extras import require_extra

require_extra("pytest", "hypothesis", purpose="the conformance suite (simbackend.contract_tests)")

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

CI_PROFILE = "simbackend-ci"
THOROUGH_PROFILE = "simbackend-thorough"

settings.register_profile(
    CI_PROFILE,
    derandomize=True,
    max_examples=int(os.environ.get("SIMBACKEND_MAX_EXAMPLES", "20")),
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)
settings.register_profile(
    THOROUGH_PROFILE,
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("simbackend", "simbackend conformance suite")
    group.addoption(
        "--sim",
        action="store",
        default=os.environ.get("SIMBACKEND_SIM", "mujoco"),
        help="registered backend the conformance suite runs against (default: mujoco), or a mix of engines"
        " ('mujoco,sapien': simbackend.mixing)",
    )
    group.addoption(
        "--device",
        action="store",
        default=None,
        dest="sim_device",
        metavar="DEVICE",
        help="torch device of the backends the suite builds (cpu, cuda, cuda:1; default: the backend's)",
    )
    group.addoption(
        "--sim-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="construction option for every backend the suite builds, repeatable; VALUE is JSON where it parses,"
        " ENGINE.KEY=VALUE goes into that engine's block (a test's own options override these)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "clause(name): the contract clause a conformance test checks")
    try:
        chosen = config.getoption("hypothesis_profile")
    except ValueError:
        chosen = None
    if not chosen:
        settings.load_profile(CI_PROFILE)
    from simbackend.errors import SimBackendError

    device = config.getoption("sim_device", None)
    if device is not None:
        from simbackend.devices import require_device

        try:
            require_device(device, argument="--device")
        except SimBackendError as e:
            raise pytest.UsageError(str(e)) from e
    try:
        _suite_options(config)
    except SimBackendError as e:
        raise pytest.UsageError(str(e)) from e


def _suite_options(config: pytest.Config) -> dict[str, Any]:
    """The ``--sim-option`` pairs as construction options."""
    from simbackend.options import merge_cli_options, parse_cli_option

    texts = config.getoption("--sim-option", None) or []
    return merge_cli_options([parse_cli_option(t, "--sim-option") for t in texts], "--sim-option")


def _merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``extra`` over ``base``; engine blocks (dicts) merge key by key."""
    out = dict(base)
    for k, v in extra.items():
        out[k] = {**out[k], **v} if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def pytest_report_header(config: pytest.Config) -> str:
    extra = "".join(f" --sim-option {t}" for t in config.getoption("--sim-option", None) or [])
    device = config.getoption("sim_device", None)
    return (
        f"simbackend conformance: --sim {config.getoption('--sim')}" + (f" --device {device}" if device else "") + extra
    )


def _registered_sim(config: pytest.Config) -> str:
    """``--sim``, lower case, if it names a registered backend or a mix of registered engines
    (``mujoco,sapien``: :mod:`simbackend.mixing`), else ``pytest.UsageError``."""
    from simbackend.errors import SimBackendError
    from simbackend.mixing import is_mix, spec_engines
    from simbackend.registry import available_backends

    name = "".join(str(config.getoption("--sim")).split()).lower()
    if is_mix(name):
        try:
            spec_engines(name)
        except SimBackendError as e:
            raise pytest.UsageError(f"--sim: {e}") from e
        return name
    if name not in available_backends():
        raise pytest.UsageError(
            f"--sim: {name!r} is not a registered backend; registered backends:"
            f" {', '.join(available_backends()) or '(none)'}"
        )
    return name


def pytest_collection_finish(session: pytest.Session) -> None:
    """Refuse an unknown ``--sim`` once, before any test runs, where a collected test builds a backend.

    Checked here rather than at configure time: the plugins named with ``-p`` and the
    conftest files (which may register the backend) are loaded by then, and a pytest run
    that collects no suite test is not refused for a backend it never builds."""
    if any("sim_name" in getattr(item, "fixturenames", ()) for item in session.items):
        _registered_sim(session.config)


@pytest.fixture(scope="session")
def sim_name(pytestconfig: pytest.Config) -> str:
    """Name of the backend under test (``--sim``), lower case and registered, or a mix spec of
    registered engines (``"mujoco,sapien"``: envs shared equally at every N the suite builds)."""
    return _registered_sim(pytestconfig)


@pytest.fixture(scope="session")
def sim_engines(sim_name: str) -> tuple[str, ...]:
    """The registered engines the backend under test runs on: ``(sim_name,)``, or a mix's engines in order."""
    from simbackend.mixing import is_mix, spec_engines

    return spec_engines(sim_name) if is_mix(sim_name) else (sim_name,)


@pytest.fixture(scope="session")
def sim_device(pytestconfig: pytest.Config) -> Any:
    """The ``--device`` the suite builds backends on (``None``: the backend's default)."""
    return pytestconfig.getoption("sim_device", None)


@pytest.fixture(scope="session")
def sim_options(pytestconfig: pytest.Config) -> dict[str, Any]:
    """The ``--sim-option`` construction options given to every backend the suite builds."""
    return _suite_options(pytestconfig)


def _sim_factory(sim_name: str, sim_device: Any, sim_options: dict[str, Any]) -> Iterator[Callable[..., Any]]:
    """Yield a factory ``(model, num_envs=4, **options) -> backend``; close what it built when resumed."""
    from simbackend.registry import make_backend

    made: list[Any] = []

    def factory(model: Any, num_envs: int = 4, **options: Any) -> Any:
        sim = make_backend(sim_name, model, num_envs, device=sim_device, **_merged(sim_options, options))
        made.append(sim)
        return sim

    yield factory
    for sim in made:
        sim.close()


@pytest.fixture
def make_sim(sim_name: str, sim_device: Any, sim_options: dict[str, Any]) -> Iterator[Callable[..., Any]]:
    """Factory ``make_sim(model, num_envs=4, **options)`` for the backend under test on ``--device``,
    with ``--sim-option`` options (a test's own options merge over them); closes them at teardown."""
    yield from _sim_factory(sim_name, sim_device, sim_options)


@pytest.fixture(scope="module")
def make_module_sim(sim_name: str, sim_device: Any, sim_options: dict[str, Any]) -> Iterator[Callable[..., Any]]:
    """``make_sim`` for module-scoped fixtures (a reference computed once and shared by a file's tests):
    the backends it builds are closed when the test file is done."""
    yield from _sim_factory(sim_name, sim_device, sim_options)


@pytest.fixture(scope="session")
def capabilities(sim_name: str, sim_device: Any, sim_options: dict[str, Any]) -> Any:
    """The capabilities the backend under test declares (on ``--device``: they can depend on it)."""
    from simbackend.registry import make_backend

    with make_backend(sim_name, "pendulum", 1, device=sim_device, **sim_options) as sim:
        return sim.capabilities


@pytest.fixture
def require(capabilities: Any, sim_name: str) -> Callable[..., None]:
    """``require(name, value=None)``: skip unless the backend declares the capability.

    For boolean capabilities ``require("body_forces")``; for set-valued ones
    ``require("sensor_types", "gyro")``.
    """

    def check(name: str, value: Any = None) -> None:
        declared = getattr(capabilities, name)
        ok = bool(declared) if value is None else value in declared
        if not ok:
            what = name if value is None else f"{name}={value}"
            pytest.skip(f"backend {sim_name!r} declares capability {what} absent")

    return check
