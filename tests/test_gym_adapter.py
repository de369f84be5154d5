"""The gymnasium vector adapter (simbackend.envs.gym): spaces, the three autoreset modes exactly as
gymnasium's SyncVectorEnv implements them, seeded resets, partial resets, numpy and dict
observations, pictures, gymnasium's own wrappers and env checks (batched), and bad input.

The episodes are cartpole's: with ``episode_length=3`` every episode is truncated after 3 steps,
and a partial reset staggers the envs so that one env ends while the other goes on. Env ``i``'s
``k``-th episode starts from ``(seed, i, k)``, so a plain env reset ``k + 1`` times gives the
expected first observation of any autoreset.

Run with ``MUJOCO_GL=egl`` on a machine without a display (``make test`` does).
"""

from __future__ import annotations

import warnings
from copy import deepcopy
from itertools import combinations

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium import spaces
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.utils.passive_env_checker import (
    check_action_space,
    check_obs,
    check_observation_space,
    data_shares_objects,
)
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from simbackend.envs import SimVectorEnv, make_vector_env
from simbackend.errors import (
    ArgumentTypeError,
    BackendClosedError,
    InputShapeError,
    InvalidArgumentError,
    NonFiniteError,
    RenderingError,
)

SHORT = {"episode_length": 3}


@pytest.fixture
def make(request):
    """``make(n=2, sim="mujoco", **kw)``: a cartpole SimVectorEnv, closed after the test."""
    made = []

    def build(n: int = 2, sim: str = "mujoco", **kw) -> SimVectorEnv:
        kw.setdefault("seed", 0)
        env = make_vector_env("cartpole", sim, n, **kw)
        made.append(env)
        return env

    yield build
    for env in made:
        env.close()


def zeros(env: SimVectorEnv) -> np.ndarray:
    return np.zeros((env.num_envs, env.single_action_space.shape[0]), np.float32)


def np_(x):
    """Tensors (in dicts too) as numpy arrays, for gymnasium's ``data_equivalence``."""
    if isinstance(x, dict):
        return {k: np_(v) for k, v in x.items()}
    return x.numpy() if isinstance(x, torch.Tensor) else x


def starts(make, n: int = 2, episodes: int = 3) -> list[torch.Tensor]:
    """First observations of episodes k = 0, 1, ... of every env (seed 0), from full resets."""
    ref = make(n, config=SHORT)
    out = [ref.reset(seed=0)[0]]
    out += [ref.reset()[0] for _ in range(episodes - 1)]
    return out


def stagger(env: SimVectorEnv) -> None:
    """Env 0 restarts (episode 1) after one step; env 1 goes on (episode 0, one step in)."""
    env.reset(seed=0)
    env.step(zeros(env))
    env.reset(options={"reset_mask": np.array([True, False])})


# ----------------------------------------------------------------------
# spaces, dtypes, actions
# ----------------------------------------------------------------------
def test_spaces_contain_what_reset_and_step_return(make) -> None:
    env = make(3)
    single_obs = spaces.Box(-np.inf, np.inf, (4,), np.float32)
    single_act = spaces.Box(-1.0, 1.0, (1,), np.float32)
    assert env.num_envs == 3
    assert env.single_observation_space == single_obs
    assert env.observation_space == batch_space(single_obs, 3) and env.observation_space.shape == (3, 4)
    assert env.single_action_space == single_act
    assert env.action_space == batch_space(single_act, 3) and env.action_space.shape == (3, 1)
    assert env.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
    assert env.metadata["render_modes"] == ["rgb_array"] and env.metadata["render_fps"] == pytest.approx(50.0)

    obs, info = env.reset(seed=0)
    assert isinstance(info, dict)
    assert isinstance(obs, torch.Tensor) and obs.dtype == torch.float32 and obs.shape == (3, 4)
    assert obs.device == env.task.device
    assert obs.numpy() in env.observation_space
    assert all(row in env.single_observation_space for row in obs.numpy())
    obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    assert obs.dtype == torch.float32 and obs.shape == (3, 4) and obs.numpy() in env.observation_space
    assert reward.dtype == torch.float32 and reward.shape == (3,)
    assert terminated.dtype == torch.bool and truncated.dtype == torch.bool and terminated.shape == (3,)
    assert info["success"].shape == (3,) and info["_success"].dtype == torch.bool and bool(info["_success"].all())


def test_actions_as_numpy_list_or_tensor_give_the_same_step(make) -> None:
    env = make(3)
    actions = np.array([[0.5], [-1.0], [0.25]], np.float32)
    results = []
    for a in (actions, actions.tolist(), torch.from_numpy(actions), torch.from_numpy(actions).double()):
        env.reset(seed=1)
        results.append(env.step(a)[0])
    for r in results[1:]:
        torch.testing.assert_close(r, results[0], rtol=0, atol=0)
    env.reset(seed=1)  # actions are clipped to [-1, 1]
    big = env.step(actions * 10)[0]
    env.reset(seed=1)
    torch.testing.assert_close(big, env.step(np.clip(actions * 10, -1, 1))[0], rtol=0, atol=0)


# ----------------------------------------------------------------------
# autoreset modes
# ----------------------------------------------------------------------
def _disabled_run(make) -> list[tuple]:
    """The staggered episodes with resets done by hand: the plain transitions, steps A, B, C."""
    env = make(config=SHORT, autoreset_mode="disabled")
    stagger(env)
    a = env.step(zeros(env))
    b = env.step(zeros(env))
    env.reset(options={"reset_mask": np.array([False, True])})
    c = env.step(zeros(env))
    return [a, b, c]


