"""`simbackend export` and `eval --policy`: the ONNX file, its metadata, and policies evaluated from it.

tests/data/go1_velocity.pt is Go1 trained on MuJoCo (tests/test_deploy.py says how).
"""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")
pytest.importorskip("rsl_rl")

from simbackend.errors import InvalidArgumentError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINT = ROOT / "tests" / "data" / "go1_velocity.pt"


@pytest.fixture(scope="module")
def ckpt():
    from simbackend.training import load_checkpoint

    return load_checkpoint(CHECKPOINT)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from simbackend.training.export import export_policy

    return export_policy(CHECKPOINT, tmp_path_factory.mktemp("export") / "go1.onnx", torchscript=True)


@pytest.fixture(scope="module")
def go1_obs(ckpt):
    """Observations of Go1 on MuJoCo: the first steps of the checkpoint's policy from 4 starts."""
    from simbackend.tasks import make_task

    task = make_task("velocity", "mujoco", 4, config=ckpt.task_config, seed=7)
    policy = ckpt.policy()
    rows = []
    obs = task.flatten(task.observe())
    for _ in range(5):
        rows.append(obs)
        obs = task.flatten(task.step(policy(obs)).obs)
    task.close()
    return torch.cat(rows)


def _copy_policy(exported, folder: Path, edit=None) -> Path:
    """The exported ONNX file and its JSON in ``folder``, the JSON edited by ``edit(meta)``."""
    folder.mkdir(parents=True, exist_ok=True)
    onnx = folder / "p.onnx"
    shutil.copy(exported.onnx, onnx)
    meta = copy.deepcopy(exported.metadata)
    if edit is not None:
        edit(meta)
    (folder / "p.json").write_text(json.dumps(meta))
    return onnx


def test_export_writes_the_network_and_its_contract(exported, ckpt, go1_obs):
    import onnx
    import onnxruntime as ort

    from simbackend.training.export import FORMAT, METADATA_KEY

    meta = exported.metadata
    inside = {p.key: p.value for p in onnx.load(str(exported.onnx)).metadata_props}
    assert json.loads(inside[METADATA_KEY]) == meta == json.loads(exported.json.read_text())
    assert meta["format"] == FORMAT and meta["kind"] == "velocity" and meta["quaternion"] == "wxyz"
    assert meta["provenance"]["checkpoint_sha256"] == hashlib.sha256(CHECKPOINT.read_bytes()).hexdigest()
    assert meta["provenance"]["trained_on"] == "mujoco" and meta["provenance"]["iteration"] == ckpt.iteration
    # the I/O contract of Go1's velocity task
    names = meta["joints"]["names"]
    assert names[:3] == ["FR_hip_joint", "FR_thigh_joint", "FR_calf_joint"] and len(names) == 12
    assert meta["joints"]["default"][:3] == [0.1, 0.9, -1.8] and meta["action"]["scale"] == [0.5] * 12
    assert meta["actuation"]["kind"] == "servo" and meta["actuation"]["kp"][:3] == [15.8952, 15.8952, 35.7643]
    assert meta["control"] == {"period": 0.02, "physics_dt": 0.005, "decimation": 4}
    terms = [(t["name"], t["start"], t["size"]) for t in meta["observations"]]
    assert terms[0] == ("base_lin_vel", 0, 3) and terms[-1] == ("last_action", 36, 12)
    assert {t["frame"] for t in meta["observations"][:3]} == {"imu"} and meta["base"]["imu_site"] == "imu"
    assert meta["network"]["input_size"] == 48 and meta["network"]["output_size"] == 12
    # the scene beside it, with its hash
    scene = exported.onnx.parent / meta["robot"]["scene"]
    assert scene.is_file() and len(meta["robot"]["scene_sha256"]) == 64
    # the network: the checkpoint's deterministic policy, normaliser folded in, any batch size
    session = ort.InferenceSession(str(exported.onnx), providers=["CPUExecutionProvider"])
    out = session.run(None, {"obs": go1_obs.numpy()})[0]
    expected = ckpt.policy()(go1_obs).numpy()
    assert out.shape == (20, 12) and np.abs(out - expected).max() < 1e-5
    assert np.abs(session.run(None, {"obs": go1_obs[:1].numpy()})[0] - expected[:1]).max() < 1e-5
    script = torch.jit.load(str(exported.torchscript))
    assert torch.allclose(script(go1_obs), torch.from_numpy(expected), atol=1e-5)


