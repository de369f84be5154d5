#!/usr/bin/env python
"""Task benchmark: what tasks, controllers and the vectorized interfaces cost over the bare backend.

Interleaved rounds and medians like the other scripts (``_common.py``); nothing
is asserted, the figures are compared with their targets in the report.

Sections (``--only NAME`` runs one):

* ``overhead``  env-steps/s of ``cartpole`` and ``quadruped`` on MuJoCo, N = 1024
                (``--quick``: 256), three variants on the same actions:
                - ``bare``: what a hand-written loop needs: ``backend.step`` with
                  the task's decimation (for the quadruped, with a minimal PD law
                  as pre-step control, the physics the task asks for) and the
                  getters the task's observations, rewards and terminations read;
                - ``task``: ``Task.step`` and a ``Task.reset`` of the envs that ended;
                - ``vector``: ``SimVectorEnv.step`` (gymnasium, torch tensors, next-step
                  autoreset).
                Figure: vector / bare >= 0.8 per task.
* ``friction_cone`` env-steps/s of the velocity task on Go1 (``Task.step`` on the same
                actions, N = 256) under the robot scenes' default contact model (MuJoCo's
                elliptic friction cone at impratio 10, contacts at two substeps), against
                the same cone at MuJoCo's 0.02 s contacts (``robot.contact_timeconst``
                ``"model"``) and against MuJoCo's own defaults (pyramidal cone at impratio 1,
                0.02 s: ``robot.friction_cone`` ``"pyramidal"``).
                Figures: default / MuJoCo's defaults time, what the default costs (<= 1.3);
                default / 0.02 s contacts time, what the stiff contacts cost.
* ``mixed``     the velocity task on Go1 at N = 256 (``Task.step`` on the same actions, the
                collection's work; PPO's update does not depend on the engine) on each engine
                alone and on mixes of them at the same N (``mujoco,motrix``, ``mujoco,sapien``,
                ``mujoco,sapien,motrix``: equal shares, the engines stepped side by side in
                threads). Figure per mix: its step time / the slowest of its engines alone
                (<= 1.2, issue 52).
* ``training``  env-steps/s of PPO training (rsl-rl, collection and update) on
                ``cartpole`` for each backend, a few iterations after a warm-up one.

Usage::

    python benchmarks/bench_tasks.py            # about 2 minutes on 2 cores
    python benchmarks/bench_tasks.py --quick    # smoke check
    python benchmarks/bench_tasks.py --only overhead --out /tmp/tasks.json
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if not os.environ.get("MUJOCO_GL"):
    os.environ["MUJOCO_GL"] = "egl"

import _common
from _common import BaseSettings, interleaved, variant

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "tasks.json"


class Settings(BaseSettings):
    def __init__(self, quick: bool):
        super().__init__(quick)
        self.rounds = 3 if quick else 7
        self.num_envs = 256 if quick else 1024
        self.train_iterations = 2 if quick else 4
        self.train_envs = {"mujoco": 64 if quick else 256, "sapien": 32 if quick else 128}


def quadruped_pd(task: Any, actions: list) -> tuple[Callable[[int], None], Callable[[Any, Any], Any]]:
    """The quadruped task's PD law applied by hand, the least work giving the physics the task asks for.

    Returns ``select(i)``, which takes the joint targets of ``actions[i % len(actions)]``, and
    ``pd(sim, ctrl)``, a pre-step control function: the motors' ctrl at the current state, with the
    gains, joints and ctrl ranges of the task's controller.
    """
    import torch

    c = task.controller
    qcols, vcols, kp, kd, scale = c._qpos_cols, c._qvel_cols, c.kp, c.kd, c._scale
    lo, hi = c._ctrl_low, c._ctrl_high
    stand = task.robot.default_joints
    target = [stand + task.action_scale * a for a in actions]  # the per-joint scale the task derived
    state = {"target": target[0]}

    def select(i: int) -> None:
        state["target"] = target[i % len(target)]

    def pd(sim: Any, ctrl: torch.Tensor) -> torch.Tensor:
        torque = kp * (state["target"] - sim.get_qpos()[:, qcols]) - kd * sim.get_qvel()[:, vcols]
        return torch.clamp(torque / scale, lo, hi)

    return select, pd


def _bare(task: Any, actions: list) -> Callable[[int], None]:
    """The bare loop of ``task``'s physics and reads, on its backend, without the task."""
    import torch

    b = task.backend
    k = task.config.decimation
    if task.name == "quadruped":
        select, pd = quadruped_pd(task, actions)  # the task's PD law, applied by hand

        def call(i: int) -> None:
            select(i)
            b.set_pre_step_control(pd)
            b.step(torch.zeros(b.num_envs, b.num_actuators), nsteps=k)
            b.set_pre_step_control(None)
            b.get_base_pos(), b.get_base_quat(), b.get_base_lin_vel(), b.get_base_ang_vel()
            b.get_dof_pos(), b.get_dof_vel()
            r = task.robot  # what the velocity task reads besides: IMU frame, feet and body contacts, feet speed
            if r.imu_site is not None:
                b.get_site_quat_w(r.imu_site)
            b.get_body_contact_force_w(r.feet), b.get_body_contact_force_w(r.termination)
            b.get_body_lin_vel_w(r.feet)

        return call
    ctrls = [task.action_to_ctrl(a) for a in actions]

    def call(i: int) -> None:
        b.step(ctrls[i % len(ctrls)], nsteps=k)
        b.get_dof_pos(), b.get_dof_vel()

    return call