def test_next_step_autoreset_resets_on_the_step_after_the_end_and_ignores_its_action(make) -> None:
    _, second, third = starts(make)
    plain = _disabled_run(make)
    env = make(config=SHORT, autoreset_mode="next_step", episode_key="episode")
    assert env.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
    stagger(env)
    a = env.step(zeros(env))  # env 0: step 1 of 3, env 1: step 2 of 3
    for got, want in zip(a, plain[0]):
        assert data_equivalence(np_(got), np_(want), exact=True)
    assert "episode" not in a[4] and "_episode" not in a[4]

    b = env.step(zeros(env))  # env 1 truncated: reported as usual, not reset yet
    obs, reward, terminated, truncated, info = b
    torch.testing.assert_close(obs, plain[1][0], rtol=0, atol=0)
    assert truncated.tolist() == [False, True] and terminated.tolist() == [False, False]
    assert reward.tolist() == [1.0, 1.0]
    assert info["_episode"].tolist() == [False, True]
    assert info["episode"]["r"].tolist() == [0.0, 3.0] and info["episode"]["l"].tolist() == [0, 3]
    assert info["episode"]["t"][1] >= 0 and info["episode"]["t"][0] == 0

    # the step after the end: env 1 starts its episode 1 whatever its action (NaN too); env 0 steps
    obs, reward, terminated, truncated, info = env.step(np.array([[0.0], [np.nan]], np.float32))
    torch.testing.assert_close(obs[1], second[1], rtol=0, atol=0)
    torch.testing.assert_close(obs[0], plain[2][0][0], rtol=0, atol=0)
    assert reward.tolist() == [1.0, 0.0]
    assert terminated.tolist() == [False, False] and truncated.tolist() == [True, False]
    assert info["_success"].tolist() == [True, False] and info["_reward_terms"].tolist() == [True, False]
    assert info["reward_terms"]["alive"].tolist() == [1.0, 0.0]
    assert info["_episode"].tolist() == [True, False] and info["episode"]["l"].tolist() == [3, 0]

    obs, reward, terminated, truncated, info = env.step(zeros(env))  # now env 0 restarts (episode 2)
    torch.testing.assert_close(obs[0], third[0], rtol=0, atol=0)
    torch.testing.assert_close(obs[1], plain[2][0][1], rtol=0, atol=0)  # env 1: one step into episode 1
    assert reward.tolist() == [0.0, 1.0] and not bool((terminated | truncated).any())
    assert env.task.episode_count.tolist() == [3, 2]


def test_same_step_autoreset_returns_the_new_episode_and_the_final_obs_in_info(make) -> None:
    _, second, third = starts(make)
    plain = _disabled_run(make)
    env = make(config=SHORT, autoreset_mode="same_step", episode_key="episode")
    assert env.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP
    stagger(env)
    a = env.step(zeros(env))
    for got, want in zip(a, plain[0]):
        assert data_equivalence(np_(got), np_(want), exact=True)
    assert not {"final_obs", "_final_obs", "final_info", "_final_info", "episode"} & set(a[4])

    obs, reward, terminated, truncated, info = env.step(zeros(env))  # env 1 ends and restarts at once
    torch.testing.assert_close(obs[1], second[1], rtol=0, atol=0)
    torch.testing.assert_close(obs[0], plain[1][0][0], rtol=0, atol=0)
    assert reward.tolist() == plain[1][1].tolist() == [1.0, 1.0]
    assert truncated.tolist() == [False, True] and terminated.tolist() == [False, False]
    assert info["_final_obs"].tolist() == [False, True] and info["_final_info"].tolist() == [False, True]
    torch.testing.assert_close(info["final_obs"][1], plain[1][0][1], rtol=0, atol=0)
    final = info["final_info"]
    assert final["_episode"].tolist() == [False, True] and final["episode"]["l"].tolist() == [0, 3]
    assert final["success"][1] and final["_success"][1]
    assert info["_episode"].tolist() == [False, True] and info["episode"]["r"].tolist() == [0.0, 3.0]

    obs, reward, terminated, truncated, info = env.step(zeros(env))  # env 0 ends; env 1 one step in
    torch.testing.assert_close(obs[0], third[0], rtol=0, atol=0)
    torch.testing.assert_close(obs[1], plain[2][0][1], rtol=0, atol=0)
    torch.testing.assert_close(info["final_obs"][0], plain[2][0][0], rtol=0, atol=0)
    assert info["_final_obs"].tolist() == [True, False] and truncated.tolist() == [True, False]
    assert env.task.episode_count.tolist() == [3, 2]


def test_disabled_autoreset_refuses_to_step_ended_envs_until_reset_mask(make) -> None:
    _, second, _ = starts(make)
    env = make(config=SHORT, autoreset_mode=AutoresetMode.DISABLED)
    assert env.metadata["autoreset_mode"] is AutoresetMode.DISABLED
    stagger(env)
    env.step(zeros(env))
    obs_end, _, _, truncated, _ = env.step(zeros(env))
    assert truncated.tolist() == [False, True]
    with pytest.raises(InvalidArgumentError, match=r"envs \[1\] ended.*reset_mask"):
        env.step(zeros(env))
    obs, info = env.reset(options={"reset_mask": np.array([False, True])})
    torch.testing.assert_close(obs[0], obs_end[0], rtol=0, atol=0)  # env 0 untouched
    torch.testing.assert_close(obs[1], second[1], rtol=0, atol=0)
    assert info == {}
    env.step(zeros(env))  # steps again


# ----------------------------------------------------------------------
# seeding and partial resets
# ----------------------------------------------------------------------
def test_reset_with_a_seed_replays_the_same_episodes(make) -> None:
    env = make(3, seed=0)
    actions = np.random.default_rng(0).uniform(-1, 1, (6, 3, 1)).astype(np.float32)

    def rollout(seed=None):
        obs = [env.reset(seed=seed)[0]]
        obs += [env.step(a)[0] for a in actions]
        return torch.stack(obs)

    a = rollout(5)
    assert env.np_random_seed == 5
    b = rollout()  # unseeded: the next episodes
    assert not torch.allclose(a[0], b[0])
    torch.testing.assert_close(rollout(5), a, rtol=0, atol=0)
    assert not torch.allclose(rollout(6)[0], a[0])
    other = make(3, seed=9)  # the task's build seed does not matter once reset is seeded
    assert data_equivalence(other.reset(seed=5)[0].numpy(), a[0].numpy(), exact=True)


def test_reset_mask_resets_only_the_named_envs(make) -> None:
    env = make(3)
    env.reset(seed=0)
    before = env.step(np.full((3, 1), 0.7, np.float32))[0]
    options = {"reset_mask": np.array([False, True, False])}
    obs, _ = env.reset(options=options)
    assert list(options) == ["reset_mask"]  # not popped: wrappers read it after the env
    torch.testing.assert_close(obs[[0, 2]], before[[0, 2]], rtol=0, atol=0)
    assert not torch.allclose(obs[1], before[1])
    assert env.task.episode_count.tolist() == [1, 2, 1]
    env.reset(options={"reset_mask": torch.tensor([True, False, False])})  # a tensor works too
    assert env.task.episode_count.tolist() == [2, 2, 1]


