"""The ``simbackend`` command line: help without engines, --sim handling, run, info, models, contract."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import fields
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from simbackend.capabilities import Capabilities
from simbackend.cli.common import app, check_sim
from simbackend.contract_tests.helpers import CpuStopwatch
from simbackend.models import builtin_models
from simbackend.registry import available_backends, register_backend, unregister_backend

PYTHON = sys.executable
SCRIPT = Path(sys.executable).with_name("simbackend")

#: a fast selection of conformance tests that exists in contract_tests/ (checked below)
FAST_CONTRACT_SELECTION = "test_name_tables_and_ids or test_pendulum_tip_and_body"

RUN_JSON_KEYS = {
    "sim",
    "model",
    "num_envs",
    "steps",
    "nsteps",
    "seed",
    "device",
    "nthread",
    "physics_dt",
    "build_s",
    "wall_s",
    "env_steps",
    "env_steps_per_s",
    "substeps_per_s",
    "physics_s",
    "step_total_s",
    "physics_share",
    "diverged_env_steps",
    "base_pos_env0",
    "dof_pos_env0",
    "mean_abs_qvel",
    "domain_randomization",
}


def _flat(text: str) -> str:
    """Output with rich's box characters removed and whitespace collapsed (tables wrap at 80 columns)."""
    text = re.sub(r"[│┃╭╮╰╯─━┏┓┗┛┡┩└┘┌┐╇┳┻╋┼┬┴├┤]", " ", text)
    return " ".join(text.split())


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("SIMBACKEND_SIM", None)
    env["COLUMNS"] = "200"
    env.update(extra)
    return env


def _script(*args: str, cwd: Path, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SCRIPT), *args], cwd=cwd, env=_env(**env), capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    # CliRunner's output is no terminal: rich would wrap tables at 80 columns
    from simbackend.cli import main

    monkeypatch.setattr(main.console, "width", 250)
    monkeypatch.setattr(main.err_console, "width", 250)
    return CliRunner()


def invoke(runner: CliRunner, *args: str) -> Any:
    return runner.invoke(app, list(args), env={"SIMBACKEND_SIM": None})


# ----------------------------------------------------------------------
# help and imports
# ----------------------------------------------------------------------
def test_script_is_installed() -> None:
    assert SCRIPT.is_file(), f"console script {SCRIPT} missing: is the package installed in this venv?"


def test_help_lists_commands(runner: CliRunner) -> None:
    result = invoke(runner, "--help")
    assert result.exit_code == 0, result.output
    for command in ("info", "run", "contract", "models", "parity"):
        assert command in result.output
    for command in ("info", "run", "contract", "models", "parity"):
        sub = invoke(runner, command, "--help")
        assert sub.exit_code == 0, sub.output
    assert "mujoco" in _flat(invoke(runner, "run", "--help").output)


def _bracketed(text: str | None) -> set[str]:
    """Every ``[...]`` of a help text (``pip install 'simbackend[ray]'``, ``[-1, 1]``, ``'["a", "b"]'``)."""
    return {" ".join(found.split()) for found in re.findall(r"\[[^\[\]]*\]", text or "")}


def test_every_help_keeps_its_brackets() -> None:
    """rich markup must not eat bracketed text: every `[...]` of a command's help or of one of its options'
    help (read from the click commands typer builds, so a new command or option is covered) is in that
    command's rendered --help."""
    import typer.main

    import simbackend.cli.main  # noqa: F401 - registers every command on the app

    group = typer.main.get_command(app)
    commands = {"": group, **{name: group.commands[name] for name in group.commands}}  # type: ignore[attr-defined]
    checked = 0
    for name, command in commands.items():
        expected = _bracketed(command.help)
        for param in command.params:
            expected |= _bracketed(getattr(param, "help", None))
        result = CliRunner().invoke(app, [*([name] if name else []), "--help"], env={"COLUMNS": "400"})
        assert result.exit_code == 0, result.output
        shown = _flat(result.output)
        missing = sorted(e for e in expected if e not in shown)
        assert not missing, f"`simbackend {name} --help` lost {missing}"
        checked += len(expected)
    assert checked >= 10  # the help texts hold brackets: [ray] of --shards and --ray among them
    shards = _flat(CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "400"}).output)
    assert "(pip install 'simbackend[ray]')" in shards


@pytest.mark.parametrize("columns", ["80", "60"])
def test_help_shows_every_option_name_whole(columns: str) -> None:
    """--help at 80 columns (a pipe's width) and narrower never cuts an option name (`--stop-at-succe…`) nor a
    default (`runs/TASK-SIM-TI…`) short: the help texts fold instead, every flag of every command is whole."""
    import typer.main

    import simbackend.cli.main  # noqa: F401 - registers every command on the app

    group = typer.main.get_command(app)
    for name, command in {"": group, **group.commands}.items():  # type: ignore[attr-defined]
        result = CliRunner().invoke(app, [*([name] if name else []), "--help"], env={"COLUMNS": columns})
        assert result.exit_code == 0, result.output
        assert "…" not in result.output, f"`simbackend {name} --help` at {columns} columns:\n{result.output}"
        flags = {o for p in command.params for o in (*p.opts, *p.secondary_opts) if o.startswith("--")}
        words = set(re.split(r"[\s│,]+", result.output))
        missing = sorted(flags - words)
        assert not missing, f"`simbackend {name} --help` at {columns} columns lacks {missing}:\n{result.output}"


def test_messages_are_literal_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the commands print is never read as rich markup: strings, table cells and titles as they are; a
    missing extra's error names `pip install 'simbackend[ray]'` whole."""
    from rich.table import Table

    from simbackend.cli.common import console, err_console

    for con in (console, err_console):
        table = Table(title="[b]q[elbow][/b]")
        table.add_column("[ray]")
        table.add_row("runs/arm[v2]/log.csv")
        with con.capture() as captured:
            con.print("pip install 'simbackend[ray]'")
            con.print(table)
        text = captured.get()
        for literal in ("pip install 'simbackend[ray]'", "[b]q[elbow][/b]", "[ray]", "arm[v2]"):
            assert literal in text, text
    monkeypatch.setitem(sys.modules, "ray", None)  # the ray extra missing
    result = CliRunner().invoke(
        app, ["run", "--model", "pendulum", "-n", "2", "-s", "1", "--shards", "2"], env={"COLUMNS": "300"}
    )
    assert result.exit_code == 1, result.output
    assert result.output.startswith("error: could not build backend 'mujoco'"), result.output
    assert "install the extra: pip install 'simbackend[ray]'" in result.output, result.output


