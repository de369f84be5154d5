#!/usr/bin/env python
"""Playback benchmark: pictures of a backend through MuJoCo's offscreen renderer.

Measures the contract's picture calls (``simbackend.playback.api.PlaybackMixin``)
on the MuJoCo backend, interleaved and reported as medians over rounds like the
other scripts (``_common.py``). Nothing is asserted: no targets, only rates.

Sections (``--only NAME`` runs one; add a section by adding a function to
``BENCHES``):

* ``record``  the cost of a Recorder: ``step`` on arm7, N = 1024, with a
              Recorder of 4 envs attached vs without (one backend, the
              recorder attached and detached around the recorded calls),
              nsteps 1 and 4 (overhead = time ratio - 1; target <= 5 %).
* ``render``  frames/s at 320 x 240 on arm7 (keyframe ``home`` + 0.2 rad noise
              per env), quadruped (keyframe ``stand``, base shifted per env) and
              cartpole (``qpos0`` + 0.2 noise),
              N = 16 envs at fixed states, default free camera:
              - ``rgb_n1``: ``render(env_ids=0)``, one picture per call;
              - ``rgb_n16``: ``render()``, the 16 envs' pictures in one call;
              - ``rgb_n16_bare``: the same undressed (``dress=False``): no floor,
                light or sky added (the cart-pole has no floor; arm7 and the
                quadruped get only the sky);
              - ``tiled16``: ``render(tile=True)``, the 16 envs in ONE picture;
              - ``rgbds_n16``: ``get_camera_images("free", modes=(rgb, depth,
                segmentation))``, 16 envs, three images each (rate: env pictures/s).

Usage::

    python benchmarks/bench_playback.py            # about 20 s on 2 cores
    python benchmarks/bench_playback.py --quick    # smoke check, a few seconds
    python benchmarks/bench_playback.py --only render --out /tmp/playback.json

The JSON (default ``benchmarks/results/playback.json``) holds the machine
description (with the OpenGL renderer that drew: a GPU's, or Mesa's llvmpipe
on the CPU), the parameters, every variant's per-round samples and medians.
Rendering without a GPU is software rasterisation: rates scale with pixels and
with the number of triangles (each capsule and cylinder is a tessellated mesh).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

if not os.environ.get("MUJOCO_GL") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
    os.environ["MUJOCO_GL"] = "egl"  # headless: before anything imports mujoco

import numpy as np

import _common
from _common import BaseSettings, interleaved, variant

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "playback.json"

WIDTH, HEIGHT = 320, 240
#: model -> keyframe the envs start from (None: qpos0); the cart-pole has no floor: its pictures get the whole dress
MODELS = {"arm7": "home", "quadruped": "stand", "cartpole": None}


# ----------------------------------------------------------------------------
# settings
# ----------------------------------------------------------------------------
class Settings(BaseSettings):
    """Rounds and block lengths (``--quick`` shrinks them) and the sizes of each section."""

    def __init__(self, quick: bool):
        super().__init__(quick)
        # rendering is slow per call: fewer, shorter rounds keep a full run near 20 s
        self.rounds = 3 if quick else 5
        self.block_s = 0.08 if quick else 0.25
        self.min_iters = 1
        self.num_envs = 16
        self.width, self.height = WIDTH, HEIGHT


# ----------------------------------------------------------------------------
# shared construction
# ----------------------------------------------------------------------------


def _scene(model: str, n: int) -> Any:
    """The MuJoCo backend of ``model`` with ``n`` envs at distinct fixed states (seeded)."""
    import torch

    import simbackend

    sim = simbackend.make_backend("mujoco", model, n)
    key = MODELS[model]
    q = (sim.get_qpos() if key is None else sim.get_keyframe_qpos(key).expand(n, -1)).clone()
    rng = np.random.default_rng(3)
    if sim.has_floating_base:
        q[:, :2] += torch.from_numpy(rng.uniform(-0.3, 0.3, (n, 2)).astype(np.float32))
    dof = sim.get_joint_qpos_indices(list(sim.dof_names))
    q[:, dof] += torch.from_numpy(rng.uniform(-0.2, 0.2, (n, dof.numel())).astype(np.float32))
    sim.set_state(None, q)
    return sim


def _close(sim: Any) -> None:
    sim._playback.close()
    sim.close()


def _gl_renderer(sim: Any) -> str | None:
    """The OpenGL renderer string (e.g. ``llvmpipe``) of the backend's first renderer, if readable."""
    try:
        from OpenGL import GL

        cache = sim._playback.renderers or {}
        for r in cache.values():
            r._gl.make_current()
            return GL.glGetString(GL.GL_RENDERER).decode()
    except Exception:  # noqa: BLE001 - informational only
        return None
    return None


