"""Task settings from the command line and files (:mod:`simbackend.tasks.settings`): ``--task-config FILE.json``
and ``--set KEY=VALUE`` over a base, checked key by key against the task config's fields, then by the config."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from simbackend.errors import InvalidArgumentError
from simbackend.tasks import get_task_class
from simbackend.tasks.settings import changed_settings, format_setting, parse_value, task_settings


def _config(task: str, settings: dict) -> Any:
    cls: Any = get_task_class(task).config_class
    return cls.from_dict(settings)


def _file(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(data))
    return path


def test_an_unknown_key_fails_naming_it_the_source_and_the_closest_name(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError) as e:
        task_settings("cartpole", sets=["max_angl=0.3"])
    assert str(e.value) == (
        "--set max_angl: unknown key 'max_angl' of task 'cartpole'; closest known names: 'max_angle', 'max_cart'"
    )
    path = _file(tmp_path, {"actoin_scale": 0.3})
    with pytest.raises(
        InvalidArgumentError, match=rf"^--task-config {path}: unknown key 'actoin_scale' .*'action_scale'"
    ):
        task_settings("velocity", file=path)
    with pytest.raises(InvalidArgumentError, match=r"^base: unknown key 'max_angl'"):
        task_settings("cartpole", base={"max_angl": 0.3})


def test_a_dotted_reward_weight_is_applied_and_the_others_kept(tmp_path: Path) -> None:
    path = _file(tmp_path, {"reward_weights": {"foot_slip": 0}})
    settings = task_settings("velocity", file=path, sets=["reward_weights.tilt=-2"])
    assert settings == {"reward_weights": {"foot_slip": 0, "tilt": -2}}
    config = _config("velocity", settings)
    assert config.reward_weights == {"foot_slip": 0.0, "tilt": -2.0}
    # a whole mapping replaces the one given before
    assert task_settings("velocity", file=path, sets=['reward_weights={"tilt": -3}']) == {
        "reward_weights": {"tilt": -3}
    }


def test_base_then_file_then_set_each_later_one_wins(tmp_path: Path) -> None:
    path = _file(tmp_path, {"max_angle": 0.3, "init_noise": 0.03})
    base = {"max_angle": 0.1, "init_noise": 0.01, "max_cart": 2.0}
    settings = task_settings("cartpole", base=base, file=path, sets=["max_angle=0.25", "max_angle=0.26"])
    assert settings == {"max_angle": 0.26, "init_noise": 0.03, "max_cart": 2.0}
    assert base == {"max_angle": 0.1, "init_noise": 0.01, "max_cart": 2.0}  # the caller's mapping is left as it was


def test_a_bad_value_fails_with_the_configs_own_message_naming_the_source(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError) as e:
        task_settings("cartpole", sets=["init_noise=0.01", "max_angle=-1"])
    assert str(e.value) == "--set max_angle: config.max_angle: expected a finite number >= 0, got -1"
    path = _file(tmp_path, {"target_low": [1, 1, 1]})
    with pytest.raises(
        InvalidArgumentError, match=rf"^--task-config {path}: config.target_low: must be <= target_high"
    ):
        task_settings("reach", file=path)


@pytest.mark.parametrize("item", ["max_angle", "=0.3", " =1", "max_angle..x=1", 3])
def test_a_malformed_set_fails_naming_it(item: object) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^--set"):
        task_settings("cartpole", sets=[item])  # type: ignore[list-item]


def test_bad_files_fail_naming_the_flag(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^--task-config: no such file"):
        task_settings("cartpole", file=tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{max_angle: 1}")
    with pytest.raises(InvalidArgumentError, match=rf"^--task-config {bad}: not JSON"):
        task_settings("cartpole", file=bad)
    with pytest.raises(InvalidArgumentError, match=r"expected a JSON object of the task config's fields, got list"):
        task_settings("cartpole", file=_file(tmp_path, [1, 2]))


def test_values_are_json_else_plain_strings_and_tuples_come_whole() -> None:
    texts = ("0.3", "null", "true", "[1, 2]", "go1", "")
    assert [parse_value(t) for t in texts] == [0.3, None, True, [1, 2], "go1", ""]
    settings = task_settings("velocity", sets=["robot=go1", "command_range=[[-1,1],[-0.5,0.5],[-1,1]]"])
    config = _config("velocity", settings)
    assert config.robot == "go1" and config.command_range == ((-1.0, 1.0), (-0.5, 0.5), (-1.0, 1.0))
    with pytest.raises(InvalidArgumentError, match=r"^--set command_range.0: command_range is not a mapping.*whole"):
        task_settings("velocity", sets=["command_range.0=[1,2]"])
    with pytest.raises(InvalidArgumentError, match=r"^--set max_angle.x: max_angle is not a mapping"):
        task_settings("cartpole", sets=["max_angle.x=1"])
    assert task_settings("reach", sets=["target_low=[0.3,-0.3,1.0]"]) == {"target_low": [0.3, -0.3, 1.0]}


def test_sub_keys_are_checked_where_the_config_lists_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """A class attribute ``mapping_keys`` ({field: keys}, or a function of the field) lists a mapping field's keys;
    without one, the config's own check (from_dict) speaks."""
    cls = get_task_class("velocity").config_class
    monkeypatch.setattr(cls, "mapping_keys", {"reward_weights": ("tilt", "foot_slip")}, raising=False)
    with pytest.raises(InvalidArgumentError) as e:
        task_settings("velocity", sets=["reward_weights.tlt=-2"])
    assert str(e.value) == "--set reward_weights.tlt: unknown key 'tlt' of reward_weights; closest known names: 'tilt'"
    monkeypatch.setattr(cls, "mapping_keys", lambda field: ("tilt",) if field == "reward_weights" else None)
    with pytest.raises(InvalidArgumentError, match=r"unknown key 'foot_slip' of reward_weights; known names: 'tilt'"):
        task_settings("velocity", sets=['reward_weights={"foot_slip": 0}'])
    monkeypatch.delattr(cls, "mapping_keys")
    with pytest.raises(InvalidArgumentError, match=r"^--set reward_weights.tlt: config.reward_weights: unknown terms"):
        task_settings("velocity", sets=["reward_weights.tlt=-2"])


