#!/usr/bin/env python
"""The sim-to-sim table: train a task on each engine, evaluate every policy on every engine.

For each task, training engine, DR setting (off, or the plan in ``plans/<task>_dr.json``) and
training seed, ``simbackend.training.train`` runs PPO (rsl-rl) with the task's default training
config; then ``simbackend.training.evaluate`` plays the deterministic policy on each engine, on
evaluation seeds apart from the training ones (the same episodes on every engine). The cells are
means over training seeds with a 95 % Student-t interval, the success rate and the return, plus
the training wall time. Evaluations run without the DR plan (the engines' nominal models).

Usage::

    python benchmarks/sim_to_sim.py --task cartpole --seeds 0 1 2
    python benchmarks/sim_to_sim.py --task reach --seeds 0 1 --time-budget 300 --dr both
    python benchmarks/sim_to_sim.py --task quadruped --train-sims mujoco --seeds 0 --time-budget 900
    python benchmarks/sim_to_sim.py --task reach --train-sims sapien --shards 2 --dr off --seeds 0 --out ...
    python benchmarks/sim_to_sim.py --task velocity --robot go1 --train-sims mujoco --seeds 0 1 2 --time-budget 900
    python benchmarks/sim_to_sim.py --add-evals results/sim_to_sim_quadruped_plan.json --eval-sims mjwarp

``--robot NAME`` runs the velocity task on that robot, with the plan ``plans/<robot>_dr.json``;
``--plan FILE`` trains with another plan (results ``sim_to_sim_<label>_<plan name>.json``, the plan's
name in the tables' DR column).

``--shards K`` trains on K Ray actors (``make_backend(..., shards=K)``); evaluations run in this process.

Writes ``results/sim_to_sim_<task>[_<robot>].json`` (every run's figures) and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

if not os.environ.get("MUJOCO_GL"):
    os.environ["MUJOCO_GL"] = "egl"

HERE = Path(__file__).resolve().parent


def _cell(values: list[float], fmt: str) -> str:
    from simbackend.training.stats import estimate

    e = estimate(values)
    if len(values) < 2:
        return format(e.mean, fmt)
    return f"{format(e.mean, fmt)} ± {format(e.half_width, fmt)}"


def _add_evals(path: Path, sims: list[str]) -> int:
    """Evaluate the runs of results file ``path`` on the engines of ``sims`` they were not evaluated on,
    with the file's own evaluation seeds and episodes; the file records which were added later."""
    from simbackend.training import evaluate

    data = json.loads(path.read_text())
    a = data["args"]
    for run in data["runs"]:
        for sim in sims:
            if sim in run["eval"]:
                continue
            ev = evaluate(
                run["checkpoint"],
                sim,
                seeds=tuple(a["eval_seeds"]),
                episodes_per_seed=a["episodes"],
                plan="none",  # the nominal engine (evaluate's default): what the README's tables report
            )
            run["eval"][sim] = ev.to_dict()
            print(f"[sim_to_sim] {run['name']} on {sim}: success {ev.success_rate.mean:.3f}", file=sys.stderr)
            a.setdefault("eval_sims_added", [])
            if sim not in a["eval_sims_added"]:
                a["eval_sims_added"].append(sim)
            path.write_text(json.dumps(data, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--task", default=None, help="the task to train (required unless --add-evals)")
    p.add_argument(
        "--add-evals",
        type=Path,
        default=None,
        help="evaluate an existing results file's checkpoints on the --eval-sims it lacks (same seeds, episodes)",
    )
    p.add_argument("--robot", default=None, help="robot of the velocity task (its plan: plans/<robot>_dr.json)")
    p.add_argument("--train-sims", nargs="+", default=["mujoco", "sapien"])
    p.add_argument("--eval-sims", nargs="+", default=["mujoco", "sapien"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="training seeds")
    p.add_argument("--eval-seeds", nargs="+", type=int, default=[100, 101, 102])
    p.add_argument("--episodes", type=int, default=32, help="evaluation episodes per evaluation seed")
    p.add_argument("--dr", choices=("off", "on", "both"), default="both")
    p.add_argument(
        "--plan", type=Path, default=None, help="the plan of --dr on (default plans/<robot or task>_dr.json)"
    )
    p.add_argument("--time-budget", type=float, default=None, help="training seconds per run")
    p.add_argument("--max-iterations", type=int, default=None)
    p.add_argument("--stop-at-success", type=float, default=None, help="stop a run once an evaluation reaches it")
    p.add_argument("--eval-interval", type=int, default=None, help="evaluate every N iterations while training")
    p.add_argument("--num-envs", type=int, default=None, help="training envs (default: the task's)")
    p.add_argument("--shards", type=int, default=None, help="train on K Ray shards (default: in this process)")
    p.add_argument("--runs", type=Path, default=Path("/tmp/sim_to_sim"), help="folder of the training runs")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)

    from simbackend.training import evaluate, train

    if args.add_evals is not None:
        return _add_evals(args.add_evals, args.eval_sims)
    if args.task is None:
        p.error("--task is required (or --add-evals FILE)")

    # a robot is a registered name or a JSON description (labelled by its file name)
    robot_label = None if args.robot is None else Path(args.robot).stem if args.robot.endswith(".json") else args.robot
    label = args.task if robot_label is None else f"{args.task}_{robot_label}"
    plan = HERE / "plans" / f"{robot_label or args.task}_dr.json"
    if args.plan is not None:  # another plan: its own results file and its own label in the tables
        plan = args.plan
        label = f"{label}_{plan.stem}"
    task_config = None if args.robot is None else {"robot": args.robot}
    settings = {"off": [False], "on": [True], "both": [False, True]}[args.dr]
    overrides = {}
    if args.time_budget is not None:
        overrides["time_budget_s"] = args.time_budget
    if args.max_iterations is not None:
        overrides["max_iterations"] = args.max_iterations
    if args.stop_at_success is not None:
        overrides["stop_at_success"] = args.stop_at_success
    if args.eval_interval is not None:
        overrides["eval_interval"] = args.eval_interval
    runs = []
    for dr in settings:
        for train_sim in args.train_sims:
            for seed in args.seeds:
                sharded = f"_k{args.shards}" if args.shards else ""
                name = f"{label}_{train_sim}{sharded}_{'dr' if dr else 'nodr'}_s{seed}"
                print(f"[sim_to_sim] training {name} ...", file=sys.stderr, flush=True)
                t0 = time.perf_counter()
                result = train(
                    args.task,
                    train_sim,
                    num_envs=args.num_envs,
                    seed=seed,
                    randomization=str(plan) if dr else None,
                    task_config=task_config,
                    train_config=overrides or None,
                    out_dir=args.runs / name,
                    progress=False,
                    backend_options={"shards": args.shards} if args.shards else None,
                )
                wall = time.perf_counter() - t0
                run = {
                    "name": name,
                    "task": args.task,
                    "robot": args.robot,
                    "train_sim": train_sim,
                    "shards": args.shards,
                    "dr": dr,
                    "plan_label": (plan.stem if args.plan is not None else "plan") if dr else None,
                    "seed": seed,
                    "iterations": result.iterations,
                    "env_steps": result.env_steps,
                    "train_wall_s": wall,
                    "stop_reason": result.stop_reason,
                    "final_eval": result.final_eval,
                    "curve": [
                        {k: row[k] for k in ("iteration", "wall_s", "eval_success", "command_level", "mean_length")}
                        for row in result.rows
                        if row["eval_success"] is not None
                    ],
                    "checkpoint": str(result.checkpoint),
                    "eval": {},
                }
                for eval_sim in args.eval_sims:
                    ev = evaluate(
                        result.checkpoint,
                        eval_sim,
                        seeds=tuple(args.eval_seeds),
                        episodes_per_seed=args.episodes,
                        plan="none",  # the nominal engine (evaluate's default): what the README's tables report
                    )
                    run["eval"][eval_sim] = ev.to_dict()
                    print(
                        f"[sim_to_sim]   on {eval_sim}: success {ev.success_rate.mean:.3f},"
                        f" return {ev.mean_return.mean:.1f}",
                        file=sys.stderr,
                        flush=True,
                    )
                runs.append(run)

    out = args.out or HERE / "results" / f"sim_to_sim_{label}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    import platform

    out.write_text(
        json.dumps(
            {
                "task": args.task,
                "robot": args.robot,
                "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform()},
                "runs": runs,
            },
            indent=2,
        )
    )

    print(
        f"\n{label}: training seeds {args.seeds}, evaluation seeds {args.eval_seeds} x {args.episodes}"
        " episodes; mean ± 95 % t-interval over training seeds\n"
    )
    print("| trained on | DR | evaluated on | success rate | return | train wall s | env steps |")
    print("|---|---|---|---|---|---|---|")
    for dr in settings:
        for train_sim in args.train_sims:
            group = [r for r in runs if r["dr"] == dr and r["train_sim"] == train_sim]
            for eval_sim in args.eval_sims:
                succ = [r["eval"][eval_sim]["success_rate"]["mean"] for r in group]
                ret = [r["eval"][eval_sim]["mean_return"]["mean"] for r in group]
                who = f"{train_sim} ({args.shards} shards)" if args.shards else train_sim
                print(
                    f"| {who} | {'plan' if dr else 'off'} | {eval_sim} | {_cell(succ, '.3f')} |"
                    f" {_cell(ret, '.1f')} | {_cell([r['train_wall_s'] for r in group], '.0f')} |"
                    f" {_cell([float(r['env_steps']) for r in group], '.0f')} |"
                )
    print(f"\nJSON: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