# ----------------------------------------------------------------------
# array types and observation modes
# ----------------------------------------------------------------------
def _arrays(x, path="info"):
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _arrays(v, f"{path}[{k!r}]")
    else:
        yield path, x


def test_numpy_mode_returns_numpy_everywhere(make) -> None:
    env = make(2, config=SHORT, tensors="numpy", autoreset_mode="same_step")
    obs, info = env.reset(seed=0)
    assert isinstance(obs, np.ndarray) and obs.dtype == np.float32 and obs in env.observation_space
    for actions in (zeros(env), torch.zeros(2, 1), [[0.0], [0.0]]):
        obs, reward, terminated, truncated, info = env.step(actions)
    assert "final_obs" in info  # the third step ended both episodes
    assert isinstance(obs, np.ndarray) and obs.dtype == np.float32 and obs in env.observation_space
    assert isinstance(reward, np.ndarray) and reward.dtype == np.float32 and reward.shape == (2,)
    assert terminated.dtype == np.bool_ and truncated.dtype == np.bool_ and truncated.tolist() == [True, True]
    for path, value in _arrays(info):
        assert isinstance(value, np.ndarray) and value.shape[0] == 2, path
    assert info["final_obs"] in env.observation_space


def test_state_dict_mode_gives_the_terms_of_the_flat_vector(make) -> None:
    flat = make(2)
    env = make(2, obs_mode="state_dict")
    terms = env.task.observation_dims
    assert isinstance(env.single_observation_space, spaces.Dict)
    assert set(env.single_observation_space) == set(terms) == {"joint_pos", "joint_vel"}
    for key, shape in terms.items():
        assert env.single_observation_space[key] == spaces.Box(-np.inf, np.inf, shape, np.float32)
        assert env.observation_space[key].shape == (2, *shape)
    obs, _ = env.reset(seed=3)
    assert list(obs) == list(terms)
    assert {k: v.numpy() for k, v in obs.items()} in env.observation_space
    torch.testing.assert_close(torch.cat(list(obs.values()), dim=1), flat.reset(seed=3)[0], rtol=0, atol=0)
    step = env.step(zeros(env))[0]
    torch.testing.assert_close(torch.cat(list(step.values()), dim=1), flat.step(zeros(flat))[0], rtol=0, atol=0)


# ----------------------------------------------------------------------
# pictures
# ----------------------------------------------------------------------
def _rendering(fn):
    try:
        return fn()
    except RenderingError as e:
        pytest.skip(f"no OpenGL context here: {e}")


def test_render_gives_one_picture_per_env_and_images_join_state_dicts(make) -> None:
    env = make(2, render_mode="rgb_array", render_size=(32, 24))
    env.reset(seed=0)
    images = _rendering(env.render)
    assert isinstance(images, torch.Tensor) and images.dtype == torch.uint8 and images.shape == (2, 24, 32, 3)
    assert images.float().std() > 0  # a picture, not a blank
    as_numpy = make(2, render_mode="rgb_array", render_size=(32, 24), tensors="numpy")
    as_numpy.reset(seed=0)
    pictures = as_numpy.render()
    assert isinstance(pictures, np.ndarray) and pictures.dtype == np.uint8 and pictures.shape == (2, 24, 32, 3)
    np.testing.assert_array_equal(pictures, images.numpy())

    with pytest.warns(UserWarning, match="render_mode"):
        assert make(2).render() is None  # no render mode: gymnasium's warning and None

    cam = {"camera": "free", "image_size": (16, 12)}
    env = make(2, obs_mode="state_dict", config=cam)
    assert env.single_observation_space["rgb"] == spaces.Box(0, 255, (12, 16, 3), np.uint8)
    obs = env.step(zeros(env))[0]
    assert obs["rgb"].dtype == torch.uint8 and obs["rgb"].shape == (2, 12, 16, 3)
    assert {k: v.numpy() for k, v in obs.items()} in env.observation_space
    state = make(2, config=cam)  # the flat vector leaves images out
    assert state.single_observation_space.shape == (4,) and state.reset(seed=0)[0].shape == (2, 4)


# ----------------------------------------------------------------------
# gymnasium's wrappers and env checks
# ----------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["next_step", "same_step"])
def test_gymnasium_record_episode_statistics_agrees_with_the_native_episode_info(make, mode) -> None:
    """Random actions on 8-step cartpole episodes: terminations and truncations at different times."""
    kw = {"config": {"episode_length": 8}, "tensors": "numpy", "autoreset_mode": mode}
    wrapped = gymnasium.wrappers.vector.RecordEpisodeStatistics(make(3, **kw))  # its defaults, the env's
    native = make(3, episode_key="episode", **kw)
    wrapped.reset(seed=0)
    native.reset(seed=0)
    rng = np.random.default_rng(1)
    ended = 0
    for _ in range(30):
        actions = rng.uniform(-1, 1, (3, 1)).astype(np.float32)
        *_, info_w = wrapped.step(actions)
        *_, info_n = native.step(actions)
        assert ("episode" in info_w) == ("episode" in info_n)
        if "episode" in info_n:
            ended += int(info_n["_episode"].sum())
            np.testing.assert_array_equal(info_n["_episode"], info_w["_episode"])
            np.testing.assert_allclose(info_n["episode"]["r"], info_w["episode"]["r"])
            np.testing.assert_array_equal(info_n["episode"]["l"], info_w["episode"]["l"])
    assert ended >= 6 and wrapped.episode_count == ended
    # with the native key on, the wrapper refuses to overwrite it (hence the default episode_key=None)
    clash = gymnasium.wrappers.vector.RecordEpisodeStatistics(make(1, episode_key="episode", **kw))
    clash.reset(seed=0)
    with pytest.raises(ValueError, match="already exists"):
        for _ in range(9):
            clash.step(np.zeros((1, 1), np.float32))


def test_gymnasium_info_and_action_wrappers_work(make) -> None:
    env = gymnasium.wrappers.vector.DictInfoToList(make(2, config=SHORT, tensors="numpy", episode_key="episode"))
    env.reset(seed=0)
    for _ in range(3):
        *_, infos = env.step(np.zeros((2, 1), np.float32))
    assert isinstance(infos, list) and len(infos) == 2
    assert infos[1]["episode"]["l"] == 3 and infos[1]["reward_terms"]["alive"] == 1.0
    clipped = gymnasium.wrappers.vector.ClipAction(make(2, tensors="numpy"))
    clipped.reset(seed=0)
    assert clipped.step(np.full((2, 1), 5.0, np.float32))[0] in clipped.observation_space


