"""What the benchmark scripts share: interleaved timing, records, machine load, the CLI.

Every measurement compares variants in ONE process run: the variants of a
measurement are interleaved (the order rotates each round), each round times a
block of calls per variant, and the reported figures are medians over rounds.
Ratios are medians of the per-round ratios (paired, so that a slow moment of
the shared machine hits both sides of a ratio alike).

A script defines its sections (``name -> fn(settings) -> dict``) and calls
:func:`main`; see ``bench_mujoco.py`` and ``bench_sapien.py``.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ARM = "arm7"
ARM_BODY = "link7"  # the body whose pose the step sections read


# ----------------------------------------------------------------------------
# settings
# ----------------------------------------------------------------------------
class BaseSettings:
    """Rounds and block lengths of a run (``--quick`` shrinks them); scripts add their sizes."""

    def __init__(self, quick: bool):
        self.quick = quick
        self.rounds = 3 if quick else 11
        self.block_s = 0.08 if quick else 0.4  # time of one variant's calls in one round (slowest variant)
        self.min_iters = 2 if quick else 5

    def as_dict(self) -> dict:
        return dict(vars(self))


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (a script's size flags)."""
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text}")
    return n


# ----------------------------------------------------------------------------
# timing machinery
# ----------------------------------------------------------------------------
Call = Callable[[int], None]  # call(i) performs the i-th call of a variant (one step, one query, ...)


class Prepared:
    """A variant whose timed ``call(i)`` follows an untimed ``setup(i)``.

    For a call that is measured in a given situation which itself takes work: a getter timed right
    after a step (``setup`` steps, so that the getter finds its derived fields stale every time).
    :func:`interleaved` runs ``setup(i)`` just before it times ``call(i)``; :func:`calibrate` counts
    both, so that a round still lasts about ``block_s``.
    """

    def __init__(self, setup: Call, call: Call):
        self.setup = setup
        self.call = call

    def __call__(self, i: int) -> None:
        self.call(i)


def calibrate(calls: dict[str, Call], settings: BaseSettings) -> int:
    """One iteration count for every variant: the slowest fills ``block_s`` per round.

    Also warms every variant up (first calls bind arrays, fill caches).
    """
    per_call = []
    for call in calls.values():
        setup = getattr(call, "setup", None)  # a Prepared variant: its untimed part fills the round too
        run = call if setup is None else (lambda i, call=call, setup=setup: (setup(i), call(i)))
        run(0)
        run(1)  # warm-up
        n, t0 = 0, time.perf_counter()
        while True:
            run(n)
            n += 1
            elapsed = time.perf_counter() - t0
            if elapsed > 0.03 or n >= 20:
                break
        per_call.append(elapsed / n)
    return max(settings.min_iters, int(settings.block_s / max(per_call)))


def interleaved(
    calls: dict[str, Call], settings: BaseSettings, iters: int | None = None
) -> tuple[dict[str, list[float]], int]:
    """Per-round mean seconds-per-call of every variant, interleaved call by call.

    Each round makes ``iters`` calls of every variant, alternating variants
    call by call (A B C, B C A, C A B, ...), so that a slow spell of the shared
    machine hits every variant of the round alike and no variant always runs
    right after the same other one. A :class:`Prepared` variant's ``setup(i)``
    runs right before its timed ``call(i)``, outside the timing.
    """
    if iters is None:
        iters = calibrate(calls, settings)
    names = list(calls)
    setups = {n: getattr(calls[n], "setup", None) for n in names}
    samples: dict[str, list[float]] = {n: [] for n in names}
    clock = time.perf_counter
    for r in range(settings.rounds):
        total = dict.fromkeys(names, 0.0)
        gc.collect()
        for i in range(iters):
            k = (i + r) % len(names)
            for name in names[k:] + names[:k]:
                setup = setups[name]
                if setup is not None:
                    setup(i)
                t0 = clock()
                calls[name](i)
                total[name] += clock() - t0
        for name in names:
            samples[name].append(total[name] / iters)
    return samples, iters


def median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def paired_ratio(num: list[float], den: list[float]) -> dict:
    """Median (and spread) over rounds of num[r] / den[r]."""
    ratios = [a / b for a, b in zip(num, den)]
    return {"median": median(ratios), "min": min(ratios), "max": max(ratios), "samples": ratios}


