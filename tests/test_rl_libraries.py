"""The RL libraries people already use, on simbackend's adapters as their users would use them:
stable-baselines3 (``simbackend.envs.sb3``), skrl (its ``wrap_env`` on ``SimVectorEnv``, no glue) and
torchrl (``simbackend.envs.torchrl``). Each trains or collects a few iterations; the adapters' conventions
are checked against the gymnasium adapter they share with every engine.

The episodes are cartpole's (short ones, so that autoresets, truncations and terminations happen).
Run with ``MUJOCO_GL=egl`` on a machine without a display (``make test`` does).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from simbackend.envs import make_vector_env
from simbackend.errors import ArgumentTypeError, InputShapeError, InvalidArgumentError, ScalarTypeError

SHORT = {"episode_length": 6}


#: env 0's cart is pushed one way: its pole falls in ~8 steps (terminations); the others are left alone
#: and reach the 12-step limit first (truncations)
PUSH = np.array([[1.0], [0.0], [0.0]], np.float32)


# ----------------------------------------------------------------------
# stable-baselines3
# ----------------------------------------------------------------------
sb3 = pytest.importorskip("stable_baselines3")
from stable_baselines3.common import env_checker as sb3_checks  # noqa: E402
from stable_baselines3.common.preprocessing import check_for_nested_spaces  # noqa: E402
from stable_baselines3.common.vec_env import VecCheckNan, VecMonitor, VecNormalize  # noqa: E402

from simbackend.envs.sb3 import SB3VecEnv, make_sb3_env  # noqa: E402


def test_sb3_steps_as_dummy_vec_env_does_terminal_observation_and_time_limit() -> None:
    """Beside the gymnasium adapter in same-step mode: the same observations, rewards and dones; the
    ended episode's last observation in ``terminal_observation``; ``TimeLimit.truncated`` only for
    truncations (:data:`PUSH`)."""
    cfg = {"episode_length": 12}
    env = make_sb3_env("cartpole", "mujoco", 3, config=cfg, monitor=False)
    ref = make_vector_env("cartpole", "mujoco", 3, config=cfg, tensors="numpy", autoreset_mode="same_step")
    assert isinstance(env, SB3VecEnv) and env.num_envs == 3
    assert env.observation_space == ref.single_observation_space and env.action_space == ref.single_action_space
    env.seed(4)
    np.testing.assert_array_equal(env.reset(), ref.reset(seed=4)[0])
    seen = {"terminated": 0, "truncated": 0}
    for _ in range(30):
        actions = PUSH
        obs, rewards, dones, infos = env.step(actions)
        r_obs, r_rew, r_term, r_trunc, r_info = ref.step(actions)
        np.testing.assert_array_equal(obs, r_obs)
        np.testing.assert_array_equal(rewards, r_rew)
        assert rewards.dtype == np.float32 and dones.dtype == np.bool_ and isinstance(infos, list) and len(infos) == 3
        np.testing.assert_array_equal(dones, r_term | r_trunc)
        for i in range(3):
            assert infos[i]["TimeLimit.truncated"] == bool(r_trunc[i] and not r_term[i])
            assert ("terminal_observation" in infos[i]) == bool(dones[i])
            if dones[i]:
                np.testing.assert_array_equal(infos[i]["terminal_observation"], r_info["final_obs"][i])
                assert not np.array_equal(infos[i]["terminal_observation"], obs[i])  # obs is the new episode's
                seen["terminated" if r_term[i] else "truncated"] += 1
            assert infos[i]["success"] == r_info["success"][i]
            assert infos[i]["reward_terms"]["alive"] == r_info["reward_terms"]["alive"][i]
    assert seen["terminated"] >= 2 and seen["truncated"] >= 2
    env.close()
    ref.close()


def test_sb3_vec_env_passes_sb3s_checks_and_its_wrappers() -> None:
    """What SB3's check_env checks of a single env, applied to every env of the batch, with warnings as
    errors; SB3's VecCheckNan (raise on any NaN or inf) over autoresets; VecNormalize and VecMonitor."""
    for obs_mode in ("state", "state_dict"):
        env = make_sb3_env("cartpole", "mujoco", 2, config=SHORT, obs_mode=obs_mode, monitor=False)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert not sb3_checks._check_unsupported_spaces(env, env.observation_space, env.action_space)
            check_for_nested_spaces(env.observation_space)
            spaces_ = getattr(env.observation_space, "spaces", {"": env.observation_space})
            for key, space in spaces_.items():
                sb3_checks._check_box_obs(space, key)
            obs = env.reset()
            for step in range(8):
                rows = [{k: v[i] for k, v in obs.items()} if isinstance(obs, dict) else obs[i] for i in range(2)]
                for row in rows:
                    if isinstance(row, dict):
                        for k, v in row.items():
                            sb3_checks._check_obs(v, env.observation_space[k], "step" if step else "reset")
                    else:
                        sb3_checks._check_obs(row, env.observation_space, "step" if step else "reset")
                obs, *_ = env.step(np.stack([env.action_space.sample() for _ in range(2)]))
        env.close()
    checked = VecCheckNan(
        VecNormalize(
            VecMonitor(
                SB3VecEnv(
                    make_vector_env("cartpole", "mujoco", 2, config=SHORT, tensors="numpy", autoreset_mode="same_step")
                )
            )
        ),
        raise_exception=True,
    )
    checked.reset()
    for _ in range(14):
        _, _, dones, infos = checked.step(np.random.default_rng(0).uniform(-1, 1, (2, 1)).astype(np.float32))
        assert all(("episode" in info) == bool(d) for info, d in zip(infos, dones))  # VecMonitor's records
    checked.close()


