#!/usr/bin/env python
"""Side-by-side performance benchmark of the MuJoCo backend.

Every measurement compares variants in ONE process run: the variants of a
measurement are interleaved (the order rotates each round), each round times a
block of calls per variant, and the reported figures are medians over rounds.
Ratios are medians of the per-round ratios (paired, so that a slow moment of
the shared machine hits both sides of a ratio alike).

Sections (``--only NAME`` runs one):

* ``step``     backend ``step(ctrl, k)`` + ``get_qpos()`` + one body's pose vs
               raw ``mujoco.batch.Batch`` doing the same work (N = 1024 arm7,
               k = 1 and 4); target >= 0.9x.
* ``jacobian`` ``get_site_jacobian_w(ee_site, arm dofs)`` per call as a
               fraction of one ``step(nsteps=1)`` (N = 1024 arm7); target <= 10 %.
* ``threads``  backend step throughput at nthread=2 vs nthread=1 (N = 1024
               arm7, nsteps=4); target >= 1.8x.
* ``ant``      gymnasium ``Ant-v5`` in ``SyncVectorEnv`` (64 envs) vs the backend
               on gymnasium's ant.xml (N = 64, nsteps = 5); target >= 2.5x.
* ``memory``   resident memory per env at N = 4096 (arm7), from two fresh
               subprocesses; target <= 1 MB.
* ``dr_init``  ``apply_init_randomization`` of a 6-term plan (masses with
               inertias, geom friction, kp, kv, joint damping, gravity) at
               N = 1024 arm7; target <= 50 ms.
* ``dr_step``  step throughput with every per-env model field randomized
               (mass, centre of mass, inertia, friction, kp, kv, damping,
               armature, frictionloss, gravity; each scaled or offset) vs
               none (N = 1024 arm7, nsteps = 4); target >= 0.95x. Informational:
               frictionloss added where arm7 has none (new constraint rows:
               a physics cost, not the mechanism's).

Usage::

    python benchmarks/bench_mujoco.py            # full run, a few minutes
    python benchmarks/bench_mujoco.py --quick    # smoke check, < 60 s
    python benchmarks/bench_mujoco.py --only step --out /tmp/step.json

The JSON (default ``benchmarks/results/mujoco.json``) holds the machine
description, the parameters, every variant's per-round samples and medians, and
the figures with their targets. See benchmarks/README.md.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import _common
from _common import (
    ARM,
    ARM_BODY,
    BaseSettings,
    Call,
    arm_ctrls,
    figure,
    interleaved,
    make_arm_backend,
    median,
    package_version,
    paired_ratio,
    variant,
)

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "mujoco.json"

ARM_SITE = "ee_site"  # the site of the Jacobian section
ARM_JOINTS = tuple(f"joint{i}" for i in range(1, 8))


# ----------------------------------------------------------------------------
# settings
# ----------------------------------------------------------------------------
class Settings(BaseSettings):
    """Rounds and block lengths of a run (``--quick`` shrinks them), and the sizes of each section."""

    def __init__(self, quick: bool):
        super().__init__(quick)
        self.n_arm = 1024
        self.n_ant = 64
        self.n_mem = 4096
        self.mem_steps = 3
        self.mem_repeats = 1 if quick else 2


# ----------------------------------------------------------------------------
# shared construction
# ----------------------------------------------------------------------------
def _make_backend(model: Any, n: int, **options: Any):
    import simbackend

    return simbackend.make_backend("mujoco", model, n, **options)


def _make_arm_backend(n: int, **options: Any):
    return make_arm_backend("mujoco", n, **options)


def _arm_at_home(n: int, **options: Any):
    """An arm7 backend with every env at keyframe "home" (arm bent above the table, cube at rest)."""
    return _common.arm_at_home("mujoco", n, **options)


def _raw_arm_batch(n: int, nthread: int, *fields: str):
    """A raw ``mujoco.batch.Batch`` of arm7 at keyframe "home", and its bound ``fields``."""
    import mujoco
    from mujoco import batch as mjbatch

    from simbackend.models import compile_model

    model = compile_model(ARM)
    b = mjbatch.Batch(model, n, nthread=nthread)
    b.reset(keyframe=model.key("home").id, stage=int(mujoco.mjtStage.mjSTAGE_VEL))
    return (b, *(b.bind(f) for f in fields))


def _default_nthread() -> int:
    return os.cpu_count() or 1


# ----------------------------------------------------------------------------
# section 1: backend step + getters vs raw batch
# ----------------------------------------------------------------------------
def bench_step(s: Settings) -> dict:
    import mujoco
    import torch

    n, nthread = s.n_arm, _default_nthread()
    vel = int(mujoco.mjtStage.mjSTAGE_VEL)
    ctrls = arm_ctrls(n, seed=1)
    cases = {}
    for k in (1, 4):
        # fresh simulations per case, all from keyframe "home"
        sim = _arm_at_home(n, nthread=nthread)
        body = sim.get_body_ids(ARM_BODY)
        bid = int(body[0])

        def backend_call(i: int, sim=sim, body=body, k=k) -> None:
            sim.step(ctrls[i % len(ctrls)], nsteps=k)
            sim.get_qpos()
            sim.get_body_pos_w(body)
            sim.get_body_quat_w(body)

        def make_raw(stage: int, k=k, bid=bid) -> Call:
            b, ctrl, qpos, xpos, xquat = _raw_arm_batch(n, nthread, "ctrl", "qpos", "xpos", "xquat")
            sl = slice(bid, bid + 1)  # (N, 1, 3) like the backend's (N, B, 3)

            def call(i: int) -> None:
                ctrl[...] = ctrls[i % len(ctrls)].numpy()
                b.step(nstep=k, stage=stage)
                torch.from_numpy(qpos.astype(np.float32))
                torch.from_numpy(xpos[:, sl].astype(np.float32))
                torch.from_numpy(xquat[:, sl].astype(np.float32))

            return call

        calls = {"backend": backend_call, "raw_vel": make_raw(vel), "raw_none": make_raw(0)}
        samples, iters = interleaved(calls, s)
        sim.close()
        work, unit = n * k, "env-substeps/s"
        ratio = paired_ratio(samples["raw_vel"], samples["backend"])  # throughput backend / raw
        cases[f"nsteps={k}"] = {
            "nsteps": k,
            "variants": {
                "backend": variant(
                    samples["backend"], work, unit, iters, "step(ctrl,k) + get_qpos + get_body_pos_w/quat_w(1 body)"
                ),
                "raw_vel": variant(
                    samples["raw_vel"], work, unit, iters, "Batch.step(nstep=k, stage=VEL) + same float32 copies"
                ),
                "raw_none": variant(
                    samples["raw_none"], work, unit, iters, "Batch.step(nstep=k, stage=0) + same copies (info)"
                ),
            },
            "ratio_backend_vs_raw_vel": ratio,
            "ratio_backend_vs_raw_none": paired_ratio(samples["raw_none"], samples["backend"]),
            "ratio_raw_vel_vs_raw_none": paired_ratio(samples["raw_none"], samples["raw_vel"]),
            "figure": figure(
                f"step k={k}: backend / raw batch (same stage)",
                ratio["median"],
                0.9,
                ">=",
                "x",
                (ratio["min"], ratio["max"]),
            ),
        }
    return {
        "params": {"model": ARM, "num_envs": n, "nthread": nthread, "body": ARM_BODY, "start": "keyframe home"},
        "cases": cases,
        "figures": [c["figure"] for c in cases.values()],
    }


# ----------------------------------------------------------------------------
# section 2: site Jacobian vs one step
# ----------------------------------------------------------------------------
def bench_jacobian(s: Settings) -> dict:
    import torch

    n, nthread = s.n_arm, _default_nthread()
    sim = _arm_at_home(n, nthread=nthread)
    site = int(sim.get_site_ids(ARM_SITE)[0])
    cols = sim.get_joint_qvel_indices(list(ARM_JOINTS))
    ctrls = arm_ctrls(n, seed=2)

    # the raw Jacobian, informational: Batch.jac at the site point + column slice + float32
    raw, site_xpos = _raw_arm_batch(n, nthread, "site_xpos")
    raw.forward()  # site_xpos was bound after the reset: compute it
    site_body = int(raw.model.site_bodyid[site])
    cols_np = cols.numpy()

    # The backend computes derived quantities (poses, velocities) on the first read after a step.
    # A controller that uses a site Jacobian also reads the site pose (its error term), so "one step"
    # here is step(nsteps=1) plus that read, which runs the deferred stages; the Jacobian then costs
    # only itself. "cold" variants, informational, show the other accounting: a Jacobian that is the
    # first read after a bare step pays for the deferred stages itself.
    sim_cold = _arm_at_home(n, nthread=nthread)

    def step_call(i: int) -> None:
        sim.step(ctrls[i % len(ctrls)], nsteps=1)
        sim.get_site_pos_w(site)

    def jac_call(i: int) -> None:
        sim.get_site_jacobian_w(site, cols)

    def raw_jac_call(i: int) -> None:
        jp, jr = raw.jac(site_body, site_xpos[:, site])
        torch.from_numpy(jp[:, :, cols_np].astype(np.float32))
        torch.from_numpy(jr[:, :, cols_np].astype(np.float32))

    def bare_step_call(i: int) -> None:
        sim_cold.step(ctrls[i % len(ctrls)], nsteps=1)

    def bare_step_jac_call(i: int) -> None:
        sim_cold.step(ctrls[i % len(ctrls)], nsteps=1)
        sim_cold.get_site_jacobian_w(site, cols)

    calls = {
        "step1": step_call,
        "jacobian": jac_call,
        "raw_jac": raw_jac_call,
        "bare_step": bare_step_call,
        "bare_step_jac": bare_step_jac_call,
    }
    samples, iters = interleaved(calls, s)
    sim.close()
    sim_cold.close()
    frac = paired_ratio(samples["jacobian"], samples["step1"])
    cold = [(sj - sb) / sb for sj, sb in zip(samples["bare_step_jac"], samples["bare_step"])]
    return {
        "params": {"model": ARM, "num_envs": n, "nthread": nthread, "site": ARM_SITE, "dofs": list(ARM_JOINTS)},
        "variants": {
            "step1": variant(
                samples["step1"],
                1,
                "calls/s",
                iters,
                "step(ctrl, nsteps=1) + get_site_pos_w (runs the deferred stages)",
            ),
            "jacobian": variant(
                samples["jacobian"], 1, "calls/s", iters, "get_site_jacobian_w(ee_site, 7 arm dofs), pose current"
            ),
            "raw_jac": variant(samples["raw_jac"], 1, "calls/s", iters, "Batch.jac + column slice + float32 (info)"),
            "bare_step": variant(samples["bare_step"], 1, "calls/s", iters, "step(ctrl, nsteps=1) alone (info)"),
            "bare_step_jac": variant(
                samples["bare_step_jac"], 1, "calls/s", iters, "step(ctrl, nsteps=1) + cold get_site_jacobian_w (info)"
            ),
        },
        "fraction_jacobian_of_step": frac,
        "fraction_raw_jac_of_step": paired_ratio(samples["raw_jac"], samples["step1"]),
        "fraction_cold_jacobian_of_bare_step": float(np.median(cold)),
        "figures": [
            figure(
                "jacobian time / step(nsteps=1) time",
                frac["median"],
                0.10,
                "<=",
                "fraction",
                (frac["min"], frac["max"]),
                note="step includes its deferred stages",
            )
        ],
    }


# ----------------------------------------------------------------------------
# section 3: thread scaling
# ----------------------------------------------------------------------------
def bench_threads(s: Settings) -> dict:
    import mujoco

    n, k = s.n_arm, 4
    vel = int(mujoco.mjtStage.mjSTAGE_VEL)
    ctrls = arm_ctrls(n, seed=3)
    ctrl_np = [c.numpy() for c in ctrls]
    sims = {nt: _arm_at_home(n, nthread=nt) for nt in (1, 2)}

    def backend_call(nt: int) -> Call:
        sim = sims[nt]

        def call(i: int) -> None:
            sim.step(ctrls[i % len(ctrls)], nsteps=k)

        return call

    def raw_call(nt: int) -> Call:
        b, ctrl = _raw_arm_batch(n, nt, "ctrl")

        def call(i: int) -> None:
            ctrl[...] = ctrl_np[i % len(ctrl_np)]
            b.step(nstep=k, stage=vel)

        return call

    calls = {
        "backend_nt1": backend_call(1),
        "backend_nt2": backend_call(2),
        "raw_nt1": raw_call(1),
        "raw_nt2": raw_call(2),
    }
    samples, iters = interleaved(calls, s)
    for sim in sims.values():
        sim.close()
    speedup = paired_ratio(samples["backend_nt1"], samples["backend_nt2"])
    raw_speedup = paired_ratio(samples["raw_nt1"], samples["raw_nt2"])
    work, unit = n * k, "env-substeps/s"
    labels = {
        "backend_nt1": "backend step(ctrl, 4), nthread=1",
        "backend_nt2": "backend step(ctrl, 4), nthread=2",
        "raw_nt1": "Batch.step(4, stage=VEL), nthread=1 (info)",
        "raw_nt2": "Batch.step(4, stage=VEL), nthread=2 (info)",
    }
    return {
        "params": {
            "model": ARM,
            "num_envs": n,
            "nsteps": k,
            "cpu_count": os.cpu_count(),
            "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        },
        "variants": {name: variant(samples[name], work, unit, iters, labels[name]) for name in calls},
        "speedup_backend": speedup,
        "speedup_raw": raw_speedup,
        "figures": [
            figure(
                "backend step throughput nthread=2 / nthread=1",
                speedup["median"],
                1.8,
                ">=",
                "x",
                (speedup["min"], speedup["max"]),
                note=f"raw batch: {raw_speedup['median']:.2f}x",
            )
        ],
    }


# ----------------------------------------------------------------------------
# section 4: gymnasium Ant-v5 vs the backend on ant.xml
# ----------------------------------------------------------------------------
def _gym_assets() -> Path:
    spec = importlib.util.find_spec("gymnasium")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("gymnasium is not installed (pip install 'simbackend[bench]')")
    return Path(list(spec.submodule_search_locations)[0]) / "envs" / "mujoco" / "assets"


def bench_ant(s: Settings) -> dict:
    import mujoco
    import torch

    n, frame_skip = s.n_ant, 5
    # Ant-v5's episode rules, applied alike to every variant so that all simulate the same kind of
    # episodes (an ant that is never reset ends up on its back, with other contacts and another cost)
    z_lo, z_hi, noise, max_steps = 0.2, 1.0, 0.1, 1000
    ant_xml = _gym_assets() / "ant.xml"
    notes: list[str] = []

    peer = "gym_sync"
    gym_error = None
    envs = None
    try:
        import gymnasium as gym

        probe = gym.make("Ant-v5")
        probe.reset(seed=0)
        probe.step(probe.action_space.sample())
        u = probe.unwrapped
        rules = (u.frame_skip, tuple(u._healthy_z_range), u._reset_noise_scale, probe.spec.max_episode_steps)
        if rules != (frame_skip, (z_lo, z_hi), noise, max_steps):
            notes.append(
                f"Ant-v5's (frame_skip, healthy_z_range, reset_noise_scale, max_episode_steps) are {rules},"
                f" not {(frame_skip, (z_lo, z_hi), noise, max_steps)} as the other variants assume"
            )
        probe.close()
        envs = gym.vector.SyncVectorEnv([lambda: gym.make("Ant-v5") for _ in range(n)])
        envs.reset(seed=0)
        envs.action_space.seed(0)
    except Exception as e:  # noqa: BLE001 - report why and fall back
        gym_error = f"{type(e).__name__}: {e}"
        notes.append(
            f"gymnasium.make('Ant-v5') failed ({gym_error}); the peer is the fallback: a hand-written"
            f" loop over {n} MjData with mj_step x{frame_skip}"
        )
        peer = "mjdata_loop"

    resets = {"backend": 0, "gym_sync": 0, "mjdata_loop": 0}
    env_steps = {"backend": 0, "gym_sync": 0, "mjdata_loop": 0}

    def gym_call(i: int) -> None:
        _, _, terminated, truncated, _ = envs.step(envs.action_space.sample())
        resets["gym_sync"] += int(np.count_nonzero(terminated | truncated))
        env_steps["gym_sync"] += n

    # a plain Python loop over MjData: the engine without gymnasium (informational, or the fallback peer)
    model = mujoco.MjModel.from_xml_path(str(ant_xml))
    init_qpos, init_qvel = model.qpos0.copy(), np.zeros(model.nv)
    rng = np.random.default_rng(0)
    datas = [mujoco.MjData(model) for _ in range(n)]
    loop_t = np.zeros(n, np.int64)

    def loop_reset(d: mujoco.MjData) -> None:
        d.qpos[:] = init_qpos + rng.uniform(-noise, noise, model.nq)
        d.qvel[:] = init_qvel + noise * rng.standard_normal(model.nv)
        mujoco.mj_forward(model, d)

    for d in datas:
        loop_reset(d)
    lo, hi = model.actuator_ctrlrange.T.copy()

    def loop_call(i: int) -> None:
        act = rng.uniform(lo, hi, size=(n, lo.size))
        loop_t[:] += 1
        for j, (d, a) in enumerate(zip(datas, act)):
            d.ctrl[:] = a
            mujoco.mj_step(model, d, nstep=frame_skip)
            qpos, _ = d.qpos.copy(), d.qvel.copy()
            if not z_lo <= qpos[2] <= z_hi or loop_t[j] >= max_steps:
                loop_reset(d)
                loop_t[j] = 0
                resets["mjdata_loop"] += 1
        env_steps["mjdata_loop"] += n

    sim = _make_backend(str(ant_xml), n)  # default nthread: all cores
    t_lo = torch.as_tensor(lo, dtype=torch.float32)
    t_span = torch.as_tensor(hi - lo, dtype=torch.float32)
    gen = torch.Generator().manual_seed(0)
    t_init_qpos = torch.as_tensor(init_qpos, dtype=torch.float32)
    t_init_qvel = torch.as_tensor(init_qvel, dtype=torch.float32)
    sim_t = torch.zeros(n, dtype=torch.int64)

    def backend_reset(ids: torch.Tensor) -> None:
        k = ids.numel()
        qpos = t_init_qpos + noise * (2 * torch.rand((k, sim.nq), generator=gen) - 1)
        qvel = t_init_qvel + noise * torch.randn((k, sim.nv), generator=gen)
        sim.set_state(ids, qpos, qvel)
        sim_t[ids] = 0

    backend_reset(torch.arange(n))

    def backend_call(i: int) -> None:
        act = t_lo + t_span * torch.rand((n, t_lo.numel()), generator=gen)
        sim.step(act, nsteps=frame_skip)
        qpos, _ = sim.get_qpos(), sim.get_qvel()
        sim_t.add_(1)
        z = qpos[:, 2]
        done = (z < z_lo) | (z > z_hi) | (sim_t >= max_steps)
        if done.any():
            ids = torch.nonzero(done)[:, 0]
            backend_reset(ids)
            resets["backend"] += ids.numel()
        env_steps["backend"] += n

    calls: dict[str, Call] = {"backend": backend_call}
    if envs is not None:
        calls["gym_sync"] = gym_call
    calls["mjdata_loop"] = loop_call
    samples, iters = interleaved(calls, s)
    nthread = sim.engine.nthread
    sim.close()
    if envs is not None:
        envs.close()
    speedup = paired_ratio(samples[peer], samples["backend"])
    labels = {
        "backend": f"backend, ant.xml: step(ctrl, {frame_skip}) + get_qpos/qvel + episode resets",
        "gym_sync": f"SyncVectorEnv({n} x Ant-v5).step(action_space.sample())",
        "mjdata_loop": f"{n} MjData: mj_step x{frame_skip} + qpos/qvel copies + episode resets"
        + (" (fallback peer)" if peer == "mjdata_loop" else " (info)"),
    }
    return {
        "params": {
            "model": str(ant_xml),
            "num_envs": n,
            "nsteps": frame_skip,
            "backend_nthread": nthread,
            "peer": peer,
            "gym_error": gym_error,
            "episode_rules": {
                "healthy_z_range": [z_lo, z_hi],
                "reset_noise_scale": noise,
                "max_episode_steps": max_steps,
            },
        },
        "variants": {name: variant(samples[name], n, "env-steps/s", iters, labels[name]) for name in calls},
        # resets per 1000 env-steps, to show that the variants simulate comparable episodes
        "resets_per_1000_env_steps": {k: 1000 * resets[k] / env_steps[k] for k in calls if env_steps[k]},
        "speedup_backend_vs_peer": speedup,
        "speedup_backend_vs_mjdata_loop": paired_ratio(samples["mjdata_loop"], samples["backend"]),
        "notes": notes,
        "figures": [
            figure(f"backend / {peer} env-steps/s", speedup["median"], 2.5, ">=", "x", (speedup["min"], speedup["max"]))
        ],
    }


# ----------------------------------------------------------------------------
# section 5: resident memory per env
# ----------------------------------------------------------------------------
_MEMORY_CHILD = r"""
import json, os, sys
import numpy as np
import torch, mujoco
import simbackend

