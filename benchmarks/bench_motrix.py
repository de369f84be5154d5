#!/usr/bin/env python
"""Side-by-side performance benchmark of the MotrixSim backend plugin (``simbackend_motrix``).

Measured like ``bench_mujoco.py`` and ``bench_sapien.py`` (see ``_common.py``):
the variants of a measurement alternate call by call in one process, figures
are medians over rounds, ratios medians of the per-round ratios.

Sections (``--only NAME`` runs one):

* ``overhead``  plugin ``step(ctrl, k)`` + ``get_qpos()`` + ``get_qvel()`` + one
                body's pose vs a bare Motrix loop doing the same work on the
                plugin's own Motrix model (arm7 and gymnasium's ant.xml,
                N = 1024, k = 1 and 4); target >= 0.9x.
* ``engines``   env-steps/s of the MuJoCo, SAPIEN (CPU) and Motrix backends on
                the same work (arm7, quadruped, ant; N = 64 and 1024; k = 4),
                interleaved in one run; no target.

Usage::

    python benchmarks/bench_motrix.py            # full run, a few minutes on 2 cores
    python benchmarks/bench_motrix.py --quick    # smoke check, about a minute
    python benchmarks/bench_motrix.py --only overhead --out /tmp/overhead.json

The JSON (default ``benchmarks/results/motrix.json``) has the layout of
``bench_mujoco.py``'s. See benchmarks/README.md.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

if not os.environ.get("MUJOCO_GL"):
    os.environ["MUJOCO_GL"] = "egl"

import numpy as np

import _common
from _common import ARM, ARM_BODY, BaseSettings, Call, arm_ctrls, interleaved, paired_ratio, variant, versus_bare
from bench_mujoco import _gym_assets

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "motrix.json"
UNIT = "env-steps/s"  # N per call; one env-step is one step() call of nsteps substeps
OVERHEAD_TARGET = 0.9
ANT = "ant"  # gymnasium's ant.xml (envs/mujoco/assets), as in bench_mujoco.py's ant section
#: the body whose pose every loop reads, per model
BODIES = {ARM: ARM_BODY, "quadruped": "torso", ANT: "torso"}
#: the keyframe every env starts at (ant: the initial pose of ant.xml, torso 0.75 m up)
KEYFRAMES = {ARM: "home", "quadruped": "stand"}
ENGINES = ("mujoco", "sapien", "motrix")
ENGINE_LABELS = {"mujoco": "MuJoCo", "sapien": "SAPIEN (CPU)", "motrix": "Motrix"}
XYZW_TO_WXYZ = [3, 0, 1, 2]


class Settings(BaseSettings):
    """Rounds and block lengths of a run (``--quick`` shrinks them), and the sizes of each section."""

    def __init__(self, quick: bool):
        super().__init__(quick)
        self.overhead_models = [ARM, ANT]
        self.n_overhead = 64 if quick else 1024
        self.nsteps = [1, 4]
        self.engine_models = [ARM, "quadruped", ANT]
        self.n_engines = [16, 64] if quick else [64, 1024]
        self.engine_nsteps = 4
        self.settle_substeps = 20 if quick else 100  # before timing: the ant lands, the quadruped sinks
        self.check_calls = 3  # calls of plugin and bare loop compared before timing


# ----------------------------------------------------------------------------
# shared construction
# ----------------------------------------------------------------------------
def _source(model: str) -> str:
    return str(_gym_assets() / "ant.xml") if model == ANT else model


def _make(engine: str, model: str, n: int, **options: Any):
    """``engine``'s backend of ``model`` with every env at the model's start state."""
    import simbackend

    sim = simbackend.make_backend(engine, _source(model), n, **options)
    key = KEYFRAMES.get(model)
    if key is not None:
        sim.set_state(None, sim.get_keyframe_qpos(key).expand(n, -1))
    return sim


def _ctrls(model: str, n: int, seed: int, count: int = 8) -> list:
    """``count`` float32 (n, nu) torch ctrl tensors, cycled by the loops.

    arm7: home +- 0.1 rad position targets (``_common.arm_ctrls``, as in the
    other scripts). quadruped and ant (motors): uniform in +-10 % of each ctrl
    range, small torques under which the robot rests on the ground and jiggles
    without tumbling over (no episode resets are needed for a steady cost).
    """
    import torch

    from simbackend.models import compile_model, model_info

    if model == ARM:
        return arm_ctrls(n, seed, count)
    lo, hi = model_info(compile_model(_source(model))).actuator_ctrl_range.T
    mid, half = (lo + hi) / 2, 0.1 * (hi - lo) / 2
    rng = np.random.default_rng(seed)
    return [
        torch.from_numpy((mid + half * rng.uniform(-1, 1, size=(n, lo.size))).astype(np.float32)) for _ in range(count)
    ]


def _reads(sim: Any, body: Any) -> tuple[Any, Any, Any, Any]:
    return sim.get_qpos(), sim.get_qvel(), sim.get_body_pos_w(body), sim.get_body_quat_w(body)


def _settle(sim: Any, ctrl: Any, substeps: int) -> None:
    """Step from the start pose until the transient (a fall to the ground) is over."""
    if substeps:
        sim.step(ctrl, nsteps=substeps)


def _pool_threads(sim: Any) -> int | None:
    for note in sim.notes:
        if note.startswith("thread pool:"):
            return int(note.split()[2])
    return None


# ----------------------------------------------------------------------------
# the bare Motrix loop
# ----------------------------------------------------------------------------
class BareMotrix:
    """The plugin's Motrix model driven by hand, on a data batch of its own: the plugin's outputs with the least work.

    Per call: ``ctrl`` into ``data.actuator_ctrls`` (Motrix's actuator order),
    ``model.step_n(data, k)`` (``model.step`` for k = 1),
    ``model.forward_kinematic(data)`` (the plugin runs it after each step so that
    its getters describe the current state), then ``data.dof_pos`` /
    ``data.dof_vel`` with their columns in MuJoCo's order (free-joint quaternions
    xyzw -> wxyz) and ``model.get_link_poses(data, [link])`` of the read body,
    all as float32 ``(N, nq)``, ``(N, nv)``, ``(N, 1, 3)``, ``(N, 1, 4)`` torch
    tensors. No input validation, no pre-step copy of the state for a rollback,
    no divergence check, no states of every link cached for later reads.

    Args:
        sim: a ``motrix`` backend (its ``mx_model``, ``data`` and ``map`` are used,
            not its methods); the bare batch starts at its current state.
        body: the body whose pose is read.
    """

    def __init__(self, sim: Any, body: int):
        import motrixsim as mx

        self.model = mm = sim.engine.mx_model
        self.data = mx.SceneData(mm, batch=[sim.num_envs])
        self.data.reset(mm, sim.engine.data.dof_pos, sim.engine.data.dof_vel, forward_kinematic=True)
        src = np.asarray(sim.engine.map.actuator_src, np.int64)  # Motrix column of each MuJoCo actuator
        self.act_cols = None if np.array_equal(src, np.arange(src.size)) else np.argsort(src)
        self.qpos_src = np.asarray(sim.engine.map.qpos_src, np.int64)
        self.qvel_src = np.asarray(sim.engine.map.qvel_src, np.int64)
        self.links = [int(sim.engine.map.body_link[body])]

    def __call__(self, ctrl: Any, nsteps: int) -> tuple[Any, Any, Any, Any]:
        import torch

        mm, data = self.model, self.data
        u = ctrl.numpy()
        data.actuator_ctrls = u if self.act_cols is None else u[:, self.act_cols]
        if nsteps > 1:
            mm.step_n(data, nsteps)
        else:
            mm.step(data)
        mm.forward_kinematic(data)
        qpos = torch.from_numpy(data.dof_pos[:, self.qpos_src])
        qvel = torch.from_numpy(data.dof_vel[:, self.qvel_src])
        pose = mm.get_link_poses(data, self.links)  # (N, 1, 7): xyz + xyzw
        pos = torch.from_numpy(np.ascontiguousarray(pose[..., :3]))
        quat = torch.from_numpy(pose[..., 3:][..., XYZW_TO_WXYZ])  # a fancy index: a fresh contiguous array
        return qpos, qvel, pos, quat


# ----------------------------------------------------------------------------
# section 1: plugin step + reads vs the bare Motrix loop
# ----------------------------------------------------------------------------
def bench_overhead(s: Settings) -> dict:
    n = s.n_overhead
    cases, checks, bodies, threads = {}, {}, {}, None
    for model in s.overhead_models:
        ctrls = _ctrls(model, n, seed=1)
        sim = _make("motrix", model, n)
        threads = _pool_threads(sim)
        body = sim.get_body_ids(BODIES[model])
        bodies[model] = BODIES[model]
        bare = BareMotrix(sim, int(body[0]))

        # the bare loop does the same work: from the same state, the same ctrls give the same outputs
        diff = np.zeros(4)
        for i in range(s.check_calls):
            sim.step(ctrls[i], nsteps=1)
            mine = bare(ctrls[i], 1)
            diff = np.maximum(diff, [float((a - b).abs().max()) for a, b in zip(_reads(sim, body), mine)])
        checks[model] = {
            "calls": s.check_calls,
            "qpos_max_abs_diff": diff[0],
            "qvel_max_abs_diff": diff[1],
            "body_pos_max_abs_diff": diff[2],
            "body_quat_max_abs_diff": diff[3],
        }
        _settle(sim, ctrls[0], s.settle_substeps)
        bare(ctrls[0], s.settle_substeps)

        for k in s.nsteps:
            cases[f"{model},nsteps={k}"] = {
                "model": model,
                **versus_bare(
                    s,
                    "plugin",
                    lambda c, k: (sim.step(c, nsteps=k), _reads(sim, body)),
                    bare,
                    ctrls,
                    n,
                    k,
                    (
                        f"step(ctrl,{k}) + get_qpos + get_qvel + get_body_pos_w/quat_w(1 body)",
                        f"actuator_ctrls, step_n({k}), forward_kinematic, dof_pos/vel, get_link_poses",
                    ),
                    f"{model} N={n} k={k}: plugin / bare Motrix loop",
                    OVERHEAD_TARGET,
                    UNIT,
                ),
            }
        sim.close()
    return {
        "params": {
            "models": {m: _source(m) for m in s.overhead_models},
            "num_envs": n,
            "nsteps": s.nsteps,
            "bodies": bodies,
            "motrix_threads": threads,
            "settle_substeps": s.settle_substeps,
            "start": {m: KEYFRAMES.get(m, "model's initial pose") for m in s.overhead_models},
            "work_unit": "env-step = one step() call of nsteps substeps",
        },
        "same_work_check": checks,
        "cases": cases,
        "figures": [c["figure"] for c in cases.values()],
    }


# ----------------------------------------------------------------------------
# section 2: MuJoCo, SAPIEN (CPU) and Motrix on the same work
# ----------------------------------------------------------------------------
def bench_engines(s: Settings) -> dict:
    k = s.engine_nsteps
    cases: dict[str, dict] = {}
    caps: dict[str, int | None] = {}
    threads: dict[str, Any] = {}
    for model in s.engine_models:
        for n in sorted(s.n_engines):
            ctrls = _ctrls(model, n, seed=2)
            sims, skipped, errors = {}, {}, {}
            for eng in ENGINES:
                cap = caps.get(eng)
                if cap is not None and n > cap:
                    skipped[eng] = f"N={n} > capabilities.max_envs={cap} of the {eng} backend" + (
                        " (CPU: one PhysX scene per env; SAPIEN aborts the interpreter when it frees"
                        " more than about 1000)"
                        if eng == "sapien"
                        else ""
                    )
                    continue
                try:
                    sim = _make(eng, model, n)
                    _settle(sim, ctrls[0], s.settle_substeps)
                except Exception as e:  # noqa: BLE001 - record why, time the others
                    errors[eng] = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
                    continue
                caps[eng] = sim.capabilities.max_envs
                threads[eng] = _pool_threads(sim) if eng == "motrix" else getattr(sim.engine, "nthread", None)
                sims[eng] = (sim, sim.get_body_ids(BODIES[model]))

            def call(eng: str) -> Call:
                sim, body = sims[eng]

                def step(i: int) -> None:
                    sim.step(ctrls[i % len(ctrls)], nsteps=k)
                    _reads(sim, body)

                return step

            case: dict[str, Any] = {"model": model, "num_envs": n, "nsteps": k, "variants": {}}
            if sims:
                samples, iters = interleaved({eng: call(eng) for eng in sims}, s)
                case["variants"] = {
                    eng: variant(
                        samples[eng],
                        n,
                        UNIT,
                        iters,
                        f"{eng}: step(ctrl,{k}) + get_qpos + get_qvel + get_body_pos_w/quat_w(1 body)",
                    )
                    for eng in sims
                }
                if "motrix" in sims and "mujoco" in sims:
                    case["ratio_motrix_vs_mujoco"] = paired_ratio(samples["mujoco"], samples["motrix"])
                if "motrix" in sims and "sapien" in sims:
                    case["ratio_motrix_vs_sapien"] = paired_ratio(samples["sapien"], samples["motrix"])
            if skipped:
                case["skipped"] = skipped
            if errors:
                case["errors"] = errors
            for sim, _ in sims.values():
                sim.close()  # SAPIEN's scenes count against its per-process cap until closed
            sims.clear()
            cases[f"{model},N={n}"] = case
    return {
        "params": {
            "models": {m: _source(m) for m in s.engine_models},
            "num_envs": sorted(s.n_engines),
            "nsteps": k,
            "engines": list(ENGINES),
            "device": "cpu",
            "threads": threads,
            "max_envs": caps,
            "bodies": {m: BODIES[m] for m in s.engine_models},
            "settle_substeps": s.settle_substeps,
            "start": {m: KEYFRAMES.get(m, "model's initial pose") for m in s.engine_models},
            "work_unit": "env-step = one step() call of nsteps substeps",
        },
        "cases": cases,
        "figures": [],
    }


# ----------------------------------------------------------------------------
# report
# ----------------------------------------------------------------------------
def machine() -> dict:
    v = _common.package_version
    return _common.machine(
        {
            "motrixsim": v("motrixsim"),
            "simbackend_motrix": v("simbackend-motrix"),
            "mujoco": v("mujoco"),
            "sapien": v("sapien"),
        },
        {"gymnasium": v("gymnasium")},
    )


def _figure_rows(figs: Any, sec: dict, console: Any) -> None:
    for model, c in sec.get("overhead", {}).get("same_work_check", {}).items():
        worst = max(
            c["qpos_max_abs_diff"], c["qvel_max_abs_diff"], c["body_pos_max_abs_diff"], c["body_quat_max_abs_diff"]
        )
        figs.add_row(
            "overhead",
            f"{model}: max |plugin - bare| over qpos, qvel, body pos, quat after "
            f"{c['calls']} identical calls (same work check)",
            f"{worst:.2g}",
            "",
            "",
            "",
            "",
        )


def _engines_table(sec: dict, console: Any) -> None:
    from rich.table import Table

    data = sec.get("engines")
    if not data or "cases" not in data:
        return
    k = data["params"]["nsteps"]
    t = Table(
        title=f"Engines: env-steps/s, step(ctrl, {k}) + get_qpos + get_qvel + one body's pose "
        "(median over rounds, interleaved)"
    )
    for col in ("model", "N", *(ENGINE_LABELS[e] for e in ENGINES), "Motrix / MuJoCo (min..max)"):
        t.add_column(col, justify="left" if col == "model" else "right")
    for case in data["cases"].values():
        cells = []
        for eng in ENGINES:
            if eng in case["variants"]:
                cells.append(_common.fmt_rate(case["variants"][eng]))
            elif eng in case.get("skipped", {}):
                cells.append("[yellow]skipped[/yellow]")
            else:
                cells.append("[red]error[/red]")
        r = case.get("ratio_motrix_vs_mujoco")
        ratio = f"{r['median']:.2f}x ({r['min']:.2f}..{r['max']:.2f})" if r else ""
        t.add_row(case["model"], str(case["num_envs"]), *cells, ratio)
    console.print(t)
    for name, case in data["cases"].items():
        for eng, why in case.get("skipped", {}).items():
            console.print(f"[yellow]{name} {eng} skipped:[/yellow] {why}")
        for eng, why in case.get("errors", {}).items():
            console.print(f"[red]{name} {eng} failed:[/red] {why}")


def print_tables(result: dict) -> None:
    from rich.console import Console

    m = result["machine"]
    header = (
        f"[bold]bench_motrix[/bold]  cpus={m['cpu_count']} ({m['cpu_model']})  motrixsim {m['motrixsim']}  "
        f"simbackend-motrix {m['simbackend_motrix']}  mujoco {m['mujoco']}  sapien {m['sapien']}  "
        f"torch {m['torch']}  numpy {m['numpy']}  "
        f"rounds={result['settings']['rounds']}  quick={result['settings']['quick']}"
    )
    _common.print_tables(result, header, "the figures are then noisier.", extra_figure_rows=_figure_rows)
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    _engines_table(result["sections"], console)


BENCHES: dict[str, Callable[[Settings], dict]] = {
    "overhead": bench_overhead,
    "engines": bench_engines,
}


def main(argv: list[str] | None = None) -> int:
    return _common.main(
        argv,
        description=__doc__.split("\n\n")[0],
        sections=BENCHES,
        settings=Settings,
        default_out=DEFAULT_OUT,
        quick_help="few rounds, short blocks, small N: a smoke check",
        machine_info=machine,
        report=print_tables,
    )


if __name__ == "__main__":
    sys.exit(main())
