"""Backend registry: entry points, runtime registration, and a third-party backend found by entry point alone."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from simbackend.errors import InvalidArgumentError, SimBackendError, UnknownBackendError
from simbackend.registry import (
    ENTRY_POINT_GROUP,
    available_backends,
    get_backend_factory,
    make_backend,
    register_backend,
    unregister_backend,
)

SCRIPT = Path(sys.executable).with_name("simbackend")

#: a few fast conformance tests that exist in contract_tests/ (test_cli checks the names)
FAST_SELECTION = "test_name_tables_and_ids or test_pendulum_tip_and_body"
#: a conformance test that must catch quaternions returned xyzw instead of wxyz
QUAT_ORDER_TEST = "test_quaternions_are_wxyz_hinge_about_z"

THIRDPARTY_MODULE = '''
"""An engine shipped by another package, known to simbackend only through its entry point."""
import numpy as np

from simbackend.backends.mujoco import MuJoCoEngine


class ThirdPartyBackend(MuJoCoEngine):
    name = "thirdparty"


class ThirdPartyXyzw(MuJoCoEngine):
    """Broken on purpose: body and site quaternions in xyzw order."""

    name = "thirdparty-xyzw"

    def body_pose(self, ids):
        pos, quat = super().body_pose(ids)
        return pos, np.roll(quat, -1, axis=-1)

    def site_pose(self, ids):
        pos, quat = super().site_pose(ids)
        return pos, np.roll(quat, -1, axis=-1)
'''

THIRDPARTY_ENTRY_POINTS = f"""
[{ENTRY_POINT_GROUP}]
thirdparty = thirdparty_sim:ThirdPartyBackend
ThirdParty-XYZW = thirdparty_sim:ThirdPartyXyzw
thirdparty-missing = thirdparty_sim_not_installed:Backend
"""


@pytest.fixture(scope="module")
def thirdparty_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder that looks like site-packages of another distribution: a module and its dist-info."""
    root = tmp_path_factory.mktemp("thirdparty")
    (root / "thirdparty_sim.py").write_text(THIRDPARTY_MODULE)
    info = root / "thirdparty_sim-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: thirdparty_sim\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(THIRDPARTY_ENTRY_POINTS)
    return root


@pytest.fixture
def thirdparty_on_path(thirdparty_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(thirdparty_dir))
    yield thirdparty_dir
    sys.modules.pop("thirdparty_sim", None)


