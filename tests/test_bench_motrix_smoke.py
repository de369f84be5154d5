"""Smoke test of benchmarks/bench_motrix.py: its overhead section runs and writes well-formed JSON.

No speed target is asserted (the machines are shared and noisy): only that the
section runs end to end in ``--quick`` mode (small N, few short rounds) and that
its JSON record has the expected structure with positive measurements. Skipped
when the MotrixSim plugin (``backends/motrix``, a separate distribution) is not
installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("simbackend_motrix")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_motrix.py"


@pytest.fixture(scope="module")
def overhead_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench_motrix") / "motrix.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--only", "overhead", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, (
        f"bench_motrix.py failed:\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    )
    return proc, json.loads(out.read_text()), out


def test_record_holds_machine_settings_and_only_the_overhead_section(overhead_run):
    _, data, out = overhead_run
    assert set(data) >= {"machine", "settings", "sections", "runtime_s", "all_targets_met", "out"}
    assert data["out"] == str(out.resolve())
    m = data["machine"]
    for key in ("motrixsim", "simbackend_motrix", "mujoco", "torch", "numpy", "python"):
        assert isinstance(m[key], str) and m[key], key
    s = data["settings"]
    assert s["quick"] is True and s["rounds"] == 3
    assert s["n_overhead"] <= 64, "--quick must keep the sizes small"
    assert set(data["sections"]) == {"overhead"}


def test_overhead_section_compares_plugin_and_bare_loop(overhead_run):
    _, data, _ = overhead_run
    sec = data["sections"]["overhead"]
    assert "error" not in sec, sec.get("error")
    assert set(sec) >= {"params", "same_work_check", "cases", "figures", "runtime_s", "machine_load"}
    s, rounds = data["settings"], data["settings"]["rounds"]
    assert set(sec["params"]["models"]) == {"arm7", "ant"}
    assert sec["params"]["models"]["ant"].endswith("ant.xml")
    assert set(sec["cases"]) == {f"{m},nsteps={k}" for m in s["overhead_models"] for k in s["nsteps"]}
    for name, case in sec["cases"].items():
        assert set(case) >= {"model", "num_envs", "nsteps", "variants", "ratio_plugin_vs_bare", "figure"}, name
        assert case["num_envs"] == s["n_overhead"]
        assert set(case["variants"]) == {"plugin", "bare"}, name
        for v in case["variants"].values():
            assert set(v) >= {
                "label",
                "iters_per_round",
                "sec_per_call",
                "ms_per_call",
                "rate",
                "rate_unit",
                "samples_sec_per_call",
            }
            assert v["rate_unit"] == "env-steps/s"
            assert v["rate"] == pytest.approx(case["num_envs"] / v["sec_per_call"])
            assert len(v["samples_sec_per_call"]) == rounds and all(x > 0 for x in v["samples_sec_per_call"])
        ratio = case["ratio_plugin_vs_bare"]
        assert len(ratio["samples"]) == rounds
        assert 0 < ratio["min"] <= ratio["median"] <= ratio["max"]
        fig = case["figure"]
        assert fig["target"] == pytest.approx(0.9) and fig["op"] == ">="
        assert fig["value"] == ratio["median"]
        assert fig["meets_target"] is (fig["value"] >= 0.9)
    assert sec["figures"] == [c["figure"] for c in sec["cases"].values()]
    assert data["all_targets_met"] is all(f["meets_target"] for f in sec["figures"])


def test_bare_loop_does_the_plugins_work(overhead_run):
    """From the same state, the same ctrls give the bare Motrix loop the plugin's outputs, bit for bit.

    Both step the plugin's own Motrix model, on two data batches reset from the
    same state, so a difference means the bare loop does other work (a missing
    forward kinematics, a wrong column order or quaternion convention).
    """
    _, data, _ = overhead_run
    checks = data["sections"]["overhead"]["same_work_check"]
    assert set(checks) == set(data["settings"]["overhead_models"])
    for model, c in checks.items():
        assert c["calls"] >= 1, model
        for key in ("qpos_max_abs_diff", "qvel_max_abs_diff", "body_pos_max_abs_diff", "body_quat_max_abs_diff"):
            assert c[key] == 0.0, (model, key, c[key])


def test_table_is_printed(overhead_run):
    proc, _, _ = overhead_run
    assert "Figures vs targets" in proc.stdout
    assert "plugin / bare Motrix loop" in proc.stdout
