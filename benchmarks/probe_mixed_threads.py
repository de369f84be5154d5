"""Does stepping a mixed backend's engines in threads help? Seconds per step of one mix, parallel and not.

Builds ``mujoco,motrix`` (or ``--sim``) on ``--model`` with N envs, and each engine alone with its block's
size; times ``--steps`` steps of ``--nsteps`` substeps under random controls, alternating the modes
``--rounds`` times (a busy machine drifts: the alternation spreads the drift over every mode), and prints
the median seconds per step of each. ``parallel`` is ``MixedEngine.parallel`` (threads, the default);
``serial`` steps the parts one after the other in the calling thread.

    python benchmarks/probe_mixed_threads.py --sim mujoco,motrix --model quadruped --num-envs 256
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from simbackend.registry import make_backend


def timed(sim, steps: int, nsteps: int, seed: int) -> float:
    g = torch.Generator().manual_seed(seed)
    lo, hi = sim.get_actuator_ctrl_range().T
    ctrls = [lo + (hi - lo) * torch.rand(sim.num_envs, sim.num_actuators, generator=g) for _ in range(steps)]
    sim.step(ctrls[0], nsteps)  # warm
    t = time.perf_counter()
    for u in ctrls:
        sim.step(u, nsteps)
        sim.get_qpos()
    return (time.perf_counter() - t) / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sim", default="mujoco,motrix")
    ap.add_argument("--model", default="quadruped")
    ap.add_argument("--num-envs", type=int, default=256)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--nsteps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--nthread", type=int, default=0)
    a = ap.parse_args()
    mix = make_backend(a.sim, a.model, a.num_envs, nthread=a.nthread)
    alone = {
        name: make_backend(name, a.model, stop - start, nthread=a.nthread) for name, start, stop in mix.engine.parts
    }
    keep = {"parallel": [], "serial": [], **{f"{n} alone": [] for n in alone}}
    for r in range(a.rounds):
        for mode in ("parallel", "serial"):
            mix.engine.parallel = mode == "parallel"
            keep[mode].append(timed(mix, a.steps, a.nsteps, r))
        for name, sim in alone.items():
            keep[f"{name} alone"].append(timed(sim, a.steps, a.nsteps, r))
    print(f"{mix.name} on {a.model}, {a.nsteps} substeps a step, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    for mode, times in keep.items():
        print(
            f"  {mode:>14}: {1e3 * statistics.median(times):8.2f} ms a step (rounds: "
            + ", ".join(f"{1e3 * x:.1f}" for x in times)
            + ")"
        )
    slowest = max(statistics.median(keep[f"{n} alone"]) for n in alone)
    print(
        f"  parallel / slowest engine alone: {statistics.median(keep['parallel']) / slowest:.2f};"
        f" serial / parallel: {statistics.median(keep['serial']) / statistics.median(keep['parallel']):.2f}"
    )
    for sim in (mix, *alone.values()):
        sim.close()


if __name__ == "__main__":
    main()
