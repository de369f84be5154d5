"""The documentation checks itself: README.md and docs/*.md.

* every self-contained Python block (one that starts with its imports) runs as written, in an empty folder;
* every command of a shell block is checked without being run (``simbackend ...`` against the real command's
  parser, ``make`` targets, ``pip install`` extras, scripts' flags, repository paths), or its block says why not;
* every extra of pyproject.toml is named in the README's set-up and on the page that needs it;
* every relative link points at a file that exists, and an anchor into a page at one of its headings;
* every table has as many cells in each row as in its header;
* no test counts and no throughput figures are written by hand (pytest counts tests; the figures live in
  docs/performance.md, which benchmarks/report.py generates);
* benchmarks/report.py renders the benchmark scripts' JSON into that page, figures included.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [README, *DOCS]
REPORT = REPO / "benchmarks" / "report.py"

FENCE = re.compile(r"^```.*?^```", flags=re.S | re.M)


def _report():
    spec = importlib.util.spec_from_file_location("bench_report_for_docs", REPORT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _prose(path: Path) -> str:
    """The page without its fenced code blocks."""
    return FENCE.sub("", path.read_text())


# ----------------------------------------------------------------------------
# code blocks
# ----------------------------------------------------------------------------
def _self_contained_blocks(path: Path) -> list[str]:
    """The Python blocks of ``path`` that start with their imports (fragments name files a reader has)."""
    blocks = re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)
    return [b for b in blocks if b.startswith(("import ", "from "))]


@pytest.fixture
def _restore_controller_registry():
    """A docs block registers its own controller; the other tests see the registry as it was."""
    from simbackend.controllers import registry

    saved = dict(registry._CONTROLLERS)
    yield
    registry._CONTROLLERS.clear()
    registry._CONTROLLERS.update(saved)


@pytest.mark.usefixtures("_restore_controller_registry")
def test_every_self_contained_python_block_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Python blocks of README.md and docs/*.md that start with their imports (domain randomization,
    readouts, delegated physics, playback, training, controllers, writing a backend) run as written, in an
    empty folder (they may write files there)."""
    monkeypatch.chdir(tmp_path)
    ran = []
    for path in PAGES:
        for code in _self_contained_blocks(path):
            exec(compile(code, str(path), "exec", dont_inherit=True), {"__name__": f"docs_{path.stem}"})  # noqa: S102 (our own docs)
            ran.append(path.name)
    expected = {"randomization.md", "playback.md", "usage.md", "engines.md", "training.md", "robots.md"}
    expected |= {"rl-libraries.md"}  # a robot through the RL adapters
    assert expected <= set(ran), ran
    assert (tmp_path / "my_robot.json").is_file()  # rl-libraries.md's robot block ran
    assert (tmp_path / "run.h5").is_file() and (tmp_path / "run.mp4").stat().st_size > 1000  # the playback block


# ----------------------------------------------------------------------------
# shell blocks: every command line checked against what it names
# ----------------------------------------------------------------------------
SHELL_BLOCK = re.compile(
    r"^(?:<!-- not run: (?P<reason>.*?) -->\n)?```(?:bash|sh|shell|console)\n(?P<body>.*?)^```", re.S | re.M
)
#: folders of the repository a command's argument may name (then it must exist)
REPO_PATHS = ("benchmarks/", "examples/", "plugins/", "src/", "tests/", "docs/")


def _shell_blocks(path: Path) -> list[tuple[int, str | None, list[str]]]:
    """``(line, reason or None, commands)`` of every shell block of ``path``: its lines with the
    continuations joined, comments and blank lines dropped; ``reason`` is its ``<!-- not run: ... -->``."""
    text = path.read_text()
    blocks = []
    for m in SHELL_BLOCK.finditer(text):
        commands = [c.strip() for c in m.group("body").replace("\\\n", " ").splitlines()]
        commands = [c for c in commands if c and not c.startswith("#")]
        blocks.append((text.count("\n", 0, m.start()) + 1, m.group("reason"), commands))
    return blocks


def _words(command: str) -> list[str]:
    """A command line's words (shell quoting and comments), without leading ``VAR=value`` settings."""
    import shlex

    words = shlex.split(command, comments=True)
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
        words = words[1:]
    return words


