"""PPO training of a task on any engine with rsl-rl, evaluated, logged and checkpointed as it goes.

:func:`train` builds the task (``make_task``), wraps it in :class:`~simbackend.envs.rsl.RslRlVecEnv`
and builds rsl-rl's :class:`~rsl_rl.runners.OnPolicyRunner` (its PPO, actor and critic models,
rollout storage). The iteration loop is the runner's own ``learn`` loop, written out so that every
iteration's losses, episode figures and timing reach the log, a progress bar, periodic evaluations
(:meth:`~simbackend.training.TrainConfig.evaluates_at`), checkpoints and a time budget: ``alg.act`` ->
``env.step`` -> ``alg.process_env_step`` for ``num_steps_per_env`` steps, ``alg.compute_returns``,
``alg.update``; rsl-rl's logger is not used (``log_dir=None``). The training figures of a log row are
those of the episodes that ended during that iteration (not rsl-rl's window of the last 100, which
keeps early failures for many iterations once episodes get long and few of them end).

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
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from simbackend.errors import ArgumentTypeError, InvalidArgumentError

from .checkpoint import save_checkpoint
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
    task_name: str,
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
) -> TrainResult:
    """Train PPO (rsl-rl) on task ``task_name`` simulated by engine ``sim``.

    Args:
        task_name: a registered task.
        sim: a registered backend.
        num_envs, seed: override the training config's.
        randomization: a domain-randomization plan (plan, dict or JSON path) replacing the task config's.
        task_config: the task's config (instance, mapping of fields, or ``None`` for its defaults).
        train_config: a :class:`TrainConfig`, a mapping of fields over the task's defaults
            (:meth:`TrainConfig.for_task`), or ``None`` for the task's defaults.
        out_dir: folder of the run's files (created; files of the same names there are overwritten).
        progress: a tqdm progress bar on stderr (iterations, mean return, success, evaluation, fps).
        device: torch device of the backends. backend_options: their construction options.

    Returns:
        A :class:`TrainResult`; the policy is in ``result.checkpoint``
        (:func:`~simbackend.training.evaluate` needs only that file).
    """
    tc = _train_config(task_name, train_config, num_envs, seed)
    with torch_threads(tc.torch_threads):
        return _train(
            task_name,
            sim,
            tc,
            randomization=randomization,
            task_config=task_config,
            out_dir=out_dir,
            progress=progress,
            device=device,
            backend_options=backend_options,
        )


def _train(
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
) -> TrainResult:
    from rsl_rl.runners import OnPolicyRunner
    from rsl_rl.utils import check_nan
    from tensordict import TensorDict
    from tqdm import tqdm

    from simbackend.envs.rsl import RslRlVecEnv
    from simbackend.tasks import make_task

    config = _task_config(task_name, task_config, randomization)
    options = dict(backend_options or {})
    if out_dir is None or not isinstance(out_dir, (str, Path)):
        raise InvalidArgumentError(f"out_dir: expected a folder path, got {out_dir!r}")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InvalidArgumentError(f"out_dir: {str(out)!r} is a file, not a folder")
    out.mkdir(parents=True, exist_ok=True)

    torch.manual_seed(tc.seed)
    task = make_task(task_name, sim, tc.num_envs, config=config, seed=tc.seed, device=device, **options)
    env = RslRlVecEnv(task, owns_task=True)
    deferred = bool(task.backend.deferred_checks)
    log: TrainingLog | None = None
    bar = None
    try:
        rsl_cfg = tc.rsl_rl_cfg()
        with contextlib.redirect_stdout(io.StringIO()) as printed:  # rsl-rl prints its models and obs groups
            runner = OnPolicyRunner(env, rsl_cfg, log_dir=None, device=str(task.device))
        alg = runner.alg
        describe = task.describe()
        task_config_dict = task.config.to_dict()
        delegated = sorted(task.backend.capabilities.delegated)  # physics the engine took from MuJoCo
        (out / "config.json").write_text(
            json.dumps(
                {
                    "task": task_name,
                    "sim": sim,
                    "delegated": delegated,
                    "task_config": task_config_dict,
                    "train_config": tc.to_dict(),
                    "rsl_rl_cfg": rsl_cfg,
                    "describe": describe,
                    "backend_options": options,
                    "networks": printed.getvalue(),
                },
                indent=1,
                default=str,
            )
            + "\n",
            encoding="utf-8",
        )
        log = TrainingLog(
            out, {"task": task_name, "sim": sim, "num_envs": tc.num_envs, "seed": tc.seed, "train_config": tc.to_dict()}
        )

        def policy(obs: torch.Tensor) -> torch.Tensor:
            with torch.inference_mode():
                return alg.get_policy()(TensorDict({"policy": obs}, batch_size=[obs.shape[0]]))

        def evaluate_now(iteration: int) -> dict:
            eval_task = make_task(
                task_name, sim, tc.eval_episodes, config=task.config, seed=tc.eval_seed, device=device, **options
            )
            alg.eval_mode()
            try:
                r = run_episodes(eval_task, policy, tc.eval_episodes)
            finally:
                alg.train_mode()
                eval_task.close()
            return {
                "iteration": iteration,
                "return": float(r["return"].mean()),
                "length": float(r["length"].mean()),
                "success": float(r["success"].mean()),
                "episodes": tc.eval_episodes,
            }

        def checkpoint_data(iteration: int, env_steps: int, last_eval: dict | None) -> dict:
            actor = alg.get_policy()
            norm = actor.obs_normalizer
            return {
                **alg.save(),
                "task": task_name,
                "task_config": task_config_dict,
                "sim": sim,
                "delegated": delegated,
                "describe": describe,
                "train_config": tc.to_dict(),
                "rsl_rl_cfg": rsl_cfg,
                "observation_size": task.observation_size,
                "action_dim": task.action_dim,
                "iteration": iteration,
                "env_steps": env_steps,
                "eval": last_eval,
                "obs_normalizer": ({"mean": norm.mean.cpu(), "std": norm.std.cpu()} if tc.obs_normalization else None),
            }

        if tc.init_at_random_ep_len:
            env.episode_length_buf = torch.randint_like(env.episode_length_buf, high=env.max_episode_length)
        obs = env.get_observations().to(runner.device)
        alg.train_mode()
        steps_per_iteration = tc.num_envs * tc.num_steps_per_env
        bar = tqdm(
            total=tc.max_iterations,
            unit="it",
            desc=f"{task_name}@{sim}",
            disable=not progress,
            file=sys.stderr,
            dynamic_ncols=True,
            leave=True,
        )
        last_eval: dict | None = None
        stop_reason = "max_iterations"
        iteration = 0
        last_iteration_s = 0.0
        t_start = time.perf_counter()
        try:
            while iteration < tc.max_iterations:
                elapsed = time.perf_counter() - t_start
                if tc.time_budget_s is not None and iteration > 0 and elapsed + last_iteration_s > tc.time_budget_s:
                    stop_reason = "time_budget"
                    break
                t_iter = time.perf_counter()
                ended: list = []  # (return, length, success) of the training episodes that end in this iteration
                finals: list = []  # deferred checks (GPU): each step's statistics, read once after collection
                nan_seen = torch.zeros((), dtype=torch.bool, device=task.device)
                with torch.inference_mode():
                    for _ in range(tc.num_steps_per_env):
                        actions = alg.act(obs)
                        obs, rewards, dones, extras = env.step(actions.to(env.device))
                        if deferred:  # no host read inside the rollout: NaN is looked for once, below
                            nan_seen = nan_seen | rewards.isnan().any()
                            for value in obs.values():
                                nan_seen = nan_seen | value.isnan().any()
                        else:
                            check_nan(obs, rewards, dones)
                        obs, rewards, dones = obs.to(runner.device), rewards.to(runner.device), dones.to(runner.device)
                        alg.process_env_step(obs, rewards, dones, extras)
                        final = extras["final"]
                        if deferred:
                            finals.append(final)
                        elif "log" in extras:
                            _finished(ended, final)
                    if deferred:  # the rollout's statistics stacked, step-major: one copy to the host each
                        if bool(nan_seen):
                            raise ValueError("the environment returned NaN observations or rewards in this rollout")
                        _finished(ended, {k: torch.stack([f[k] for f in finals]) for k in finals[0]})
                    collect_s = time.perf_counter() - t_iter
                    alg.compute_returns(obs)
                t_learn = time.perf_counter()
                losses = alg.update()
                learn_s = time.perf_counter() - t_learn
                iteration += 1
                runner.current_learning_iteration = iteration
                env_steps = iteration * steps_per_iteration
                fps = steps_per_iteration / (collect_s + learn_s)

                evaluation = None
                if tc.evaluates_at(iteration):
                    evaluation = last_eval = evaluate_now(iteration)
                if ended:
                    rets, lens, succ = zip(*ended)
                    mean_return, mean_length, success_rate = (sum(v) / len(v) for v in (rets, lens, succ))
                else:
                    mean_return = mean_length = success_rate = None
                log.append(
                    {
                        "iteration": iteration,
                        "env_steps": env_steps,
                        "wall_s": time.perf_counter() - t_start,
                        "mean_return": mean_return,
                        "mean_length": mean_length,
                        "success_rate": success_rate,
                        "episodes": len(ended),
                        "eval_return": evaluation and evaluation["return"],
                        "eval_length": evaluation and evaluation["length"],
                        "eval_success": evaluation and evaluation["success"],
                        "fps": fps,
                        "collect_s": collect_s,
                        "learn_s": learn_s,
                        "loss_value": losses.get("value"),
                        "loss_surrogate": losses.get("surrogate"),
                        "loss_entropy": losses.get("entropy"),
                        "learning_rate": alg.learning_rate,
                        "action_std": float(alg.get_policy().output_std.detach().mean()),
                    }
                )
                if tc.save_interval and iteration % tc.save_interval == 0:
                    save_checkpoint(
                        out / f"checkpoint_{iteration}.pt", checkpoint_data(iteration, env_steps, last_eval)
                    )
                if evaluation is not None or (tc.save_interval and iteration % tc.save_interval == 0):
                    log.write_json()
                postfix = {
                    "ret": f"{mean_return:.1f}" if mean_return is not None else "-",
                    "succ": f"{success_rate:.2f}" if success_rate is not None else "-",
                    "fps": f"{fps:,.0f}",
                }
                if last_eval is not None:
                    postfix["eval"] = f"{last_eval['success']:.2f}"
                bar.set_postfix(postfix, refresh=False)
                bar.update(1)
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
        env_steps = iteration * steps_per_iteration
        if last_eval is None or last_eval["iteration"] != iteration:
            last_eval = evaluate_now(iteration)
            if log.rows and log.rows[-1]["iteration"] == iteration:  # the curve ends at the final evaluation
                log.update_last(
                    eval_return=last_eval["return"], eval_length=last_eval["length"], eval_success=last_eval["success"]
                )
        wall_s = time.perf_counter() - t_start
        checkpoint = save_checkpoint(out / "checkpoint_final.pt", checkpoint_data(iteration, env_steps, last_eval))
        log.write_json(
            iterations=iteration, env_steps=env_steps, wall_s=wall_s, stop_reason=stop_reason, final_eval=last_eval
        )
        curve = log.plot(title=f"{task_name} on {sim}: {tc.num_envs} envs, seed {tc.seed}")
        return TrainResult(
            out_dir=out,
            checkpoint=checkpoint,
            task=task_name,
            sim=sim,
            iterations=iteration,
            env_steps=env_steps,
            wall_s=wall_s,
            stop_reason=stop_reason,
            final_eval=last_eval,
            log_csv=log.csv_path,
            log_json=log.json_path,
            curve_png=curve,
            rows=list(log.rows),
        )
    finally:
        if bar is not None:
            bar.close()
        if log is not None:
            log.close()
        env.close()


def _finished(ended: list, final: Mapping[str, torch.Tensor]) -> int:
    """Append the ``(return, length, success)`` of the episodes that ended (``extras["final"]`` of one step,
    ``(N,)`` each, or of several stacked, ``(T, N)``, in step order) to ``ended``; returns how many ended."""
    ids = final["done"].cpu().reshape(-1)
    ended.extend(
        zip(
            final["episode_return"].cpu().reshape(-1)[ids].tolist(),
            final["episode_length"].cpu().reshape(-1)[ids].tolist(),
            final["success"].cpu().reshape(-1)[ids].float().tolist(),
        )
    )
    return int(ids.sum())