def rss():
    try:
        import psutil
        return psutil.Process().memory_info().rss, "psutil"
    except ImportError:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE"), "/proc/self/statm"

n, steps, model, body = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
after_import, source = rss()
sim = simbackend.make_backend("mujoco", model, n)
ids = sim.get_body_ids(body)
ctrl = torch.zeros((n, sim.num_actuators))
for _ in range(steps):
    sim.step(ctrl, nsteps=4)
    sim.get_qpos(); sim.get_qvel()
    sim.get_body_pos_w(ids); sim.get_body_quat_w(ids)
after_step, _ = rss()
state_bytes = int(sim.engine.batch.state.nbytes) if hasattr(sim, "batch") else None
print(json.dumps({"n": n, "rss_after_import": after_import, "rss": after_step, "source": source,
                  "state_bytes": state_bytes}))
"""


def _memory_child(n: int, s: Settings) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _MEMORY_CHILD, str(n), str(s.mem_steps), ARM, ARM_BODY],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"memory child (N={n}) failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_memory(s: Settings) -> dict:
    _make_arm_backend(1).close()  # waits for the model file if it is not there yet
    small, large = [], []
    for _ in range(s.mem_repeats):  # alternate, so both see the same machine state
        small.append(_memory_child(1, s))
        large.append(_memory_child(s.n_mem, s))
    rss1 = median([c["rss"] for c in small])
    rssn = median([c["rss"] for c in large])
    per_env_mb = (rssn - rss1) / (s.n_mem - 1) / 1e6
    state_per_env = large[0]["state_bytes"] / s.n_mem if large[0]["state_bytes"] else None
    return {
        "params": {
            "model": ARM,
            "num_envs": s.n_mem,
            "steps": s.mem_steps,
            "repeats": s.mem_repeats,
            "rss_source": small[0]["source"],
            "mb": "10^6 bytes",
        },
        "rss_1_env_bytes": rss1,
        "rss_n_env_bytes": rssn,
        "rss_after_import_bytes": median([c["rss_after_import"] for c in small + large]),
        "batch_state_bytes_per_env": state_per_env,
        "children": {"n1": small, f"n{s.n_mem}": large},
        "figures": [figure(f"resident memory per env at N={s.n_mem}", per_env_mb, 1.0, "<=", "MB")],
    }


# ----------------------------------------------------------------------------
# machine description, output
# ----------------------------------------------------------------------------
def machine() -> dict:
    import mujoco

    return _common.machine({"mujoco": mujoco.__version__}, {"gymnasium": package_version("gymnasium")})


def _variant_rows(var: Any, sec: dict, console: Any) -> None:
    if "memory" in sec and "error" not in sec["memory"]:
        mem = sec["memory"]
        var.add_row("memory", "N=1", "rss", "", f"{mem['rss_1_env_bytes'] / 2**20:.1f}", "MiB", "fresh process, 1 env")
        var.add_row(
            "memory",
            f"N={mem['params']['num_envs']}",
            "rss",
            "",
            f"{mem['rss_n_env_bytes'] / 2**20:.1f}",
            "MiB",
            f"fresh process, {mem['params']['num_envs']} envs",
        )


def _figure_rows(figs: Any, sec: dict, console: Any) -> None:
    if "step" in sec and "cases" in sec["step"]:
        for case, c in sec["step"]["cases"].items():
            figs.add_row(
                "step",
                f"{case}: backend / raw batch without stage (info)",
                f"{c['ratio_backend_vs_raw_none']['median']:.3f} x",
                "",
                "",
                "",
                "",
            )
            figs.add_row(
                "step",
                f"{case}: raw stage=VEL / raw stage=0 (cost of current getters)",
                f"{c['ratio_raw_vel_vs_raw_none']['median']:.3f} x",
                "",
                "",
                "",
                "",
            )
    if "jacobian" in sec and "fraction_raw_jac_of_step" in sec["jacobian"]:
        figs.add_row(
            "jacobian",
            "raw Batch.jac time / backend step time (info)",
            f"{sec['jacobian']['fraction_raw_jac_of_step']['median']:.3f}",
            "",
            "",
            "",
            "",
        )
        figs.add_row(
            "jacobian",
            "cold jacobian (first read after a step, pays the deferred stages) / bare step (info)",
            f"{sec['jacobian']['fraction_cold_jacobian_of_bare_step']:.3f}",
            "",
            "",
            "",
            "",
        )
    if "ant" in sec and "speedup_backend_vs_mjdata_loop" in sec["ant"]:
        figs.add_row(
            "ant",
            "backend / MjData loop env-steps/s (info)",
            f"{sec['ant']['speedup_backend_vs_mjdata_loop']['median']:.3f} x",
            "",
            "",
            "",
            "",
        )
        r = sec["ant"].get("resets_per_1000_env_steps", {})
        figs.add_row(
            "ant",
            "episode resets per 1000 env-steps (info)",
            ", ".join(f"{k} {v:.1f}" for k, v in r.items()),
            "",
            "",
            "",
            "",
        )
        for note in sec["ant"].get("notes", []):
            console.print(f"[yellow]ant:[/yellow] {note}")


def print_tables(result: dict) -> None:
    m = result["machine"]
    header = (
        f"[bold]bench_mujoco[/bold]  cpus={m['cpu_count']} ({m['cpu_model']})  mujoco {m['mujoco']}  "
        f"torch {m['torch']}  numpy {m['numpy']}  gymnasium {m['gymnasium']}  "
        f"rounds={result['settings']['rounds']}  quick={result['settings']['quick']}"
    )
    _common.print_tables(
        result, header, "figures that need free cores (threads, ant) are then understated.", _variant_rows, _figure_rows
    )


# ----------------------------------------------------------------------------
# sections 6 and 7: domain randomization
# ----------------------------------------------------------------------------
def _dr_plan(every_field: bool, add_frictionloss: bool = False):
    from simbackend.randomization import Distribution as D
    from simbackend.randomization import RandomizationPlan, Term

    scale = D.uniform(0.8, 1.2)
    terms = [
        Term("body_mass", scale, scale_inertia=True),
        Term("geom_friction", scale),
        Term("actuator_kp", scale),
        Term("actuator_kv", scale),
        Term("joint_damping", D.uniform(0.5, 2.0)),
        Term("gravity", D.uniform(-0.2, 0.2)),
    ]
    if every_field:
        terms += [
            Term("body_com", D.uniform(-0.005, 0.005)),
            Term("joint_armature", D.uniform(0.9, 1.1)),
            Term(
                "joint_frictionloss",
                D.uniform(0.0, 0.01) if add_frictionloss else scale,
                operation="add" if add_frictionloss else "scale",
            ),
        ]
    return RandomizationPlan(tuple(terms), seed=11)


def bench_dr_init(s: Settings) -> dict:
    n, nthread = s.n_arm, _default_nthread()
    sim = _arm_at_home(n, nthread=nthread)
    plan = _dr_plan(every_field=False)
    samples, iters = interleaved({"init": lambda i: sim.apply_init_randomization(plan)}, s)
    sim.close()
    ms = median(samples["init"]) * 1e3
    return {
        "params": {"model": ARM, "num_envs": n, "terms": len(plan.terms), "plan": plan.to_dict()},
        "variants": {
            "init": variant(samples["init"], n, "envs/s", iters, f"apply_init_randomization({len(plan.terms)} terms)")
        },
        "figures": [
            figure(
                f"init plan, {len(plan.terms)} terms, N = {n}",
                ms,
                50.0,
                "<=",
                "ms",
                (min(samples["init"]) * 1e3, max(samples["init"]) * 1e3),
            )
        ],
    }


def bench_dr_step(s: Settings) -> dict:
    n, nthread, k = s.n_arm, _default_nthread(), 4
    ctrls = arm_ctrls(n, seed=5)
    plain = _arm_at_home(n, nthread=nthread)
    randomized = _arm_at_home(n, nthread=nthread)
    plan = _dr_plan(every_field=True)
    randomized.apply_init_randomization(plan)
    # informational: frictionloss where arm7 has none adds dry-friction constraint rows, a physics cost
    frictional = _arm_at_home(n, nthread=nthread)
    frictional.apply_init_randomization(_dr_plan(every_field=True, add_frictionloss=True))

    def call(sim: Any) -> Call:
        def step(i: int) -> None:
            sim.step(ctrls[i % len(ctrls)], nsteps=k)
            sim.get_qpos()

        return step

    samples, iters = interleaved(
        {"randomized": call(randomized), "plain": call(plain), "added_frictionloss": call(frictional)}, s
    )
    for sim in (plain, randomized, frictional):
        sim.close()
    ratio = paired_ratio(samples["plain"], samples["randomized"])  # throughput randomized / plain (s per call)
    work, unit = n * k, "env-substeps/s"
    return {
        "params": {"model": ARM, "num_envs": n, "nthread": nthread, "nsteps": k, "terms": len(plan.terms)},
        "variants": {
            "plain": variant(samples["plain"], work, unit, iters, "step(ctrl, 4) + get_qpos, no DR"),
            "randomized": variant(
                samples["randomized"], work, unit, iters, f"same, every model field per env ({len(plan.terms)} terms)"
            ),
            "added_frictionloss": variant(
                samples["added_frictionloss"],
                work,
                unit,
                iters,
                "same, frictionloss added where the model has none (info)",
            ),
        },
        "ratio_randomized_vs_plain": ratio,
        "ratio_added_frictionloss_vs_plain": paired_ratio(samples["plain"], samples["added_frictionloss"]),
        "figures": [
            figure(
                "step with every field randomized / none",
                ratio["median"],
                0.95,
                ">=",
                "x",
                (ratio["min"], ratio["max"]),
            )
        ],
    }


BENCHES: dict[str, Callable[[Settings], dict]] = {
    "step": bench_step,
    "jacobian": bench_jacobian,
    "threads": bench_threads,
    "ant": bench_ant,
    "memory": bench_memory,
    "dr_init": bench_dr_init,
    "dr_step": bench_dr_step,
}


def main(argv: list[str] | None = None) -> int:
    return _common.main(
        argv,
        description=__doc__.split("\n\n")[0],
        sections=BENCHES,
        settings=Settings,
        default_out=DEFAULT_OUT,
        quick_help="few rounds and short blocks: a smoke check (< 60 s)",
        machine_info=machine,
        report=print_tables,
    )


if __name__ == "__main__":
    sys.exit(main())