W = gymnasium.wrappers.vector


def _same(a, b, **kw) -> None:
    np.testing.assert_allclose(np_(a), np_(b), rtol=1e-6, atol=1e-6, **kw)


def _first_key(env) -> str:
    return next(iter(env.single_observation_space.spaces))


#: every gymnasium vector wrapper that applies to the adapter's spaces: name -> (obs_mode, wrap,
#: action given to the wrapped env from a, action given to the bare env from a, check(bare, wrapped) per step)
WRAPPER_CASES = {
    "VectorizeTransformObservation": (
        "state",
        lambda e: W.VectorizeTransformObservation(
            e, gymnasium.wrappers.TransformObservation, func=lambda o: 2 * o, observation_space=None
        ),
        None,
        None,
        lambda b, w, e: _same(w[0], 2 * b[0]),
    ),
    "VectorizeTransformAction": (
        "state",
        lambda e: W.VectorizeTransformAction(e, gymnasium.wrappers.ClipAction),
        lambda a: 3 * a,
        lambda a: np.clip(3 * a, -1, 1),
        lambda b, w, e: _same(w[0], b[0]),
    ),
    "VectorizeTransformReward": (
        "state",
        lambda e: W.VectorizeTransformReward(e, gymnasium.wrappers.ClipReward, min_reward=0.0, max_reward=0.5),
        None,
        None,
        lambda b, w, e: _same(w[1], np.clip(b[1], 0, 0.5)),
    ),
    "DictInfoToList": (
        "state",
        W.DictInfoToList,
        None,
        None,
        lambda b, w, e: [
            _same(w[4][i].get("success", False), b[4]["success"][i] if b[4]["_success"][i] else False) for i in range(3)
        ],
    ),
    "TransformObservation": (
        "state",
        lambda e: W.TransformObservation(e, func=lambda o: o + 1.0),
        None,
        None,
        lambda b, w, e: _same(w[0], b[0] + 1.0),
    ),
    "FilterObservation": (
        "state_dict",
        lambda e: W.FilterObservation(e, filter_keys=[_first_key(e)]),
        None,
        None,
        lambda b, w, e: (list(w[0]) == [_first_key(e)], _same(w[0][_first_key(e)], b[0][_first_key(e)])),
    ),
    "FlattenObservation": (
        "state_dict",
        W.FlattenObservation,
        None,
        None,
        lambda b, w, e: _same(
            w[0],
            np.stack(
                [spaces.flatten(e.single_observation_space, {k: v[i] for k, v in b[0].items()}) for i in range(3)]
            ),
        ),
    ),
    "ReshapeObservation": (
        "state",
        lambda e: W.ReshapeObservation(e, shape=(2, 2)),
        None,
        None,
        lambda b, w, e: _same(w[0], b[0].reshape(3, 2, 2)),
    ),
    "DtypeObservation": (
        "state",
        lambda e: W.DtypeObservation(e, dtype=np.float64),
        None,
        None,
        lambda b, w, e: (_same(w[0], b[0]), np_(w[0]).dtype == np.float64 or pytest.fail("dtype")),
    ),
    "NormalizeObservation": (
        "state",
        W.NormalizeObservation,
        None,
        None,
        lambda b, w, e: np.isfinite(np_(w[0])).all() or pytest.fail("non-finite"),
    ),
    "TransformAction": (
        "state",
        lambda e: W.TransformAction(e, func=lambda a: a / 2),
        None,
        lambda a: a / 2,
        lambda b, w, e: _same(w[0], b[0]),
    ),
    "ClipAction": (
        "state",
        W.ClipAction,
        lambda a: 3 * a,
        lambda a: np.clip(3 * a, -1, 1),
        lambda b, w, e: _same(w[0], b[0]),
    ),
    "RescaleAction": (
        "state",
        lambda e: W.RescaleAction(e, min_action=np.float32(0), max_action=np.float32(1)),
        lambda a: (a + 1) / 2,
        None,
        lambda b, w, e: _same(w[0], b[0]),
    ),
    "TransformReward": (
        "state",
        lambda e: W.TransformReward(e, func=lambda r: 2 * r),
        None,
        None,
        lambda b, w, e: _same(w[1], 2 * b[1]),
    ),
    "ClipReward": (
        "state",
        lambda e: W.ClipReward(e, min_reward=0.0, max_reward=0.5),
        None,
        None,
        lambda b, w, e: _same(w[1], np.clip(b[1], 0, 0.5)),
    ),
    "NormalizeReward": (
        "state",
        W.NormalizeReward,
        None,
        None,
        lambda b, w, e: (np.isfinite(np_(w[1])).all() and (np.sign(np_(w[1])) == np.sign(b[1])).all()) or pytest.fail(),
    ),
    "RecordEpisodeStatistics": (
        "state",
        W.RecordEpisodeStatistics,
        None,
        None,
        lambda b, w, e: _same(np_(w[4]["_episode"]) if "_episode" in w[4] else np.zeros(3, bool), b[2] | b[3]),
    ),
}
#: gymnasium vector wrappers that do not apply, and why (the docs say the same)
WRAPPERS_NOT_APPLICABLE = {
    "RescaleObservation": "needs finite observation bounds; state terms are unbounded",
    "GrayscaleObservation": "needs a Box image observation; images come inside obs_mode='state_dict'",
    "ResizeObservation": "needs a Box image observation; images come inside obs_mode='state_dict'",
    "RecordVideo": "needs moviepy; simbackend records videos itself (--video)",
    "HumanRendering": "needs a display (pygame)",
    "JaxToNumpy": "JAX",
    "JaxToTorch": "JAX",
    "ArrayConversion": "the conversion itself (the torch-mode test runs it)",
    "NumpyToTorch": "the conversion itself (the torch-mode test runs it)",
}


def test_every_gymnasium_vector_wrapper_is_covered() -> None:
    assert set(W.__all__) == set(WRAPPER_CASES) | set(WRAPPERS_NOT_APPLICABLE)


