#!/usr/bin/env python
"""Rough terrain: Go1 trained on MuJoCo's terrain, evaluated on every engine per terrain type; a step's cost.

Parts (``--part``):

* ``train SEED``: one training run of the velocity task on the terrain of
  ``terrains/rough.json`` (height scan, terrain curriculum) on MuJoCo, for
  ``--iterations`` PPO iterations; its run folder under ``--runs``. Several
  seeds run as several processes side by side. ``--resume FOLDER`` goes on
  from that folder's run of the seed (checkpoint, curriculum, curve and time).
  ``--reward TERM=WEIGHT`` sets reward weights (the task's ``reward_weights``).
  ``--robot`` (a name or a description file; default Go1) and ``--plan``
  (default ``plans/go1_dr.json``) train another robot: its runs are named
  after it, and ``eval`` and ``levels`` take the same ``--robot``.
* ``eval``: every run under ``--runs`` evaluated on each of ``--sims`` on the
  evaluation tiles (every level of every type: env ``i``'s ``k``-th episode
  plays tile ``(i + k N) mod (types x levels)``, the same on every engine),
  ``--seeds`` x one episode per tile; success per terrain type. Writes
  ``results/terrain.json``.
* ``levels``: success per difficulty level (and per type within it) on each of ``--sims``.
* ``overhead``: the velocity task's step at N = 256 on MuJoCo, flat ground
  against the terrain with the height scan (random actions, the same for
  both; the ratio is the target's figure). Adds to ``results/terrain.json``.
  With ``--checkpoint``, that policy's actions instead (a robot walking, as
  in training; on flat ground it reads the scan of level ground).
* ``rest``: boxes let go at random points of ``terrains/rest.json`` (a
  config no task trains on: 6 types x 3 levels of 4 m tiles at 5 cm), one
  box an env, on each of ``--sims``; where each comes to rest against
  MuJoCo's rest, per terrain type (``results/terrain_rest.json``).
* ``cost``: the velocity task's step at N = ``--num-envs`` on MuJoCo, flat
  ground against a terrain of each type alone (5 levels), built of pieces and
  as height fields (``results/terrain_cost.json``); with ``--checkpoint``,
  that policy's actions.
* ``profile``: where MuJoCo's step goes (its timers), one env, flat ground
  against both builds (``results/terrain_cost.json``); with ``--checkpoint``,
  while that policy walks, per terrain type.
* ``docs``: rewrites docs/terrains.md's generated tables (rest, cost,
  overhead per engine) from the results files.
* ``picture``: one policy (``--checkpoint``) on each engine, stills of an
  episode on each of ``--tiles`` side by side, one row per engine
  (``docs/images/go1_terrain_engines.png``).
* ``table``: prints the README's table from ``results/terrain.json``.

Usage::

    python benchmarks/terrain.py --part train --seed 0 --iterations 800 &
    python benchmarks/terrain.py --part eval --sims mujoco sapien mjwarp motrix
    python benchmarks/terrain.py --part overhead
    python benchmarks/terrain.py --part rest --sims mujoco sapien mjwarp motrix
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
REST_TERRAIN = HERE / "terrains" / "rest.json"
RESULTS = HERE / "results" / "terrain.json"
REST_RESULTS = HERE / "results" / "terrain_rest.json"
COST_RESULTS = HERE / "results" / "terrain_cost.json"
#: backend options per engine (none: every engine loads every terrain as it is)
BACKEND_OPTIONS: dict[str, dict] = {}
#: rest: the box's half size (m), how high above the highest ground under it it is let go (m), how long it
#: is given (s), and the agreement counted (m)
BOX, DROP, SETTLE_S, REST_TOL = 0.1, 0.02, 1.5, 3e-3
#: rest: a box moving faster than this (m/s) at the end has not come to rest (MuJoCo's soft contacts let a box
#: on a slope slide on at about 2 mm/s, measured to 6 s)
STILL = 1e-3
#: the velocity task's settings on the terrain (besides the terrain itself)
TASK = {"robot": "go1", "height_scan": True, "init_level": 1}
#: the training recipe on top of :data:`TASK` (``--part train``): observation noise (the scan's included, +-0.1
#: m) and the randomization plan (pushes, foot friction, trunk mass, servo gains); evaluations run without both
RECIPE = {"obs_noise": 1.0}
PLAN = HERE / "plans" / "go1_dr.json"


def _load(path: Path = RESULTS) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def _save(data: dict, path: Path = RESULTS) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version(), "date": time.strftime("%Y-%m-%d")}
    path.write_text(json.dumps(data, indent=2) + "\n")


def task_config(robot: str = TASK["robot"]) -> dict:
    return {**TASK, "robot": robot, "terrain": json.loads(TERRAIN.read_text())}


def robot_label(robot: str) -> str:
    """The runs' name prefix for ``--robot``: a robot's name, or a description file's stem."""
    return Path(robot).stem if robot.endswith(".json") else robot


def _robot(args: argparse.Namespace) -> str:
    """``--robot``: a registered name as given, a description file as an absolute path (checkpoints keep it,
    and evaluations on other engines read it from there)."""
    return str(Path(args.robot).resolve()) if args.robot.endswith(".json") else args.robot


def _rewards(pairs: list[str]) -> dict:
    """``--reward TERM=WEIGHT`` pairs as the velocity task's ``reward_weights`` (``{}`` for none)."""
    weights = {}
    for pair in pairs:
        term, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--reward: expected TERM=WEIGHT, got {pair!r}")
        try:
            weights[term] = float(value)
        except ValueError:
            raise SystemExit(f"--reward {term}: expected a number, got {value!r}") from None
    return {"reward_weights": weights} if weights else {}