# ----------------------------------------------------------------------------
# section: render
# ----------------------------------------------------------------------------
def bench_render(s: Settings) -> dict:
    n, w, h = s.num_envs, s.width, s.height
    cases: dict[str, Any] = {}
    gl = None
    for model in MODELS:
        sim = _scene(model, n)
        modes = ("rgb", "depth", "segmentation")
        calls = {
            "rgb_n1": lambda i, sim=sim: sim.render(env_ids=0, width=w, height=h),
            "rgb_n16": lambda i, sim=sim: sim.render(width=w, height=h),
            "rgb_n16_bare": lambda i, sim=sim: sim.render(width=w, height=h, dress=False),
            "tiled16": lambda i, sim=sim: sim.render(tile=True, width=w, height=h),
            "rgbds_n16": lambda i, sim=sim: sim.get_camera_images("free", modes=modes, width=w, height=h),
        }
        # the pictures really differ between envs (a benchmark of blank frames would measure nothing)
        frames = sim.render(width=w, height=h)
        assert frames.float().std() > 1 and not bool((frames[0] == frames[1]).all()), "blank or identical frames"
        samples, iters = interleaved(calls, s)
        gl = gl or _gl_renderer(sim)
        _close(sim)
        cases[model] = {
            "num_envs": n,
            "variants": {
                "rgb_n1": variant(samples["rgb_n1"], 1, "frames/s", iters, "render(env_ids=0): 1 picture per call"),
                "rgb_n16": variant(samples["rgb_n16"], n, "frames/s", iters, f"render(): {n} pictures per call"),
                "rgb_n16_bare": variant(
                    samples["rgb_n16_bare"], n, "frames/s", iters, f"render(dress=False): {n} undressed pictures"
                ),
                "tiled16": variant(
                    samples["tiled16"], 1, "frames/s", iters, f"render(tile=True): {n} envs in 1 picture"
                ),
                "rgbds_n16": variant(
                    samples["rgbds_n16"],
                    n,
                    "frames/s",
                    iters,
                    f"get_camera_images(rgb+depth+segmentation): {n} envs x 3 images",
                ),
            },
        }
    return {
        "params": {"width": w, "height": h, "num_envs": n, "camera": "free", "models": dict(MODELS), "gl_renderer": gl},
        "cases": cases,
        "figures": [],
    }


# ----------------------------------------------------------------------------
# section: record
# ----------------------------------------------------------------------------
def bench_record(s: Settings) -> dict:
    """``step`` with a Recorder of 4 envs attached vs without, arm7, N = 1024, nsteps 1 and 4.

    One backend serves both variants (two instances of one model differ by a few per cent in
    speed on this machine, more than the recorder costs): the recorded call attaches the recorder,
    steps and detaches it (``add_observer``/``remove_observer``, so the attach cost counts against
    the recorder), the plain call steps.
    """
    import tempfile

    from simbackend.playback.recording import Recorder

    n, recorded = 256 if s.quick else 1024, [0, 1, 2, 3]
    ctrls = _common.arm_ctrls(n, seed=6)
    sim = _common.arm_at_home("mujoco", n)
    with tempfile.TemporaryDirectory() as tmp:
        recorder = Recorder(sim, Path(tmp) / "bench.h5", env_ids=recorded)
        sim.remove_observer(recorder)
        cases, figures = {}, []
        for k in (1, 4):

            def plain(i: int, k: int = k) -> None:
                sim.step(ctrls[i % len(ctrls)], nsteps=k)

            def with_recorder(i: int, k: int = k) -> None:
                sim.add_observer(recorder)
                sim.step(ctrls[i % len(ctrls)], nsteps=k)
                sim.remove_observer(recorder)

            samples, iters = interleaved({"plain": plain, "recorded": with_recorder}, s)
            ratio = _common.paired_ratio(samples["recorded"], samples["plain"])  # time recorded / plain
            cases[f"nsteps={k}"] = {
                "num_envs": n,
                "variants": {
                    "plain": variant(samples["plain"], n, "env-steps/s", iters, f"step(ctrl, {k})"),
                    "recorded": variant(
                        samples["recorded"],
                        n,
                        "env-steps/s",
                        iters,
                        f"step(ctrl, {k}) with a Recorder of {len(recorded)} envs",
                    ),
                },
                "ratio_time_recorded_vs_plain": ratio,
            }
            figures.append(
                _common.figure(
                    f"recording overhead on step, N = {n}, {len(recorded)} envs, nsteps {k}",
                    ratio["median"] - 1.0,
                    0.05,
                    "<=",
                    "fraction",
                    (ratio["min"] - 1.0, ratio["max"] - 1.0),
                )
            )
        sim.add_observer(recorder)
        recorder.close()
        rows = recorder.rows_written
    sim.close()
    return {
        "params": {
            "model": "arm7",
            "num_envs": n,
            "recorded": recorded,
            "rows_written": rows,
            "width": None,
            "height": None,
            "gl_renderer": None,
        },
        "cases": cases,
        "figures": figures,
    }


