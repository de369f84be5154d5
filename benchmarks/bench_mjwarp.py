#!/usr/bin/env python
"""Side-by-side performance benchmark of the MuJoCo Warp backend against a bare MuJoCo Warp loop.

One section, ``step``: for each model (arm7, the quadruped, gymnasium's ant)
and each N, the backend's ``step(ctrl, 1)`` + ``get_qpos()`` + one body's pose
against a bare loop doing the same work on another engine instance built
alike: the control written into ``Data.ctrl`` (clamped), ``mujoco_warp.step``
(a CUDA graph replay on a GPU, as the backend), ``forward`` for the body pose (a graph replay too)
(the backend's getters see the reached state), and the same float32 copies.
Variants are interleaved within one process run and the ratio is the median of
the per-round ratios (``_common.versus_bare``); target >= 0.9x.

N defaults to 256 and 1024 (the target is judged at 1024; a step of N = 1024
arm7 worlds takes about 0.1 s on warp's CPU device, so a full run takes
minutes); ``--n 1024 4096 16384`` sets other sizes (for a GPU). The first build of each model compiles
MuJoCo Warp's kernels (cached afterwards, see docs/engines.md).

Usage::

    python benchmarks/bench_mjwarp.py --quick
    python benchmarks/bench_mjwarp.py --device cuda --n 1024 4096 16384

The JSON (default ``benchmarks/results/mjwarp.json``) is rendered into
docs/performance.md by ``benchmarks/report.py``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import _common
from _common import BaseSettings, versus_bare

if not os.environ.get("MUJOCO_GL"):
    os.environ["MUJOCO_GL"] = "egl"

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "mjwarp.json"
STEP_TARGET = 0.9
#: (model, body whose pose is read); gymnasium's ant comes from its package
MODELS = (("arm7", "link7"), ("quadruped", "torso"), ("gym-ant", "torso"))
_SIZES: list[int] = []
_DEVICE = ["cpu"]


class Settings(BaseSettings):
    """Rounds and block lengths (``--quick`` shrinks them), and the sizes measured."""

    def __init__(self, quick: bool):
        super().__init__(quick)
        self.n = _SIZES or ([16, 64] if quick else [256, 1024])
        self.device = _DEVICE[0]
        self.check_calls = 3


def _model_source(name: str) -> Any:
    if name != "gym-ant":
        return name
    import importlib.util

    spec = importlib.util.find_spec("gymnasium")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("gymnasium (the [test] or [bench] extra) is needed for its ant.xml")
    return Path(next(iter(spec.submodule_search_locations))) / "envs" / "mujoco" / "assets" / "ant.xml"


class BareLoop:
    """An ``MJWarpEngine``'s ``Model``/``Data`` driven by hand: the least work giving the backend's outputs.

    Per call: ``ctrl`` clamped into ``Data.ctrl`` (torch view), ``mujoco_warp.step`` ``k`` times (a CUDA
    graph of one step replayed on a GPU), ``mujoco_warp.forward`` (the reached state's poses; a CUDA graph
    too on a GPU, as the backend), and float32
    copies of ``qpos`` and one body's ``xpos``/``xquat``. No input checks, no divergence rule, no revert copy.
    """

    def __init__(self, sim: Any, body: int):
        from simbackend.backends.mjwarp.warp_env import import_warp

        self.wp, self.mjw = import_warp()
        eng = sim.engine
        self.m, self.d, self.device = eng.m, eng.d, eng.wp_device
        t = self.wp.to_torch
        self.ctrl, self.qpos, self.xpos, self.xquat = t(self.d.ctrl), t(self.d.qpos), t(self.d.xpos), t(self.d.xquat)
        import torch

        lo, hi = np.array(sim.info.actuator_ctrl_range, np.float32).T
        self.lo, self.hi = torch.as_tensor(lo, device=self.ctrl.device), torch.as_tensor(hi, device=self.ctrl.device)
        self.body = slice(body, body + 1)
        self.graph: Any = None
        self.forward_graph: Any = None
        self.use_graph = self.ctrl.device.type == "cuda"

    def _step(self, k: int) -> None:
        wp, mjw = self.wp, self.mjw
        with wp.ScopedDevice(self.device):
            if not self.use_graph:
                for _ in range(k):
                    mjw.step(self.m, self.d)
            else:
                if self.graph is None:
                    with wp.ScopedCapture() as capture:
                        mjw.step(self.m, self.d)
                    self.graph = capture.graph
                    with wp.ScopedCapture() as capture:
                        mjw.forward(self.m, self.d)
                    self.forward_graph = capture.graph
                for _ in range(k):
                    wp.capture_launch(self.graph)
                wp.capture_launch(self.forward_graph)
                return
            mjw.forward(self.m, self.d)

    def __call__(self, ctrl: Any, k: int) -> tuple[Any, Any, Any]:
        import torch

        torch.clamp(ctrl.to(self.ctrl), self.lo, self.hi, out=self.ctrl)
        self._step(k)
        return self.qpos.clone(), self.xpos[:, self.body].clone(), self.xquat[:, self.body].clone()


def _reads(sim: Any, body: Any) -> tuple[Any, Any, Any]:
    return sim.get_qpos(), sim.get_body_pos_w(body), sim.get_body_quat_w(body)


def _ctrls(sim: Any, n: int, count: int = 8) -> list:
    """``count`` ctrl sets: the model's ``home`` keyframe ctrl (or zeros) plus uniform noise of 10 % of the range."""
    import torch

    lo, hi = np.array(sim.info.actuator_ctrl_range, np.float64).T
    lo, hi = np.where(np.isfinite(lo), lo, -1.0), np.where(np.isfinite(hi), hi, 1.0)
    base = np.zeros(sim.num_actuators)
    if "home" in sim.info.keyframe_names:
        base = np.asarray(sim.info.compiled.key("home").ctrl, np.float64)
    rng = np.random.default_rng(1)
    out = []
    for _ in range(count):
        c = np.clip(base + rng.uniform(-0.1, 0.1, size=(n, base.size)) * (hi - lo), lo, hi)
        out.append(torch.as_tensor(c, dtype=torch.float32, device=sim.device))
    return out


