"""PPO training of a task on any engine with rsl-rl, evaluated, logged and checkpointed as it goes.

:func:`train` builds the task (``make_task``), wraps it in :class:`~simbackend.envs.rsl.RslRlVecEnv`
and builds rsl-rl's :class:`~rsl_rl.runners.OnPolicyRunner` (its PPO, actor and critic models,
rollout storage). The iteration loop is the runner's own ``learn`` loop, written out so that every
iteration's losses, episode figures and timing reach the log, a progress bar, periodic evaluations
(:meth:`~simbackend.training.TrainConfig.evaluates_at`), checkpoints and a time budget: ``alg.act`` ->
``env.step`` -> ``alg.process_env_step`` for ``num_steps_per_env`` steps, ``alg.compute_returns``,
``alg.update``; rsl-rl's logger is not used (``log_dir=None``). The training figures of a log row are
those of the episodes that ended during that iteration (not rsl-rl's window of the last 100, which
keeps early failures for many iterations once episodes get long and few of them end) and started in the
run: with ``init_at_random_ep_len`` every env's first episode starts at a random step of its time limit
(to desynchronise the resets) and is not counted, nor would its length and success mean anything.

Files written in ``out_dir``: ``config.json`` (task, engine, configs, networks), ``log.csv`` and
``log.json`` (:data:`~simbackend.training.logs.COLUMNS`), ``learning_curve.png``,
``checkpoint_<iteration>.pt`` every ``save_interval`` iterations and ``checkpoint_final.pt``
(:mod:`~simbackend.training.checkpoint`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from simbackend.errors import ArgumentTypeError, InvalidArgumentError

from .checkpoint import check_resumable, robot_change, save_checkpoint
from .config import TrainConfig
from .evaluation import run_episodes, torch_threads
from .logs import TrainingLog

__all__ = ["TrainResult", "train"]


@dataclass(frozen=True)
class TrainResult:
    """What :func:`train` did.

    Attributes:
        out_dir: the run's folder. checkpoint: ``checkpoint_final.pt``.
        task, sim: what was trained where. iterations: PPO iterations done. env_steps: training env steps.
        wall_s: training wall time (evaluations and checkpoints included).
        stop_reason: ``"max_iterations"``, ``"time_budget"``, ``"success"`` (``stop_at_success`` reached) or
            ``"interrupted"`` (Ctrl-C; the final checkpoint is still written).
        final_eval: the last evaluation ``{"iteration", "return", "length", "success", "episodes"}``.
        env_steps_per_s: ``env_steps / wall_s``.
        log_csv, log_json, curve_png: the log files. rows: the log rows.
    """

    out_dir: Path
    checkpoint: Path
    task: str
    sim: str
    iterations: int
    env_steps: int
    wall_s: float
    stop_reason: str
    final_eval: dict
    log_csv: Path
    log_json: Path
    curve_png: Path
    rows: list = field(default_factory=list, repr=False)

    @property
    def env_steps_per_s(self) -> float:
        return self.env_steps / self.wall_s if self.wall_s > 0 else math.nan

    def to_dict(self) -> dict:
        return {
            "out_dir": str(self.out_dir),
            "checkpoint": str(self.checkpoint),
            "task": self.task,
            "sim": self.sim,
            "iterations": self.iterations,
            "env_steps": self.env_steps,
            "wall_s": self.wall_s,
            "env_steps_per_s": self.env_steps_per_s,
            "stop_reason": self.stop_reason,
            "final_eval": self.final_eval,
            "log_csv": str(self.log_csv),
            "log_json": str(self.log_json),
            "curve_png": str(self.curve_png),
        }


def _train_config(task_name: str, train_config: Any, num_envs: int | None, seed: int | None) -> TrainConfig:
    if train_config is None:
        tc = TrainConfig.for_task(task_name)
    elif isinstance(train_config, TrainConfig):
        tc = train_config
    elif isinstance(train_config, Mapping):
        tc = TrainConfig.for_task(task_name, **train_config)
    else:
        raise ArgumentTypeError(
            f"train_config: expected a TrainConfig, a mapping or None, got {type(train_config).__name__}"
        )
    changes = {k: v for k, v in (("num_envs", num_envs), ("seed", seed)) if v is not None}
    return dataclasses.replace(tc, **changes) if changes else tc


def _task_config(task_name: str, task_config: Any, randomization: Any) -> Any:
    from simbackend.tasks import get_task_class

    cls = get_task_class(task_name).config_class
    if task_config is None or isinstance(task_config, Mapping):
        config = cls.from_dict(task_config)
    elif isinstance(task_config, cls):
        config = task_config
    else:
        raise ArgumentTypeError(
            f"task_config: expected {cls.__name__}, a mapping or None, got {type(task_config).__name__}"
        )
    if randomization is not None:
        config = dataclasses.replace(config, randomization=randomization)  # __post_init__ loads a path or dict
    return config


def train(
    task_name: str | None,
    sim: str = "mujoco",
    *,
    num_envs: int | None = None,
    seed: int | None = None,
    randomization: Any = None,
    task_config: Any = None,
    train_config: Any = None,
    out_dir: Any,
    progress: bool = True,
    device: Any = None,
    backend_options: Mapping[str, Any] | None = None,
    resume: Any = None,
    settle_check: bool = True,
) -> TrainResult:
    """Train PPO (rsl-rl) on task ``task_name`` simulated by engine ``sim``.

    Args:
        task_name: a registered task (``None`` with ``resume``: the checkpoint's).
        sim: a registered backend.
        num_envs, seed: override the training config's.
        randomization: a domain-randomization plan (plan, dict or JSON path) replacing the task config's.
        task_config: the task's config (instance, mapping of fields, or ``None`` for its defaults; with
            ``resume``, ``None`` is the checkpoint's).
        train_config: a :class:`TrainConfig`, a mapping of fields over the task's defaults
            (:meth:`TrainConfig.for_task`), or ``None`` for the task's defaults.
        out_dir: folder of the run's files (created; files of the same names there are overwritten).
        progress: a tqdm progress bar on stderr (iterations, mean return, success, evaluation, fps) when stderr is
            a terminal; otherwise (a pipe, a log file) plain lines, no carriage returns: the first, the last
            iteration and every ``ceil(iterations / 100)``-th.
        device: torch device of the backends. backend_options: their construction options.
        resume: a checkpoint to continue from: its actor, critic, optimizer, observation normalizer,
            iteration count and curriculum state; ``max_iterations`` more iterations are run.
        settle_check: before training a robot task, hold the robot's default pose on ``sim`` for 2 s and
            warn (stderr, and ``warnings.warn``) when it does not stand (:func:`simbackend.robots.settle_warnings`).

    Returns:
        A :class:`TrainResult`; the policy is in ``result.checkpoint``
        (:func:`~simbackend.training.evaluate` needs only that file).
    """
    start = _load_resume(resume) if resume is not None else None
    if task_name is None:
        if start is None:
            raise InvalidArgumentError("task_name: expected a registered task name, got None (no checkpoint to resume)")
        task_name = start.task
    elif start is not None and start.task != task_name:
        raise InvalidArgumentError(f"resume: the checkpoint trained task {start.task!r}, not {task_name!r}")
    if start is not None and task_config is None:
        task_config = start.task_config
    if start is not None:  # before anything is built: another robot, or a checkpoint without its critic
        change = robot_change(start, getattr(_task_config(task_name, task_config, None), "robot", None))
        if change is not None:
            raise InvalidArgumentError(f"resume: {change}; a resumed run goes on with the robot it trained")
        check_resumable(start)
    tc = _train_config(task_name, train_config, num_envs, seed)
    with torch_threads(tc.torch_threads):
        run = _Run(
            task_name,
            sim,
            tc,
            randomization=randomization,
            task_config=task_config,
            out_dir=out_dir,
            progress=progress,
            device=device,
            backend_options=backend_options,
            start=start,
            settle_check=settle_check,
        )
        try:
            return run.run()
        finally:
            run.close()


def _load_resume(resume: Any) -> Any:
    from .checkpoint import load_checkpoint

    if not isinstance(resume, (str, Path)):
        raise ArgumentTypeError(f"resume: expected a checkpoint path, got {type(resume).__name__}")
    return load_checkpoint(resume)


@dataclass
class _Rollout:
    """One iteration's rollout: the ``(return, length, success, env)`` of the training episodes that ended,
    and its time."""

    ended: list
    collect_s: float


class _Run:
    """One training run, in named steps: :meth:`collect` (a rollout), :meth:`update` (PPO),
    :meth:`evaluate` (the deterministic policy on the evaluation episodes, within the evaluation share of
    the time budget), :meth:`curriculum` (the task's curriculum state), :meth:`log` (a log row and the
    progress bar) and :meth:`save` (checkpoints); :meth:`run` is the loop over them."""

    def __init__(
        self,
        task_name: str,
        sim: str,
        tc: TrainConfig,
        *,
        randomization: Any,
        task_config: Any,
        out_dir: Any,
        progress: bool,
        device: Any,
        backend_options: Mapping[str, Any] | None,
        start: Any,
        settle_check: bool,
    ) -> None:

        from simbackend.envs.rsl import RslRlVecEnv
        from simbackend.tasks import make_task

        self.task_name, self.sim, self.tc, self.device, self.progress = task_name, sim, tc, device, progress
        self.config = _task_config(task_name, task_config, randomization)
        #: what the evaluations run on: ``sim``, a mix with counts as equal shares (the evaluation has its own N)
        self.eval_sim = _shares(sim)
        self.options = dict(backend_options or {})
        if out_dir is None or not isinstance(out_dir, (str, Path)):
            raise InvalidArgumentError(f"out_dir: expected a folder path, got {out_dir!r}")
        out = self.out = Path(out_dir)
        if out.exists() and not out.is_dir():
            raise InvalidArgumentError(f"out_dir: {str(out)!r} is a file, not a folder")
        out.mkdir(parents=True, exist_ok=True)
        self.log_file: TrainingLog | None = None
        self.bar: Any = None
        self.plain_every = 0  # without a terminal: a plain progress line every this many iterations (0: none)
        self.env: Any = None
        self.settle_warnings = _settle_warnings(self.config, sim) if settle_check else []

        torch.manual_seed(tc.seed)
        self.task = make_task(
            task_name, sim, tc.num_envs, config=self.config, seed=tc.seed, device=device, **self.options
        )
        self.env = RslRlVecEnv(self.task, owns_task=True)
        try:  # from here on the run holds the task: a failure (a checkpoint that does not fit) closes it
            self._set_up(start)
        except BaseException:
            self.close()
            raise

    def _set_up(self, start: Any) -> None:
        """The runner, the resumed state, the curriculum, ``config.json`` and the log, over the built task."""
        from rsl_rl.runners import OnPolicyRunner

        tc, task_name, sim, out = self.tc, self.task_name, self.sim, self.out
        self.deferred = bool(self.task.backend.deferred_checks)
        #: the engine of each training env, and whether they are several (a mixed backend: figures per engine)
        self.env_engines = self.task.backend.env_engines
        self.mixed = len(set(self.env_engines)) > 1
        self.rsl_cfg = tc.rsl_rl_cfg()
        with contextlib.redirect_stdout(io.StringIO()) as printed:  # rsl-rl prints its models and obs groups
            self.runner = OnPolicyRunner(self.env, self.rsl_cfg, log_dir=None, device=str(self.task.device))
        self.alg = self.runner.alg
        self.first_iteration = 0
        if start is not None:
            self._resume(start)
        self.task.begin_training()
        if start is not None and start.data.get("curriculum"):
            self.task.load_curriculum_state(start.data["curriculum"])
        self.describe = self.task.describe()
        self.task_config_dict = self.task.config.to_dict()
        self.delegated = sorted(self.task.backend.capabilities.delegated)  # physics the engine took from MuJoCo
        self._write_config(printed.getvalue(), start)
        self.log_file = TrainingLog(
            out, {"task": task_name, "sim": sim, "num_envs": tc.num_envs, "seed": tc.seed, "train_config": tc.to_dict()}
        )
        self.iteration = self.first_iteration
        self.steps_per_iteration = tc.num_envs * tc.num_steps_per_env
        self.last_eval: dict | None = None
        self.eval_s = 0.0  # time spent in evaluations during training
        self.last_eval_s: float | None = None  # the last evaluation's duration
        self.skipped_evals = 0
        self.obs: Any = None  # the policy's observations, kept from one rollout to the next
        #: ``(N,)`` the envs whose current episode started in this run (the training figures count only those)
        self.fresh = torch.ones(tc.num_envs, dtype=torch.bool, device=self.task.device)
        self.t_start = time.perf_counter()

    # ------------------------------------------------------------------
    def _resume(self, start: Any) -> None:
        data = start.data
        for key, want in (("observation_size", self.task.observation_size), ("action_dim", self.task.action_dim)):
            if data.get(key) != want:
                raise InvalidArgumentError(
                    f"resume: the checkpoint's {key} is {data.get(key)}, this task's is {want}"
                    " (a different robot or task config)"
                )
        try:
            self.alg.load(data, None, strict=True)
        except (RuntimeError, KeyError) as e:
            raise InvalidArgumentError(
                f"resume: the checkpoint's networks do not fit this training config ({str(e).splitlines()[0]})"
            ) from None
        self.first_iteration = int(data.get("iteration", 0))

    def _write_config(self, networks: str, start: Any) -> None:
        (self.out / "config.json").write_text(
            json.dumps(
                {
                    "task": self.task_name,
                    "sim": self.sim,
                    "delegated": self.delegated,
                    "task_config": self.task_config_dict,
                    "train_config": self.tc.to_dict(),
                    "rsl_rl_cfg": self.rsl_cfg,
                    "describe": self.describe,
                    "backend_options": self.options,
                    "resumed_from": None if start is None else str(start.path),
                    "settle_warnings": self.settle_warnings,
                    "networks": networks,
                },
                indent=1,
                default=str,
            )
            + "\n",
            encoding="utf-8",
        )

    def policy(self, obs: torch.Tensor) -> torch.Tensor:
        from tensordict import TensorDict

        with torch.inference_mode():
            return self.alg.get_policy()(TensorDict({"policy": obs}, batch_size=[obs.shape[0]]))

    # ------------------------------------------------------------------
    # the steps of an iteration
    # ------------------------------------------------------------------
    def collect(self) -> _Rollout:
        """One rollout of ``num_steps_per_env`` steps (``alg.act`` -> ``env.step`` ->
        ``alg.process_env_step``), then the returns (``alg.compute_returns``)."""
        from rsl_rl.utils import check_nan

        alg, env, device = self.alg, self.env, self.runner.device
        t0 = time.perf_counter()
        ended: list = []  # (return, length, success) of the training episodes that end in this iteration
        finals: list = []  # deferred checks (GPU): each step's statistics, read once after collection
        nan_seen = torch.zeros((), dtype=torch.bool, device=self.task.device)
        obs = self.obs
        with torch.inference_mode():
            for _ in range(self.tc.num_steps_per_env):
                actions = alg.act(obs)
                obs, rewards, dones, extras = env.step(actions.to(env.device))
                if self.deferred:  # no host read inside the rollout: NaN is looked for once, below
                    nan_seen = nan_seen | rewards.isnan().any()
                    for value in obs.values():
                        nan_seen = nan_seen | value.isnan().any()
                else:
                    check_nan(obs, rewards, dones)
                obs, rewards, dones = obs.to(device), rewards.to(device), dones.to(device)
                alg.process_env_step(obs, rewards, dones, extras)
                final = {**extras["final"], "done": extras["final"]["done"] & self.fresh}
                self.fresh = self.fresh | extras["final"]["done"]  # the next episodes start in this run
                if self.deferred:
                    finals.append(final)
                elif "log" in extras:
                    _finished(ended, final)
            if self.deferred:  # the rollout's statistics stacked, step-major: one copy to the host each
                if bool(nan_seen):
                    raise ValueError("the environment returned NaN observations or rewards in this rollout")
                _finished(ended, {k: torch.stack([f[k] for f in finals]) for k in finals[0]})
            collect_s = time.perf_counter() - t0
            alg.compute_returns(obs)
        self.obs = obs
        return _Rollout(ended, collect_s)

    def update(self) -> tuple[dict, float]:
        """The PPO update (``alg.update``): its losses and duration."""
        t0 = time.perf_counter()
        losses = self.alg.update()
        self.iteration += 1
        self.runner.current_learning_iteration = self.iteration
        return losses, time.perf_counter() - t0

    def evaluate(self, *, scheduled: bool = True) -> dict | None:
        """Evaluate after this iteration: on the schedule (:meth:`TrainConfig.evaluates_at`, counted from
        this run's first iteration) and, with a time budget, only while the evaluations stay within
        ``eval_share`` of the training time so far; ``scheduled=False``: now, whatever the schedule."""
        tc = self.tc
        if scheduled:
            if not tc.evaluates_at(self.iteration - self.first_iteration):
                return None
            if tc.time_budget_s is not None and self._over_eval_share():
                self.skipped_evals += 1
                return None
        from simbackend.tasks import make_task

        t0 = time.perf_counter()
        eval_task = make_task(
            self.task_name, self.eval_sim, tc.eval_episodes, config=self.task.config, seed=tc.eval_seed,
            device=self.device, **self.options,
        )  # fmt: skip
        self.alg.eval_mode()
        try:
            eval_engines = eval_task.backend.env_engines
            r = run_episodes(eval_task, self.policy, tc.eval_episodes)
        finally:
            self.alg.train_mode()
            eval_task.close()
        self.last_eval_s = time.perf_counter() - t0
        if scheduled:
            self.eval_s += self.last_eval_s
        self.last_eval = {
            "iteration": self.iteration,
            "return": float(r["return"].mean()),
            "length": float(r["length"].mean()),
            "success": float(r["success"].mean()),
            "episodes": tc.eval_episodes,
        }
        if self.mixed:  # episode k of the evaluation was played in env k % n (run_episodes' order)
            n = tc.eval_episodes
            envs = [k % n for k in range(len(r["success"]))]
            self.last_eval["success_by_engine"] = by_engine(r["success"].tolist(), envs, eval_engines)
        return self.last_eval

    def _over_eval_share(self) -> bool:
        """Whether one more evaluation (as long as the last) would take the evaluations past ``eval_share``
        of the training time so far; before the first, only a share of 0 says so."""
        share = self.tc.eval_share
        if share == 0.0 or self.last_eval_s is None:
            return share == 0.0
        elapsed = time.perf_counter() - self.t_start
        return self.eval_s + self.last_eval_s > share * (elapsed + self.last_eval_s)

    def curriculum(self) -> dict:
        """The training task's curriculum state after this iteration (``{}`` for a task without one)."""
        return self.task.curriculum_state()

    def log(self, rollout: _Rollout, losses: dict, learn_s: float, evaluation: dict | None, curriculum: dict) -> None:
        """A row of the log (:data:`~simbackend.training.logs.COLUMNS`) and the progress bar's figures."""
        assert self.log_file is not None
        per_engine: dict[str, float] | None = None
        if rollout.ended:
            rets, lens, succ, envs = zip(*rollout.ended)
            mean_return, mean_length, success_rate = (sum(v) / len(v) for v in (rets, lens, succ))
            if self.mixed:
                per_engine = by_engine(succ, envs, self.env_engines)
        else:
            mean_return = mean_length = success_rate = None
        fps = self.steps_per_iteration / (rollout.collect_s + learn_s)
        self.log_file.append(
            {
                "iteration": self.iteration,
                "env_steps": self.iteration * self.steps_per_iteration,
                "wall_s": time.perf_counter() - self.t_start,
                "mean_return": mean_return,
                "mean_length": mean_length,
                "success_rate": success_rate,
                "episodes": len(rollout.ended),
                "eval_return": evaluation and evaluation["return"],
                "eval_length": evaluation and evaluation["length"],
                "eval_success": evaluation and evaluation["success"],
                "success_by_engine": per_engine,
                "eval_success_by_engine": evaluation and evaluation.get("success_by_engine"),
                "fps": fps,
                "collect_s": rollout.collect_s,
                "learn_s": learn_s,
                "loss_value": losses.get("value"),
                "loss_surrogate": losses.get("surrogate"),
                "loss_entropy": losses.get("entropy"),
                "learning_rate": self.alg.learning_rate,
                "action_std": float(self.alg.get_policy().output_std.detach().mean()),
                "command_level": curriculum.get("command_level"),
                "terrain_level": curriculum.get("terrain_level"),
            }
        )
        postfix = {
            "ret": f"{mean_return:.1f}" if mean_return is not None else "-",
            "succ": f"{success_rate:.2f}" if success_rate is not None else "-",
            "fps": f"{fps:,.0f}",
        }
        if per_engine:  # a mixed backend: each engine's share of the episodes that ended
            postfix["succ"] += " (" + ", ".join(f"{k} {v:.2f}" for k, v in per_engine.items()) + ")"
        if "command_level" in curriculum:
            postfix["cmd"] = f"{curriculum['command_level']:.2f}"
        if "terrain_level" in curriculum:
            postfix["lvl"] = f"{curriculum['terrain_level']:.2f}"
        if self.last_eval is not None:
            postfix["eval"] = f"{self.last_eval['success']:.2f}"
        self.bar.set_postfix(postfix, refresh=False)
        self.bar.update(1)
        done = self.iteration - self.first_iteration
        if self.plain_every and (done % self.plain_every == 0 or done in (1, self.tc.max_iterations)):
            figures = "  ".join(f"{k} {v}" for k, v in postfix.items())
            line = f"{self.task_name}@{self.sim}  it {done}/{self.tc.max_iterations}  {figures}"
            print(line, file=sys.stderr, flush=True)

    def save(self, evaluation: dict | None) -> None:
        """``checkpoint_<iteration>.pt`` every ``save_interval`` iterations; ``log.json`` then and after an
        evaluation."""
        tc = self.tc
        due = bool(tc.save_interval) and self.iteration % tc.save_interval == 0
        if due:
            save_checkpoint(self.out / f"checkpoint_{self.iteration}.pt", self.checkpoint_data())
        if evaluation is not None or due:
            assert self.log_file is not None
            self.log_file.write_json()

    def checkpoint_data(self) -> dict:
        tc, task = self.tc, self.task
        norm = self.alg.get_policy().obs_normalizer
        return {
            **self.alg.save(),
            "task": self.task_name,
            "task_config": self.task_config_dict,
            "sim": self.sim,
            "engines": dict(Counter(self.env_engines)),
            "delegated": self.delegated,
            "describe": self.describe,
            "train_config": tc.to_dict(),
            "rsl_rl_cfg": self.rsl_cfg,
            "observation_size": task.observation_size,
            "action_dim": task.action_dim,
            "iteration": self.iteration,
            "env_steps": self.iteration * self.steps_per_iteration,
            "eval": self.last_eval,
            "curriculum": self.curriculum(),
            "obs_normalizer": ({"mean": norm.mean.cpu(), "std": norm.std.cpu()} if tc.obs_normalization else None),
        }

    # ------------------------------------------------------------------
    def _out_of_time(self, last_iteration_s: float) -> bool:
        """With a time budget: the next iteration, and the final evaluation after it, would end past it."""
        budget = self.tc.time_budget_s
        if budget is None or self.iteration == self.first_iteration:
            return False
        final_eval = self.last_eval_s or 0.0
        return time.perf_counter() - self.t_start + last_iteration_s + final_eval > budget

    def run(self) -> TrainResult:
        from tqdm import tqdm

        tc, env = self.tc, self.env
        for line in self.settle_warnings:
            print(f"warning: {line}", file=sys.stderr)
        if tc.init_at_random_ep_len and self.first_iteration == 0:
            env.episode_length_buf = torch.randint_like(env.episode_length_buf, high=env.max_episode_length)
            self.fresh[:] = False  # these first episodes are cut short at random: not counted in the figures
        self.obs = env.get_observations().to(self.runner.device)
        self.alg.train_mode()
        # a bar on a terminal; elsewhere (a pipe, a log file) plain lines, about 100 a run at most, never `\r`
        terminal = self.progress and sys.stderr.isatty()
        self.plain_every = max(1, -(-tc.max_iterations // 100)) if self.progress and not terminal else 0
        self.bar = tqdm(
            total=tc.max_iterations,
            unit="it",
            desc=f"{self.task_name}@{self.sim}",
            disable=not terminal,
            file=sys.stderr,
            dynamic_ncols=True,
            leave=True,
        )
        stop_reason = "max_iterations"
        last_iteration_s = 0.0
        end = self.first_iteration + tc.max_iterations
        self.t_start = time.perf_counter()
        try:
            while self.iteration < end:
                if self._out_of_time(last_iteration_s):
                    stop_reason = "time_budget"
                    break
                t_iter = time.perf_counter()
                rollout = self.collect()
                losses, learn_s = self.update()
                evaluation = self.evaluate()
                self.log(rollout, losses, learn_s, evaluation, self.curriculum())
                self.save(evaluation)
                last_iteration_s = time.perf_counter() - t_iter
                if (
                    evaluation is not None
                    and tc.stop_at_success is not None
                    and evaluation["success"] >= tc.stop_at_success
                ):
                    stop_reason = "success"
                    break
        except KeyboardInterrupt:
            stop_reason = "interrupted"
        return self._finish(stop_reason)

    def _finish(self, stop_reason: str) -> TrainResult:
        """The final evaluation (when the last iteration had none), checkpoint, log and curve."""
        log = self.log_file
        assert log is not None
        if self.last_eval is None or self.last_eval["iteration"] != self.iteration:
            last = self.evaluate(scheduled=False)
            assert last is not None
            if log.rows and log.rows[-1]["iteration"] == self.iteration:  # the curve ends at the final evaluation
                log.update_last(eval_return=last["return"], eval_length=last["length"], eval_success=last["success"])
        wall_s = time.perf_counter() - self.t_start
        env_steps = self.iteration * self.steps_per_iteration
        checkpoint = save_checkpoint(self.out / "checkpoint_final.pt", self.checkpoint_data())
        log.write_json(
            iterations=self.iteration,
            env_steps=env_steps,
            wall_s=wall_s,
            stop_reason=stop_reason,
            final_eval=self.last_eval,
            eval_s=self.eval_s,
            skipped_evals=self.skipped_evals,
            first_iteration=self.first_iteration,
        )
        tc = self.tc
        curve = log.plot(title=f"{self.task_name} on {self.sim}: {tc.num_envs} envs, seed {tc.seed}")
        return TrainResult(
            out_dir=self.out,
            checkpoint=checkpoint,
            task=self.task_name,
            sim=self.sim,
            iterations=self.iteration,
            env_steps=env_steps,
            wall_s=wall_s,
            stop_reason=stop_reason,
            final_eval=self.last_eval or {},
            log_csv=log.csv_path,
            log_json=log.json_path,
            curve_png=curve,
            rows=list(log.rows),
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.log_file is not None:
            self.log_file.close()
        if self.env is not None:
            self.env.close()


def _shares(sim: str) -> str:
    """``sim`` with a mix's counts dropped (``"mujoco:96,sapien:32"`` -> ``"mujoco,sapien"``: equal shares of
    any number of envs); a plain backend's name unchanged."""
    from simbackend.mixing import engines_of, is_mix

    return ",".join(engines_of(sim)) if is_mix(sim) else sim


def _settle_warnings(config: Any, sim: str) -> list[str]:
    """The settle check's warnings for a task on a robot (its config names ``robot``), on each engine of
    ``sim``; none for another task."""
    robot = getattr(config, "robot", None)
    if not isinstance(robot, str):
        return []
    from simbackend.mixing import engines_of
    from simbackend.robots import settle_warnings

    return [line for engine in engines_of(sim) for line in settle_warnings(robot, engine)]


def _finished(ended: list, final: Mapping[str, torch.Tensor]) -> int:
    """Append the ``(return, length, success, env)`` of the episodes that ended (``extras["final"]`` of one
    step, ``(N,)`` each, or of several stacked, ``(T, N)``, in step order) to ``ended``; returns how many ended."""
    done = final["done"].cpu()
    ids = done.reshape(-1)
    envs = torch.arange(done.shape[-1]).expand_as(done).reshape(-1)
    ended.extend(
        zip(
            final["episode_return"].cpu().reshape(-1)[ids].tolist(),
            final["episode_length"].cpu().reshape(-1)[ids].tolist(),
            final["success"].cpu().reshape(-1)[ids].float().tolist(),
            envs[ids].tolist(),
        )
    )
    return int(ids.sum())


def by_engine(success: Sequence[float], envs: Sequence[int], env_engines: Sequence[str]) -> dict[str, float]:
    """``{engine: success rate}`` of the episodes ``success[k]`` played in env ``envs[k]``, grouped by the
    engine simulating each env (``env_engines``, a backend's :attr:`~simbackend.SimBackend.env_engines`), in the
    order the engines first appear; an engine none of whose envs ended an episode is left out."""
    tally: dict[str, list[float]] = {name: [0.0, 0] for name in dict.fromkeys(env_engines)}
    for ok, env in zip(success, envs, strict=True):
        t = tally[env_engines[env]]
        t[0] += float(ok)
        t[1] += 1
    return {name: wins / count for name, (wins, count) in tally.items() if count}