def test_export_refuses_bad_outputs(exported, tmp_path):
    from simbackend.training.export import export_policy

    with pytest.raises(InvalidArgumentError, match=r"^out: expected a \.onnx file"):
        export_policy(CHECKPOINT, tmp_path / "policy.pt")
    with pytest.raises(InvalidArgumentError, match=r"^out: folder .* does not exist"):
        export_policy(CHECKPOINT, tmp_path / "missing" / "p.onnx")
    with pytest.raises(InvalidArgumentError, match=r"^out: .* exists \(overwrite=True replaces it\)"):
        export_policy(CHECKPOINT, exported.onnx)
    exported.onnx.with_name("only_json.json").write_text("{}")  # a companion file in the way
    with pytest.raises(InvalidArgumentError, match=r"^out: .*only_json\.json' exists"):
        export_policy(CHECKPOINT, exported.onnx.with_name("only_json.onnx"))
    assert not exported.onnx.with_name("only_json.onnx").exists()


def test_eval_policy_equals_the_checkpoints_evaluation(exported, ckpt):
    from simbackend.training import evaluate

    kw = {"num_envs": 4, "episodes_per_seed": 4, "seeds": [100], "task_config_override": {"episode_length": 150}}
    a, b = evaluate(exported.onnx, "mujoco", **kw), evaluate(ckpt, "mujoco", **kw)
    assert a.per_seed[0]["mean_return"] == pytest.approx(b.per_seed[0]["mean_return"], rel=1e-3)
    assert a.success_rate.mean == b.success_rate.mean and a.mean_length.mean == b.mean_length.mean


@pytest.mark.parametrize("sim", ["sapien", "mjwarp", "motrix"])
def test_eval_policy_runs_on_every_engine(exported, sim):
    from simbackend.registry import available_backends
    from simbackend.training import evaluate

    if sim not in available_backends():
        pytest.skip(f"{sim} is not installed")
    r = evaluate(exported.onnx, sim, num_envs=2, episodes_per_seed=2, seeds=[100],
                 task_config_override={"episode_length": 100})  # fmt: skip
    assert r.sim == sim and r.trained_on == "mujoco" and r.mean_length.mean == 100.0


REFUSALS = {
    "joints.names": (lambda m: m["joints"]["names"].__setitem__(4, "FL_thigh"), "has no policy joint 'FL_thigh'"),
    "control.period": (lambda m: m["control"].update(period=0.01, decimation=2), "every 0.01 s"),
    "actuation.kp": (lambda m: m["actuation"]["kp"].__setitem__(2, 40.0), "'FR_calf_joint' has 40"),
    "actuation.kind": (lambda m: m["actuation"].update(kind="pd"), "driven by 'servo'"),
    "observations[1].name": (
        lambda m: m["observations"][1].update(name="base_angvel"),
        "closest known names: 'base_ang_vel'",
    ),
    "network.input_size": (lambda m: m["network"].update(input_size=45), "has shape"),
    "observations": (lambda m: m["observations"].pop(), "the terms give 36 values"),
    "format": (lambda m: m.update(format="mjlab/1"), "expected 'simbackend.policy/1'"),
    "kind": (lambda m: m.update(kind="manipulation"), "is 'velocity'"),
}


@pytest.mark.parametrize("field", list(REFUSALS))
def test_eval_policy_refuses_metadata_that_does_not_fit(exported, tmp_path, field):
    """A field that does not fit the robot (or the network) is refused in one line naming it."""
    from simbackend.training import evaluate

    edit, words = REFUSALS[field]
    path = _copy_policy(exported, tmp_path, edit)
    with pytest.raises(InvalidArgumentError) as e:
        evaluate(path, "mujoco", num_envs=1, episodes_per_seed=1, seeds=[0], task_config_override={"episode_length": 5})
    message = str(e.value)
    assert message.startswith(f"policy metadata {field}:") and words in message and "\n" not in message


def test_joint_count_mismatch_is_refused(exported, tmp_path):
    from simbackend.training.exported import load_policy

    path = _copy_policy(exported, tmp_path, lambda m: m["joints"]["names"].pop())
    with pytest.raises(InvalidArgumentError, match=r"^policy metadata joints.names: 11 joints; the network gives 12"):
        load_policy(path)


