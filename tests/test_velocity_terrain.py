"""The velocity task on a terrain (:mod:`simbackend.tasks.velocity`): envs start on their tiles, the terrain
curriculum moves them, evaluations play fixed tiles and count success per terrain type, the height scan reads
the terrain, and a fall is judged from the ground under the robot."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from simbackend.errors import InvalidArgumentError
from simbackend.tasks import make_task
from simbackend.training.evaluation import group_success, run_episodes

#: a small terrain: 2 levels x 3 types of 4 m tiles
TERRAIN = {"types": ["flat", "stairs_up", "slope_down"], "levels": 2, "tile_size": 4.0, "border": 2.0}


def _task(n: int = 6, **changes: object):
    cfg = {"robot": "go1", "terrain": TERRAIN, "joint_noise": 0.0, **changes}
    return make_task("velocity", "mujoco", n, config=cfg, seed=0)


def test_envs_start_on_their_tiles_above_the_ground() -> None:
    """Evaluation: env i's first episode plays tile i mod (types x levels), its base at the tile's centre and
    its default height above the highest ground around it."""
    task = _task(6)
    try:
        t = task.terrain
        pos = task.backend.get_base_pos()
        h0 = float(task.robot.default_qpos[2])
        for i in range(6):
            level, column = divmod(i, 3)
            assert (int(task.terrain_level[i]), int(task.terrain_column[i])) == (level, column)
            x, y, z = t.origins[level, column]
            np.testing.assert_allclose(pos[i].numpy(), [x, y, z + h0], atol=1e-5)
        # the stairs_up tile's centre is a pit: the robot starts below the rim, on the platform
        assert t.origins[1, 1, 2] < -0.5
    finally:
        task.close()


def test_evaluation_tiles_cycle_over_episodes() -> None:
    """Env i's k-th evaluation episode plays tile (i + k N) mod (types x levels): every engine plays the
    same tiles, and N envs x enough episodes cover every tile equally."""
    task = _task(4)
    try:
        seen = []
        for _ in range(3):
            seen.append((task.terrain_level * 3 + task.terrain_column).tolist())
            task.reset()
        assert seen == [[0, 1, 2, 3], [4, 5, 0, 1], [2, 3, 4, 5]]
    finally:
        task.close()


def test_eval_levels_pick_the_evaluation_rows() -> None:
    task = _task(6, eval_levels=[1])
    try:
        assert task.terrain_level.tolist() == [1] * 6
        assert task.terrain_column.tolist() == [0, 1, 2, 0, 1, 2]
    finally:
        task.close()


def _episodes(task, errors: list[float], fell: list[bool], steps: int | None = None) -> None:
    """Make each env's episode one of ``steps`` steps (default: its time limit) with mean planar velocity
    error ``errors`` (m/s) on a 1 m/s command, fallen or not."""
    n = task.num_envs
    steps = task.config.episode_length if steps is None else steps
    task.episode_step[:] = steps
    task._command_sum[:] = float(steps)
    task._error_sum[:] = torch.tensor([steps * e for e in errors])
    task._fell[:] = torch.tensor(fell)
    assert task._fell.shape == (n,)


def test_the_curriculum_promotes_successes_and_demotes_falls_and_strays() -> None:
    """Training: an env whose episode was a success (its time limit, mean error at most success_error 0.3
    m/s) goes a level up, even on a small command whose share the command curriculum would not pass; one
    that fell, or erred more than twice success_error, goes down (not below 0); one between stays, and so
    does one cut short below both; one past the last level gets a random level; a training env keeps its
    column."""
    task = _task(4, init_level=0)
    try:
        assert task.terrain_level.tolist() == [0, 0, 0, 1]  # evaluation tiles, before training
        task.begin_training()  # every env restarts on its training tile: level 0 (init_level)
        assert task.terrain_level.tolist() == [0, 0, 0, 0]
        assert task.episode_step.tolist() == [0, 0, 0, 0]
        _episodes(task, [0.29, 0.7, 0.45, 0.1], [False, False, False, True])
        task._command_sum[0] = 0.4 * task.config.episode_length  # 0.4 m/s tracked to 0.29: a success
        task.reset()
        assert task.terrain_level.tolist() == [1, 0, 0, 0]
        task.terrain_level[:] = 1
        _episodes(task, [0.45, 0.61, 0.2, 0.1], [False, False, False, True])
        task.reset()
        assert task.terrain_level[[0, 1, 3]].tolist() == [1, 0, 0]  # stays, erred 0.61: down, fell: down
        assert 0 <= int(task.terrain_level[2]) <= 1  # promoted past the last level: a random one
        task.terrain_level[:] = 1
        _episodes(task, [0.1, 0.1, 0.59, 0.61], [False] * 4, steps=100)  # cut short: no success
        task.reset()
        assert task.terrain_level.tolist() == [1, 1, 1, 0]
        assert task.terrain_column.tolist() == [0, 1, 2, 0]
    finally:
        task.close()


def test_a_resumed_run_starts_every_env_on_its_saved_level() -> None:
    """The curriculum state holds each env's level; loaded into a training task (a resumed run), every env
    restarts on its tile at that level, not on a drawn one from 0..init_level. With more envs, env i takes a
    saved level of its own column, in turn. A bad state fails naming terrain_levels, and changes nothing."""
    first = _task(6, init_level=0)
    again = _task(6, init_level=0)
    more = _task(9, init_level=0)
    try:
        first.begin_training()
        first.terrain_level[:] = torch.tensor([1, 0, 1, 0, 1, 1])
        state = first.curriculum_state()
        assert state["terrain_levels"] == [1, 0, 1, 0, 1, 1] and state["terrain_level"] == pytest.approx(4 / 6)
        for task in (again, more):
            task.begin_training()
            assert task.terrain_level.tolist() == [0] * task.num_envs
            task.load_curriculum_state(state)
        assert again.terrain_level.tolist() == [1, 0, 1, 0, 1, 1]
        # 9 envs: columns 0, 1, 2 repeat; the saved envs of column 0 are 0 and 3 (levels 1, 0), and so on
        assert more.terrain_level.tolist() == [1, 0, 1, 0, 1, 1, 1, 0, 1]
        h0 = float(again.robot.default_qpos[2])
        pos = again.backend.get_base_pos()
        for i, level in enumerate([1, 0, 1, 0, 1, 1]):
            x, y, z = again.terrain.origins[level, i % 3]
            np.testing.assert_allclose(pos[i].numpy(), [x, y, z + h0], atol=1e-5)
        # the restored levels are the first episode's only: the curriculum moves them from there
        _episodes(again, [0.1] * 6, [True] * 6)
        again.reset()
        assert again.terrain_level.tolist() == [0] * 6
        before = (again.command_level, again.terrain_level.clone())
        for bad in ([0, 2, 0, 0, 0, 0], [0.5] * 6, "1,0"):
            with pytest.raises(InvalidArgumentError, match="terrain_levels"):
                again.load_curriculum_state({"command_level": 0.3, "terrain_levels": bad})
        assert again.command_level == before[0] and torch.equal(again.terrain_level, before[1])
    finally:
        for task in (first, again, more):
            task.close()


def test_height_scan_reads_the_terrain() -> None:
    """The scan is the base's height above the ground under each point less its default height: 0 on flat
    ground at the default height, and the stairs' treads (ground higher than the base's platform) where they lie."""
    task = _task(6, height_scan=True)
    try:
        obs = task.observe()
        scan = obs["height_scan"]
        assert scan.shape == (6, 17 * 11)
        h0 = float(task.robot.default_qpos[2])
        torch.testing.assert_close(scan[0], torch.zeros_like(scan[0]), atol=1e-5, rtol=0)  # flat tile
        pos = task.backend.get_base_pos()[4].double().numpy()
        q = task.backend.get_base_quat()[4].double().numpy()
        yaw = math.atan2(2 * (q[0] * q[3] + q[1] * q[2]), 1 - 2 * (q[2] ** 2 + q[3] ** 2))
        from simbackend.scanner import grid_offsets

        pts = grid_offsets(1.6, 1.0, 0.1)
        wx = pos[0] + math.cos(yaw) * pts[:, 0] - math.sin(yaw) * pts[:, 1]
        wy = pos[1] + math.sin(yaw) * pts[:, 0] + math.cos(yaw) * pts[:, 1]
        expect = np.clip(pos[2] - task.terrain.height_at(wx, wy) - h0, -1, 1)
        np.testing.assert_allclose(scan[4].numpy(), expect, atol=1e-4)
        assert float(scan[4].min()) < -0.01  # the stairs' first tread rises beyond the platform
        assert task.observation_size == 3 + 3 + 3 + 3 + 36 + 187
    finally:
        task.close()


def test_a_robot_high_on_the_terrain_has_not_fallen() -> None:
    """A fall is judged from the ground under the base: a robot standing on a tile 1 m high is up, one
    lying on it (far above the floor height that ends an episode on flat ground) has fallen."""
    task = _task(6, contact_threshold=1e9)  # no contact ends an episode here: only the height and the tilt
    try:
        t = task.terrain
        assert t.origins[1, 2, 2] > 0.5  # slope_down at the hard level: the robot starts on the summit
        step = task.step(torch.zeros(6, 12))
        assert not bool(step.terminated[5])
        b = task.backend
        qpos = b.get_qpos().clone()
        qpos[5, 2] = float(t.origins[1, 2, 2]) + 0.1  # below half its default height above the summit
        b.set_state([5], qpos[5:6], torch.zeros_like(b.get_qvel()[5:6]))
        assert bool(task.step(torch.zeros(6, 12)).terminated[5])
    finally:
        task.close()


def test_evaluations_count_success_per_terrain_type() -> None:
    task = _task(6, episode_length=5)
    try:
        r = run_episodes(task, lambda obs: torch.zeros(obs.shape[0], 12), 12)
        assert r["group"].tolist() == [0, 1, 2, 0, 1, 2] * 2
        rows = [{"success_by_group": {"flat": [3, 4], "stairs_up": [0, 4]}}, {"success_by_group": {"flat": [1, 4]}}]
        got = group_success(rows)
        assert got["flat"].mean == pytest.approx(0.5) and got["flat"].n == 8
        assert got["stairs_up"].mean == 0.0 and got["stairs_up"].n == 4
    finally:
        task.close()


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"terrain": {"types": ["stairs"]}}, r"^terrain.types: unknown terrain type 'stairs'"),
        ({"terrain": {"levels": 0}}, r"^terrain.levels: "),
        ({"terrain": {"tile_size": 4.0, "resolution": 0.3}}, r"^terrain.resolution: tile_size"),
        ({"terrain": {"seeds": 1}}, r"^terrain: unknown field 'seeds'"),
        ({"height_scan": True}, r"^config.height_scan: a height scan reads a terrain"),
        ({"terrain": TERRAIN, "init_level": 2}, r"^config.init_level: "),
        ({"terrain": TERRAIN, "eval_levels": [0, 5]}, r"^config.eval_levels: "),
        ({"eval_levels": [0]}, r"^config.eval_levels: levels are a terrain's"),
        ({"terrain": TERRAIN, "scan_size": [1.6]}, r"^config.scan_size: "),
        ({"terrain": TERRAIN, "scan_resolution": 0.001}, r"^config.scan_resolution: "),
    ],
)
def test_bad_terrain_settings_fail_in_one_line(changes: dict, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match) as e:
        make_task("velocity", "mujoco", 2, config={"robot": "go1", **changes})
    assert "\n" not in str(e.value)
