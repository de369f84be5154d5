"""Smoke tests of the benchmark scripts (bench_mujoco, bench_sapien, bench_mjwarp, bench_sharded, parity_table): they run and write well-formed output.

No speed target is asserted (the machines are shared and noisy): only that each
script runs small sections end to end and that its JSON has the expected
structure with positive measurements.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPT = BENCHMARKS / "bench_mujoco.py"
SAPIEN_SCRIPT = BENCHMARKS / "bench_sapien.py"


def _run(*args: str, timeout: float = 300, script: Path = SCRIPT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def _check_variants(variants: dict, rounds: int) -> None:
    """Every variant record holds positive per-round samples and their median."""
    for name, v in variants.items():
        assert v["sec_per_call"] > 0 and v["ms_per_call"] > 0 and v["rate"] > 0, name
        assert v["iters_per_round"] >= 1, name
        assert len(v["samples_sec_per_call"]) == rounds, name
        assert all(x > 0 for x in v["samples_sec_per_call"]), name
        # the median lies within its samples
        assert min(v["samples_sec_per_call"]) <= v["sec_per_call"] <= max(v["samples_sec_per_call"]), name


@pytest.fixture(scope="module")
def jacobian_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "nested" / "bench.json"
    proc = _run("--quick", "--only", "jacobian", "--out", str(out))
    assert proc.returncode == 0, (
        f"bench_mujoco.py failed:\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    )
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
    _check_variants(sec["variants"], rounds)
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
    proc = _run("--quick", "--only", "no_such_section", "--out", str(out), timeout=300)
    assert proc.returncode != 0
    assert "no_such_section" in proc.stderr
    assert not out.exists()


# ----------------------------------------------------------------------------
# bench_sapien.py
# ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sapien_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench_sapien") / "sapien.json"
    proc = _run("--quick", "--out", str(out), script=SAPIEN_SCRIPT)
    assert proc.returncode == 0, (
        f"bench_sapien.py failed:\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    )
    return proc, json.loads(out.read_text())


def test_sapien_step_section_compares_backend_and_bare_loop(sapien_run):
    _, data = sapien_run
    assert data["settings"]["quick"] is True
    assert isinstance(data["machine"]["sapien"], str) and data["machine"]["sapien"]
    sec = data["sections"]["step"]
    assert "error" not in sec, sec.get("error")
    rounds, sizes, nsteps = data["settings"]["rounds"], data["settings"]["n_cpu"], data["settings"]["nsteps"]
    assert set(sec["cases"]) == {f"N={n},nsteps={k}" for n in sizes for k in nsteps}
    for name, case in sec["cases"].items():
        assert set(case["variants"]) == {"backend", "bare"}, name
        _check_variants(case["variants"], rounds)
        for v in case["variants"].values():
            assert v["rate_unit"] == "env-steps/s"
            assert v["rate"] == pytest.approx(case["num_envs"] / v["sec_per_call"])
        ratio = case["ratio_backend_vs_bare"]
        assert len(ratio["samples"]) == rounds
        assert 0 < ratio["min"] <= ratio["median"] <= ratio["max"]
        fig = case["figure"]
        assert fig["target"] == pytest.approx(0.8) and fig["op"] == ">="
        assert fig["meets_target"] is (fig["value"] >= 0.8)
    assert sec["figures"] == [c["figure"] for c in sec["cases"].values()]


def test_sapien_mujoco_section_compares_with_and_without_mujoco_forces(sapien_run):
    """arm7 with frictionloss on its servo joints (MuJoCo gives that force each substep) against
    plain arm7: both variants per case, their paired ratio, its figure against the 0.5x target."""
    _, data = sapien_run
    sec = data["sections"]["mujoco"]
    assert "error" not in sec, sec.get("error")
    rounds, nsteps = data["settings"]["rounds"], data["settings"]["nsteps"]
    assert set(sec["cases"]) == {f"N={n},nsteps={k}" for n in sec["params"]["num_envs"] for k in nsteps}
    for name, case in sec["cases"].items():
        assert set(case["variants"]) == {"plain", "mujoco_forces"}, name
        _check_variants(case["variants"], rounds)
        ratio = case["ratio_mujoco_forces_vs_plain"]
        assert len(ratio["samples"]) == rounds and 0 < ratio["min"] <= ratio["median"] <= ratio["max"]
        assert case["figure"]["target"] == pytest.approx(0.5) and case["figure"]["op"] == ">="
    assert sec["figures"] == [c["figure"] for c in sec["cases"].values()]


def test_sapien_bare_loop_does_the_backends_work(sapien_run):
    """From the same state, the same ctrls give the bare loop the backend's qpos and body pose.

    Exactly: both drive scenes built alike by the backend (PhysX's enhanced
    determinism on) with the same float32 drive targets. A tolerance would let
    a wrong target through: 0.01 rad off moves qpos by only ~3e-6 in 3 steps.
    """
    _, data = sapien_run
    checks = data["sections"]["step"]["same_work_check"]
    assert set(checks) == {f"N={n}" for n in data["settings"]["n_cpu"]}
    for name, c in checks.items():
        assert c["calls"] >= 1, name
        for key in ("qpos_max_abs_diff", "body_pos_max_abs_diff", "body_quat_max_abs_diff"):
            assert c[key] == 0.0, (name, key, c[key])


def test_sapien_gpu_section_runs_or_says_why_not(sapien_run):
    import torch

    proc, data = sapien_run
    sec = data["sections"]["gpu"]
    assert "error" not in sec, sec.get("error")
    if torch.cuda.is_available():
        assert "skipped" not in sec
        assert set(sec["cases"]) == {
            f"N={n},nsteps={k}" for n in data["settings"]["n_gpu"] for k in data["settings"]["nsteps"]
        }
        for case in sec["cases"].values():
            _check_variants(case["variants"], data["settings"]["rounds"])
    else:
        assert "CUDA" in sec["skipped"] and "cases" not in sec
        assert "skipped" in proc.stdout
    assert sec["figures"] == []


PLAYBACK_SCRIPT = BENCHMARKS / "bench_playback.py"


def test_playback_record_section_compares_step_with_and_without_a_recorder(tmp_path):
    out = tmp_path / "playback.json"
    proc = _run("--quick", "--only", "record", "--out", str(out), script=PLAYBACK_SCRIPT)
    assert proc.returncode == 0, f"bench_playback.py failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    data = json.loads(out.read_text())
    section = data["sections"]["record"]
    assert section["params"]["recorded"] == [0, 1, 2, 3] and section["params"]["rows_written"] > 1
    for case in section["cases"].values():
        _check_variants(case["variants"], data["settings"]["rounds"])
        assert set(case["variants"]) == {"plain", "recorded"}
    names = [f["name"] for f in section["figures"]]
    assert len(names) == 2 and all("recording overhead" in n for n in names)
    assert all(f["op"] == "<=" and f["target"] == 0.05 for f in section["figures"])
    assert "recording overhead" in proc.stdout


TASKS_SCRIPT = BENCHMARKS / "bench_tasks.py"


def test_tasks_overhead_section_compares_task_and_vector_env_with_the_bare_backend(tmp_path):
    out = tmp_path / "tasks.json"
    proc = _run("--quick", "--only", "overhead", "--out", str(out), script=TASKS_SCRIPT)
    assert proc.returncode == 0, f"bench_tasks.py failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    data = json.loads(out.read_text())
    section = data["sections"]["overhead"]
    assert set(section["cases"]) == {"cartpole", "quadruped"}
    for case in section["cases"].values():
        _check_variants(case["variants"], data["settings"]["rounds"])
        assert set(case["variants"]) == {"bare", "task", "vector"}
        assert 0 < case["rate_ratio_vector_vs_bare"]["median"] < 2
    assert [f["target"] for f in section["figures"]] == [0.8, 0.8]
    assert "vector env vs bare backend" in proc.stdout


def test_parity_table_prints_a_row_per_model() -> None:
    """parity_table.py: a row per model, a cell per tier; MuJoCo against itself is exact in every tier;
    an unknown --models name exits non-zero naming it."""
    script = BENCHMARKS / "parity_table.py"
    proc = _run("--sim", "mujoco", "--models", "pendulum", "--num-envs", "4", script=script, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[2] == "| model | model | kinematics | jacobian | dynamics | randomized |", lines
    row = next(line for line in lines if line.startswith("| pendulum |"))
    assert row == "| pendulum |" + " 0 (every row) |" * 5, row
    bad = _run("--sim", "mujoco", "--models", "nonexistent", script=script, timeout=300)
    assert bad.returncode != 0 and "--models: unknown model(s) ['nonexistent']" in bad.stderr


def test_parity_table_cell_is_the_row_closest_to_its_tolerance() -> None:
    """The cell shows the row with the largest error / tolerance (not the largest error), FAIL past it."""
    import importlib.util

    from simbackend.parity import ParityRow

    spec = importlib.util.spec_from_file_location("parity_table", BENCHMARKS / "parity_table.py")
    assert spec is not None and spec.loader is not None
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    big_but_fine = ParityRow("kinematics", "body_pos", 5e-6, 1e-5, True)
    small_but_close = ParityRow("kinematics", "body_quat", 9e-7, 1e-6, True)
    past = ParityRow("kinematics", "site_pos", 2e-5, 1e-5, False)
    skipped = ParityRow("kinematics", "site_quat", None, None, True, skipped=True)
    assert table._worst([big_but_fine, small_but_close, skipped]) == "9e-07 (body_quat)"
    assert table._worst([big_but_fine, past]) == "FAIL 2e-05 (site_pos)"
    assert table._worst([ParityRow("model", "body_mass", 0.0, 1e-6, True)]) == "0 (every row)"
    assert table._worst([skipped]) == "-"


def test_mjwarp_step_section_compares_backend_and_bare_loop_doing_the_same_work(tmp_path: Path) -> None:
    """bench_mjwarp.py: its own --n/--device flags reach the settings, each model gets a backend/bare ratio,
    and the bare loop ends in the backend's state (same work); a bad --n is a usage error."""
    pytest.importorskip("mujoco_warp")
    out = tmp_path / "mjwarp.json"
    script = BENCHMARKS / "bench_mjwarp.py"
    proc = _run("--quick", "--n", "4", "--device", "cpu", "--out", str(out), script=script)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["settings"]["n"] == [4] and data["settings"]["device"] == "cpu"
    step = data["sections"]["step"]
    assert set(step["cases"]) == {"arm7 N=4", "quadruped N=4", "gym-ant N=4"}
    for name, check in step["same_work_check"].items():
        assert check["calls"] >= 1 and check["qpos_max_abs_diff"] == 0.0, name
    assert all(f["value"] > 0 and f["target"] == 0.9 for f in step["figures"])
    bad = _run("--n", "0", script=script, timeout=300)
    assert bad.returncode == 2 and "--n: expected an integer >= 1, got 0" in bad.stderr


