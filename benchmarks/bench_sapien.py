#!/usr/bin/env python
"""Side-by-side performance benchmark of the SAPIEN/PhysX backend.

Measured like ``bench_mujoco.py`` (see ``_common.py``): the variants of a
measurement alternate call by call in one process, figures are medians over
rounds, ratios medians of the per-round ratios.

Sections (``--only NAME`` runs one):

* ``step``  CPU backend ``step(ctrl, k)`` + ``get_qpos()`` + one body's pose
            vs a bare SAPIEN loop doing the same work on scenes the backend
            built (arm7, N = 64 and 256, k = 1 and 4); target >= 0.8x.
* ``mujoco`` what MuJoCo-given forces cost: arm7 with frictionloss on its
            servo joints (MuJoCo's solver gives that force every substep) vs
            plain arm7, the same step + reads (N = 16 and 64, k = 1 and 4).
* ``gpu``   ``device="cuda"`` backend, the same work, env-steps/s at
            N = 1024 and 4096 (k = 1 and 4); skipped when torch sees no CUDA.

Usage::

    python benchmarks/bench_sapien.py            # full run, about a minute on 2 cores
    python benchmarks/bench_sapien.py --quick    # smoke check, a few seconds
    python benchmarks/bench_sapien.py --only step --out /tmp/step.json

The JSON (default ``benchmarks/results/sapien.json``) has the layout of
``bench_mujoco.py``'s. See benchmarks/README.md.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import _common
from _common import ARM, ARM_BODY, BaseSettings, arm_at_home, arm_ctrls, interleaved, variant, versus_bare

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "sapien.json"
UNIT = "env-steps/s"  # N per call; one env-step is one step() call of nsteps substeps
STEP_TARGET = 0.8


class Settings(BaseSettings):
    """Rounds and block lengths of a run (``--quick`` shrinks them), and the sizes of each section."""

    def __init__(self, quick: bool):
        super().__init__(quick)
        self.n_cpu = [16, 64] if quick else [64, 256]
        self.n_gpu = [64, 256] if quick else [1024, 4096]
        self.nsteps = [1, 4]
        self.check_calls = 3  # calls of both variants compared before timing


# ----------------------------------------------------------------------------
# the bare SAPIEN loop
# ----------------------------------------------------------------------------
class BareLoop:
    """A backend's PhysX scenes driven by hand: the least work that yields the backend's outputs.

    Per call: drive targets from ``ctrl`` in one numpy expression, then per env
    ``joint.set_drive_target`` on every position-driven joint, ``system.step()``
    ``nsteps`` times, ``articulation.get_qpos()`` of every articulation with
    dofs and ``entity_pose`` of every free root link and of the read body,
    written into float32 ``(N, nq)`` qpos and ``(N, 1, 3)``/``(N, 1, 4)`` body
    pos/quat tensors. No input validation, no divergence check (no packing of
    PhysX's state), no velocity reads, no index gathers in torch.

    Args:
        sim: a CPU ``sapien`` backend (its ``engine`` and ``plan`` are used, not its methods).
        body: the body whose pose is read.
    """

    def __init__(self, sim: Any, body: int):
        plan, eng, info = sim.engine.plan, sim.engine.physx, sim.engine.plan.info
        if plan.vel_gain.any() or plan.motor_gear.any():
            raise RuntimeError("the bare loop drives position actuators only; this model has velocity or motor ones")
        self.n, self.nq = eng.num_envs, info.nq
        self.systems = eng.systems
        pos_j = plan.drive_joints[plan.stiffness[plan.drive_joints] > 0]
        k = plan.stiffness[pos_j]
        # the backend's formula: PhysX target = (pos_bias + clamp(ctrl) @ pos_gain) / K, per driven joint
        self.gain, self.bias, self.k = plan.pos_gain[:, pos_j], plan.pos_bias[pos_j], k
        self.lo, self.hi = plan.ctrl_range[:, 0], plan.ctrl_range[:, 1]
        self.joints = [[eng.comps[n][a][l].joint for a, l in plan.joint_link[pos_j]] for n in range(self.n)]

        # qpos columns of each articulation's PhysX dofs, in PhysX's dof order
        cols = {a: np.zeros(int(d), np.int64) for a, d in enumerate(eng.cols.art_dofs) if d}
        scalar = [j for j in range(len(info.joint_names)) if eng.cols.joint_dof[j] >= 0]
        for j in scalar:
            cols[int(plan.joint_link[j, 0])][eng.cols.joint_dof[j]] = info.joint_qposadr[j]
        self.scalar_cols = np.asarray(info.joint_qposadr[scalar], np.int64)
        self.offset = np.asarray(plan.joint_offset[scalar], np.float32)
        self.has_offset = bool(self.offset.any())
        free = sim.engine.layout.free_joints
        ba, bl = plan.body_link[body]
        self.per_env = [
            (
                [(eng.arts[n][a], c) for a, c in cols.items()],
                [
                    (eng.comps[n][plan.joint_link[j, 0]][plan.joint_link[j, 1]], int(info.joint_qposadr[j]))
                    for j in free
                ],
                eng.comps[n][ba][bl],
            )
            for n in range(self.n)
        ]

    def __call__(self, ctrl: Any, nsteps: int) -> tuple[Any, Any, Any]:
        import torch

        u = np.clip(np.asarray(ctrl, np.float64), self.lo, self.hi)
        targets = ((self.bias + u @ self.gain) / self.k).tolist()
        for joints, row in zip(self.joints, targets):
            for joint, t in zip(joints, row):
                joint.set_drive_target(t)
        for _ in range(nsteps):
            for system in self.systems:
                system.step()
        qpos = np.empty((self.n, self.nq), np.float32)
        pos = np.empty((self.n, 1, 3), np.float32)
        quat = np.empty((self.n, 1, 4), np.float32)
        for n, (arts, roots, link) in enumerate(self.per_env):
            row = qpos[n]
            for art, cols in arts:
                row[cols] = art.get_qpos()
            for comp, adr in roots:
                p = comp.entity_pose
                row[adr : adr + 3] = p.p
                row[adr + 3 : adr + 7] = p.q
            p = link.entity_pose
            pos[n, 0] = p.p
            quat[n, 0] = p.q
        if self.has_offset:
            qpos[:, self.scalar_cols] += self.offset
        return torch.from_numpy(qpos), torch.from_numpy(pos), torch.from_numpy(quat)


def _backend_reads(sim: Any, body: Any) -> tuple[Any, Any, Any]:
    return sim.get_qpos(), sim.get_body_pos_w(body), sim.get_body_quat_w(body)


# ----------------------------------------------------------------------------
# section 1: CPU backend step + reads vs the bare loop
# ----------------------------------------------------------------------------
def bench_step(s: Settings) -> dict:
    cases, checks = {}, {}
    for n in s.n_cpu:
        ctrls = arm_ctrls(n, seed=1)
        # two backends built alike: one is timed through its methods, the other's scenes through the bare loop
        sim, bare_sim = arm_at_home("sapien", n), arm_at_home("sapien", n)
        body = sim.get_body_ids(ARM_BODY)
        bare = BareLoop(bare_sim, int(body[0]))

        # the bare loop does the same work: from the same state, the same ctrls give the same outputs
        diff = np.zeros(3)
        for i in range(s.check_calls):
            sim.step(ctrls[i], nsteps=1)
            mine = bare(ctrls[i], 1)
            diff = np.maximum(diff, [float((a - b).abs().max()) for a, b in zip(_backend_reads(sim, body), mine)])
        checks[f"N={n}"] = {
            "calls": s.check_calls,
            "qpos_max_abs_diff": diff[0],
            "body_pos_max_abs_diff": diff[1],
            "body_quat_max_abs_diff": diff[2],
        }

        for k in s.nsteps:
            cases[f"N={n},nsteps={k}"] = versus_bare(
                s,
                "backend",
                lambda c, k: (sim.step(c, nsteps=k), _backend_reads(sim, body)),
                bare,
                ctrls,
                n,
                k,
                (
                    f"step(ctrl,{k}) + get_qpos + get_body_pos_w/quat_w(1 body)",
                    f"per env: set_drive_target x7, system.step() x{k}, get_qpos, 2 entity_pose",
                ),
                f"step N={n} k={k}: backend / bare SAPIEN loop",
                STEP_TARGET,
                UNIT,
            )
        sim.close()
        bare_sim.close()
    return {
        "params": {
            "model": ARM,
            "device": "cpu",
            "num_envs": s.n_cpu,
            "nsteps": s.nsteps,
            "body": ARM_BODY,
            "start": "keyframe home",
            "work_unit": "env-step = one step() call of nsteps substeps",
        },
        "same_work_check": checks,
        "cases": cases,
        "figures": [c["figure"] for c in cases.values()],
    }


# ----------------------------------------------------------------------------
# section 2: the cost of forces MuJoCo gives each substep
# ----------------------------------------------------------------------------
MUJOCO_FORCES_TARGET = 0.5
ARM_FRICTIONLOSS = 0.1  # N m on every arm joint


def _arm_with_frictionloss(n: int) -> Any:
    """arm7 at home with frictionloss on every hinge: on a servo joint MuJoCo's solver gives it."""
    import mujoco

    import simbackend
    from simbackend.models import builtin_model_path

    spec = mujoco.MjSpec.from_file(str(builtin_model_path(ARM)))
    for joint in spec.joints:
        if joint.type == mujoco.mjtJoint.mjJNT_HINGE:
            joint.frictionloss = ARM_FRICTIONLOSS
    sim = simbackend.make_backend("sapien", spec, n)
    sim.set_state(None, sim.get_keyframe_qpos("home").expand(n, -1))
    return sim


def bench_mujoco(s: Settings) -> dict:
    cases = {}
    sizes = [16, 64]
    for n in sizes:
        ctrls = arm_ctrls(n, seed=2)
        plain, rubbing = arm_at_home("sapien", n), _arm_with_frictionloss(n)
        if not rubbing.engine.plan.forced_friction.size:
            raise RuntimeError("arm7 with frictionloss should have MuJoCo-given friction on its servo joints")
        body = plain.get_body_ids(ARM_BODY)
        for k in s.nsteps:
            calls = {
                name: (lambda i, sim=sim, k=k: (sim.step(ctrls[i % len(ctrls)], nsteps=k), _backend_reads(sim, body)))
                for name, sim in (("plain", plain), ("mujoco_forces", rubbing))
            }
            samples, iters = interleaved(calls, s)
            ratio = _common.paired_ratio(samples["plain"], samples["mujoco_forces"])
            cases[f"N={n},nsteps={k}"] = {
                "num_envs": n,
                "nsteps": k,
                "variants": {
                    "plain": variant(samples["plain"], n, UNIT, iters, f"arm7: step(ctrl,{k}) + reads"),
                    "mujoco_forces": variant(
                        samples["mujoco_forces"],
                        n,
                        UNIT,
                        iters,
                        f"arm7 + frictionloss {ARM_FRICTIONLOSS}: step(ctrl,{k}) + reads",
                    ),
                },
                "ratio_mujoco_forces_vs_plain": ratio,
                "figure": _common.figure(
                    f"mujoco N={n} k={k}: with MuJoCo-given friction / plain",
                    ratio["median"],
                    MUJOCO_FORCES_TARGET,
                    ">=",
                    "x",
                    (ratio["min"], ratio["max"]),
                ),
            }
        plain.close()
        rubbing.close()
    return {
        "params": {
            "model": ARM,
            "frictionloss": ARM_FRICTIONLOSS,
            "device": "cpu",
            "num_envs": sizes,
            "nsteps": s.nsteps,
            "body": ARM_BODY,
            "start": "keyframe home",
        },
        "cases": cases,
        "figures": [c["figure"] for c in cases.values()],
    }


# ----------------------------------------------------------------------------
# section 3: GPU backend throughput
# ----------------------------------------------------------------------------
def bench_gpu(s: Settings) -> dict:
    import torch

    if not torch.cuda.is_available():
        return {
            "skipped": f"no CUDA device (torch {torch.__version__}: torch.cuda.is_available() is False); "
            "run on a machine with a CUDA GPU and torch's CUDA build",
            "figures": [],
        }
    cases = {}
    for n in s.n_gpu:
        sim = arm_at_home("sapien", n, device="cuda")
        body = sim.get_body_ids(ARM_BODY)
        ctrls = [c.to("cuda") for c in arm_ctrls(n, seed=4)]
        for k in s.nsteps:

            def call(i: int, k: int = k, sim: Any = sim) -> None:
                sim.step(ctrls[i % len(ctrls)], nsteps=k)
                _backend_reads(sim, body)
                torch.cuda.synchronize()  # the reads may be queued: time the finished work

            samples, iters = interleaved({"backend": call}, s)
            cases[f"N={n},nsteps={k}"] = {
                "num_envs": n,
                "nsteps": k,
                "variants": {
                    "backend": variant(
                        samples["backend"],
                        n,
                        UNIT,
                        iters,
                        f"cuda: step(ctrl,{k}) + get_qpos + get_body_pos_w/quat_w(1 body)",
                    )
                },
            }
        sim.close()
        del sim
        torch.cuda.empty_cache()
    return {
        "params": {
            "model": ARM,
            "device": torch.cuda.get_device_name(),
            "num_envs": s.n_gpu,
            "nsteps": s.nsteps,
            "body": ARM_BODY,
            "start": "keyframe home",
            "work_unit": "env-step = one step() call of nsteps substeps",
        },
        "cases": cases,
        "figures": [],
    }


# ----------------------------------------------------------------------------
# report
# ----------------------------------------------------------------------------
def machine() -> dict:
    import torch

    return _common.machine(
        {"sapien": _common.package_version("sapien"), "mujoco": _common.package_version("mujoco")},
        {"cuda": torch.cuda.is_available(), "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None},
    )


def _figure_rows(figs: Any, sec: dict, console: Any) -> None:
    for case, c in sec.get("step", {}).get("same_work_check", {}).items():
        figs.add_row(
            "step",
            f"{case}: max |backend - bare| over qpos, body pos, quat after "
            f"{c['calls']} identical calls (same work check)",
            f"{max(c['qpos_max_abs_diff'], c['body_pos_max_abs_diff'], c['body_quat_max_abs_diff']):.2g}",
            "",
            "",
            "",
            "",
        )


def print_tables(result: dict) -> None:
    m = result["machine"]
    header = (
        f"[bold]bench_sapien[/bold]  cpus={m['cpu_count']} ({m['cpu_model']})  sapien {m['sapien']}  "
        f"mujoco {m['mujoco']}  torch {m['torch']}  numpy {m['numpy']}  gpu {m['gpu']}  "
        f"rounds={result['settings']['rounds']}  quick={result['settings']['quick']}"
    )
    _common.print_tables(result, header, "the figures are then noisier.", extra_figure_rows=_figure_rows)


BENCHES: dict[str, Callable[[Settings], dict]] = {
    "step": bench_step,
    "mujoco": bench_mujoco,
    "gpu": bench_gpu,
}


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
    )


if __name__ == "__main__":
    sys.exit(main())