def paired_difference(a: list[float], b: list[float], scale: float = 1e6) -> dict:
    """Median (and spread) over rounds of (a[r] - b[r]) * scale: per-call seconds to µs by default.

    The absolute cost one variant adds to another (a front end above the engine call it makes),
    paired by round like :func:`paired_ratio`. ``report.py`` shows a key ``diff_us_<a>_vs_<b>``
    holding it as "a - b (µs)".
    """
    diffs = [(x - y) * scale for x, y in zip(a, b)]
    return {"median": median(diffs), "min": min(diffs), "max": max(diffs), "samples": diffs}


def variant(samples: list[float], work_per_call: float, unit: str, iters: int, label: str) -> dict:
    """A variant's record: per-call seconds and rate (work_per_call / seconds)."""
    sec = median(samples)
    return {
        "label": label,
        "iters_per_round": iters,
        "sec_per_call": sec,
        "ms_per_call": sec * 1e3,
        "rate": work_per_call / sec,
        "rate_unit": unit,
        "samples_sec_per_call": samples,
    }


def figure(
    name: str,
    value: float,
    target: float,
    op: str,
    unit: str,
    spread: tuple[float, float] | None = None,
    note: str = "",
) -> dict:
    ok = value >= target if op == ">=" else value <= target
    fig = {
        "name": name,
        "value": value,
        "unit": unit,
        "target": target,
        "op": op,
        "meets_target": bool(ok),
        # value / target: >= 1 means the target is met for ">=", <= 1 for "<="
        "ratio_to_target": value / target,
    }
    if spread is not None:
        fig["min"], fig["max"] = spread
    if note:
        fig["note"] = note
    return fig


# ----------------------------------------------------------------------------
# the arm7 workload shared by the step sections
# ----------------------------------------------------------------------------


def versus_bare(
    settings: BaseSettings,
    ours: str,
    step_and_read: Callable[[Any, int], Any],
    bare: Callable[[Any, int], Any],
    ctrls: list,
    num_envs: int,
    nsteps: int,
    labels: tuple[str, str],
    title: str,
    target: float,
    unit: str = "env-steps/s",
) -> dict:
    """A backend's ``step`` + reads against a bare engine loop doing the same work, interleaved.

    ``step_and_read(ctrl, k)`` and ``bare(ctrl, k)`` take the i-th control set of ``ctrls``
    (cycled) and ``k`` substeps. Returns the record of one case: both variants, the paired
    throughput ratio ``ours / bare`` (key ``ratio_<ours>_vs_bare``) and its figure against
    ``target`` (at least).
    """

    def ours_call(i: int) -> None:
        step_and_read(ctrls[i % len(ctrls)], nsteps)

    def bare_call(i: int) -> None:
        bare(ctrls[i % len(ctrls)], nsteps)

    samples, iters = interleaved({ours: ours_call, "bare": bare_call}, settings)
    ratio = paired_ratio(samples["bare"], samples[ours])  # throughput ours / bare
    return {
        "num_envs": num_envs,
        "nsteps": nsteps,
        "variants": {
            ours: variant(samples[ours], num_envs, unit, iters, labels[0]),
            "bare": variant(samples["bare"], num_envs, unit, iters, labels[1]),
        },
        f"ratio_{ours}_vs_bare": ratio,
        "figure": figure(title, ratio["median"], target, ">=", "x", (ratio["min"], ratio["max"])),
    }


def make_arm_backend(backend: str, n: int, **options: Any):
    """The arm7 ``backend``; the model file may still be being written: retry a while."""
    import simbackend

    deadline = time.monotonic() + 300
    while True:
        try:
            return simbackend.make_backend(backend, ARM, n, **options)
        except Exception as e:  # noqa: BLE001 - any failure to load means "not ready yet"
            if time.monotonic() > deadline:
                raise
            print(
                f"[bench] make_backend({backend!r}, {ARM!r}) failed ({type(e).__name__}: {e}); retrying in 30 s",
                file=sys.stderr,
            )
            time.sleep(30)


def arm_at_home(backend: str, n: int, **options: Any):
    """An arm7 backend with every env at keyframe "home" (arm bent above the table, cube at rest)."""
    sim = make_arm_backend(backend, n, **options)
    home = sim.get_keyframe_qpos("home")
    sim.set_state(None, home.expand(n, -1))
    return sim


