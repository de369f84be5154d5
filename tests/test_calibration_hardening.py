"""Issue 50, the calibration and excitation parts of items 4, 6 and 13: output that is not a terminal, the
report's folder and pictures, and what hostile inputs did to `excite`, `calibrate` and their Python API.

Fits run on the built-in double pendulum (two motors, no contact) with 1-2 generations of 4 candidates;
the references are recorded as tests/test_calibration.py records them. Refusals are checked to come before
any work: no output written, no generation scored.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from simbackend.calibration import ParameterSet, Replayer, calibrate, excite, write_log
from simbackend.cli.main import app
from simbackend.errors import InvalidArgumentError, ScalarTypeError
from simbackend.registry import make_backend
from test_calibration import _make, _record, _reference  # the double pendulum's recordings and backends

pytest.importorskip("cmaes")

PARAMS = [{"kind": "body_mass", "targets": ["lower_link"], "low": 0.5, "high": 2.0, "name": "mass"}]
CHECKPOINT = Path(__file__).resolve().parent / "data" / "go1_velocity.pt"
BOX = set("┏┃┡│└━…")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("calibration_hardening")
    params = d / "params.json"
    params.write_text(json.dumps({"parameters": PARAMS}))
    return {
        "fit": _record(d / "fit.h5", envs=1, rows=60, seed=0),
        "held_out": _record(d / "held_out.h5", envs=1, rows=40, seed=7),
        "short": _record(d / "short.h5", envs=1, rows=8, seed=3),
        "params": params,
    }


def _args(files: dict[str, Path], out: Path, *extra: str) -> list[str]:
    return ["calibrate", "--reference", str(files["fit"]), "--params", str(files["params"]), "--out", str(out),
            "-g", "1", "--popsize", "4", "--window", "10", "--max-envs", "8", *extra]  # fmt: skip


# ----------------------------------------------------------------------------------------------------------
# item 4: not a terminal: plain lines, no bar, nothing cut short
# ----------------------------------------------------------------------------------------------------------
def test_excite_into_a_pipe_prints_no_progress_bar(tmp_path: Path) -> None:
    """Item 4: `excite`'s output in a pipe is its one summary line, not a drawn bar."""
    r = CliRunner().invoke(app, ["excite", "--robot", "quadruped", "--seconds", "0.1", "--num-envs", "1",
                                 "--out", str(tmp_path / "log.npz")])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert not BOX & set(r.output), r.output
    assert r.output.splitlines() == [f"wrote {tmp_path / 'log.npz'}: 5 rows, 1 episodes of quadruped on mujoco (chirp)"]


