#!/usr/bin/env python
"""Where a GPU run reads device values on the host: every scalar read, by call site.

Runs the calls a training loop makes on a GPU backend and records each host
read of a device value with the first frame of this project's code that
caused it, counted by :func:`simbackend.host_reads.count_host_reads`: scalar
reads (``aten::_local_scalar_dense``, the op behind ``.item()``, ``bool()``,
``int()`` of a tensor), ops of data-dependent shape (``nonzero``, boolean-mask
indexing, ``unique``, ...), device-to-host copies, and on the CPU the
``.cpu()``/``.tolist()`` calls that copy to the host on a GPU:

* ``backend``: ``step(ctrl, 1)``, the getters a locomotion task reads every
  step, and ``set_state`` of a few envs;
* ``task``: the task layer's ``step`` and ``reset`` of the done envs, with the
  adapter (``SimVectorEnv`` in torch mode) around it, for each task named.

The counts are a map for removing host syncs from the GPU loop (docs/conventions.md:
GPU backends never synchronise with the host in step, set_state or a getter); on CUDA the run is also
done under ``torch.cuda.set_sync_debug_mode("warn")`` and each warning's site
is counted. On the CPU the counts show the same sites (the same ops run, tensors
of the host included), so the script is checked here without a GPU; on CUDA
only reads of device tensors count (``cpu_tensors=False``).

Usage::

    python benchmarks/probe_host_syncs.py --sim mjwarp --device cuda --n 4096 --steps 100
    python benchmarks/probe_host_syncs.py --sim mujoco --device cpu --n 8 --steps 5 --tasks cartpole

Writes JSON (default ``benchmarks/results/host_syncs.json``): per phase, the
number of calls, the host reads per call (all kinds, and scalar reads,
data-dependent shapes, device-to-host copies and read-back calls apart), and
the sites (``kind at file:line function``) with their counts, most first.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from simbackend.host_reads import COPY_TO_HOST, DATA_DEPENDENT_SHAPE, READBACK_CALL, SCALAR_READ, count_host_reads

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "host_syncs.json"

if not os.environ.get("MUJOCO_GL"):
    os.environ["MUJOCO_GL"] = "egl"


def _run(phase: str, device: torch.device, calls: int, body: Any) -> dict:
    """``body(i)`` ``calls`` times under the counter (and CUDA's sync debug mode on a GPU)."""
    body(-1)  # warm: first-call lookups and compilations are not the loop's
    if device.type == "cuda":
        torch.cuda.synchronize()
    caught: collections.Counter[str] = collections.Counter()
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        if device.type == "cuda":
            torch.cuda.set_sync_debug_mode("warn")
        try:
            # on the CPU, reads of every tensor stand in for the device's; on a GPU only the device's count
            with count_host_reads(cpu_tensors=device.type == "cpu") as reads:
                for i in range(calls):
                    body(i)
        finally:
            if device.type == "cuda":
                torch.cuda.set_sync_debug_mode(0)
        for w in seen:
            if "synchroniz" in str(w.message).lower():
                caught[f"{Path(w.filename).name}:{w.lineno}"] += 1
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    return {
        "phase": phase,
        "calls": calls,
        "seconds": elapsed,
        "host_reads_per_call": reads.total / calls,
        "scalar_reads_per_call": reads.kinds[SCALAR_READ] / calls,
        "copies_to_host_per_call": reads.kinds[COPY_TO_HOST] / calls,
        "data_dependent_shapes_per_call": reads.kinds[DATA_DEPENDENT_SHAPE] / calls,
        "readback_calls_per_call": reads.kinds[READBACK_CALL] / calls,
        "sites": reads.by_site(),
        "sync_debug_warnings": dict(caught.most_common()),
    }


def probe_backend(sim: str, device: torch.device, n: int, steps: int, model: str) -> list[dict]:
    from simbackend import make_backend

    out = []
    with make_backend(sim, model, n, device=device) as b:
        ctrl = torch.zeros(n, b.num_actuators, device=device)
        out.append(_run("backend step(ctrl, 1)", device, steps, lambda i: b.step(ctrl, 1)))
        bodies = b.get_body_ids(list(b.body_names[1:3]))

        def reads(i: int) -> None:
            b.get_qpos(), b.get_qvel(), b.get_base_quat(), b.get_base_lin_vel(), b.get_base_ang_vel()
            b.get_body_pos_w(bodies), b.get_body_lin_vel_b(bodies), b.get_dof_pos(), b.get_dof_vel()

        out.append(_run("backend getters (a locomotion task's)", device, steps, reads))
        ids = torch.arange(0, n, max(1, n // 8), device=device)
        q, v = b.get_qpos()[ids].clone(), b.get_qvel()[ids].clone()
        out.append(_run("backend set_state(n/8 envs)", device, steps, lambda i: b.set_state(ids, q, v)))
    for row in out:
        row["model"] = model
    return out


def probe_task(task: str, sim: str, device: torch.device, n: int, steps: int) -> dict:
    from simbackend.envs import SimVectorEnv
    from simbackend.tasks import make_task

    env = SimVectorEnv(make_task(task, sim, n, device=device))
    try:
        env.reset(seed=0)
        low = torch.as_tensor(env.single_action_space.low, device=device)
        high = torch.as_tensor(env.single_action_space.high, device=device)
        gen = torch.Generator(device=device).manual_seed(0)

        def step(i: int) -> None:
            a = low + (high - low) * torch.rand((n, low.numel()), generator=gen, device=device)
            env.step(a)

        row = _run(f"task {task}: SimVectorEnv.step (task step, resets of done envs)", device, steps, step)
    finally:
        env.close()
    row["task"] = task
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sim", default="mjwarp")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--model", default="quadruped")
    p.add_argument("--tasks", nargs="*", default=["cartpole", "quadruped"])
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    device = torch.device(args.device)
    rows = probe_backend(args.sim, device, args.n, args.steps, args.model)
    errors = {}
    for task in args.tasks:
        try:
            rows.append(probe_task(task, args.sim, device, args.n, args.steps))
        except Exception as e:  # noqa: BLE001 - a task that cannot run is recorded, the others still run
            errors[task] = f"{type(e).__name__}: {e}"
    result = {
        "sim": args.sim,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "num_envs": args.n,
        "steps": args.steps,
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"),
        "phases": rows,
        "errors": errors,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for row in rows:
        print(
            f"{row['phase']}: {row['host_reads_per_call']:.1f} host reads per call "
            f"({row['scalar_reads_per_call']:.1f} scalar reads, {row['data_dependent_shapes_per_call']:.1f} "
            f"data-dependent shapes, {row['copies_to_host_per_call']:.1f} copies to host, "
            f"{row['readback_calls_per_call']:.1f} read-back calls), {row['seconds'] / row['calls'] * 1e3:.2f} ms/call"
        )
        for site, count in list(row["sites"].items())[:8]:
            print(f"    {count:6d}  {site}")
    for task, err in errors.items():
        print(f"task {task} did not run: {err}")
    print(f"JSON written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
