"""The README's usage example runs on every registered backend with only the engine name changed."""

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


DOCS = sorted((README.parent / "docs").glob("*.md"))


def _self_contained_blocks(path: Path) -> list[str]:
    """The Python blocks of ``path`` that start with their imports (fragments name files a reader has)."""
    blocks = re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)
    return [b for b in blocks if b.startswith(("import ", "from "))]


def test_every_self_contained_python_block_of_the_docs_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Python blocks of README.md and docs/*.md that start with their imports (domain randomization,
    readouts, playback, training, writing a backend) run as written, in an empty folder (they may write
    files there)."""
    monkeypatch.chdir(tmp_path)
    ran = []
    for path in [README, *DOCS]:
        for code in _self_contained_blocks(path):
            exec(compile(code, str(path), "exec"), {})  # noqa: S102 (our own docs)
            ran.append(path.name)
    assert {"randomization.md", "playback.md", "usage.md"} <= set(ran), ran
    assert (tmp_path / "run.h5").is_file() and (tmp_path / "run.mp4").stat().st_size > 1000  # the playback block


def test_relative_links_of_the_docs_point_at_files() -> None:
    broken = []
    for path in [README, *DOCS]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (path.parent / target).exists():
                broken.append(f"{path.name} -> {target}")
    assert not broken, broken


def test_no_test_counts_are_written_by_hand() -> None:
    """Counts of tests go stale the day they are written: the docs describe the suites, pytest counts them."""
    pattern = re.compile(r"\b\d+ (?:tests? )?(?:passed|skipped|tests)\b")
    found = [f"{p.name}: {m}" for p in [README, *DOCS] for m in pattern.findall(p.read_text())]
    assert not found, found
