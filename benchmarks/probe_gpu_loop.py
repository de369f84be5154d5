#!/usr/bin/env python
"""The RL loop on a GPU backend with the host out of it: host syncs, throughput, graph capture.

Runs what a training iteration's collection does, ``--iterations`` times
``--steps`` policy steps: a policy forward (an MLP), ``Task.step`` (controller,
physics, observations, rewards, terminations) and the reset of the envs whose
episode ended, by mask (``Task.reset(done)``, what the rsl-rl adapter does on a
backend with deferred checks). Episodes start staggered so that envs end theirs
at every step. Three passes:

1. ``count``: a few iterations under :func:`simbackend.host_reads.count_host_reads`
   (``cpu_tensors=False`` on a GPU: only reads of device tensors), by site;
2. ``sync_debug``: every iteration under ``torch.cuda.set_sync_debug_mode``
   (``"error"``: the first synchronising call raises; then the rest runs under
   ``"warn"`` so that every site is named), with the rollout's throughput;
3. ``profile``: the backend's ``step`` + getters against ``bench_mjwarp``'s
   bare loop on the quadruped, and the functions holding its Python time;
4. ``graph``: whether :class:`simbackend.graphs.CapturedStep` captures the
   whole RL step (``Task.step`` and the resets) in a CUDA graph, and if so,
   replay against the same calls made eagerly, per step and in how far the two
   runs' observations drift apart (the reason when it cannot).

On the CPU (``--device cpu``, with ``deferred_checks=True``) passes 1 and 3
run as a smoke check (pass 2 and the graph need CUDA).

Usage::

    python benchmarks/probe_gpu_loop.py --device cuda --n 4096 --iterations 100
    python benchmarks/probe_gpu_loop.py --device cpu --n 8 --iterations 2 --steps 4   # smoke

Writes JSON (default ``benchmarks/results/gpu_loop.json``).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # bench_mjwarp, for the profile pass
DEFAULT_OUT = HERE / "results" / "gpu_loop.json"

if not os.environ.get("MUJOCO_GL"):
    os.environ["MUJOCO_GL"] = "egl"


def _policy(task: Any, device: Any) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(task.observation_size, 256),
        torch.nn.ELU(),
        torch.nn.Linear(256, 128),
        torch.nn.ELU(),
        torch.nn.Linear(128, task.action_dim),
    ).to(device)


def _step(task: Any, policy: Any, state: dict) -> None:
    """One policy step of every env and the resets of the done envs (by mask: no host read)."""
    with torch.no_grad():
        action = torch.tanh(policy(state["obs"]))
        out = task.step(action)
        done = out.terminated | out.truncated
        state["obs"] = task.flatten(task.reset(done))


def _site(tb: list) -> str:
    for f in reversed(tb):
        if "simbackend" in f.filename or "probe_gpu_loop" in f.filename:
            return f"{f.filename.split('src/')[-1]}:{f.lineno} {f.name}"
    return f"{tb[-1].filename}:{tb[-1].lineno}" if tb else "?"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sim", default="mjwarp")
    p.add_argument("--task", default="quadruped")
    p.add_argument("--device", default="cuda")
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--iterations", type=int, default=100)
    p.add_argument("--steps", type=int, default=24, help="policy steps per iteration")
    p.add_argument("--count-iterations", type=int, default=3)
    p.add_argument("--profile-n", type=int, nargs="*", default=[4096], help="sizes of the profile pass (cuda)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    a = p.parse_args(argv)
    cuda = a.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        print(f"probe_gpu_loop.py: --device {a.device}: CUDA is not available", file=sys.stderr)
        return 2
    from simbackend.host_reads import count_host_reads
    from simbackend.tasks import make_task

    options = {} if cuda else {"deferred_checks": True}
    t0 = time.perf_counter()
    task = make_task(a.task, a.sim, a.n, seed=0, device=a.device, **options)
    length = task.max_episode_length
    task.episode_step.copy_(torch.arange(a.n, device=task.device) % length)  # staggered: resets at every step
    policy = _policy(task, task.device)
    state = {"obs": task.flatten(task.observe())}
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(3):  # warm-up: kernels compiled, graphs captured, caches filled
        _step(task, policy, state)
    sync()
    result: dict[str, Any] = {
        "sim": a.sim,
        "task": a.task,
        "device": a.device,
        "device_name": torch.cuda.get_device_name() if cuda else "cpu",
        "num_envs": a.n,
        "steps_per_iteration": a.steps,
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"),
        "deferred_checks": task.backend.deferred_checks,
        "build_and_warmup_s": time.perf_counter() - t0,
    }
    # 1. host reads by site
    with count_host_reads(cpu_tensors=not cuda) as reads:
        for _ in range(a.count_iterations * a.steps):
            _step(task, policy, state)
    sync()
    result["count"] = {
        "iterations": a.count_iterations,
        "host_reads": reads.total,
        "by_site": reads.by_site(),
    }
    print(f"[count] {reads.total} host reads over {a.count_iterations} iterations", flush=True)
    # 2. sync debug mode over every iteration, and the throughput
    if cuda:
        first_error = None
        warned: collections.Counter = collections.Counter()
        steps = a.iterations * a.steps
        done_steps = 0
        sync()
        t = time.perf_counter()
        torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(steps):
                _step(task, policy, state)
                done_steps += 1
        except RuntimeError as e:
            first_error = {
                "error": " ".join(str(e).split())[:300],
                "site": _site(traceback.extract_tb(e.__traceback__)),
            }
        finally:
            torch.cuda.set_sync_debug_mode(0)
        sync()
        seconds = time.perf_counter() - t
        if first_error is not None:  # the rest under "warn", every site named
            torch.cuda.set_sync_debug_mode("warn")
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                for _ in range(min(steps - done_steps, 2 * a.steps)):
                    _step(task, policy, state)
            torch.cuda.set_sync_debug_mode(0)
            for w in caught:
                warned[f"{Path(w.filename).name}:{w.lineno}"] += 1
        result["sync_debug"] = {
            "mode": "error",
            "policy_steps_without_error": done_steps,
            "policy_steps": steps,
            "passed": first_error is None,
            "first_error": first_error,
            "warn_sites": dict(warned.most_common()),
            "env_steps_per_s": done_steps * a.n / seconds if seconds > 0 else None,
            "seconds": seconds,
        }
        print(f"[sync_debug] {done_steps}/{steps} steps without a sync; {first_error}", flush=True)
    task.close()
    # 3. the backend's own cost against a bare loop, and where its Python time goes
    if cuda:
        for n in a.profile_n:
            result.setdefault("profile", {})[str(n)] = _profile(a.sim, n, a.device)
            p = result["profile"][str(n)]
            print(f"[profile] N={n}: backend/bare {p['ratio_backend_vs_bare']:.3f}, +{p['diff_ms']:.3f} ms", flush=True)
    # 4. CUDA graph capture of the whole RL step (simbackend.graphs.CapturedStep)
    if cuda:
        result["graph"] = _graph(lambda: make_task(a.task, a.sim, a.n, seed=0, device=a.device), policy, a.steps)
        print(f"[graph] {result['graph']}", flush=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"wrote {a.out}")
    return 0


def _profile(sim_name: str, n: int, device: str, calls: int = 60) -> dict:
    """The backend's ``step(ctrl, 1)`` + getters against ``bench_mjwarp.BareLoop`` doing the same work on the
    quadruped (both synchronised at the end of each call), and where the backend's Python time goes
    (cProfile, by own time)."""
    import cProfile
    import pstats

    import bench_mjwarp
    from simbackend.registry import make_backend

    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    sim, bare_sim = (make_backend(sim_name, "quadruped", n, device=device) for _ in range(2))
    try:
        body = sim.get_body_ids("torso")
        bare = bench_mjwarp.BareLoop(bare_sim, int(body[0]))
        ctrls = bench_mjwarp._ctrls(sim, n)

        def ours(i: int) -> None:
            sim.step(ctrls[i % len(ctrls)], 1)
            bench_mjwarp._reads(sim, body)
            sync()

        def theirs(i: int) -> None:
            bare(ctrls[i % len(ctrls)], 1)
            sync()

        times: dict[str, list[float]] = {"backend": [], "bare": []}
        for i in range(10):
            ours(i)
            theirs(i)
        for block in range(6):  # interleaved blocks of calls
            for name, fn in (
                (("backend", ours), ("bare", theirs)) if block % 2 == 0 else (("bare", theirs), ("backend", ours))
            ):
                t = time.perf_counter()
                for i in range(calls // 6):
                    fn(i)
                times[name].append((time.perf_counter() - t) / (calls // 6))
        prof = cProfile.Profile()
        prof.enable()
        for i in range(calls):
            ours(i)
        prof.disable()
        stats = pstats.Stats(prof)
        rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:25]  # type: ignore[attr-defined]
        top = [
            {
                "function": f"{Path(f).name}:{line} {name}",
                "calls": nc,
                "own_ms_per_step": tt * 1e3 / calls,
                "cumulative_ms_per_step": ct * 1e3 / calls,
            }  # fmt: skip
            for (f, line, name), (_, nc, tt, ct, _) in rows
        ]
        med = {k: sorted(v)[len(v) // 2] * 1e3 for k, v in times.items()}
        return {
            "num_envs": n,
            "ms_per_call": med,
            "ratio_backend_vs_bare": med["bare"] / med["backend"],
            "diff_ms": med["backend"] - med["bare"],
            "profile_top_own_time": top,
        }
    finally:
        sim.close()
        bare_sim.close()


def _graph(make: Any, policy: Any, steps: int) -> dict:
    """:class:`simbackend.graphs.CapturedStep` on a fresh task: captured or why not; if captured, replay
    against the same calls made eagerly on a twin task (same seed, same warm-up, same actions): time per
    step, and how far the twins' observations are apart after ``steps`` steps (MuJoCo Warp on a GPU is not
    bit-deterministic: atomic sums)."""
    from simbackend.graphs import CapturedStep

    graphed, twin = make(), make()
    try:
        t = time.perf_counter()
        step = CapturedStep(graphed)
        capture_s = time.perf_counter() - t
        if not step.captured:
            return {"captured": False, "reason": step.reason}
        eager = CapturedStep(twin, capture=False)
        for _ in range(3):  # the twin's warm-up: the same zero-action steps
            eager(torch.zeros(twin.num_envs, twin.action_dim, device=twin.device))
        obs_g = graphed.flatten(graphed.observe())
        obs_e = twin.flatten(twin.observe())
        start_gap = float((obs_g - obs_e).abs().max())
        with torch.no_grad():
            for _ in range(steps):
                a = torch.tanh(policy(obs_g))
                obs_g = graphed.flatten(step(a).obs).clone()
                obs_e = twin.flatten(eager(a).obs)
        torch.cuda.synchronize()
        gap = float((obs_g - obs_e).abs().max())
        step.synchronize()

        def timed(fn: Any, obs: torch.Tensor) -> float:
            torch.cuda.synchronize()
            t = time.perf_counter()
            with torch.no_grad():
                for _ in range(steps):
                    fn(torch.tanh(policy(obs)))
            torch.cuda.synchronize()
            return (time.perf_counter() - t) / steps

        replay_s, eager_s = timed(step, obs_g), timed(eager, obs_e)
        return {
            "captured": True,
            "capture_s": capture_s,
            "replay_ms_per_step": replay_s * 1e3,
            "eager_ms_per_step": eager_s * 1e3,
            "speedup": eager_s / replay_s,
            "obs_gap_at_start": start_gap,
            f"obs_gap_after_{steps}_steps": gap,
        }
    except Exception as e:  # noqa: BLE001 - the failure is the result
        return {"captured": None, "error": f"{type(e).__name__}: {' '.join(str(e).split())[:300]}",
                "site": _site(traceback.extract_tb(e.__traceback__))}  # fmt: skip
    finally:
        graphed.close()
        twin.close()


if __name__ == "__main__":
    sys.exit(main())
