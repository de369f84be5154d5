#!/usr/bin/env python
"""What an exported policy costs to run: ONNX (onnxruntime) against the torch actor, and the deployment loop.

Interleaved call by call in one process (``_common.interleaved``), one thread each (torch and onnxruntime),
on observations of Go1 standing and walking (``tests/data/go1_velocity.pt``, or ``--checkpoint``):

* ``inference`` at N = 1 and N = 256: onnxruntime's ``session.run`` on the exported file; the torch actor as the
  project's evaluation calls it (``Checkpoint.policy()``: rsl-rl's model on a TensorDict, inference mode); the
  bare network (rsl-rl's export wrapper: normaliser, MLP, mean) under ``torch.inference_mode``; TorchScript.
  Figure: ONNX / torch actor time per call at N = 1 (target <= 1: the issue's).
* ``agreement``: the loop against the project's evaluation on MuJoCo, 16 episodes from the same starts
  and commands: the largest observation and action differences over the first 200 steps, and the episodes' ends.
* ``loop``: one control period of ``examples/deploy/run_policy.py`` on Go1 (observation from MuJoCo data, the
  ONNX policy, 4 physics steps), and its parts (info): how far above real time the reference loop runs.

Usage::

    python benchmarks/export.py                    # about a minute on 2 cores
    python benchmarks/export.py --quick            # smoke check
    python benchmarks/export.py --out /tmp/export.json

The JSON (default ``benchmarks/results/export.json``) holds every variant's per-call times per round and the
figures; docs/deploy.md quotes them.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from _common import BaseSettings, figure, interleaved, machine, package_version, paired_ratio, variant

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINT = ROOT / "tests" / "data" / "go1_velocity.pt"
LOOP = ROOT / "examples" / "deploy" / "run_policy.py"


def _observations(ckpt, n: int) -> torch.Tensor:
    """``n`` Go1 observations: the first steps of the checkpoint's policy on MuJoCo."""
    from simbackend.tasks import make_task

    task = make_task(ckpt.task, "mujoco", min(n, 64), config=ckpt.task_config, seed=11)
    policy = ckpt.policy()
    rows, obs = [], task.flatten(task.observe())
    while sum(len(r) for r in rows) < n:
        rows.append(obs)
        obs = task.flatten(task.step(policy(obs)).obs)
    task.close()
    return torch.cat(rows)[:n].contiguous()


def inference(settings: BaseSettings, ckpt, exported, sizes: tuple[int, ...]) -> dict:
    import onnxruntime as ort

    from simbackend.training.checkpoint import build_actor

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    session = ort.InferenceSession(str(exported.onnx), opts, providers=["CPUExecutionProvider"])
    policy = ckpt.policy()
    actor = build_actor(ckpt.data["rsl_rl_cfg"], int(ckpt.data["observation_size"]), int(ckpt.data["action_dim"]))
    actor.load_state_dict(ckpt.data["actor_state_dict"])
    bare = actor.as_onnx(verbose=False).eval()
    script = torch.jit.load(str(exported.torchscript))
    out = {}
    for n in sizes:
        obs = _observations(ckpt, max(n, 64))[:n]
        obs_np = obs.numpy()
        with torch.inference_mode():
            ref = bare(obs).numpy()
        assert np.abs(session.run(None, {"obs": obs_np})[0] - ref).max() < 1e-4

        def run_bare(i: int, obs=obs) -> None:
            with torch.inference_mode():
                bare(obs)

        def run_script(i: int, obs=obs) -> None:
            with torch.inference_mode():
                script(obs)

        calls = {
            "onnxruntime": lambda i, x=obs_np: session.run(None, {"obs": x}),
            "torch_actor": lambda i, x=obs: policy(x),
            "torch_bare": run_bare,
            "torchscript": run_script,
        }
        samples, iters = interleaved(calls, settings)
        labels = {
            "onnxruntime": "onnxruntime session.run on the exported file",
            "torch_actor": "the torch actor as the evaluation calls it (rsl-rl model on a TensorDict)",
            "torch_bare": "the bare torch network (normaliser, MLP, mean), inference mode",
            "torchscript": "the TorchScript export",
        }
        out[f"n{n}"] = {
            "variants": {k: variant(samples[k], n, "obs/s", iters, labels[k]) for k in calls},
            "ratio_onnx_vs_torch_actor": paired_ratio(samples["onnxruntime"], samples["torch_actor"]),
            "ratio_onnx_vs_torch_bare": paired_ratio(samples["onnxruntime"], samples["torch_bare"]),
        }
    return out


