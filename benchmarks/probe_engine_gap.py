#!/usr/bin/env python
"""Where two engines part on a legged robot: the same open-loop actions, in the air and on the floor.

For each robot, the velocity task is built on the reference engine and on the other one, with the
same start (seed, episode 0). A fixed sequence of actions (sinusoids per joint, the same on both)
is applied through the task (its actuation: servos or the PD law) for ``--steps`` policy steps,
twice: with the robot lifted 1 m (no contact: it falls freely for the first 0.45 s, so only
the actuation and the joint dynamics are compared) and standing on the floor (contact and friction
too). Printed per robot and case: the RMS difference of the policy joints' angles between the
engines over the steps compared (rad), and of the base height at the end (m).

Usage::

    python benchmarks/probe_engine_gap.py --robots quadruped go1 --other sapien
"""

from __future__ import annotations

import argparse
import math
import os
import sys

if not os.environ.get("MUJOCO_GL"):
    os.environ["MUJOCO_GL"] = "egl"


def _rollout(task_name: str, robot: str, sim: str, lifted: bool, steps: int) -> tuple:
    import torch

    from simbackend.tasks import make_task

    config = {"joint_noise": 0.0, "episode_length": 10_000}
    if task_name == "velocity":
        config["robot"] = robot
    task = make_task(task_name, sim, 1, config=config, seed=0)
    try:
        b = task.backend
        if lifted:
            q = b.get_qpos().clone()
            q[:, 2] += 1.0
            b.set_state(None, q)
        k = task.action_dim
        phase = torch.arange(k, dtype=torch.float32) * 0.7
        joints, heights = [], []
        for i in range(steps):
            t = i * task.control_dt
            action = 0.6 * torch.sin(2 * math.pi * 1.5 * t + phase)[None]
            task.step(action)
            joints.append(b.get_dof_pos()[0, task.robot.dof_cols].clone())
            heights.append(float(b.get_base_pos()[0, 2]))
        return torch.stack(joints), heights
    finally:
        task.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--robots", nargs="+", default=["quadruped", "go1"])
    p.add_argument("--reference", default="mujoco")
    p.add_argument("--other", default="sapien")
    p.add_argument(
        "--steps", type=int, default=22, help="policy steps of 20 ms (22: 0.44 s, before a lifted robot lands)"
    )
    args = p.parse_args(argv)
    print(
        f"| robot | case | joint angle RMS difference, {args.other} vs {args.reference} (rad) | base height difference at the end (m) |"
    )
    print("|---|---|---|---|")
    for robot in args.robots:
        task_name = "quadruped" if robot == "quadruped" else "velocity"
        for lifted in (True, False):
            ja, ha = _rollout(task_name, robot, args.reference, lifted, args.steps)
            jb, hb = _rollout(task_name, robot, args.other, lifted, args.steps)
            rms = float(((ja - jb) ** 2).mean().sqrt())
            case = "in the air" if lifted else "on the floor"
            print(f"| {robot} | {case} | {rms:.4f} | {hb[-1] - ha[-1]:+.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
