"""Calibration benchmark: known parameters recovered, and engines brought together.

Two experiments on the toy quadruped (``--robot quadruped``: PD law on motors, feet on the floor),
each with excitation logs written by ``simbackend.calibration.excite`` (chirps to fit to, steps
held out) and the fit of ``simbackend.calibration.calibrate``:

* ``recover``: MuJoCo logs made with six known perturbed parameters (floor and foot friction,
  joint damping, armature, the torso's mass, contact time constant and damping ratio); the
  unperturbed model on ``--targets`` (MuJoCo, MuJoCo Warp) is fitted to them. Reports each value
  against the truth and the loss sensitivity (which parameters the excitation pins down).
* ``engines``: logs made on PhysX (SAPIEN) and Motrix; MuJoCo is fitted to each with the contact
  and joint parameters; reports the held-out error before and after, per channel.
* ``impedance``: ``engines`` again on the same logs, with the contact's impedance (``geom_impedance``,
  MuJoCo's solimp) as a seventh parameter.

Results: ``benchmarks/results/calibration.json`` (and the report folders with pictures under
``--out``); ``docs/calibration.md`` quotes them.

    python benchmarks/calibration.py                      # both, MuJoCo target
    python benchmarks/calibration.py --part recover --targets mujoco,mjwarp
    python benchmarks/calibration.py --part plan          # plans/quadruped_calibrated_dr.json from `engines`
    python benchmarks/calibration.py --part picture       # docs/images/calibration_base_height.png
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results" / "calibration.json"
ROBOT = "quadruped"
FEET = ["floor", ".*_foot"]

#: the truth of ``recover``: plan terms (scale of the model's values) and the parameter bounds fitted
KNOWN = [
    ("friction", {"kind": "geom_friction", "targets": FEET}, 0.6, (0.3, 3.0)),
    ("damping", {"kind": "joint_damping"}, 2.5, (0.2, 5.0)),
    ("armature", {"kind": "joint_armature"}, 1.8, (0.2, 5.0)),
    ("torso_mass", {"kind": "body_mass", "targets": ["torso"]}, 1.3, (0.5, 2.0)),
    ("timeconst", {"kind": "geom_compliance", "targets": FEET, "components": ["timeconst"]}, 2.0, (0.5, 4.0)),
    ("dampratio", {"kind": "geom_compliance", "targets": FEET, "components": ["dampratio"]}, 0.6, (0.25, 2.0)),
]

#: what ``engines`` fits: the contact, the joints
ENGINE_PARAMS = [
    {"name": "friction", "kind": "geom_friction", "targets": FEET, "low": 0.3, "high": 3.0},
    {"name": "timeconst", "kind": "geom_compliance", "targets": FEET, "components": ["timeconst"], "low": 0.21,
     "high": 4.0},
    {"name": "dampratio", "kind": "geom_compliance", "targets": FEET, "components": ["dampratio"], "low": 0.25,
     "high": 4.0},
    {"name": "damping", "kind": "joint_damping", "low": 0.2, "high": 5.0},
    {"name": "armature", "kind": "joint_armature", "low": 0.2, "high": 5.0},
    {"name": "frictionloss", "kind": "joint_frictionloss", "operation": "add", "low": 0.0, "high": 0.5},
]  # fmt: skip


def _logs(sim: str, folder: Path, plan: Any = None, *, seconds: float, envs: int) -> tuple[Path, Path]:
    from simbackend.calibration import excite

    fit, held = folder / f"{sim}_chirp.npz", folder / f"{sim}_steps.npz"
    excite(ROBOT, sim, fit, signal="chirp", seconds=seconds, num_envs=envs, seed=0, plan=plan)
    excite(ROBOT, sim, held, signal="steps", seconds=seconds, num_envs=max(1, envs // 2), seed=1, plan=plan)
    return fit, held


def _fit(target: str, fit: Path, held: Path, params: Any, args: Any, folder: Path, title: str) -> Any:
    from simbackend.calibration import calibrate, load_reference
    from simbackend.calibration.report import write_report
    from simbackend.robots import make_robot_backend

    probe = make_robot_backend(ROBOT, target, 1)
    with probe:
        ref = load_reference(fit, probe.info, probe.physics_dt)
        val = load_reference(held, probe.info, probe.physics_dt)
    result = calibrate(
        lambda n: make_robot_backend(ROBOT, target, n),
        ref,
        params,
        validation=val,
        window=args.window,
        popsize=args.popsize,
        generations=args.generations,
        max_envs=args.max_envs if target != "mjwarp" else args.mjwarp_envs,
        seed=0,
        progress=lambda e: print(f"  {title}: generation {e['generation']}: best {e['best']:.4g} ({e['seconds']} s)"),
    )
    write_report(result, folder / title.replace(" ", "_"), title=title)
    return result


def _summary(result: Any) -> dict:
    d = result.to_dict()
    return {
        "values": {p["name"]: p["value"] for p in d["parameters"]},
        "fit_loss": [d["fit"]["before"]["loss"], d["fit"]["after"]["loss"]],
        "held_out_loss": [d["validation"]["before"]["loss"], d["validation"]["after"]["loss"]],
        "held_out_rms": {
            ch: [d["validation"]["before"]["channels"][ch]["rms"], v["rms"]]
            for ch, v in d["validation"]["after"]["channels"].items()
        },
        "sensitivity": d["sensitivity"],
        "seconds": d["seconds"],
        "evaluations": d["evaluations"],
        "settings": {k: d["settings"][k] for k in ("num_envs", "windows", "validation_windows", "popsize", "window")},
    }


def recover(args: Any, folder: Path) -> dict:
    from simbackend.calibration import ParameterSet
    from simbackend.randomization import Distribution, RandomizationPlan, Term

    terms = []
    for name, spec, value, _ in KNOWN:
        kw = {k: (tuple(v) if isinstance(v, list) else v) for k, v in spec.items() if k != "kind"}
        terms.append(Term(spec["kind"], Distribution.fixed(value), operation="scale", name=name, **kw))
    plan = RandomizationPlan(tuple(terms))
    fit, held = _logs("mujoco", folder, plan, seconds=args.seconds, envs=args.envs)
    params = ParameterSet.from_dict(
        [{**spec, "name": name, "low": lo, "high": hi} for name, spec, _, (lo, hi) in KNOWN]
    )
    out = {"truth": {name: value for name, _, value, _ in KNOWN}}
    for target in args.targets:
        print(f"recover: fitting {target} to MuJoCo logs with known parameters")
        r = _fit(target, fit, held, params, args, folder, f"recover on {target}")
        s = _summary(r)
        s["error_percent"] = {k: 100 * abs(s["values"][k] - v) / v for k, v in out["truth"].items()}
        s["run"] = {"logged_s_per_env": args.seconds, "envs": args.envs, "generations": args.generations,
                    "date": datetime.date.today().isoformat()}  # fmt: skip
        out[target] = s
    return out


#: ``impedance``'s extra parameter: the contact's impedance (MuJoCo's solimp dmin = dmax), set
IMPEDANCE = {"name": "impedance", "kind": "geom_impedance", "targets": FEET, "components": ["dmin", "dmax"],
             "operation": "set", "low": 0.5, "high": 0.999, "log": False}  # fmt: skip


def engines(args: Any, folder: Path, extra: tuple = ()) -> dict:
    from simbackend.calibration import ParameterSet

    params = ParameterSet.from_dict([*ENGINE_PARAMS, *extra])
    out = {}
    for source in args.sources:
        fit, held = folder / f"{source}_chirp.npz", folder / f"{source}_steps.npz"
        if not (extra and fit.is_file() and held.is_file()):  # `impedance` refits the logs `engines` made
            fit, held = _logs(source, folder, seconds=args.seconds, envs=args.envs)
        tag = " with impedance" if extra else ""
        print(f"engines{tag}: fitting MuJoCo to {source} logs")
        r = _fit("mujoco", fit, held, params, args, folder, f"mujoco fitted to {source}{tag}")
        s = _summary(r)
        b, a = s["held_out_loss"]
        s["held_out_ratio"] = a / b
        out[source] = s
    return out


PLANS = Path(__file__).parent / "plans"


def calibrated_plan(data: dict, spread: float = 0.2) -> Path:
    """``plans/quadruped_calibrated_dr.json``: the quadruped's plan (``plans/quadruped_dr.json``) with
    its friction term replaced, and the contact and joint terms added, each drawn at every reset
    uniformly over the range the engines' fits span (MuJoCo fitted to PhysX and to Motrix), widened
    by ``spread`` of the values: train across the engines' calibrated range."""
    from simbackend.calibration import ParameterSet

    params = ParameterSet.from_dict(ENGINE_PARAMS)
    fits = [data["engines"][s]["values"] for s in data["engines"] if s != "meta"]
    base = json.loads((PLANS / "quadruped_dr.json").read_text())
    terms = [t for t in base["terms"] if t["kind"] != "geom_friction"]
    for p in params.parameters:
        vals = [f[p.name] for f in fits]
        if p.term.operation == "add":
            half = spread * (p.high - p.low) / 2
            lo, hi = max(p.low, min(vals) - half), min(p.high, max(vals) + half)
        else:
            lo, hi = max(p.low, min(vals) * (1 - spread)), min(p.high, max(vals) * (1 + spread))
        term = {"name": p.name, "kind": p.term.kind, "phase": "reset", "operation": p.term.operation,
                "distribution": {"kind": "uniform", "low": round(lo, 4), "high": round(hi, 4)}}  # fmt: skip
        for k in ("targets", "components"):
            if getattr(p.term, k) is not None:
                term[k] = list(getattr(p.term, k))
        terms.append(term)
    out = PLANS / "quadruped_calibrated_dr.json"
    plan = {"version": 1, "seed": base.get("seed", 0), "terms": terms}
    from simbackend.randomization import RandomizationPlan

    RandomizationPlan.from_dict(plan)  # checks it
    out.write_text(json.dumps(plan, indent=2) + "\n")
    return out