def test_help_imports_no_engine_nor_torch(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import sys
        from typer.testing import CliRunner
        from simbackend.cli.main import app
        runner = CliRunner()
        for args in (["--help"], ["run", "--help"], ["info", "--help"], ["contract", "--help"], ["models", "--help"],
                     ["parity", "--help"]):
            result = runner.invoke(app, args)
            assert result.exit_code == 0, (args, result.output)
        heavy = sorted(m for m in ("mujoco", "sapien", "torch") if m in sys.modules)
        print("HEAVY", heavy)
        """
    )
    proc = subprocess.run([PYTHON, "-c", code], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY []" in proc.stdout, f"--help imported heavy modules: {proc.stdout}"


def test_installed_script_help_imports_no_engine(tmp_path: Path) -> None:
    # run the real console script under -X importtime and read what it imported
    for args in (["--help"], ["run", "--help"], ["parity", "--help"]):
        proc = subprocess.run(
            [PYTHON, "-X", "importtime", str(SCRIPT), *args],
            cwd=tmp_path,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        imported = {
            line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")
        }
        assert "simbackend.cli.main" in imported  # the measurement itself works
        heavy = sorted(m for m in imported if m.split(".")[0] in ("mujoco", "sapien", "torch"))
        assert not heavy, f"`simbackend {' '.join(args)}` imported {heavy[:10]}"


# ----------------------------------------------------------------------
# --sim
# ----------------------------------------------------------------------
def test_sim_normalised_to_lower_case() -> None:
    assert check_sim("MuJoCo") == "mujoco"
    assert check_sim(" MUJOCO ") == "mujoco"


def test_sim_case_insensitive_run(runner: CliRunner) -> None:
    result = invoke(runner, "run", "--sim", "MUJOCO", "--model", "pendulum", "--num-envs", "2", "--steps", "3")
    assert result.exit_code == 0, result.output
    assert _flat(result.output).startswith("mujoco |"), result.output


@pytest.mark.parametrize("command", ["run", "contract", "parity"])
def test_unknown_sim_is_a_usage_error(tmp_path: Path, command: str) -> None:
    args = [command, "--sim", "nope"] + (["--model", "pendulum"] if command in ("run", "parity") else [])
    proc = _script(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = _flat(proc.stderr)
    assert "'nope' is not a registered backend" in err
    assert re.search(r"registered backends: [a-z, ]*\bmujoco\b", err), err  # plugins may sort before it
    assert "Traceback" not in proc.stderr + proc.stdout


def test_runtime_registered_backend_is_accepted_by_sim(runner: CliRunner) -> None:
    from simbackend.backends.mujoco import MuJoCoEngine

    register_backend("CliRuntimeSim", MuJoCoEngine)
    try:
        result = invoke(runner, "run", "--sim", "cliruntimesim", "--model", "pendulum", "-n", "1", "-s", "2")
        assert result.exit_code == 0, result.output
    finally:
        unregister_backend("CliRuntimeSim")
    assert invoke(runner, "run", "--sim", "cliruntimesim", "--model", "pendulum").exit_code == 2


# ----------------------------------------------------------------------
# run
# ----------------------------------------------------------------------
def _figure(output: str, label: str) -> float:
    m = re.search(re.escape(label) + r"\s+([-+]?[\d,]+(?:\.\d+)?)", _flat(output))
    assert m, f"{label!r} not found in output:\n{output}"
    return float(m.group(1).replace(",", ""))


def test_run_prints_throughput_and_state(runner: CliRunner) -> None:
    result = invoke(runner, "run", "--sim", "mujoco", "--model", "pendulum", "-n", "4", "-s", "20", "-k", "2")
    assert result.exit_code == 0, result.output
    env_steps_per_s = _figure(result.output, "env-steps/s")
    substeps_per_s = _figure(result.output, "substeps/s")
    assert env_steps_per_s > 0
    # rounded to whole numbers in the table: substeps/s is nsteps times env-steps/s
    assert substeps_per_s == pytest.approx(2 * env_steps_per_s, abs=2)
    assert 0 <= _figure(result.output, "physics share") <= 100
    assert _figure(result.output, "diverged env-steps") == 0
    flat = _flat(result.output)
    assert "env 0 base position" not in flat  # the pendulum's base is fixed: its tip says what it does
    assert re.search(r"env 0 end effector \(site tip\) \[[-+]\d\.\d{4}, [-+]\d\.\d{4}, [-+]\d\.\d{4}\]", flat), flat
    assert re.search(r"env 0 dof pos\[:4\] \[[-+]\d\.\d{4}\]", flat), flat
    assert _figure(result.output, "mean |qvel|") > 0  # random torques moved it


@pytest.mark.parametrize(
    ("model", "label", "point"),
    [
        ("arm7", "env 0 end effector (site ee_site)", lambda b: b.get_site_pos_w(b.get_site_ids("ee_site"))[0, 0]),
        ("quadruped", "env 0 base position", lambda b: b.get_base_pos()[0]),
    ],
)
def test_run_shows_where_the_model_is(runner: CliRunner, model: str, label: str, point: Any) -> None:
    """run's one position of env 0 says what the model does: a fixed-base arm's end effector (the last site of
    the deepest body of its chain), a floating base's position; the same run through the contract gives it."""
    from simbackend.cli.common import RandomControls
    from simbackend.registry import make_backend

    result = invoke(runner, "run", "--sim", "mujoco", "--model", model, "-n", "1", "-s", "2", "-k", "2")
    assert result.exit_code == 0, result.output
    with make_backend("mujoco", model, 1, seed=0) as backend:  # run's defaults: seed 0, its random controls
        controls = RandomControls(backend, 0)
        for _ in range(2):
            backend.step(controls(), nsteps=2)
        expected = "[" + ", ".join(f"{float(v):+.4f}" for v in point(backend)) + "]"
    assert f"{label} {expected}" in _flat(result.output), _flat(result.output)
    assert ("base position" in result.output) == (model == "quadruped")


def test_run_json(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    result = invoke(
        runner,
        "run",
        "--sim",
        "mujoco",
        "--model",
        "arm7",
        "-n",
        "3",
        "-s",
        "5",
        "-k",
        "4",
        "--seed",
        "3",
        "--nthread",
        "1",
        "--json",
        str(out),
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert set(data) == RUN_JSON_KEYS
    assert (data["sim"], data["model"], data["num_envs"], data["steps"], data["nsteps"]) == ("mujoco", "arm7", 3, 5, 4)
    assert (data["seed"], data["device"], data["nthread"]) == (3, "cpu", 1)
    assert data["env_steps"] == 15
    assert data["env_steps_per_s"] == pytest.approx(15 / data["wall_s"])
    assert data["substeps_per_s"] == pytest.approx(4 * data["env_steps_per_s"])
    assert 0 < data["physics_s"] <= data["step_total_s"] <= data["wall_s"]
    assert data["physics_share"] == pytest.approx(data["physics_s"] / data["wall_s"])
    assert data["diverged_env_steps"] == 0
    assert len(data["base_pos_env0"]) == 3 and len(data["dof_pos_env0"]) == 4  # arm7: 7 hinges, first 4 shown
    assert all(math.isfinite(v) for v in data["base_pos_env0"] + data["dof_pos_env0"] + [data["mean_abs_qvel"]])
    assert data["physics_dt"] > 0


def test_run_is_seeded(runner: CliRunner, tmp_path: Path) -> None:
    def state(seed: int, name: str) -> list[float]:
        path = tmp_path / f"{name}.json"
        args = ("run", "--sim", "mujoco", "--model", "double_pendulum", "-n", "2", "-s", "10", "--seed", str(seed))
        result = invoke(runner, *args, "--json", str(path))
        assert result.exit_code == 0, result.output
        return json.loads(path.read_text())["dof_pos_env0"]

    a, b, c = state(1, "a"), state(1, "b"), state(2, "c")
    assert a == b
    assert a != c


MIXED_RANGE_XML = """
<mujoco model="mixed_ranges">
  <worldbody>
    <body name="link1">
      <joint name="j1" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0 0 -0.5" size="0.05" mass="1"/>
      <body name="link2" pos="0 0 -0.5">
        <joint name="j2" type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.5" size="0.05" mass="1"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="limited" joint="j1" ctrlrange="-0.5 2"/>
    <motor name="unlimited" joint="j2" ctrllimited="false"/>
  </actuator>
</mujoco>
"""


def test_run_actions_uniform_within_ctrl_range(runner: CliRunner, tmp_path: Path) -> None:
    """Actions fill each ctrl range ([-1, 1] where unlimited), loaded from a model path."""
    from simbackend.backends.mujoco import MuJoCoEngine

    seen: list[np.ndarray] = []

    class Recording(MuJoCoEngine):
        def step(self, ctrl, nsteps, forces):
            seen.append(ctrl.cpu().numpy().copy())
            return super().step(ctrl, nsteps, forces)

    xml = tmp_path / "mixed.xml"
    xml.write_text(MIXED_RANGE_XML)
    register_backend("cli-recording", Recording)
    try:
        result = invoke(runner, "run", "--sim", "cli-recording", "--model", str(xml), "-n", "64", "-s", "8")
    finally:
        unregister_backend("cli-recording")
    assert result.exit_code == 0, result.output
    ctrl = np.stack(seen)  # (steps, N, nu)
    assert ctrl.shape == (8, 64, 2)
    limited, unlimited = ctrl[..., 0], ctrl[..., 1]
    assert limited.min() >= -0.5 and limited.max() <= 2.0
    assert limited.min() < 0.0 and limited.max() > 1.5  # spans the range, not [0, 1]
    assert unlimited.min() >= -1.0 and unlimited.max() <= 1.0
    assert unlimited.min() < -0.8 and unlimited.max() > 0.8
    assert not np.allclose(ctrl[0], ctrl[1])  # fresh actions every step


def test_run_unknown_model_is_a_clean_error(runner: CliRunner) -> None:
    result = invoke(runner, "run", "--sim", "mujoco", "--model", "pendulm", "-n", "1", "-s", "1")
    assert result.exit_code == 2, result.output  # a bad argument
    assert isinstance(result.exception, SystemExit), result.exception  # no traceback, a clean exit
    out = _flat(result.output)
    assert "error:" in out and "pendulm" in out and "'pendulum'" in out  # names the closest model


# ----------------------------------------------------------------------
# info and models
# ----------------------------------------------------------------------
def _capabilities(output: str) -> dict[str, dict[str, str]]:
    """``{capability: {backend: value}}`` from info's plain capability lines (what a pipe gets, CliRunner too):
    ``key  backends: value`` (``all: value``), further groups under the value column, wrapped text deeper."""
    lines = output[output.index("Capabilities (probe model") :].splitlines()[1:]
    column = len(lines[0]) - len(lines[0][len("backends") :].lstrip())
    names = lines[0][column:].split(", ")
    groups: dict[str, list[str]] = {}
    key = ""
    for line in lines[1:]:
        indent = len(line) - len(line.lstrip())
        if not line.strip() or line.startswith(("PASSED", "error")):
            break
        if indent == 0:
            key = line[:column].strip()
            groups[key] = [line[column:].strip()]
        elif indent == column:
            groups[key].append(line.strip())
        else:  # a value wrapped over lines
            groups[key][-1] += " " + line.strip()
    table: dict[str, dict[str, str]] = {}
    for key, entries in groups.items():
        table[key] = {}
        for entry in entries:
            who, value = entry.split(": ", 1)
            for name in names if who == "all" else who.split(", "):
                table[key][name] = value
    return table


def test_info_lists_backends_versions_and_capabilities(runner: CliRunner) -> None:
    """info's backends with their engines' versions (each backend declares its engine's distributions:
    mjwarp is MuJoCo Warp on warp, not simbackend's first requirement), devices, the capability table."""
    import torch

    result = invoke(runner, "info")
    assert result.exit_code == 0, result.output
    flat = _flat(result.output)
    assert f"mujoco mujoco {metadata.version('mujoco')}" in flat
    if "mjwarp" in available_backends():
        versions = f"mujoco-warp {metadata.version('mujoco-warp')}, warp-lang {metadata.version('warp-lang')}"
        assert f"mjwarp {versions} simbackend.backends.mjwarp" in flat, flat
    assert "numpy" not in flat
    assert f"torch {torch.__version__}" in flat
    assert re.search(r"devices cpu\b", flat)
    for f in fields(Capabilities):
        assert re.search(rf"\b{f.name}\b", flat), f"capability row {f.name!r} missing"
    caps = _capabilities(result.output)
    assert set(caps["status"]) == set(available_backends()) and set(caps["status"].values()) == {"ok"}
    assert caps["divergence_detection"]["mujoco"] == "yes"
    assert caps["sensor_types"]["mujoco"].startswith("all 8 core; ")  # long sets are summarised
    assert "tendonpos" not in flat


def test_info_names_a_plugin_engine_from_its_distribution(runner: CliRunner) -> None:
    """A plugin backend's engine is what its distribution requires besides simbackend (the CLI knows
    no plugin by name): the Motrix plugin reports motrixsim's version."""
    pytest.importorskip("simbackend_motrix")
    result = invoke(runner, "info")
    assert result.exit_code == 0, result.output
    assert f"motrix motrixsim {metadata.version('motrixsim')}" in _flat(result.output)


def test_info_full_lists_long_values(runner: CliRunner) -> None:
    from simbackend.registry import make_backend

    result = invoke(runner, "info", "--full")
    assert result.exit_code == 0, result.output
    flat = _flat(result.output)
    with make_backend("mujoco", "pendulum", 1) as sim:
        sensors = dict(sim.capabilities.as_rows())["sensor_types"]
    # with several backend columns rich wraps the long cell, so check each name, and no abbreviation
    assert "--full lists them" not in flat
    words = set(flat.replace(",", " ").split())
    missing = [name for name in sensors.split(", ") if name not in words]
    assert not missing, f"--full left out sensor types {missing}"


def test_info_without_capabilities(runner: CliRunner) -> None:
    result = invoke(runner, "info", "--no-capabilities")
    assert result.exit_code == 0, result.output
    assert "mujoco" in result.output
    assert "divergence_detection" not in result.output


def test_info_shows_max_envs(runner: CliRunner) -> None:
    """The capability table shows each backend's max_envs, None as "unlimited"."""
    from dataclasses import replace

    from simbackend.backends.mujoco import MuJoCoEngine

    class Capped(MuJoCoEngine):
        @property
        def capabilities(self) -> Capabilities:
            return replace(super().capabilities, max_envs=640)

    class Older(MuJoCoEngine):  # capabilities from before the max_envs field
        @property
        def capabilities(self) -> Any:
            rows = [row for row in super().capabilities.as_rows() if row[0] != "max_envs"]
            return type("OldCapabilities", (), {"as_rows": lambda self: list(rows)})()

    register_backend("cli-capped", Capped)
    register_backend("cli-older", Older)
    try:
        result = invoke(runner, "info")
    finally:
        unregister_backend("cli-capped")
        unregister_backend("cli-older")
    assert result.exit_code == 0, result.output
    max_envs = _capabilities(result.output)["max_envs"]
    assert (max_envs["cli-capped"], max_envs["cli-older"], max_envs["mujoco"]) == ("640", "unlimited", "unlimited")


def test_info_says_once_which_engines_are_not_installed(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without an engine's extra, info says in one line which engines are missing and the pip line that installs
    them, and leaves them out of the capability table (not ~30 rows of "mjwarp, sapien: ?")."""
    from simbackend import plugins, registry
    from simbackend.errors import MissingExtraError

    real = plugins.get_backend_factory

    def without_extras(name: str) -> Any:
        if name.strip().lower() in ("mjwarp", "sapien"):
            raise MissingExtraError(f"the {name} engine needs its extra", extra=name.strip().lower())
        return real(name)

    monkeypatch.setattr(plugins, "get_backend_factory", without_extras)
    monkeypatch.setattr(registry, "get_backend_factory", without_extras)
    result = invoke(runner, "info")
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if "not installed" in line and "pip install" in line]
    assert len(lines) == 1, result.output
    assert "mjwarp" in lines[0] and "sapien" in lines[0] and "pip install 'simbackend[mjwarp,sapien]'" in lines[0]
    assert result.output.count("pip install") == 1, result.output
    table = _capabilities(result.output)
    assert set(table["status"]) == set(available_backends()) - {"mjwarp", "sapien"}, table["status"]
    assert not any("?" in value for row in table.values() for value in row.values()), table


def test_info_survives_a_backend_that_fails_to_load(runner: CliRunner) -> None:
    def explode(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("engine exploded on purpose")

    register_backend("cli-exploding", explode)
    try:
        result = invoke(runner, "info")
    finally:
        unregister_backend("cli-exploding")
    assert result.exit_code == 0, result.output
    status = _capabilities(result.output)["status"]
    assert status.pop("cli-exploding") == "failed to load: RuntimeError: engine exploded on purpose"
    assert status == dict.fromkeys(available_backends(), "ok")  # the others still probed; cli-exploding is gone


def test_models_lists_builtins(runner: CliRunner) -> None:
    result = invoke(runner, "models")
    assert result.exit_code == 0, result.output
    assert "arm7" in result.output
    for name in builtin_models():
        assert name in result.output


#: rich's box drawing: none of it in what a pipe or a file gets
BOX = re.compile(r"[│┃╭╮╰╯─━┏┓┗┛┡┩└┘┌┐╇┳┻╋┼┬┴├┤]")


@pytest.mark.parametrize(
    "args,shown",
    [
        (("models",), ("arm7", "pendulum.xml")),
        (("robots",), ("go1", "go1.xml", "FR_foot_collision")),
        (("robots", "quadruped", "--sim", "mujoco"), ("policy joints", "default base height", "mujoco", "yes")),
        (("run", "--sim", "mujoco", "--model", "pendulum", "-n", "2", "-s", "2"), ("env-steps/s", "mean |qvel|")),
    ],
)
def test_tables_are_plain_lines_when_stdout_is_not_a_terminal(args: tuple[str, ...], shown: tuple[str, ...]) -> None:
    """docs/cli.md: piped (CliRunner's output is no terminal), every table is plain lines: no box drawing, nothing
    cut short with an ellipsis."""
    from simbackend.cli import main

    result = CliRunner().invoke(main.app, list(args), env={"COLUMNS": "80", "SIMBACKEND_SIM": None})
    assert result.exit_code == 0, result.output
    assert not BOX.search(result.stdout), result.stdout
    assert "…" not in result.stdout, result.stdout
    for text in shown:
        assert text in result.stdout, (text, result.stdout)


# ----------------------------------------------------------------------
# parity
# ----------------------------------------------------------------------
def test_parity_mujoco_against_itself_passes() -> None:
    """Piped at 80 columns (CliRunner is no terminal): plain lines that fit, every tier name whole."""
    result = CliRunner().invoke(
        app, ["parity", "--sim", "mujoco", "--model", "double_pendulum", "-n", "4"], env={"COLUMNS": "80"}
    )
    assert result.exit_code == 0, result.output
    _readable(result.output)
    flat = _flat(result.output)
    assert flat.startswith("mujoco vs mujoco on double_pendulum")
    for tier in ("load", "model", "kinematics", "jacobian", "dynamics"):
        assert f" {tier} " in flat, tier
    # quantity, max error, tolerance, result, first failing step
    assert re.search(r"dynamics dof_pos\[elbow\] 0 0\.01 pass - identical", flat), flat
    assert re.search(r"model body_inertia 0 1e-06 pass -", flat), flat
    assert "FAIL" not in flat and "PASSED:" in flat


def test_parity_json_and_tiers(runner: CliRunner) -> None:
    result = invoke(runner, "parity", "--sim", "mujoco", "-m", "box_drop", "--tier", "contact", "-t", "Model", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert (data["sim"], data["reference"], data["model"], data["passed"]) == ("mujoco", "mujoco", "box_drop", True)
    assert data["tiers"] == ["model", "contact"]  # canonical order
    assert {r["tier"] for r in data["rows"]} == {"load", "model", "contact"}
    height = next(r for r in data["rows"] if r["quantity"] == "rest_height[box]")
    assert (height["max_error"], height["tolerance"], height["status"]) == (0.0, 0.002, "pass")


def test_parity_failure_exits_1_and_names_the_first_failing_step(runner: CliRunner) -> None:
    from simbackend.backends.mujoco import MuJoCoEngine

    class Kicked(MuJoCoEngine):
        def step(self, ctrl, nsteps, forces):
            failed = super().step(ctrl, nsteps, forces)
            self._taken = getattr(self, "_taken", 0) + nsteps
            if self._taken == 30:
                self._qpos[:, 0] += 0.1  # the shoulder jumps after the 30th substep
            return failed

    register_backend("cli-kicked", Kicked)
    try:
        result = invoke(runner, "parity", "--sim", "cli-kicked", "-m", "double_pendulum", "-t", "dynamics")
    finally:
        unregister_backend("cli-kicked")
    assert result.exit_code == 1, result.output
    flat = _flat(result.output)
    assert re.search(r"dynamics dof_pos\[shoulder\] 0\.\d+ 0\.01 FAIL 30 first out at t = 0\.03 s", flat), flat
    assert "first failure dynamics/dof_pos[shoulder] at step 30" in flat


def test_parity_unknown_model_and_tier_are_clean_usage_errors(runner: CliRunner) -> None:
    result = invoke(runner, "parity", "--sim", "mujoco", "--model", "pendulm")
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), result.exception  # no traceback
    out = _flat(result.output)
    assert "error: --model: 'pendulm' is neither a model file nor a built-in model name" in out and "'pendulum'" in out
    result = invoke(runner, "parity", "--sim", "mujoco", "--model", "pendulum", "--tier", "dynamic")
    assert result.exit_code == 2, result.output
    assert "'dynamic' is not a parity tier" in _flat(result.output)


def test_parity_tier_names_match_the_suite() -> None:
    from simbackend import parity
    from simbackend.cli.main import PARITY_TIERS

    assert PARITY_TIERS == parity.TIERS


# ----------------------------------------------------------------------
# contract
# ----------------------------------------------------------------------
def test_fast_contract_selection_exists() -> None:
    import importlib.util

    suite = Path(list(importlib.util.find_spec("simbackend.contract_tests").submodule_search_locations)[0])
    source = "\n".join(p.read_text() for p in suite.glob("test_*.py"))
    for name in FAST_CONTRACT_SELECTION.split(" or "):
        assert f"def {name}(" in source, f"{name} no longer in the conformance suite: update FAST_CONTRACT_SELECTION"


def test_contract_runs_from_any_directory(tmp_path: Path) -> None:
    proc = _script("contract", "--sim", "MuJoCo", "-q", "-k", FAST_CONTRACT_SELECTION, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    m = re.search(r"(\d+) passed", proc.stdout)
    assert m and int(m.group(1)) >= 2, proc.stdout[-2000:]
    assert " failed" not in proc.stdout


def test_contract_accepts_a_backend_registered_by_a_pytest_plugin(tmp_path: Path) -> None:
    """A backend that only a ``-p`` plugin registers is known once the suite loads that plugin."""
    (tmp_path / "plugin_sim.py").write_text(
        "from simbackend.backends.mujoco import MuJoCoEngine\n"
        "from simbackend.registry import register_backend\n"
        "register_backend('pluginsim', MuJoCoEngine)\n"
    )
    args = ("contract", "--sim", "PluginSim", "-p", "plugin_sim", "-q", "-k", FAST_CONTRACT_SELECTION)
    proc = _script(*args, cwd=tmp_path, PYTHONPATH=str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert re.search(r"[1-9]\d* passed", proc.stdout), proc.stdout[-2000:]
    without = _script(*args[:3], "-q", "-k", FAST_CONTRACT_SELECTION, cwd=tmp_path)
    assert without.returncode == 2, without.stdout[-2000:] + without.stderr[-2000:]
    assert "'pluginsim' is not a registered backend" in _flat(without.stdout + without.stderr)


def test_contract_passes_arguments_and_exit_code_through(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    calls: list[list[str]] = []

    def fake_main(args: list[str], *a: Any, **k: Any) -> int:
        calls.append(list(args))
        return 3

    monkeypatch.setattr(pytest, "main", fake_main)
    result = invoke(runner, "contract", "--sim", "MUJOCO", "-q", "-x", "-k", "a or b", "--maxfail=2")
    assert result.exit_code == 3, result.output
    assert len(calls) == 1
    args = calls[0]
    suite = list(importlib.util.find_spec("simbackend.contract_tests").submodule_search_locations)[0]
    assert args[0] == suite
    assert args[args.index("--sim") + 1] == "mujoco"
    assert args[-5:] == ["-q", "-x", "-k", "a or b", "--maxfail=2"]


# ----------------------------------------------------------------------------
# construction options and devices on the command line
# ----------------------------------------------------------------------------


@pytest.fixture
def never_built() -> list[dict[str, Any]]:
    """Backend "cli-never": records each construction attempt (the list returned), then fails it at once."""
    calls: list[dict[str, Any]] = []

    def factory(model: Any, num_envs: int, **kwargs: Any) -> Any:
        calls.append(dict(kwargs))
        raise RuntimeError("cli-never was built")

    register_backend("cli-never", factory)
    yield calls
    unregister_backend("cli-never")


def test_run_takes_common_and_engine_options_on_mujoco(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    result = invoke(
        runner,
        "run",
        "--sim",
        "mujoco",
        "--model",
        "pendulum",
        "-n",
        "4",
        "-s",
        "3",
        "--nthread",
        "1",
        "--solver-iterations",
        "7",
        "--timestep",
        "0.004",
        "-o",
        "mujoco.integrator=rk4",
        "-o",
        "sapien.solver=tgs",
        "--json",
        str(out),
    )
    assert result.exit_code == 0, result.output
    figures = json.loads(out.read_text())
    assert figures["physics_dt"] == pytest.approx(0.004) and figures["nthread"] == 1


#: a CUDA device this machine does not have: "cuda" without CUDA, else one index past the last GPU
ABSENT_CUDA = f"cuda:{torch.cuda.device_count()}" if torch.cuda.is_available() else "cuda"


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Backend "cli-built": MuJoCo that records each construction's device and options (the list returned)."""
    from simbackend.backends.mujoco import MuJoCoEngine
    from simbackend.contract import SimBackend

    calls: list[dict[str, Any]] = []

    def factory(model: Any, num_envs: int, **kwargs: Any) -> Any:
        calls.append(dict(kwargs))
        return SimBackend(MuJoCoEngine, model, num_envs, **kwargs)

    register_backend("cli-built", factory)
    yield calls
    unregister_backend("cli-built")


def test_run_takes_common_and_engine_options(runner: CliRunner, tmp_path: Path, built: list) -> None:
    out = tmp_path / "run.json"
    result = invoke(
        runner,
        "run",
        "--sim",
        "cli-built",
        "--model",
        "pendulum",
        "-n",
        "4",
        "-s",
        "3",
        "--nthread",
        "1",
        "--solver-iterations",
        "7",
        "--timestep",
        "0.004",
        "-o",
        "mujoco.integrator=rk4",
        "-o",
        "sapien.solver=tgs",
        "-o",
        "nthread=3",
        "--device",
        "cpu",
        "--json",
        str(out),
    )
    assert result.exit_code == 0, result.output
    figures = json.loads(out.read_text())
    assert figures["physics_dt"] == pytest.approx(0.004) and figures["nthread"] == 1
    # one construction; --nthread overrides -o nthread=3; ENGINE.KEY goes into that engine's block
    assert built == [
        {
            "device": "cpu",
            "seed": 0,
            "nthread": 1,
            "solver_iterations": 7,
            "timestep": 0.004,
            "mujoco": {"integrator": "rk4"},
            "sapien": {"solver": "tgs"},
        }
    ]


def test_package_dir_becomes_the_package_dirs_option(runner: CliRunner, tmp_path: Path, built: list) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    result = invoke(
        runner,
        "run",
        "--sim",
        "cli-built",
        "--model",
        "pendulum",
        "-n",
        "1",
        "-s",
        "1",
        "--package-dir",
        str(a),
        "--package-dir",
        str(b),
    )
    assert result.exit_code == 0, result.output
    assert built[0]["package_dirs"] == [str(a), str(b)]


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["-o", "nthread"], "--option: expected KEY=VALUE, got 'nthread'"),
        (["-o", "=3"], "--option: empty key"),
        (["-o", "nthread=1", "-o", "nthread.x=2"], "'nthread' given both as a value and as an engine block"),
        (["--device", ABSENT_CUDA], "torch sees"),
        (["--device", "meta"], "--device: expected one of ['cpu', 'cuda'], got 'meta'"),
        (["--device", "foo"], "--device: 'foo' is not a device"),
    ],
)
def test_bad_flags_stop_before_anything_is_built(
    runner: CliRunner, never_built: list, args: list[str], fragment: str
) -> None:
    """Malformed option text or a device this machine lacks: a one-line error, exit 2, no backend built."""
    for command in (["run", "-n", "2", "-s", "2"], ["parity", "--reference", "cli-never"]):
        result = invoke(runner, *command, "--sim", "cli-never", "--model", "pendulum", *args)
        assert result.exit_code == 2, result.output
        assert isinstance(result.exception, SystemExit), result.exception  # no traceback
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], result.output
        assert never_built == []


def test_device_cuda_without_cuda_says_so(runner: CliRunner) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    result = invoke(runner, "run", "--sim", "mujoco", "--model", "pendulum", "--device", "cuda")
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: --device: device 'cuda' requested, but torch sees no CUDA device")


def test_unknown_option_is_one_line(runner: CliRunner) -> None:
    """An option no backend knows is a usage error, in one line naming it and the closest known ones (exit 2)."""
    result = invoke(runner, "run", "--sim", "mujoco", "--model", "pendulum", "-n", "2", "-s", "2", "-o", "nthreads=1")
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error: nthreads: unknown option; closest known keys: nthread"), lines[0]


def test_run_checks_the_json_path_before_running(runner: CliRunner, tmp_path: Path, never_built: list) -> None:
    """A --json path that cannot be written fails at once, not after the whole run: nothing is even built."""
    (tmp_path / "a_file").write_text("")
    for bad, why in (
        (tmp_path / "missing" / "out.json", "does not exist"),
        (tmp_path, "is a folder"),
        (tmp_path / "a_file" / "out.json", "does not exist"),
    ):
        watch = CpuStopwatch()  # this process's work: a busy machine stretches the wall clock
        result = invoke(
            runner, "run", "--sim", "cli-never", "--model", "arm7", "-n", "512", "-s", "100000000", "--json", str(bad)
        )
        assert result.exit_code == 2, result.output
        assert result.output.startswith("error: --json: ") and why in result.output, result.output
        assert never_built == [] and "env-steps/s" not in result.output
        assert watch.elapsed < 10


def test_run_checks_the_json_folder_is_writable(
    runner: CliRunner, tmp_path: Path, never_built: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    # a folder this user may not write to (chmod alone does not stop root, who runs some CI)
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: Path(path) != locked and real_access(path, mode, **kw))
    result = invoke(runner, "run", "--sim", "cli-never", "--model", "pendulum", "--json", str(locked / "o.json"))
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: --json: {locked / 'o.json'} is not writable"), result.output
    assert never_built == []


def test_parity_takes_device_and_options(runner: CliRunner, built: list) -> None:
    """The options build both backends; --device only the backend under test."""
    result = invoke(
        runner,
        "parity",
        "--sim",
        "cli-built",
        "--reference",
        "cli-built",
        "--model",
        "pendulum",
        "--tier",
        "model",
        "-o",
        "solver_iterations=20",
        "--nthread",
        "1",
        "--device",
        "cpu",
    )
    assert result.exit_code == 0, result.output
    devices = {c["device"] for c in built}
    assert devices == {"cpu", None}, built  # the reference on its default device
    assert all(c["solver_iterations"] == 20 and c["nthread"] == 1 for c in built), built


def test_contract_forwards_flags_to_pytest(runner: CliRunner, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(pytest, "main", lambda args, *a, **k: calls.append(list(args)) or 0)
    result = invoke(
        runner,
        "contract",
        "--sim",
        "mujoco",
        "-o",
        "sapien.solver=tgs",
        "--nthread",
        "2",
        "--timestep",
        "0.001",
        "--solver-iterations",
        "9",
        "--package-dir",
        str(tmp_path),  # a folder that exists: a missing one is a usage error
        "--device",
        "cpu",
        "-q",
        "-k",
        "names",
    )
    assert result.exit_code == 0, result.output
    args = calls[0]
    forwarded = [args[i + 1] for i, a in enumerate(args) if a == "--sim-option"]
    assert forwarded == [
        "sapien.solver=tgs",
        "nthread=2",
        "solver_iterations=9",
        "timestep=0.001",
        f'package_dirs=["{tmp_path}"]',
    ]
    assert args[args.index("--device") + 1] == "cpu"
    assert args[-3:] == ["-q", "-k", "names"]


def test_contract_stops_on_bad_flags_before_pytest(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(pytest, "main", lambda args, *a, **k: calls.append(list(args)) or 0)
    for args, fragment in ((["-o", "nthread"], "KEY=VALUE"), (["--device", ABSENT_CUDA], "torch sees")):
        result = invoke(runner, "contract", "--sim", "mujoco", *args, "-q")
        assert result.exit_code == 2 and fragment in result.output, result.output
    assert calls == []


def test_contract_forwards_options_to_the_suite(tmp_path: Path) -> None:
    """simbackend contract -o/--device reach the backends the suite builds (pytest --sim-option/--device)."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "simbackend.cli.main",
            "contract",
            "--sim",
            "mujoco",
            "-o",
            "nthread=1",
            "-o",
            "sapien.solver=tgs",
            "--device",
            "cpu",
            "-k",
            "test_model_query_values and pendulum",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "MUJOCO_GL": "egl"},
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "--device cpu --sim-option nthread=1 --sim-option sapien.solver=tgs" in proc.stdout


# ----------------------------------------------------------------------------
# the pytest plugin: --device, --sim-option, sim_device
# ----------------------------------------------------------------------------
PLUGIN_CONFTEST = """
from simbackend.backends.mujoco import MuJoCoEngine
from simbackend.contract import SimBackend
from simbackend.registry import register_backend

BUILT = []


def recording(model, num_envs, **kwargs):
    BUILT.append(kwargs)
    return SimBackend(MuJoCoEngine, model, num_envs, **kwargs)


register_backend("probe-recording", recording)
"""

PLUGIN_PROBE = """
import mujoco
import pytest

from conftest import BUILT


def test_probe(make_sim, sim_device, sim_options, capabilities):
    assert sim_device == "cpu"
    assert sim_options == {"nthread": 1, "timestep": 0.004, "mujoco": {"integrator": "rk4"}}
    assert BUILT == [{"device": "cpu", "seed": 0, **sim_options}]  # the capabilities fixture's backend
    sim = make_sim("pendulum", 2)
    assert BUILT[-1] == {"device": "cpu", "seed": 0, **sim_options}
    assert (sim.engine.nthread, sim.physics_dt) == (1, pytest.approx(0.004))
    own = make_sim("pendulum", 1, timestep=0.002, mujoco={"solver": "cg"})  # a test's own options merge over them
    assert BUILT[-1] == {"device": "cpu", "seed": 0, "nthread": 1, "timestep": 0.002,
                         "mujoco": {"integrator": "rk4", "solver": "cg"}}
    assert own.physics_dt == pytest.approx(0.002)
    assert own.engine.model.opt.integrator == mujoco.mjtIntegrator.mjINT_RK4
    assert own.engine.model.opt.solver == mujoco.mjtSolver.mjSOL_CG
"""


def _pytest(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        env=_env(MUJOCO_GL="egl"),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_plugin_builds_backends_with_sim_options_and_device(tmp_path: Path) -> None:
    """make_sim and the capabilities fixture build on --device with the --sim-option options (checked inside)."""
    (tmp_path / "conftest.py").write_text(PLUGIN_CONFTEST)
    (tmp_path / "test_probe.py").write_text(PLUGIN_PROBE)
    proc = _pytest(
        "test_probe.py",
        "--sim",
        "probe-recording",
        "--device",
        "cpu",
        "--sim-option",
        "nthread=1",
        "--sim-option",
        "timestep=0.004",
        "--sim-option",
        "mujoco.integrator=rk4",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "1 passed" in proc.stdout
    assert "simbackend conformance: --sim probe-recording --device cpu --sim-option nthread=1" in proc.stdout


def test_plugin_runs_the_suite_with_sim_options(tmp_path: Path) -> None:
    import importlib.util

    suite = Path(list(importlib.util.find_spec("simbackend.contract_tests").submodule_search_locations)[0])
    proc = _pytest(
        str(suite / "test_model_and_names.py"),
        "-q",
        "-k",
        "test_name_tables_and_ids and pendulum",
        "--sim",
        "mujoco",
        "--sim-option",
        "nthread=1",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert re.search(r"\b[1-9]\d* passed", proc.stdout) and " failed" not in proc.stdout, proc.stdout[-2000:]


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--device", ABSENT_CUDA], f"--device: device '{ABSENT_CUDA}' requested, but torch sees"),
        (["--device", "foo"], "--device: 'foo' is not a device"),
        (["--sim-option", "nthread"], "--sim-option: expected KEY=VALUE, got 'nthread'"),
    ],
)
def test_plugin_rejects_bad_device_and_options_as_usage_errors(tmp_path: Path, args: list[str], fragment: str) -> None:
    (tmp_path / "test_never.py").write_text("def test_never():\n    raise AssertionError('ran')\n")
    proc = _pytest("test_never.py", "--sim", "mujoco", *args, cwd=tmp_path)
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]  # pytest's usage error
    assert f"ERROR: {fragment}" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


# ----------------------------------------------------------------------
# domain randomization
# ----------------------------------------------------------------------
DR_PLAN = {
    "seed": 4,
    "terms": [
        {"kind": "body_mass", "distribution": {"kind": "uniform", "low": 0.5, "high": 1.5}, "scale_inertia": True},
        {"kind": "joint_default_pos", "phase": "reset", "distribution": {"kind": "uniform", "low": -0.1, "high": 0.1}},
        {
            "kind": "body_velocity_delta",
            "phase": "interval",
            "targets": ["cube"],
            "interval_s": [0.01, 0.02],
            "distribution": {"kind": "uniform", "low": -0.1, "high": 0.1},
        },
    ],
}


def test_run_applies_a_dr_plan(runner: CliRunner, tmp_path: Path) -> None:
    """run --dr: init and reset terms before the run, interval terms on their schedule; the same plan and
    seed give the same run."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(DR_PLAN))
    figures = []
    for k in range(2):
        out = tmp_path / f"run{k}.json"
        result = invoke(
            runner,
            "run",
            "--sim",
            "mujoco",
            "--model",
            "arm7",
            "-n",
            "4",
            "-s",
            "10",
            "-k",
            "4",
            "--dr",
            str(plan),
            "--json",
            str(out),
        )
        assert result.exit_code == 0, result.output
        assert "domain randomization: 3 terms" in result.output
        figures.append(json.loads(out.read_text()))
    dr = figures[0]["domain_randomization"]
    assert dr["terms"] == 3 and dr["init_s"] > 0 and dr["interval_applications"] >= 4 * 2
    assert figures[0]["dof_pos_env0"] == figures[1]["dof_pos_env0"]
    plain = tmp_path / "plain.json"
    assert (
        invoke(
            runner, "run", "--sim", "mujoco", "--model", "arm7", "-n", "4", "-s", "10", "-k", "4", "--json", str(plain)
        ).exit_code
        == 0
    )
    data = json.loads(plain.read_text())
    assert data["domain_randomization"] is None and data["dof_pos_env0"] != figures[0]["dof_pos_env0"]


@pytest.mark.parametrize(
    "text, why",
    [
        ("{not json", "not valid JSON"),
        ('{"terms": [{"kind": "mass", "distribution": {"kind": "fixed", "value": 1}}]}', "unknown kind 'mass'"),
        (
            '{"terms": [{"kind": "gravity", "phase": "interval", "distribution": {"kind": "fixed", "value": 0}}]}',
            "interval_s",
        ),
    ],
)
def test_run_rejects_a_bad_dr_plan_before_building(
    runner: CliRunner, tmp_path: Path, never_built: list, text: str, why: str
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(text)
    result = invoke(runner, "run", "--sim", "cli-never", "--model", "arm7", "-n", "4", "-s", "3", "--dr", str(plan))
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: --dr: ") and why in result.output, result.output
    assert never_built == []


def test_run_dr_plan_the_model_cannot_take_is_a_clean_error(runner: CliRunner, tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(
        '{"terms": [{"kind": "body_mass", "targets": ["no_such_body"], "distribution": {"kind": "fixed", "value": 1}}]}'
    )
    result = invoke(runner, "run", "--sim", "mujoco", "--model", "arm7", "-n", "2", "-s", "3", "--dr", str(plan))
    assert result.exit_code == 1 and "no_such_body" in result.output, result.output


def _readable(output: str, width: int = 80) -> None:
    """Plain lines: none wider than ``width`` (but a single word longer than a line, left whole), no box
    drawing, nothing cut short with an ellipsis."""
    wide = [line for line in output.splitlines() if len(line) > width and " " in line.strip()]
    assert not wide, f"lines wider than {width}: {wide}"
    assert "…" not in output and not re.search(r"[│┃╭╮╰╯━┏┓┗┛┡┩└┘┌┐]", output), output


def test_info_lists_dr_terms_by_phase_readable_at_80_columns() -> None:
    """Piped (CliRunner is no terminal) at 80 columns, info prints plain lines that fit, every backend
    name whole; the dr:<term> rows list the phases per backend."""
    result = CliRunner().invoke(app, ["info"], env={"COLUMNS": "80", "SIMBACKEND_SIM": None})
    assert result.exit_code == 0, result.output
    _readable(result.output)
    words = set(re.split(r"[\s,:()]+", result.output))
    assert set(available_backends()) <= words, result.output
    caps = _capabilities(result.output)
    assert set(caps["status"]) == set(available_backends())
    assert caps["dr:body_mass"]["mujoco"] == "init, reset, interval"
    assert caps["dr:body_velocity_delta"]["mujoco"] == "init, reset, interval"
    from simbackend.randomization import TERM_KINDS

    assert len([key for key in caps if key.startswith("dr:")]) == len(TERM_KINDS)


# ----------------------------------------------------------------------
# the error rule (docs/cli.md, "Errors and exit codes"): every command, every class of bad argument
# ----------------------------------------------------------------------
#: a valid call of each command, but for the bad argument a case adds or puts in (placeholders: REC, a
#: recording; CKPT, a checkpoint; the outputs are named so that a test sees whether anything was written)
VALID_CALLS: dict[str, list[str]] = {
    "info": ["--model", "pendulum"],
    "models": [],
    "run": ["--model", "pendulum", "-n", "1", "-s", "1", "--json", "out.json"],
    "record": ["--model", "pendulum", "-n", "1", "-s", "1", "--out", "out.h5"],
    "play": ["REC", "--out", "out.mp4"],
    "train": ["--task", "cartpole", "--num-envs", "8", "--iterations", "1", "--out", "outdir"],
    "eval": ["--checkpoint", "CKPT", "--episodes", "1", "--video", "out.mp4"],
    "contract": ["-q"],
    "parity": ["--model", "pendulum", "-n", "2"],
}
#: a training of seconds
TINY_TRAINING = ["--num-envs", "8", "--iterations", "2", "--eval-interval", "0", "--stop-at-success", "off"]
TINY_TRAINING += ["--no-progress"]
BUILDING = ("info", "run", "record", "train", "eval", "contract", "parity")  # the construction flags
WITH_MODEL = ("info", "run", "record", "parity")
WITH_SIM = ("run", "record", "play", "train", "eval", "contract", "parity")

#: class of bad argument -> {command: (what to put in or add, a fragment the one line holds)}
BAD_ARGUMENTS: dict[str, dict[str, tuple[dict[str, str] | list[str], str]]] = {
    "unknown sim": {c: (["--sim", "physx"], "--sim: 'physx' is not a registered backend") for c in WITH_SIM},
    "unknown model": {c: ({"pendulum": "pendulm"}, "--model: 'pendulm' is neither a model file") for c in WITH_MODEL},
    "missing file": {
        **{c: ({"pendulum": "missing.xml"}, "--model: model file not found: missing.xml") for c in WITH_MODEL},
        "play": ({"REC": "missing.h5"}, "no such file 'missing.h5'"),
        "train": (["--dr", "missing.json"], "--dr: plan: no such file 'missing.json'"),
        "eval": ({"CKPT": "missing.pt"}, "--checkpoint: no such file missing.pt"),
        "contract": (["--package-dir", "missing"], "--package-dir: 'missing' is not a folder"),
    },
    "malformed model": {c: ({"pendulum": "bad.xml"}, "--model: MuJoCo could not compile bad.xml") for c in WITH_MODEL},
    "zero count": {
        **{c: (["--shards", "0"], "--shards: expected an integer in [1, 4096], got 0") for c in BUILDING},
        "play": (["--every", "0"], "--every: "),
    },
    "negative value": {
        **{c: (["--nthread", "-1"], "--nthread: expected an integer >= 0, got -1") for c in BUILDING},
        "play": (["--fps", "-1"], "--fps: "),
        "run": (["--seed", "-1"], "--seed: "),
    },
    "non-integer": {
        **{c: (["--shards", "1.5"], "--shards: ") for c in BUILDING},
        **{c: (["--num-envs", "1.5"], "--num-envs: ") for c in ("run", "record", "train", "eval", "parity")},
        "play": (["--every", "x"], "--every: "),
    },
    "non-finite": {c: (["--timestep", "nan"], "--timestep: expected a finite number > 0, got nan") for c in BUILDING},
    "unknown option key": {
        c: (["--shards", "2", "-o", "sharding.bogus=1"], "sharding.bogus: unknown option; accepted: sharding.address")
        for c in BUILDING
    },
    "malformed option": {c: (["-o", "nthread"], "--option: expected KEY=VALUE, got 'nthread'") for c in BUILDING},
    "unknown flag": {  # contract's unknown flags go to pytest
        c: (["--bogus"], "No such option: --bogus") for c in VALID_CALLS if c != "contract"
    },
}
BAD_CASES = [(kind, command) for kind, commands in BAD_ARGUMENTS.items() for command in commands]


@pytest.fixture(scope="module")
def cli_inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A recording and a checkpoint (for play and eval), made with the commands themselves."""
    import simbackend.cli.main  # noqa: F401 - registers every command on the app

    folder = tmp_path_factory.mktemp("inputs")
    runner = CliRunner()
    rec, run = folder / "run.h5", folder / "train"
    made = runner.invoke(app, ["record", "--model", "pendulum", "-n", "1", "-s", "3", "--out", str(rec)])
    assert made.exit_code == 0, made.output
    made = runner.invoke(app, ["train", "--task", "cartpole", *TINY_TRAINING, "--out", str(run)])
    assert made.exit_code == 0, made.output
    return {"REC": rec, "CKPT": run / "checkpoint_final.pt"}


@pytest.fixture
def nothing_built(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every backend construction (and the conformance suite's pytest run) is recorded and refused."""
    import simbackend.cli.main  # noqa: F401 - registers every command on the app
    from simbackend.contract import SimBackend

    calls: list[str] = []

    def refuse(self: Any, engine: Any, *args: Any, **kwargs: Any) -> None:
        calls.append(f"SimBackend({engine.__name__})")
        raise RuntimeError("a backend was built")

    monkeypatch.setattr(SimBackend, "__init__", refuse)
    monkeypatch.setattr(pytest, "main", lambda args, *a, **k: calls.append("pytest.main") or 0)
    return calls


@pytest.mark.parametrize(("kind", "command"), BAD_CASES, ids=[f"{c}-{k.replace(' ', '-')}" for k, c in BAD_CASES])
def test_bad_arguments_exit_2_with_one_line_before_anything_is_built(
    kind: str,
    command: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cli_inputs: dict[str, Path],
    nothing_built: list[str],
) -> None:
    """The rule of docs/cli.md for every command that takes the argument: exit 2, one line `error: ...` on
    stderr naming the argument, no traceback, nothing built, nothing written."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.xml").write_text("<mujoco><worldbody><body>")  # unclosed elements
    change, fragment = BAD_ARGUMENTS[kind][command]
    args = [str(cli_inputs.get(a, a)) for a in VALID_CALLS[command]]
    if isinstance(change, dict):
        args = [change.get(a, a) for a in [{str(v): k for k, v in cli_inputs.items()}.get(a, a) for a in args]]
    else:
        args += change
    before = sorted(tmp_path.iterdir())
    result = CliRunner().invoke(app, [command, *args], env={"SIMBACKEND_SIM": None, "COLUMNS": "300"})
    assert result.exit_code == 2, (args, result.output)
    assert isinstance(result.exception, SystemExit), result.exception  # no traceback
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert fragment in lines[0], lines[0]
    assert "Traceback" not in result.output
    assert nothing_built == []
    assert sorted(tmp_path.iterdir()) == before  # no output, no temporary file


def test_contract_checks_an_unknown_sim_unless_a_pytest_plugin_may_register_it(
    nothing_built: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    result = CliRunner().invoke(app, ["contract", "--sim", "physx", "-q"], env={"SIMBACKEND_SIM": None})
    assert result.exit_code == 2 and result.stderr.startswith("error: --sim: 'physx'"), result.output
    assert nothing_built == []
    result = CliRunner().invoke(app, ["contract", "--sim", "physx", "-p", "my_plugin"], env={"SIMBACKEND_SIM": None})
    assert result.exit_code == 0 and nothing_built == ["pytest.main"], result.output  # the suite judges it


def test_an_option_the_engine_does_not_take_is_refused_naming_the_closest_key(nothing_built: list[str]) -> None:
    result = CliRunner().invoke(
        app, ["run", "--sim", "mujoco", "--model", "pendulum", "-o", "mujoco.integrater=rk4"], env={"COLUMNS": "300"}
    )
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == "error: mujoco.integrater: unknown option; closest known keys: mujoco.integrator"
    result = CliRunner().invoke(app, ["run", "--sim", "mujoco", "--model", "pendulum", "-o", "mujoco.integrator=3"])
    assert result.exit_code == 2 and "mujoco.integrator: expected one of" in result.stderr, result.output
    assert nothing_built == []


@pytest.mark.parametrize(
    ("options", "error", "fragment"),
    [
        ({"shards": 2, "sharding": {"bogus": 1}}, "InvalidArgumentError", "sharding.bogus: unknown option; accepted:"),
        ({"shards": 2, "sharding": {"timout": 1}}, "InvalidArgumentError", "sharding.timout: unknown option; closest"),
        ({"nthreads": 1}, "InvalidArgumentError", "nthreads: unknown option; closest known keys: nthread"),
        ({"mujoco": {"solvr": "cg"}}, "InvalidArgumentError", "mujoco.solvr: unknown option; closest known keys"),
        ({"mujoco": {"integrator": 3}}, "ScalarTypeError", "mujoco.integrator: expected one of"),
        ({"shards": 2, "sharding": {"address": 5}}, "ArgumentTypeError", "sharding.address: expected"),
        ({"shards": 2, "sharding": {"address": " "}}, "InvalidArgumentError", "sharding.address: expected"),
    ],
)
def test_options_follow_the_error_conventions(
    options: dict, error: str, fragment: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unknown key: InvalidArgumentError naming it and the closest keys; wrong type: ArgumentTypeError; bad
    value: InvalidArgumentError (docs/conventions.md), all before any engine or Ray actor starts."""
    from simbackend import errors, make_backend
    from simbackend.sharding import engine as sharded

    monkeypatch.setattr(sharded, "ShardedEngine", lambda *a, **k: pytest.fail("a shard was started"))
    with pytest.raises(getattr(errors, error)) as info:
        make_backend("mujoco", "pendulum", 2, **options)
    assert str(info.value).startswith(fragment.split(";")[0]) and fragment in str(info.value), str(info.value)


# ----------------------------------------------------------------------
# outputs: an existing one is refused without --overwrite; a run that fails leaves it as it was
# ----------------------------------------------------------------------
#: (command and arguments but the output, the output flag, the output's name, what a written one is checked by)
OUTPUTS = [
    (["run", "--model", "pendulum", "-n", "1", "-s", "3"], "--json", "out.json", "json"),
    (["run", "--model", "pendulum", "-n", "1", "-s", "3", "--size", "32x32"], "--video", "out.mp4", "mp4"),
    (["record", "--model", "pendulum", "-n", "1", "-s", "3"], "--out", "out.h5", "h5"),
    (["play", "REC", "--size", "32x32"], "--out", "out.mp4", "mp4"),
    (["play", "REC", "--size", "32x32"], "--png", "out.png", "png"),
    (["train", "--task", "cartpole", *TINY_TRAINING], "--out", "outdir", "folder"),
    (["eval", "-c", "CKPT", "--episodes", "1", "--seeds", "0", "--size", "32x32"], "--video", "out.mp4", "mp4"),
]


def _written(path: Path, kind: str) -> bool:
    """Whether ``path`` is a complete output of its kind (not the earlier file)."""
    if kind == "folder":
        return (path / "checkpoint_final.pt").is_file() and not (path / "earlier.txt").exists()
    if kind == "json":
        return "env_steps_per_s" in json.loads(path.read_text())
    if kind == "h5":
        from simbackend.playback.recording import Recording

        with Recording(path) as rec:
            return len(rec) == 4
    return path.read_bytes()[4:8] == b"ftyp" if kind == "mp4" else path.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(("call", "flag", "name", "kind"), OUTPUTS, ids=[f"{c[0]}{f}" for c, f, _, _ in OUTPUTS])
def test_an_existing_output_is_refused_kept_on_failure_and_replaced_with_overwrite(
    call: list[str],
    flag: str,
    name: str,
    kind: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cli_inputs: dict[str, Path],
) -> None:
    from simbackend.contract import SimBackend

    monkeypatch.chdir(tmp_path)
    out = tmp_path / name
    if kind == "folder":
        out.mkdir()
        (out / "earlier.txt").write_bytes(b"an earlier run")
    else:
        out.write_bytes(b"an earlier file")
    snapshot = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    earlier = b"an earlier run" if kind == "folder" else b"an earlier file"
    kept = (out / "earlier.txt") if kind == "folder" else out
    args = [str(cli_inputs.get(a, a)) for a in call] + [flag, name]

    def invoke_it(*extra: str) -> Any:
        return CliRunner().invoke(app, [*args, *extra], env={"SIMBACKEND_SIM": None, "COLUMNS": "300"})

    # without --overwrite: a usage error before anything runs; the earlier output is untouched
    refused = invoke_it()
    assert refused.exit_code == 2, refused.output
    assert refused.stderr.strip() == f"error: {flag}: {name} exists; give --overwrite to replace it", refused.stderr
    assert kept.read_bytes() == earlier and sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == snapshot

    # with --overwrite, a run that fails midway (injected): the earlier output is intact, no temporary is left
    with monkeypatch.context() as patch:
        calls = {"step": 0, "replay": 0}
        real_step = SimBackend.step

        def failing_step(self: Any, *a: Any, **k: Any) -> Any:
            calls["step"] += 1
            if calls["step"] == 2:
                raise RuntimeError("injected failure midway")
            return real_step(self, *a, **k)

        def failing_replay(*a: Any, **k: Any) -> Any:
            yield 0
            raise RuntimeError("injected failure midway")

        patch.setattr(SimBackend, "step", failing_step)
        patch.setattr("simbackend.playback.replay.kinematic_replay", failing_replay)
        failed = invoke_it("--overwrite")
    assert failed.exit_code == 1, failed.output
    assert "injected failure midway" in str(failed.exception) + failed.output
    assert kept.read_bytes() == earlier
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == snapshot  # no temporary file behind

    # with --overwrite, a run that succeeds replaces it
    replaced = invoke_it("--overwrite")
    assert replaced.exit_code == 0, replaced.output
    assert _written(out, kind)
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # the output alone, no temporary beside it