def test_calibrate_into_a_pipe_prints_plain_lines_and_the_report_as_given(
    files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Items 4 and 6: redirected, `calibrate` prints its tables as plain lines (no box, no bar, every channel
    name whole), names the report folder once (`calib/report/`, not `calib/report//`), and `trajectory.png`
    is titled with the held-out episode it replays, as docs/calibration.md says (it was titled with the
    fitted file)."""
    import matplotlib.figure

    titles: dict[str, str] = {}
    savefig = matplotlib.figure.Figure.savefig

    def recording_savefig(self: matplotlib.figure.Figure, fname: object, *args: object, **kwargs: object) -> None:
        titles[Path(str(fname)).name] = self.axes[0].get_title()
        savefig(self, fname, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", recording_savefig)
    (tmp_path / "calib").mkdir()
    report = f"{tmp_path / 'calib' / 'report'}/"
    r = CliRunner().invoke(app, _args(files, tmp_path / "plan.json", "--validate", str(files["held_out"]),
                                      "--report", report))  # fmt: skip
    assert r.exit_code == 0, r.output
    assert not BOX & set(r.output), r.output
    lines = r.output.splitlines()
    for channel in ("joint_pos", "joint_vel"):
        assert sum(line.split()[0] == channel for line in lines if line.strip()) == 2, r.output  # fit, held-out
    assert lines[-1].endswith(f"wrote {tmp_path / 'plan.json'}, {report}"), lines[-1]
    assert "held_out.h5#env0" in titles["trajectory.png"] and "(held out)" in titles["trajectory.png"], titles
    assert "fit.h5" not in titles["trajectory.png"], titles


def test_write_report_makes_no_missing_parent_folder(files: dict[str, Path], tmp_path: Path) -> None:
    """Item 6: the report's folder is made, its missing parents are not (docs/cli.md: no command makes
    missing folders); the Python API refuses them in one line."""
    from simbackend.calibration.report import write_report

    params = ParameterSet.from_dict(PARAMS)
    result = calibrate(_make, _reference(files["fit"]), params, window=10, popsize=4, generations=0, max_envs=4)
    with pytest.raises(InvalidArgumentError, match=r"^folder: '.*missing' does not exist$"):
        write_report(result, tmp_path / "missing" / "report")
    assert not (tmp_path / "missing").exists()
    assert sorted(p.name for p in write_report(result, tmp_path / "report").values()) == [
        "loss.png", "report.json", "trajectory.png"]  # fmt: skip


# ----------------------------------------------------------------------------------------------------------
# item 13 (High): unbounded logs, a non-finite control_dt, outputs that collide
# ----------------------------------------------------------------------------------------------------------
def test_an_excitation_too_long_to_hold_is_refused_before_anything_is_allocated(tmp_path: Path) -> None:
    """Item 13: `excite --seconds 1e7 --episode-s 1e7` asked for about 745 GiB; refused in one line naming
    --seconds, with nothing written."""
    out = tmp_path / "big.npz"
    r = CliRunner().invoke(app, ["excite", "--robot", "quadruped", "--seconds", "1e7", "--episode-s", "1e7",
                                 "--out", str(out)])  # fmt: skip
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: --seconds: 1e+07 s x 4 envs") and "more than the 50,000,000 values" in r.output
    assert len(r.output.strip().splitlines()) == 1 and not out.exists()


def test_a_policy_excitation_too_long_to_hold_is_refused(tmp_path: Path) -> None:
    """Item 13: `excite --policy` allocated its whole log at once (np.empty of seconds / control_dt rows)."""
    pytest.importorskip("rsl_rl")
    from simbackend.calibration import excite_policy

    with pytest.raises(InvalidArgumentError, match=r"^seconds: 1e\+07 s x 1 envs at 0.02 s per row"):
        excite_policy(CHECKPOINT, "mujoco", tmp_path / "big.npz", seconds=1e7, num_envs=1)
    assert not (tmp_path / "big.npz").exists()


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_log_whose_control_dt_is_not_finite_is_refused_naming_the_file_and_array(
    value: float, tmp_path: Path
) -> None:
    """Item 13: a log whose control_dt is NaN or inf crashed `calibrate` with a raw IndexError."""
    log = write_log(tmp_path / "log.npz", control_dt=value, joint_names=["shoulder", "elbow"],
                    joint_pos=np.zeros((5, 2)), joint_vel=np.zeros((5, 2)), actuator_names=["shoulder_motor", "elbow_motor"],
                    ctrl=np.zeros((5, 2)))  # fmt: skip
    args = ["calibrate", "--reference", str(log), "--model", "double_pendulum", "--params",
            str(tmp_path / "p.json"), "--out", str(tmp_path / "plan.json")]  # fmt: skip
    (tmp_path / "p.json").write_text(json.dumps(PARAMS))
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    assert r.output.strip() == f"error: reference 'log.npz': control_dt is not finite, got {value!r}"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--training-plan", "{out}"], "--training-plan: {out} is also --out's output"),
        (["--report", "{out}"], "--report: {out} is also --out's output"),
        (["--training-plan", "{params}", "--overwrite"], "--training-plan: {params} is also --params ({params})"),
        (["--report", "{dir}", "--overwrite"], "--report: --reference {fit} lies in the folder {dir}"),
    ],
)
def test_outputs_that_collide_are_refused_before_any_work(
    extra: list[str], message: str, files: dict[str, Path], tmp_path: Path
) -> None:
    """Item 13: `--out same.json --training-plan same.json` exited 0 with the fit lost (the training plan
    replaced it); `--out both.json --report both.json` made both.json a folder; an output onto an input, or
    an input inside the report folder (replaced as a whole), destroyed it. All refused at once, exit 2,
    nothing written or changed."""
    import shutil

    inputs = tmp_path / "inputs"  # copies: a run that is not refused overwrites or removes them
    inputs.mkdir()
    fit, params = shutil.copy(files["fit"], inputs), shutil.copy(files["params"], inputs)
    out = tmp_path / "plan.json"
    names = {"out": str(out), "params": str(params), "dir": str(inputs), "fit": str(fit)}
    args = _args({**files, "fit": Path(fit), "params": Path(params)}, out, *(e.format(**names) for e in extra))
    before = {p.name: p.read_bytes() for p in inputs.iterdir()}
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: " + message.format(**names)) and len(r.output.strip().splitlines()) == 1
    assert not out.exists()
    assert {p.name: p.read_bytes() for p in inputs.iterdir()} == before


# ----------------------------------------------------------------------------------------------------------
# item 13 (Medium, Low): refused before the search, naming what is wrong
# ----------------------------------------------------------------------------------------------------------
def test_a_held_out_reference_shorter_than_a_window_is_refused_before_the_search(files: dict[str, Path]) -> None:
    """Item 13: a --validate reference shorter than --window was refused after the whole search (the fit lost)."""
    generations: list[dict] = []
    with pytest.raises(InvalidArgumentError, match=r"^window: 10 rows is longer than every segment of .*short\.h5"):
        calibrate(_make, _reference(files["fit"]), ParameterSet.from_dict(PARAMS),
                  validation=_reference(files["short"]), window=10, popsize=4, generations=2, max_envs=8,
                  progress=generations.append)  # fmt: skip
    assert generations == []


def test_bounds_that_give_invalid_values_are_refused_up_front_naming_the_parameter(
    files: dict[str, Path], tmp_path: Path
) -> None:
    """Item 13: a parameter whose bound gives invalid values (a negative damping) was refused mid-search by the
    plan's value check, naming neither --params nor the parameter."""
    bad = [{"kind": "joint_damping", "operation": "add", "low": -5.0, "high": 1.0, "name": "damping"}]
    generations: list[dict] = []
    with pytest.raises(InvalidArgumentError, match=r"^parameters\[0\]\.low: 'damping' at -5 gives invalid values"):
        calibrate(_make, _reference(files["fit"]), ParameterSet.from_dict(bad), window=10, popsize=4,
                  generations=2, max_envs=8, progress=generations.append)  # fmt: skip
    assert generations == []
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    args = _args(files, tmp_path / "plan.json")
    args[args.index("--params") + 1] = str(tmp_path / "bad.json")
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and r.output.startswith("error: --params: parameters[0].low: 'damping' at -5"), r.output
    assert not (tmp_path / "plan.json").exists()


