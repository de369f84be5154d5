"""Packaging: the core installs with its light dependencies; each heavy part is an extra, and using a part
whose extra is missing raises one error that names the extra.

A missing package is simulated in a fresh interpreter by ``sys.modules[name] = None`` (Python then
refuses to import it), so these tests run where every extra is installed.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: what must never be a base dependency: engines, training, playback and test tools
HEAVY = (
    "mujoco",
    "sapien",
    "rsl-rl-lib",
    "gymnasium",
    "h5py",
    "imageio",
    "matplotlib",
    "tensorboard",
    "pytest",
    "hypothesis",
    "tqdm",
)
#: every optional top-level package
OPTIONAL = (
    "mujoco",
    "sapien",
    "gymnasium",
    "rsl_rl",
    "tensordict",
    "h5py",
    "imageio",
    "imageio_ffmpeg",
    "matplotlib",
    "tqdm",
    "pytest",
    "hypothesis",
)


def _python(code: str, blocked: tuple[str, ...]) -> subprocess.CompletedProcess:
    prelude = "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in blocked)
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "MUJOCO_GL": "egl"},
    )


def test_base_dependencies_are_light_and_extras_hold_the_rest() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    base = [d.split(">")[0].split("=")[0].split("<")[0].split("[")[0].strip().lower() for d in config["dependencies"]]
    assert not set(base) & set(HEAVY), f"heavy base dependencies: {sorted(set(base) & set(HEAVY))}"
    extras = config["optional-dependencies"]
    for extra, needs in (
        ("mujoco", "mujoco"),
        ("sapien", "sapien"),
        ("train", "rsl-rl-lib"),
        ("gym", "gymnasium"),
        ("playback", "h5py"),
        ("contract", "pytest"),
    ):
        assert any(req.startswith(needs) for req in extras[extra]), f"[{extra}] should install {needs}"
    assert config["requires-python"] == ">=3.11"


def test_the_core_works_without_any_extra() -> None:
    """Contract, plans, states, registry and the CLI's help load with every optional package missing."""
    proc = _python(
        """
        import simbackend
        from simbackend import contract, engine, registry, options, state, capabilities, divergence
        from simbackend.randomization import RandomizationPlan
        from simbackend.cli import main
        print(sorted(registry.available_backends()))
    """,
        OPTIONAL,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "mujoco" in proc.stdout  # listed from its entry point, not imported


@pytest.mark.parametrize(
    "code,blocked,extra",
    [
        ("import simbackend.backends.mujoco", ("mujoco",), "mujoco"),
        ("import simbackend.backends.sapien", ("sapien",), "sapien"),
        ("import simbackend.envs.gym", ("gymnasium",), "gym"),
        ("import simbackend.envs.rsl", ("rsl_rl",), "train"),
        ("import simbackend.training", ("tqdm",), "train"),
        ("import simbackend.contract_tests.plugin", ("hypothesis",), "contract"),
        ("from simbackend.playback.recording import Recording; Recording('pyproject.toml')", ("h5py",), "playback"),
        ("import simbackend; simbackend.make_backend('mujoco', 'pendulum', 2, shards=2)", ("ray",), "ray"),
    ],
    ids=["mujoco", "sapien", "gym", "rsl", "training", "contract", "playback", "ray"],
)
def test_a_missing_extra_is_one_error_naming_it(code: str, blocked: tuple[str, ...], extra: str) -> None:
    proc = _python(
        f"""
        from simbackend.errors import MissingExtraError
        try:
            {code}
        except MissingExtraError as e:
            print("ERR", e.extra, "|", e)
    """,
        blocked,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = proc.stdout.strip()
    assert line.startswith(f"ERR {extra} |"), line or proc.stderr[-2000:]
    assert f"pip install 'simbackend[{extra}]'" in line and "\n" not in line


def test_make_backend_without_the_engine_names_the_extra() -> None:
    proc = _python(
        """
        from simbackend import make_backend
        try:
            make_backend("mujoco", "pendulum", 1)
        except Exception as e:
            print(type(e).__name__, "|", e)
    """,
        ("mujoco",),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "simbackend[mujoco]" in proc.stdout, proc.stdout


def test_the_model_compiler_without_mujoco_names_the_extra() -> None:
    """simbackend.models imports without MuJoCo (the core imports it); compiling, loading, describing or
    exporting a model then raises one MissingExtraError naming the mujoco extra."""
    proc = _python(
        """
        from simbackend.errors import MissingExtraError
        from simbackend import models
        print(len(models.builtin_models()) > 0)
        calls = {
            "compile_model": lambda: models.compile_model("pendulum"),
            "model_info": lambda: models.model_info(None),
            "export_mjcf": lambda: models.export_mjcf("pendulum", "."),
            "describe_source": lambda: models.describe_source("pendulum"),
            "model_from_bytes": lambda: models.model_from_bytes(b""),
        }
        for name, call in calls.items():
            try:
                call()
            except MissingExtraError as e:
                print(name, "ERR", e.extra, "|", e)
    """,
        ("mujoco",),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == "True", proc.stdout
    assert len(lines) == 6, proc.stdout or proc.stderr[-2000:]
    for line in lines[1:]:
        assert " ERR mujoco |" in line and "pip install 'simbackend[mujoco]'" in line, line