def test_sb3_seed_attributes_methods_and_pictures() -> None:
    env = make_sb3_env("cartpole", "mujoco", 3, config=SHORT, render_mode="rgb_array", render_size=(16, 12))
    base = env.unwrapped
    assert isinstance(env, VecMonitor) and isinstance(base, SB3VecEnv)
    assert env.seed(7) == [7, 7, 7]  # every env draws its episodes from (7, i, k)
    first = env.reset()
    env.seed(7)
    np.testing.assert_array_equal(env.reset(), first)
    env.seed(8)
    assert not np.array_equal(env.reset(), first)
    assert env.get_attr("render_mode") == ["rgb_array"] * 3 and env.render_mode == "rgb_array"
    assert env.get_attr("control_dt", indices=[2]) == [base.env.task.control_dt]
    assert [int(s) for s in env.get_attr("episode_step", indices=1)] == [0]
    observed = env.env_method("observe", indices=[0, 2])  # a method runs once, on the batch
    assert len(observed) == 2 and set(observed[0]) == set(base.env.task.observation_dims)
    assert env.env_is_wrapped(VecMonitor) == [False] * 3
    env.set_attr("my_flag", 3)
    assert env.get_attr("my_flag") == [3, 3, 3]
    images = base.get_images()
    assert len(images) == 3 and images[0].shape == (12, 16, 3) and images[0].dtype == np.uint8
    assert env.render().shape == (24, 32, 3)  # SB3 tiles the pictures: 2 x 2 for 3 envs

    with pytest.raises(InvalidArgumentError, match=r"^indices: expected env ids in \[0, 3\), got \[3\]"):
        env.get_attr("render_mode", indices=[3])
    with pytest.raises(InvalidArgumentError, match=r"^indices: the 3 envs share one task"):
        env.set_attr("my_flag", 1, indices=[0])
    with pytest.raises(InvalidArgumentError, match=r"^set_attr: attr_name: 'num_envs' is fixed"):
        env.set_attr("num_envs", 1)
    with pytest.raises(InvalidArgumentError, match=r"^seed: "):
        env.seed(-1)
    env.seed(7)
    env.set_options({"reset_mask": np.ones(3, bool)})
    with pytest.raises(
        InvalidArgumentError,
        match=r"^options: a simbackend env's resets take no options.*"
        r"set_options\(None\)$",
    ):
        env.reset()
    env.set_options(None)  # the refused reset changed nothing: the seed given before it still waits
    np.testing.assert_array_equal(env.reset(), first)
    with pytest.raises(ArgumentTypeError, match=r"^env: expected a simbackend.envs.SimVectorEnv"):
        SB3VecEnv(env)
    with pytest.raises(InvalidArgumentError, match=r"^env: expected a SimVectorEnv with tensors='numpy'"):
        SB3VecEnv(make_vector_env("cartpole", "mujoco", 1))
    env.close()


