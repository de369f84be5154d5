"""Evaluation of a deterministic policy on any engine, with confidence intervals over seeds.

Which episodes are played is fixed by ``(seed, num_envs, episodes)`` alone: env ``i`` plays its
episodes ``0, 1, ...`` (drawn from the task's reset streams, the same on every engine) and the
``k``-th episode of env ``i`` is kept when ``k * num_envs + i < episodes``. Swapping the engine is
the ``sim`` argument only; the episodes, the policy and the metrics stay the same.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from simbackend import checks
from simbackend.errors import InvalidArgumentError

from .checkpoint import Checkpoint, load_checkpoint
from .exported import ActionScaleNeeded, ExportedPolicy, load_policy
from .stats import Estimate, estimate, wilson

__all__ = [
    "EvalResult",
    "evaluate",
    "group_success",
    "merge_seeds",
    "run_episodes",
    "success_estimate",
    "torch_threads",
]

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
    task: Any,
    policy: Callable[[torch.Tensor], torch.Tensor],
    episodes: int,
    on_step: Callable[[torch.Tensor], bool | None] | None = None,
) -> dict[str, torch.Tensor]:
    """Play ``episodes`` complete episodes of ``policy`` on ``task`` (see the module docstring).

    The task should be fresh (every env at the start of its first episode); if some env is not, every
    env starts a new episode first. Envs are reset as their episodes end; an env that has played its
    share keeps playing episodes that are not counted. ``on_step(done)`` is called after every step
    with the step's ``(N,)`` bool ``terminated | truncated`` on the CPU, before the envs it marks are
    reset; while it returns true the envs play on (uncounted) once the counted episodes are played
    (a video that wants more of env 0 than the evaluation gave).

    Returns:
        ``{"return", "length", "success"}``: ``(episodes,)`` float64 tensors on the CPU, in the order
        ``k * num_envs + i``; with ``"group"`` too (each episode's index into ``task.group_names``) where
        the task sorts its episodes into groups (the velocity task's terrain types).
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
    keys = ("return", "length", "success") + (("group",) if getattr(task, "group_names", ()) else ())
    out = {key: torch.full((rounds, n), math.nan, dtype=torch.float64) for key in keys}
    count = torch.zeros(n, dtype=torch.int64)
    more = False
    while more or bool((count < need).any()):
        step = task.step(policy(flat))
        done = (step.terminated | step.truncated).cpu()
        if on_step is not None:
            more = bool(on_step(done))
        if bool(done.any()):
            ids = torch.nonzero(done & (count < need)).flatten()
            k = count[ids]
            out["return"][k, ids] = step.info["episode_return"].cpu()[ids].double()
            out["length"][k, ids] = step.info["episode_length"].cpu()[ids].double()
            out["success"][k, ids] = step.info["success"].cpu()[ids].double()
            if "group" in out:  # read before the reset moves the envs to their next group
                out["group"][k, ids] = task.episode_groups().cpu()[ids].double()
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
        success_by_group: ``{group: success rate}`` with Wilson's interval, over every seed's episodes of
            that group, where the task sorts episodes into groups (the velocity task on a terrain: its
            terrain types); the per-seed rows hold ``success_by_group`` as ``{group: [successes, episodes]}``.
        plan: the randomization plan evaluated under: ``"none"`` (the nominal engine, the default),
            ``"training"`` (the checkpoint's training plan), a plan file's path, ``"given"`` (a plan object or
            mapping) or ``"task_config_override"``. plan_terms: the names of the plan's terms applied.
        skipped_terms: the plan's terms left out because ``sim`` does not apply them
            (``skip_unsupported=True``).
        success_by_engine: ``{engine: success rate}`` with Wilson's interval where ``sim`` is a mixed backend
            (``"mujoco,sapien"``): over every seed's episodes played by that engine's envs (the per-seed rows
            hold ``success_by_engine`` as ``{engine: [successes, episodes]}``); empty for one engine.
        held_out: the engines evaluated on that the policy was not trained on (``sim``'s engines less
            ``trained_on``'s), in ``sim``'s order.
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
    success_by_group: dict = field(default_factory=dict)
    plan: str = "none"
    plan_terms: tuple[str, ...] = ()
    skipped_terms: tuple[str, ...] = ()
    success_by_engine: dict = field(default_factory=dict)
    held_out: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        """JSON-ready figures."""
        return {
            "task": self.task,
            "sim": self.sim,
            "trained_on": self.trained_on,
            "checkpoint": self.checkpoint,
            "delegated": list(self.delegated),
            "trained_delegated": list(self.trained_delegated),
            "plan": {"source": self.plan, "terms": list(self.plan_terms), "skipped": list(self.skipped_terms)},
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
            "held_out": list(self.held_out),
            **(
                {"success_by_engine": {k: v.to_dict() for k, v in self.success_by_engine.items()}}
                if self.success_by_engine
                else {}
            ),
            **(
                {"success_by_group": {k: v.to_dict() for k, v in self.success_by_group.items()}}
                if self.success_by_group
                else {}
            ),
        }


#: the default length of an evaluation's video: simulated seconds of env 0 in the first seed
VIDEO_SECONDS = 10.0
#: the most frames per second a video is drawn at (every k-th policy step, k = ceil(control rate / this))
VIDEO_MAX_FPS = 30.0


class _Film:
    """A video of env 0 during the first seed, recorded cheaply and drawn afterwards.

    While the rollout runs, each policy step copies env 0's ``qpos`` on the backend's device (one
    ``(nq,)`` copy: no host read, no drawing, the physics goes at its own pace); once the rollout
    ends the states are read to the host at once and drawn by MuJoCo's renderer from the compiled
    model (any engine's), at most :data:`VIDEO_MAX_FPS` frames per second (a step that ends an
    episode is always drawn: the fall is in the video). The film wants ``seconds`` of simulated time
    or env 0's first ``episodes`` episodes, across resets; the evaluation plays on (uncounted) until
    it has them.
    """

    def __init__(
        self, task: Any, seconds: float | None, episodes: int | None, size: tuple[int, int], camera: Any, dress: bool
    ):
        from simbackend.playback.render import Renderer

        self.task, self.camera, self.dress = task, camera, dress
        self.episodes = episodes
        self.every = max(1, math.ceil(1.0 / (task.control_dt * VIDEO_MAX_FPS) - 1e-9))
        self.fps = 1.0 / (task.control_dt * self.every)
        self.steps = None if episodes is not None else max(1, math.ceil(float(seconds) / task.control_dt - 1e-9))
        self.renderer = Renderer(task.backend.info.compiled, size[0], size[1])
        try:
            first = task.backend.get_qpos()[0].clone()
            self.renderer.render(first[None].cpu(), camera, dress=dress)  # a bad camera or dress raises now
        except BaseException:
            self.renderer.close()
            raise
        self.states = [first]
        self.ends: list[int] = []  # the states that end an episode of env 0

    @property
    def complete(self) -> bool:
        if self.episodes is not None:
            return len(self.ends) >= self.episodes
        return len(self.states) > self.steps

    def __call__(self, done: torch.Tensor) -> bool:
        """After a step: keep env 0's state (until the film is complete); whether more steps are wanted."""
        if self.complete:
            return False
        self.states.append(self.task.backend.get_qpos()[0].clone())
        if bool(done[0]):
            self.ends.append(len(self.states) - 1)
        return not self.complete

    def frames(self) -> list[int]:
        """The states drawn: one per ``every`` steps, the one that ends an episode where a span holds one."""
        ends = set(self.ends)
        picked = []
        for start in range(0, len(self.states), self.every):
            span = range(start, min(start + self.every, len(self.states)))
            picked.append(next((i for i in span if i in ends), start))
        return picked

    def draw(self, path: Any) -> int:
        """Draw the kept states into the mp4 ``path``; the number of frames."""
        from simbackend.playback.video import VideoWriter

        picked = self.frames()
        states = torch.stack(self.states).cpu()[picked]  # one host read for the whole film
        writer = VideoWriter(path, fps=self.fps, progress=False, total=len(picked))
        try:
            for start in range(0, len(picked), 64):
                rgb = self.renderer.render(states[start : start + 64], self.camera, dress=self.dress)["rgb"]
                for frame in rgb:
                    writer.append(frame)
        except BaseException:
            writer.abort()
            raise
        return writer.close()

    def close(self) -> None:
        self.renderer.close()


def video_length(seconds: Any, episodes: Any) -> tuple[float | None, int | None]:
    """``(seconds, episodes)`` of a video, checked: one of them (default :data:`VIDEO_SECONDS` seconds)."""
    if seconds is not None and episodes is not None:
        raise InvalidArgumentError(
            f"video_episodes: give video_seconds or video_episodes, not both (got {seconds!r} and {episodes!r})"
        )
    if episodes is not None:
        return None, checks.integer(episodes, "video_episodes", minimum=1, maximum=1000)
    return checks.real(VIDEO_SECONDS if seconds is None else seconds, "video_seconds", minimum=0, above=True,
                       maximum=3600), None  # fmt: skip


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


#: the words ``evaluate(plan=...)`` and ``simbackend eval --plan`` take besides a plan file
PLAN_WORDS = ("none", "training")


def _chosen_plan(source: Any, plan: Any, override: Mapping[str, Any] | None) -> tuple[Any, str]:
    """The randomization plan an evaluation runs under (a ``RandomizationPlan`` or ``None``) and where it came
    from (:attr:`EvalResult.plan`): ``plan`` (``None``/``"none"``, ``"training"``, a plan, its dict or a JSON
    file), or the ``randomization`` of ``task_config_override``."""
    from simbackend.randomization import RandomizationPlan
    from simbackend.tasks.base import load_plan

    if override and "randomization" in override:
        if plan is not None and plan != "none":
            raise InvalidArgumentError(
                "plan: give plan or task_config_override's 'randomization', not both (they choose the same thing)"
            )
        return load_plan(override["randomization"]), "task_config_override"
    if plan is None or plan == "none":
        return None, "none"
    if plan == "training":
        return load_plan(source.task_config.get("randomization")), "training"
    if not isinstance(plan, (str, os.PathLike, Mapping, RandomizationPlan)):
        raise InvalidArgumentError(
            f"plan: expected {' or '.join(map(repr, PLAN_WORDS))}, a RandomizationPlan, its dict or a JSON file"
            f" path, got {type(plan).__name__}"
        )
    return load_plan(plan), str(plan) if isinstance(plan, (str, os.PathLike)) else "given"


def _plan_on(
    plan: Any, label: str, source: Any, sim: str, n: int, config: dict, device: Any, options: Any, skip: bool
) -> tuple[Any, tuple[str, ...]]:
    """``plan`` without the terms engine ``sim`` does not apply (asked by a task of ``n`` envs built without
    it) and their names; those terms refused in one line naming ``plan`` unless ``skip``."""
    from simbackend.randomization import RandomizationPlan
    from simbackend.tasks import make_task

    if plan is None or not plan.terms:
        return plan, ()
    probe = make_task(source.task, sim, n, config={**config, "randomization": None}, device=device,
                      **dict(options or {}))  # fmt: skip
    try:
        applies = probe.backend.get_dr_capabilities()
    finally:
        probe.close()
    lacking = [i for i, t in enumerate(plan.terms) if t.phase not in applies.get(t.kind, ())]
    if not lacking:
        return plan, ()
    names = tuple(plan.term_name(i) for i in lacking)
    if not skip:
        terms = ", ".join(f"{plan.term_name(i)!r} ({plan.terms[i].kind}, {plan.terms[i].phase})" for i in lacking)
        raise InvalidArgumentError(
            f"plan: {sim!r} does not apply the {label} plan's term(s) {terms} (get_dr_capabilities() lists what"
            " it applies); skip_unsupported=True leaves them out"
        )
    kept = tuple(t for i, t in enumerate(plan.terms) if i not in lacking)
    return (RandomizationPlan(kept, seed=plan.seed) if kept else None), names


def default_episodes(task: str, config: Mapping[str, Any], episodes: int) -> int:
    """An evaluation's default episodes per seed: ``episodes`` (the training evaluations') rounded up to a
    multiple of the task's evaluation cycle (:meth:`~simbackend.tasks.Task.evaluation_cycle`: a terrain's
    tiles), so that every tile is played, each as often as the others."""
    from simbackend.tasks import get_task_class

    cls = get_task_class(task)
    cycle = int(cls.evaluation_cycle(cls.config_class.from_dict(dict(config))))
    return cycle * math.ceil(episodes / cycle)


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
    video_seconds: float | None = None,
    video_episodes: int | None = None,
    plan: Any = None,
    skip_unsupported: bool = False,
) -> EvalResult:
    """Run a checkpoint's deterministic policy (the actor's mean) for complete episodes on engine ``sim``.

    Args:
        checkpoint: a path (or a loaded :class:`Checkpoint`) written by :func:`~simbackend.training.train`;
            it names the task and its config, so nothing else is needed.
        sim: engine to evaluate on (default: the one it was trained on).
        num_envs: parallel envs per seed (default: ``episodes_per_seed``, one episode per env).
        seeds: task seeds (reset streams); each gives one value of every metric. The default keeps
            clear of the seeds training usually starts from (0, 1, ...), so the episodes are unseen.
        episodes_per_seed: complete episodes per seed (default: the training config's ``eval_episodes``,
            rounded up to a multiple of the task's evaluation cycle: on a terrain, its tiles, so that every
            tile is played and each as often; :meth:`~simbackend.tasks.Task.evaluation_cycle`).
        video: an ``.mp4`` path: env 0 during the first seed, its episodes one after the other across
            resets, at the task's control rate or every k-th step (at most :data:`VIDEO_MAX_FPS` frames
            per second; a step that ends an episode is always drawn). Env 0's states are copied each
            step and drawn once the rollout ends, so the video costs its drawing, not slower physics;
            the evaluation's figures are the same with or without it.
        video_seconds, video_episodes: the video's length: simulated seconds (default
            :data:`VIDEO_SECONDS`) or env 0's first episodes, one of them; where the evaluation ends
            sooner the envs play on (uncounted) until the video has it.
        task_config_override: task-config fields replacing the checkpoint's (e.g. ``{"max_cart": 3}``); its
            ``randomization``, where given, is the plan (``plan`` then stays ``None``).
        plan: the domain-randomization plan evaluated under: ``None`` or ``"none"`` (the default): the
            nominal engine, without randomization, as ``benchmarks/sim_to_sim.py`` and the README's tables
            evaluate; ``"training"``: the checkpoint's training plan (its task config's); a
            :class:`~simbackend.randomization.RandomizationPlan`, its dict or a JSON file path: that plan.
            A term that engine ``sim`` does not apply is refused, naming the terms (``InvalidArgumentError``
            starting ``plan:``), before any rollout.
        skip_unsupported: leave out the plan's terms that ``sim`` does not apply instead (named in
            :attr:`EvalResult.skipped_terms`).
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
            video_seconds=video_seconds,
            video_episodes=video_episodes,
            plan=plan,
            skip_unsupported=skip_unsupported,
        )


def merge_seeds(results: Sequence[EvalResult]) -> EvalResult:
    """One result from evaluations of one checkpoint on one engine over different seeds (e.g. run apart,
    as the tasks of a sweep): per-seed rows in seed order, the estimates over all of them, wall times added."""
    if not results:
        raise InvalidArgumentError("results: expected at least one evaluation")
    first = results[0]
    design = (first.checkpoint, first.sim, first.episodes_per_seed, first.num_envs, first.plan, first.plan_terms)
    if any((r.checkpoint, r.sim, r.episodes_per_seed, r.num_envs, r.plan, r.plan_terms) != design for r in results):
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
        success_by_group=group_success(per_seed),
        success_by_engine=group_success(per_seed, "success_by_engine"),
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
    video_seconds: float | None = None,
    video_episodes: int | None = None,
    plan: Any = None,
    skip_unsupported: bool = False,
) -> EvalResult:
    ckpt = _source(checkpoint)
    exported = isinstance(ckpt, ExportedPolicy)
    if sim is None:  # the training engine(s); a mix's counts dropped: shares of this evaluation's envs
        from simbackend.mixing import engines_of

        sim = ",".join(engines_of(ckpt.sim)) if not exported else "mujoco"
    seeds = tuple(seeds)
    if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
        raise InvalidArgumentError(f"seeds: expected non-negative ints, got {list(seeds)!r}")
    if len(set(seeds)) != len(seeds):
        raise InvalidArgumentError(f"seeds: expected distinct seeds, got {list(seeds)!r}")
    skip_unsupported = checks.boolean(skip_unsupported, "skip_unsupported")
    config = _merged_config(ckpt, task_config_override)
    chosen, plan_label = _chosen_plan(ckpt, plan, task_config_override)
    config["randomization"] = None if chosen is None else chosen.to_dict()
    if episodes_per_seed is None:
        default = ckpt.eval_episodes if exported else ckpt.train_config.eval_episodes
        episodes_per_seed = default_episodes(ckpt.task, config, default)
    episodes = episodes_per_seed
    episodes = checks.integer(episodes, "episodes_per_seed", minimum=1)
    n = episodes if num_envs is None else checks.integer(num_envs, "num_envs", minimum=1)
    policy = None if exported else ckpt.policy()
    length = video_length(video_seconds, video_episodes)
    if video is not None:
        from simbackend.playback.video import VideoWriter

        VideoWriter(video, progress=False).close()  # checks the path before any rollout
    elif video_seconds is not None or video_episodes is not None:
        which = "video_seconds" if video_seconds is not None else "video_episodes"
        raise InvalidArgumentError(f"{which}: the length of a video; give video (an .mp4 path) too")
    named = () if chosen is None else tuple(chosen.term_name(i) for i in range(len(chosen.terms)))
    chosen, skipped = _plan_on(chosen, plan_label, ckpt, sim, n, config, device, backend_options, skip_unsupported)
    config["randomization"] = None if chosen is None else chosen.to_dict()

    per_seed = []
    delegated: tuple[str, ...] = ()
    t0 = time.perf_counter()
    for j, seed in enumerate(seeds):
        t_seed = time.perf_counter()
        task, bound = _task_and_policy(ckpt, policy, sim, n, config, seed, device, backend_options)
        group_names = tuple(getattr(task, "group_names", ()))
        env_engines = task.backend.env_engines
        film = None
        try:
            delegated = tuple(sorted(task.backend.capabilities.delegated))
            if video is not None and j == 0:
                film = _Film(task, *length, video_size, video_camera, video_dress)
            r = run_episodes(task, bound, episodes, on_step=film)
        except BaseException:
            if film is not None:
                film.close()
            raise
        finally:
            task.close()
        row = {
            "seed": seed,
            "mean_return": float(r["return"].mean()),
            "success_rate": float(r["success"].mean()),
            "mean_length": float(r["length"].mean()),
            "wall_s": time.perf_counter() - t_seed,
        }
        if "group" in r:
            row["success_by_group"] = _group_counts(r["success"], r["group"], group_names)
        engines = tuple(dict.fromkeys(env_engines))
        if len(engines) > 1:  # a mixed backend: episode k was played in env k % n (run_episodes' order)
            which = torch.tensor([engines.index(env_engines[k % n]) for k in range(len(r["success"]))])
            row["success_by_engine"] = _group_counts(r["success"], which, engines)
        per_seed.append(row)
        if film is not None:  # drawn once the rollout is over: the seed's wall time is the evaluation's
            try:
                film.draw(video)
            finally:
                film.close()
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
        success_by_group=group_success(per_seed),
        plan=plan_label,
        plan_terms=tuple(name for name in named if name not in skipped),
        skipped_terms=skipped,
        success_by_engine=group_success(per_seed, "success_by_engine"),
        held_out=held_out(sim, ckpt.engines if not exported else ckpt.sim),
    )


def held_out(sim: str, trained: str | Iterable[str]) -> tuple[str, ...]:
    """The engines of ``sim`` (one backend's name or a mix spec) that are not among ``trained`` (engine names,
    or the spec a policy's record names), in order; none where the training engine is not known (an exported
    policy of another framework: ``"unknown"``)."""
    from simbackend.mixing import engines_of

    seen = set(engines_of(trained, checked=False) if isinstance(trained, str) else trained)
    if not seen or seen == {"unknown"}:
        return ()
    return tuple(e for e in engines_of(sim) if e not in seen)


def _source(checkpoint: Any) -> Checkpoint | ExportedPolicy:
    """What ``evaluate`` runs: a loaded checkpoint or exported policy, or the one a path names (``.onnx``:
    an exported policy, :func:`~simbackend.training.exported.load_policy`)."""
    if isinstance(checkpoint, (Checkpoint, ExportedPolicy)):
        return checkpoint
    if isinstance(checkpoint, (str, os.PathLike)) and str(checkpoint).endswith(".onnx"):
        return load_policy(checkpoint)
    return load_checkpoint(checkpoint)


def _task_and_policy(
    source: Any, policy: Any, sim: str, n: int, config: dict, seed: int, device: Any, options: Any
) -> tuple[Any, Callable[[torch.Tensor], torch.Tensor]]:
    """The evaluation task of one seed and the policy that runs on it: a checkpoint's, or an exported policy
    bound to the task (built again with a larger ``action_scale`` where the policy's targets reach further)."""
    from simbackend.tasks import make_task

    def build(cfg: dict) -> Any:
        return make_task(source.task, sim, n, config=cfg, seed=seed, device=device, **dict(options or {}))

    task = build(config)
    if policy is not None:
        return task, policy
    try:
        return task, source.bind(task)
    except ActionScaleNeeded as e:
        task.close()
        task = build({**config, "action_scale": e.scale})
    except BaseException:
        task.close()
        raise
    try:
        return task, source.bind(task)
    except BaseException:
        task.close()
        raise


def _group_counts(success: torch.Tensor, group: torch.Tensor, names: Sequence[str]) -> dict:
    """``{name: [successes, episodes]}`` of one seed's episodes, per group name (a name that several
    groups share, as a terrain type in two columns, counts them together)."""
    out: dict[str, list[int]] = {}
    for g, name in enumerate(names):
        sel = group == g
        tally = out.setdefault(name, [0, 0])
        tally[0] += int(success[sel].sum())
        tally[1] += int(sel.sum())
    return {k: v for k, v in out.items() if v[1]}


def group_success(per_seed: Sequence[Mapping[str, Any]], key: str = "success_by_group") -> dict:
    """``{group: Estimate}``: each group's success rate over every seed's episodes of it (Wilson's interval);
    the groups are the per-seed rows' ``key`` (``"success_by_engine"``: the engines of a mixed backend)."""
    totals: dict[str, list[int]] = {}
    for row in per_seed:
        for name, (wins, count) in row.get(key, {}).items():
            t = totals.setdefault(name, [0, 0])
            t[0] += int(wins)
            t[1] += int(count)
    return {name: wilson(w, c) for name, (w, c) in totals.items()}