@pytest.mark.parametrize("tensors", ["numpy", "torch"])
@pytest.mark.parametrize("name", sorted(WRAPPER_CASES))
def test_gymnasium_vector_wrappers_run_with_their_defaults(make, name, tensors) -> None:
    """Each wrapper with its defaults: in numpy mode on the env as it is, in torch mode behind gymnasium's
    ArrayConversion (torch -> numpy) and NumpyToTorch; stepped beside a bare numpy env (4-step episodes,
    autoresets included) and checked against what the wrapper does to the bare env's output."""
    obs_mode, wrap, act_wrapped, act_bare, check = WRAPPER_CASES[name]
    kw = {"config": {"episode_length": 4}, "obs_mode": obs_mode}
    bare = make(3, tensors="numpy", **kw)
    inner = make(3, tensors=tensors, **kw)
    if tensors == "torch" and name == "DictInfoToList":  # numpy in, a list of dicts out: it goes last
        wrapped = wrap(W.ArrayConversion(inner, env_xp=torch, target_xp=np))
    elif tensors == "torch":
        wrapped = W.NumpyToTorch(wrap(W.ArrayConversion(inner, env_xp=torch, target_xp=np)))
    else:
        wrapped = wrap(inner)
    bare.reset(seed=0)
    obs = wrapped.reset(seed=0)[0]
    torch_out = tensors == "torch" and name != "DictInfoToList"
    assert isinstance(next(iter(obs.values())) if isinstance(obs, dict) else obs, torch.Tensor) == torch_out
    rng = np.random.default_rng(0)
    for _ in range(6):
        a = rng.uniform(-1, 1, (3, 1)).astype(np.float32)
        b = bare.step(act_bare(a) if act_bare else a)
        aw = act_wrapped(a) if act_wrapped else a
        w = wrapped.step(torch.from_numpy(aw) if tensors == "torch" else aw)
        check(b, w, bare)
        _same(w[2], b[2])
        _same(w[3], b[3])


@pytest.mark.parametrize("mode", ["next_step", "same_step"])
def test_torch_wrappers_give_gymnasiums_numbers_on_tensors(make, mode) -> None:
    """simbackend.envs.wrappers in torch mode beside gymnasium's wrappers in numpy mode, same episodes
    (random 4-to-8-step episodes, terminations and truncations at different times)."""
    from simbackend.envs import wrappers as T

    kw = {"config": {"episode_length": 8}, "autoreset_mode": mode}
    stats_r = W.RecordEpisodeStatistics(make(3, tensors="numpy", **kw))
    stats_o = T.RecordEpisodeStatistics(make(3, **kw))
    ref, ours = W.NormalizeReward(stats_r, gamma=0.9), T.NormalizeReward(stats_o, gamma=0.9)
    if mode == "next_step":  # gymnasium's NormalizeObservation needs next-step autoreset
        ref, ours = W.NormalizeObservation(ref), T.NormalizeObservation(ours)
    obs_r, obs_o = ref.reset(seed=0)[0], ours.reset(seed=0)[0]
    _same(obs_o, obs_r)
    rng = np.random.default_rng(1)
    ended = 0
    for _ in range(30):
        a = rng.uniform(-1, 1, (3, 1)).astype(np.float32)
        r, o = ref.step(a), ours.step(torch.from_numpy(a))
        assert all(isinstance(x, torch.Tensor) for x in o[:4])
        for x, y in zip(o[:4], r[:4]):
            np.testing.assert_allclose(np_(x), y, rtol=1e-4, atol=1e-5)
        assert ("episode" in o[4]) == ("episode" in r[4])
        if "episode" in r[4]:
            ended += int(r[4]["_episode"].sum())
            _same(o[4]["_episode"], r[4]["_episode"])
            _same(o[4]["episode"]["r"], r[4]["episode"]["r"])
            _same(o[4]["episode"]["l"], r[4]["episode"]["l"])
    assert ended >= 6 and stats_o.episode_count == stats_r.episode_count == ended
    np.testing.assert_allclose(list(stats_o.return_queue), list(stats_r.return_queue), rtol=1e-6)
    assert list(stats_o.length_queue) == list(stats_r.length_queue)


def test_torch_wrappers_read_nothing_back_but_the_episode_ends(make) -> None:
    """On a GPU every host read stalls the loop: the normalizers read nothing back, episode statistics
    one ``(N,)`` flag per step (whether some episode ended, as gymnasium needs to add its key), and the
    values of the episodes that ended."""
    from simbackend.envs import wrappers as T
    from simbackend.host_reads import count_host_reads

    env = T.NormalizeReward(T.NormalizeObservation(T.RecordEpisodeStatistics(make(3, config=SHORT))))
    env.reset(seed=0)
    with count_host_reads() as reads:
        for _ in range(7):  # two episode ends (steps 3 and 7), autoresets at 4
            env.step(torch.zeros(3, 1))
    ours = [n for site, n in reads.by_site().items() if "wrappers.py" in site]
    assert ours.count(7) == 1, reads.summary()  # one flag per step
    assert all(n <= 2 for n in ours if n != 7), reads.summary()  # the rest in the 2 steps where episodes ended


def test_torch_wrappers_refuse_numpy_envs_and_bad_arguments(make) -> None:
    from simbackend.envs import wrappers as T

    env = T.RecordEpisodeStatistics(make(1, tensors="numpy"))
    env.reset(seed=0)
    with pytest.raises(
        ArgumentTypeError,
        match=r"^RecordEpisodeStatistics: expected the env's rewards as torch .*"
        r"gymnasium.wrappers.vector.RecordEpisodeStatistics",
    ):
        env.step(np.zeros((1, 1), np.float32))
    taken = make(1, config=SHORT, episode_key="episode")
    with pytest.raises(InvalidArgumentError, match=r"^RecordEpisodeStatistics: stats_key: the env writes 'episode'"):
        T.RecordEpisodeStatistics(taken)  # refused where it is built, not at the first episode end
    T.RecordEpisodeStatistics(taken, stats_key="stats")
    for build, pattern in [
        (lambda: T.NormalizeReward(make(1), gamma=1.5), r"^gamma: expected a number in \[0, 1\], got 1.5"),
        (lambda: T.NormalizeReward(make(1), epsilon=0), r"^epsilon: expected a finite number > 0, got 0"),
        (lambda: T.NormalizeObservation(make(1), epsilon=float("nan")), r"^epsilon: "),
        (lambda: T.NormalizeObservation(make(1, autoreset_mode="same_step")), r"^NormalizeObservation: .*NEXT_STEP"),
        (lambda: T.RecordEpisodeStatistics(make(1), buffer_length=0), r"^buffer_length: "),
    ]:
        with pytest.raises(InvalidArgumentError, match=pattern):
            build()
    with pytest.raises(ArgumentTypeError, match=r"^NormalizeObservation: expected a Box observation space"):
        T.NormalizeObservation(make(1, obs_mode="state_dict"))
    norm = T.NormalizeObservation(make(2))
    with pytest.raises(InvalidArgumentError, match="partial resets"):
        norm.reset(options={"reset_mask": np.array([True, False])})
    # a refused reset leaves the wrappers' running values as they were
    scaled = T.NormalizeReward(make(2))
    scaled.reset(seed=0)
    scaled.step(torch.zeros(2, 1))
    before = scaled.accumulated_reward.clone()
    assert before.abs().sum() > 0
    for kw in ({"seed": -1}, {"options": {"mask": 1}}):
        with pytest.raises(InvalidArgumentError, match=r"^(seed|options): "):
            scaled.reset(**kw)
        torch.testing.assert_close(scaled.accumulated_reward, before, rtol=0, atol=0)