def test_a_log_version_that_is_not_a_number_names_the_file_and_array(tmp_path: Path) -> None:
    """Item 13: a log version "abc" ended in int()'s message, naming neither the file nor the array."""
    path = write_log(tmp_path / "log.npz", control_dt=0.02, joint_names=["shoulder", "elbow"],
                     joint_pos=np.zeros((5, 2)), joint_vel=np.zeros((5, 2)), actuator_names=["shoulder_motor", "elbow_motor"],
                     ctrl=np.zeros((5, 2)))  # fmt: skip
    data = dict(np.load(path))
    data["version"] = np.array("abc")
    with open(path, "wb") as f:
        np.savez(f, **data)
    with pytest.raises(InvalidArgumentError, match=r"^reference 'log\.npz': version 'abc'; this simbackend reads"):
        _reference(path)


def test_popsize_below_what_cmaes_needs_is_refused(files: dict[str, Path], tmp_path: Path) -> None:
    """Item 13: at --popsize 2 (or 3) CMA-ES has one parent and the cmaes package divided by zero (two
    RuntimeWarnings); refused in one line, in Python and on the command line."""
    for popsize in (2, 3):
        with pytest.raises(InvalidArgumentError, match=rf"^popsize: expected an integer >= 4, got {popsize}$"):
            calibrate(_make, _reference(files["fit"]), ParameterSet.from_dict(PARAMS), window=10,
                      popsize=popsize, generations=1, max_envs=8)  # fmt: skip
    args = _args(files, tmp_path / "plan.json")
    args[args.index("--popsize") + 1] = "3"
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and r.output.startswith("error: --popsize:"), r.output
    assert "greater than or equal to 4" in r.output and len(r.output.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("keyword", "value", "message"),
    [
        ("popsize", True, "popsize: expected an integer >= 4, got bool True"),
        ("sigma", True, "sigma: expected a finite number in (0, 1], got bool True"),
        ("generations", 2.0, "generations: expected an integer >= 0, got float 2.0"),
        ("seed", False, "seed: expected an integer in [0, 2147483647], got bool False"),
        ("window", True, "window: expected an integer >= 1, got bool True"),
    ],
)
def test_bools_and_floats_are_not_counts_or_steps(
    keyword: str, value: object, message: str, files: dict[str, Path]
) -> None:
    """Item 13 (Low): `calibrate(popsize=True, sigma=True)` was accepted (sigma=True read as a step of 1);
    the project's scalar checks (simbackend.checks) refuse a bool where a number is meant."""
    kw: dict = {"window": 10, "popsize": 4, "generations": 0, "max_envs": 8, keyword: value}
    with pytest.raises(ScalarTypeError) as e:
        calibrate(_make, _reference(files["fit"]), ParameterSet.from_dict(PARAMS), **kw)
    assert str(e.value) == message


def test_a_replayer_takes_no_bool_population(files: dict[str, Path]) -> None:
    """Item 13 (Low): Replayer(popsize=True) was taken as one candidate."""
    sim = make_backend("mujoco", "double_pendulum", 2)
    with sim, pytest.raises(ScalarTypeError, match=r"^popsize: expected an integer >= 1, got bool True$"):
        Replayer(sim, _reference(files["fit"]), ParameterSet.from_dict(PARAMS), popsize=True, window=10)


def test_excite_takes_no_bool_for_a_number(tmp_path: Path) -> None:
    """Item 13 (Low): excite's numbers go through the same scalar checks (``amplitude=True`` was 1 rad)."""
    with pytest.raises(ScalarTypeError, match=r"^amplitude: expected a finite number > 0, got bool True$"):
        excite("quadruped", "mujoco", tmp_path / "log.npz", amplitude=True)
