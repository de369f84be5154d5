"""Stand each robot description here on each engine and check that it holds.

Per robot and engine: the velocity task (``joint_noise`` 0, so each episode
starts exactly at the default pose) steps zero actions for ``--seconds``
(default 2 s), which holds the default pose with the robot's own actuation.
It then prints the settled base height beside the default one, how fast the
base still moves up or down over the last 0.5 s (``dh/dt``), and the sum of
the feet's vertical contact forces beside the robot's weight ``m g`` (the
feet should carry it all), with the sum over every body for comparison.

    python benchmarks/robots/fetch_models.py    # the models, once
    python benchmarks/robots/check_robots.py
    python benchmarks/robots/check_robots.py --robot a1 --sim mujoco --sim sapien

A robot that falls (the task terminates its episode), an engine that refuses
the description (its one-line message is printed), or a foot force sum off
``m g`` by more than ``--tolerance`` makes the exit status 1.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from simbackend.tasks import make_task

HERE = Path(__file__).resolve().parent
ROBOTS = ("a1", "go2", "aliengo")
ENGINES = ("mujoco", "sapien", "mjwarp", "motrix")


@dataclass
class Standing:
    mass: float  # kg, the sum of the engine's body masses
    weight: float  # N, m |g|
    default_height: float  # m, the base's height at the default state
    height: float  # m, after settling
    drift: float  # m/s, the base's mean vertical velocity over the last 0.5 s held
    feet_fz: float  # N, vertical contact force on the feet
    all_fz: float  # N, vertical contact force on every body
    fell: bool  # the task ended an episode while holding
    wall_s: float


def stand(robot_json: Path, sim: str, seconds: float) -> Standing:
    start = time.perf_counter()
    task = make_task("velocity", sim, 1, config={"robot": str(robot_json), "joint_noise": 0.0})
    try:
        backend = task.backend
        robot = task.robot
        base = torch.as_tensor([robot.base_body])
        task.reset()
        default_height = float(backend.get_body_pos_w(base)[0, 0, 2])
        zeros = torch.zeros(task.num_envs, task.action_dim, device=task.device)
        fell = False
        steps = round(seconds / task.control_dt)
        last = max(1, min(steps, round(0.5 / task.control_dt)))
        before = default_height
        for i in range(steps):
            if i == steps - last:
                before = float(backend.get_body_pos_w(base)[0, 0, 2])
            out = task.step(zeros)
            fell = fell or bool(out.terminated.any())
        height = float(backend.get_body_pos_w(base)[0, 0, 2])
        mass = float(backend.get_env_body_mass()[0].sum())
        gravity = 9.81  # the robot scene's gravity (robots.md: a floor, standard gravity)
        bodies = torch.arange(1, backend.get_env_body_mass().shape[1])  # all but the world
        return Standing(
            mass=mass,
            weight=mass * gravity,
            default_height=default_height,
            height=height,
            drift=(height - before) / (last * task.control_dt),
            feet_fz=float(backend.get_body_contact_force_w(robot.feet)[0, :, 2].sum()),
            all_fz=float(backend.get_body_contact_force_w(bodies)[0, :, 2].sum()),
            fell=fell,
            wall_s=time.perf_counter() - start,
        )
    finally:
        task.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--robot", action="append", help=f"robot JSON name here (default: {ROBOTS})")
    parser.add_argument("--sim", action="append", help=f"engine (default: {ENGINES})")
    parser.add_argument("--seconds", type=float, default=2.0, help="time held (default 2 s)")
    parser.add_argument(
        "--tolerance",
        type=float,
        default=0.05,
        help="largest relative gap between the feet's force sum and m g (default 0.05)",
    )
    args = parser.parse_args(argv)
    failed = False
    header = (
        f"{'robot':8} {'engine':7} {'mass kg':>8} {'m g N':>7} {'h0 m':>7} "
        f"{f'h {args.seconds:g}s m':>8} {'dh/dt mm/s':>10} {'feet Fz':>8} {'/ m g':>6} "
        f"{'all Fz':>8}  note"
    )
    print(header, flush=True)
    for name in args.robot or ROBOTS:
        path = HERE / f"{name}.json"
        if not (HERE / "models" / name).is_dir():
            print(f"{name}: models/{name} missing: run fetch_models.py first", file=sys.stderr)
            return 1
        for sim in args.sim or ENGINES:
            try:
                s = stand(path, sim, args.seconds)
            except Exception as exc:  # an engine refusing the description: its one line
                failed = True
                msg = str(exc).splitlines()[0] if str(exc) else ""
                print(f"{name:8} {sim:7} FAILED {type(exc).__name__}: {msg}", flush=True)
                continue
            ratio = s.feet_fz / s.weight
            notes = []
            if s.fell:
                notes.append("FELL")
            if not math.isfinite(ratio) or abs(ratio - 1.0) > args.tolerance:
                notes.append("feet force off m g")
            failed = failed or bool(notes)
            notes.append(f"{s.wall_s:.0f} s")
            print(
                f"{name:8} {sim:7} {s.mass:8.3f} {s.weight:7.1f} {s.default_height:7.4f} "
                f"{s.height:8.4f} {1000 * s.drift:10.2f} {s.feet_fz:8.1f} {ratio:6.3f} "
                f"{s.all_fz:8.1f}  {', '.join(notes)}",
                flush=True,
            )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