def _repo_paths(words: list[str]) -> list[str]:
    """The paths into the repository a command names that do not exist (``--set key=PATH`` included)."""
    named = [w.split("=", 1)[-1] for w in words]
    return [w for w in named if w.startswith(REPO_PATHS) and "*" not in w and not (REPO / w).exists()]


def _simbackend_problem(args: list[str]) -> str | None:
    """Why ``simbackend ARGS`` would not parse: the real command's own parser (every flag a flag of that
    command, every value of its type, choices and --sim names checked, the arguments it takes), run
    without the command."""
    import typer

    from simbackend.cli.common import click_exceptions, usage_message
    from simbackend.cli.main import app

    group = typer.main.get_command(app)
    root = group.make_context("simbackend", [], resilient_parsing=True)
    if not args or group.get_command(root, args[0]) is None:
        return f"no command {args[:1]}"
    command = group.get_command(root, args[0])
    assert command is not None
    try:
        command.make_context(args[0], list(args[1:]), parent=root).close()
    except click_exceptions.ClickException as e:
        return usage_message(e)
    return None


def _pip_problem(words: list[str]) -> str | None:
    """The extras and local folders ``pip install`` is given exist (other packages are PyPI's)."""
    import tomllib

    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    for w in words[2:]:
        m = re.fullmatch(r"(?:\.|simbackend)\[([\w,]+)\]", w)
        if m and not set(m.group(1).split(",")) <= extras:
            return f"{w}: no such extra (pyproject.toml has {sorted(extras)})"
        if not m and w.startswith((".", "plugins/")) and not (REPO / w).exists():
            return f"{w}: no such folder"
    return None


@functools.cache
def _script_help(script: Path) -> str:
    import subprocess
    import sys

    return subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120).stdout


def _script_problem(words: list[str]) -> str | None:
    """A script of the repository: it exists, and every flag given is one its --help lists."""
    script = REPO / words[1]
    if not script.is_file():
        return f"{words[1]}: no such file"
    flags = [w.split("=")[0] for w in words[2:] if w.startswith("--")]
    missing = [f for f in flags if f not in _script_help(script)]
    return f"{words[1]} takes no {missing}" if missing else None


def _command_problem(command: str, folder: Path) -> str | None:
    """What is wrong with one command line, or None; raises LookupError for a command no check knows."""
    import subprocess

    words = _words(command)
    if words[0] == "simbackend":
        return _simbackend_problem(words[1:])
    if words[0] == "make":
        makefile = (REPO / "Makefile").read_text()
        absent = [t for t in words[1:] if "=" not in t and not re.search(rf"^{re.escape(t)}:", makefile, re.M)]
        return f"no make target {absent}" if absent else None
    if words[:2] == ["pip", "install"]:
        return _pip_problem(words)
    if words[0] in ("python", "python3") and words[1:2] and words[1].endswith(".py"):
        return _script_problem(words)
    if words[0].endswith("python") and words[1:3] == ["-m", "pytest"]:
        absent = [w for w in words[3:] if ("/" in w or w.endswith(".py")) and not (REPO / w).exists()]
        return f"no such test paths {absent}" if absent else None
    if words[0] == "echo":  # writes a file the next commands read: run it, where they would
        done = subprocess.run(["bash", "-c", command], cwd=folder, capture_output=True, text=True, timeout=10)
        return done.stderr.strip() or (None if done.returncode == 0 else f"exit {done.returncode}")
    raise LookupError(words[0])


def _shell_problems(pages: list[Path], folder: Path) -> list[str]:
    """What is wrong with the shell blocks of ``pages`` (``echo`` lines run in ``folder``)."""
    problems = []
    for path in pages:
        for line, reason, commands in _shell_blocks(path):
            where = f"{path.name}:{line}"
            if reason is not None and not reason.strip():
                problems.append(f"{where}: a not-run marker without its reason")
            for command in commands:
                missing = _repo_paths(_words(command))
                if missing:
                    problems.append(f"{where}: {command!r}: no such file {missing}")
                try:
                    problem = _command_problem(command, folder)
                except LookupError:
                    problem = (
                        None if reason is not None else "no check knows it: mark its block <!-- not run: REASON -->"
                    )
                if problem:
                    problems.append(f"{where}: {command!r}: {problem}")
    return problems


