"""The standalone control loop (examples/deploy/run_policy.py) against the project's own evaluation.

The loop needs none of simbackend: it builds Go1's observations from raw MuJoCo data with the exported
metadata alone. From the same start and commands, its observations and actions must follow the project's
evaluation on MuJoCo step for step, and its episodes must end as the project's do; with one metadata field
wrong (joint order, action scale, a gain) they must not.

The checkpoint, tests/data/go1_velocity.pt, is Go1 trained on MuJoCo by `simbackend train --task velocity
--robot go1` (seed 0, 200 iterations: the README's sim-to-sim run), its critic and optimiser dropped.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")
pytest.importorskip("rsl_rl")

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINT = ROOT / "tests" / "data" / "go1_velocity.pt"
LOOP = ROOT / "examples" / "deploy" / "run_policy.py"
ENVS, STEPS = 4, 200
#: the free-running comparison's tolerances over the first STEPS steps: contact dynamics amplify the
#: observations' float32 rounding (5e-8 at the start) to at most about 1e-2 rad/s of joint velocity by step 200
OBS_TOL, ACTION_TOL = 2e-2, 3e-3
#: over the first 50 steps the two stay within float noise
EARLY_STEPS, EARLY_TOL = 50, 1e-4


def _load_loop():
    spec = importlib.util.spec_from_file_location("run_policy", LOOP)
    module = importlib.util.module_from_spec(spec)
    sys.modules["run_policy"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def loop():
    return _load_loop()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from simbackend.training.export import export_policy

    out = tmp_path_factory.mktemp("deploy") / "go1.onnx"
    return export_policy(CHECKPOINT, out)


@pytest.fixture(scope="module")
def project():
    """The project's evaluation of the checkpoint on MuJoCo (run_episodes, one episode per env): every env's
    start, its commands, the first STEPS observations and actions, the states they were made at, and each
    episode's success and length."""
    from simbackend.tasks import make_task
    from simbackend.training import load_checkpoint, run_episodes
    from simbackend.training.evaluation import torch_threads

    ckpt = load_checkpoint(CHECKPOINT)
    policy = ckpt.policy()
    with torch_threads(1):
        task = make_task("velocity", "mujoco", ENVS, config=ckpt.task_config, seed=100)
        try:
            start = task.backend.get_qpos().double().numpy().copy()
            commands = task._episode_commands.numpy().copy()
            period, resample = task.control_dt, task._resample_steps
            rec: dict[str, list] = {"obs": [], "action": [], "qpos": [], "qvel": []}

            def recording(obs: torch.Tensor) -> torch.Tensor:
                action = policy(obs)
                if len(rec["obs"]) < STEPS:
                    rec["obs"].append(obs.numpy().copy())
                    rec["action"].append(action.numpy().copy())
                    rec["qpos"].append(task.backend.get_qpos().double().numpy().copy())
                    rec["qvel"].append(task.backend.get_qvel().double().numpy().copy())
                return action

            result = run_episodes(task, recording, ENVS)
        finally:
            task.close()
    script = [[[k * resample * period, *commands[i, k]] for k in range(commands.shape[1])] for i in range(ENVS)]
    return {
        "start": start,
        "scripts": script,
        **{k: np.stack(v) for k, v in rec.items()},
        "success": result["success"].numpy(),
        "length": result["length"].numpy(),
    }


def _free_run(loop, exported, project, env: int, meta=None, steps: int | None = STEPS):
    runner = loop.Runner(exported.onnx, meta)
    episode = runner.run_episode(loop.Commands(project["scripts"][env]), qpos=project["start"][env], steps=steps,
                                 log=True)  # fmt: skip
    return episode, np.stack(episode.log["obs"]), np.stack(episode.log["action"])


@pytest.mark.parametrize("env", range(ENVS))
def test_standalone_loop_agrees_step_for_step(loop, exported, project, env):
    """Same start, same commands: the loop's observations and actions follow the project's for STEPS steps."""
    episode, obs, action = _free_run(loop, exported, project, env)
    assert len(obs) == STEPS and not episode.fell
    obs_err = np.abs(obs - project["obs"][:, env])
    act_err = np.abs(action - project["action"][:, env])
    assert obs_err[:EARLY_STEPS].max() < EARLY_TOL and act_err[:EARLY_STEPS].max() < EARLY_TOL
    assert obs_err.max() < OBS_TOL and act_err.max() < ACTION_TOL