BENCHES: dict[str, Callable[[Settings], dict]] = {
    "render": bench_render,
    "record": bench_record,
}


# ----------------------------------------------------------------------------
# report
# ----------------------------------------------------------------------------
def machine() -> dict:
    import mujoco

    return _common.machine(
        {"mujoco": mujoco.__version__},
        {"imageio_ffmpeg": _common.package_version("imageio-ffmpeg"), "mujoco_gl": os.environ.get("MUJOCO_GL")},
    )


def print_tables(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:
        console = Console(width=140)
    m, sec = result["machine"], result["sections"]
    console.print(
        f"[bold]bench_playback[/bold]  cpus={m['cpu_count']} ({m['cpu_model']})  mujoco {m['mujoco']}  "
        f"torch {m['torch']}  MUJOCO_GL={m['mujoco_gl']}  rounds={result['settings']['rounds']}  "
        f"quick={result['settings']['quick']}"
    )
    for name, data in sec.items():
        if "error" in data:
            console.print(f"[red]{name}: error[/red] {data['error']}")
            continue
        params = data.get("params", {})
        title = f"{name}: {params.get('width')}x{params.get('height')}, GL renderer {params.get('gl_renderer')}"
        table = Table(title=title)
        for col in ("model", "variant", "ms/call", "frames/s", "what"):
            table.add_column(col, justify="right" if col in ("ms/call", "frames/s") else "left")
        for case, c in data.get("cases", {}).items():
            for vname, v in c["variants"].items():
                table.add_row(case, vname, f"{v['ms_per_call']:.2f}", f"{v['rate']:.1f}", v["label"])
        console.print(table)
        for fig in data.get("figures", []):
            verdict = "met" if fig["meets_target"] else "MISSED"
            spread = f" ({fig['min']:+.3f}..{fig['max']:+.3f})" if "min" in fig else ""
            console.print(
                f"  {fig['name']}: {fig['value']:+.3f}{spread} {fig['unit']}, target {fig['op']}"
                f" {fig['target']}: {verdict}"
            )
        load = data.get("machine_load")
        if load is not None and load["foreign_cores"] + load["steal_cores"] > 0.25:
            other = load["foreign_cores"] + load["steal_cores"]
            console.print(
                f"[yellow]warning:[/yellow] other processes used {other:.2f} cores during {name};"
                " re-run on a quiet machine."
            )
    console.print(f"runtime {result['runtime_s']:.1f} s; JSON written to {result['out']}")


def main(argv: list[str] | None = None) -> int:
    return _common.main(
        argv,
        description=__doc__.split("\n\n")[0],
        sections=BENCHES,
        settings=Settings,
        default_out=DEFAULT_OUT,
        quick_help="few rounds and short blocks: a smoke check (seconds)",
        machine_info=machine,
        report=print_tables,
    )


if __name__ == "__main__":
    sys.exit(main())