def test_sharded_bench_compares_shard_counts_doing_the_same_work(tmp_path: Path) -> None:
    """bench_sharded.py: each case pairs two variants that end in the same state (0.0 difference: env i is
    bit-identical for any K), with a positive ratio against its target; the scaling section skips a K whose
    shards would exceed CPU PhysX's 1000 envs; the interrupt section restores every env each time."""
    pytest.importorskip("ray")
    out = tmp_path / "sharded.json"
    script = BENCHMARKS / "bench_sharded.py"
    proc = _run("--quick", "--only", "mujoco", "--only", "scaling", "--only", "interrupt", "--scale-n", "2500",
                "--out", str(out), script=script)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    cases = data["sections"]["mujoco"]["cases"]
    assert set(cases) == {"K=1 vs in process", "K=2 vs in process"}
    for name, case in cases.items():
        assert case["same_work_max_abs_diff"] == 0.0, name
        assert case["figure"]["value"] > 0 and case["figure"]["target"] == 0.8
    scaling = data["sections"]["scaling"]
    assert scaling["runs"] == {}
    assert [n.split(" ")[:3] for n in scaling["notes"][:2]] == [["K=1", "not", "run:"], ["K=2", "not", "run:"]]
    interrupts = data["sections"]["interrupt"]["interrupts"]  # Ctrl-C: every env back at its pre-call state
    assert len(interrupts) == 4 and all(row["every_env_restored"] for row in interrupts.values())
    assert all(f["value"] > 0 and f["target"] == 0.2 for f in data["sections"]["interrupt"]["figures"])


