"""Evaluation of a deterministic policy on any engine, with confidence intervals over seeds.

Which episodes are played is fixed by ``(seed, num_envs, episodes)`` alone: env ``i`` plays its
episodes ``0, 1, ...`` (drawn from the task's reset streams, the same on every engine) and the
``k``-th episode of env ``i`` is kept when ``k * num_envs + i < episodes``. Swapping the engine is
the ``sim`` argument only; the episodes, the policy and the metrics stay the same.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from simbackend import checks
from simbackend.errors import InvalidArgumentError

from .checkpoint import Checkpoint, load_checkpoint
from .stats import Estimate, estimate, wilson

__all__ = ["EvalResult", "evaluate", "merge_seeds", "run_episodes", "success_estimate", "torch_threads"]

#: how the intervals of an evaluation are made (its JSON's ``ci``, the tables' footnote)
CI_NOTE = (
    "95% two-sided; return and length: Student's t over seeds (n-1 dof, none for one seed);"
    " success rate: Wilson's score interval over all episodes"
)


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """``torch.set_num_threads(n)`` inside the block (``n = 0``: unchanged), restored after."""
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if n:
            torch.set_num_threads(before)


_threads = torch_threads


def run_episodes(
    task: Any, policy: Callable[[torch.Tensor], torch.Tensor], episodes: int, on_step: Callable[[], None] | None = None
) -> dict[str, torch.Tensor]:
    """Play ``episodes`` complete episodes of ``policy`` on ``task`` (see the module docstring).

    The task should be fresh (every env at the start of its first episode); if some env is not, every
    env starts a new episode first. Envs are reset as their episodes end; an env that has played its
    share keeps playing episodes that are not counted. ``on_step`` is called after every step.

    Returns:
        ``{"return", "length", "success"}``: ``(episodes,)`` float64 tensors on the CPU, in the order
        ``k * num_envs + i``.
    """
    episodes = checks.integer(episodes, "episodes", minimum=1)
    n = task.num_envs
    rounds = math.ceil(episodes / n)
    need = torch.tensor([sum(1 for k in range(rounds) if k * n + i < episodes) for i in range(n)])
    if bool((task.episode_step != 0).any()):
        obs = task.reset()
    else:
        obs = task.observe()
    flat = task.flatten(obs)
    out = {key: torch.full((rounds, n), math.nan, dtype=torch.float64) for key in ("return", "length", "success")}
    count = torch.zeros(n, dtype=torch.int64)
    while bool((count < need).any()):
        step = task.step(policy(flat))
        if on_step is not None:
            on_step()
        done = (step.terminated | step.truncated).cpu()
        if bool(done.any()):
            ids = torch.nonzero(done & (count < need)).flatten()
            k = count[ids]
            out["return"][k, ids] = step.info["episode_return"].cpu()[ids].double()
            out["length"][k, ids] = step.info["episode_length"].cpu()[ids].double()
            out["success"][k, ids] = step.info["success"].cpu()[ids].double()
            count += done.long()
            obs = task.reset(done.to(task.device))
        else:
            obs = step.obs
        flat = task.flatten(obs)
    return {key: v.flatten()[:episodes] for key, v in out.items()}


@dataclass(frozen=True)
class EvalResult:
    """What :func:`evaluate` measured.

    Attributes:
        task, sim, trained_on: the task, the engine evaluated on, the engine the checkpoint was trained on.
        delegated, trained_delegated: the model elements whose physics the evaluation engine and the
            training engine took from MuJoCo (``capabilities.delegated``; empty where an engine computed
            everything): a sim-to-sim figure over such elements partly compares MuJoCo with itself.
        checkpoint: its path. iteration, env_steps: of the checkpoint.
        seeds, episodes_per_seed, num_envs: the evaluation's design.
        per_seed: ``[{"seed", "mean_return", "success_rate", "mean_length", "wall_s"}]``.
        mean_return, mean_length: means over seeds of the per-seed figures, each with its 95 %
            confidence interval from Student's t over the seeds (``n - 1`` degrees of freedom; no
            interval for one seed).
        success_rate: the share of successful episodes over every seed's episodes (the mean of the
            per-seed rates), with Wilson's 95 % score interval over those episodes (within [0, 1];
            its ``n`` is the number of episodes).
        wall_s: total wall time. video: the video written, or ``None``.
    """

    task: str
    sim: str
    trained_on: str
    checkpoint: str
    iteration: int
    env_steps: int
    seeds: tuple[int, ...]
    episodes_per_seed: int
    num_envs: int
    per_seed: list = field(default_factory=list)
    mean_return: Estimate | None = None
    success_rate: Estimate | None = None
    mean_length: Estimate | None = None
    wall_s: float = 0.0
    video: str | None = None
    delegated: tuple[str, ...] = ()
    trained_delegated: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        """JSON-ready figures."""
        return {
            "task": self.task,
            "sim": self.sim,
            "trained_on": self.trained_on,
            "checkpoint": self.checkpoint,
            "delegated": list(self.delegated),
            "trained_delegated": list(self.trained_delegated),
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "seeds": list(self.seeds),
            "episodes_per_seed": self.episodes_per_seed,
            "num_envs": self.num_envs,
            "per_seed": self.per_seed,
            "mean_return": self.mean_return.to_dict(),
            "success_rate": self.success_rate.to_dict(),
            "mean_length": self.mean_length.to_dict(),
            "ci": CI_NOTE,
            "wall_s": self.wall_s,
            "video": self.video,
        }


class _Frames:
    """Video of env 0 of ``task``: one frame now (the initial state), one per call."""

    def __init__(self, task: Any, path: Any, size: tuple[int, int], camera: Any = "free", dress: bool = True):
        from simbackend.playback.video import VideoWriter

        self.task, self.view = task, {"width": size[0], "height": size[1], "camera": camera, "dress": dress}
        first = task.backend.render([0], **self.view)[0]  # a bad camera, size or dress raises before a file opens
        self.writer = VideoWriter(path, fps=1.0 / task.control_dt, progress=False)
        self.writer.append(first)

    def __call__(self) -> None:
        self.writer.append(self.task.backend.render([0], **self.view)[0])

    def close(self) -> None:
        self.writer.close()

    def abort(self) -> None:
        self.writer.abort()


def success_estimate(per_seed: Sequence[Mapping[str, Any]], episodes_per_seed: int) -> Estimate:
    """The success rate over every episode of ``per_seed`` (each row's ``success_rate`` over
    ``episodes_per_seed`` episodes), with Wilson's score interval: a proportion's interval, within
    [0, 1] (:func:`~simbackend.training.stats.wilson`)."""
    successes = sum(round(float(row["success_rate"]) * episodes_per_seed) for row in per_seed)
    return wilson(successes, episodes_per_seed * len(per_seed))


def _merged_config(checkpoint: Checkpoint, override: Mapping[str, Any] | None) -> dict:
    config = checkpoint.task_config
    if override:
        if not isinstance(override, Mapping):
            raise InvalidArgumentError(f"task_config_override: expected a mapping, got {type(override).__name__}")
        config.update(override)
    return config


def evaluate(
    checkpoint: Any,
    sim: str | None = None,
    *,
    num_envs: int | None = None,
    seeds: Sequence[int] = (100, 101, 102),
    episodes_per_seed: int | None = None,
    video: Any | None = None,
    task_config_override: Mapping[str, Any] | None = None,
    device: Any = None,
    backend_options: Mapping[str, Any] | None = None,
    video_size: tuple[int, int] = (320, 240),
    torch_threads: int = 1,
    video_camera: Any = "free",
    video_dress: bool = True,
) -> EvalResult:
    """Run a checkpoint's deterministic policy (the actor's mean) for complete episodes on engine ``sim``.

    Args:
        checkpoint: a path (or a loaded :class:`Checkpoint`) written by :func:`~simbackend.training.train`;
            it names the task and its config, so nothing else is needed.
        sim: engine to evaluate on (default: the one it was trained on).
        num_envs: parallel envs per seed (default: ``episodes_per_seed``, one episode per env).
        seeds: task seeds (reset streams); each gives one value of every metric. The default keeps
            clear of the seeds training usually starts from (0, 1, ...), so the episodes are unseen.
        episodes_per_seed: complete episodes per seed (default: the training config's ``eval_episodes``).
        video: an ``.mp4`` path: env 0 during the first seed, one frame per policy step (its episodes one
            after the other, at the task's control rate).
        task_config_override: task-config fields replacing the checkpoint's (e.g. ``{"randomization": None}``).
        device: torch device of the backend. backend_options: construction options of the backend.
        video_size: ``(width, height)`` of the video.
        video_camera, video_dress: the video's camera and dress (``backend.render``'s ``camera`` and ``dress``).
        torch_threads: torch's intra-op threads meanwhile (restored after; 0: unchanged).
    """
    with _threads(torch_threads):
        return _evaluate(
            checkpoint,
            sim,
            num_envs=num_envs,
            seeds=seeds,
            episodes_per_seed=episodes_per_seed,
            video=video,
            task_config_override=task_config_override,
            device=device,
            backend_options=backend_options,
            video_size=video_size,
            video_camera=video_camera,
            video_dress=video_dress,
        )


def merge_seeds(results: Sequence[EvalResult]) -> EvalResult:
    """One result from evaluations of one checkpoint on one engine over different seeds (e.g. run apart,
    as the tasks of a sweep): per-seed rows in seed order, the estimates over all of them, wall times added."""
    if not results:
        raise InvalidArgumentError("results: expected at least one evaluation")
    first = results[0]
    design = (first.checkpoint, first.sim, first.episodes_per_seed, first.num_envs)
    if any((r.checkpoint, r.sim, r.episodes_per_seed, r.num_envs) != design for r in results):
        raise InvalidArgumentError("results: expected evaluations of one checkpoint on one engine, alike")
    per_seed = sorted((row for r in results for row in r.per_seed), key=lambda row: row["seed"])
    seeds = tuple(row["seed"] for row in per_seed)
    if len(set(seeds)) != len(seeds):
        raise InvalidArgumentError(f"results: a seed is evaluated twice ({list(seeds)})")
    return replace(
        first,
        seeds=seeds,
        per_seed=per_seed,
        mean_return=estimate(s["mean_return"] for s in per_seed),
        success_rate=success_estimate(per_seed, first.episodes_per_seed),
        mean_length=estimate(s["mean_length"] for s in per_seed),
        wall_s=sum(r.wall_s for r in results),
        video=next((r.video for r in results if r.video), None),
    )


def _evaluate(
    checkpoint: Any,
    sim: str | None,
    *,
    num_envs: int | None,
    seeds: Sequence[int],
    episodes_per_seed: int | None,
    video: Any | None,
    task_config_override: Mapping[str, Any] | None,
    device: Any,
    backend_options: Mapping[str, Any] | None,
    video_size: tuple[int, int],
    video_camera: Any = "free",
    video_dress: bool = True,
) -> EvalResult:
    from simbackend.tasks import make_task

    ckpt = checkpoint if isinstance(checkpoint, Checkpoint) else load_checkpoint(checkpoint)
    sim = ckpt.sim if sim is None else sim
    seeds = tuple(seeds)
    if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
        raise InvalidArgumentError(f"seeds: expected non-negative ints, got {list(seeds)!r}")
    if len(set(seeds)) != len(seeds):
        raise InvalidArgumentError(f"seeds: expected distinct seeds, got {list(seeds)!r}")
    episodes = ckpt.train_config.eval_episodes if episodes_per_seed is None else episodes_per_seed
    episodes = checks.integer(episodes, "episodes_per_seed", minimum=1)
    n = episodes if num_envs is None else checks.integer(num_envs, "num_envs", minimum=1)
    config = _merged_config(ckpt, task_config_override)
    policy = ckpt.policy()
    if video is not None:
        from simbackend.playback.video import VideoWriter

        VideoWriter(video, progress=False).close()  # checks the path before any rollout

    per_seed = []
    delegated: tuple[str, ...] = ()
    t0 = time.perf_counter()
    for j, seed in enumerate(seeds):
        t_seed = time.perf_counter()
        task = make_task(ckpt.task, sim, n, config=config, seed=seed, device=device, **dict(backend_options or {}))
        delegated = tuple(sorted(task.backend.capabilities.delegated))
        frames = _Frames(task, video, video_size, video_camera, video_dress) if video is not None and j == 0 else None
        try:
            r = run_episodes(task, policy, episodes, on_step=frames)
            if frames is not None:
                frames.close()
        except BaseException:
            if frames is not None:
                frames.abort()
            raise
        finally:
            task.close()
        per_seed.append(
            {
                "seed": seed,
                "mean_return": float(r["return"].mean()),
                "success_rate": float(r["success"].mean()),
                "mean_length": float(r["length"].mean()),
                "wall_s": time.perf_counter() - t_seed,
            }
        )
    return EvalResult(
        task=ckpt.task,
        sim=sim,
        trained_on=ckpt.sim,
        checkpoint=str(ckpt.path),
        iteration=ckpt.iteration,
        env_steps=ckpt.env_steps,
        seeds=seeds,
        episodes_per_seed=episodes,
        num_envs=n,
        per_seed=per_seed,
        mean_return=estimate(s["mean_return"] for s in per_seed),
        success_rate=success_estimate(per_seed, episodes),
        mean_length=estimate(s["mean_length"] for s in per_seed),
        wall_s=time.perf_counter() - t0,
        video=None if video is None else str(Path(video)),
        delegated=delegated,
        trained_delegated=ckpt.delegated,
    )
