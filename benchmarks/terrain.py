#!/usr/bin/env python
"""Rough terrain: Go1 trained on MuJoCo's terrain, evaluated on every engine per terrain type; a step's cost.

Parts (``--part``):

* ``train SEED``: one training run of the velocity task on the terrain of
  ``terrains/rough.json`` (height scan, terrain curriculum) on MuJoCo, for
  ``--iterations`` PPO iterations; its run folder under ``--runs``. Several
  seeds run as several processes side by side.
* ``eval``: every run under ``--runs`` evaluated on each of ``--sims`` on the
  evaluation tiles (every level of every type: env ``i``'s ``k``-th episode
  plays tile ``(i + k N) mod (types x levels)``, the same on every engine),
  ``--seeds`` x one episode per tile; success per terrain type. Writes
  ``results/terrain.json``.
* ``levels``: success per difficulty level on one engine (``--sims``' first).
* ``overhead``: the velocity task's step at N = 256 on MuJoCo, flat ground
  against the terrain with the height scan (random actions, the same for
  both; the ratio is the target's figure). Adds to ``results/terrain.json``.
* ``picture``: one policy (``--checkpoint``) on each engine, stills of an
  episode on each of ``--tiles`` side by side, one row per engine
  (``docs/images/go1_terrain_engines.png``).
* ``table``: prints the README's table from ``results/terrain.json``.

Usage::

    python benchmarks/terrain.py --part train --seed 0 --iterations 800 &
    python benchmarks/terrain.py --part eval --sims mujoco sapien mjwarp motrix
    python benchmarks/terrain.py --part overhead
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

if not os.environ.get("MUJOCO_GL"):
    os.environ["MUJOCO_GL"] = "egl"

HERE = Path(__file__).resolve().parent
TERRAIN = HERE / "terrains" / "rough.json"
RESULTS = HERE / "results" / "terrain.json"
#: Motrix refuses colliding height fields (it collides them otherwise than MuJoCo: docs/terrains.md); the
#: evaluation runs it with its own height-field collision, which is what the figure then measures
BACKEND_OPTIONS = {"motrix": {"motrix": {"native_hfield": True}}}
#: the velocity task's settings on the terrain (besides the terrain itself)
TASK = {"robot": "go1", "height_scan": True, "init_level": 1}


def _load(path: Path = RESULTS) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def _save(data: dict, path: Path = RESULTS) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version(), "date": time.strftime("%Y-%m-%d")}
    path.write_text(json.dumps(data, indent=2) + "\n")


def task_config() -> dict:
    return {**TASK, "terrain": json.loads(TERRAIN.read_text())}


def part_train(args: argparse.Namespace) -> int:
    from simbackend.training import train

    name = f"go1_rough_mujoco_s{args.seed}"
    t0 = time.perf_counter()
    result = train(
        "velocity",
        "mujoco",
        seed=args.seed,
        task_config=task_config(),
        train_config={
            "max_iterations": args.iterations,
            **({"time_budget_s": args.time_budget} if args.time_budget else {}),
        },
        out_dir=args.runs / name,
        progress=False,
    )
    summary = {
        "name": name,
        "seed": args.seed,
        "iterations": result.iterations,
        "env_steps": result.env_steps,
        "train_wall_s": time.perf_counter() - t0,
        "stop_reason": result.stop_reason,
        "final_eval": result.final_eval,
        "curve": [
            {k: row.get(k) for k in ("iteration", "wall_s", "eval_success", "terrain_level", "mean_length")}
            for row in result.rows
            if row.get("eval_success") is not None
        ],
        "final_terrain_level": result.rows[-1].get("terrain_level") if result.rows else None,
        "checkpoint": str(result.checkpoint),
    }
    (args.runs / name / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"[terrain] {name}: {result.iterations} iterations, final eval {result.final_eval}", file=sys.stderr)
    return 0


def part_eval(args: argparse.Namespace) -> int:
    from simbackend.training import evaluate

    data = _load(args.results)
    runs = data.setdefault("runs", {})
    for other in args.merge:  # evaluations another process wrote (an engine evaluated side by side)
        theirs = _load(other)
        for sim, seeds in theirs.get("eval_seeds_by_sim", {}).items():
            data.setdefault("eval_seeds_by_sim", {}).setdefault(sim, seeds)
        for name, run in theirs.get("runs", {}).items():
            mine = runs.setdefault(name, {k: v for k, v in run.items() if k != "eval"})
            for sim, ev in run.get("eval", {}).items():
                mine.setdefault("eval", {}).setdefault(sim, ev)
    summaries = sorted(args.runs.glob("go1_rough_mujoco_s*/summary.json"))
    if not summaries:
        print(f"no training runs under {args.runs}", file=sys.stderr)
        return 1
    terrain = json.loads(TERRAIN.read_text())
    tiles = len(terrain.get("types", [])) * terrain.get("levels", 5)
    for path in summaries:
        s = json.loads(path.read_text())
        run = runs.setdefault(s["name"], {k: v for k, v in s.items() if k != "curve"})
        run.update({k: v for k, v in s.items() if k != "curve"})
        run["curve"] = s["curve"]
        run.setdefault("eval", {})
        for sim in args.sims:
            if sim in run["eval"] and not args.again:
                continue
            t0 = time.perf_counter()
            ev = evaluate(
                s["checkpoint"],
                sim,
                seeds=tuple(args.seeds),
                episodes_per_seed=tiles,
                num_envs=tiles,
                backend_options=BACKEND_OPTIONS.get(sim),
            )
            run["eval"][sim] = ev.to_dict()
            by = {k: round(v.mean, 3) for k, v in ev.success_by_group.items()}
            print(
                f"[terrain] {s['name']} on {sim}: {ev.success_rate.mean:.3f} {by} ({time.perf_counter() - t0:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
            data["eval_design"] = {"seeds": list(args.seeds), "episodes_per_seed": tiles, "tiles": tiles}
            data["terrain"] = terrain
            data["task"] = TASK
            data["backend_options"] = BACKEND_OPTIONS
            data.setdefault("eval_seeds_by_sim", {})[sim] = list(args.seeds)
            _save(data, args.results)
    if args.merge:
        _save(data, args.results)
    if args.results == RESULTS:
        _write_study(data)
    print(table(data))
    return 0


def _write_study(data: dict) -> None:
    """The runs as a sim-to-sim study (``results/sim_to_sim_velocity_go1_rough.json``), the row of the
    README's sim-to-sim table that ``report.py`` writes."""
    design = data.get("eval_design", {})
    study = {
        "task": "velocity on rough terrain",
        "robot": TASK["robot"],
        "args": {"eval_seeds": design.get("seeds", []), "episodes": design.get("episodes_per_seed")},
        "terrain": data.get("terrain"),
        "backend_options": data.get("backend_options"),
        "runs": [
            {
                "name": name,
                "task": "velocity",
                "robot": TASK["robot"],
                "train_sim": "mujoco",
                "dr": False,
                "seed": r["seed"],
                "iterations": r["iterations"],
                "env_steps": r.get("env_steps"),
                "train_wall_s": r.get("train_wall_s"),
                "eval": r.get("eval", {}),
            }
            for name, r in sorted(data.get("runs", {}).items())
        ],
    }
    (RESULTS.parent / "sim_to_sim_velocity_go1_rough.json").write_text(json.dumps(study, indent=2) + "\n")


