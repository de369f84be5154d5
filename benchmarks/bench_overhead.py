#!/usr/bin/env python
"""What the contract itself costs per call: each call of the backend against the raw engine doing the same work.

Every measurement interleaves, call by call in one process, a contract call with
the engine driven by hand to the same effect (``_common.interleaved``), and
reports both per-call times, the per-round difference "backend minus raw" in
µs (median and min..max over rounds) and the paired throughput ratio. The raw
side uses the backend engine's own copy of the model (``backend.engine.model``:
the same options, MuJoCo's automatic reset off) in a ``mujoco.batch.Batch`` of
its own, started from the backend's state.

Sections (``--only NAME`` runs one):

* ``cpu_n1``    MuJoCo, N = 1, ``nthread=1``: ``step(ctrl, 1)`` on the built-in
                ``cartpole`` and gymnasium's InvertedPendulum model (figure: µs
                above raw, target <= 30 µs); each getter, timed right after a
                step (``get_qpos``, ``get_qvel``, ``get_dof_pos``,
                ``get_body_pos_w``, ``get_body_quat_w`` on cartpole,
                ``get_base_lin_vel`` on the quadruped, ``get_site_pos_w`` on
                arm7; figure: µs above raw, target <= 5 µs); ``set_state`` of
                the one env (info).
* ``cpu_n1024`` MuJoCo arm7 at keyframe home, N = 1024, default nthread:
                ``step(ctrl, k)``, k = 1 and 4 (figure: backend / raw
                throughput, target >= 0.95x); ``set_state`` of 8 envs and the
                getters (info).
* ``task``      ``Task.step(action)`` against the backend step it drives (same
                ctrl, same decimation), cartpole and the quadruped, N = 1 and
                1024 (figure at N = 1024: task / backend throughput, target
                >= 0.95x; N = 1: µs above, info).
* ``gpu``       with ``--device cuda`` only: the MuJoCo Warp backend against
                ``bench_mjwarp.BareLoop`` (arm7, N = 1024, 4096, 16384 or
                ``--n``), and a rollout of the quadruped task with a small MLP
                policy at N = 4096 (env-steps/s, info).

Usage::

    python benchmarks/bench_overhead.py                 # about 3 minutes on 2 cores
    python benchmarks/bench_overhead.py --quick         # smoke check, < 60 s
    python benchmarks/bench_overhead.py --only cpu_n1 --out /tmp/overhead.json
    python benchmarks/bench_overhead.py --only gpu --device cuda --out benchmarks/results/overhead_cuda.json

The JSON (default ``benchmarks/results/overhead.json``) is rendered into
docs/performance.md by ``benchmarks/report.py``. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import _common
import bench_mjwarp
from _common import (
    ARM,
    ARM_BODY,
    BaseSettings,
    Call,
    Prepared,
    arm_at_home,
    arm_ctrls,
    figure,
    interleaved,
    paired_difference,
    paired_ratio,
    variant,
    versus_bare,
)
from bench_mujoco import _gym_assets
from bench_tasks import quadruped_pd

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "overhead.json"

STEP_US_TARGET = 30.0  # step(ctrl, 1) above raw at N = 1, µs (at most)
GETTER_US_TARGET = 5.0  # a getter above raw at N = 1, µs (at most)
THROUGHPUT_TARGET = 0.95  # backend / raw and task / backend at N = 1024 (at least)
PENDULUM = "inverted_pendulum"  # gymnasium's InvertedPendulum model (envs/mujoco/assets)
UNIT = "calls/s"  # report.py shows the variants of such a table as µs per call
#: one label per variant for every case of a section (docs/performance.md gives one legend per table);
#: each case says its own work in ``backend_call`` and ``raw_work``, the section's notes what raw does
BACKEND_LABEL = "the contract call the case names"
RAW_LABEL = "the same work on a raw mujoco.batch.Batch (see the notes)"
RAW_NOTES = [
    "step: ctrl a float32 tensor, raw: the ctrl clipped into the bound ctrl rows (np.clip) and "
    "Batch.step(nstep=k, stage=0), the engine computing derived quantities only when a getter needs them",
    "getters (every body, site or dof): timed right after an untimed step on both sides, raw: "
    "Batch.forward(mjSTAGE_VEL) where the engine runs one (body and site poses) and the float32 copy of the "
    "bound field (get_dof_pos: the hinge and slide columns of qpos, get_base_lin_vel: the free joint's qvel "
    "columns), the raw batch binding the derived fields the engine binds and reading qpos and qvel after its "
    "step (untimed) as the backend's divergence rule does",
    "set_state: ids an int64 tensor, rows float32, raw: the qpos and qvel rows written from the same tensors "
    "and their warm start zeroed, no derived field bound on either side (no forward pass)",
]

_SIZES: list[int] = []
_DEVICE = ["cpu"]
#: the contract's step captured in a CUDA graph against the bare loop (issue 30: >= 0.95x at N >= 4096)
CAPTURED_TARGET = 0.95
#: (model, body read) of the gpu section's step figures (``--gpu-model``)
_GPU_MODEL = [(ARM, ARM_BODY)]


class Settings(BaseSettings):
    """Rounds and block lengths (``--quick`` shrinks them), and the sizes of each section."""

    def __init__(self, quick: bool):
        super().__init__(quick)
        self.block_s = 0.05 if quick else 0.25
        self.n_large = 1024
        self.n_set = 8  # envs of the set_state call at N = n_large
        self.nsteps = [1, 4]
        self.n_gpu = _SIZES or ([1024] if quick else [1024, 4096, 16384])
        self.n_rollout = 1024 if quick else 4096
        self.device = _DEVICE[0]
        self.check_calls = 3


# ----------------------------------------------------------------------------
# shared construction
# ----------------------------------------------------------------------------
def _model_source(name: str) -> str:
    return str(_gym_assets() / f"{name}.xml") if name == PENDULUM else name


def _backend(model: str, n: int, **options: Any) -> Any:
    import simbackend

    return simbackend.make_backend("mujoco", _model_source(model), n, **options)


def _derived_stage(model: Any) -> int:
    """The stage the MuJoCo engine runs when a getter finds derived fields stale (its ``_stage``):
    velocity, or acceleration where a sensor needs it."""
    import mujoco

    acc = int(mujoco.mjtStage.mjSTAGE_ACC)
    return acc if (np.asarray(model.sensor_needstage) >= acc).any() else int(mujoco.mjtStage.mjSTAGE_VEL)


class Raw:
    """A raw ``mujoco.batch.Batch`` on ``sim.engine.model`` (the engine's copy: the same options), its
    rows at the backend's qpos/qvel, derived quantities not computed (as the engine leaves them).

    ``fields`` are bound at once (a bound output field is copied out after every call into the batch,
    so the raw batch binds what the backend's engine binds for the same calls).
    """

    def __init__(self, sim: Any, nthread: int, *fields: str):
        from mujoco import batch as mjbatch

        self.model = sim.engine.model
        self.batch = b = mjbatch.Batch(self.model, sim.num_envs, nthread=nthread)
        b.reset(stage=0)  # mjSTAGE_NONE: nothing computed
        self.qpos, self.qvel, self.ctrl = b.bind("qpos"), b.bind("qvel"), b.bind("ctrl")
        self.warmstart = b.bind("qacc_warmstart")
        qpos, qvel = sim.engine.read_state()
        self.qpos[...] = qpos
        self.qvel[...] = qvel
        self.fields = {f: b.bind(f) for f in fields}
        self.lo, self.hi = np.array(sim.info.actuator_ctrl_range, np.float64).T.copy()
        self.stage = _derived_stage(self.model)

    def step(self, ctrl: Any, k: int) -> None:
        """The backend's step, by hand: ctrl clipped into the bound rows, ``k`` substeps, stage 0
        (the engine computes derived quantities when a getter first needs them)."""
        np.clip(ctrl.numpy(), self.lo, self.hi, out=self.ctrl)
        self.batch.step(nstep=k, stage=0)


def _f32(a: np.ndarray) -> Any:
    """The front end's copy of an engine array: a new float32 CPU tensor."""
    import torch

    return torch.from_numpy(np.array(a, dtype=np.float32))


def _case(
    samples: dict[str, list[float]],
    iters: int,
    params: dict,
    labels: dict[str, str] | None = None,
    ours: str = "backend",
    base: str = "raw",
) -> dict:
    """A case's record: its variants (per-call, ``UNIT``), ``ours`` minus ``base`` in µs and ``ours / base``
    throughput. ``params`` say what the case's calls do."""
    labels = labels or {"backend": BACKEND_LABEL, "raw": RAW_LABEL}
    return {
        **params,
        "variants": {name: variant(samples[name], 1.0, UNIT, iters, labels[name]) for name in labels},
        f"diff_us_{ours}_vs_{base}": paired_difference(samples[ours], samples[base]),
        f"ratio_{ours}_vs_{base}": paired_ratio(samples[base], samples[ours]),  # throughput ours / base
    }


def _us_figure(name: str, case: dict, target: float, key: str = "diff_us_backend_vs_raw") -> dict:
    d = case[key]
    return figure(name, d["median"], target, "<=", "µs", (d["min"], d["max"]))


def _ratio_figure(name: str, case: dict, target: float, key: str) -> dict:
    r = case[key]
    return figure(name, r["median"], target, ">=", "x", (r["min"], r["max"]))


# ----------------------------------------------------------------------------
# the three kinds of measurement: step, set_state, getter after a step
# ----------------------------------------------------------------------------
def _step_case(s: Settings, sim: Any, raw: Raw, ctrls: list, k: int, checks: dict | None, key: str) -> dict:
    """``step(ctrl, k)`` vs the raw step; with ``checks``, first ``s.check_calls`` identical calls from the
    same state, whose largest qpos/qvel difference is recorded (0: the same work, bit for bit)."""
    if checks is not None:
        for i in range(s.check_calls):
            sim.step(ctrls[i], nsteps=k)
            raw.step(ctrls[i], k)
        q, v = sim.engine.read_state()
        checks[key] = {
            "calls": s.check_calls,
            "qpos_max_abs_diff": float(np.abs(q - raw.qpos).max()),
            "qvel_max_abs_diff": float(np.abs(v - raw.qvel).max()),
        }

    def backend(i: int) -> None:
        sim.step(ctrls[i % len(ctrls)], nsteps=k)

    def bare(i: int) -> None:
        raw.step(ctrls[i % len(ctrls)], k)

    samples, iters = interleaved({"backend": backend, "raw": bare}, s)
    return _case(
        samples,
        iters,
        {
            "num_envs": sim.num_envs,
            "nsteps": k,
            "backend_call": f"step(ctrl, {k})",
            "raw_work": f"np.clip(ctrl) into the bound ctrl rows + Batch.step(nstep={k}, stage=0)",
        },
    )


def _set_state_case(s: Settings, sim: Any, raw: Raw, ids: Any, qpos: Any, qvel: Any) -> dict:
    """``set_state(ids, qpos, qvel)`` vs writing the rows: qpos, qvel, warm start cleared. No derived field
    is bound on either side (as after a step, the engine then runs no forward pass for the written envs)."""
    rows = ids.numpy()

    def backend(i: int) -> None:
        sim.set_state(ids, qpos, qvel)

    def bare(i: int) -> None:
        r = ids.numpy()
        raw.qpos[r] = qpos.numpy()
        raw.qvel[r] = qvel.numpy()
        raw.warmstart[r] = 0.0

    samples, iters = interleaved({"backend": backend, "raw": bare}, s)
    return _case(
        samples,
        iters,
        {
            "num_envs": sim.num_envs,
            "envs_written": int(rows.size),
            "backend_call": "set_state(ids, qpos, qvel), ids an int64 tensor, qpos/qvel float32",
            "raw_work": "qpos, qvel rows written from the same tensors, qacc_warmstart rows zeroed",
        },
    )


#: getter -> (derived fields the engine binds for it, forward pass when stale after a step)
_GETTERS: dict[str, tuple[tuple[str, ...], bool]] = {
    "get_qpos": ((), False),
    "get_qvel": ((), False),
    "get_dof_pos": ((), False),
    "get_base_lin_vel": ((), False),  # a free root body: read from the qvel rows while stale
    "get_body_pos_w": (("xpos",), True),  # the engine computes only the half a getter reads
    "get_body_quat_w": (("xquat",), True),
    "get_site_pos_w": (("site_xpos",), True),
}


def _raw_read(getter: str, sim: Any, raw: Raw) -> Callable[[], np.ndarray]:
    """The array the raw side copies for ``getter`` (every body, site, dof: the getters' ``None``)."""
    import mujoco

    m = raw.model
    if getter == "get_qpos":
        return lambda: raw.qpos
    if getter == "get_qvel":
        return lambda: raw.qvel
    if getter == "get_dof_pos":
        cols = np.asarray(sim.info.dof_qpos_index)  # the hinge and slide joints' qpos columns, joint order
        return lambda: raw.qpos[:, cols]
    if getter == "get_base_lin_vel":
        free = [
            j
            for j in range(m.njnt)
            if m.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE and m.jnt_bodyid[j] == sim.base_body_id
        ]
        if not free:
            raise RuntimeError(f"get_base_lin_vel: the model's base body {sim.base_body_id} has no free joint")
        adr = int(m.jnt_dofadr[free[0]])
        return lambda: raw.qvel[:, adr : adr + 3]  # a free joint's linear velocity: world frame
    field = {"get_body_pos_w": "xpos", "get_body_quat_w": "xquat", "get_site_pos_w": "site_xpos"}[getter]
    arr = raw.fields[field]
    return lambda: arr


def _getter_case(s: Settings, getter: str, model: str, n: int, nthread: int, ctrls: Callable[[Any], list]) -> dict:
    """``getter()`` timed right after a step (untimed, ``Prepared``), so that derived fields are stale
    each time: raw runs ``Batch.forward(stage)`` where the engine would, then the same float32 copy."""
    fields, forward = _GETTERS[getter]
    sim = arm_at_home("mujoco", n, nthread=nthread) if model == ARM else _backend(model, n, nthread=nthread)
    raw = Raw(sim, sim.engine.nthread, *fields)
    cs = ctrls(sim)
    read = _raw_read(getter, sim, raw)
    get = getattr(sim, getter)
    batch, stage = raw.batch, raw.stage

    def backend_setup(i: int) -> None:
        sim.step(cs[i % len(cs)], nsteps=1)

    def raw_setup(i: int) -> None:
        raw.step(cs[i % len(cs)], 1)
        # the backend's step ends reading qpos and qvel (its divergence rule): read them too, so that both
        # getters find the rows in the same cache state (at N = 1024 that is worth ~10 µs of a copy)
        float(np.abs(raw.qpos).max())
        float(np.abs(raw.qvel).max())

    def raw_get(i: int) -> None:
        if forward:
            batch.forward(stage=stage)
        _f32(read())

    calls: dict[str, Call] = {
        "backend": Prepared(backend_setup, lambda i: get()),
        "raw": Prepared(raw_setup, raw_get),
    }
    samples, iters = interleaved(calls, s)
    # the derived fields the engine bound (a private attribute, read for this check only): a bound field is
    # copied out by every call into the batch, so the raw must bind the same ones for the same work
    bound = sorted(getattr(sim.engine, "_derived", {}))
    sim.close()
    what = f"Batch.forward(stage={stage}) + " if forward else ""
    return _case(
        samples,
        iters,
        {
            "model": model,
            "num_envs": n,
            "backend_call": f"{getter}() right after step(ctrl, 1) (untimed)",
            "raw_work": f"{what}float32 copy, right after the raw step (untimed)",
            "raw_bound": sorted(fields),
            "engine_bound": bound,
        },
    )


def _bound_notes(cases: dict) -> list[str]:
    """A note for each getter case whose raw batch bound other derived fields than the engine did."""
    return [
        f"{name}: the engine bound {c['engine_bound']}, the raw batch {c['raw_bound']}: not the same work"
        for name, c in cases.items()
        if "raw_bound" in c and c["engine_bound"] != c["raw_bound"]
    ]


# ----------------------------------------------------------------------------
# section 1: N = 1
# ----------------------------------------------------------------------------
def _ctrls(sim: Any) -> list:
    """8 ctrl sets: the model's home ctrl (or zeros) + uniform noise of 10 % of each range."""
    return bench_mjwarp._ctrls(sim, sim.num_envs)


def _arm_ctrls(sim: Any) -> list:
    return arm_ctrls(sim.num_envs, seed=1)


def bench_cpu_n1(s: Settings) -> dict:
    import torch

    cases, figures, checks = {}, [], {}
    for model in ("cartpole", PENDULUM):
        sim = _backend(model, 1, nthread=1)
        raw = Raw(sim, 1)
        key = f"step {model}"
        cases[key] = _step_case(s, sim, raw, _ctrls(sim), 1, checks, key)
        figures.append(_us_figure(f"step(ctrl, 1) above raw, N = 1, {model}", cases[key], STEP_US_TARGET))
        sim.close()
    getters = [(g, "cartpole") for g in ("get_qpos", "get_qvel", "get_dof_pos", "get_body_pos_w", "get_body_quat_w")]
    getters += [("get_base_lin_vel", "quadruped"), ("get_site_pos_w", ARM)]
    for getter, model in getters:
        key = f"{getter} {model}"
        cases[key] = _getter_case(s, getter, model, 1, 1, _arm_ctrls if model == ARM else _ctrls)
        figures.append(_us_figure(f"{getter}() above raw, N = 1, {model}", cases[key], GETTER_US_TARGET))
    for model in ("cartpole", PENDULUM):
        sim = _backend(model, 1, nthread=1)
        raw = Raw(sim, 1)
        gen = torch.Generator().manual_seed(0)
        qpos = sim.get_default_qpos()[None] + 0.05 * torch.rand((1, sim.nq), generator=gen)
        qvel = 0.1 * torch.rand((1, sim.nv), generator=gen)
        cases[f"set_state {model}"] = _set_state_case(s, sim, raw, torch.tensor([0]), qpos, qvel)
        sim.close()
    return {
        "params": {
            "step_models": ["cartpole", _model_source(PENDULUM)],
            "getters_on": "cartpole",
            "get_base_lin_vel_on": "quadruped",
            "get_site_pos_w_on": ARM,
            "num_envs": 1,
            "nthread": 1,
        },
        "same_work_check": checks,
        "cases": cases,
        "figures": figures,
        "notes": RAW_NOTES + _bound_notes(cases),
    }


# ----------------------------------------------------------------------------
# section 2: N = 1024 arm7
# ----------------------------------------------------------------------------
def bench_cpu_n1024(s: Settings) -> dict:
    import torch

    n = s.n_large
    ctrls = arm_ctrls(n, seed=1)
    cases, figures, checks = {}, [], {}
    for k in s.nsteps:
        sim = arm_at_home("mujoco", n)  # default nthread: all cores
        raw = Raw(sim, sim.engine.nthread)
        key = f"step k={k}"
        cases[key] = _step_case(s, sim, raw, ctrls, k, checks, key)
        figures.append(
            _ratio_figure(
                f"step(ctrl, {k}): backend / raw, N = {n}", cases[key], THROUGHPUT_TARGET, "ratio_backend_vs_raw"
            )
        )
        nthread = sim.engine.nthread
        sim.close()
    sim = arm_at_home("mujoco", n)
    raw = Raw(sim, sim.engine.nthread)
    ids = torch.linspace(0, n - 1, s.n_set).to(torch.int64)
    gen = torch.Generator().manual_seed(0)
    home = sim.get_keyframe_qpos("home")
    qpos = home.expand(s.n_set, -1) + 0.01 * torch.rand((s.n_set, sim.nq), generator=gen)
    qvel = torch.zeros((s.n_set, sim.nv))
    cases[f"set_state {s.n_set} of {n}"] = _set_state_case(s, sim, raw, ids, qpos, qvel)
    sim.close()
    for getter in ("get_qpos", "get_qvel", "get_dof_pos", "get_body_pos_w", "get_site_pos_w"):
        cases[getter] = _getter_case(s, getter, ARM, n, 0, _arm_ctrls)
    return {
        "params": {"model": ARM, "num_envs": n, "nthread": nthread, "start": "keyframe home", "nsteps": s.nsteps},
        "same_work_check": checks,
        "cases": cases,
        "figures": figures,
        "notes": RAW_NOTES + _bound_notes(cases),
    }


# ----------------------------------------------------------------------------
# section 3: the task layer over the backend step it drives
# ----------------------------------------------------------------------------
def bench_task(s: Settings) -> dict:
    import torch

    from simbackend.tasks import make_task

    cases, figures = {}, []
    for name in ("cartpole", "quadruped"):
        for n in (1, s.n_large):
            opts = {"nthread": 1} if n == 1 else {}
            task = make_task(name, "mujoco", n, seed=0, **opts)
            bare = make_task(name, "mujoco", n, seed=0, **opts)  # the same initial states
            k = task.config.decimation
            gen = torch.Generator().manual_seed(0)
            actions = [torch.rand((n, task.action_dim), generator=gen) * 2 - 1 for _ in range(8)]
            b = bare.backend
            if bare.controller is None:
                ctrls = [bare.action_to_ctrl(a) for a in actions]

                def backend_call(i: int, b: Any = b, ctrls: list = ctrls, k: int = k) -> None:
                    b.step(ctrls[i % len(ctrls)], nsteps=k)

                label = f"backend.step(task ctrl, {k})"
            else:  # a physics-rate controller (the quadruped's PD law): its law as a pre-step control
                bare.controller.detach()
                select, pd = quadruped_pd(bare, actions)
                b.set_pre_step_control(pd)
                zeros = torch.zeros((n, b.num_actuators))

                def backend_call(i: int, b: Any = b, select: Any = select, zeros: Any = zeros, k: int = k) -> None:
                    select(i)
                    b.step(zeros, nsteps=k)

                label = f"backend.step(ctrl, {k}) with the task's PD law as pre-step control"

            def task_call(i: int, task: Any = task, actions: list = actions) -> None:
                task.step(actions[i % len(actions)])

            samples, iters = interleaved({"task": task_call, "backend": backend_call}, s)
            task.close()
            bare.close()
            key = f"{name} N={n}"
            cases[key] = _case(
                samples,
                iters,
                {"num_envs": n, "decimation": k, "backend_call": label},
                {
                    "task": "Task.step(action), no resets",
                    "backend": "backend.step(ctrl, decimation), the ctrl the task gives "
                    "(quadruped: its PD law as pre-step control)",
                },
                ours="task",
                base="backend",
            )
            if n > 1:
                figures.append(
                    _ratio_figure(
                        f"{name}: task / backend step, N = {n}", cases[key], THROUGHPUT_TARGET, "ratio_task_vs_backend"
                    )
                )
    return {"params": {"sim": "mujoco", "tasks": ["cartpole", "quadruped"]}, "cases": cases, "figures": figures}


# ----------------------------------------------------------------------------
# section 4: MuJoCo Warp on a GPU
# ----------------------------------------------------------------------------
def _captured_case(s: Settings, sim: Any, body: Any, theirs: Any, ctrls: list, n: int, model: str) -> dict:
    """The backend's same call captured once in a ``torch.cuda.graph`` and replayed (the engine declares
    ``cuda_graphs``): the contract's checks and bookkeeping run on the device, their launches gone."""
    import torch

    static = ctrls[0].clone()
    try:
        for _ in range(3):  # warm-up: buffers allocated, warp graphs made
            sim.step(static, 1)
            bench_mjwarp._reads(sim, body)
        sim.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            sim.step(static, 1)
            bench_mjwarp._reads(sim, body)
    except Exception as e:  # noqa: BLE001 - the reason is the result
        return {"captured": False, "reason": f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"}

    def replay(c: Any, k: int) -> None:
        static.copy_(c)
        graph.replay()
        torch.cuda.synchronize()

    case = versus_bare(
        s,
        "captured",
        replay,
        theirs,
        ctrls,
        n,
        1,
        (
            "the same calls captured in one torch.cuda.graph: ctrl copied in, replay + synchronize",
            "bench_mjwarp.BareLoop (mujoco_warp.step + forward + copies) + synchronize",
        ),
        f"MuJoCo Warp step in a CUDA graph, {model} N={n}: backend / bare loop",
        CAPTURED_TARGET,
    )
    sim.synchronize()  # an input error the replays recorded would be raised here
    return case


def bench_gpu(s: Settings) -> dict:
    if not s.device.startswith("cuda"):
        return {
            "skipped": f"needs --device cuda (this run: --device {s.device}): MuJoCo Warp on a GPU against its bare loop",
            "figures": [],
        }
    import torch

    from simbackend.tasks import make_task

    device = s.device
    model, body_name = _GPU_MODEL[0]
    sync = lambda: torch.cuda.synchronize(device)  # noqa: E731 - the queued GPU work inside the timed call
    cases, figures = {}, []
    for n in s.n_gpu:
        sim = bench_mjwarp._at_start(model, n, device)
        bare_sim = bench_mjwarp._at_start(model, n, device)
        body = sim.get_body_ids(body_name)
        bare = bench_mjwarp.BareLoop(bare_sim, int(body[0]))
        ctrls = bench_mjwarp._ctrls(sim, n)

        def ours(c: Any, k: int, sim: Any = sim, body: Any = body) -> None:
            sim.step(c, nsteps=k)
            bench_mjwarp._reads(sim, body)
            sync()

        def theirs(c: Any, k: int, bare: Any = bare) -> None:
            bare(c, k)
            sync()

        case = versus_bare(
            s,
            "backend",
            ours,
            theirs,
            ctrls,
            n,
            1,
            (
                "step(ctrl, 1) + get_qpos + get_body_pos_w/quat_w(1 body) + synchronize",
                "bench_mjwarp.BareLoop (mujoco_warp.step + forward + copies) + synchronize",
            ),
            f"MuJoCo Warp step, {model} N={n}: backend / bare loop",
            bench_mjwarp.STEP_TARGET,
        )
        b, r = case["variants"]["backend"]["samples_sec_per_call"], case["variants"]["bare"]["samples_sec_per_call"]
        case["diff_us_backend_vs_bare"] = paired_difference(b, r)
        cases[f"{model} N={n}"] = case
        figures.append(case["figure"])
        graphed = _captured_case(s, sim, body, theirs, ctrls, n, model)
        cases[f"{model} N={n}, captured"] = graphed
        if "figure" in graphed:
            figures.append(graphed["figure"])
        sim.close()
        bare_sim.close()

    n = s.n_rollout
    task = make_task("quadruped", "mjwarp", n, seed=0, device=device)
    hidden = (256, 128)
    layers: list[Any] = []
    width = task.observation_size
    for h in hidden:
        layers += [torch.nn.Linear(width, h), torch.nn.ELU()]
        width = h
    policy = torch.nn.Sequential(*layers, torch.nn.Linear(width, task.action_dim)).to(task.device)
    state = {"obs": task.flatten(task.observe())}

    def rollout(i: int) -> None:
        with torch.no_grad():
            action = policy(state["obs"])
        out = task.step(action)
        state["obs"] = task.flatten(out.obs)
        sync()

    samples, iters = interleaved({"rollout": rollout}, s)
    task.close()
    run = variant(samples["rollout"], n, "env-steps/s", iters, "policy forward + Task.step + synchronize")
    return {
        "params": {
            "sim": "mjwarp",
            "device": device,
            "model": model,
            "num_envs": s.n_gpu,
            "nsteps": 1,
            "rollout_task": "quadruped",
            "rollout_envs": n,
            "policy": f"MLP {'-'.join(map(str, hidden))}, ELU",
        },
        "cases": cases,
        "rollout": {f"quadruped N={n}": {"num_envs": n, **run}},
        "figures": figures,
    }


# ----------------------------------------------------------------------------
# command line
# ----------------------------------------------------------------------------
def machine() -> dict:
    import mujoco
    import torch

    return _common.machine(
        {"mujoco": mujoco.__version__, "mujoco_warp": _common.package_version("mujoco-warp")},
        {
            "gymnasium": _common.package_version("gymnasium"),
            "cuda": torch.cuda.is_available(),
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        },
    )


def report(result: dict) -> None:
    m, st = result["machine"], result["settings"]
    header = (
        f"[bold]bench_overhead[/bold]  cpus={m['cpu_count']} ({m['cpu_model']})  mujoco {m['mujoco']}  "
        f"torch {m['torch']}  gpu {m['gpu']}  device={st['device']}  rounds={st['rounds']}  quick={st['quick']}"
    )

    def diff_rows(table: Any, sections: dict, console: Any) -> None:
        for name, data in sections.items():
            for case, c in data.get("cases", {}).items():
                for key, d in c.items():
                    if key.startswith("diff_us_"):
                        ours, base = key.removeprefix("diff_us_").split("_vs_")
                        us = f"{d['median']:.1f} µs ({d['min']:.1f}..{d['max']:.1f})"
                        table.add_row(name, case, f"{ours} - {base}", f"{d['median'] / 1e3:.4f}", "", "", us)

    _common.print_tables(result, header, "the µs differences are then noisier.", extra_variant_rows=diff_rows)


BENCHES: dict[str, Callable[[Settings], dict]] = {
    "cpu_n1": bench_cpu_n1,
    "cpu_n1024": bench_cpu_n1024,
    "task": bench_task,
    "gpu": bench_gpu,
}


def _device(text: str) -> str:
    if not re.fullmatch(r"cpu|cuda(:\d+)?", text):
        raise argparse.ArgumentTypeError(f"expected cpu, cuda or cuda:i, got {text!r}")
    return text


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--n",
        type=_common.positive_int,
        nargs="+",
        metavar="N",
        help="world counts of the gpu section (default: 1024 4096 16384; quick: 1024)",
    )
    p.add_argument(
        "--device", type=_device, default="cpu", help="cuda or cuda:i runs the gpu section (default cpu: skipped)"
    )
    p.add_argument(
        "--gpu-model",
        choices=[m for m, _ in bench_mjwarp.MODELS],
        default=ARM,
        help="model of the gpu section's backend / bare loop figures (default arm7)",
    )


def _configure(args: argparse.Namespace) -> None:
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            print(
                f"bench_overhead.py: --device {args.device}: no CUDA device here "
                f"(torch {torch.__version__}: torch.cuda.is_available() is False)",
                file=sys.stderr,
            )
            raise SystemExit(2)
    _SIZES[:] = args.n or []
    _DEVICE[0] = args.device
    _GPU_MODEL[0] = (args.gpu_model, dict(bench_mjwarp.MODELS)[args.gpu_model])


def main(argv: list[str] | None = None) -> int:
    return _common.main(
        argv,
        description=__doc__.split("\n\n")[0],
        sections=BENCHES,
        settings=Settings,
        default_out=DEFAULT_OUT,
        quick_help="3 short rounds, gpu at N = 1024: a smoke check",
        machine_info=machine,
        report=report,
        add_arguments=_arguments,
        configure=_configure,
    )


if __name__ == "__main__":
    sys.exit(main())