def test_sb3_checks_every_argument_before_anything_happens() -> None:
    """Every call of the adapter checks all its arguments first: a refused call leaves every env as it was
    (``env_method("reset", indices=[9])`` resets nothing), and bools are not env ids."""
    env = make_sb3_env("cartpole", "mujoco", 3, config=SHORT, monitor=False)
    env.reset()
    env.step(np.zeros((3, 1), np.float32))
    steps = env.env.task.episode_step.tolist()
    assert steps == [1, 1, 1]
    for indices in ([9], [0, -1], True, np.True_, [True, False], np.array([True, False, True]), 1.5, "0", [[0]], {}):
        for call in (
            lambda indices=indices: env.env_method("reset", indices=indices),
            lambda indices=indices: env.get_attr("render_mode", indices=indices),
            lambda indices=indices: env.set_attr("my_flag", 1, indices=indices),
            lambda indices=indices: env.env_is_wrapped(VecMonitor, indices=indices),
        ):
            with pytest.raises(InvalidArgumentError, match=r"^indices: ") as e:
                call()
            assert "\n" not in str(e.value)
    assert env.env.task.episode_step.tolist() == steps and not hasattr(env.env, "my_flag")
    assert env.get_attr("render_mode", indices=np.array([2, 0])) == [None, None]  # integer arrays are ids
    assert env.get_attr("render_mode", indices=torch.tensor([1])) == [None]
    # a method's name and arguments are checked before it runs
    with pytest.raises(AttributeError, match=r"^env_method: method_name: neither .* has 'nope'$"):
        env.env_method("nope")
    with pytest.raises(InvalidArgumentError, match=r"^env_method: method_args: 'control_dt' is not a method"):
        env.env_method("control_dt", 3)
    with pytest.raises(ArgumentTypeError, match=r"^env_is_wrapped: wrapper_class: expected a class, got int"):
        env.env_is_wrapped(3)
    # actions are checked where they are given (step_async), and a refused step_async stores nothing
    with pytest.raises(InputShapeError, match=r"^actions: expected shape \(3, 1\), got \(2, 1\)$"):
        env.step_async(np.zeros((2, 1), np.float32))
    with pytest.raises(InvalidArgumentError, match=r"^step_wait: no actions"):
        env.step_wait()
    assert env.env.task.episode_step.tolist() == steps
    # a refused seed leaves the seed given before it in place
    env.seed(7)
    for seed in (True, -1, 1.5, "3"):
        with pytest.raises(InvalidArgumentError, match=r"^seed: "):
            env.seed(seed)
    first = env.reset()
    env.seed(7)
    np.testing.assert_array_equal(env.reset(), first)
    # SB3's set_attr gives every env the value it is given (a list too, as DummyVecEnv's setattr does)
    env.set_attr("my_list", [1, 2, 3])
    assert env.get_attr("my_list") == [[1, 2, 3]] * 3
    env.close()