def bench_overhead(s: Settings) -> dict:
    import torch

    from simbackend.envs import SimVectorEnv
    from simbackend.tasks import make_task

    n = s.num_envs
    cases, figures = {}, []
    for name in ("cartpole", "quadruped"):
        bare_task = make_task(name, "mujoco", n, seed=0)
        task = make_task(name, "mujoco", n, seed=0)
        env = SimVectorEnv(make_task(name, "mujoco", n, seed=0))
        env.reset(seed=0)
        gen = torch.Generator().manual_seed(0)
        actions = [torch.rand((n, task.action_dim), generator=gen) * 2 - 1 for _ in range(8)]
        if bare_task.controller is not None:
            bare_task.controller.detach()

        def task_call(i: int, task: Any = task) -> None:
            out = task.step(actions[i % len(actions)])
            done = out.terminated | out.truncated
            if bool(done.any()):
                task.reset(done)

        def vector_call(i: int, env: Any = env) -> None:
            env.step(actions[i % len(actions)])

        calls = {"bare": _bare(bare_task, actions), "task": task_call, "vector": vector_call}
        samples, iters = interleaved(calls, s)
        for t in (bare_task, task):
            t.close()
        env.close()
        ratio = _common.paired_ratio(samples["bare"], samples["vector"])  # time bare / time vector = rate ratio
        ratio_task = _common.paired_ratio(samples["bare"], samples["task"])
        cases[name] = {
            "num_envs": n,
            "variants": {
                "bare": variant(samples["bare"], n, "env-steps/s", iters, "backend.step + the getters the task reads"),
                "task": variant(samples["task"], n, "env-steps/s", iters, "Task.step + reset of ended envs"),
                "vector": variant(samples["vector"], n, "env-steps/s", iters, "SimVectorEnv.step (torch)"),
            },
            "rate_ratio_vector_vs_bare": ratio,
            "rate_ratio_task_vs_bare": ratio_task,
        }
        figures.append(
            _common.figure(
                f"{name}: vector env vs bare backend, MuJoCo, N = {n}",
                ratio["median"],
                0.8,
                ">=",
                "x",
                (ratio["min"], ratio["max"]),
            )
        )
    return {"cases": cases, "figures": figures}


#: the contact models ``friction_cone`` times: name -> the description fields that make it
CONTACT_MODELS = {
    "default": {},
    "elliptic_0.02s": {"contact_timeconst": "model"},
    "pyramidal_0.02s": {"friction_cone": "pyramidal", "impratio": None, "contact_timeconst": "model"},
}


def _timed_task_steps(tasks: dict[str, Any], s: Settings) -> tuple[dict[str, list[float]], int]:
    """``interleaved`` rounds of ``Task.step`` on every task (one action dimension, the same N), the same
    random actions on each, the envs that ended reset; the tasks are closed after."""
    import torch

    try:
        first = next(iter(tasks.values()))
        gen = torch.Generator().manual_seed(0)
        shape = (first.num_envs, first.action_dim)
        actions = [torch.rand(shape, generator=gen) * 0.6 - 0.3 for _ in range(8)]
        calls = {}
        for name, task in tasks.items():

            def call(i: int, task: Any = task) -> None:
                out = task.step(actions[i % len(actions)])
                done = out.terminated | out.truncated
                if bool(done.any()):
                    task.reset(done)

            calls[name] = call
        return interleaved(calls, s)
    finally:
        for task in tasks.values():
            task.close()


def bench_friction_cone(s: Settings) -> dict:
    import json

    from simbackend.robots import get_robot
    from simbackend.tasks import make_task

    n = 256
    tasks = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, fields in CONTACT_MODELS.items():
            desc = {**get_robot("go1").to_dict(), "name": f"go1_{name.replace('.', '')}", **fields}
            desc.pop("base_dir", None)
            path = Path(tmp) / f"{desc['name']}.json"
            path.write_text(json.dumps(desc))
            tasks[name] = make_task("velocity", "mujoco", n, config={"robot": str(path)}, seed=0)
        samples, iters = _timed_task_steps(tasks, s)
    figures, ratios = [], {}
    for other, what in (
        ("pyramidal_0.02s", "MuJoCo's defaults (pyramidal, 0.02 s)"),
        ("elliptic_0.02s", "0.02 s contacts"),
    ):
        ratio = _common.paired_ratio(samples[other], samples["default"])  # time other / time default
        ratios[f"rate_ratio_default_vs_{other}"] = ratio
        cost = {k: 1.0 / v for k, v in ratio.items() if k in ("median", "min", "max")}
        figures.append(
            _common.figure(
                f"velocity task on Go1, MuJoCo, N = {n}: step time default contact model / {what}",
                cost["median"],
                1.3,
                "<=",
                "x",
                (cost["max"], cost["min"]),
            )
        )
    return {
        "cases": {
            "go1": {
                "num_envs": n,
                "variants": {
                    c: variant(samples[c], n, "env-steps/s", iters, f"velocity Task.step, {c}") for c in samples
                },
                **ratios,
            }
        },
        "figures": figures,
    }


