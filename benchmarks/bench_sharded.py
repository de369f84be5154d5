#!/usr/bin/env python
"""Side-by-side benchmark of sharded backends (``shards=K``, Ray actors) against fewer shards and one process.

Sections (every variant does the same work: ``step(ctrl, k)`` + ``get_qpos`` +
one body's position and orientation, arm7 from keyframe "home"; variants
interleaved in one run, ratios the medians of per-round ratios, as in every
script here):

* ``sapien``: CPU SAPIEN, N = 256, K = 2 against K = 1 (target >= 1.6x on a
  2-core machine: the two shards step their scenes in parallel), and K = 1
  against the backend in this process (what a shard costs).
* ``mujoco``: MuJoCo, N = 1024, nsteps = 4, K = 1 against the backend in this
  process (target >= 0.8x: the cost of the round trip and the copies), and K = 2.
* ``scaling``: CPU SAPIEN throughput for K = 1, 2, 4, ... up to the machine's
  cores, N = 1000 per core up to 8000 (``--scale-n``); no target, the figure for
  a many-core machine.
* ``interrupt``: how soon Ctrl-C is answered: seconds from SIGINT to the
  ``KeyboardInterrupt`` reaching the caller of a long ``step`` (every env back at
  its pre-call state, checked each time), on MuJoCo and SAPIEN, in process and
  with K = 2 and 3, SIGINT sent as the step starts and while it runs (target
  <= 0.2 s at every K; ``--quick``: MuJoCo in process and K = 2, 2 trials).

Usage::

    python benchmarks/bench_sharded.py --quick
    python benchmarks/bench_sharded.py --only scaling --scale-n 8000

The JSON (default ``benchmarks/results/sharded.json``) is rendered into
docs/performance.md by ``benchmarks/report.py``.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common
from _common import ARM_BODY, BaseSettings, arm_at_home, arm_ctrls, versus_bare

if not os.environ.get("MUJOCO_GL"):
    os.environ["MUJOCO_GL"] = "egl"

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "sharded.json"
SAPIEN_TARGET = 1.6
MUJOCO_TARGET = 0.8
INTERRUPT_TARGET = 0.2
#: when SIGINT is sent, seconds after the step is called: as it starts (the shards are being sent the step)
#: and while they run it
INTERRUPT_MOMENTS = {"as the step starts": 0.0005, "while the step runs": 0.05}
UNIT = "env-steps/s"
_SCALE_N: list[int] = []


class Settings(BaseSettings):
    """Rounds and block lengths (``--quick`` shrinks them), and the sizes measured."""

    def __init__(self, quick: bool):
        super().__init__(quick)
        self.sapien_n = 32 if quick else 256
        self.sapien_nsteps = [1, 4]
        self.mujoco_n = 64 if quick else 1024
        self.mujoco_nsteps = 4
        cores = os.cpu_count() or 1
        self.scale_shards = [k for k in (1, 2, 4, 8, 16) if k <= cores]
        self.scale_n = _SCALE_N[0] if _SCALE_N else (64 if quick else min(8000, 1000 * cores))


def _reads(sim: Any, body: Any) -> tuple:
    return sim.get_qpos(), sim.get_body_pos_w(body), sim.get_body_quat_w(body)


def _stepper(sim: Any) -> Callable[[Any, int], Any]:
    body = sim.get_body_ids(ARM_BODY)
    return lambda c, k: (sim.step(c, nsteps=k), _reads(sim, body))


def _same_work(a: Any, b: Any, ctrls: list, calls: int = 3) -> float:
    """Max |a - b| over qpos and the body pose after the same calls (0.0: bit-identical)."""
    sa, sb = _stepper(a), _stepper(b)
    worst = 0.0
    for i in range(calls):
        ra, rb = sa(ctrls[i], 2)[1], sb(ctrls[i], 2)[1]
        worst = max(worst, *(float((x - y).abs().max()) for x, y in zip(ra, rb)))
    return worst


def _pair(s: Settings, engine: str, n: int, k: int, ours: dict, base: dict, title: str, target: float) -> dict:
    """``ours`` against ``base`` (construction options), interleaved; the record of one case."""
    ctrls = arm_ctrls(n, seed=1)
    a, b = arm_at_home(engine, n, **ours), arm_at_home(engine, n, **base)
    try:
        same = _same_work(a, b, ctrls)
        labels = (f"{engine} {ours or 'in process'}", f"{engine} {base or 'in process'}")
        case = versus_bare(s, "ours", _stepper(a), _stepper(b), ctrls, n, k, labels, title, target, UNIT)
        case["same_work_max_abs_diff"] = same
        return case
    finally:
        a.close()
        b.close()


def bench_sapien(s: Settings) -> dict:
    cases = {}
    for k in s.sapien_nsteps:
        cases[f"K=2 vs K=1, nsteps={k}"] = _pair(
            s, "sapien", s.sapien_n, k, {"shards": 2}, {"shards": 1},
            f"SAPIEN N={s.sapien_n} k={k}: K=2 / K=1 shards", SAPIEN_TARGET,
        )  # fmt: skip
    cases["K=1 vs in process, nsteps=4"] = _pair(
        s, "sapien", s.sapien_n, 4, {"shards": 1}, {}, f"SAPIEN N={s.sapien_n} k=4: K=1 shard / in process", 0.8
    )
    cases["K=2 vs in process, nsteps=4"] = _pair(
        s, "sapien", s.sapien_n, 4, {"shards": 2}, {}, f"SAPIEN N={s.sapien_n} k=4: K=2 shards / in process", 1.6
    )
    return _section(cases, "sapien", s.sapien_n)


def bench_mujoco(s: Settings) -> dict:
    n, k = s.mujoco_n, s.mujoco_nsteps
    cases = {
        "K=1 vs in process": _pair(
            s, "mujoco", n, k, {"shards": 1}, {}, f"MuJoCo N={n} k={k}: K=1 shard / in process", MUJOCO_TARGET
        ),
        "K=2 vs in process": _pair(
            s, "mujoco", n, k, {"shards": 2}, {}, f"MuJoCo N={n} k={k}: K=2 shards / in process", MUJOCO_TARGET
        ),
    }
    return _section(cases, "mujoco", n)


def bench_scaling(s: Settings) -> dict:
    """Env-steps/s of CPU SAPIEN at N = ``scale_n`` for each K (shards of at most 1000 envs)."""
    n, k = s.scale_n, 4
    runs, notes = {}, []
    for shards in s.scale_shards:
        if -(-n // shards) > 1000:
            notes.append(f"K={shards} not run: {-(-n // shards)} envs per shard exceed CPU PhysX's 1000")
            continue
        ctrls = arm_ctrls(n, seed=1)
        t0 = time.perf_counter()
        try:
            sim = arm_at_home("sapien", n, shards=shards)
        except Exception as e:  # noqa: BLE001 - a K that cannot run is recorded; the larger K still run
            notes.append(f"K={shards} did not run: {type(e).__name__}: {e}")
            continue
        build_s = time.perf_counter() - t0
        step = _stepper(sim)
        samples, iters = _common.interleaved({"step": lambda i: step(ctrls[i % len(ctrls)], k)}, s)
        runs[f"K={shards}"] = _common.variant(samples["step"], n, UNIT, iters, f"sapien shards={shards}")
        runs[f"K={shards}"]["build_s"] = build_s
        sim.close()
    return {
        "params": {"model": "arm7", "num_envs": n, "nsteps": k},
        "runs": runs,
        "notes": [*notes, LOAD_NOTE],
        "figures": [],
    }


def _interrupted_after(sim: Any, ctrl: Any, delay: float) -> tuple[float, bool]:
    """Seconds from SIGINT (sent ``delay`` s into a step that would run for minutes) to the
    ``KeyboardInterrupt`` reaching this caller, and whether every env is back at its pre-call state."""
    before = (sim.get_qpos(), sim.get_qvel(), sim.get_time())
    sent: list[float] = []
    go = threading.Event()

    def ctrl_c() -> None:
        go.wait()
        time.sleep(delay)
        sent.append(time.perf_counter())
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=ctrl_c, daemon=True).start()
    # Python's own Ctrl-C handler, whatever this process inherited (a background job starts with SIGINT ignored)
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        go.set()  # the delay counts from here, a few microseconds before step is called
        sim.step(ctrl, 10**8)
    except KeyboardInterrupt:
        answered = time.perf_counter()
    else:
        raise RuntimeError("the step was not interrupted")
    finally:
        signal.signal(signal.SIGINT, handler)
    after = (sim.get_qpos(), sim.get_qvel(), sim.get_time())
    restored = all(bool((a == b).all()) for a, b in zip(before, after, strict=True))
    return answered - sent[0], restored


def bench_interrupt(s: Settings) -> dict:
    """Ctrl-C latency of a long step, in process and sharded (quadruped, 6 envs)."""
    from simbackend import make_backend

    runs, figures = {}, []
    trials = 2 if s.quick else 10
    for engine in ("mujoco",) if s.quick else ("mujoco", "sapien"):
        for shards in (None, 2) if s.quick else (None, 2, 3):
            extra = {} if shards is None else {"shards": shards, "sharding": {"pool": True}}
            with make_backend(engine, "quadruped", 6, **extra) as sim:
                ctrl = sim.get_ctrl() + 0.3
                sim.step(ctrl, 2)
                label = f"{engine} " + ("in process" if shards is None else f"K={shards}")
                for moment, delay in INTERRUPT_MOMENTS.items():
                    got = [_interrupted_after(sim, ctrl, delay) for _ in range(trials)]
                    seconds = [g[0] for g in got]
                    runs[f"{label}, {moment}"] = {
                        "median_s": statistics.median(seconds),
                        "max_s": max(seconds),
                        "trials": trials,
                        "every_env_restored": all(g[1] for g in got),
                    }
                    if shards is not None:
                        figures.append(
                            _common.figure(
                                f"{label}: Ctrl-C answered, {moment} (worst of {trials})",
                                max(seconds), INTERRUPT_TARGET, "<=", "s", (min(seconds), max(seconds)),
                            )
                        )  # fmt: skip
    return {
        "params": {"model": "quadruped", "num_envs": 6, "nsteps": 10**8, "sigint_after_s": INTERRUPT_MOMENTS},
        "interrupts": runs,
        "figures": figures,
        "notes": [LOAD_NOTE],
    }


#: the machine-load line counts the shards as other processes: Ray starts the actors, not this process
LOAD_NOTE = "the other processes' load includes the shards themselves (Ray actors are not this process's children)"


def _section(cases: dict, engine: str, n: int) -> dict:
    return {
        "params": {"model": "arm7", "engine": engine, "num_envs": n, "body": ARM_BODY, "start": "keyframe home"},
        "cases": cases,
        "figures": [c["figure"] for c in cases.values()],
        "notes": [LOAD_NOTE],
    }


def machine() -> dict:
    return _common.machine(
        {
            "sapien": _common.package_version("sapien"),
            "mujoco": _common.package_version("mujoco"),
            "ray": _common.package_version("ray"),
        }
    )


def print_tables(result: dict) -> None:
    m = result["machine"]
    header = (
        f"[bold]bench_sharded[/bold]  cpus={m['cpu_count']} ({m['cpu_model']})  ray {m['ray']}  sapien {m['sapien']}"
        f"  mujoco {m['mujoco']}  rounds={result['settings']['rounds']}  quick={result['settings']['quick']}"
    )
    _common.print_tables(result, header, "the figures are then noisier.")
    scaling = result["sections"].get("scaling", {})
    for name, row in scaling.get("runs", {}).items():
        print(f"scaling {name}: {row['rate']:.0f} {row['rate_unit']} (build {row['build_s']:.1f} s)")
    for note in scaling.get("notes", []):
        print(f"scaling {note}")


BENCHES: dict[str, Callable[[Settings], dict]] = {
    "sapien": bench_sapien,
    "mujoco": bench_mujoco,
    "scaling": bench_scaling,
    "interrupt": bench_interrupt,
}


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--scale-n", type=_common.positive_int, metavar="N", help="envs of the scaling section (default 1000 per core)"
    )


def _configure(args: argparse.Namespace) -> None:
    _SCALE_N[:] = [args.scale_n] if args.scale_n else []
    warnings.filterwarnings("ignore", module="sapien")


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
        add_arguments=_arguments,
        configure=_configure,
    )


if __name__ == "__main__":
    sys.exit(main())