def test_every_shell_block_is_checked_or_says_why_not(tmp_path: Path) -> None:
    """Every command of the shell blocks (bash, sh, shell, console) of README.md and docs/*.md is checked
    without being run (a training run each would take the docs test hours): ``simbackend ...`` parses
    against the real command (flags, values, arguments), a repository path it names exists, ``make``
    targets are the Makefile's, ``pip install``'s extras pyproject.toml's, a script's flags its --help's,
    pytest's paths exist; ``echo`` lines run. A command no check knows is allowed only in a block marked
    ``<!-- not run: REASON -->`` (the line before its fence) with a reason."""
    problems = _shell_problems(PAGES, tmp_path)
    assert not problems, "\n".join(problems)


def test_the_shell_block_checks_catch_what_they_are_for(tmp_path: Path) -> None:
    """The checks above refuse the mistakes they exist for: a checkpoint given as an argument to eval (the
    issue-50 command of terrains.md), a flag a command lacks, a value of the wrong type, an unregistered
    --sim, an extra pyproject.toml lacks, a missing repository file, a make target the Makefile lacks."""
    bad = [
        "simbackend eval runs/velocity_mujoco_s0/checkpoints/model_final.pt --sim sapien",
        "simbackend train --task velocity --no-such-flag",
        "simbackend run --num-envs many",
        "simbackend run --sim bullet",
        "pip install -e '.[calibrated]'",
        "make no-such-target",
    ]
    for command in bad:
        assert _command_problem(command, tmp_path), command
    assert _repo_paths(_words("simbackend train --set terrain=benchmarks/terrains/none.json"))
    good = "simbackend eval --checkpoint runs/velocity/checkpoint_final.pt --sim sapien --episodes 4"
    assert _command_problem(good, tmp_path) is None
    # a command no check knows needs a marker, and the marker its reason
    page = tmp_path / "page.md"
    fence = "```"
    for marker, wrong in (("", "no check knows"), ("<!-- not run:  -->\n", "without its reason")):
        page.write_text(f"{marker}{fence}bash\ndocker run robot\n{fence}\n")
        assert wrong in "".join(_shell_problems([page], tmp_path)), wrong
    page.write_text(f"<!-- not run: needs the robot -->\n{fence}bash\ndocker run robot\n{fence}\n")
    assert _shell_problems([page], tmp_path) == []


def test_every_extra_is_named_where_a_reader_installs_it() -> None:
    """Every extra of pyproject.toml is named in the README (the set-up lists them) and in the packaging
    section of docs/architecture.md; an extra a page's commands need is named on that page."""
    import tomllib

    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    readme = README.read_text()
    packaging = (REPO / "docs" / "architecture.md").read_text().split("## Packaging")[1].split("\n## ")[0]
    developers = {"test", "bench"}  # the project's own checks and benchmarks: `make test`, not a user's set-up
    assert not [e for e in sorted(extras - developers) if f"[{e}]" not in readme], "README.md lacks extras"
    assert not [e for e in sorted(extras) if f"[{e}]" not in packaging], "architecture.md's packaging lacks extras"
    pages = {"calibration.md": "calibrate", "deploy.md": "deploy", "sharding.md": "ray", "training.md": "train"}
    for page, extra in pages.items():
        text = (REPO / "docs" / page).read_text()
        assert re.search(rf"simbackend\[[\w,]*\b{extra}\b[\w,]*\]", text), f"{page} does not name [{extra}]"


# ----------------------------------------------------------------------------
# links, anchors, tables
# ----------------------------------------------------------------------------
def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[`*_]{2,}|`", "", heading.strip().lower())
    return "".join(c for c in text if c.isalnum() or c in " -_").replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_slug(h) for h in re.findall(r"^#{1,6} +(.+?) *#*$", _prose(path), flags=re.M)}


def _links(path: Path) -> list[tuple[str, str]]:
    """``(target, anchor)`` of every Markdown link and image outside code blocks."""
    return re.findall(r"\]\(<?([^)#\s>]*)(?:#([^)\s>]*))?>?(?:\s+\"[^\"]*\")?\)", _prose(path))