def bench_training(s: Settings) -> dict:
    from simbackend.training import TrainConfig, train

    runs = {}
    for sim, n in s.train_envs.items():
        cfg = TrainConfig.for_task(
            "cartpole", num_envs=n, seed=0, max_iterations=s.train_iterations + 1, eval_interval=0
        )
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            result = train("cartpole", sim, num_envs=n, seed=0, train_config=cfg, out_dir=tmp, progress=False)
            wall = time.perf_counter() - t0
        rows = result.rows[1:]  # the first iteration warms up (allocation, first calls)
        steps = len(rows) * n * cfg.num_steps_per_env
        secs = sum(r["collect_s"] + r["learn_s"] for r in rows)
        runs[sim] = {
            "num_envs": n,
            "iterations_timed": len(rows),
            "env_steps": steps,
            "seconds": secs,
            "rate": steps / secs,
            "wall_s_total": wall,
        }
    return {"runs": runs, "figures": []}


#: the mixes the ``mixed`` section times, each against its engines alone
MIXES = ("mujoco,motrix", "mujoco,sapien", "mujoco,sapien,motrix")


def bench_mixed(s: Settings) -> dict:

    from simbackend.mixing import engines_of
    from simbackend.tasks import make_task

    n = 256
    sims = list(dict.fromkeys([e for mix in MIXES for e in engines_of(mix)] + list(MIXES)))
    tasks = {sim: make_task("velocity", sim, n, config={"robot": "go1"}, seed=0) for sim in sims}
    samples, iters = _timed_task_steps(tasks, s)
    figures, ratios = [], {}
    for mix in MIXES:
        slowest = max(engines_of(mix), key=lambda e: _common.median(samples[e]))
        ratio = _common.paired_ratio(samples[mix], samples[slowest])  # time mix / time slowest alone
        ratios[f"time_ratio_{mix}_vs_{slowest}"] = ratio
        figures.append(
            _common.figure(
                f"velocity task on Go1, N = {n}: step time {mix} (threads) / {slowest} alone (the slowest)",
                ratio["median"],
                1.2,
                "<=",
                "x",
                (ratio["min"], ratio["max"]),
            )
        )
    return {
        "cases": {
            "go1": {
                "num_envs": n,
                "variants": {
                    c: variant(samples[c], n, "env-steps/s", iters, f"velocity Task.step on {c}") for c in samples
                },
                **ratios,
            }
        },
        "figures": figures,
    }


BENCHES: dict[str, Callable[[Settings], dict]] = {
    "overhead": bench_overhead,
    "friction_cone": bench_friction_cone,
    "mixed": bench_mixed,
    "training": bench_training,
}


def machine() -> dict:
    import mujoco
    import sapien

    return _common.machine(
        {"mujoco": mujoco.__version__, "sapien": sapien.__version__}, {"rsl_rl": _common.package_version("rsl-rl-lib")}
    )


def extra_rows(table: Any, sections: dict, console: Any) -> None:
    data = sections.get("training")
    if not data or "runs" not in data:
        return
    for sim, c in data["runs"].items():
        table.add_row(
            "training",
            sim,
            "ppo",
            f"{1e3 * c['seconds'] / c['iterations_timed']:.0f}",
            _common.fmt_rate(c),
            "env-steps/s",
            f"rsl-rl PPO on cartpole, N = {c['num_envs']}, {c['iterations_timed']} iterations",
        )


def report(result: dict) -> None:
    m = result["machine"]
    header = (
        f"[bold]bench_tasks[/bold]  cpus={m['cpu_count']} ({m['cpu_model']})  mujoco {m['mujoco']}  "
        f"sapien {m['sapien']}  torch {m['torch']}  rsl-rl {m.get('rsl_rl')}  "
        f"rounds={result['settings']['rounds']}  quick={result['settings']['quick']}"
    )
    _common.print_tables(
        result,
        header,
        "the ratios compare variants of one run, but a busy machine widens them.",
        extra_variant_rows=extra_rows,
    )


def main(argv: list[str] | None = None) -> int:
    return _common.main(
        argv,
        description=__doc__.split("\n\n")[0],
        sections=BENCHES,
        settings=Settings,
        default_out=DEFAULT_OUT,
        quick_help="fewer rounds, N = 256: a smoke check",
        machine_info=machine,
        report=report,
    )


if __name__ == "__main__":
    sys.exit(main())
