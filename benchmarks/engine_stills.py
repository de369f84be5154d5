#!/usr/bin/env python
"""One picture of a trained policy on every engine: stills of ``simbackend eval --video``, tiled.

For each engine named, the checkpoint's deterministic policy is evaluated with a video of env 0
(``simbackend.training.evaluate(..., video=...)``, MuJoCo's renderer on that engine's state);
``--frames`` stills evenly spaced over the first episode are taken from each video, one row per
engine, and written side by side as one PNG, each row labelled with its engine.

Usage::

    python benchmarks/engine_stills.py --checkpoint runs/go1/checkpoint_final.pt \\
        --sims mujoco sapien mjwarp motrix --out docs/images/go1_engines.png
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

if not os.environ.get("MUJOCO_GL"):
    os.environ["MUJOCO_GL"] = "egl"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--sims", nargs="+", default=["mujoco", "sapien", "mjwarp"])
    p.add_argument("--frames", type=int, default=4, help="stills per engine")
    p.add_argument("--seed", type=int, default=100)
    p.add_argument("--size", default="320x240")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument(
        "--override", default=None, help="task settings replacing the checkpoint's, as JSON (e.g. another terrain)"
    )
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="SIM=JSON",
        help='backend options of one engine, as JSON (e.g. motrix=\'{"motrix": {"solver_tolerance": 1e-5}}\')',
    )
    p.add_argument("--label", action="append", default=[], metavar="SIM=TEXT", help="a row's label (default: SIM)")
    args = p.parse_args(argv)
    import json

    override = json.loads(args.override) if args.override else None
    options = {k: json.loads(v) for k, v in (o.split("=", 1) for o in args.option)}
    labels = dict(o.split("=", 1) for o in args.label)

    import imageio.v3 as iio
    import numpy as np
    from PIL import Image, ImageDraw

    from simbackend.training import evaluate

    w, h = (int(x) for x in args.size.split("x"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for sim in args.sims:
            video = Path(tmp) / f"{sim}.mp4"
            evaluate(
                args.checkpoint,
                sim,
                seeds=(args.seed,),
                episodes_per_seed=1,
                video=video,
                video_size=(w, h),
                task_config_override=override,
                backend_options=options.get(sim),
            )
            frames = iio.imread(video)
            picks = np.linspace(0, len(frames) - 1, args.frames).round().astype(int)
            row = np.concatenate([frames[i] for i in picks], axis=1)
            img = Image.fromarray(row)
            ImageDraw.Draw(img).text((8, 6), labels.get(sim, sim), fill=(255, 255, 255))
            rows.append(np.asarray(img))
            print(f"[stills] {sim}: {len(frames)} frames", file=sys.stderr)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.concatenate(rows, axis=0)).save(args.out)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