def test_standalone_observations_match_state_for_state(loop, exported, project):
    """Given the project's state at each step, the loop's observation and action equal the project's to float32
    rounding: the observation builder itself, without the dynamics' amplification."""
    import mujoco

    runner = loop.Runner(exported.onnx)
    c, d = runner.controller, runner.data
    obs_err = act_err = 0.0
    for env in (0, 2):
        script = loop.Commands(project["scripts"][env])
        for t in range(STEPS):
            d.qpos[:], d.qvel[:] = project["qpos"][t, env], project["qvel"][t, env]
            mujoco.mj_kinematics(runner.model, d)
            c.last_action = np.clip(project["action"][t - 1, env], -1, 1).astype(np.float64) if t else np.zeros(12)
            obs = c.observe(d, script(t * c.period))
            obs_err = max(obs_err, float(np.abs(obs - project["obs"][t, env]).max()))
            act_err = max(act_err, float(np.abs(runner.policy(obs) - project["action"][t, env]).max()))
    assert obs_err < 5e-6 and act_err < 5e-5


def test_standalone_loop_gives_the_same_success(loop, exported, project):
    """Whole episodes: the loop ends each one where the project's evaluation did, with the same success."""
    lengths, successes = [], []
    for env in range(ENVS):
        episode, _, _ = _free_run(loop, exported, project, env, steps=None)
        lengths.append(episode.steps)
        successes.append(float(episode.success))
    assert lengths == project["length"].tolist()
    assert successes == project["success"].tolist()
    assert sum(successes) >= ENVS - 1  # a trained policy: the comparison is over successful episodes


@pytest.mark.parametrize(
    "field",
    ["joint order", "action scale", "a gain"],
)
def test_a_wrong_metadata_field_breaks_the_agreement(loop, exported, project, field):
    """The metadata is the whole contract: one field wrong and the loop no longer follows the project."""
    meta = copy.deepcopy(exported.metadata)
    if field == "joint order":
        names = meta["joints"]["names"]
        names[0], names[3] = names[3], names[0]
    elif field == "action scale":
        meta["action"]["scale"] = [s * 1.2 for s in meta["action"]["scale"]]
    else:
        meta["actuation"]["kp"][2] *= 1.1
    _, obs, action = _free_run(loop, exported, project, 0, meta=meta)
    n = len(obs)
    assert np.abs(obs - project["obs"][:n, 0]).max() > 10 * OBS_TOL
    assert np.abs(action - project["action"][:n, 0]).max() > 10 * ACTION_TOL


def test_loop_refuses_metadata_it_cannot_run(loop, exported):
    import mujoco

    model = mujoco.MjModel.from_xml_path(str(exported.onnx.parent / exported.metadata["robot"]["scene"]))
    cases = {
        "joints.names": lambda m: m["joints"]["names"].__setitem__(0, "FR_hip"),
        "action.scale": lambda m: m["action"]["scale"].pop(),
        "control.physics_dt": lambda m: m["control"].update(physics_dt=0.01, period=0.04),
        "observations[0].name": lambda m: m["observations"][0].update(name="height_scan"),
    }
    for field, edit in cases.items():
        meta = copy.deepcopy(exported.metadata)
        edit(meta)
        with pytest.raises(loop.MetadataError, match=rf"^{field.replace('[', '.').replace(']', '.')}"):
            loop.VelocityController(model, meta)


