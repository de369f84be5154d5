"""``simbackend train`` and ``simbackend eval``: PPO (rsl-rl) on a task, and a checkpoint on any engine.

Registered on the application (:mod:`simbackend.cli.common`) when :mod:`simbackend.cli.main` is
imported; nothing here loads torch, rsl-rl or an engine before a command runs.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import typer
from rich.text import Text

from .common import (
    BuildFlags,
    PictureFlags,
    app,
    check_mix,
    check_options_for,
    check_output,
    check_output_folder,
    check_sim,
    console,
    fail,
    load_plan,
    overwrite_option,
    sim_option,
    staged_folder,
    staged_outputs,
    with_build_flags,
    with_picture_flags,
)
from .layout import columns, fields, show


def _check_task(task: str) -> str:
    """A registered task name, or exit 2 naming ``--task``."""
    from simbackend.errors import SimBackendError
    from simbackend.tasks import get_task_class

    try:
        get_task_class(task)
    except SimBackendError as e:
        raise fail(f"--task: {e}", code=2) from None
    return task


def _resume_checkpoint(path: str | None, task: str | None) -> Any:
    """The checkpoint ``--resume`` names (``None`` without it); exit 2 naming ``--resume`` for a missing or
    unreadable file, or ``--task`` when it names another task than the checkpoint's."""
    if path is None:
        return None
    if not Path(path).is_file():
        raise fail(f"--resume: no such file {path}", code=2)
    from simbackend.errors import SimBackendError
    from simbackend.training.checkpoint import load_checkpoint

    try:
        ckpt = load_checkpoint(path)
    except SimBackendError as e:
        raise fail(f"--resume: {path}: {str(e).removeprefix('checkpoint: ')}", code=2) from None
    if task is not None and task != ckpt.task:
        raise fail(f"--task: {path} was trained on task {ckpt.task!r}, not {task!r}; leave --task out", code=2)
    return ckpt


def _task_config(
    task: str, robot: str | None, file: str | None, sets: list[str], ckpt: Any, resume: str | None
) -> dict | None:
    """The task config mapping (``None``: the task's defaults) from the checkpoint ``--resume`` names, then
    ``--task-config``, then ``--robot`` (``robot=ROBOT``), then each ``--set``
    (:func:`simbackend.tasks.settings.task_settings`); exit 2 naming the flag of a bad key or value, a task that
    takes no robot, or a robot that is not registered."""
    from simbackend.errors import SimBackendError
    from simbackend.tasks import get_task_class
    from simbackend.tasks.settings import task_settings

    given = [f"robot={json.dumps(robot)}"] if robot is not None else []
    if robot is not None:
        cls = get_task_class(task)
        if "robot" not in {f.name for f in dataclasses.fields(cls.config_class)}:
            raise fail(f"--robot: task {task!r} takes no robot (the velocity task does)", code=2)
    if ckpt is None and file is None and not given and not sets:
        return None
    try:
        config = task_settings(task, file=file, sets=[*given, *sets], base=None if ckpt is None else ckpt.task_config)
    except SimBackendError as e:
        message = str(e)
        if message.startswith("base:"):
            message = f"--resume {resume}:{message.removeprefix('base:')}"
        elif robot is not None and message.startswith("--set robot:") and not any(s.startswith("robot") for s in sets):
            message = "--robot:" + message.removeprefix("--set robot:")
        raise fail(message, code=2) from None
    if isinstance(config.get("robot"), str):
        _check_robot(config["robot"])
    return config


def _check_robot(robot: str) -> None:
    """Exit 2 where the robot is not registered, or its description is bad or does not fit its model (a joint
    it lacks, a missing model file): one line naming the description's field or file."""
    from simbackend.errors import ArgumentTypeError, InvalidArgumentError, SimBackendError
    from simbackend.robots import check_robot, get_robot

    try:
        get_robot(robot)
    except SimBackendError as e:
        raise fail(str(e), code=2) from None  # it names the robot's field (robot.kp) or file
    try:
        check_robot(robot)
    except (InvalidArgumentError, ArgumentTypeError) as e:
        raise fail(str(e), code=2) from None


def _check_resume(ckpt: Any, task_config: dict | None, robot: str | None, sets: list[str]) -> None:
    """The ``--resume`` checkpoint against the run asked for: the robot it trained (exit 2 naming the flag that
    changed it), then its critic and optimizer (exit 2 naming ``--resume``)."""
    from simbackend.errors import SimBackendError
    from simbackend.training.checkpoint import check_resumable, robot_change

    change = robot_change(ckpt, (task_config or {}).get("robot"))
    if change is not None:
        flag = (
            "--robot" if robot is not None else "--set" if any(s.startswith("robot") for s in sets) else "--task-config"
        )
        leave = "--set robot=..." if flag == "--set" else flag
        raise fail(f"{flag}: {change}; a resumed run goes on with the robot it trained (leave {leave} out)", code=2)
    try:
        check_resumable(ckpt)
    except SimBackendError as e:
        raise fail(f"--resume: {str(e).removeprefix('resume: ')}", code=2) from None