def part_train(args: argparse.Namespace) -> int:
    from simbackend.training import train

    name = f"{robot_label(args.robot)}_rough_mujoco_s{args.seed}"
    # --resume FOLDER: go on from that folder's run of this seed (its checkpoint, curriculum and summary)
    before = json.loads((args.resume / name / "summary.json").read_text()) if args.resume else None
    t0 = time.perf_counter()
    result = train(
        "velocity",
        "mujoco",
        seed=args.seed,
        task_config={**task_config(_robot(args)), **RECIPE, **_rewards(args.reward)},
        randomization=str(args.plan),
        train_config={
            "max_iterations": args.iterations,
            **({"time_budget_s": args.time_budget} if args.time_budget else {}),
        },
        out_dir=args.runs / name,
        progress=False,
        resume=str(args.resume / name / "checkpoint_final.pt") if args.resume else None,
    )
    summary = {
        "name": name,
        "seed": args.seed,
        "iterations": result.iterations,
        "env_steps": result.env_steps,
        "train_wall_s": time.perf_counter() - t0 + (before["train_wall_s"] if before else 0.0),
        "stop_reason": result.stop_reason,
        "final_eval": result.final_eval,
        "curve": (before["curve"] if before else [])
        + [
            {k: row.get(k) for k in ("iteration", "wall_s", "eval_success", "terrain_level", "mean_length")}
            | ({"wall_s": row.get("wall_s", 0.0) + before["train_wall_s"]} if before else {})
            for row in result.rows
            if row.get("eval_success") is not None
        ],
        **({"resumed_from": before["checkpoint"], "resumed_at": before["iterations"]} if before else {}),
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
        for key in ("eval_design", "terrain", "task", "backend_options"):
            if key in theirs:
                data.setdefault(key, theirs[key])
        for sim, seeds in theirs.get("eval_seeds_by_sim", {}).items():
            data.setdefault("eval_seeds_by_sim", {}).setdefault(sim, seeds)
        for name, run in theirs.get("runs", {}).items():
            mine = runs.setdefault(name, {k: v for k, v in run.items() if k != "eval"})
            for sim, ev in run.get("eval", {}).items():
                mine.setdefault("eval", {}).setdefault(sim, ev)
    summaries = sorted(args.runs.glob(f"{robot_label(args.robot)}_rough_mujoco_s*/summary.json"))
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
            data["task"] = {**TASK, "robot": _robot(args)}
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
                "dr": True,  # the recipe's randomization plan (PLAN)
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
    """Success per difficulty level on each of ``--sims``: every run evaluated on one level at a time (every
    type's tile of that level, ``--seeds`` x one episode per tile); added to ``results/terrain.json``."""
    from simbackend.training import evaluate

    data = _load(args.results)
    types = len(json.loads(TERRAIN.read_text()).get("types", []))
    levels = json.loads(TERRAIN.read_text()).get("levels", 5)
    for sim in args.sims:
        table: dict = {}
        for path in sorted(args.runs.glob(f"{robot_label(args.robot)}_rough_mujoco_s*/summary.json")):
            s = json.loads(path.read_text())
            for level in range(levels):
                ev = evaluate(
                    s["checkpoint"],
                    sim,
                    seeds=tuple(args.seeds),
                    episodes_per_seed=types,
                    num_envs=types,
                    task_config_override={"eval_levels": [level]},
                    backend_options=BACKEND_OPTIONS.get(sim),
                )
                table.setdefault(str(level), {})[s["name"]] = {
                    "success": ev.success_rate.mean,
                    "by_type": {k: v.mean for k, v in ev.success_by_group.items()},
                }
                print(f"[terrain] {s['name']} on {sim}, level {level}: {ev.success_rate.mean:.3f}", file=sys.stderr)
        data.setdefault("per_level", {})[sim] = {"seeds": list(args.seeds), "levels": table}
        _save(data, args.results)
    return 0


def _seconds_per_step(task, actions: list, policy=None) -> float:
    """The task's wall time per step over ``actions`` from a reset, ended episodes reset as training does. Every
    call plays the same episodes (starts, commands and tiles are drawn from each env's episode count, set back
    to 0 here): the repeats of a measurement time one trajectory, and their best is the fastest run of it,
    not the cheapest of several (measured in one process on the terrain: four starting episode counts gave
    bests of 60.6-65.3 ms a step, one of them alone 60.6-68.3 ms over three repeats).

    With ``policy`` (``policy(task, obs) -> actions``, :func:`_checkpoint_actor`) the actions are the
    policy's, from each step's observation, for ``len(actions)`` steps; only the task's step and resets are
    timed, not the policy."""
    task.episode_count.zero_()
    obs = task.reset()
    if policy is None:
        t0 = time.perf_counter()
        for a in actions:
            st = task.step(a)
            done = st.terminated | st.truncated
            if bool(done.any()):
                task.reset(done)
        return (time.perf_counter() - t0) / len(actions)
    spent = 0.0
    for _ in actions:
        a = policy(task, obs)
        t0 = time.perf_counter()
        st = task.step(a)
        obs = st.obs
        done = st.terminated | st.truncated
        if bool(done.any()):
            obs = task.reset(done)
        spent += time.perf_counter() - t0
    return spent / len(actions)


def _checkpoint_actor(path: Path):
    """``act(task, obs) -> actions``: the checkpoint's deterministic policy on a velocity task's observation
    (on flat ground, with :func:`flat_ground_scan`'s scan)."""
    from simbackend.training.checkpoint import load_checkpoint

    ckpt = load_checkpoint(path)
    policy, size = ckpt.policy(), int(ckpt.data["observation_size"])
    return lambda task, obs: policy(flat_ground_scan(task, task.flatten(obs), size))


def flat_ground_scan(task, flat, size: int):
    """``flat`` (a velocity task's flat observation) widened to ``size`` columns by the height scan of flat
    ground: at every point the base's height less its default height, clipped, which is what the task's scan
    reads over level ground at z = 0. A task on flat ground has no scan term; a policy trained with one reads
    this there."""
    import torch

    from simbackend.tasks.velocity import SCAN_CLIP

    missing = size - flat.shape[1]
    if missing <= 0:
        return flat
    z = task.backend.get_base_pos()[:, 2:3] - float(task.robot.default_qpos[2])
    return torch.cat([flat, z.clamp(-SCAN_CLIP, SCAN_CLIP).expand(-1, missing)], dim=1)


def part_overhead(args: argparse.Namespace) -> int:
    """On each of ``--sims`` (default MuJoCo alone): the velocity task's step on flat ground, on the terrain
    built of pieces and on it built as height fields, interleaved. Random actions; with ``--checkpoint``, that
    policy's actions (``overhead_policy_by_sim``: what a step costs a robot that walks, as in training, where
    random actions leave most robots lying on the ground)."""
    import torch

    from simbackend.tasks import make_task

    torch.set_num_threads(1)  # as training runs (TrainConfig.torch_threads)
    n, steps = args.num_envs, args.steps
    g = torch.Generator().manual_seed(0)
    actions = [torch.rand((n, 12), generator=g) * 0.6 - 0.3 for _ in range(steps)]
    policy = _checkpoint_actor(args.checkpoint) if args.checkpoint else None
    hfield = task_config()
    hfield["terrain"] = {**hfield["terrain"], "build": "height_field"}
    sims = args.sims if args.sims_given else ["mujoco"]
    data = _load(args.results)
    for sim_name in sims:
        opts = BACKEND_OPTIONS.get(sim_name, {})
        configs = {"flat": {"robot": "go1"}, "terrain": task_config(), "terrain_height_field": hfield}
        tasks = {k: make_task("velocity", sim_name, n, config=c, seed=0, **opts) for k, c in configs.items()}
        if sim_name == "mujoco":  # flat ground on a persistent batch too, what the terrain of pieces runs on
            flat = make_task("velocity", sim_name, n, config={"robot": "go1"}, seed=0, mujoco={"persistent": True})
            tasks["flat_persistent"] = flat
        best = {k: float("inf") for k in tasks}
        try:
            for task in tasks.values():
                for a in actions[:3]:
                    task.step(a)
            for _ in range(args.repeats):  # interleaved, so that a load on the machine meets both alike
                for label, task in tasks.items():
                    best[label] = min(best[label], _seconds_per_step(task, actions, policy))
        finally:
            for task in tasks.values():
                task.close()
        out = {k: v * 1e3 for k, v in best.items()}
        for label, ms in out.items():
            print(f"[terrain] {sim_name} {label}: {ms:.1f} ms per policy step at N={n}", file=sys.stderr, flush=True)
        row = {
            "num_envs": n,
            "steps": steps,
            "repeats": args.repeats,
            "flat_ms": out["flat"],
            "terrain_ms": out["terrain"],
            "terrain_height_field_ms": out["terrain_height_field"],
            "ratio": out["terrain"] / out["flat"],
            "ratio_height_field": out["terrain_height_field"] / out["flat"],
            **(
                {
                    "flat_persistent_ms": out["flat_persistent"],
                    "ratio_persistent": out["terrain"] / out["flat_persistent"],
                }
                if "flat_persistent" in out
                else {}
            ),
            "load_average": os.getloadavg()[0],
            "note": "the velocity task's whole step on Go1 (physics, observations with the height scan on the"
            f" terrain, reward), {'the actions of ' + str(args.checkpoint) if policy else 'random actions'},"
            " the best of the repeats, flat ground, the terrain built of pieces"
            " and the terrain built as height fields (build height_field) interleaved; on MuJoCo, the terrain of"
            " pieces runs a persistent batch (mujoco.persistent, by default for 100+ static geoms), and"
            " flat_persistent_ms is flat ground on one too",
        }
        if policy is not None:
            data.setdefault("overhead_policy_by_sim", {})[sim_name] = row
        else:
            if sim_name == "mujoco":
                data["overhead"] = row
            data.setdefault("overhead_by_sim", {})[sim_name] = row
        print(f"{sim_name}: terrain / flat: {row['ratio']:.2f}; as height fields: {row['ratio_height_field']:.2f}")
        if "ratio_persistent" in row:
            print(f"{sim_name}: terrain / flat, both on a persistent batch: {row['ratio_persistent']:.2f}")
    _save(data, args.results)
    return 0


def _drop_points(terrain, count: int, seed: int):
    """``count`` random ``(x, y)`` over the tiles (uniform), and the highest ground under a box there."""
    import numpy as np

    rng = np.random.default_rng(seed)
    x0, x1, y0, y1 = terrain.extent
    xy = rng.uniform([x0 + BOX, y0 + BOX], [x1 - BOX, y1 - BOX], (count, 2))
    g = np.linspace(-BOX * 1.5, BOX * 1.5, 31)  # the box's footprint, turned any way, and a margin
    ox, oy = (a.ravel() for a in np.meshgrid(g, g))
    top = terrain.height_at(xy[:, :1] + ox, xy[:, 1:] + oy).max(axis=1)
    return xy, top


def rest_model(terrain, folder: Path, cone: str = "pyramidal") -> Path:
    """An MJCF file: the terrain and one free box (:data:`BOX`), composed as the conformance suite does, with
    MuJoCo's friction ``cone`` and the ``impratio`` a robot description takes with it (pyramidal: MuJoCo's
    defaults; elliptic: every robot scene's, :data:`~simbackend.robots.description.DEFAULT_IMPRATIO`)."""
    from simbackend.models import export_mjcf
    from simbackend.models.compiler import prepared_spec
    from simbackend.robots.description import DEFAULT_IMPRATIO
    from simbackend.terrains import add_terrain

    bodies = folder / "bodies.xml"
    bodies.write_text(
        f'<mujoco><option timestep="0.004" cone="{cone}" impratio="{DEFAULT_IMPRATIO[cone]}"/>'
        '<worldbody><body name="crate" pos="0 0 2"><freejoint/>'
        f'<geom name="crate" type="box" size="{BOX} {BOX} {BOX}" mass="1" friction="1 0.005 0.0001"/>'
        "</body></worldbody></mujoco>"
    )
    spec, _, _ = prepared_spec(str(bodies), None, None, None)
    add_terrain(spec, terrain)
    (folder / "model").mkdir(exist_ok=True)
    return Path(export_mjcf(spec, folder / "model")[1])


def part_rest(args: argparse.Namespace) -> int:
    """Boxes let go over random points, one an env, on every engine; rest height and place against MuJoCo's."""
    import tempfile

    import numpy as np

    from simbackend import make_backend
    from simbackend.terrains import TerrainConfig, generate_terrain

    cfg = TerrainConfig.load(args.terrain or REST_TERRAIN).to_dict()
    terrain = generate_terrain({**cfg, "build": args.build or cfg["build"]})
    xy, top = _drop_points(terrain, args.drops, args.seed)
    _, col = terrain.locate(xy[:, 0], xy[:, 1])
    kinds = [terrain.types[c] for c in col]
    out: dict = {
        "terrain": terrain.config.to_dict(),
        "drops": args.drops,
        "settle_s": SETTLE_S,
        "cone": args.cone,
        "sims": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = rest_model(terrain, Path(tmp), args.cone)
        for sim_name in args.sims:
            t0 = time.perf_counter()
            sim = make_backend(sim_name, path, len(xy), **BACKEND_OPTIONS.get(sim_name, {}))
            q = sim.get_joint_qpos_indices(sim.joint_names[0]).tolist()
            qpos = np.tile(np.asarray(sim.get_qpos())[0], (len(xy), 1))
            qpos[:, q[:3]] = np.column_stack([xy, top + BOX + DROP])
            qpos[:, q[3:7]] = [1.0, 0.0, 0.0, 0.0]
            sim.set_state(None, qpos)
            sim.step(None, nsteps=int(round(SETTLE_S / sim.info.timestep)))
            pos = np.asarray(sim.get_body_pos_w(sim.get_body_ids(["crate"])))[:, 0]
            speed = np.linalg.norm(np.asarray(sim.get_body_lin_vel_w(sim.get_body_ids(["crate"])))[:, 0], axis=-1)
            sim.close()
            out["sims"][sim_name] = {"pos": pos.tolist(), "speed": speed.tolist(), "wall_s": time.perf_counter() - t0}
    ref = np.array(out["sims"]["mujoco"]["pos"]) if "mujoco" in out["sims"] else None
    types = list(dict.fromkeys(terrain.types))
    rows = {}
    for sim_name, r in out["sims"].items():
        pos = np.array(r["pos"])
        if ref is None or sim_name == "mujoco":
            continue
        dz = pos[:, 2] - ref[:, 2]
        dxy = np.linalg.norm(pos[:, :2] - ref[:, :2], axis=-1)
        # the height above the ground where each came to rest: a box that tipped a little further down a
        # slope rests as high above it, lower in z
        clear = (pos[:, 2] - terrain.height_at(pos[:, 0], pos[:, 1])) - (
            ref[:, 2] - terrain.height_at(ref[:, 0], ref[:, 1])
        )
        ok = np.abs(dz) <= REST_TOL
        rows[sim_name] = {
            "within": int(ok.sum()),
            "within_clearance": int((np.abs(clear) <= REST_TOL).sum()),
            "drops": len(ok),
            "by_type": {
                k: [int(ok[[i for i, kk in enumerate(kinds) if kk == k]].sum()), kinds.count(k)] for k in types
            },
            "dz_mm": [float(np.abs(dz).max() * 1e3), float(np.median(np.abs(dz)) * 1e3)],
            "dxy_mm_max": float(dxy.max() * 1e3),
        }
        print(
            f"[rest] {sim_name}: {ok.sum()} of {len(ok)} within {REST_TOL * 1e3:g} mm of MuJoCo; |dz| max"
            f" {np.abs(dz).max() * 1e3:.2f} mm, median {np.median(np.abs(dz)) * 1e3:.3f} mm; off: "
            + ", ".join(
                f"{kinds[i]} ({dz[i] * 1e3:+.1f} mm in z, {clear[i] * 1e3:+.1f} mm above the ground, {dxy[i] * 1e3:.0f} mm"
                " apart)"
                for i in np.flatnonzero(~ok)
            ),
            file=sys.stderr,
            flush=True,
        )
    out["kinds"] = kinds
    out["agreement"] = rows
    _save(out, args.rest_results)
    print(rest_table(out))
    return 0


def rest_table(data: dict) -> str:
    """docs/terrains.md's rest table: per engine, drops whose rest height is within :data:`REST_TOL` of
    MuJoCo's, per type; then those whose height above the ground where they rest is."""
    rows = data.get("agreement", {})
    if not rows:
        return "(no rest results)"
    types = list(next(iter(rows.values()))["by_type"])
    lines = [
        "| engine | rest height within 3 mm | "
        + " | ".join(types)
        + " | largest gap | height above the ground within 3 mm | misses where MuJoCo's box still slides |",
        "|" + "---|" * (len(types) + 5),
    ]
    for sim_name, r in rows.items():
        cells = [f"{a}/{b}" for a, b in r["by_type"].values()]
        lines.append(
            f"| {sim_name} | {r['within']}/{r['drops']} | "
            + " | ".join(cells)
            + f" | {r['dz_mm'][0]:.1f} mm | {r.get('within_clearance', '-')}/{r['drops']} |"
            + f" {_sliding_misses(data, sim_name)} |"
        )
    return "\n".join(lines)


def _sliding_misses(data: dict, sim_name: str) -> str:
    """``k/m``: of the ``m`` drops whose rest height on ``sim_name`` parts from MuJoCo's by more than
    :data:`REST_TOL`, the ``k`` where MuJoCo's own box was still moving faster than :data:`STILL`."""
    import numpy as np

    sims = data.get("sims", {})
    if "speed" not in sims.get("mujoco", {}) or sim_name not in sims:
        return "-"
    ref, pos = np.array(sims["mujoco"]["pos"]), np.array(sims[sim_name]["pos"])
    missed = np.abs(pos[:, 2] - ref[:, 2]) > REST_TOL
    sliding = np.array(sims["mujoco"]["speed"]) > STILL
    return f"{int((missed & sliding).sum())}/{int(missed.sum())}"


def part_cost(args: argparse.Namespace) -> int:
    """The velocity task's step on MuJoCo at ``--num-envs``: flat ground, then a terrain of each type alone
    (its 5 levels of ``terrains/rough.json``), built of pieces and as height fields, interleaved; and what
    the model holds (geoms). Random actions; with ``--checkpoint``, that policy's (``policy_actions``)."""
    import torch

    from simbackend.tasks import make_task

    torch.set_num_threads(1)
    n, steps = args.num_envs, args.steps
    g = torch.Generator().manual_seed(0)
    actions = [torch.rand((n, 12), generator=g) * 0.6 - 0.3 for _ in range(steps)]
    policy = _checkpoint_actor(args.checkpoint) if args.checkpoint else None
    base = task_config()
    configs = {"flat": {"robot": "go1"}}
    for kind in args.types or base["terrain"]["types"]:
        for build in ("pieces", "height_field"):
            configs[f"{kind}/{build}"] = {**base, "terrain": {**base["terrain"], "types": [kind], "build": build}}
    best = {k: float("inf") for k in configs}
    geoms = {}
    # one task at a time (17 tasks of 256 envs would not share the memory well); flat ground first and last,
    # its best of both, so that a passing load at the start does not set every ratio
    for label, cfg in [*configs.items(), ("flat", configs["flat"])]:
        task = make_task("velocity", "mujoco", n, config=cfg, seed=0)
        try:
            geoms[label] = len(task.backend.geom_names)
            for a in actions[:5]:
                task.step(a)
            for _ in range(args.repeats):
                best[label] = min(best[label], _seconds_per_step(task, actions, policy))
        finally:
            task.close()
        print(f"[cost] {label}: {best[label] * 1e3:.1f} ms, {geoms[label]} geoms", file=sys.stderr, flush=True)
    flat = best["flat"]
    out = {
        "num_envs": n,
        "steps": steps,
        "repeats": args.repeats,
        "load_average": os.getloadavg()[0],
        "flat_ms": flat * 1e3,
        "types": {k: {"ms": v * 1e3, "ratio": v / flat, "geoms": geoms[k]} for k, v in best.items() if k != "flat"},
        "note": "the velocity task's whole step on Go1 at N envs,"
        f" {'the actions of ' + str(args.checkpoint) if policy else 'random actions'}, the best of the repeats;"
        " each terrain holds one type's 5 levels of rough.json",
    }
    data = _load(args.cost_results)
    if policy is not None:
        data["policy_actions"] = out
    else:
        data.update(out)
    _save(data, args.cost_results)
    print(cost_table(data))
    return 0


def cost_table(data: dict) -> str:
    """docs/terrains.md's cost table: per type, the step against flat ground's, built of pieces and as height
    fields."""
    kinds = list(dict.fromkeys(k.split("/")[0] for k in data["types"]))
    walking = data.get("policy_actions", {}).get("types", {})
    lines = [
        "| type | geoms in the scene (pieces) | pieces: step / flat | height field: step / flat |"
        + (" pieces, a policy walking: step / flat | height field, a policy walking: step / flat |" if walking else ""),
        "|---|---|---|---|" + ("---|---|" if walking else ""),
    ]
    for k in kinds:
        p, h = data["types"][f"{k}/pieces"], data["types"][f"{k}/height_field"]
        row = f"| {k} | {p['geoms']} | {p['ratio']:.2f} | {h['ratio']:.2f} |"
        if walking:
            row += "".join(
                f" {walking[key]['ratio']:.2f} |" if key in walking else " - |"
                for key in (f"{k}/pieces", f"{k}/height_field")
            )
        lines.append(row)
    return "\n".join(lines)


#: docs/terrains.md's blocks this script writes (``--part docs``): marker name -> how the block is made
DOCS = HERE.parent / "docs" / "terrains.md"


def _block(name: str) -> tuple[str, str]:
    return f"<!-- {name}: written by benchmarks/terrain.py --part docs -->", f"<!-- end of {name} -->"


def docs_blocks() -> dict[str, str]:
    """The generated blocks of docs/terrains.md, from the results files."""
    blocks = {}
    if REST_RESULTS.is_file():
        blocks["rest table"] = rest_table(_load(REST_RESULTS))
    hfield = REST_RESULTS.with_name("terrain_rest_height_field.json")
    if hfield.is_file():
        blocks["rest table, height fields"] = rest_table(_load(hfield))
    for suffix, name in (("elliptic", "elliptic cone"), ("height_field_elliptic", "height fields, elliptic cone")):
        path = REST_RESULTS.with_name(f"terrain_rest_{suffix}.json")
        if path.is_file():
            blocks[f"rest table, {name}"] = rest_table(_load(path))
    if COST_RESULTS.is_file() and "types" in _load(COST_RESULTS):
        blocks["cost table"] = cost_table(_load(COST_RESULTS))
    if COST_RESULTS.is_file() and "profile" in _load(COST_RESULTS):
        blocks["profile table"] = profile_table(_load(COST_RESULTS))
    if COST_RESULTS.is_file() and "profile_walking" in _load(COST_RESULTS):
        blocks["profile table, a policy walking"] = profile_walking_table(_load(COST_RESULTS))
    if RESULTS.is_file() and _load().get("overhead_by_sim"):
        blocks["overhead table"] = overhead_table(_load())
    if RESULTS.is_file() and _load().get("overhead_policy_by_sim"):
        blocks["overhead table, policy actions"] = overhead_table(_load(), "overhead_policy_by_sim")
    if RESULTS.is_file() and _load().get("runs"):
        blocks["policy table"] = table(_load())
    if RESULTS.is_file() and _load().get("per_level"):
        blocks["levels table"] = levels_table(_load())
    return blocks


def levels_table(data: dict) -> str:
    """docs/terrains.md's table of success per level, per engine: the policies' range (one: its value)."""
    per = data.get("per_level", {})
    levels = sorted({int(k) for p in per.values() for k in p["levels"]})
    lines = ["| engine | " + " | ".join(f"level {lv}" for lv in levels) + " |", "|" + "---|" * (len(levels) + 1)]
    for sim, p in per.items():
        cells = []
        for lv in levels:
            vals = sorted(r["success"] for r in p["levels"].get(str(lv), {}).values())
            cells.append("-" if not vals else f"{vals[0]:.2f}" if len(vals) == 1 else f"{vals[0]:.2f}-{vals[-1]:.2f}")
        lines.append(f"| {sim} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def overhead_table(data: dict, key: str = "overhead_by_sim") -> str:
    """docs/terrains.md's table of the default terrain's step against flat ground's, per engine (``key``:
    random actions, or ``overhead_policy_by_sim``: a policy's)."""
    lines = [
        "| engine | envs | flat ground | terrain of pieces | terrain of height fields | flat ground, persistent batch |",
        "|---|---|---|---|---|---|",
    ]
    for sim, r in data.get(key, {}).items():
        persistent = (
            f"{r['flat_persistent_ms']:.1f} ms (pieces: {r['ratio_persistent']:.2f} x)"
            if "ratio_persistent" in r
            else "-"
        )
        lines.append(
            f"| {sim} | {r['num_envs']} | {r['flat_ms']:.1f} ms | {r['terrain_ms']:.1f} ms ({r['ratio']:.2f} x) |"
            f" {r['terrain_height_field_ms']:.1f} ms ({r['ratio_height_field']:.2f} x) | {persistent} |"
        )
    return "\n".join(lines)


def part_docs(args: argparse.Namespace) -> int:
    """Rewrite docs/terrains.md's generated blocks from the results files (each between its markers)."""
    text = DOCS.read_text()
    for name, body in docs_blocks().items():
        begin, end = _block(name)
        if begin not in text or end not in text:
            print(f"docs/terrains.md has no block {name!r} ({begin})", file=sys.stderr)
            return 1
        head, rest = text.split(begin, 1)
        text = head + begin + "\n" + body + "\n" + end + rest.split(end, 1)[1]
    DOCS.write_text(text)
    print(DOCS)
    return 0


def part_profile(args: argparse.Namespace) -> int:
    """Where MuJoCo's step goes (its own timers, one env): Go1 started on each tile of ``terrains/rough.json``
    in turn and driven by random joint targets around its default pose, on flat ground, on the terrain built
    of pieces and on it built as height fields. Adds ``profile`` to ``results/terrain_cost.json``. With
    ``--checkpoint``, :func:`_profile_walking` instead."""
    if args.checkpoint:
        return _profile_walking(args)
    import mujoco
    import numpy as np

    from simbackend.robots import robot_scene
    from simbackend.terrains import generate_terrain

    timers = {
        "kinematics": mujoco.mjtTimer.mjTIMER_POS_KINEMATICS,
        "broad_phase": mujoco.mjtTimer.mjTIMER_COL_BROAD,
        "mid_and_narrow_phase": mujoco.mjtTimer.mjTIMER_COL_NARROW,
        "constraint": mujoco.mjtTimer.mjTIMER_CONSTRAINT,
    }
    base = json.loads(TERRAIN.read_text())
    out: dict = {}
    from simbackend.backends.mujoco.engine import persistent_batch

    builds = (("flat", None), ("pieces", "pieces"), ("pieces_sleeping", "pieces"), ("height_field", "height_field"))
    for label, build in builds:
        cfg = None if build is None else {**base, "build": build}
        scene = robot_scene("go1", terrain=cfg)
        m = mujoco.MjModel.from_xml_path(str(scene.path))
        if label.endswith("sleeping"):  # as the MuJoCo engine's persistent batch runs it: no tree ever sleeps
            persistent_batch(m, True)
        d = mujoco.MjData(m)
        terrain = None if cfg is None else generate_terrain(cfg)
        rng = np.random.default_rng(0)
        steps = args.steps * 2
        sums = dict.fromkeys([*timers, "step", "contacts"], 0.0)
        tiles = [(lv, c) for lv in range(base.get("levels", 5)) for c in range(len(base["types"]))]
        for lv, c in tiles:
            d.qpos[:] = scene.default_qpos
            d.qvel[:] = 0.0
            if terrain is not None:
                d.qpos[:3] += terrain.origins[lv, c]
            d.ctrl[:] = scene.default_qpos[7:]
            for _ in range(20):
                mujoco.mj_step(m, d)
            for t in d.timer:
                t.duration, t.number = 0.0, 0
            t0 = time.perf_counter()
            for i in range(steps):
                if i % 4 == 0:
                    d.ctrl[:] = scene.default_qpos[7:] + rng.uniform(-0.3, 0.3, len(d.ctrl))
                mujoco.mj_step(m, d)
                sums["contacts"] += d.ncon
            sums["step"] += (time.perf_counter() - t0) / steps
            for k, t in timers.items():
                sums[k] += d.timer[t].duration / steps
        out[label] = {
            "geoms": int(m.ngeom),
            **{k: v / len(tiles) * (1e6 if k != "contacts" else 1.0 / steps) for k, v in sums.items()},
        }
        print(f"[profile] {label}: " + ", ".join(f"{k} {v:.1f}" for k, v in out[label].items()), file=sys.stderr)
    data = _load(args.cost_results)
    data["profile"] = {
        **out,
        "note": "microseconds per MuJoCo step of one env (contacts: mean count), Go1 on each tile in turn,"
        " random joint targets; MuJoCo's timers",
    }
    _save(data, args.cost_results)
    print(profile_table(data))
    return 0


#: MuJoCo's timers the profiles read: (column, timer name)
PROFILE_TIMERS = (
    ("kinematics", "mjTIMER_POS_KINEMATICS"),
    ("broad_phase", "mjTIMER_COL_BROAD"),
    ("mid_and_narrow_phase", "mjTIMER_COL_NARROW"),
    ("constraint", "mjTIMER_CONSTRAINT"),
)


def _profile_walking(args: argparse.Namespace) -> int:
    """Where MuJoCo's step goes while ``--checkpoint``'s policy walks: the velocity task at ``--num-envs`` on a
    persistent batch (flat ground too, so that every env's ``MjData`` and its timers can be read), for 50 +
    ``--steps`` steps; MuJoCo's timers of every eighth env over the last ``--steps``, per physics step.
    Flat ground, each type alone (its 5 levels of ``terrains/rough.json``, pieces) and the default terrain.
    Adds ``profile_walking`` to ``results/terrain_cost.json``."""
    import mujoco
    import torch

    from simbackend.tasks import make_task

    torch.set_num_threads(1)
    act = _checkpoint_actor(args.checkpoint)
    base = task_config()
    configs = {"flat ground": {"robot": "go1"}}
    for kind in args.types or base["terrain"]["types"]:
        configs[kind] = {**base, "terrain": {**base["terrain"], "types": [kind]}}
    configs["all types"] = base
    timers = {k: getattr(mujoco.mjtTimer, name) for k, name in PROFILE_TIMERS}
    step_timer = mujoco.mjtTimer.mjTIMER_STEP
    out: dict = {}
    for label, cfg in configs.items():
        task = make_task("velocity", "mujoco", args.num_envs, config=cfg, seed=0, mujoco={"persistent": True})
        try:
            batch, sample = task.backend.engine.batch, range(0, args.num_envs, 8)
            obs = task.reset()
            for i in range(50 + args.steps):
                if i == 50:
                    start = [batch.get_data(k) for k in sample]
                st = task.step(act(task, obs))
                obs = st.obs
                done = st.terminated | st.truncated
                if bool(done.any()):
                    obs = task.reset(done)
            end = [batch.get_data(k) for k in sample]
            steps = sum(e.timer[step_timer].number - s.timer[step_timer].number for s, e in zip(start, end))
            row = {"geoms": len(task.backend.geom_names)}
            for k, t in {**timers, "step": step_timer}.items():
                row[k] = sum(e.timer[t].duration - s.timer[t].duration for s, e in zip(start, end)) / steps * 1e6
        finally:
            task.close()
        out[label] = row
        print(f"[profile] {label}: " + ", ".join(f"{k} {v:.1f}" for k, v in row.items()), file=sys.stderr)
    data = _load(args.cost_results)
    data["profile_walking"] = {
        **out,
        "note": f"microseconds per MuJoCo step of one env, the velocity task at {args.num_envs} envs on a"
        f" persistent batch driven by {args.checkpoint}; MuJoCo's timers of every eighth env over {args.steps}"
        " steps after 50",
    }
    _save(data, args.cost_results)
    print(profile_walking_table(data))
    return 0


def profile_walking_table(data: dict) -> str:
    """docs/terrains.md's table of where MuJoCo's step goes while a policy walks, per ground."""
    p = data.get("profile_walking", {})
    cols = ("geoms", "step", *(k for k, _ in PROFILE_TIMERS))
    lines = [
        "| ground | geoms | step (µs) | kinematics | broad phase | mid and narrow phase | constraints |",
        "|" + "---|" * (len(cols) + 1),
    ]
    for label, r in p.items():
        if isinstance(r, dict):
            lines.append(
                f"| {label.replace('_', ' ')} | {r['geoms']} | " + " | ".join(f"{r[k]:.1f}" for k in cols[1:]) + " |"
            )
    return "\n".join(lines)


def profile_table(data: dict) -> str:
    """docs/terrains.md's table of where MuJoCo's step goes."""
    p = data.get("profile", {})
    cols = ("geoms", "step", "kinematics", "broad_phase", "mid_and_narrow_phase", "constraint", "contacts")
    head = "| ground | geoms | step (µs) | kinematics | broad phase | mid and narrow phase | constraints | contacts |"
    lines = [head, "|" + "---|" * len(cols) + "---|"]
    for label in ("flat", "pieces", "pieces_sleeping", "height_field"):
        if label in p:
            r = p[label]
            lines.append(
                f"| {label.replace('_', ' ')} | {r['geoms']} | " + " | ".join(f"{r[k]:.1f}" for k in cols[1:]) + " |"
            )
    return "\n".join(lines)


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
    p.add_argument(
        "--part",
        choices=("train", "eval", "levels", "overhead", "rest", "cost", "profile", "docs", "picture", "table"),
        required=True,
    )
    p.add_argument("--seed", type=int, default=0, help="train: the training seed")
    p.add_argument("--iterations", type=int, default=800, help="train: PPO iterations")
    p.add_argument("--time-budget", type=float, default=None, help="train: seconds at most (default: none)")
    p.add_argument("--resume", type=Path, default=None, help="train: go on from this runs folder's run of the seed")
    p.add_argument("--runs", type=Path, default=Path("/tmp/terrain_runs"))
    p.add_argument("--sims", nargs="+", default=["mujoco", "sapien", "mjwarp", "motrix"])
    p.add_argument("--seeds", nargs="+", type=int, default=[100, 101, 102], help="eval: evaluation seeds")
    p.add_argument("--again", action="store_true", help="eval: evaluate again where a result exists")
    p.add_argument("--results", type=Path, default=RESULTS, help="eval, levels, overhead: the results file to write")
    p.add_argument("--merge", nargs="*", type=Path, default=[], help="eval: results files whose evaluations to add")
    p.add_argument("--num-envs", type=int, default=256)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--terrain", type=Path, default=None, help="rest: a terrain config (default terrains/rest.json)")
    p.add_argument("--types", nargs="*", default=None, help="cost: the terrain types (default: rough.json's)")
    p.add_argument("--drops", type=int, default=48, help="rest: boxes let go (one an env)")
    p.add_argument("--build", choices=("pieces", "height_field"), help="rest: build the terrain so (default: its own)")
    p.add_argument(
        "--cone",
        choices=("pyramidal", "elliptic"),
        default="pyramidal",
        help="rest: MuJoCo's friction cone in the scene (pyramidal: MuJoCo's defaults; elliptic: the robot scenes')",
    )
    p.add_argument("--rest-results", type=Path, default=REST_RESULTS, help="rest: the results file to write")
    p.add_argument("--cost-results", type=Path, default=COST_RESULTS, help="cost, profile: the results file to write")
    p.add_argument("--robot", default=TASK["robot"], help="train, eval, levels: a robot name or description file")
    p.add_argument("--plan", type=Path, default=PLAN, help="train: the randomization plan")
    p.add_argument(
        "--reward",
        nargs="*",
        default=[],
        help="train: TERM=WEIGHT reward weights over the task's (e.g. feet_air_time=0.5)",
    )
    p.add_argument("--checkpoint", type=Path, help="picture: the policy; overhead: the policy acting (not random)")
    p.add_argument("--tiles", nargs="+", default=["stairs_up:2", "rough:4"], help="picture: TYPE:LEVEL each")
    p.add_argument("--frames", type=int, default=2, help="picture: stills per tile")
    p.add_argument("--picture", type=Path, default=HERE.parent / "docs" / "images" / "go1_terrain_engines.png")
    args = p.parse_args(argv)
    args.sims_given = "--sims" in (argv if argv is not None else sys.argv[1:])
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
    if args.part == "rest":
        return part_rest(args)
    if args.part == "cost":
        return part_cost(args)
    if args.part == "docs":
        return part_docs(args)
    if args.part == "profile":
        return part_profile(args)
    print(table(_load()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
