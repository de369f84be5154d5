"""The README's usage example runs as written (with fewer envs) and means what it says."""

from __future__ import annotations

import re
from pathlib import Path

import torch

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "the README should carry a Python usage example"
    code = blocks[0].replace("num_envs=1024", "num_envs=8")
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