# ----------------------------------------------------------------------
# the sub-environment API (call, get_attr, set_attr)
# ----------------------------------------------------------------------
def test_call_get_attr_and_set_attr_answer_as_sync_vector_env(make) -> None:
    env = make(3, render_mode="rgb_array", render_size=(32, 24))
    env.reset(seed=0)
    assert env.get_attr("render_mode") == ("rgb_array",) * 3
    assert env.get_attr("observation_space") == (env.single_observation_space,) * 3  # a sub-env's own space
    assert env.get_attr("action_space") == (env.single_action_space,) * 3
    assert env.get_attr("control_dt") == (env.task.control_dt,) * 3  # the task's attributes too
    steps = env.get_attr("episode_step")  # a per-env tensor comes back row by row
    assert len(steps) == 3 and all(int(s) == 0 for s in steps)
    frames = env.call("render")  # skrl's render(): one picture per env
    assert len(frames) == 3 and all(f.shape == (24, 32, 3) and f.dtype == torch.uint8 for f in frames)
    torch.testing.assert_close(torch.stack(frames), env.render(), rtol=0, atol=0)
    observed = env.call("observe")  # a method is called on the batch: its per-env result split in rows
    assert len(observed) == 3 and set(observed[0]) == set(env.task.observation_dims)
    for i in range(3):  # a dict of per-env tensors: env i gets its own rows, as a sub-env would
        for key, value in env.task.observe().items():
            torch.testing.assert_close(observed[i][key], value[i], rtol=0, atol=0)
    assert make(2, tensors="numpy", render_mode="rgb_array", render_size=(8, 8)).call("render")[1].shape == (8, 8, 3)
    obs, info = env.reset(seed=1)
    reset = env.call("reset", seed=1)  # a tuple result, part by part: each env its own (obs, info)
    assert len(reset) == 3 and all(isinstance(r, tuple) and len(r) == 2 for r in reset)
    for i in range(3):
        row = {k: v[i] for k, v in obs.items()} if isinstance(obs, dict) else obs[i]
        torch.testing.assert_close(reset[i][0], row, rtol=0, atol=0)
        assert isinstance(reset[i][1], dict)

    env.set_attr("my_flag", 7)  # unknown names land on the env, as gymnasium's set_wrapper_attr does
    assert env.get_attr("my_flag") == (7, 7, 7) and env.my_flag == 7
    env.set_attr("my_flag", [5, 5, 5])
    assert env.my_flag == 5
    env.set_attr("my_array", [np.ones(2)] * 3)
    np.testing.assert_array_equal(env.my_array, np.ones(2))
    metadata = {**env.metadata, "render_fps": 30}
    env.set_attr("metadata", metadata)  # gymnasium's SyncVectorEnv takes it; RecordVideo reads render_fps
    assert env.metadata == metadata and env.metadata is not metadata


def test_sub_env_api_refuses_bad_names_and_values_and_leaves_the_env_as_it_was(make) -> None:
    env = make(3)
    with pytest.raises(
        AttributeError, match=r"^get_attr: name: neither this SimVectorEnv nor its task 'cartpole' has 'nope'$"
    ):
        env.get_attr("nope")
    with pytest.raises(AttributeError, match=r"^call: name: neither .* has 'nope'$"):
        env.call("nope")
    with pytest.raises(InvalidArgumentError, match=r"^get_attr: name: '_ended' is private"):
        env.get_attr("_ended")
    with pytest.raises(ArgumentTypeError, match=r"^call: name: expected an attribute name \(str\), got 3"):
        env.call(3)
    with pytest.raises(InvalidArgumentError, match=r"^call: args: 'control_dt' is not a method, so it takes no"):
        env.call("control_dt", 3)
    for name in ("num_envs", "observation_space", "single_action_space", "task", "tensors", "control_dt"):
        with pytest.raises(InvalidArgumentError, match=rf"^set_attr: name: '{name}' is fixed when the env is built"):
            env.set_attr(name, 1)
    with pytest.raises(
        InvalidArgumentError,
        match=r"^set_attr: values: expected one value or a list of num_envs=3"
        r" values, got 2$",
    ):
        env.set_attr("my_flag", [1, 2])
    with pytest.raises(InvalidArgumentError, match=r"^set_attr: values: the 3 envs share one task, .*envs \[2\]"):
        env.set_attr("my_flag", [1, 1, 2])
    assert not hasattr(env, "my_flag") and env.num_envs == 3
    env.close()
    with pytest.raises(BackendClosedError, match="^get_attr: this SimVectorEnv is closed"):
        env.get_attr("render_mode")


