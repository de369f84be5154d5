"""Smoke test of benchmarks/bench_mujoco.py: it runs and writes well-formed JSON.

No speed target is asserted (the machines are shared and noisy): only that the
script runs one small section end to end and that its JSON has the expected
structure with positive measurements.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_mujoco.py"


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          check=False)


@pytest.fixture(scope="module")
def jacobian_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "nested" / "bench.json"
    proc = _run("--quick", "--only", "jacobian", "--out", str(out))
    assert proc.returncode == 0, f"bench_mujoco.py failed:\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    assert out.is_file(), "the JSON was not written to --out (nor its missing parent folder created)"
    return proc, json.loads(out.read_text()), out


def test_machine_and_settings_are_recorded(jacobian_run):
    _, data, out = jacobian_run
    m = data["machine"]
    assert isinstance(m["cpu_count"], int) and m["cpu_count"] >= 1
    for key in ("mujoco", "torch", "numpy", "python"):
        assert isinstance(m[key], str) and m[key], key
    assert data["settings"]["quick"] is True
    assert data["runtime_s"] > 0
    assert data["out"] == str(out.resolve())


def test_only_the_requested_section_runs(jacobian_run):
    _, data, _ = jacobian_run
    assert set(data["sections"]) == {"jacobian"}


def test_jacobian_section_has_positive_measurements(jacobian_run):
    _, data, _ = jacobian_run
    sec = data["sections"]["jacobian"]
    assert "error" not in sec, sec.get("error")
    assert sec["params"]["num_envs"] > 0
    rounds = data["settings"]["rounds"]
    assert set(sec["variants"]) == {"step1", "jacobian", "raw_jac", "bare_step", "bare_step_jac"}
    for name, v in sec["variants"].items():
        assert v["sec_per_call"] > 0 and v["ms_per_call"] > 0 and v["rate"] > 0, name
        assert v["iters_per_round"] >= 1, name
        assert len(v["samples_sec_per_call"]) == rounds, name
        assert all(x > 0 for x in v["samples_sec_per_call"]), name
        # the median lies within its samples
        assert min(v["samples_sec_per_call"]) <= v["sec_per_call"] <= max(v["samples_sec_per_call"]), name
    frac = sec["fraction_jacobian_of_step"]
    assert 0 < frac["min"] <= frac["median"] <= frac["max"]
    assert len(frac["samples"]) == rounds
    # a cold Jacobian pays the deferred stages: it costs more than the warm one
    assert sec["fraction_cold_jacobian_of_bare_step"] > 0


def test_figures_state_value_target_and_verdict(jacobian_run):
    _, data, _ = jacobian_run
    (fig,) = data["sections"]["jacobian"]["figures"]
    assert fig["value"] > 0
    assert fig["target"] == pytest.approx(0.10)
    assert fig["op"] == "<="
    assert fig["ratio_to_target"] == pytest.approx(fig["value"] / fig["target"])
    assert fig["meets_target"] is (fig["value"] <= fig["target"])
    assert data["all_targets_met"] is fig["meets_target"]


def test_table_is_printed(jacobian_run):
    proc, _, _ = jacobian_run
    assert "Figures vs targets" in proc.stdout
    assert "jacobian" in proc.stdout


def test_unknown_section_is_rejected(tmp_path):
    out = tmp_path / "x.json"
    proc = _run("--quick", "--only", "no_such_section", "--out", str(out), timeout=60)
    assert proc.returncode != 0
    assert "no_such_section" in proc.stderr
    assert not out.exists()