def test_the_keys_are_the_config_dataclass_fields_read_at_run_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A field added to a task's config is a setting at once: nothing lists the fields but the dataclass."""
    task = get_task_class("cartpole")

    @dataclasses.dataclass(frozen=True)
    class Wider(task.config_class):  # type: ignore[name-defined]
        pole_mass_scale: float = 1.0

    monkeypatch.setattr(task, "config_class", Wider)
    assert task_settings("cartpole", sets=["pole_mass_scale=2"]) == {"pole_mass_scale": 2}
    with pytest.raises(InvalidArgumentError, match=r"closest known names: 'pole_mass_scale'"):
        task_settings("cartpole", sets=["pole_mass_scal=2"])


def test_changed_settings_lists_what_differs_from_the_defaults() -> None:
    cls: Any = get_task_class("velocity").config_class
    assert changed_settings("velocity", cls().to_dict()) == []
    stored = cls.from_dict({"reward_weights": {"tilt": -2}, "joint_noise": 0.2, "robot": "go1"}).to_dict()
    changed = changed_settings("velocity", stored)
    assert changed == [("joint_noise", 0.2), ("reward_weights.tilt", -2.0)]
    assert [format_setting(k, v) for k, v in changed] == ["joint_noise=0.2", "reward_weights.tilt=-2.0"]
    plan = {"version": 1, "seed": 3, "terms": [{}, {}]}
    assert format_setting("randomization", plan) == "randomization=<plan: 2 terms, seed 3>"
    assert changed_settings("cartpole", {"max_angle": 0.2, "gone": 1}) == [("gone", 1)]  # 0.2 is the default