def _run_script(args: list[str], thirdparty_dir: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("SIMBACKEND_SIM", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(thirdparty_dir), env.get("PYTHONPATH")) if p)
    env["COLUMNS"] = "250"
    return subprocess.run([str(SCRIPT), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


# ----------------------------------------------------------------------
# listing and unknown names
# ----------------------------------------------------------------------
def test_available_backends_lists_mujoco() -> None:
    names = available_backends()
    assert isinstance(names, tuple)
    assert "mujoco" in names
    assert list(names) == sorted(names)
    assert all(n == n.lower() for n in names)


def test_unknown_backend_lists_registered() -> None:
    with pytest.raises(UnknownBackendError) as info:
        get_backend_factory("no-such-engine")
    err = info.value
    assert isinstance(err, SimBackendError) and isinstance(err, LookupError)
    assert "no-such-engine" in str(err)
    assert "mujoco" in str(err)
    assert "mujoco" in err.registered
    with pytest.raises(UnknownBackendError, match="registered backends: .*mujoco"):
        make_backend("no-such-engine", "pendulum", 1)


def test_backend_names_are_case_insensitive() -> None:
    from simbackend.backends.mujoco import MuJoCoEngine
    from simbackend.contract import SimBackend

    assert get_backend_factory("MuJoCo") is MuJoCoEngine
    with make_backend("MUJOCO", "pendulum", 2) as sim:
        assert isinstance(sim, SimBackend) and isinstance(sim.engine, MuJoCoEngine)
        assert sim.num_envs == 2


@pytest.mark.parametrize("bad", ["", "   ", None, 3])
def test_bad_backend_name_rejected(bad: Any) -> None:
    with pytest.raises(ValueError, match="backend name"):
        get_backend_factory(bad)


# ----------------------------------------------------------------------
# runtime registration
# ----------------------------------------------------------------------
def test_register_and_unregister_at_runtime() -> None:
    from simbackend.backends.mujoco import MuJoCoEngine
    from simbackend.contract import SimBackend

    def factory(model: Any, num_envs: int, **kwargs: Any) -> SimBackend:
        return SimBackend(MuJoCoEngine, model, num_envs, **kwargs)

    assert "myengine" not in available_backends()
    register_backend("MyEngine", factory)
    try:
        assert "myengine" in available_backends()
        assert get_backend_factory("myengine") is factory
        with make_backend("mYeNgInE", "pendulum", 3) as sim:
            assert isinstance(sim.engine, MuJoCoEngine) and sim.num_envs == 3
        with pytest.raises(ValueError, match="already registered"):
            register_backend("myengine", factory)
        other = lambda *a, **k: factory(*a, **k)  # noqa: E731
        register_backend("MYENGINE", other, replace=True)
        assert get_backend_factory("myengine") is other
    finally:
        unregister_backend("MyEngine")
    assert "myengine" not in available_backends()
    with pytest.raises(UnknownBackendError):
        make_backend("myengine", "pendulum", 1)
    unregister_backend("myengine")  # unregistering twice is harmless


def test_register_rejects_non_callable() -> None:
    with pytest.raises(TypeError, match="callable"):
        register_backend("not-callable", object())
    assert "not-callable" not in available_backends()


def test_runtime_registration_takes_precedence_over_entry_point() -> None:
    calls: list[tuple] = []

    def fake(*args: Any, **kwargs: Any) -> str:
        calls.append((args, kwargs))
        return "fake backend"

    register_backend("mujoco", fake)
    try:
        assert make_backend("MuJoCo", "pendulum", 1) == "fake backend"
    finally:
        unregister_backend("mujoco")
    assert len(calls) == 1
    from simbackend.backends.mujoco import MuJoCoEngine

    assert get_backend_factory("mujoco") is MuJoCoEngine  # the entry point is back


def test_make_backend_passes_arguments_through() -> None:
    calls: list[tuple] = []

    def recorder(*args: Any, **kwargs: Any) -> str:
        calls.append((args, kwargs))
        return "made"

    register_backend("recorder", recorder)
    try:
        assert make_backend("recorder", "arm7", 5, device="cpu", seed=11, nthread=1, extra="x") == "made"
        assert make_backend("recorder", "pendulum", 2) == "made"
    finally:
        unregister_backend("recorder")
    assert calls[0] == (("arm7", 5), {"device": "cpu", "seed": 11, "nthread": 1, "extra": "x"})
    assert calls[1] == (("pendulum", 2), {"device": None, "seed": 0})


def test_make_backend_options_reach_the_mujoco_backend() -> None:
    with make_backend("mujoco", "pendulum", 3, device="cpu", seed=5, nthread=1) as sim:
        assert sim.num_envs == 3
        assert sim.seed == 5
        assert str(sim.device) == "cpu"
        assert sim.engine.nthread == 1
    with pytest.raises(InvalidArgumentError, match="no_such_option: unknown option"):
        make_backend("mujoco", "pendulum", 1, no_such_option=1)


# ----------------------------------------------------------------------
# a backend living in another package, found by its entry point
# ----------------------------------------------------------------------
def test_thirdparty_entry_point_discovered(thirdparty_on_path: Path) -> None:
    names = available_backends()
    assert {"thirdparty", "thirdparty-xyzw", "thirdparty-missing"} <= set(names)  # listed lower case
    assert "thirdparty_sim" not in sys.modules  # listing does not import it
    with make_backend("ThirdParty", "pendulum", 2, seed=4) as sim:
        assert type(sim.engine).__name__ == "ThirdPartyBackend"
        assert type(sim.engine).__module__ == "thirdparty_sim"
        assert sim.name == "thirdparty"
        assert sim.num_envs == 2 and sim.seed == 4
        assert tuple(sim.get_qpos().shape) == (2, 1)


def test_entry_point_that_fails_to_import(thirdparty_on_path: Path) -> None:
    with pytest.raises(SimBackendError) as info:
        get_backend_factory("thirdparty-missing")
    err = info.value
    assert not isinstance(err, ImportError)
    msg = str(err)
    assert "thirdparty-missing" in msg
    assert "thirdparty_sim_not_installed:Backend" in msg  # names the entry point
    assert "ModuleNotFoundError" in msg
    assert isinstance(err.__cause__, ImportError)
    with pytest.raises(SimBackendError, match="thirdparty_sim_not_installed:Backend"):
        make_backend("thirdparty-missing", "pendulum", 1)


def test_thirdparty_in_cli_info(thirdparty_dir: Path, tmp_path: Path) -> None:
    proc = _run_script(["info"], thirdparty_dir, tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    # the backend's line, then its entry point and distribution on the next (info's plain layout)
    assert re.search(r"^thirdparty\s.*\n\s+thirdparty_sim:ThirdPartyBackend \(thirdparty_sim 0\.1\)", out, re.M), out
    assert "thirdparty-missing" in out
    assert "failed to load" in out and "thirdparty_sim_not_installed" in out  # shown, not fatal
    assert "Traceback" not in proc.stderr


def test_contract_suite_runs_against_thirdparty_backend(thirdparty_dir: Path, tmp_path: Path) -> None:
    proc = _run_script(["contract", "--sim", "thirdparty", "-q", "-k", FAST_SELECTION], thirdparty_dir, tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    m = re.search(r"(\d+) passed", proc.stdout)
    assert m and int(m.group(1)) >= 2, proc.stdout[-2000:]
    assert " failed" not in proc.stdout


def test_contract_suite_catches_broken_thirdparty_backend(thirdparty_dir: Path, tmp_path: Path) -> None:
    import importlib.util

    suite = Path(list(importlib.util.find_spec("simbackend.contract_tests").submodule_search_locations)[0])
    assert any(f"def {QUAT_ORDER_TEST}(" in p.read_text() for p in suite.glob("test_*.py")), (
        f"{QUAT_ORDER_TEST} is no longer in the conformance suite: update QUAT_ORDER_TEST"
    )
    proc = _run_script(
        ["contract", "--sim", "thirdparty-XYZW", "-q", "-k", QUAT_ORDER_TEST],
        thirdparty_dir,
        tmp_path,
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]  # pytest: tests failed
    assert re.search(r"1 failed", proc.stdout), proc.stdout[-2000:]
    assert QUAT_ORDER_TEST in proc.stdout