def _settings_text(task: str, config: Any) -> str:
    """``key=value, ...``: the task settings of ``config`` that differ from the task's defaults."""
    from simbackend.tasks.settings import changed_settings, format_setting

    changed = changed_settings(task, config or {})
    return ", ".join(format_setting(k, v) for k, v in changed) if changed else "the task's defaults"


def _parse_seeds(text: str) -> tuple[int, ...]:
    """``"0,1,2"`` or ``"0-4"`` (or a mix) as distinct non-negative ints; exit 2 naming ``--seeds``."""
    out: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part[1:]:
                lo, hi = part.split("-", 1)
                out.extend(range(int(lo), int(hi) + 1))
            else:
                out.append(int(part))
    except ValueError:
        raise fail(f"--seeds: expected seeds like 0,1,2 or 0-4, got {text!r}", code=2) from None
    if not out or min(out) < 0 or len(set(out)) != len(out):
        raise fail(f"--seeds: expected distinct non-negative seeds, got {text!r}", code=2)
    return tuple(out)


def _parse_rate(text: str | None) -> Any:
    """``--stop-at-success``: a rate in (0, 1], ``off`` (``None``), or not given (``...``: the task's default)."""
    if text is None:
        return ...
    if text.strip().lower() in ("off", "none", "no"):
        return None
    try:
        rate = float(text)
    except ValueError:
        rate = math.nan
    if not (0.0 < rate <= 1.0):
        raise fail(f"--stop-at-success: expected a success rate in (0, 1] or 'off', got {text!r}", code=2)
    return rate


def _moved(result: Any, staged: str, out: str) -> dict[str, Any]:
    """The paths of ``result`` (a dataclass) that lay in the folder ``staged``, now in ``out``."""
    moved: dict[str, Any] = {}
    for f in dataclasses.fields(result):
        path = getattr(result, f.name)
        if isinstance(path, Path) and path.absolute().is_relative_to(Path(staged).absolute()):
            moved[f.name] = Path(out) / path.absolute().relative_to(Path(staged).absolute())
    return moved


def _fmt_ci(est: Any, digits: int = 3) -> str:
    if est.half_width != est.half_width:  # NaN: one seed
        return "-"
    return f"[{est.low:.{digits}g}, {est.high:.{digits}g}]"