def test_relative_links_point_at_files_and_headings() -> None:
    broken = []
    for path in PAGES:
        for target, anchor in _links(path):
            if "://" in target or target.startswith("mailto:"):
                continue
            dest = (path.parent / target) if target else path
            if not dest.exists():
                broken.append(f"{path.relative_to(REPO)} -> {target}")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{path.relative_to(REPO)} -> {target}#{anchor} (no such heading)")
    assert not broken, broken


def test_the_slug_rule_matches_githubs() -> None:
    assert _slug("The SAPIEN/PhysX backend") == "the-sapienphysx-backend"
    assert _slug("Divergence, one rule for every engine") == "divergence-one-rule-for-every-engine"
    assert _slug("mujoco (`bench_mujoco.py`, 2026-11-25)") == "mujoco-bench_mujocopy-2026-11-25"
    assert _report()._slug("mujoco (`bench_mujoco.py`, 2026-11-25)") == "mujoco-bench_mujocopy-2026-11-25"


def _cells(line: str) -> int:
    """Cells of a table row: pipes that are not escaped, less the outer two."""
    return len(re.split(r"(?<!\\)\|", line.strip().strip("|")))


def _tables(text: str) -> list[list[str]]:
    tables, current = [], []
    for line in [*text.splitlines(), ""]:
        if line.lstrip().startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    return tables


def test_every_table_has_as_many_cells_per_row_as_its_header() -> None:
    """GitHub renders a table only when the separator row matches the header, and drops or pads cells of
    rows that do not."""
    bad = []
    for path in PAGES:
        for table in _tables(_prose(path)):
            width = _cells(table[0])
            if len(table) < 2 or not re.fullmatch(r"\|?(\s*:?-+:?\s*\|)+\s*:?-*:?\s*\|?", table[1].strip()):
                bad.append(f"{path.name}: no separator row under {table[0][:60]!r}")
                continue
            bad.extend(
                f"{path.name}: {_cells(row)} cells, header has {width}: {row[:60]!r}"
                for row in table[1:]
                if _cells(row) != width
            )
    assert not bad, bad


# ----------------------------------------------------------------------------
# nothing written by hand that a tool produces
# ----------------------------------------------------------------------------
def test_no_test_counts_are_written_by_hand() -> None:
    """Counts of tests go stale the day they are written: the docs describe the suites, pytest counts them."""
    pattern = re.compile(r"\b\d+ (?:[\w-]+ ){0,3}(?:tests|passed|skipped|failed|xfailed)\b")
    found = [f"{p.name}: {m}" for p in PAGES for m in pattern.findall(p.read_text())]
    assert not found, found


def test_throughput_figures_live_only_in_the_generated_page() -> None:
    pattern = re.compile(r"\b\d[\d,.]*\s*[kM]?\s*(?:env-steps|env-substeps|substeps|frames|calls|pictures)/s\b")
    found = [f"{p.name}: {m}" for p in PAGES if p.name != "performance.md" for m in pattern.findall(p.read_text())]
    assert not found, found
    page = (REPO / "docs" / "performance.md").read_text()
    assert page.startswith(_report().HEADER), "docs/performance.md is generated: run python benchmarks/report.py"


# ----------------------------------------------------------------------------
# the generated page
# ----------------------------------------------------------------------------
def _variant(rate: float, unit: str, label: str) -> dict:
    return {
        "label": label,
        "iters_per_round": 5,
        "sec_per_call": 1.0,
        "ms_per_call": 12.5,
        "rate": rate,
        "rate_unit": unit,
    }


def _figure(name: str, value: float, target: float, op: str, unit: str) -> dict:
    met = value >= target if op == ">=" else value <= target
    return {"name": name, "value": value, "unit": unit, "target": target, "op": op, "meets_target": met}


def _machine(**engines: str) -> dict:
    return {"cpu_model": "Synthetic CPU", "cpu_count": 2, "python": "3.11.9", **engines}