def loop(settings: BaseSettings, exported) -> dict:
    import mujoco

    rp = _load_loop()
    runner = rp.Runner(exported.onnx)
    runner.reset()
    c, m, d = runner.controller, runner.model, runner.data
    command = np.array([0.5, 0.0, 0.0])
    state = {"obs": c.observe(d, command)}

    def period(i: int) -> None:
        c.act(runner.policy(state["obs"]))
        for _ in range(c.decimation):
            c.ctrl(d)
            mujoco.mj_step(m, d)
        mujoco.mj_kinematics(m, d)
        state["obs"] = c.observe(d, command)
        if i % 400 == 399:  # keep the robot on its feet: a fresh start now and then
            runner.reset()

    def physics(i: int) -> None:
        for _ in range(c.decimation):
            mujoco.mj_step(m, d)

    calls = {
        "control_period": period,
        "observe": lambda i: c.observe(d, command),
        "policy": lambda i: runner.policy(state["obs"]),
        "physics": physics,
    }
    samples, iters = interleaved(calls, settings)
    labels = {
        "control_period": "one control period: act, 4 x (ctrl, mj_step), mj_kinematics, observe",
        "observe": "the observation from MuJoCo data",
        "policy": "the ONNX policy (N = 1)",
        "physics": "4 physics steps alone",
    }
    per = {k: variant(samples[k], 1, "calls/s", iters, labels[k]) for k in calls}
    return {"variants": per, "real_time_factor": c.period / per["control_period"]["sec_per_call"]}


def _load_loop():
    spec = importlib.util.spec_from_file_location("run_policy", LOOP)
    rp = importlib.util.module_from_spec(spec)
    sys.modules["run_policy"] = rp
    spec.loader.exec_module(rp)
    return rp