# ----------------------------------------------------------------------
# train
# ----------------------------------------------------------------------
@app.command("train")
@with_build_flags
def train_command(
    task: str | None = typer.Option(
        None,
        "--task",
        "-t",
        metavar="TASK",
        help="Registered task (e.g. cartpole); required unless --resume gives it (then a check).",
    ),
    sim: str = sim_option(),
    robot: str | None = typer.Option(
        None,
        "--robot",
        "-r",
        metavar="ROBOT",
        help="Robot of a locomotion task: a name (simbackend robots) or a JSON description file (the same as"
        " --set robot=ROBOT, before the --set options).",
    ),
    task_config_file: str | None = typer.Option(
        None,
        "--task-config",
        metavar="FILE.json",
        help='Task settings: a JSON object of the task config\'s fields (e.g. {"action_scale": 0.3}).',
    ),
    sets: list[str] | None = typer.Option(
        None,
        "--set",
        metavar="KEY=VALUE",
        help="A task setting, repeatable, over --task-config's: a field of the task's config, dotted into a"
        " mapping field (reward_weights.tilt=-2); VALUE is JSON where it parses, else text (robot=go1).",
    ),
    resume: str | None = typer.Option(
        None,
        "--resume",
        metavar="CKPT.pt",
        help="Continue the run of this checkpoint: its weights, optimizer, normalizer and iteration count, its"
        " task, task settings (under --task-config and --set) and training config (under the flags given);"
        " --iterations more iterations.",
    ),
    num_envs: int | None = typer.Option(
        None, "--num-envs", "-n", min=1, help="Parallel training envs (default: the task's training default)."
    ),
    dr_path: str | None = typer.Option(
        None, "--dr", metavar="PLAN.json", help="Domain-randomization plan of the training task (and its evaluations)."
    ),
    seed: int | None = typer.Option(
        None,
        "--seed",
        min=0,
        max=2**63 - 1,
        help="Seed of the task's resets, the networks and the action noise (default 0; with --resume, the"
        " checkpoint's).",
    ),
    iterations: int | None = typer.Option(
        None, "--iterations", "-i", min=1, help="PPO iterations at most (default: the task's)."
    ),
    time_budget: float | None = typer.Option(
        None,
        "--time-budget",
        metavar="SECONDS",
        help="Stop before an iteration that would end past this many seconds of training.",
    ),
    out: str | None = typer.Option(
        None,
        "--out",
        metavar="DIR",
        help="Folder of checkpoints, logs and curve (default: runs/TASK-SIM-TIME, runs/ made if missing); its"
        " parent folder must exist, and one that holds files is refused without --overwrite.",
    ),
    eval_interval: int | None = typer.Option(
        None,
        "--eval-interval",
        min=0,
        help="Evaluate every this many iterations (0: only at the end; default: after each of the first 5, then"
        " 16 times at widening gaps up to --iterations). The last iteration is always evaluated.",
    ),
    stop_at_success: str | None = typer.Option(
        None,
        "--stop-at-success",
        metavar="RATE|off",
        help="Stop once an evaluation's success rate reaches RATE (default: the task's; 'off': never).",
    ),
    progress: bool = typer.Option(
        True, "--progress/--no-progress", help="Progress on stderr: a bar on a terminal, plain lines elsewhere."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON (stdout) instead of a table."),
    overwrite: bool = overwrite_option(),
    *,
    build: BuildFlags,
) -> None:
    """Train PPO (rsl-rl) on --task simulated by --sim; write checkpoints, a CSV/JSON log and a learning curve.

    The defaults (envs, iterations, network sizes, PPO settings, evaluation and early stop) are the task's
    (simbackend.training.TASK_DEFAULTS). Every evaluation runs the deterministic policy on a separate task with a
    fixed seed. checkpoint_final.pt holds everything `simbackend eval` needs, on any engine. The run is written in a
    temporary folder beside --out that takes its place when training ends (a failed run leaves an earlier --out as
    it was). Exit code: 0 when trained, 1 when training failed, 2 for bad arguments (unknown task or backend, bad
    --dr plan, an --out that is a file, or that holds files without --overwrite).
    """
    if time_budget is not None and not (time_budget > 0 and math.isfinite(time_budget)):
        raise fail(f"--time-budget: expected a number of seconds > 0, got {time_budget!r}", code=2)
    ckpt = _resume_checkpoint(resume, task)
    if ckpt is not None:
        task = ckpt.task
    elif task is None:
        raise fail("--task: give a registered task (e.g. --task cartpole), or --resume CHECKPOINT", code=2)
    task = _check_task(task)
    task_config = _task_config(task, robot, task_config_file, list(sets or ()), ckpt, resume)
    if ckpt is not None:
        _check_resume(ckpt, task_config, robot, list(sets or ()))
    rate = _parse_rate(stop_at_success)
    default_out = out is None
    if out is None:
        robot_name = (task_config or {}).get("robot")
        label = task if not isinstance(robot_name, str) else f"{task}-{Path(robot_name).stem}"
        out = str(Path("runs") / f"{label}-{sim}-{time.strftime('%Y%m%d-%H%M%S')}")
    check_output_folder(out, "--out", overwrite, make_parents=default_out)  # runs/ is made; a given parent must exist

    from simbackend.errors import SimBackendError
    from simbackend.training import TrainConfig, train

    overrides: dict[str, Any] = {}
    for key, value in (
        ("seed", seed),
        ("num_envs", num_envs),
        ("max_iterations", iterations),
        ("time_budget_s", time_budget),
        ("eval_interval", eval_interval),
    ):
        if value is not None:
            overrides[key] = value
    if rate is not ...:
        overrides["stop_at_success"] = rate
    try:
        if ckpt is None:
            config = TrainConfig.for_task(task, **{"seed": 0, **overrides})
        else:  # the run's own settings (network sizes included), under the flags given
            config = TrainConfig.from_dict({**ckpt.data["train_config"], **overrides})
    except SimBackendError as e:
        raise fail(str(e), code=2) from None
    check_mix(sim, config.num_envs)  # the task's default N, where --num-envs did not say
    plan = load_plan(dr_path, config.num_envs)
    resuming: dict[str, Any] = {} if resume is None else {"resume": resume}
    with staged_folder(out, make_parents=default_out) as staged:
        try:
            result = train(
                task,
                sim,
                train_config=config,
                task_config=task_config,
                randomization=plan,
                out_dir=staged,
                progress=progress,
                device=build.device,
                backend_options=build.options,
                **resuming,
            )
        except (SimBackendError, ValueError, TypeError, RuntimeError) as e:
            raise fail(f"training {task!r} on {sim!r} failed: {e}") from None
    result = dataclasses.replace(result, **_moved(result, staged, out))  # the files where they now are
    if as_json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
        return
    from simbackend.training import load_checkpoint

    ev = result.final_eval
    stored = load_checkpoint(result.checkpoint).data  # what the checkpoint holds, as eval will read it
    done, start = int(stored.get("iteration", result.iterations)), 0 if ckpt is None else ckpt.iteration
    resumed = [] if ckpt is None else [("resumed from", [f"{resume} (iteration {ckpt.iteration})"])]
    fields(
        console,
        [
            ("task | sim", [f"{task} | {sim} | {config.num_envs} envs | seed {config.seed}"]),
            ("task settings", [_settings_text(task, stored["task_config"])]),
            *resumed,
            (
                "iterations",
                [
                    f"{done} ({done - start} in this run; stopped: {result.stop_reason})"
                    if ckpt
                    else f"{done} (stopped: {result.stop_reason})"
                ],
            ),
            ("env steps", [f"{result.env_steps:,}"]),
            ("wall time", [f"{result.wall_s:.1f} s"]),
            ("env-steps/s", [f"{result.env_steps_per_s:,.0f} (evaluations included)"]),
            (
                "final evaluation",
                [
                    f"return {ev['return']:.1f}, success {100 * ev['success']:.0f} %,"
                    f" length {ev['length']:.1f} ({ev['episodes']} episodes, deterministic)"
                ],
            ),
            *(
                [("by engine", [", ".join(f"{k} {100 * v:.0f} %" for k, v in ev["success_by_engine"].items())])]
                if ev.get("success_by_engine")
                else []
            ),
            ("checkpoint", [str(result.checkpoint)]),  # paths are words: wrapped around, never cut short
            ("log", [f"{result.log_csv} | {result.log_json.name}"]),
            ("learning curve", [str(result.curve_png)]),
        ],
    )


# ----------------------------------------------------------------------
# eval
# ----------------------------------------------------------------------
@app.command("eval")
@with_build_flags
@with_picture_flags
def eval_command(
    checkpoint: list[str] = typer.Option(
        [],
        "--checkpoint",
        "-c",
        metavar="CKPT.pt",
        help="A checkpoint written by `simbackend train`; repeatable: several print one table.",
    ),
    policy: str | None = typer.Option(
        None,
        "--policy",
        metavar="POLICY.onnx",
        help="An exported ONNX policy with its metadata (`simbackend export`, or another framework's: docs/deploy.md)"
        " instead of --checkpoint; refused in one line naming the metadata field that does not fit the robot.",
    ),
    robot: str | None = typer.Option(
        None, "--robot", metavar="ROBOT", help="With --policy: the robot (default: the policy metadata's)."
    ),
    task: str | None = typer.Option(
        None,
        "--task",
        "-t",
        metavar="TASK",
        help="The checkpoint's task (a check; default: read from the checkpoint); with --policy, the task to run it on"
        " (default: the metadata's).",
    ),
    sim: str | None = typer.Option(
        None,
        "--sim",
        callback=check_sim,
        metavar="NAME",
        help="Backend to evaluate on (default: the one it was trained on).",
    ),
    num_envs: int | None = typer.Option(
        None, "--num-envs", "-n", min=1, help="Parallel envs per seed (default: --episodes)."
    ),
    seeds: str = typer.Option(
        "100-102",
        "--seeds",
        metavar="SEEDS",
        help="Evaluation seeds (reset streams), e.g. 100,101,102 or 100-104; apart from the training seeds by default.",
    ),
    episodes: int | None = typer.Option(
        None,
        "--episodes",
        "-e",
        min=1,
        help="Complete episodes per seed (default: the training evaluations', rounded up to a multiple of a"
        " terrain's tiles, so that every tile is played, each as often).",
    ),
    plan: str = typer.Option(
        "none",
        "--plan",
        metavar="none|training|PLAN.json",
        help="Domain randomization during the evaluation: none (the nominal engine, as benchmarks/sim_to_sim.py"
        " and the README's tables evaluate), training (the checkpoint's training plan) or a plan file. A term the"
        " engine does not apply exits 2 naming it, unless --skip-unsupported.",
    ),
    skip_unsupported: bool = typer.Option(
        False, "--skip-unsupported", help="Leave out the --plan terms the engine does not apply (printed)."
    ),
    video: str | None = typer.Option(
        None,
        "--video",
        metavar="OUT.mp4",
        help="Video of env 0 during the first seed, its episodes one after the other across resets (10 s unless"
        " --video-seconds or --video-episodes say otherwise); drawn once the rollout is over, so the physics is"
        " not slowed.",
    ),
    video_seconds: float | None = typer.Option(
        None,
        "--video-seconds",
        metavar="SECONDS",
        help="Length of --video in simulated seconds (default 10, at most 3600); where the evaluation ends sooner"
        " the envs play on, uncounted, until the video has them.",
    ),
    video_episodes: int | None = typer.Option(
        None, "--video-episodes", metavar="N", help="Length of --video as env 0's first N episodes, instead of seconds."
    ),
    overwrite: bool = overwrite_option(),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as JSON (stdout) instead of a table."),
    ray: bool = typer.Option(
        False,
        "--ray",
        help="Run each (checkpoint, seed) as a Ray task, in parallel (pip install 'simbackend[ray]'; --ray-address).",
    ),
    *,
    build: BuildFlags,
    picture: PictureFlags,
) -> None:
    """Evaluate a checkpoint's deterministic policy on any engine: return, success rate, episode length.

    With several --checkpoint or --ray, every (checkpoint, seed) is one job, run as a Ray task with --ray (a local
    Ray, or the cluster at --ray-address); the per-seed results are then joined as one evaluation would give them,
    and one table (or a JSON list) follows a progress bar.

    Each metric is the mean over seeds of the per-seed means, with a 95 % confidence interval from Student's t
    distribution over the seeds (n-1 degrees of freedom; none for one seed); the success rate's is Wilson's score
    interval over all the episodes (a proportion's: within [0, 1]). The same seeds play the same episodes
    on every engine. Exit code: 0 when evaluated, 1 when the evaluation failed, 2 for bad arguments (missing or
    unreadable checkpoint, a --task other than the checkpoint's, malformed --seeds, a bad --video path).
    """
    seed_list = _parse_seeds(seeds)
    if (policy is None) == (not checkpoint):
        raise fail("--checkpoint: give --checkpoint or --policy (one of them)", code=2)
    if robot is not None and policy is None:
        raise fail("--robot: the robot of an exported policy (--policy); a checkpoint names its own", code=2)
    if policy is not None and ray:
        raise fail("--ray: runs checkpoints as Ray tasks; an exported policy (--policy) runs in this process", code=2)
    sweep = ray or len(checkpoint) > 1
    _check_video_length(video, video_seconds, video_episodes)
    plan_args = _check_plan(plan, skip_unsupported)
    if video is not None:
        if sweep:
            raise fail("--video: one checkpoint evaluated in this process only (not with --ray)", code=2)
        check_output(video, "--video", (".mp4",), overwrite)
    video_args = (video, video_seconds, video_episodes, picture)
    if policy is not None:
        if robot is not None:
            _check_robot(robot)
        exported = _load_policy(policy, task, robot)
        check_options_for(sim or "mujoco", build)
        _evaluate_one(
            exported, policy, sim or "mujoco", num_envs, seed_list, episodes, as_json, video_args, build, plan_args
        )
        return
    for path in checkpoint:
        if not Path(path).is_file():
            raise fail(f"--checkpoint: no such file {path}", code=2)

    from simbackend.errors import SimBackendError
    from simbackend.training import load_checkpoint

    ckpts = []
    for path in checkpoint:
        try:
            ckpts.append(load_checkpoint(path))
        except SimBackendError as e:
            raise fail(f"--checkpoint: {path}: {str(e).removeprefix('checkpoint: ')}", code=2) from None
        if task is not None and task != ckpts[-1].task:
            raise fail(f"--task: {path} was trained on task {ckpts[-1].task!r}, not {task!r}", code=2)
        check_options_for(sim or ckpts[-1].sim, build)  # the engine block of the engine it runs on
    if sweep:
        _eval_sweep(ckpts, sim, num_envs, seed_list, episodes, as_json, ray, build, plan_args)
        return
    _evaluate_one(ckpts[0], checkpoint[0], sim, num_envs, seed_list, episodes, as_json, video_args, build, plan_args)


def _check_plan(plan: str, skip_unsupported: bool) -> tuple[str, bool]:
    """``(--plan, --skip-unsupported)``: a plan file read and checked now (exit 2 naming ``--plan``)."""
    from simbackend.training.evaluation import PLAN_WORDS

    if skip_unsupported and plan == "none":
        raise fail("--skip-unsupported: leaves out terms of a --plan; give --plan training or --plan PLAN.json", code=2)
    if plan not in PLAN_WORDS:
        if not Path(plan).is_file():
            raise fail(f"--plan: expected {', '.join(PLAN_WORDS)} or a plan file, got {plan!r} (no such file)", code=2)
        load_plan(plan, 1, flag="--plan")
    return plan, skip_unsupported


def _plan_error(e: Exception) -> typer.Exit | None:
    """An evaluation's refusal of its plan (``plan: ...``) as the command's: exit 2 naming ``--plan``."""
    text = str(e)
    if not text.startswith("plan:"):
        return None
    return fail("--plan:" + text.removeprefix("plan:").replace("skip_unsupported=True", "--skip-unsupported"), code=2)


def _plan_line(result: Any) -> str:
    """What the evaluation ran under: the nominal engine or which plan, and the terms it left out."""
    if result.plan == "none" or (result.plan == "training" and not result.plan_terms and not result.skipped_terms):
        where = "trained without a plan" if result.plan == "training" else "--plan training: under the training plan"
        line = f"randomization in this evaluation: none, the nominal engine ({where})"
    else:
        source = {"training": "the training plan", "task_config_override": "the task config's plan"}.get(
            result.plan, result.plan
        )
        terms = ", ".join(result.plan_terms) or "no term"
        line = f"randomization in this evaluation: {source} ({len(result.plan_terms)} term(s): {terms})"
    if result.skipped_terms:
        line += f"; left out on {result.sim} (not applied there): {', '.join(result.skipped_terms)}"
    return line


def _load_policy(path: str, task: str | None, robot: str | None) -> Any:
    """The exported policy ``--policy`` names; exit 2 naming ``--policy`` for a missing file or bad metadata."""
    from simbackend.errors import SimBackendError
    from simbackend.training.exported import load_policy

    if not Path(path).is_file():
        raise fail(f"--policy: no such file {path}", code=2)
    try:
        return load_policy(path, task=task, robot=robot)
    except SimBackendError as e:
        raise fail(f"--policy: {path}: {str(e).removeprefix('policy: ')}", code=2) from None


def _evaluate_one(
    source: Any,
    label: str,
    sim: str | None,
    num_envs: int | None,
    seeds: tuple[int, ...],
    episodes: int | None,
    as_json: bool,
    video_args: tuple,
    build: BuildFlags,
    plan_args: tuple[str, bool] = ("none", False),
) -> None:
    """One checkpoint or exported policy (``label``: its path) evaluated in this process: the table or the JSON.
    An exported policy's metadata that does not fit the task exits 2 naming ``--policy``; a plan term the engine
    does not apply, naming ``--plan``."""
    from simbackend.errors import SimBackendError
    from simbackend.training import evaluate

    video, video_seconds, video_episodes, picture = video_args
    with staged_outputs(video) as (video_tmp,):
        try:
            result = evaluate(
                source,
                sim,
                num_envs=num_envs,
                seeds=seeds,
                episodes_per_seed=episodes,
                video=video_tmp,
                device=build.device,
                backend_options=build.options,
                video_size=(picture.width, picture.height),
                video_camera=picture.camera,
                video_dress=picture.dress,
                video_seconds=video_seconds,
                video_episodes=video_episodes,
                plan=plan_args[0],
                skip_unsupported=plan_args[1],
            )
        except (SimBackendError, ValueError, TypeError, RuntimeError) as e:
            if str(e).startswith("policy metadata"):
                raise fail(f"--policy: {label}: {e}", code=2) from None
            refused = _plan_error(e)
            if refused is not None:
                raise refused from None
            raise fail(f"evaluating {label} on {sim or source.sim!r} failed: {e}") from None
    if result.video is not None:
        result = dataclasses.replace(result, video=video)  # where it now is
    if as_json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
        return
    _print_evaluation(result, _settings_text(source.task, source.task_config))


@app.command("export")
def export_command(
    checkpoint: str = typer.Argument(..., metavar="CKPT.pt", help="A checkpoint written by `simbackend train`."),
    out: str = typer.Option(..., "--out", "-o", metavar="POLICY.onnx", help="The ONNX file to write."),
    torchscript: bool = typer.Option(False, "--torchscript", help="Also write the network as TorchScript (.pt)."),
    scene: bool = typer.Option(
        True, "--scene/--no-scene", help="Copy the robot's scene beside it (POLICY_scene/), for examples/deploy/."
    ),
    overwrite: bool = overwrite_option(),
) -> None:
    """Export a checkpoint's policy as ONNX with its I/O contract, for a robot's controller.

    Writes POLICY.onnx (the actor with its observation normaliser folded in: raw observations in, actions out;
    opset 18, onnxruntime on a CPU), POLICY.json (the metadata, also inside the ONNX file: joints in order, default
    pose, actuation and gains, action scale and clip, control period, every observation term with its slice, frame,
    units and scale, commands, episode limits, quaternion convention, version and the checkpoint's sha256) and
    POLICY_scene/ (the robot's scene). examples/deploy/run_policy.py runs it with mujoco, onnxruntime and numpy
    alone; `simbackend eval --policy POLICY.onnx --sim NAME` runs it on any engine. Fields: docs/deploy.md.
    """
    if not Path(checkpoint).is_file():
        raise fail(f"CHECKPOINT: no such file {checkpoint}", code=2)
    check_output(out, "--out", (".onnx",), overwrite)
    from simbackend.errors import SimBackendError
    from simbackend.training.checkpoint import load_checkpoint
    from simbackend.training.export import export_policy

    try:
        ckpt = load_checkpoint(checkpoint)
    except SimBackendError as e:
        raise fail(f"CHECKPOINT: {checkpoint}: {str(e).removeprefix('checkpoint: ')}", code=2) from None
    try:
        result = export_policy(ckpt, out, scene=scene, torchscript=torchscript, overwrite=overwrite)
    except SimBackendError as e:
        text = str(e)
        if text.startswith("out:"):  # the Python API's words as the command's
            text = "--out:" + text.removeprefix("out:").replace("overwrite=True", "--overwrite")
        raise fail(text, code=2) from None
    meta = result.metadata
    console.print(
        Text(
            f"{result.onnx}: {meta.get('robot', {}).get('name', ckpt.task)} policy, {meta['network']['input_size']}"
            f" observations -> {meta['network']['output_size']} actions every {meta['control']['period']:g} s"
        ),
        soft_wrap=True,
    )
    for path in (result.json, result.scene, result.torchscript):
        if path is not None:
            console.print(Text(f"  {path}"), soft_wrap=True)


def _check_video_length(video: str | None, seconds: float | None, episodes: int | None) -> None:
    """``--video-seconds`` or ``--video-episodes`` (not both, with ``--video``, in range); exit 2 naming the flag."""
    given = [
        flag for flag, value in (("--video-seconds", seconds), ("--video-episodes", episodes)) if value is not None
    ]
    if len(given) == 2:
        raise fail("--video-episodes: give --video-seconds or --video-episodes, not both", code=2)
    if given and video is None:
        raise fail(f"{given[0]}: the length of a video; give --video OUT.mp4 too", code=2)
    from simbackend.errors import SimBackendError
    from simbackend.training.evaluation import video_length

    try:
        video_length(seconds, episodes)
    except SimBackendError as e:
        raise fail("--" + str(e).replace("_", "-", 1), code=2) from None


def _eval_job(
    ckpt: Any,
    sim: str | None,
    num_envs: int | None,
    seed: int,
    episodes: int | None,
    options: dict,
    plan_args: tuple[str, bool] = ("none", False),
) -> Any:
    """One (checkpoint, seed) of an evaluation sweep (a Ray task: importable, positional)."""
    from simbackend.training import evaluate

    return evaluate(ckpt, sim, num_envs=num_envs, seeds=[seed], episodes_per_seed=episodes, backend_options=options,
                    plan=plan_args[0], skip_unsupported=plan_args[1])  # fmt: skip


def _eval_sweep(
    ckpts: list,
    sim: str | None,
    num_envs: int | None,
    seeds: tuple[int, ...],
    episodes: int | None,
    as_json: bool,
    use_ray: bool,
    build: BuildFlags,
    plan_args: tuple[str, bool] = ("none", False),
) -> None:
    """``simbackend eval`` over checkpoints x seeds as jobs; per checkpoint the seeds joined; one table."""
    from simbackend.errors import SimBackendError
    from simbackend.sharding.sweep import JobFailed, fan_out
    from simbackend.training import merge_seeds

    jobs = [(c, sim, num_envs, s, episodes, build.options, plan_args) for c in ckpts for s in seeds]
    try:
        done = fan_out(_eval_job, jobs, use_ray=use_ray, address=build.ray_address, label="evaluations")
    except SimBackendError as e:  # the ray extra missing
        raise fail(str(e), code=2) from None
    results: list[Any] = []
    for i in range(len(ckpts)):
        mine = done[i * len(seeds) : (i + 1) * len(seeds)]
        failed = [r for r in mine if isinstance(r, JobFailed)]
        results.append(failed[0] if failed else merge_seeds(mine))
    ok = not any(isinstance(r, JobFailed) for r in results)
    if as_json:
        out = [
            {"checkpoint": str(c.path), "error": r.error} if isinstance(r, JobFailed) else r.to_dict()
            for c, r in zip(ckpts, results, strict=True)
        ]
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
        raise typer.Exit(0 if ok else 1)
    if len(results) == 1 and ok:
        _print_evaluation(results[0], _settings_text(ckpts[0].task, ckpts[0].task_config))
        return
    rows = []
    for c, r in zip(ckpts, results, strict=True):
        if isinstance(r, JobFailed):
            rows.append((str(c.path), c.task, c.sim, sim or c.sim, Text(r.error, style="red"), "", ""))
            continue
        cells = [f"{est.mean:{fmt}} {_fmt_ci(est, 4)}" for est, fmt in
                 ((r.mean_return, ".1f"), (r.success_rate, ".3f"), (r.mean_length, ".1f"))]  # fmt: skip
        rows.append((str(c.path), r.task, r.trained_on, r.sim, *cells))
    plans = {_plan_line(r) for r in results if not isinstance(r, JobFailed)}
    headers = ("checkpoint", "task", "trained on", "evaluated on", "return", "success rate", "episode length")
    show(
        console,
        f"{len(ckpts)} checkpoints x {len(seeds)} seeds; 95% CI: Student's t over seeds, the success rate's"
        " Wilson's over all episodes",
        headers,
        rows,
        wrap=(0, 4),
        plain=[
            (str(row[0]), [f"{h}: {v}" for h, v in zip(headers[1:], row[1:], strict=True) if str(v)]) for row in rows
        ],
    )
    for line in sorted(plans):
        console.print(Text(line), soft_wrap=True)
    raise typer.Exit(0 if ok else 1)


def _print_evaluation(result: Any, settings: str) -> None:
    """The table of one evaluation; ``settings``: the checkpoint's task settings that differ from the defaults."""
    rows = [
        (label, fmt.format(est.mean), _fmt_ci(est, 4), " ".join(fmt.format(s[key]) for s in result.per_seed))
        for label, est, key, fmt in (
            ("return", result.mean_return, "mean_return", "{:.1f}"),
            ("success rate", result.success_rate, "success_rate", "{:.3f}"),
            ("episode length", result.mean_length, "mean_length", "{:.1f}"),
        )
    ]
    headers = ("metric", "mean", "95% CI", "per seed")
    show(
        console,
        f"{result.task}: trained on {result.trained_on} ({result.env_steps:,} env steps), evaluated on {result.sim}",
        headers,
        rows,
        wrap=(3,),
        right=(1, 2, 3),
        plain=lambda: columns(console, headers, rows, (False, True, True, True)),
    )
    n = len(result.seeds)
    console.print(
        Text(
            f"{n} seed{'s' if n > 1 else ''} ({', '.join(map(str, result.seeds))}) x"
            f" {result.episodes_per_seed} episodes, {result.num_envs} envs; 95% CI: Student's t over seeds"
            f" (n-1 dof{', none for one seed' if n == 1 else ''}), the success rate's Wilson's over all"
            f" {n * result.episodes_per_seed} episodes | {result.wall_s:.1f} s"
        ),
        soft_wrap=True,
    )
    if result.success_by_engine:  # a mixed backend: each engine's envs' episodes
        parts = [
            f"{name} {est.mean:.3f} [{est.low:.3f}, {est.high:.3f}] (n={est.n}{', held out' * (name in result.held_out)})"
            for name, est in result.success_by_engine.items()
        ]
        console.print(Text("success by engine: " + ", ".join(parts)), soft_wrap=True)
    if result.held_out:
        console.print(Text(f"held out (not trained on): {', '.join(result.held_out)}"), soft_wrap=True)
    if result.success_by_group:  # the velocity task on a terrain: each terrain type's episodes
        parts = [f"{name} {est.mean:.2f} (n={est.n})" for name, est in result.success_by_group.items()]
        console.print(Text("success by terrain type: " + ", ".join(parts)), soft_wrap=True)
    console.print(Text(f"task settings: {settings}"), soft_wrap=True)
    console.print(Text(_plan_line(result)), soft_wrap=True)
    for engine, elements in {result.trained_on: result.trained_delegated, result.sim: result.delegated}.items():
        if elements:
            console.print(
                Text(
                    f"note: {engine} took the physics of {len(elements)} element(s) from MuJoCo"
                    f" ({'; '.join(elements[:3])}{'; ...' if len(elements) > 3 else ''})",
                    style="yellow",
                ),
                soft_wrap=True,
            )
    if result.video:
        console.print(Text(f"video written to {result.video}"))
