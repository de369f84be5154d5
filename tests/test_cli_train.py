"""``simbackend train`` and ``simbackend eval``: train on one engine, evaluate on the other; bad flags exit 2."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from simbackend.cli.main import app
from simbackend.training import load_checkpoint, train

runner = CliRunner()


def _invoke(*args: object) -> Any:
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "200", "SIMBACKEND_SIM": None})


TINY = ("--num-envs", 8, "--iterations", 2, "--eval-interval", 0, "--stop-at-success", "off", "--no-progress")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cli") / "run"
    result = _invoke("train", "--task", "cartpole", "--sim", "mujoco", "--seed", 1, "--out", out, "--num-envs", 8,
                     "--iterations", 2, "--stop-at-success", "off", "--no-progress")  # fmt: skip
    assert result.exit_code == 0, result.output
    # paths wrap on narrow consoles but are never cut short: read the value column back joined
    joined = re.sub(r"\n\s*", "", result.output)
    assert str(out / "checkpoint_final.pt") in joined and "stopped: max_iterations" in result.output
    assert (out / "log.csv").is_file() and (out / "learning_curve.png").is_file()
    # without --eval-interval a short run evaluates after each of its first iterations, not only at the end
    rows = json.loads((out / "log.json").read_text())["rows"]
    assert [row["iteration"] for row in rows if row["eval_success"] is not None] == [1, 2]
    return out / "checkpoint_final.pt"


def test_train_then_eval_on_the_other_engine(checkpoint: Path) -> None:
    result = _invoke(
        "eval",
        "--checkpoint",
        checkpoint,
        "--task",
        "cartpole",
        "--sim",
        "sapien",
        "--seeds",
        "0,1",
        "--episodes",
        2,
        "--json",
    )
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)
    assert (d["task"], d["sim"], d["trained_on"], d["env_steps"]) == ("cartpole", "sapien", "mujoco", 2 * 8 * 32)
    assert d["seeds"] == [0, 1] and len(d["per_seed"]) == 2 and d["episodes_per_seed"] == 2
    for key in ("mean_return", "success_rate", "mean_length"):
        assert d[key]["ci_low"] <= d[key]["mean"] <= d[key]["ci_high"]
    table = _invoke("eval", "--checkpoint", checkpoint, "--seeds", "0-1", "--episodes", 1)
    assert table.exit_code == 0, table.output
    assert "evaluated on mujoco" in table.output and "95% CI" in table.output and "Student's t" in table.output
    assert "Wilson" in table.output


#: rich's box drawing: none of it in what a pipe or a file gets (docs/cli.md, "What is printed")
BOX = re.compile(r"[│┃╭╮╰╯─━┏┓┗┛┡┩└┘┌┐╇┳┻╋┼┬┴├┤]")


def test_eval_tables_are_plain_lines_when_piped(checkpoint: Path) -> None:
    """CliRunner's stdout is no terminal: one evaluation's table and a sweep's are plain lines, nothing cut short."""
    one = runner.invoke(app, ["eval", "--checkpoint", str(checkpoint), "--seeds", "0", "--episodes", "1"],
                        env={"COLUMNS": "80", "SIMBACKEND_SIM": None})  # fmt: skip
    assert one.exit_code == 0, one.output
    assert not BOX.search(one.stdout) and "…" not in one.stdout, one.stdout
    assert re.search(
        r"^success rate\s+[01]\.000\s+\[0, 0\.[0-9]+\]|^success rate\s+1\.000\s+\[0\.", one.stdout, re.M
    ), one.stdout
    sweep = runner.invoke(
        app,
        ["eval", "--checkpoint", str(checkpoint), "--checkpoint", str(checkpoint), "--seeds", "0", "--episodes", "1"],
        env={"COLUMNS": "80", "SIMBACKEND_SIM": None},
    )
    assert sweep.exit_code == 0, sweep.output
    assert not BOX.search(sweep.stdout) and "…" not in sweep.stdout, sweep.stdout
    assert sweep.stdout.count(str(checkpoint)) == 2 and "success rate: " in sweep.stdout, sweep.stdout
    assert "task settings: the task's defaults" in one.stdout, one.stdout