def agreement(ckpt, exported, envs: int, steps: int) -> dict:
    """The deployment loop against the project's evaluation on MuJoCo, from the same starts and commands: the
    largest observation and action differences over the first ``steps`` steps, and each episode's end."""
    from simbackend.tasks import make_task
    from simbackend.training import run_episodes

    rp = _load_loop()
    policy = ckpt.policy()

    def project(nudge: bool) -> tuple:
        """The evaluation's first ``steps`` observations and actions; ``nudge``: each observation moved by one
        float32 rounding step (a relative 2**-24, alternating sign): the chaos of the dynamics alone."""
        task = make_task(ckpt.task, "mujoco", envs, config=ckpt.task_config, seed=100)
        start = task.backend.get_qpos().double().numpy().copy()
        commands = task._episode_commands.numpy().copy()
        period, resample = task.control_dt, task._resample_steps
        rec: dict[str, list] = {"obs": [], "action": []}
        sign = torch.tensor([(-1.0) ** j for j in range(task.observation_size)])

        def recording(obs: torch.Tensor) -> torch.Tensor:
            if nudge:
                obs = obs + obs.abs() * sign * 2.0**-24
            action = policy(obs)
            if len(rec["obs"]) < steps:
                rec["obs"].append(obs.numpy().copy())
                rec["action"].append(action.numpy().copy())
            return action

        result = run_episodes(task, recording, envs)
        task.close()
        return start, commands, period, resample, np.stack(rec["obs"]), np.stack(rec["action"]), result

    start, commands, period, resample, obs, act, result = project(False)
    *_, obs_n, act_n, result_n = project(True)
    runner = rp.Runner(exported.onnx)
    rows = []
    for i in range(envs):
        script = rp.Commands([[k * resample * period, *commands[i, k]] for k in range(commands.shape[1])])
        ep = runner.run_episode(script, qpos=start[i], log=True)
        o, a = np.stack(ep.log["obs"])[:steps], np.stack(ep.log["action"])[:steps]
        rows.append({
            "env": i,
            "obs_max_abs_diff": {str(t): float(np.abs(o[:t] - obs[:t, i]).max()) for t in (1, 50, 100, steps)},
            "action_max_abs_diff": {str(t): float(np.abs(a[:t] - act[:t, i]).max()) for t in (1, 50, 100, steps)},
            "loop": {"steps": ep.steps, "success": bool(ep.success)},
            "project": {"steps": int(result["length"][i]), "success": bool(result["success"][i])},
            "project_nudged_obs_max_abs_diff": {
                str(t): float(np.abs(obs_n[:t, i] - obs[:t, i]).max()) for t in (1, 50, 100, steps)
            },
            "project_nudged": {"steps": int(result_n["length"][i]), "success": bool(result_n["success"][i])},
        })  # fmt: skip
    same = all(r["loop"] == r["project"] for r in rows)
    return {"envs": envs, "steps": steps, "seed": 100, "per_env": rows, "same_episodes": same}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", default=str(CHECKPOINT))
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "export.json"))
    args = p.parse_args()
    torch.set_num_threads(1)
    from simbackend.training import load_checkpoint
    from simbackend.training.export import export_policy

    settings = BaseSettings(args.quick)
    ckpt = load_checkpoint(args.checkpoint)
    with tempfile.TemporaryDirectory() as tmp:
        exported = export_policy(ckpt, Path(tmp) / "policy.onnx", torchscript=True)
        infer = inference(settings, ckpt, exported, (1, 256))
        sections = {f"inference_{n}": block for n, block in infer.items()}
        sections["loop"] = loop(settings, exported)
        sections["agreement"] = agreement(ckpt, exported, 4 if args.quick else 16, 200)
    ratio = sections["inference_n1"]["ratio_onnx_vs_torch_actor"]
    sections["inference_n1"]["figures"] = [
        figure(
            "ONNX / torch actor time per call, N = 1",
            ratio["median"],
            1.0,
            "<=",
            "x",
            (ratio["min"], ratio["max"]),
            "onnxruntime on the exported file against the actor as the project's evaluation calls it",
        )
    ]
    results = {
        "script": "export.py",
        "date": datetime.date.today().isoformat(),
        "machine": machine(
            {"mujoco": package_version("mujoco")},
            {"onnxruntime": package_version("onnxruntime"), "onnx": package_version("onnx")},
        ),
        "settings": settings.as_dict(),
        "checkpoint": Path(args.checkpoint).name,
        "sections": sections,
    }
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    for n, block in infer.items():
        us = {k: v["sec_per_call"] * 1e6 for k, v in block["variants"].items()}
        print(
            f"{n}: " + ", ".join(f"{k} {v:.1f} us" for k, v in us.items())
            + f"; ONNX / torch actor {block['ratio_onnx_vs_torch_actor']['median']:.2f}x,"
            f" ONNX / bare torch {block['ratio_onnx_vs_torch_bare']['median']:.2f}x"
        )  # fmt: skip
    lp = sections["loop"]
    print(
        "loop: " + ", ".join(f"{k} {v['sec_per_call'] * 1e6:.1f} us" for k, v in lp["variants"].items())
        + f"; {lp['real_time_factor']:.0f}x real time"
    )  # fmt: skip
    ag = sections["agreement"]
    worst = max(r["obs_max_abs_diff"]["200"] for r in ag["per_env"])
    worst_a = max(r["action_max_abs_diff"]["200"] for r in ag["per_env"])
    wins = sum(r["loop"]["success"] for r in ag["per_env"])
    nudged = sorted(r["project_nudged_obs_max_abs_diff"]["200"] for r in ag["per_env"])
    loops = sorted(r["obs_max_abs_diff"]["200"] for r in ag["per_env"])
    print(f"  loop vs project, 200 steps, per episode (sorted): {' '.join(f'{v:.0e}' for v in loops)}")
    print(f"  project vs itself nudged by one float32 step:     {' '.join(f'{v:.0e}' for v in nudged)}")
    print(
        f"agreement over {ag['envs']} episodes: first 200 steps, observations within {worst:.1e},"
        f" actions within {worst_a:.1e}; same ends {ag['same_episodes']}; loop successes {wins}/{ag['envs']}"
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