def test_sb3_env_method_reset_restarts_the_named_envs_only() -> None:
    """``env_method("reset", indices=...)`` restarts those envs only, as ``DummyVecEnv`` would (the others
    keep their state and episode), and gives each named env's ``(obs, info)``; a method that would act on every
    env is refused for some envs, before it runs; a method that changes nothing gives the named envs' results."""
    env = make_sb3_env("cartpole", "mujoco", 3, config={"episode_length": 50}, monitor=False)
    task = env.env.task
    env.seed(3)
    env.reset()
    for _ in range(3):
        env.step(PUSH)
    qpos, steps = task.backend.get_qpos().clone(), task.episode_step.tolist()
    assert steps == [3, 3, 3] and task.episode_count.tolist() == [1, 1, 1]
    out = env.env_method("reset", indices=[0])
    assert task.episode_step.tolist() == [0, 3, 3] and task.episode_count.tolist() == [2, 1, 1]
    after = task.backend.get_qpos()
    assert torch.equal(after[1:], qpos[1:])  # envs 1 and 2 untouched
    assert not torch.equal(after[0], qpos[0])
    assert len(out) == 1 and len(out[0]) == 2 and out[0][1] == {}
    np.testing.assert_array_equal(out[0][0], task.flatten(task.observe())[0].numpy())
    ref = make_vector_env("cartpole", "mujoco", 3, config={"episode_length": 50}, tensors="numpy")
    ref.reset(seed=3)
    np.testing.assert_array_equal(out[0][0], ref.reset()[0][0])  # env 0's episode 1 of seed 3
    ref.close()
    _, _, dones, _ = env.step(np.zeros((3, 1), np.float32))  # the others go on with their episodes
    assert task.episode_step.tolist() == [1, 4, 4] and not dones.any()
    # an env named twice restarts twice, as DummyVecEnv's loop over the named envs does
    twice = env.env_method("reset", indices=[2, 2])
    assert task.episode_count.tolist() == [2, 1, 3] and task.episode_step.tolist() == [1, 4, 0]
    assert not np.array_equal(twice[0][0], twice[1][0])
    np.testing.assert_array_equal(twice[1][0], task.flatten(task.observe())[2].numpy())
    # every env: each its own (obs, info), not the batch's
    every = env.env_method("reset")
    assert len(every) == 3 and all(obs.shape == env.observation_space.shape and info == {} for obs, info in every)
    assert task.episode_count.tolist() == [3, 2, 4]
    env.step(np.zeros((3, 1), np.float32))
    # refused before anything happens: a seed for some envs (the envs share one reset seed), options, a method
    # that runs once on the whole batch
    state = (task.backend.get_qpos().tolist(), task.episode_step.tolist(), task.episode_count.tolist(), task.seed)
    for call, pattern in [
        (lambda: env.env_method("reset", seed=5, indices=[0]), r"^indices: .*share one reset seed"),
        (lambda: env.env_method("reset", options={"x": 1}, indices=[0]), r"^env_method: method_kwargs: "),
        (lambda: env.env_method("reset", 5), r"^env_method: method_args: "),
        (lambda: env.env_method("reset", sed=5), r"^env_method: method_kwargs: "),
        (
            lambda: env.env_method("step", np.zeros((3, 1)), indices=[0]),
            r"^indices: .*env_method\('step'\) runs once and would act on every env",
        ),
        (lambda: env.env_method("reseed", 4, indices=[0, 1]), r"^indices: .*env_method\('reseed'\) .*every env"),
        (lambda: env.env_method("close", indices=2), r"^indices: .*env_method\('close'\) .*every env"),
    ]:
        with pytest.raises(InvalidArgumentError, match=pattern) as e:
            call()
        assert "\n" not in str(e.value)
        assert (
            task.backend.get_qpos().tolist(),
            task.episode_step.tolist(),
            task.episode_count.tolist(),
            task.seed,
        ) == state
    # a seed for every env seeds them all, as seed() then reset() does
    seeded = env.env_method("reset", seed=5)
    env.seed(5)
    np.testing.assert_array_equal(np.stack([obs for obs, _ in seeded]), env.reset())
    # what changes nothing gives the named envs' results (a method, or an attribute)
    observed = env.env_method("observe", indices=[2, 0])
    np.testing.assert_array_equal(observed[0]["joint_pos"], task.observe()["joint_pos"][2].numpy())
    assert env.env_method("control_dt", indices=[1]) == [task.control_dt]
    env.close()
    dict_env = make_sb3_env("cartpole", "mujoco", 2, config=SHORT, obs_mode="state_dict", monitor=False)
    dict_env.reset()
    dict_env.step(np.zeros((2, 1), np.float32))
    ((obs, info),) = dict_env.env_method("reset", indices=np.array([0]))
    assert set(obs) == set(dict_env.observation_space.spaces) and obs["joint_pos"].shape == (2,)
    assert dict_env.env.task.episode_step.tolist() == [0, 1]
    dict_env.close()


def test_sb3_ppo_trains_on_the_adapter_and_evaluates() -> None:
    from stable_baselines3 import PPO
    from stable_baselines3.common.evaluation import evaluate_policy

    env = VecNormalize(make_sb3_env("cartpole", "mujoco", 8, config={"episode_length": 20}, info_keywords=("success",)))
    model = PPO("MlpPolicy", env, n_steps=16, batch_size=64, n_epochs=2, seed=0, device="cpu")
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(total_timesteps=3 * 16 * 8)
    assert model.num_timesteps == 3 * 16 * 8
    assert any(not torch.equal(a, b) for a, b in zip(before, model.policy.parameters()))
    assert len(model.ep_info_buffer) >= 8 and {"r", "l", "success"} <= set(model.ep_info_buffer[0])
    mean, _ = evaluate_policy(model, env, n_eval_episodes=8)
    assert np.isfinite(mean) and 0 < mean <= 20
    env.close()
    dict_env = make_sb3_env("cartpole", "mujoco", 4, config=SHORT, obs_mode="state_dict")
    PPO("MultiInputPolicy", dict_env, n_steps=8, batch_size=32, n_epochs=1, device="cpu").learn(32)
    dict_env.close()


