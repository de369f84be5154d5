#!/usr/bin/env python
"""The parity figures of docs/parity.md: one engine against MuJoCo on every built-in and gymnasium model.

For each model, ``simbackend.parity.run_parity`` runs the model's default tiers (the ones
``tests/parity`` checks); each cell is the row of that tier closest to its tolerance (largest
error / tolerance): its error and the quantity, ``FAIL`` when it exceeds the tolerance. A model the
engine refuses shows the refusal. Usage::

    python benchmarks/parity_table.py --sim mjwarp
    python benchmarks/parity_table.py --sim sapien --models arm7 cartpole --num-envs 16

Prints a Markdown table (with the date and the settings) on stdout.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import sys
from typing import Any

if not os.environ.get("MUJOCO_GL"):
    os.environ["MUJOCO_GL"] = "egl"


def _cases(names: list[str] | None) -> dict[str, Any]:
    from simbackend.contract_tests.helpers import parity_models

    cases: dict[str, Any] = parity_models()
    if names:
        unknown = [n for n in names if n not in cases]
        if unknown:
            raise SystemExit(f"--models: unknown model(s) {unknown}; known: {', '.join(cases)}")
        cases = {n: cases[n] for n in names}
    return cases


def _worst(rows: list[Any]) -> str:
    """The row closest to (or furthest past) its tolerance, as ``error (quantity)``."""
    measured = [r for r in rows if not r.skipped and r.max_error is not None and r.tolerance]
    if not measured:
        return "-"

    def ratio(r: Any) -> float:
        return math.inf if not math.isfinite(r.max_error) else r.max_error / r.tolerance

    row = max(measured, key=ratio)
    if row.max_error == 0:
        return "0 (every row)"
    text = f"{row.max_error:.2g} ({row.quantity})"
    return text if row.passed else f"FAIL {text}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--sim", required=True, help="registered backend compared with the reference")
    p.add_argument("--reference", default="mujoco")
    p.add_argument("--models", nargs="+", default=None, help="built-in names or gymnasium/<stem> (default: all)")
    p.add_argument("--num-envs", type=int, default=64, help="random configurations of the static tiers")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    from simbackend.parity import TIERS, run_parity

    cases = _cases(args.models)
    reports = {}
    for label, source in cases.items():
        print(f"[parity_table] {args.sim} vs {args.reference}: {label}", file=sys.stderr, flush=True)
        reports[label] = run_parity(args.sim, source, reference=args.reference, num_envs=args.num_envs, seed=args.seed)
    tiers = [t for t in TIERS if any(t in r.tiers for r in reports.values())]
    print(
        f"{args.sim} against {args.reference}, {datetime.date.today().isoformat()}, seed {args.seed},"
        f" {args.num_envs} configurations; per tier the row closest to its tolerance:\n"
    )
    print("| model | " + " | ".join(tiers) + " |")
    print("|---|" + "---|" * len(tiers))
    for label, report in reports.items():
        load = report.row("load", "build")
        if not load.passed:
            print(f"| {label} | refused: {load.detail.replace('|', '/')} |" + " |" * (len(tiers) - 1))
            continue
        cells = [_worst(report.tier_rows(t)) if t in report.tiers else "" for t in tiers]
        print(f"| {label} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