def test_set_attr_sets_what_a_user_may_set_and_refuses_what_would_break_the_env(make) -> None:
    """One rule (docs/rl-libraries.md): ``metadata``, the task's plain data (tensors, numbers, dicts of them)
    and the user's own attributes are set, each value checked against what the attribute holds; the env's
    and the task's structure (methods, properties, class attributes, spaces, modes, the task's config and
    bookkeeping, objects) is refused, before anything changes. The same through SB3's set_attr."""
    env = make(2, config=SHORT)
    env.reset(seed=0)
    task = env.task
    structure = (
        "config step reset observe flatten call render observation_size max_episode_length image_terms name model"
        " reset_draws backend controller plan episode_step episode_count seed reset_key action_dim control_dt"
        " observation_dims num_envs device render_mode autoreset_mode unwrapped single_observation_space closed"
        " owns_task"
    )
    for name in structure.split():
        for value in (None, 3, getattr(env, name, getattr(task, name, None))):
            with pytest.raises(
                InvalidArgumentError, match=rf"^set_attr: name: '{name}' is fixed when the env is built"
            ) as e:
                env.set_attr(name, value)
            assert "\n" not in str(e.value)
    assert type(task.config).__name__ == "CartpoleConfig" and callable(env.step) and callable(task.step)
    env.step(zeros(env))  # still steps

    # metadata: a dict; the autoreset mode in it is the env's (it is structure)
    env.set_attr("metadata", {"render_modes": ["rgb_array"], "render_fps": 25})
    assert env.metadata == {"render_modes": ["rgb_array"], "render_fps": 25, "autoreset_mode": AutoresetMode.NEXT_STEP}
    for value, pattern in [
        (None, r"metadata: expected a dict, got NoneType"),
        ({"render_fps": -1}, r"metadata\['render_fps'\]: expected a finite number > 0"),
        ({"render_fps": "30"}, r"metadata\['render_fps'\]: expected a finite number > 0"),
        ({"render_modes": "rgb_array"}, r"metadata\['render_modes'\]: expected a list of str"),
        ({"autoreset_mode": AutoresetMode.SAME_STEP}, r"metadata\['autoreset_mode'\]: expected the env's"),
        ({1: 2}, r"metadata: expected str keys"),
    ]:
        with pytest.raises(InvalidArgumentError, match=r"^set_attr: values: " + pattern):
            env.set_attr("metadata", value)
    assert env.metadata["render_fps"] == 25

    # the task's plain data: a value like the one it holds (a tensor of its shape, a dict of its keys)
    q = make_vector_env("quadruped", "mujoco", 2, seed=0)
    try:
        weights = dict(q.task.weights)
        q.set_attr("weights", {**weights, "tilt": -2})
        assert q.task.weights["tilt"] == -2.0 and isinstance(q.task.weights["tilt"], float)
        commands = np.array([[0.5, 0.0, 0.0], [0.0, 0.2, 0.1]])
        q.set_attr("commands", commands)
        assert q.task.commands.dtype == torch.float32 and q.task.commands.tolist()[0] == [0.5, 0.0, 0.0]
        q.set_attr("commands", [[0.25, 0.0, 0.0], [0.5, 0.0, 0.0]])  # a per-env tensor takes a row per env
        assert q.task.commands[:, 0].tolist() == [0.25, 0.5]
        q.set_attr("commands", torch.tensor([0.75, 0.0, 0.0]))  # or one row for every env
        assert q.task.commands[:, 0].tolist() == [0.75, 0.75]
        q.set_attr("commands", q.get_attr("commands"))  # what get_attr gives, set_attr takes back
        q.set_attr("commands", commands)
        for name, value, error, pattern in [
            ("weights", {"tilt": -2.0}, InvalidArgumentError, r"weights: expected the keys"),
            (
                "weights",
                {**weights, "tilt": float("nan")},
                InvalidArgumentError,
                r"weights\['tilt'\]: expected a finite",
            ),
            ("weights", {**weights, "tilt": "x"}, InvalidArgumentError, r"weights\['tilt'\]: expected a finite"),
            (
                "commands",
                np.zeros((2, 2)),
                InputShapeError,
                r"commands: expected shape \(2, 3\) \(the batch\) or \(3,\) .*, got \(2, 2\)",
            ),
            ("commands", torch.full((2, 3), float("inf")), InvalidArgumentError, r"commands: expected finite"),
            ("commands", np.full((2, 3), 1e300), InvalidArgumentError, r"commands: expected finite .*float32"),
            ("commands", [[0.0] * 3, [0.0] * 2], InputShapeError, r"commands\[1\]: expected shape \(3,\), got \(2,\)"),
            ("commands", np.zeros((2, 3), bool), InvalidArgumentError, r"commands: expected real numbers"),
            ("commands", "fast", InvalidArgumentError, r"commands: expected a tensor"),
        ]:
            with pytest.raises(error, match=r"^set_attr: values: " + pattern) as e:
                q.set_attr(name, value)
            assert "\n" not in str(e.value)
        assert q.task.weights["tilt"] == -2.0 and q.task.commands.tolist()[1] == pytest.approx([0.0, 0.2, 0.1])
        with pytest.raises(InvalidArgumentError, match=r"^set_attr: name: 'robot' is fixed when the env is built"):
            q.set_attr("robot", None)
        q.step(np.zeros((2, q.single_action_space.shape[0])))
    finally:
        q.close()

    # through SB3: the same rule, its own argument names
    pytest.importorskip("stable_baselines3")
    from simbackend.envs.sb3 import SB3VecEnv

    sb3 = SB3VecEnv(make(2, tensors="numpy", autoreset_mode="same_step"))
    for name in ("config", "step"):
        with pytest.raises(
            InvalidArgumentError, match=rf"^set_attr: attr_name: '{name}' is fixed when the env is built"
        ):
            sb3.set_attr(name, None)
    sb3.set_attr("metadata", sb3.env.metadata)
    with pytest.raises(InvalidArgumentError, match=r"^set_attr: value: metadata: expected a dict, got NoneType"):
        sb3.set_attr("metadata", None)
    sb3.reset()
    sb3.step(np.zeros((2, 1), np.float32))