# ----------------------------------------------------------------------
# skrl: its wrap_env on SimVectorEnv, no glue
# ----------------------------------------------------------------------
def test_skrl_ppo_trains_on_the_gymnasium_adapter_through_wrap_env() -> None:
    pytest.importorskip("skrl")
    from skrl.agents.torch.ppo import PPO, PPO_CFG
    from skrl.envs.wrappers.torch import wrap_env
    from skrl.memories.torch import RandomMemory
    from skrl.models.torch import DeterministicMixin, GaussianMixin, Model
    from skrl.trainers.torch import SequentialTrainer

    class Policy(GaussianMixin, Model):
        def __init__(self, observation_space, action_space, device):
            Model.__init__(self, observation_space=observation_space, action_space=action_space, device=device)
            GaussianMixin.__init__(self, clip_actions=True)
            self.net = torch.nn.Sequential(
                torch.nn.Linear(self.num_observations, 32), torch.nn.Tanh(), torch.nn.Linear(32, self.num_actions)
            )
            self.log_std = torch.nn.Parameter(torch.zeros(self.num_actions))

        def compute(self, inputs, role=""):
            return self.net(inputs["observations"]), {"log_std": self.log_std}

    class Value(DeterministicMixin, Model):
        def __init__(self, observation_space, action_space, device):
            Model.__init__(self, observation_space=observation_space, action_space=action_space, device=device)
            DeterministicMixin.__init__(self)
            self.net = torch.nn.Sequential(
                torch.nn.Linear(self.num_observations, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)
            )

        def compute(self, inputs, role=""):
            return self.net(inputs["observations"]), {}

    # numpy mode: skrl's gymnasium wrapper converts through numpy in either mode, and warns on tensors
    gym_env = make_vector_env(
        "cartpole",
        "mujoco",
        8,
        config={"episode_length": 20},
        tensors="numpy",
        render_mode="rgb_array",
        render_size=(16, 12),
    )
    env = wrap_env(gym_env)
    assert env.num_envs == 8 and env.observation_space.shape == (4,)
    frames = env.render()  # skrl's render is env.call("render")
    assert len(frames) == 8 and tuple(frames[0].shape) == (12, 16, 3)
    models = {
        "policy": Policy(env.observation_space, env.action_space, env.device),
        "value": Value(env.observation_space, env.action_space, env.device),
    }
    cfg = PPO_CFG(rollouts=16, learning_epochs=2, mini_batches=2)
    cfg.experiment.write_interval = 0
    cfg.experiment.checkpoint_interval = 0
    cfg.experiment.directory = ""
    agent = PPO(
        models=models,
        memory=RandomMemory(memory_size=16, num_envs=8, device=env.device),
        observation_space=env.observation_space,
        action_space=env.action_space,
        device=env.device,
        cfg=cfg,
    )
    before = [p.detach().clone() for p in models["policy"].parameters()]
    trainer = SequentialTrainer(
        env=env,
        agents=agent,
        cfg={"timesteps": 48, "headless": True, "disable_progressbar": True, "close_environment_at_exit": False},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trainer.train()
    assert any(not torch.equal(a, b) for a, b in zip(before, models["policy"].parameters()))
    trainer.eval()
    env.close()


# ----------------------------------------------------------------------
# torchrl: an EnvBase on the task's device
# ----------------------------------------------------------------------
def test_torchrl_env_passes_check_env_specs_and_resets_as_torchrl_asks() -> None:
    pytest.importorskip("torchrl")
    from torchrl.envs.utils import check_env_specs

    from simbackend.envs.torchrl import TorchRLEnv, make_torchrl_env

    env = make_torchrl_env("cartpole", "mujoco", 3, config={"episode_length": 3})
    assert isinstance(env, TorchRLEnv) and tuple(env.batch_size) == (3,)
    check_env_specs(env, seed=0)
    ref = make_vector_env("cartpole", "mujoco", 3, config={"episode_length": 3})
    env.set_seed(5)
    starts = [ref.reset(seed=5)[0], ref.reset()[0], ref.reset()[0]]  # episodes 0, 1, 2 of each env
    td = env.reset()
    torch.testing.assert_close(td["observation"], starts[0], rtol=0, atol=0)
    assert not td["done"].any() and td["done"].shape == (3, 1)
    # a rollout that goes on through the ends: torchrl resets the done envs (episode 1 after step 3)
    env.set_seed(5)  # the rollout resets first: episode 0 of seed 5 again
    rollout = env.rollout(7, break_when_any_done=False)
    torch.testing.assert_close(rollout["observation"][:, 0], starts[0], rtol=0, atol=0)
    assert rollout["next", "truncated"][:, 2].all() and not rollout["next", "terminated"].any()
    assert rollout["next", "reward"].shape == (3, 7, 1) and (rollout["next", "reward"] == 1.0).all()
    assert rollout["next", "success"][:, 2].all() and not rollout["next", "success"][:, 1].any()
    torch.testing.assert_close(rollout["observation"][:, 3], starts[1], rtol=0, atol=0)
    torch.testing.assert_close(rollout["observation"][:, 6], starts[2], rtol=0, atol=0)
    # a partial reset ("_reset", as collectors send it) starts new episodes in those envs only
    from torchrl.envs.utils import step_mdp

    env.set_seed(5)
    td = step_mdp(env.step(env.reset().set("action", torch.zeros(3, 1))))
    before = td["observation"].clone()
    out = env.reset(td.set("_reset", torch.tensor([[False], [True], [False]])))
    torch.testing.assert_close(out["observation"][1], starts[1][1], rtol=0, atol=0)
    torch.testing.assert_close(out["observation"][[0, 2]], before[[0, 2]], rtol=0, atol=0)
    torch.testing.assert_close(env.task.flatten(env.task.observe())[[0, 2]], before[[0, 2]], rtol=0, atol=0)
    assert env.task.episode_step.tolist() == [1, 0, 1]
    env.close()
    ref.close()
    with pytest.raises(InvalidArgumentError, match=r"^obs_mode: expected one of 'state', 'state_dict', got 'pixels'"):
        make_torchrl_env("cartpole", "mujoco", 1, obs_mode="pixels")
    with pytest.raises(ArgumentTypeError, match=r"^task: expected a simbackend.tasks.Task"):
        TorchRLEnv("cartpole")


def test_torchrl_reset_masks_and_arguments_are_checked_before_any_reset() -> None:
    """A ``"_reset"`` mask is a bool tensor of shape (N,) or (N, 1) on the env's device: anything else is
    refused in one line naming it, before any env restarts (a float mask, a (4, 2) mask, an int 2, a mask
    on another device); so are unknown reset arguments and a partial ``"_step"`` (the envs step together)."""
    pytest.importorskip("torchrl")
    from simbackend.envs.torchrl import make_torchrl_env
    from simbackend.errors import InputDTypeError

    env = make_torchrl_env("cartpole", "mujoco", 4, config=SHORT)
    td = env.reset()
    env.step(td.set("action", torch.zeros(4, 1)))
    assert env.task.episode_step.tolist() == [1] * 4
    for mask, error, pattern in [
        (torch.ones(4, 1), InputDTypeError, r"expected a bool mask, got dtype torch.float32"),
        (torch.tensor([[2], [0], [0], [0]]), InputDTypeError, r"expected a bool mask, got dtype torch.int64"),
        (torch.ones(4, 2, dtype=torch.bool), InputShapeError, r"expected shape \(4,\) or \(4, 1\), got \(4, 2\)"),
        (torch.ones(4, 1, 1, dtype=torch.bool), InputShapeError, r"expected shape .*, got \(4, 1, 1\)"),
        (
            torch.ones(4, 1, dtype=torch.bool, device="meta"),
            InvalidArgumentError,
            r"expected a mask on the env's device cpu, got one on meta",
        ),
    ]:
        with pytest.raises(error, match=r"^tensordict\['_reset'\]: " + pattern) as e:
            env.reset(td.clone().clear_device_().set("_reset", mask))  # no device: the mask keeps its own
        assert "\n" not in str(e.value)
        assert env.task.episode_step.tolist() == [1] * 4  # nothing was reset
    with pytest.raises(InvalidArgumentError, match=r"^reset: unknown keyword arguments \['options'\]"):
        env.reset(options={"x": 1})
    out = env.reset(td.clone().set("_reset", torch.tensor([True, False, False, True])))  # (N,) is torchrl's too
    assert env.task.episode_step.tolist() == [0, 1, 1, 0] and not out["done"].any()
    partial = td.clone().set("action", torch.zeros(4, 1)).set("_step", torch.tensor([True, False, True, True]))
    with pytest.raises(InvalidArgumentError, match=r"^tensordict\['_step'\]: .*every env steps together"):
        env.step(partial)
    assert env.task.episode_step.tolist() == [0, 1, 1, 0]
    env.step(td.clone().set("action", torch.zeros(4, 1)).set("_step", torch.ones(4, dtype=torch.bool)))
    assert env.task.episode_step.tolist() == [1, 2, 2, 1]
    with pytest.raises(InvalidArgumentError, match=r"^tensordict\['action'\]: missing"):
        env.step(td.clone().exclude("action"))
    for seed in (True, -1, 1.5):
        with pytest.raises(InvalidArgumentError, match=r"^seed: "):
            env.set_seed(seed)
    env.close()


def test_torchrl_ppo_collects_and_trains_a_few_iterations() -> None:
    """torchrl's PPO recipe (its collector, GAE and clipped loss) on the adapter, as its tutorial writes it."""
    pytest.importorskip("torchrl")
    from tensordict.nn import NormalParamExtractor, TensorDictModule
    from torchrl.collectors import Collector
    from torchrl.modules import ProbabilisticActor, TanhNormal, ValueOperator
    from torchrl.objectives import ClipPPOLoss
    from torchrl.objectives.value import GAE

    from simbackend.envs.torchrl import make_torchrl_env

    env = make_torchrl_env("cartpole", "mujoco", 8, config={"episode_length": 20})
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.Tanh(), torch.nn.Linear(32, 2), NormalParamExtractor())
    actor = ProbabilisticActor(
        TensorDictModule(net, in_keys=["observation"], out_keys=["loc", "scale"]),
        spec=env.action_spec,
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        return_log_prob=True,
    )
    critic = ValueOperator(
        torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)), in_keys=["observation"]
    )
    advantage = GAE(gamma=0.99, lmbda=0.95, value_network=critic)
    loss = ClipPPOLoss(actor, critic)
    optim = torch.optim.Adam(loss.parameters(), lr=3e-4)
    collector = Collector(env, actor, frames_per_batch=160, total_frames=480)
    before = [p.detach().clone() for p in net.parameters()]
    ended = 0
    for batch in collector:
        assert tuple(batch.batch_size) == (8, 20)
        ended += int(batch["next", "done"].sum())
        with torch.no_grad():
            advantage(batch)
        out = loss(batch.reshape(-1))
        total = out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]
        assert torch.isfinite(total)
        optim.zero_grad()
        total.backward()
        optim.step()
    collector.shutdown()
    assert ended >= 8  # the collector restarted the envs whose episodes ended
    assert any(not torch.equal(a, b) for a, b in zip(before, net.parameters()))
    env.close()


