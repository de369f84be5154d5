"""``simbackend record``, ``simbackend play`` and ``run --video``: recordings and videos from the shell."""

from __future__ import annotations

from pathlib import Path

import h5py
import imageio
import numpy as np
import pytest
from typer.testing import CliRunner

from simbackend.cli.main import app
from simbackend.playback.recording import Recording

runner = CliRunner()


def _invoke(*args: str) -> CliRunner.invoke:
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


def _frames(path: Path) -> np.ndarray:
    with imageio.get_reader(str(path)) as reader:
        return np.stack([f for f in reader])


@pytest.mark.parametrize("source,target", [("mujoco", "sapien"), ("sapien", "mujoco")])
def test_record_on_one_engine_and_play_on_the_other(tmp_path: Path, source: str, target: str) -> None:
    run = tmp_path / "run.h5"
    result = _invoke(
        "record",
        "--sim",
        source,
        "--model",
        "arm7",
        "--steps",
        30,
        "--num-envs",
        3,
        "--envs",
        "0,2",
        "--nsteps",
        5,
        "--out",
        run,
    )
    assert result.exit_code == 0, result.output
    with Recording(run) as rec:
        assert rec.backend == source and rec.env_ids.tolist() == [0, 2] and len(rec) == 31
    video, still = tmp_path / "run.mp4", tmp_path / "last.png"
    result = _invoke("play", run, "--sim", target, "--out", video, "--png", still, "--size", "96x64", "--every", 2)
    assert result.exit_code == 0, result.output
    frames = _frames(video)
    assert frames.shape == (16, 64, 96, 3)
    assert (frames.reshape(16, -1).std(axis=1) > 10).all(), "blank frames"
    moved = np.abs(frames[0].astype(int) - frames[-1].astype(int)).max(axis=-1) > 40
    assert moved.sum() > 10, "the arms did not move"
    png = imageio.v3.imread(still)
    assert png.shape == (64, 96, 3) and np.abs(png.astype(int) - frames[-1].astype(int)).mean() < 8


def test_play_dynamic_reports_and_exits_by_the_verdict(tmp_path: Path) -> None:
    run = tmp_path / "arm.h5"
    assert (
        _invoke("record", "--sim", "mujoco", "--model", "arm7", "--steps", 20, "--num-envs", 2, "--out", run).exit_code
        == 0
    )
    same = _invoke("play", run, "--dynamic")
    assert same.exit_code == 0, same.output
    assert "exact snapshots" in same.output and same.output.count("stays within tolerance") == 2
    other = _invoke("play", run, "--dynamic", "--sim", "sapien")
    assert other.exit_code == 1, other.output
    assert "named states" in other.output and "parts at row" in other.output


def test_run_writes_a_video(tmp_path: Path) -> None:
    video = tmp_path / "run.mp4"
    result = _invoke(
        "run",
        "--sim",
        "mujoco",
        "--model",
        "arm7",
        "--num-envs",
        8,
        "--steps",
        12,
        "--video",
        video,
        "--video-every",
        3,
    )
    assert result.exit_code == 0, result.output
    frames = _frames(video)
    assert frames.shape == (4, 240, 320, 3) and (frames.max(axis=-1) > 60).reshape(4, -1).sum(1).min() > 100


def test_run_video_takes_the_picture_flags(tmp_path: Path) -> None:
    """--size sets the frame size; the dress (default) leaves no black background, --no-dress draws the pendulum
    alone on black; --camera picks the view (a fixed camera of the model, here none but 'free')."""
    videos = {}
    for dress in ("--dress", "--no-dress"):
        videos[dress] = tmp_path / f"{dress.strip('-')}.mp4"
        result = _invoke(
            "run", "--sim", "mujoco", "--model", "pendulum", "--num-envs", 1, "--steps", 4,
            "--video", videos[dress], "--size", "96x64", "--camera", "free", dress,
        )  # fmt: skip
        assert result.exit_code == 0, result.output
    dressed, bare = _frames(videos["--dress"]), _frames(videos["--no-dress"])
    assert dressed.shape == bare.shape == (4, 64, 96, 3)
    assert (dressed.max(axis=-1) < 16).mean() < 0.02 and (bare.max(axis=-1) < 16).mean() > 0.9