def test_task_settings_from_a_file_and_set_reach_the_checkpoint_and_eval(tmp_path: Path) -> None:
    """--set wins over --task-config key by key; the checkpoint stores the resolved config; train and eval show
    the settings that differ from the task's defaults."""
    (tmp_path / "cartpole.json").write_text(json.dumps({"max_angle": 0.3, "init_noise": 0.03}))
    out = tmp_path / "r"
    result = _invoke("train", "--task", "cartpole", "--task-config", tmp_path / "cartpole.json", "--set",
                     "max_angle=0.25", "--out", out, *TINY)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert re.search(r"^task settings\s+init_noise=0.03, max_angle=0.25$", result.output, re.M), result.output
    stored = load_checkpoint(out / "checkpoint_final.pt").task_config
    assert (stored["max_angle"], stored["init_noise"], stored["max_cart"]) == (0.25, 0.03, 2.4)
    ev = _invoke("eval", "--checkpoint", out / "checkpoint_final.pt", "--seeds", "0", "--episodes", 1)
    assert ev.exit_code == 0, ev.output
    assert "task settings: init_noise=0.03, max_angle=0.25" in ev.output, ev.output


#: the trainer's ``train(resume=...)`` (issue 39); the CLI passes --resume through to it
RESUMES = "resume" in inspect.signature(train).parameters


@pytest.mark.skipif(not RESUMES, reason="issue 39: simbackend.training.train(resume=...) has not landed in trainer.py")
def test_resume_continues_the_run(tmp_path: Path, checkpoint: Path) -> None:
    """--resume: the checkpoint's task, task settings and training config, --iterations more iterations; the
    iteration counter goes on and the resumed log starts after the checkpoint's iteration."""
    start = load_checkpoint(checkpoint)
    out = tmp_path / "resumed"
    result = _invoke("train", "--resume", checkpoint, "--set", "max_cart=3", "--iterations", 2, "--eval-interval", 0,
                     "--no-progress", "--out", out)  # fmt: skip
    assert result.exit_code == 0, result.output
    # the table wraps long paths anywhere: compare without white space
    flat = re.sub(r"\s+", "", result.output)
    assert re.sub(r"\s+", "", f"resumed from {checkpoint} (iteration {start.iteration})") in flat
    end = load_checkpoint(out / "checkpoint_final.pt")
    assert end.task == "cartpole" and end.iteration == start.iteration + 2 > 0
    assert end.train_config.num_envs == start.train_config.num_envs == 8 and end.train_config.seed == 1
    assert end.task_config == {**start.task_config, "max_cart": 3}
    rows = json.loads((out / "log.json").read_text())["rows"]
    assert [row["iteration"] for row in rows] == [start.iteration + 1, start.iteration + 2]


def test_train_on_mjwarp_then_eval_on_mujoco(tmp_path: Path) -> None:
    """The GPU engine trains under the same command (here on warp's CPU device); its checkpoint says so."""
    out = tmp_path / "w"
    result = _invoke("train", "--task", "cartpole", "--sim", "mjwarp", "--out", out, "--json", *TINY)
    assert result.exit_code == 0, result.output
    d = json.loads(result.output[result.output.index("{") :])
    assert d["iterations"] == 2 and d["env_steps"] > 0 and d["stop_reason"] == "max_iterations"
    rows = json.loads((out / "log.json").read_text())["rows"]
    assert [row["eval_success"] is not None for row in rows] == [False, True]  # --eval-interval 0: the end only
    ev = _invoke("eval", "--checkpoint", out / "checkpoint_final.pt", "--sim", "mujoco", "--episodes", 1, "--json")
    assert ev.exit_code == 0, ev.output
    e = json.loads(ev.output[ev.output.index("{") :])
    assert (e["sim"], e["trained_on"]) == ("mujoco", "mjwarp")