def test_host_sync_probe_counts_the_reads_by_site(tmp_path: Path) -> None:
    """probe_host_syncs.py: each phase runs its calls and names where host reads happen, by kind
    (simbackend.host_reads), the per-kind counts adding up to the sites'. On the CPU the MuJoCo engine itself
    reads the host (``set_state``'s values go to MjData through host copies), so the phases must show reads
    at named sites of the package; a probe that counted nothing would fail here. What the counter catches,
    op by op, is tests/test_host_reads.py's."""
    from simbackend.host_reads import KINDS

    out = tmp_path / "syncs.json"
    proc = _run("--sim", "mujoco", "--device", "cpu", "--n", "4", "--steps", "3", "--tasks", "cartpole",
                "--out", str(out), script=BENCHMARKS / "probe_host_syncs.py", timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    phases = {row["phase"]: row for row in data["phases"]}
    assert len(phases) == 4 and data["errors"] == {} and all(row["calls"] == 3 for row in phases.values())
    per_kind = ("scalar_reads", "data_dependent_shapes", "copies_to_host", "readback_calls")
    for row in phases.values():
        assert row["host_reads_per_call"] == pytest.approx(sum(row[f"{k}_per_call"] for k in per_kind)), row
        assert sum(row["sites"].values()) == pytest.approx(3 * row["host_reads_per_call"]), row
        assert all(site.split(" at ")[0] in KINDS and ".py:" in site for site in row["sites"]), row["sites"]
    assert all(row["copies_to_host_per_call"] == 0 for row in phases.values())  # on the CPU no tensor is on a device
    sites = [site for row in phases.values() for site in row["sites"]]  # named in the package, not the probe
    assert sites and not any("probe_host_syncs.py" in site for site in sites), sites


def test_gpu_loop_probe_runs_on_the_cpu_with_deferred_checks(tmp_path: Path) -> None:
    """probe_gpu_loop.py on the CPU (its CUDA passes skipped): the quadruped's RL loop with resets by mask,
    on MuJoCo Warp with deferred checks, counted: no host read (the H100 run's JSON is in results/)."""
    pytest.importorskip("mujoco_warp")
    out = tmp_path / "loop.json"
    proc = _run("--device", "cpu", "--n", "4", "--iterations", "1", "--steps", "3", "--count-iterations", "2",
                "--out", str(out), script=BENCHMARKS / "probe_gpu_loop.py", timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["deferred_checks"] is True and data["device"] == "cpu"
    assert data["count"] == {"iterations": 2, "host_reads": 0, "by_site": {}}
    assert "sync_debug" not in data and "graph" not in data  # CUDA only


# ----------------------------------------------------------------------------
# bench_overhead.py
# ----------------------------------------------------------------------------
OVERHEAD_SCRIPT = BENCHMARKS / "bench_overhead.py"


@pytest.fixture(scope="module")
def overhead_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench_overhead") / "overhead.json"
    proc = _run("--quick", "--out", str(out), script=OVERHEAD_SCRIPT)
    assert proc.returncode == 0, (
        f"bench_overhead.py failed:\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    )
    return proc, json.loads(out.read_text()), out


def test_overhead_sections_time_each_call_against_the_raw_engine(overhead_run):
    """Every case pairs the contract call with the raw engine doing the same work: positive per-call
    times, the per-round difference in µs and the throughput ratio, one sample per round; the steps
    start from the same state and stay bit-identical over the checked calls."""
    _, data, _ = overhead_run
    assert data["settings"]["quick"] is True
    assert set(data["sections"]) == {"cpu_n1", "cpu_n1024", "task", "gpu"}
    rounds = data["settings"]["rounds"]
    expected = {
        "cpu_n1": {
            "step cartpole",
            "step inverted_pendulum",
            "set_state cartpole",
            "set_state inverted_pendulum",
            *(f"{g} cartpole" for g in ("get_qpos", "get_qvel", "get_dof_pos", "get_body_pos_w", "get_body_quat_w")),
            "get_base_lin_vel quadruped",
            "get_site_pos_w arm7",
        },
        "cpu_n1024": {
            "step k=1",
            "step k=4",
            "set_state 8 of 1024",
            *("get_qpos", "get_qvel", "get_dof_pos", "get_body_pos_w", "get_site_pos_w"),
        },
        "task": {f"{t} N={n}" for t in ("cartpole", "quadruped") for n in (1, 1024)},
    }
    for name, cases in expected.items():
        sec = data["sections"][name]
        assert "error" not in sec, sec.get("error")
        assert set(sec["cases"]) == cases, name
        ours, base = ("task", "backend") if name == "task" else ("backend", "raw")
        for case_name, case in sec["cases"].items():
            assert set(case["variants"]) == {ours, base}, case_name
            _check_variants(case["variants"], rounds)
            diff, ratio = case[f"diff_us_{ours}_vs_{base}"], case[f"ratio_{ours}_vs_{base}"]
            assert len(diff["samples"]) == len(ratio["samples"]) == rounds, case_name
            assert diff["min"] <= diff["median"] <= diff["max"], case_name
            assert 0 < ratio["min"] <= ratio["median"] <= ratio["max"], case_name
            if "raw_bound" in case:  # the raw batch binds what the engine binds
                assert case["raw_bound"] == case["engine_bound"], case_name
        for key, check in sec.get("same_work_check", {}).items():
            assert check["qpos_max_abs_diff"] == 0.0 and check["qvel_max_abs_diff"] == 0.0, (name, key)
    assert set(data["sections"]["cpu_n1"]["same_work_check"]) == {"step cartpole", "step inverted_pendulum"}


def test_overhead_figures_state_value_target_and_verdict(overhead_run):
    proc, data, _ = overhead_run
    figs = {name: data["sections"][name]["figures"] for name in ("cpu_n1", "cpu_n1024", "task")}
    assert [(f["target"], f["op"], f["unit"]) for f in figs["cpu_n1"]] == [(30.0, "<=", "µs")] * 2 + [
        (5.0, "<=", "µs")
    ] * 7
    assert [(f["target"], f["op"], f["unit"]) for f in figs["cpu_n1024"] + figs["task"]] == [(0.95, ">=", "x")] * 4
    for f in (f for fs in figs.values() for f in fs):
        assert f["min"] <= f["value"] <= f["max"], f["name"]
        assert f["meets_target"] is (f["value"] <= f["target"] if f["op"] == "<=" else f["value"] >= f["target"])
    assert "Figures vs targets" in proc.stdout and "above raw" in proc.stdout


def test_overhead_gpu_section_says_why_it_did_not_run(overhead_run):
    _, data, _ = overhead_run
    gpu = data["sections"]["gpu"]
    assert "--device cuda" in gpu["skipped"] and gpu["figures"] == []


def test_overhead_results_render_into_the_performance_page(overhead_run, tmp_path):
    import importlib.util

    _, data, _ = overhead_run
    (tmp_path / "overhead.json").write_text(json.dumps(data))
    spec = importlib.util.spec_from_file_location("bench_report_overhead", BENCHMARKS / "report.py")
    assert spec is not None and spec.loader is not None
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    page = tmp_path / "performance.md"
    assert report.main(["--results", str(tmp_path), "--out", str(page)]) == 0
    text = page.read_text()
    assert "## overhead (`bench_overhead.py`" in text
    assert "| case | `backend` | `raw` | backend - raw (µs) | backend / raw |" in text
    assert "| case | `task` | `backend` | task - backend (µs) | task / backend |" in text
    assert "Times in µs per call" in text and "Skipped: needs --device cuda" in text


def test_overhead_device_cuda_without_a_gpu_is_a_one_line_usage_error(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    out = tmp_path / "x.json"
    proc = _run("--quick", "--only", "gpu", "--device", "cuda", "--out", str(out), script=OVERHEAD_SCRIPT, timeout=300)
    assert proc.returncode == 2 and not out.exists()
    assert proc.stderr.strip().splitlines() == [
        f"bench_overhead.py: --device cuda: no CUDA device here (torch {torch.__version__}: "
        "torch.cuda.is_available() is False)"
    ]
    bad = _run("--device", "tpu", script=OVERHEAD_SCRIPT, timeout=300)
    assert bad.returncode == 2 and "expected cpu, cuda or cuda:i, got 'tpu'" in bad.stderr


def test_engine_gap_probe_separates_actuation_from_contact() -> None:
    """``probe_engine_gap.py``: one row per robot and case; in the air MuJoCo and PhysX agree on the
    quadruped's PD-driven joints (the actuation is the same computation), on the floor they part."""
    import os
    import sys

    out = subprocess.run(
        [sys.executable, str(BENCHMARKS / "probe_engine_gap.py"), "--robots", "quadruped", "--steps", "8"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "MUJOCO_GL": "egl"},
    )
    assert out.returncode == 0, out.stderr
    rows = [line.split("|")[1:-1] for line in out.stdout.splitlines() if line.startswith("| quadruped")]
    assert [r[1].strip() for r in rows] == ["in the air", "on the floor"]
    air, floor = (float(r[2]) for r in rows)
    assert air < 1e-3 and floor > 10 * max(air, 1e-4)


def test_terrain_rest_compares_every_engine_with_mujoco(tmp_path: Path) -> None:
    """benchmarks/terrain.py --part rest: boxes let go at random points of a small terrain, one an env, on
    MuJoCo and SAPIEN; the results hold each engine's rest, and the agreement per type adds up to the drops.
    The built terrain (boxes) puts every drop within 3 mm of MuJoCo's on PhysX here (level ground and
    stairs only, nothing to tip over)."""
    cfg = tmp_path / "terrain.json"
    cfg.write_text(json.dumps({"types": ["stairs_up", "flat"], "levels": 1, "tile_size": 2.0, "border": 0.5}))
    out = tmp_path / "rest.json"
    proc = _run(
        "--part", "rest", "--terrain", str(cfg), "--drops", "6", "--sims", "mujoco", "sapien",
        "--rest-results", str(out), script=BENCHMARKS / "terrain.py",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert set(data["sims"]) == {"mujoco", "sapien"} and len(data["sims"]["sapien"]["pos"]) == 6
    row = data["agreement"]["sapien"]
    assert sum(n for _, n in row["by_type"].values()) == row["drops"] == 6
    assert row["within"] == 6, row
    assert "| sapien | 6/6 |" in proc.stdout


def test_terrain_docs_tables_are_the_ones_the_results_give() -> None:
    """docs/terrains.md's rest, cost and overhead tables are written by ``terrain.py --part docs`` from
    benchmarks/results/: rerunning it would not change them."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_terrain_docs", BENCHMARKS / "terrain.py")
    terrain = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(terrain)
    text = terrain.DOCS.read_text()
    blocks = terrain.docs_blocks()
    assert {"rest table", "rest table, height fields", "cost table"} <= set(blocks)
    for name, body in blocks.items():
        begin, end = terrain._block(name)
        assert text.split(begin, 1)[1].split(end, 1)[0].strip() == body.strip(), name


def test_terrain_overhead_policy_reads_on_flat_ground_the_scan_of_level_ground() -> None:
    """``terrain.py --part overhead --checkpoint``: on flat ground (no scan term) the policy reads
    ``flat_ground_scan``, which must be what the task's own scan reads over level ground, the base at any
    height (a sign, an offset or a missed clip would give the policy a scan it never saw)."""
    import importlib.util

    import torch

    from simbackend.tasks import make_task

    spec = importlib.util.spec_from_file_location("bench_terrain_scan", BENCHMARKS / "terrain.py")
    terrain = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(terrain)
    level = {"types": ["flat"], "levels": 1, "tile_size": 4.0, "resolution": 0.1, "border": 1.0}
    task = make_task("velocity", "mujoco", 3, config={"robot": "go1", "terrain": level, "height_scan": True}, seed=0)
    try:
        for _ in range(5):
            task.step(torch.full((3, 12), 0.3))
        qpos = task.backend.get_qpos().clone()
        qpos[1, 2] += 0.2  # one base high, one far above the clip
        qpos[2, 2] += 1.5
        task.backend.set_state(None, qpos, torch.zeros_like(task.backend.get_qvel()))
        obs = task.observe()
        scan = obs["height_scan"]
        assert scan[2].eq(1.0).all() and 0.1 < float(scan[1].min()) < 1.0  # clipped; not
        without = task.flatten({k: v for k, v in obs.items() if k != "height_scan"})
        full = task.flatten(obs)
        assert torch.allclose(terrain.flat_ground_scan(task, without, full.shape[1]), full, atol=1e-5)
        assert terrain.flat_ground_scan(task, full, full.shape[1]) is full
    finally:
        task.close()


def test_terrain_overhead_and_profile_with_a_policy_walking(tmp_path: Path) -> None:
    """``terrain.py --part overhead --checkpoint`` and ``--part profile --checkpoint``: a terrain policy (one
    iteration) drives flat ground and the terrain; each writes its rows where it is told, and the docs'
    tables read them (the cost table gains the walking columns)."""
    import importlib.util

    from simbackend.training import train

    spec = importlib.util.spec_from_file_location("bench_terrain_walk", BENCHMARKS / "terrain.py")
    terrain = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(terrain)
    run = train(
        "velocity",
        "mujoco",
        task_config=terrain.task_config(),
        train_config={"num_envs": 8, "num_steps_per_env": 4, "max_iterations": 1, "eval_episodes": 1},
        out_dir=tmp_path / "run",
        progress=False,
    )
    ckpt, out, cost = str(run.checkpoint), tmp_path / "t.json", tmp_path / "c.json"
    common = ["--checkpoint", ckpt, "--steps", "3", "--num-envs", "8", "--cost-results", str(cost)]
    proc = _run(
        "--part", "overhead", *common, "--repeats", "1", "--results", str(out), script=BENCHMARKS / "terrain.py"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = json.loads(out.read_text())["overhead_policy_by_sim"]["mujoco"]
    assert row["flat_ms"] > 0 and row["ratio"] == pytest.approx(row["terrain_ms"] / row["flat_ms"])
    assert ckpt in row["note"] and "overhead" not in json.loads(out.read_text())  # random actions' row untouched
    proc = _run("--part", "profile", *common, "--types", "stairs_up", script=BENCHMARKS / "terrain.py")
    assert proc.returncode == 0, proc.stderr[-2000:]
    walking = json.loads(cost.read_text())["profile_walking"]
    assert set(walking) == {"flat ground", "stairs_up", "all types", "note"}
    assert walking["all types"]["geoms"] > walking["stairs_up"]["geoms"] > walking["flat ground"]["geoms"]
    for r in (walking[k] for k in ("flat ground", "stairs_up", "all types")):
        assert r["step"] > r["mid_and_narrow_phase"] > 0
    assert "| stairs up | " in terrain.profile_walking_table(json.loads(cost.read_text()))
    data = {"types": {"flat/pieces": {"ratio": 1.2, "geoms": 39}, "flat/height_field": {"ratio": 1.8, "geoms": 39}}}
    assert terrain.cost_table(data).splitlines()[2] == "| flat | 39 | 1.20 | 1.80 |"
    data["policy_actions"] = {"types": {"flat/pieces": {"ratio": 1.1}}}
    assert terrain.cost_table(data).splitlines()[2] == "| flat | 39 | 1.20 | 1.80 | 1.10 | - |"
