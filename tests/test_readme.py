"""The README's tour runs on every registered backend with only the engine name changed, and the README
names the commands the Makefile has. The checks every docs page shares (self-contained Python blocks run,
links resolve, tables are well formed, no hand-written test counts) are in tests/test_docs.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from simbackend.registry import available_backends, make_backend

README = Path(__file__).resolve().parents[1] / "README.md"


def _example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "the README should carry a Python usage example"
    return blocks[0]


def _num_envs(code: str) -> int:
    found = re.findall(r"num_envs=(\d+)", code)
    assert len(found) == 1, "the example should build one backend with an explicit num_envs"
    return int(found[0])


@pytest.mark.parametrize("sim", available_backends())
def test_readme_python_example_runs_on_every_backend(sim: str) -> None:
    code = _example()
    assert code.count('"mujoco"') == 1, "the example should name its engine once"
    n = _num_envs(code)
    # the example's size is within what every backend declares it can hold ...
    with make_backend(sim, "pendulum", 1) as probe:
        limit = probe.capabilities.max_envs
    assert limit is None or n <= limit, f"README's num_envs={n} exceeds {sim}'s max_envs={limit}"
    # ... and the example runs there with only the name changed (fewer envs, to keep the test quick)
    code = code.replace('"mujoco"', f'"{sim}"').replace(f"num_envs={n}", "num_envs=8")
    scope: dict = {}
    exec(compile(code, str(README), "exec"), scope)  # noqa: S102 (our own README)
    assert tuple(scope["info"]["diverged"].shape) == (8,)
    assert tuple(scope["pos"].shape) == (8, 1, 3)
    assert tuple(scope["jacp"].shape) == (8, 3, 7) and tuple(scope["jacr"].shape) == (8, 3, 7)
    # the arm holds its home pose: the end effector is where the home keyframe puts it
    assert torch.isfinite(scope["pos"]).all() and float(scope["pos"][:, 0, 2].min()) > 1.0


def test_readme_names_the_commands_the_makefile_has():
    text = README.read_text()
    makefile = (README.parent / "Makefile").read_text()
    for target in ("demo", "test", "contract", "bench"):
        assert f"make {target}" in text and re.search(rf"^{target}:", makefile, flags=re.M), target
    assert "TORCH_SPEC" in text and "TORCH_SPEC ?= torch==2.13.0" in makefile
    assert "make test" in (README.parent / ".ci" / "run").read_text()


def test_readme_is_a_short_tour_without_dated_figures():
    """The README is what it is, the two commands, a tour, the engine table and links (at most ~300
    lines); figures and their dates live in docs/performance.md, which benchmarks/report.py writes."""
    text = README.read_text()
    assert len(text.splitlines()) <= 300
    assert not re.findall(r"\b20\d\d-\d\d-\d\d\b", text)
    assert "docs/performance.md" in text


def test_make_demo_suggests_commands_that_exist_with_the_flags_it_names():
    """`make demo` ends with what to try next; every simbackend command it prints is a real command, and every
    flag it gives is one that command takes (checked against its --help, with the Makefile's variables filled in)."""
    from typer.testing import CliRunner

    from simbackend.cli.main import app

    makefile = (README.parent / "Makefile").read_text()
    recipe = makefile[makefile.index("\ndemo:") :].split("\n\n")[0]
    suggested = re.findall(r'@echo "\s+simbackend ([^#"]+)', recipe)
    assert len(suggested) >= 4, recipe
    runner = CliRunner()
    for line in suggested:
        words = line.replace("$(SIM)", "mujoco").split()
        help_text = runner.invoke(app, [words[0], "--help"], env={"COLUMNS": "250"})
        assert help_text.exit_code == 0, (line, help_text.output)
        for flag in (w for w in words[1:] if w.startswith("--")):
            assert flag in help_text.output, (line, flag)
    assert "Next" in recipe and "docs/cli.md" in recipe


def test_readme_sim_to_sim_table_is_the_one_the_results_give():
    """The README's sim-to-sim figures are written by benchmarks/report.py from benchmarks/results/: rerunning
    it would not change them (so they never drift from the JSON), and the legged robots' rows carry intervals over
    training seeds on every engine they were evaluated on (MuJoCo, PhysX and Motrix always)."""
    import importlib.util

    path = README.parent / "benchmarks" / "report.py"
    spec = importlib.util.spec_from_file_location("bench_report_readme", path)
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    text = README.read_text()
    block = text.split(report.README_BEGIN, 1)[1].split(report.README_END, 1)[0].strip()
    assert block == report.readme_table(report.load(README.parent / "benchmarks" / "results"))
    go1 = [line for line in block.splitlines() if line.startswith("| velocity (go1) |")]
    assert {line.split(" | ")[2] for line in go1} == {"off", "plan"}
    legged = go1 + [line for line in block.splitlines() if line.startswith("| quadruped |")]
    head = [c.strip() for c in block.splitlines()[0].strip("|").split("|")]
    for line in legged:
        cells = dict(zip(head, (c.strip() for c in line.strip().strip("|").split("|"))))
        assert cells["interval over"] == "3 training seeds", line
        # every engine a study evaluated shows an interval; a study may leave out MuJoCo Warp (its CPU
        # evaluation is the slowest), never MuJoCo, PhysX or Motrix
        for engine in ("mujoco", "sapien", "motrix", "mjwarp"):
            cell = cells[f"success on {engine}"]
            assert "±" in cell or (engine == "mjwarp" and cell == "-"), line