def test_train_json_reports_the_run(tmp_path: Path) -> None:
    result = _invoke(
        "train",
        "--task",
        "cartpole",
        "--sim",
        "sapien",
        "--out",
        tmp_path / "r",
        "--json",
        "--num-envs",
        4,
        "--iterations",
        5,
        "--time-budget",
        0.001,
        "--eval-interval",
        0,
        "--no-progress",
    )
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)
    assert d["sim"] == "sapien" and d["stop_reason"] == "time_budget" and d["iterations"] == 1


@pytest.mark.parametrize(
    "args,message",
    [
        (("train", "--task", "nope"), "--task"),
        (("train", "--task", "cartpole", "--sim", "bullet"), "--sim"),
        (("train", "--task", "cartpole", "--dr", "missing.json"), "--dr"),
        (("train", "--task", "cartpole", "--dr", "BAD_PLAN"), "--dr"),
        (("train", "--task", "cartpole", "--out", "A_FILE"), "--out"),
        (("train", "--task", "cartpole", "--time-budget", 0), "--time-budget"),
        (("train", "--task", "cartpole", "--stop-at-success", 2), "--stop-at-success"),
        (("train", "--task", "cartpole", "--num-envs", 0), "--num-envs"),
        (("train", "--task", "cartpole", "--eval-interval", -1), "--eval-interval"),
        (
            ("train", "--task", "cartpole", "--set", "max_angl=1"),
            "--set max_angl: unknown key 'max_angl' of task 'cartpole'; closest known names: 'max_angle'",
        ),  # fmt: skip
        (("train", "--task", "cartpole", "--set", "max_angle"), "--set: expected KEY=VALUE"),
        (("train", "--task", "cartpole", "--set", "max_angle=-1"), "--set max_angle: config.max_angle: expected"),
        (("train", "--task", "cartpole", "--task-config", "missing.json"), "--task-config: no such file"),
        (("train", "--task", "cartpole", "--task-config", "A_FILE"), "--task-config A_FILE: not JSON"),
        (("train", "--no-progress"), "--task: give a registered task"),
        (("train", "--resume", "missing.pt"), "--resume: no such file"),
        (("train", "--resume", "A_FILE"), "--resume: A_FILE:"),
        (("train", "--resume", "CKPT", "--task", "reach"), "was trained on task 'cartpole', not 'reach'"),
        (("train", "--resume", "CKPT", "--set", "max_angl=1"), "--set max_angl: unknown key"),
        (("eval", "--checkpoint", "missing.pt"), "--checkpoint"),
        (("eval", "--checkpoint", "A_FILE"), "--checkpoint"),
        (("eval", "--checkpoint", "CKPT", "--task", "reach"), "--task"),
        (("eval", "--checkpoint", "CKPT", "--seeds", "0,x"), "--seeds"),
        (("eval", "--checkpoint", "CKPT", "--seeds", "1,1"), "--seeds"),
        (("eval", "--checkpoint", "CKPT", "--video", "v.gif"), "--video"),
        (("eval", "--checkpoint", "CKPT", "--sim", "bullet"), "--sim"),
        (("eval", "--checkpoint", "CKPT", "--video", "v.mp4", "--video-seconds", 0), "--video-seconds"),
        (("eval", "--checkpoint", "CKPT", "--video", "v.mp4", "--video-seconds", "inf"), "--video-seconds"),
        (("eval", "--checkpoint", "CKPT", "--video", "v.mp4", "--video-episodes", 0), "--video-episodes"),
        (("eval", "--checkpoint", "CKPT", "--video-seconds", 3), "--video-seconds"),
        (
            ("eval", "--checkpoint", "CKPT", "--video", "v.mp4", "--video-seconds", 3, "--video-episodes", 2),
            "--video-episodes",
        ),
    ],
)
def test_bad_arguments_exit_2_naming_the_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, checkpoint: Path, args: tuple, message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("A_FILE").write_text("not a folder nor a checkpoint")
    Path("BAD_PLAN").write_text('{"terms": [{"kind": "no_such_kind"}]}')
    args = tuple(str(checkpoint) if a == "CKPT" else a for a in args)
    result = _invoke(*args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not list(tmp_path.glob("**/*.pt")) and not list(tmp_path.glob("**/log.csv"))


def test_train_refuses_an_out_in_a_missing_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One rule for every writing command: a missing parent folder is refused (exit 2, one line naming --out)
    before anything is built or written, not created. The default --out's runs/ is made."""
    out = tmp_path / "a" / "b" / "run"
    result = _invoke("train", "--task", "cartpole", "--out", out, *TINY)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == f"error: --out: folder {str(out.parent)!r} does not exist", result.stderr
    assert not (tmp_path / "a").exists()
    monkeypatch.chdir(tmp_path)
    default = _invoke("train", "--task", "cartpole", *TINY)
    assert default.exit_code == 0, default.output
    assert [p.name for p in (tmp_path / "runs").iterdir()][0].startswith("cartpole-mujoco-")


#: what Ray prints when it starts, unless told not to (simbackend.sharding.cluster.QUIET)
RAY_BANNER = ("Started a local Ray instance", "Connected to Ray cluster", "dashboard", "Token authentication")


def test_train_on_sharded_sapien_then_eval_sharded_and_in_process(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """`--shards K` trains on K Ray actors under the unchanged adapters; the policy evaluates on either. The
    command says on how many shards it ran (and that one env capped two shards to one); Ray's start-up banner
    and notices reach neither the command's output nor the process's."""
    pytest.importorskip("ray")
    out = tmp_path / "s"
    result = _invoke(
        "train", "--task", "reach", "--sim", "sapien", "--shards", 2, "-o", "sharding.pool=true", "--out", out,
        "--json", *TINY,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    # one line, on stderr, though the final evaluation's task (32 envs) runs on two shards too
    shard_lines = [line for line in result.stderr.splitlines() if "(Ray actors)" in line]
    assert shard_lines == ["sapien: 8 envs on 2 shards (Ray actors), 4 envs each"], result.stderr
    assert not any(banner in result.stderr for banner in RAY_BANNER), result.stderr
    d = json.loads(result.stdout)  # the line is on stderr: stdout stays JSON
    assert d["iterations"] == 2 and d["env_steps"] > 0
    for extra in ((), ("--shards", 2, "-o", "sharding.pool=true")):
        ev = _invoke("eval", "--checkpoint", out / "checkpoint_final.pt", "--sim", "mujoco", "--episodes", 1, "--json",
                     *extra)  # fmt: skip
        assert ev.exit_code == 0, ev.output
        e = json.loads(ev.stdout)
        assert (e["sim"], e["trained_on"], e["task"]) == ("mujoco", "sapien", "reach")
        capped = "mujoco: 1 env on 1 shard (Ray actors), 1 env each; 2 shards asked for, capped at one per env"
        assert (capped in ev.stderr) == bool(extra), ev.stderr
    printed = capfd.readouterr()
    for banner in RAY_BANNER:
        assert banner not in result.output + printed.out + printed.err, banner


def test_a_bad_shard_count_is_refused_by_name() -> None:
    result = _invoke("run", "--sim", "mujoco", "--model", "pendulum", "--shards", 0, "--steps", 1)
    assert result.exit_code != 0 and "shards" in result.output


def test_eval_video_takes_the_picture_flags(tmp_path: Path, checkpoint: Path) -> None:
    """eval --video draws env 0 of the first seed at --size, undressed with --no-dress (the cart-pole alone on
    black); an unknown --camera fails before a video file is left behind."""
    import imageio

    video = tmp_path / "cartpole.mp4"
    result = _invoke("eval", "--checkpoint", checkpoint, "--seeds", "0", "--episodes", 1, "--video", video,
                     "--size", "96x64", "--no-dress", "--video-seconds", 1)  # fmt: skip
    assert result.exit_code == 0, result.output
    with imageio.get_reader(str(video)) as reader:
        frames = [f for f in reader]
    assert len(frames) > 10 and frames[0].shape == (64, 96, 3)
    assert all((f.max(axis=-1) < 16).mean() > 0.8 for f in frames)  # no floor, no sky
    bad = tmp_path / "bad.mp4"
    result = _invoke("eval", "--checkpoint", checkpoint, "--seeds", "0", "--episodes", 1, "--video", bad,
                     "--camera", "nocam")  # fmt: skip
    assert result.exit_code != 0 and "unknown camera name 'nocam'" in result.output
    assert not bad.exists()


def _frames(video: Path) -> tuple[int, float]:
    """(frames, frames per second) of an mp4."""
    import imageio

    with imageio.get_reader(str(video)) as reader:
        return sum(1 for _ in reader), float(reader.get_meta_data()["fps"])


def test_eval_video_is_as_long_as_asked_across_resets(tmp_path: Path, checkpoint: Path) -> None:
    """A video of --video-seconds (4 s: longer than the evaluation's episodes, so env 0's episodes follow one
    another and the envs play on past the evaluation), or of env 0's first --video-episodes episodes; at most 30
    frames per second; the figures are those without a video."""
    plain = _invoke("eval", "--checkpoint", checkpoint, "--seeds", "0", "--episodes", 2, "--json")
    assert plain.exit_code == 0, plain.output
    figures = json.loads(plain.stdout)
    longest = max(row["mean_length"] for row in figures["per_seed"]) * 2  # steps of the longer of 2 episodes at most
    assert longest * 0.02 < 4.0  # cart-pole at 50 Hz: the evaluation alone is shorter than the video
    video = tmp_path / "four_seconds.mp4"
    result = _invoke("eval", "--checkpoint", checkpoint, "--seeds", "0", "--episodes", 2, "--json", "--video", video,
                     "--size", "32x32", "--video-seconds", 4)  # fmt: skip
    assert result.exit_code == 0, result.output
    with_video = json.loads(result.stdout)
    for key in ("mean_return", "success_rate", "mean_length"):
        assert with_video[key] == figures[key], key
    frames, fps = _frames(video)
    assert fps == 25.0  # 50 Hz control: every second step
    assert frames == 101 and frames / fps >= 4.0, frames  # the start, then 200 steps drawn every second one
    episodes = tmp_path / "three_episodes.mp4"
    result = _invoke("eval", "--checkpoint", checkpoint, "--seeds", "0", "--episodes", 1, "--video", episodes,
                     "--size", "32x32", "--video-episodes", 3)  # fmt: skip
    assert result.exit_code == 0, result.output
    frames, _ = _frames(episodes)
    length = figures["mean_length"]["mean"]
    assert 3 * length / 2 / 2 < frames < 3 * length, (frames, length)  # about 3 episodes at every second step


def test_eval_video_draws_after_the_rollout(tmp_path: Path, checkpoint: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The video costs its drawing only: no frame is drawn while the policy steps (one check of the camera
    before the first step), every frame once the rollout is over."""
    from simbackend.playback.render import Renderer
    from simbackend.tasks.base import Task

    events: list[str] = []
    step, render = Task.step, Renderer.render

    def counted_step(self: Any, action: Any) -> Any:
        events.append("step")
        return step(self, action)

    def counted_render(self: Any, qpos: Any, *args: Any, **kwargs: Any) -> Any:
        events.append("render")
        return render(self, qpos, *args, **kwargs)

    monkeypatch.setattr(Task, "step", counted_step)
    monkeypatch.setattr(Renderer, "render", counted_render)
    from simbackend.training import evaluate

    evaluate(checkpoint, seeds=[0], episodes_per_seed=1, video=tmp_path / "v.mp4", video_size=(32, 32),
             video_seconds=0.5)  # fmt: skip
    first, last = events.index("step"), len(events) - 1 - events[::-1].index("step")
    assert "render" not in events[first:last], events
    assert events[:first] == ["render"] and events[last + 1 :].count("render") >= 1