def test_metadata_inside_the_file_is_read_without_the_json(exported, tmp_path):
    from simbackend.training.exported import load_policy

    onnx = tmp_path / "alone.onnx"
    shutil.copy(exported.onnx, onnx)
    assert load_policy(onnx).metadata == exported.metadata
    bare = tmp_path / "bare.onnx"
    import onnx as onnx_lib

    model = onnx_lib.load(str(exported.onnx))
    del model.metadata_props[:]
    onnx_lib.save(model, str(bare))
    with pytest.raises(InvalidArgumentError, match=r"^policy: .* has no metadata"):
        load_policy(bare)


# -- a policy from another framework: its own joint order, observation order and scales, action scale ----

#: Isaac Lab's order for Go1: the joints breadth first (every hip, then every thigh, then every calf)
ISAAC_ORDER = [f"{leg}_{part}_joint" for part in ("hip", "thigh", "calf") for leg in ("FL", "FR", "RL", "RR")]
#: legged_gym's observation scales, and a term order of its own
FOREIGN_TERMS = [("base_ang_vel", 0.25), ("projected_gravity", 1.0), ("command", 1.0), ("base_lin_vel", 2.0),
                 ("joint_pos", 1.0), ("joint_vel", 0.05), ("last_action", 1.0)]  # fmt: skip


class _Foreign(torch.nn.Module):
    """The Go1 policy rewritten in another framework's conventions: it converts its input back to the project's
    layout, runs the original network and converts the action into its own order and scale."""

    def __init__(self, inner, meta, order, default, scale):
        super().__init__()
        self.inner = inner
        names = meta["joints"]["names"]
        self.register_buffer("to_task", torch.tensor([order.index(n) for n in names]))  # task col j <- policy col
        self.register_buffer("to_policy", torch.tensor([names.index(n) for n in order]))
        self.register_buffer("d_task", torch.tensor(meta["action"]["offset"]))
        self.register_buffer("s_task", torch.tensor(meta["action"]["scale"]))
        self.register_buffer("d_pol", torch.tensor(default))  # in the policy's order
        self.s_pol = scale

    def forward(self, x):
        parts, col = {}, 0
        for name, sc in FOREIGN_TERMS:
            n = 12 if name.startswith(("joint", "last")) else 3
            parts[name] = x[:, col : col + n] / sc
            col += n
        d_pol_task = self.d_pol[self.to_task]
        jpos = parts["joint_pos"][:, self.to_task] + d_pol_task - self.d_task
        last = (d_pol_task + self.s_pol * parts["last_action"][:, self.to_task] - self.d_task) / self.s_task
        obs = torch.cat([parts["base_lin_vel"], parts["base_ang_vel"], parts["projected_gravity"], parts["command"],
                         jpos, parts["joint_vel"][:, self.to_task], last], dim=1)  # fmt: skip
        target = self.d_task + self.s_task * self.inner(obs)
        return ((target - d_pol_task) / self.s_pol)[:, self.to_policy]


def _foreign_policy(exported, ckpt, folder: Path, default_shift: float, scale: float, clip: float) -> Path:
    from simbackend.training.checkpoint import build_actor

    meta = exported.metadata
    actor = build_actor(ckpt.data["rsl_rl_cfg"], 48, 12)
    actor.load_state_dict(ckpt.data["actor_state_dict"])
    names = meta["joints"]["names"]
    default = [meta["joints"]["default"][names.index(n)] + (default_shift if "hip" in n else 0.0) for n in ISAAC_ORDER]
    model = _Foreign(actor.as_onnx(verbose=False).eval(), meta, ISAAC_ORDER, default, scale).eval()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "foreign.onnx"
    torch.onnx.export(model, (torch.zeros(1, 48),), str(path), input_names=["policy"], output_names=["actions"],
                      opset_version=18, dynamo=False, dynamic_axes={"policy": {0: "n"}, "actions": {0: "n"}})  # fmt: skip
    gains = {n: (meta["actuation"]["kp"][i], meta["actuation"]["kd"][i]) for i, n in enumerate(names)}
    start, terms = 0, []
    for name, sc in FOREIGN_TERMS:
        size = 12 if name.startswith(("joint", "last")) else 3
        terms.append({"name": name, "start": start, "size": size, "scale": sc})
        start += size
    foreign = {  # what a user of another framework writes: no task, no provenance, no scene
        "format": "simbackend.policy/1",
        "kind": "velocity",
        "robot": {"name": "go1"},
        "quaternion": "wxyz",
        "control": {"period": 0.02},
        "joints": {"names": ISAAC_ORDER, "default": default},
        "actuation": {
            "kind": "servo",
            "kp": [gains[n][0] for n in ISAAC_ORDER],
            "kd": [gains[n][1] for n in ISAAC_ORDER],
        },
        "action": {"clip": [-clip, clip], "scale": [scale] * 12, "offset": default},
        "observations": terms,
        "network": {"input": "policy", "output": "actions", "input_size": 48, "output_size": 12},
    }
    path.with_suffix(".json").write_text(json.dumps(foreign))
    return path