@pytest.mark.parametrize("obs_mode", ["state", "state_dict"])
def test_gymnasium_env_checks_batched(make, obs_mode) -> None:
    """What gymnasium.utils.env_checker.check_env checks of a single env (this gymnasium has no
    vector-env checker), applied to the batched env in numpy mode, gymnasium's native array type."""
    env = make(2, obs_mode=obs_mode, tensors="numpy", config={"episode_length": 2})
    for space in (env.single_action_space, env.action_space):
        check_action_space(space)
    for space in (env.single_observation_space, env.observation_space):
        check_observation_space(space)
    assert env.unwrapped is env

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # check_obs warns on a wrong type, dtype or an obs outside the space
        # reset returns (obs, info)
        result = env.reset()
        assert isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict)
        check_obs(result[0], env.observation_space, "reset")
        # seed determinism (check_reset_seed_determinism)
        obs_1 = deepcopy(env.reset(seed=123)[0])
        rng_1 = deepcopy(env.unwrapped._np_random)
        obs_2 = deepcopy(env.reset()[0])
        obs_3 = env.reset(seed=123)[0]
        obs_4 = env.reset()[0]
        assert data_equivalence(obs_1, obs_3, exact=True) and data_equivalence(obs_2, obs_4, exact=True)
        assert rng_1.bit_generator.state == env.unwrapped._np_random.bit_generator.state
        env.reset(seed=456)
        assert env.unwrapped._np_random.bit_generator.state != rng_1.bit_generator.state
        env.reset(options={})  # check_reset_options
        # step determinism (check_step_determinism)
        env.action_space.seed(123)
        action = env.action_space.sample()
        env.reset(seed=123)
        step_0 = deepcopy(env.step(action))
        env.reset(seed=123)
        step_1 = env.step(action)
        check_obs(step_1[0], env.observation_space, "step")
        for a, b in zip(step_0, step_1):
            assert data_equivalence(a, b, exact=True)
        assert not step_1[3].any()
        # fresh data on every call (check_returned_data_not_reused), over an autoreset too
        calls = [env.reset(seed=123)]
        for _ in range(3):  # the third step restarts the episodes
            obs, _, _, _, info = env.step(env.action_space.sample())
            calls.append((obs, info))
        calls.append(env.reset(seed=123))
        for (obs_a, info_a), (obs_b, info_b) in combinations(calls, 2):
            assert not data_shares_objects(obs_a, obs_b) and not data_shares_objects(info_a, info_b)
    # close twice is fine; a closed env says so
    env.close()
    env.close()
    with pytest.raises(BackendClosedError, match="step: this SimVectorEnv is closed"):
        env.step(action)


# ----------------------------------------------------------------------
# bad input
# ----------------------------------------------------------------------
def test_bad_actions_raise_one_line_errors_naming_actions(make) -> None:
    env = make(2)
    env.reset(seed=0)
    with pytest.raises(InputShapeError, match=r"^actions: expected shape \(2, 1\), got \(2,\)$"):
        env.step(np.zeros(2))
    with pytest.raises(InputShapeError, match=r"^actions: expected shape \(2, 1\), got \(3, 1\)$"):
        env.step(torch.zeros(3, 1))
    with pytest.raises(ArgumentTypeError, match="^actions: "):
        env.step([["a"], ["b"]])
    with pytest.raises(ArgumentTypeError, match="^actions: "):
        env.step([[0.0], [0.0, 1.0]])
    with pytest.raises(NonFiniteError, match=r"^actions: non-finite .* env ids \[1\]") as e:
        env.step(np.array([[0.0], [np.inf]]))
    assert "\n" not in str(e.value)
    assert env.task.episode_step.tolist() == [0, 0]  # nothing was stepped


def test_bad_arguments_name_the_argument_and_the_allowed_values(make) -> None:
    for kw, pattern in [
        ({"obs_mode": "pixels"}, r"obs_mode: expected one of 'state', 'state_dict', got 'pixels'"),
        ({"tensors": "jax"}, r"tensors: expected one of 'torch', 'numpy', got 'jax'"),
        ({"autoreset_mode": "sometimes"}, r"autoreset_mode: expected one of 'next_step', 'same_step', 'disabled'"),
        ({"render_mode": "human"}, r"render_mode: expected one of None, 'rgb_array', got 'human'"),
        ({"episode_key": "_episode"}, r"episode_key: "),
        ({"render_size": (0, 10)}, r"render_size: "),
    ]:
        with pytest.raises(InvalidArgumentError, match=pattern):
            make_vector_env("cartpole", "mujoco", 2, **kw)
    assert make(1, autoreset_mode="SameStep").autoreset_mode is AutoresetMode.SAME_STEP  # gymnasium's value
    with pytest.raises(ArgumentTypeError, match="^task: expected a simbackend.tasks.Task"):
        SimVectorEnv("cartpole")

    env = make(2)
    with pytest.raises(InvalidArgumentError, match="^seed: "):
        env.reset(seed=-1)
    with pytest.raises(InvalidArgumentError, match="^seed: "):
        env.reset(seed=[1, 2])
    with pytest.raises(InvalidArgumentError, match=r"^options: unknown keys \['mask'\]; known: \['reset_mask'\]"):
        env.reset(options={"mask": np.ones(2, bool)})
    for mask, error, pattern in [
        ([True, False], ArgumentTypeError, "numpy array"),
        (np.ones(3, bool), InputShapeError, r"expected shape \(2,\), got \(3,\)"),
        (np.ones(2, np.int64), ArgumentTypeError, "dtype bool"),
        (np.zeros(2, bool), InvalidArgumentError, "at least one True"),
    ]:
        with pytest.raises(error, match=r"^options\['reset_mask'\]: .*" + pattern):
            env.reset(options={"reset_mask": mask})


# ----------------------------------------------------------------------
# another engine
# ----------------------------------------------------------------------
def test_sapien_gives_the_same_episodes_and_steps(make) -> None:
    pytest.importorskip("sapien")
    mj = make(3, config=SHORT, episode_key="episode")
    px = make(3, "sapien", config=SHORT, episode_key="episode")
    assert (px.task.backend.name, mj.task.backend.name) == ("sapien", "mujoco")
    assert px.single_observation_space == mj.single_observation_space
    assert px.single_action_space == mj.single_action_space
    torch.testing.assert_close(px.reset(seed=4)[0], mj.reset(seed=4)[0], rtol=0, atol=2e-5)
    for _ in range(3):
        obs, reward, terminated, truncated, info = px.step(zeros(px))
        mj_obs = mj.step(zeros(mj))[0]
        assert obs.shape == (3, 4) and bool(torch.isfinite(obs).all())
    torch.testing.assert_close(obs, mj_obs, rtol=0, atol=1e-2)
    assert reward.tolist() == [1.0] * 3 and truncated.all() and not terminated.any()
    assert info["episode"]["l"].tolist() == [3] * 3
    obs = px.step(zeros(px))[0]  # next-step autoreset: episode 1 of every env, as on MuJoCo
    torch.testing.assert_close(obs, mj.step(zeros(mj))[0], rtol=0, atol=2e-5)