@pytest.mark.parametrize(
    "args,message",
    [
        (("record", "--model", "pendulum", "--out", "run.npz"), "--out"),
        (("record", "--model", "pendulum", "--out", "missing/run.h5"), "does not exist"),
        (("record", "--model", "pendulum", "--out", "run.h5", "--envs", "0,x"), "--envs"),
        (("record", "--model", "pendulum", "--out", "run.h5", "--num-envs", 2, "--envs", "0,5"), "--envs"),
        (("record", "--model", "pendulum", "--out", "run.h5", "--ctrl", "sine"), "--ctrl"),
        (("record", "--model", "pendulum", "--out", "run.h5", "--keyframe", "nope"), "--keyframe"),
        (("play", "none.h5", "--out", "v.mp4"), "no such file"),
        (("play", "RUN", "--out", "v.avi"), "--out"),
        (("play", "RUN"), "nothing to do"),
        (("play", "RUN", "--out", "v.mp4", "--camera", "nocam"), "camera"),
        (("play", "RUN", "--out", "v.mp4", "--envs", "7"), "were not recorded"),
        (("play", "RUN", "--out", "v.mp4", "--sim", "bullet"), "--sim"),
        (("run", "--model", "pendulum", "--video", "v.gif"), "--video"),
        (("run", "--model", "pendulum", "--video", "v.mp4", "--camera", "nocam"), "unknown camera name 'nocam'"),
        (("run", "--model", "pendulum", "--video", "v.mp4", "--size", "64by48"), "--size: expected WIDTHxHEIGHT"),
        (("run", "--model", "pendulum", "--video", "v.mp4", "--size", "6_4x48"), "--size: expected WIDTHxHEIGHT"),
        (("play", "RUN", "--out", "v.mp4", "--size", "8x48"), "--size: the width must be in [16, 8192]"),
        (("play", "RUN", "--png", "s.png", "--size", "64x9000"), "--size: the height must be in [16, 8192]"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: tuple, message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    if "RUN" in args:
        assert _invoke("record", "--model", "pendulum", "--steps", 2, "--num-envs", 1, "--out", "r.h5").exit_code == 0
        args = tuple("r.h5" if a == "RUN" else a for a in args)
    result = _invoke(*args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not list(tmp_path.glob("*.mp4")) and not (tmp_path / "run.h5").exists()


def _nan_qpos(path: Path) -> None:
    with h5py.File(path, "a") as f:
        f["rows/qpos"][3, 0, 0] = np.nan


def _wider_qpos(path: Path) -> None:
    with h5py.File(path, "a") as f:
        T, k, _ = f["rows/qpos"].shape
        del f["rows/qpos"]
        f.create_dataset("rows/qpos", data=np.zeros((T, k, 5), np.float32))


def _inf_ctrl(path: Path) -> None:
    with h5py.File(path, "a") as f:
        f["rows/ctrl"][2, 1, 0] = np.inf


def _wrong_nq(path: Path) -> None:
    with h5py.File(path, "a") as f:
        f.attrs["nq"] = 2


def _truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:4000])


def _random_bytes(path: Path) -> None:
    path.write_bytes(np.random.default_rng(1).bytes(4000))


@pytest.mark.parametrize(
    "tamper,message",
    [
        (_nan_qpos, "rows/qpos of recording 'r.h5': non-finite value nan at row 3"),
        (_inf_ctrl, "rows/ctrl of recording 'r.h5': non-finite value inf at row 2"),
        (_wider_qpos, "rows/qpos of recording 'r.h5': expected shape (7, 2, 1) = (T, k, nq), got (7, 2, 5)"),
        (_wrong_nq, "attribute nq of recording 'r.h5': the header says 2"),
        (_truncated, "path: 'r.h5' is not a readable recording: a damaged or truncated HDF5 file"),
        (_random_bytes, "path: 'r.h5' is not a readable recording: a damaged or truncated HDF5 file"),
    ],
)
@pytest.mark.parametrize("mode", [("--dynamic",), ("--png", "s.png")])
def test_play_refuses_a_bad_recording_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tamper: object, message: str, mode: tuple
) -> None:
    """A tampered or damaged recording stops `play` before any replay: exit 2 (a bad input file), one line
    naming the dataset, no traceback, and NaN is never reported as within tolerance."""
    monkeypatch.chdir(tmp_path)
    assert _invoke("record", "--model", "pendulum", "--steps", 6, "--num-envs", 2, "--out", "r.h5").exit_code == 0
    tamper(Path("r.h5"))  # type: ignore[operator]
    result = _invoke("play", "r.h5", *mode)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and message in result.output, result.output
    assert result.output.strip().count("\n") == 0 and "Traceback" not in result.output
    assert "within tolerance" not in result.output and not Path("s.png").exists()


@pytest.mark.parametrize("tolerance", ["nan", "inf", "0"])
def test_play_dynamic_refuses_a_tolerance_nothing_fits(tmp_path: Path, tolerance: str) -> None:
    """--tolerance takes a finite number > 0 (inf would let any error, NaN included, through); a usage error."""
    run = tmp_path / "r.h5"
    assert _invoke("record", "--model", "pendulum", "--steps", 2, "--num-envs", 1, "--out", run).exit_code == 0
    result = _invoke("play", run, "--dynamic", "--tolerance", tolerance)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: --tolerance: ") and "Traceback" not in result.output, result.output