def arm_ctrls(n: int, seed: int, count: int = 8):
    """``count`` float32 (n, 7) torch ctrl tensors: the home pose +- 0.1 rad, cycled by the loops.

    Position targets near "home" keep the arm moving (each call gets another
    target) without driving it into the table, so the cost per step stays the
    same through the run.
    """
    import torch

    from simbackend.models import compile_model

    model = compile_model(ARM)
    home = np.asarray(model.key("home").ctrl)
    rng = np.random.default_rng(seed)
    return [
        torch.from_numpy((home + rng.uniform(-0.1, 0.1, size=(n, home.size))).astype(np.float32)) for _ in range(count)
    ]


# ----------------------------------------------------------------------------
# machine description and load
# ----------------------------------------------------------------------------
def machine(engines: dict[str, Any], extras: dict[str, Any] | None = None) -> dict:
    """CPU, platform and library versions; ``engines`` after the Python version, ``extras`` after numpy."""
    import torch

    cpu_model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu_count": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_model": cpu_model,
        "platform": platform.platform(),
        "python": platform.python_version(),
        **engines,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "numpy": np.__version__,
        **(extras or {}),
        "loadavg_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def package_version(name: str) -> str | None:
    """Installed version of distribution ``name`` (without importing it), None if absent."""
    try:
        return __import__("importlib.metadata").metadata.version(name)
    except Exception:  # noqa: BLE001
        return None


def cpu_snapshot() -> tuple[float, float, float, float] | None:
    """(wall s, machine busy CPU s, machine steal s, this process's CPU s incl. waited children); Linux only."""
    try:
        v = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    busy = (v[0] + v[1] + v[2] + v[5] + v[6]) / tick  # user nice system irq softirq (guest is inside user)
    steal = (v[7] if len(v) > 7 else 0) / tick
    t = os.times()
    return time.perf_counter(), busy, steal, t.user + t.system + t.children_user + t.children_system


def load_between(a: tuple | None, b: tuple | None) -> dict | None:
    """CPU used by OTHER processes (and stolen by the hypervisor) between two snapshots, in cores."""
    if a is None or b is None:
        return None
    wall = b[0] - a[0]
    own = (b[3] - a[3]) / wall
    foreign = max(0.0, (b[1] - a[1]) / wall - own)
    return {"own_cores": own, "foreign_cores": foreign, "steal_cores": (b[2] - a[2]) / wall}


def wait_quiet(limit_s: float, threshold: float = 0.15, window_s: float = 1.0) -> dict:
    """Wait (at most ``limit_s``) until other processes use < ``threshold`` cores over ``window_s``.

    Returns what happened: seconds waited and whether the machine was quiet.
    """
    t0 = time.perf_counter()
    foreign = None
    while True:
        a = cpu_snapshot()
        time.sleep(window_s)
        load = load_between(a, cpu_snapshot())
        if load is None:
            return {"waited_s": 0.0, "quiet": None, "other_cores": None}
        foreign = load["foreign_cores"] + load["steal_cores"]
        if foreign < threshold or time.perf_counter() - t0 >= limit_s:
            return {"waited_s": time.perf_counter() - t0, "quiet": foreign < threshold, "other_cores": foreign}


# ----------------------------------------------------------------------------
# report
# ----------------------------------------------------------------------------
def fmt_rate(v: dict) -> str:
    r = v["rate"]
    return f"{r / 1e6:.3f} M" if r >= 1e6 else (f"{r / 1e3:.1f} k" if r >= 1e3 else f"{r:.1f}")


RowsHook = Callable[[Any, dict, Any], None]  # hook(table, result["sections"], console)