def part_levels(args: argparse.Namespace) -> int:
    """Success per difficulty level on one engine: every run evaluated on one level at a time (every type's
    tile of that level, ``--seeds`` x one episode per tile); added to ``results/terrain.json``."""
    from simbackend.training import evaluate

    data = _load(args.results)
    types = len(json.loads(TERRAIN.read_text()).get("types", []))
    levels = json.loads(TERRAIN.read_text()).get("levels", 5)
    table: dict = {}
    for path in sorted(args.runs.glob("go1_rough_mujoco_s*/summary.json")):
        s = json.loads(path.read_text())
        for level in range(levels):
            ev = evaluate(
                s["checkpoint"],
                args.sims[0],
                seeds=tuple(args.seeds),
                episodes_per_seed=types,
                num_envs=types,
                task_config_override={"eval_levels": [level]},
                backend_options=BACKEND_OPTIONS.get(args.sims[0]),
            )
            table.setdefault(str(level), {})[s["name"]] = {
                "success": ev.success_rate.mean,
                "by_type": {k: v.mean for k, v in ev.success_by_group.items()},
            }
            print(f"[terrain] {s['name']} level {level}: {ev.success_rate.mean:.3f}", file=sys.stderr, flush=True)
    data.setdefault("per_level", {})[args.sims[0]] = {"seeds": list(args.seeds), "levels": table}
    _save(data, args.results)
    return 0


def part_overhead(args: argparse.Namespace) -> int:
    import torch

    from simbackend.tasks import make_task

    torch.set_num_threads(1)  # as training runs (TrainConfig.torch_threads)
    n, steps = args.num_envs, args.steps
    g = torch.Generator().manual_seed(0)
    actions = [torch.rand((n, 12), generator=g) * 0.6 - 0.3 for _ in range(steps)]
    tasks = {
        "flat": make_task("velocity", "mujoco", n, config={"robot": "go1"}, seed=0),
        "terrain": make_task("velocity", "mujoco", n, config=task_config(), seed=0),
    }
    best = {k: float("inf") for k in tasks}
    try:
        for task in tasks.values():
            for a in actions[:10]:
                task.step(a)
        for _ in range(args.repeats):  # interleaved, so that a load on the machine meets both alike
            for label, task in tasks.items():
                task.reset()
                t0 = time.perf_counter()
                for a in actions:
                    st = task.step(a)
                    done = st.terminated | st.truncated
                    if bool(done.any()):
                        task.reset(done)
                best[label] = min(best[label], (time.perf_counter() - t0) / steps)
    finally:
        for task in tasks.values():
            task.close()
    out = {k: v * 1e3 for k, v in best.items()}
    for label, ms in out.items():
        print(f"[terrain] {label}: {ms:.1f} ms per policy step at N={n}", file=sys.stderr, flush=True)
    data = _load()
    data["overhead"] = {
        "num_envs": n,
        "steps": steps,
        "repeats": args.repeats,
        "flat_ms": out["flat"],
        "terrain_ms": out["terrain"],
        "ratio": out["terrain"] / out["flat"],
        "load_average": os.getloadavg()[0],
        "note": "the velocity task's whole step on Go1 (physics, observations with the height scan on the terrain,"
        " reward), random actions, the best of the repeats, flat and terrain interleaved",
    }
    _save(data)
    print(f"terrain / flat: {out['terrain'] / out['flat']:.2f}")
    return 0