@pytest.mark.parametrize("shift", [0.0, 0.05])
def test_a_foreign_policy_is_converted_to_the_task(exported, ckpt, tmp_path, shift):
    """Another framework's joint order, term order and scales, default pose and action scale: the binding converts
    each, so the foreign policy acts on Go1 as the original does (shift 0.05: its targets reach past the task's
    default action scale, and the task is built with a larger one)."""
    from simbackend.tasks import make_task
    from simbackend.training import evaluate
    from simbackend.training.exported import ActionScaleNeeded, load_policy

    policy = load_policy(_foreign_policy(exported, ckpt, tmp_path, shift, 0.25, 2.0))
    assert policy.task == "velocity" and policy.task_config["robot"] == "go1"
    config = {**ckpt.task_config, "episode_length": 60}
    original = ckpt.policy()
    task = make_task("velocity", "mujoco", 4, config=config, seed=3)
    try:
        bound = policy.bind(task)
        assert shift == 0.0 and not bound.identity
    except ActionScaleNeeded as e:
        assert shift > 0 and e.scale == pytest.approx(0.5 + shift)
        task.close()
        task = make_task("velocity", "mujoco", 4, config={**config, "action_scale": e.scale}, seed=3)
        bound = policy.bind(task)
    ratio = 0.5 / float(task.action_scale[0])
    names = exported.metadata["joints"]["names"]
    d_task = torch.tensor(exported.metadata["action"]["offset"])
    d_foreign = d_task + torch.tensor([shift if "hip" in n else 0.0 for n in names])
    try:
        obs = task.flatten(task.observe())
        for _ in range(30):  # the same targets as the original's on the same observations, within the foreign reach
            act = bound(obs)
            target = d_task + 0.5 * original(_as_original(obs, ratio))
            target = torch.minimum(torch.maximum(target, d_foreign - 0.5), d_foreign + 0.5)
            ref = (target - d_task) / float(task.action_scale[0])
            assert (act - ref).abs().max() < 2e-4
            obs = task.flatten(task.step(act).obs)
    finally:
        task.close()
    r = evaluate(
        policy, "mujoco", num_envs=2, episodes_per_seed=2, seeds=[5], task_config_override={"episode_length": 60}
    )
    assert r.mean_length.mean > 0


def _as_original(obs: torch.Tensor, ratio: float) -> torch.Tensor:
    """The task's observation as the original policy saw it: its last action in the original scale."""
    out = obs.clone()
    out[:, 36:48] = obs[:, 36:48] / ratio
    return out