def _at_start(name: str, n: int, device: str) -> Any:
    import simbackend

    sim = simbackend.make_backend("mjwarp", _model_source(name), n, device=device)
    if "home" in sim.info.keyframe_names:
        sim.set_state(None, sim.get_keyframe_qpos("home").expand(n, -1))
    return sim


def bench_step(s: Settings) -> dict:
    cases, checks = {}, {}
    for model, body_name in MODELS:
        for n in s.n:
            sim, bare_sim = _at_start(model, n, s.device), _at_start(model, n, s.device)
            body = sim.get_body_ids(body_name)
            bare = BareLoop(bare_sim, int(body[0]))
            ctrls = _ctrls(sim, n)
            diff = np.zeros(3)
            for i in range(s.check_calls):  # the same work: the same outputs from the same state and ctrls
                sim.step(ctrls[i], nsteps=1)
                mine = bare(ctrls[i], 1)
                diff = np.maximum(diff, [float((a - b).abs().max()) for a, b in zip(_reads(sim, body), mine)])
            checks[f"{model} N={n}"] = {
                "calls": s.check_calls,
                "qpos_max_abs_diff": diff[0],
                "body_pos_max_abs_diff": diff[1],
                "body_quat_max_abs_diff": diff[2],
            }
            cases[f"{model} N={n}"] = versus_bare(
                s,
                "backend",
                lambda c, k, sim=sim, body=body: (sim.step(c, nsteps=k), _reads(sim, body)),
                bare,
                ctrls,
                n,
                1,
                ("step(ctrl,1) + get_qpos + get_body_pos_w/quat_w(1 body)", "mujoco_warp.step + forward + copies"),
                f"step {model} N={n}: backend / bare MuJoCo Warp loop",
                STEP_TARGET,
            )
            sim.close()
            bare_sim.close()
    return {
        "params": {"models": [m for m, _ in MODELS], "device": s.device, "num_envs": s.n, "nsteps": 1},
        "same_work_check": checks,
        "cases": cases,
        "figures": [c["figure"] for c in cases.values()],
    }


def machine() -> dict:
    import torch

    return _common.machine(
        {
            "mujoco_warp": _common.package_version("mujoco-warp"),
            "warp": _common.package_version("warp-lang"),
            "mujoco": _common.package_version("mujoco"),
        },
        {"cuda": torch.cuda.is_available(), "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None},
    )


def print_tables(result: dict) -> None:
    m = result["machine"]
    header = (
        f"[bold]bench_mjwarp[/bold]  cpus={m['cpu_count']} ({m['cpu_model']})  mujoco_warp {m['mujoco_warp']}  "
        f"warp {m['warp']}  torch {m['torch']}  gpu {m['gpu']}  device={result['settings']['device']}  "
        f"rounds={result['settings']['rounds']}  quick={result['settings']['quick']}"
    )
    _common.print_tables(result, header, "the figures are then noisier.")


BENCHES: dict[str, Callable[[Settings], dict]] = {"step": bench_step}


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--n", type=_common.positive_int, nargs="+", metavar="N", help="world counts (default: 256 1024; quick: 16 64)"
    )
    p.add_argument("--device", default="cpu", help="warp device of both variants: cpu, cuda or cuda:i")


def _configure(args: argparse.Namespace) -> None:
    _SIZES[:] = args.n or []
    _DEVICE[0] = args.device


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