IMAGE = Path(__file__).resolve().parents[1] / "docs" / "images" / "calibration_base_height.png"


def picture(data: dict, folder: Path, seconds: float = 3.0) -> Path:
    """``docs/images/calibration_base_height.png``: for each engine MuJoCo was fitted to, the base
    height of its first held-out episode replayed open loop on MuJoCo before and after the fit,
    against the engine's own (the logs of ``engines`` in ``folder``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from simbackend.calibration import ParameterSet, Replayer, load_reference
    from simbackend.robots import make_robot_backend

    params = ParameterSet.from_dict(ENGINE_PARAMS)
    names = {"sapien": "PhysX (SAPIEN)", "motrix": "Motrix", "mjwarp": "MuJoCo Warp"}
    sources = [s for s in data["engines"] if s != "meta"]
    fig, axes = plt.subplots(1, len(sources), figsize=(5.2 * len(sources), 3.4), dpi=120, squeeze=False)
    for ax, source in zip(axes[0], sources):
        values = np.array([data["engines"][source]["values"][n] for n in params.names])
        sim = make_robot_backend(ROBOT, "mujoco", 2)
        with sim:
            ref = load_reference(folder / f"{source}_steps.npz", sim.info, sim.physics_dt)
            seg = ref.segments[0]
            rows = min(seg.rows - 1, int(round(seconds / (seg.nsteps * sim.physics_dt))))
            rep = Replayer(sim, ref, params, popsize=2, window=1)
            qs, _ = rep.rollout(np.stack([params.identity(), values]), seg, rows)
            t = np.arange(rows + 1) * seg.nsteps * sim.physics_dt
        z = 2  # the free joint's z: the base height
        ax.plot(t, seg.qpos[: rows + 1, z], color="black", lw=2, label=f"{names.get(source, source)}")
        ax.plot(t, qs[0, :, z], color="tab:red", lw=1.2, label="MuJoCo as modelled")
        ax.plot(t, qs[1, :, z], color="tab:green", lw=1.2, ls="--", label="MuJoCo calibrated")
        ratio = data["engines"][source]["held_out_ratio"]
        ax.set_title(f"fitted to {names.get(source, source)}: held-out error x{ratio:.2f}", fontsize=10)
        ax.set_xlabel("time (s), open loop from the logged start")
        ax.set_ylabel("base height (m)")
        ax.legend(fontsize=8)
    fig.suptitle("quadruped, held-out joint steps replayed open loop", fontsize=10)
    fig.tight_layout()
    IMAGE.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(IMAGE)
    plt.close(fig)
    return IMAGE


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=("recover", "engines", "impedance", "both", "plan", "picture"), default="both")
    ap.add_argument("--targets", default="mujoco", help="recover: engines fitted (mujoco,mjwarp)")
    ap.add_argument("--sources", default="sapien,motrix", help="engines: engines whose logs MuJoCo is fitted to")
    ap.add_argument("--seconds", type=float, default=6.0, help="logged seconds per env")
    ap.add_argument("--envs", type=int, default=4, help="envs of the chirp logs (the held-out steps: half)")
    ap.add_argument("--window", type=int, default=25)
    ap.add_argument("--popsize", type=int, default=16)
    ap.add_argument("--generations", type=int, default=30)
    ap.add_argument("--max-envs", type=int, default=512)
    ap.add_argument("--mjwarp-envs", type=int, default=256)
    ap.add_argument("--out", default="/tmp/simbackend-calibration", help="logs and report folders")
    ap.add_argument("--results", default=str(RESULTS))
    args = ap.parse_args()
    args.targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    args.sources = [t.strip() for t in args.sources.split(",") if t.strip()]
    folder = Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    path = Path(args.results)
    data = json.loads(path.read_text()) if path.is_file() else {}
    if args.part == "plan":  # from the results of `engines`
        print(f"wrote {calibrated_plan(data)}")
        return
    if args.part == "picture":  # from the results and logs of `engines`
        print(f"wrote {picture(data, folder)}")
        return
    parts = (("recover", recover), ("engines", engines), ("impedance", lambda a, f: engines(a, f, (IMPEDANCE,))))
    for part, run in parts:
        if args.part != part and not (args.part == "both" and part != "impedance"):
            continue
        t0 = time.perf_counter()
        data[part] = {**data.get(part, {}), **run(args, folder)}
        data[part]["meta"] = meta(args, time.perf_counter() - t0)
    path.write_text(json.dumps(data, indent=2) + "\n")
    print(json.dumps(data, indent=2))


def meta(args: Any, wall: float) -> dict:
    return {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores",
        "robot": ROBOT,
        "seconds_per_env": args.seconds,
        "envs": args.envs,
        "generations": args.generations,
        "popsize": args.popsize,
        "window": args.window,
        "wall_s": round(wall, 1),
    }


if __name__ == "__main__":
    main()