def _results(folder: Path) -> None:
    """One file in each layout the scripts write: cases of variants with paired ratios, a section's own
    variants, a skipped section, training runs, a quick run, and sim_to_sim.py's runs."""
    mujoco = {
        "date": "2031-01-02",
        "script": "bench_mujoco.py",
        "machine": _machine(mujoco="4.0.0"),
        "settings": {"quick": False, "rounds": 11, "block_s": 0.4},
        "runtime_s": 80.0,
        "sections": {
            "step": {
                "params": {"model": "arm7", "num_envs": 1024, "plan": {"terms": [{"kind": "body_mass"}]}},
                "cases": {
                    "nsteps=1": {
                        "nsteps": 1,
                        "variants": {
                            "backend": _variant(71377.9, "env-substeps/s", "step + reads"),
                            "raw_vel": _variant(78480.6, "env-substeps/s", "Batch.step + copies"),
                        },
                        "ratio_backend_vs_raw_vel": {"median": 0.9123, "min": 0.8811, "max": 0.9456},
                    }
                },
                "figures": [_figure("step k=1: backend / raw batch", 0.9123, 0.9, ">=", "x")],
                "machine_load": {"own_cores": 1.9, "foreign_cores": 0.4, "steal_cores": 0.0},
            },
            "jacobian": {
                "variants": {"jacobian": _variant(1436.9, "calls/s", "get_site_jacobian_w")},
                "fraction_jacobian_of_step": {"median": 0.0777, "min": 0.0701, "max": 0.0888},
                "fraction_cold_jacobian_of_bare_step": 0.6543,
                "figures": [_figure("jacobian time / step time", 0.0777, 0.1, "<=", "fraction")],
            },
        },
    }
    sapien = {
        "date": "2031-01-03",
        "script": "bench_sapien.py",
        "machine": _machine(sapien="3.0.3"),
        "settings": {"quick": True, "rounds": 3, "block_s": 0.08},
        "sections": {
            "step": {
                "cases": {
                    "N=16,nsteps=1": {
                        "variants": {"backend": _variant(10490.0, "env-steps/s", "step")},
                        "ratio_backend_vs_bare": {"median": 0.5479, "min": 0.5, "max": 0.6},
                    }
                },
                "figures": [_figure("step N=16 k=1: backend / bare SAPIEN loop", 0.5479, 0.8, ">=", "x")],
            },
            "gpu": {"skipped": "no CUDA device here", "figures": []},
        },
    }
    motrix = {
        "date": "2031-01-04",
        "script": "bench_motrix.py",
        "machine": _machine(motrixsim="0.10.1"),
        "sections": {
            "engines": {
                "cases": {
                    "arm7,N=1024": {
                        "variants": {
                            "mujoco": _variant(34400.0, "env-steps/s", "mujoco"),
                            "motrix": _variant(16400.0, "env-steps/s", "motrix"),
                        },
                        "skipped": {"sapien": "N=1024 > capabilities.max_envs=1000"},
                        "ratio_motrix_vs_mujoco": {"median": 0.4767, "min": 0.45, "max": 0.5},
                    }
                },
                "figures": [],
            }
        },
    }
    tasks = {
        "date": "2031-01-05",
        "script": "bench_tasks.py",
        "machine": _machine(),
        "sections": {
            "training": {
                "runs": {"mujoco": {"num_envs": 256, "env_steps": 40960, "rate": 28512.0}},
                "figures": [],
            }
        },
    }
    run = {"success_rate": {"mean": 1.0}, "mean_return": {"mean": 250.0}}
    sim_to_sim = {
        "task": "cartpole",
        "args": {"eval_seeds": [100, 101, 102], "episodes": 32},
        "machine": {"cpu_count": 2, "platform": "Linux-synthetic"},
        "runs": [
            {
                "train_sim": "mujoco",
                "dr": False,
                "seed": s,
                "env_steps": 58000,
                "train_wall_s": 9.0 + s,
                "eval": {"sapien": run},
            }
            for s in (0, 1)
        ],
    }
    for stem, data in {"mujoco": mujoco, "sapien": sapien, "motrix": motrix, "tasks": tasks}.items():
        (folder / f"{stem}.json").write_text(json.dumps(data))
    (folder / "sim_to_sim_cartpole.json").write_text(json.dumps(sim_to_sim))
    (folder / "notes.json").write_text(json.dumps({"not": "a result"}))
    (folder / "half_written.json").write_text('{"sections": {')