def part_picture(args: argparse.Namespace) -> int:
    """One policy on each engine: ``--frames`` stills of an episode on each of ``--tiles`` (type:level), side
    by side, one row per engine (``engine_stills.py`` per tile, joined)."""
    import tempfile

    import numpy as np
    from PIL import Image

    import engine_stills

    terrain = json.loads(TERRAIN.read_text())
    parts = []
    with tempfile.TemporaryDirectory() as tmp:
        for k, tile in enumerate(args.tiles):
            kind, level = tile.split(":")
            override = {"terrain": {**terrain, "types": [kind]}, "eval_levels": [int(level)]}
            out = Path(tmp) / f"{k}.png"
            argv = ["--checkpoint", str(args.checkpoint), "--sims", *args.sims, "--frames", str(args.frames)]
            argv += ["--override", json.dumps(override), "--out", str(out), "--seed", str(args.seeds[0])]
            for sim, opts in BACKEND_OPTIONS.items():
                argv += ["--option", f"{sim}={json.dumps(opts)}"]
            for sim in args.sims:
                argv += ["--label", f"{sim}={sim}: {kind}, level {level}"]
            engine_stills.main(argv)
            parts.append(np.asarray(Image.open(out)))
    height = min(p.shape[0] for p in parts)
    gap = np.full((height, 6, 3), 255, np.uint8)
    row = [parts[0][:height]]
    for p in parts[1:]:
        row += [gap, p[:height]]
    args.picture.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.concatenate(row, axis=1)).save(args.picture)
    print(args.picture)
    return 0


def table(data: dict) -> str:
    """The README's table: per engine, success over all tiles and per type, mean over training seeds."""
    from simbackend.training.stats import estimate

    runs = list(data.get("runs", {}).values())
    if not runs:
        return "(no runs)"
    sims = [s for s in ("mujoco", "sapien", "mjwarp", "motrix") if all(s in r.get("eval", {}) for r in runs)]
    types: list[str] = []
    for r in runs:
        for s in sims:
            for k in r["eval"][s].get("success_by_group", {}):
                if k not in types:
                    types.append(k)
    head = "| engine | all tiles | " + " | ".join(types) + " |"
    lines = [head, "|" + "---|" * (2 + len(types))]
    base = None
    for s in sims:
        overall = estimate([r["eval"][s]["success_rate"]["mean"] for r in runs]).mean
        cells = []
        for k in types:
            vals = [
                r["eval"][s]["success_by_group"][k]["mean"]
                for r in runs
                if k in r["eval"][s].get("success_by_group", {})
            ]
            cells.append(f"{estimate(vals).mean:.2f}")
        kept = "" if base is None else f" ({overall / base:.0%})" if base > 0 else ""
        if base is None:
            base = overall
        lines.append(f"| {s} | {overall:.3f}{kept} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", choices=("train", "eval", "levels", "overhead", "picture", "table"), required=True)
    p.add_argument("--seed", type=int, default=0, help="train: the training seed")
    p.add_argument("--iterations", type=int, default=800, help="train: PPO iterations")
    p.add_argument("--time-budget", type=float, default=None, help="train: seconds at most (default: none)")
    p.add_argument("--runs", type=Path, default=Path("/tmp/terrain_runs"))
    p.add_argument("--sims", nargs="+", default=["mujoco", "sapien", "mjwarp", "motrix"])
    p.add_argument("--seeds", nargs="+", type=int, default=[100, 101, 102], help="eval: evaluation seeds")
    p.add_argument("--again", action="store_true", help="eval: evaluate again where a result exists")
    p.add_argument("--results", type=Path, default=RESULTS, help="eval: the results file to write")
    p.add_argument("--merge", nargs="*", type=Path, default=[], help="eval: results files whose evaluations to add")
    p.add_argument("--num-envs", type=int, default=256)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--checkpoint", type=Path, help="picture: the policy")
    p.add_argument("--tiles", nargs="+", default=["stairs_up:2", "rough:4"], help="picture: TYPE:LEVEL each")
    p.add_argument("--frames", type=int, default=2, help="picture: stills per tile")
    p.add_argument("--picture", type=Path, default=HERE.parent / "docs" / "images" / "go1_terrain_engines.png")
    args = p.parse_args(argv)
    if args.part == "picture":
        return part_picture(args)
    if args.part == "train":
        return part_train(args)
    if args.part == "eval":
        return part_eval(args)
    if args.part == "levels":
        return part_levels(args)
    if args.part == "overhead":
        return part_overhead(args)
    print(table(_load()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
