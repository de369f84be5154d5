"""pytest plugin of the conformance suite (entry point ``pytest11: simbackend``).

Adds ``--sim NAME`` (the backend under test, default ``mujoco``), the fixtures
the suite uses, and the hypothesis profiles:

* ``simbackend-ci`` (loaded unless ``--hypothesis-profile`` is given):
  derandomized, bounded example counts, no deadline, no example database, so a
  run is reproducible and its time bounded.
* ``simbackend-thorough``: randomized, 10x the examples, for local hunting.

It imports no engine: backends are built through the registry.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, settings

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
        help="registered backend the conformance suite runs against (default: mujoco)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "clause(name): the contract clause a conformance test checks")
    try:
        chosen = config.getoption("hypothesis_profile")
    except ValueError:
        chosen = None
    if not chosen:
        settings.load_profile(CI_PROFILE)


def pytest_report_header(config: pytest.Config) -> str:
    return f"simbackend conformance: --sim {config.getoption('--sim')}"


@pytest.fixture(scope="session")
def sim_name(pytestconfig: pytest.Config) -> str:
    """Name of the backend under test (``--sim``), lower case and registered."""
    from simbackend.registry import available_backends

    name = str(pytestconfig.getoption("--sim")).strip().lower()
    if name not in available_backends():
        raise pytest.UsageError(
            f"--sim {name!r} is not a registered backend; registered: {', '.join(available_backends())}"
        )
    return name


@pytest.fixture
def make_sim(sim_name: str) -> Callable[..., Any]:
    """Factory ``make_sim(model, num_envs=4, **options)`` for the backend under test; closes them at teardown."""
    from simbackend.registry import make_backend

    made: list[Any] = []

    def factory(model: Any, num_envs: int = 4, **options: Any) -> Any:
        sim = make_backend(sim_name, model, num_envs, **options)
        made.append(sim)
        return sim

    yield factory
    for sim in made:
        sim.close()


@pytest.fixture(scope="session")
def capabilities(sim_name: str) -> Any:
    """The capabilities the backend under test declares."""
    from simbackend.registry import make_backend

    with make_backend(sim_name, "pendulum", 1) as sim:
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