# ----------------------------------------------------------------------
# rsl-rl: RslRlVecEnv's entry points check before they act (its training runs in tests/test_training.py)
# ----------------------------------------------------------------------
def test_rsl_episode_length_buf_and_step_check_before_they_write() -> None:
    """``episode_length_buf`` takes ``(N,)`` whole step counts >= 0 on the env's device (what rsl-rl's
    ``randint_like`` gives, integral floats, host lists and arrays); NaN, fractions, negatives, bools, another
    shape or device are refused in one line naming it, and the task's counters keep their values. A refused
    ``step`` (its actions: shape, dtype, NaN) names ``actions`` and steps nothing."""
    pytest.importorskip("rsl_rl")
    from simbackend.envs.rsl import RslRlVecEnv
    from simbackend.errors import InputDTypeError, NonFiniteError
    from simbackend.tasks import make_task

    env = RslRlVecEnv(make_task("cartpole", "mujoco", 4, config={"episode_length": 5}, seed=0), owns_task=True)
    task = env.task
    env.step(torch.zeros(4, 1))
    qpos = task.backend.get_qpos().clone()
    nan = float("nan")
    for value, error, pattern in [
        (torch.tensor([0.0, nan, 1.0, 1.0]), InvalidArgumentError, r"expected whole numbers of steps >= 0, got nan"),
        (torch.tensor([0.5, 1.0, 1.0, 1.0]), InvalidArgumentError, r"expected whole numbers of steps >= 0, got 0.5"),
        (torch.tensor([-1, 0, 0, 0]), InvalidArgumentError, r"expected whole numbers of steps >= 0, got -1"),
        ([0, 1, -2, 0], InvalidArgumentError, r"expected whole numbers of steps >= 0, got -2"),
        (torch.ones(4, dtype=torch.bool), InputDTypeError, r"expected step counts, got dtype torch.bool"),
        (torch.ones(4, dtype=torch.complex64), InputDTypeError, r"expected step counts, got dtype torch.complex64"),
        ("0123", InputDTypeError, r"expected step counts, got dtype <U4"),
        (torch.zeros(3, dtype=torch.long), InputShapeError, r"expected shape \(4,\), got \(3,\)"),
        (torch.zeros(4, 1, dtype=torch.long), InputShapeError, r"expected shape \(4,\), got \(4, 1\)"),
        (
            torch.zeros(4, dtype=torch.long, device="meta"),
            InvalidArgumentError,
            r"expected a tensor on the env's device cpu, got one on meta",
        ),
    ]:
        with pytest.raises(error, match=r"^episode_length_buf: " + pattern) as e:
            env.episode_length_buf = value
        assert "\n" not in str(e.value)
        assert task.episode_step.tolist() == [1, 1, 1, 1]
    for value, expected in [
        (torch.randint_like(env.episode_length_buf, high=env.max_episode_length), None),  # rsl-rl's
        (torch.tensor([0.0, 1.0, 2.0, 3.0]), [0, 1, 2, 3]),
        (np.array([3, 2, 1, 0]), [3, 2, 1, 0]),
        ([0, 9, 4, 0], [0, 4, 4, 0]),  # past the limit: the last step of the episode
    ]:
        env.episode_length_buf = value
        assert task.episode_step.dtype == torch.int64
        assert task.episode_step.tolist() == (expected or value.tolist())
    steps = task.episode_step.tolist()
    for actions, error, pattern in [
        (torch.zeros(3, 1), InputShapeError, r"^actions: expected shape \(4, 1\), got \(3, 1\)$"),
        (torch.zeros(4, 1, dtype=torch.bool), InputDTypeError, r"^actions: expected real numbers"),
        (torch.tensor([[0.0], [nan], [0.0], [0.0]]), NonFiniteError, r"^actions: .*env ids \[1\]"),
    ]:
        with pytest.raises(error, match=pattern):
            env.step(actions)
        assert task.episode_step.tolist() == steps and torch.equal(task.backend.get_qpos(), qpos)
    with pytest.raises(ScalarTypeError, match=r"^owns_task: expected True or False"):
        RslRlVecEnv(task, owns_task="no")
    env.close()