def test_cli_export_and_eval_policy(exported, tmp_path):
    from typer.testing import CliRunner

    from simbackend.cli.main import app

    runner = CliRunner()
    out = tmp_path / "cli.onnx"
    r = runner.invoke(app, ["export", str(CHECKPOINT), "--out", str(out), "--no-scene"])
    assert r.exit_code == 0, r.output
    assert out.is_file() and out.with_suffix(".json").is_file() and not (tmp_path / "cli_scene").exists()
    r = runner.invoke(app, ["export", str(CHECKPOINT), "--out", str(out)])
    assert r.exit_code == 2 and "--out" in r.output and "--overwrite" in r.output
    out.with_name("x.json").write_text("{}")  # a companion file in the way
    r = runner.invoke(app, ["export", str(CHECKPOINT), "--out", str(out.with_name("x.onnx"))])
    assert r.exit_code == 2 and "x.json' exists (--overwrite replaces it)" in r.output
    r = runner.invoke(app, ["eval", "--policy", str(out), "--episodes", "1", "--seeds", "0", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["sim"] == "mujoco"
    bad = _copy_policy(exported, tmp_path / "bad", REFUSALS["control.period"][0])
    r = runner.invoke(app, ["eval", "--policy", str(bad), "--episodes", "1"])
    assert r.exit_code == 2 and "policy metadata control.period:" in r.output
    r = runner.invoke(app, ["eval", "--episodes", "1"])
    assert r.exit_code == 2 and "--checkpoint or --policy" in r.output


CUBE_OBJ = "\n".join(
    ["v 0 0 0", "v 1 0 0", "v 1 1 0", "v 0 1 0", "v 0 0 1", "v 1 0 1", "v 1 1 1", "v 0 1 1",
     "f 1 3 2", "f 1 4 3", "f 5 6 7", "f 5 7 8", "f 1 2 6", "f 1 6 5", "f 2 3 7", "f 2 7 6",
     "f 3 4 8", "f 3 8 7", "f 4 1 5", "f 4 5 8"]
)  # fmt: skip


def test_a_scene_with_meshes_is_copied_whole_and_loads_elsewhere(tmp_path):
    """The exported scene carries the files its MJCF names (a mesh under meshdir, one by absolute path), and
    loads from its new folder once the original is gone."""
    import mujoco

    from simbackend.models.export import portable_copy

    src = tmp_path / "robot"
    (src / "meshes").mkdir(parents=True)
    (src / "meshes" / "cube.obj").write_text(CUBE_OBJ)
    other = tmp_path / "elsewhere" / "cube.obj"
    other.parent.mkdir()
    other.write_text(CUBE_OBJ)
    (src / "robot.xml").write_text(f"""
<mujoco><compiler meshdir="meshes"/>
  <asset><mesh name="a" file="cube.obj"/><mesh name="b" file="{other}" scale="0.5 0.5 0.5"/></asset>
  <worldbody><body><freejoint/><geom type="mesh" mesh="a"/><geom type="mesh" mesh="b" pos="2 0 0"/></body></worldbody>
</mujoco>""")
    dest = tmp_path / "scene"
    dest.mkdir()
    out = portable_copy(src / "robot.xml", dest)
    shutil.rmtree(src)
    shutil.rmtree(other.parent)
    model = mujoco.MjModel.from_xml_path(str(out))
    assert model.nmesh == 2 and sorted(p.name for p in (dest / "assets").iterdir()) == ["cube.obj", "cube_1.obj"]


def test_another_task_exports_and_evaluates_unchanged(ckpt, tmp_path):
    """A task without a robot (cart-pole): the generic contract (observation slices, the action's ctrl mapping),
    its built-in model as the scene, and `eval --policy` giving the checkpoint's own figures."""
    from simbackend.tasks import make_task
    from simbackend.training import evaluate, load_checkpoint
    from simbackend.training.checkpoint import build_actor, save_checkpoint
    from simbackend.training.export import export_policy

    task = make_task("cartpole", "mujoco", 1)
    size, k, config = task.observation_size, task.action_dim, task.config.to_dict()
    task.close()
    torch.manual_seed(1)
    actor = build_actor(ckpt.data["rsl_rl_cfg"], size, k)
    data = {key: ckpt.data[key] for key in ("train_config", "rsl_rl_cfg")}
    data.update(task="cartpole", task_config=config, sim="sapien", observation_size=size, action_dim=k,
                actor_state_dict=actor.state_dict())  # fmt: skip
    cart = load_checkpoint(save_checkpoint(tmp_path / "cart.pt", data))
    meta = export_policy(cart, tmp_path / "cart.onnx").metadata
    assert meta["kind"] == "generic" and meta["action"]["actuators"] and "ctrl_low" in meta["action"]
    assert (tmp_path / meta["robot"]["scene"]).is_file() and meta["provenance"]["trained_on"] == "sapien"
    kw = {"num_envs": 3, "episodes_per_seed": 3, "seeds": [2]}
    a, b = evaluate(tmp_path / "cart.onnx", "mujoco", **kw), evaluate(cart, "mujoco", **kw)
    assert a.per_seed[0]["mean_return"] == pytest.approx(b.per_seed[0]["mean_return"], rel=1e-4)
    assert a.mean_length.mean == b.mean_length.mean