def test_report_renders_a_results_folder_into_the_performance_page(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    _results(results)
    out = tmp_path / "performance.md"
    assert _report().main(["--results", str(results), "--out", str(out)]) == 0
    page = out.read_text()
    assert page.startswith(_report().HEADER) and "do not edit by hand" in page
    # one heading per file, in the scripts' order, each with its date; the summary links to them
    heads = re.findall(r"^## (.+)$", page, flags=re.M)
    assert heads[:4] == [
        "mujoco (`bench_mujoco.py`, 2031-01-02)",
        "sapien (`bench_sapien.py`, 2031-01-03)",
        "motrix (`bench_motrix.py`, 2031-01-04)",
        "tasks (`bench_tasks.py`, 2031-01-05)",
    ]
    assert len(heads) == 5 and heads[4].startswith("sim_to_sim_cartpole (`sim_to_sim.py`, ")  # dated by the file
    assert "[notes]" not in page and "half_written" not in page
    assert (
        "| [mujoco](#mujoco-bench_mujocopy-2031-01-02) | `bench_mujoco.py` | 2031-01-02 | full | 2 of 2 met |" in page
    )
    assert (
        "| [sapien](#sapien-bench_sapienpy-2031-01-03) | `bench_sapien.py` | 2031-01-03 | quick | 0 of 1 met |" in page
    )
    # machine, settings, load
    assert "Machine: Synthetic CPU, 2 cores, python 3.11.9, mujoco 4.0.0." in page
    assert "11 rounds of about 0.4 s per variant." in page and "**Quick run**" in page
    assert "Other processes used 0.40 cores while it ran (more than 0.25" in page
    assert "Parameters: model arm7; num_envs 1024." in page  # the nested plan is left to the JSON
    # figures against their targets
    assert "| step k=1: backend / raw batch | **0.912** x | >= 0.9 | met |" in page
    assert "| jacobian time / step time | **0.0777** fraction | <= 0.1 | met |" in page
    assert "| step N=16 k=1: backend / bare SAPIEN loop | **0.548** x | >= 0.8 | **missed** |" in page
    # every variant's rate and every paired ratio
    assert "| case | `backend` | `raw_vel` | backend / raw_vel |" in page
    assert "| nsteps=1 | 71,378 | 78,481 | 0.912 (0.881..0.946) |" in page
    assert "Rates in env-substeps/s (median over rounds)" in page
    assert "| `jacobian` | 1,437 calls/s | 12.5 | get_site_jacobian_w |" in page
    assert "| fraction_jacobian_of_step | 0.0777 (0.0701..0.0888) |" in page
    assert "fraction_cold_jacobian_of_bare_step 0.654" in page
    assert "| arm7,N=1024 | 34,400 | 16,400 | skipped | 0.477 (0.45..0.5) |" in page
    assert "sapien skipped: N=1024 > capabilities.max_envs=1000" in page
    assert "Skipped: no CUDA device here" in page
    assert "| `mujoco` | 256 | 40,960 | 28,512 |" in page
    # sim_to_sim.py: success and return per evaluation engine, intervals over the two training seeds
    assert "| mujoco | off | sapien | 1.000 ± 0.000 | 250.0 ± 0.0 | 10 ± 6 | 58000 ± 0 |" in page


def test_an_empty_results_folder_says_so(tmp_path: Path) -> None:
    out = tmp_path / "performance.md"
    assert _report().main(["--results", str(tmp_path), "--out", str(out)]) == 0
    assert "No results recorded yet" in out.read_text()


def test_the_version_is_the_same_everywhere_it_is_shown() -> None:
    """One version: ``simbackend.__version__`` (what ``--version``, ``info`` and recordings show), the installed
    distribution's (setuptools reads it from ``__version__``), and the CHANGELOG's latest release."""
    from importlib import metadata

    import simbackend

    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", (REPO / "CHANGELOG.md").read_text(), re.M)
    assert releases and releases[0] == simbackend.__version__, (releases[:1], simbackend.__version__)
    assert metadata.version("simbackend") == simbackend.__version__