# ----------------------------------------------------------------------
# on a GPU: the torch paths keep their tensors on the device (run where CUDA is; skipped elsewhere)
# ----------------------------------------------------------------------
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_torch_paths_stay_on_a_cuda_device_and_give_the_cpu_numbers() -> None:
    """MuJoCo's backend with ``device="cuda"`` (tensors on the GPU): the torch wrappers and TorchRLEnv
    return CUDA tensors, equal to the CPU run's, over autoresets."""
    pytest.importorskip("torchrl")
    from simbackend.envs import wrappers as T
    from simbackend.envs.torchrl import make_torchrl_env

    runs = {}
    for device in ("cpu", "cuda"):
        kw = {"config": {"episode_length": 5}, "device": device}
        env = T.NormalizeReward(
            T.NormalizeObservation(T.RecordEpisodeStatistics(make_vector_env("cartpole", "mujoco", 4, **kw)))
        )
        out = [env.reset(seed=0)[0]]
        for t in range(12):
            obs, reward, terminated, truncated, info = env.step(torch.full((4, 1), 0.3 * (t % 3 - 1), device=device))
            assert obs.device.type == reward.device.type == terminated.device.type == device
            if "episode" in info:
                assert info["episode"]["r"].device.type == device
            out += [obs, reward]
        env.close()
        trl = make_torchrl_env("cartpole", "mujoco", 4, **kw)
        rollout = trl.rollout(
            12, lambda td: td.set("action", 0.5 * td["observation"][:, :1].tanh()), break_when_any_done=False
        )
        assert all(v.device.type == device for v in rollout.values(True, True))
        trl.close()
        runs[device] = [x.cpu() for x in out] + [rollout.cpu()["next", "observation"]]
    for a, b in zip(runs["cpu"], runs["cuda"]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_torchrl_close_raises_a_pending_error_after_closing_everything() -> None:
    """Under deferred checks a NaN action is reported at the next call; ``close`` raises it (SimBackend's
    ``close`` does) and still closes the task and the env, so a second ``close`` is not needed."""
    pytest.importorskip("torchrl")
    from tensordict import TensorDict

    from simbackend.envs.torchrl import make_torchrl_env
    from simbackend.errors import NonFiniteError

    plain = make_torchrl_env("cartpole", "mujoco", 2)
    assert not plain.is_closed
    plain.close()  # an owned task is closed with the env (torchrl's EnvBase starts closed: it was not)
    assert plain.is_closed and plain.task.backend.closed
    env = make_torchrl_env("cartpole", "mujoco", 2, deferred_checks=True)
    env.reset()
    bad = TensorDict({"action": torch.tensor([[0.1], [float("nan")]])}, batch_size=[2])
    env.step(bad)  # refused on the device: reported at the next call
    with pytest.raises(NonFiniteError):
        env.close()
    assert env.is_closed and env.task.backend.closed