def test_loop_runs_without_simbackend(exported):
    """The loop as a team runs it, in a process where importing simbackend fails."""
    code = (
        "import runpy, sys; sys.modules['simbackend'] = None; sys.argv = sys.argv[1:];"
        f" runpy.run_path({str(LOOP)!r}, run_name='__main__')"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    log = exported.onnx.parent / "log.npz"
    out = subprocess.run(
        [sys.executable, "-c", code, "run_policy.py", str(exported.onnx), "--command", "0.4", "0", "0", "--log", str(log)],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "episode 0: played 500 steps" in out.stdout and "success 1/1" in out.stdout
    with np.load(log) as data:
        assert data["obs"].shape == (500, 48) and data["action"].shape == (500, 12) and data["qpos"].shape == (500, 19)
        assert np.allclose(data["command"], [0.4, 0.0, 0.0]) and float(data["period"]) == 0.02
    viewer = subprocess.run(
        [sys.executable, "-c", code, "run_policy.py", str(exported.onnx), "--viewer"],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert viewer.returncode == 2 and "--viewer: no display" in viewer.stderr


def _untrained_checkpoint(robot: str, path: Path) -> Path:
    """A checkpoint of the velocity task on ``robot`` with a seeded, untrained actor (its normaliser given a
    mean and spread of its own): the actuation paths the trained Go1 does not take."""
    from simbackend.tasks import make_task
    from simbackend.training import load_checkpoint
    from simbackend.training.checkpoint import build_actor, save_checkpoint

    go1 = load_checkpoint(CHECKPOINT)
    config = {**go1.task_config, "robot": robot}
    task = make_task("velocity", "mujoco", 1, config=config)
    size, k = task.observation_size, task.action_dim
    config = task.config.to_dict()
    task.close()
    torch.manual_seed(0)
    actor = build_actor(go1.data["rsl_rl_cfg"], size, k)
    state = actor.state_dict()
    state["obs_normalizer._mean"] = torch.randn_like(state["obs_normalizer._mean"]) * 0.1
    state["obs_normalizer._std"] = 0.5 + torch.rand_like(state["obs_normalizer._std"])
    state["obs_normalizer._var"] = state["obs_normalizer._std"] ** 2
    data = {key: go1.data[key] for key in ("train_config", "rsl_rl_cfg")}
    data.update(task="velocity", task_config=config, sim="mujoco", observation_size=size, action_dim=k,
                actor_state_dict=state)  # fmt: skip
    return save_checkpoint(path, data)


@pytest.mark.parametrize("robot", ["go1_dc", "g1", "quadruped"])
def test_standalone_loop_drives_every_actuation(loop, robot, tmp_path):
    """PD torque motors with DC-motor limits (go1_dc), servos with held joints and an IMU site off the base
    (g1), PD on the toy quadruped at its own physics step: the loop follows the project for 30 steps."""
    from simbackend.tasks import make_task
    from simbackend.training import load_checkpoint
    from simbackend.training.evaluation import torch_threads
    from simbackend.training.export import export_policy

    if robot == "go1_dc":  # weak motors, so that the DC curve clips the PD law within the first steps
        from simbackend.robots import get_robot

        weak = {**get_robot("go1_dc").to_dict(), "name": "go1_dc_weak", "saturation_effort": {"*": 4.0},
                "velocity_limit": {"*": 8.0}}  # fmt: skip
        weak.pop("base_dir", None)
        robot = str(tmp_path / "go1_dc_weak.json")
        Path(robot).write_text(json.dumps(weak))
    ckpt = load_checkpoint(_untrained_checkpoint(robot, tmp_path / "ckpt.pt"))
    exported = export_policy(ckpt, tmp_path / "policy.onnx")
    policy = ckpt.policy()
    steps = 30
    with torch_threads(1):
        task = make_task("velocity", "mujoco", 1, config=ckpt.task_config, seed=4)
        start = task.backend.get_qpos()[0].double().numpy().copy()
        commands = task._episode_commands[0].numpy().copy()
        obs_p, act_p = [], []
        obs = task.flatten(task.observe())
        for _ in range(steps):
            action = policy(obs)
            obs_p.append(obs[0].numpy().copy())
            act_p.append(action[0].numpy().copy())
            step = task.step(action)
            if bool(step.terminated[0] | step.truncated[0]):
                break
            obs = task.flatten(step.obs)
        task.close()
    runner = loop.Runner(exported.onnx)
    assert runner.controller.kind == ("servo" if robot == "g1" else "pd")
    if robot.endswith("go1_dc_weak.json"):
        assert runner.controller.saturation.max() == 4.0 and runner.controller.vmax.max() == 8.0
    episode = runner.run_episode(loop.Commands([[0.0, *commands[0]]]), qpos=start, steps=len(obs_p), log=True)
    n = len(obs_p)
    assert episode.steps == n
    gap = np.abs(np.stack(episode.log["obs"]) - np.stack(obs_p)).max(1)
    obs_err = gap.max()
    act_err = np.abs(np.stack(episode.log["action"]) - np.stack(act_p)).max()
    # the first step agrees to float32 rounding: no difference in what the loop computes; over 30 steps
    # rounding grows where contacts are many (G1 under the elliptic friction cone: 3e-8 at the first step,
    # 1.2e-3 at the 30th; 4e-5 under the pyramidal cone), so the later steps get a looser bound
    assert gap[0] < 1e-5 and obs_err < 5e-3 and act_err < 1e-3, (gap[0], obs_err, act_err)