def print_tables(
    result: dict,
    header: str,
    busy_hint: str,
    extra_variant_rows: RowsHook | None = None,
    extra_figure_rows: RowsHook | None = None,
) -> None:
    """The variants table and the figures-vs-targets table; hooks add a script's informational rows."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:  # piped or captured: do not squeeze the tables into 80 columns
        console = Console(width=160)
    console.print(header)

    var = Table(title="Variants (median over rounds)", show_lines=False)
    for col in ("section", "case", "variant", "ms/call", "rate", "unit", "what"):
        var.add_column(col, justify="right" if col in ("ms/call", "rate") else "left")
    sec = result["sections"]
    for name, data in sec.items():
        if "error" in data:
            var.add_row(name, "", "[red]error[/red]", "", "", "", data["error"][:80])
            continue
        if "skipped" in data:
            var.add_row(name, "", "[yellow]skipped[/yellow]", "", "", "", data["skipped"])
            continue
        groups = data["cases"].items() if "cases" in data else [("", data)] if "variants" in data else []
        for case, g in groups:
            for vname, v in g["variants"].items():
                var.add_row(name, case, vname, f"{v['ms_per_call']:.3f}", fmt_rate(v), v["rate_unit"], v["label"])
    if extra_variant_rows is not None:
        extra_variant_rows(var, sec, console)
    console.print(var)

    figs = Table(title="Figures vs targets")
    for col in ("section", "figure", "value", "spread (min..max)", "target", "value/target", "meets", "other load"):
        figs.add_column(col)
    busy = []
    for name, data in sec.items():
        load = data.get("machine_load")
        other = "" if load is None else f"{load['foreign_cores'] + load['steal_cores']:.2f} cores"
        if load is not None and load["foreign_cores"] + load["steal_cores"] > 0.25:
            busy.append(name)
        for f in data.get("figures", []):
            spread = f"{f['min']:.3f}..{f['max']:.3f}" if "min" in f else ""
            ok = "[green]yes[/green]" if f["meets_target"] else "[red]NO[/red]"
            figs.add_row(
                name,
                f["name"] + (f"  ({f['note']})" if "note" in f else ""),
                f"{f['value']:.3f} {f['unit']}",
                spread,
                f"{f['op']} {f['target']} {f['unit']}",
                f"{f['ratio_to_target']:.2f}",
                ok,
                other,
            )
    if extra_figure_rows is not None:
        extra_figure_rows(figs, sec, console)
    console.print(figs)
    if busy:
        console.print(
            f"[yellow]warning:[/yellow] other processes used > 0.25 of a core during {', '.join(busy)}; "
            f"{busy_hint} Re-run on a quiet machine."
        )
    console.print(f"runtime {result['runtime_s']:.1f} s; JSON written to {result['out']}")


# ----------------------------------------------------------------------------
# command line
# ----------------------------------------------------------------------------
def main(
    argv: list[str] | None,
    *,
    description: str,
    sections: dict[str, Callable[[Any], dict]],
    settings: Callable[[bool], BaseSettings],
    default_out: Path,
    quick_help: str,
    machine_info: Callable[[], dict],
    report: Callable[[dict], None],
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
    configure: Callable[[argparse.Namespace], None] | None = None,
) -> int:
    """Parse ``--quick/--only/--out/--wait-quiet``, run the sections, write the JSON, print the report.

    A script with flags of its own adds them with ``add_arguments(parser)`` and
    reads them in ``configure(args)``, called before ``settings``.
    A section that raises is recorded as ``{"error": ...}``; the others still run
    and the exit status is 1.
    """
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help=quick_help)
    p.add_argument(
        "--only", choices=tuple(sections), action="append", help="run only this section (repeatable); default: all"
    )
    p.add_argument("--out", type=Path, default=default_out, help=f"JSON output path (default {default_out})")
    p.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="S",
        help="before each section, wait up to S seconds for other processes to use < 0.15 cores",
    )
    if add_arguments is not None:
        add_arguments(p)
    args = p.parse_args(argv)
    if configure is not None:
        configure(args)

    s = settings(args.quick)
    t0 = time.perf_counter()
    result: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "script": Path(sys.argv[0]).name,
        "machine": machine_info(),
        "settings": s.as_dict(),
        "sections": {},
    }
    failed = False
    for name in args.only or tuple(sections):
        waited = wait_quiet(args.wait_quiet) if args.wait_quiet > 0 else None
        print(
            f"[bench] {name} ..." + (f" (waited {waited['waited_s']:.0f} s for a quiet machine)" if waited else ""),
            file=sys.stderr,
            flush=True,
        )
        ts, snap = time.perf_counter(), cpu_snapshot()
        try:
            data = sections[name](s)
        except Exception as e:  # noqa: BLE001 - keep the other sections' results
            import traceback

            traceback.print_exc()
            data = {"error": f"{type(e).__name__}: {e}", "figures": []}
            failed = True
        data["runtime_s"] = time.perf_counter() - ts
        data["machine_load"] = load_between(snap, cpu_snapshot())
        if waited is not None:
            data["wait_quiet"] = waited
        result["sections"][name] = data
    result["machine"]["loadavg_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    result["runtime_s"] = time.perf_counter() - t0
    result["all_targets_met"] = all(f["meets_target"] for d in result["sections"].values() for f in d["figures"])
    out = args.out.resolve()
    result["out"] = str(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    report(result)
    return 1 if failed else 0
