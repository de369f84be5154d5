"""benchmarks/report.py renders the benchmark scripts' JSON into docs/performance.md."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPORT = Path(__file__).resolve().parents[1] / "benchmarks" / "report.py"


def _report():
    spec = importlib.util.spec_from_file_location("bench_report", REPORT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _result(value: float, target: float) -> dict:
    return {
        "date": "2026-11-25",
        "script": "bench_mujoco.py",
        "machine": {"cpu_model": "Test CPU", "cpu_count": 2, "python": "3.11.9", "mujoco": "4.0.0"},
        "runtime_s": 61.4,
        "sections": {
            "step": {
                "figures": [
                    {
                        "name": "contract vs raw Batch",
                        "value": value,
                        "unit": "x",
                        "target": target,
                        "op": ">=",
                        "meets_target": value >= target,
                        "min": 0.81,
                        "max": 0.97,
                    }
                ]
            },
            "gpu": {"skipped": "no CUDA device", "figures": []},
        },
    }


def test_the_page_carries_every_figure_its_date_and_machine(tmp_path: Path) -> None:
    (tmp_path / "mujoco.json").write_text(json.dumps(_result(0.934, 0.9)))
    (tmp_path / "notes.json").write_text(json.dumps(["not a result"]))
    out = tmp_path / "performance.md"
    assert _report().main(["--results", str(tmp_path), "--out", str(out)]) == 0
    page = out.read_text()
    assert "## mujoco (`bench_mujoco.py`, 2026-11-25)" in page
    assert "| contract vs raw Batch | **0.934** x (0.81..0.97) | >= 0.9 | met |" in page
    assert "Test CPU, 2 cores, python 3.11.9, mujoco 4.0.0" in page and "Skipped: no CUDA device" in page
    assert "do not edit by hand" in page


def test_a_missed_target_and_an_empty_folder_read_as_such(tmp_path: Path) -> None:
    report = _report()
    assert "| **missed** |" in report.render({"mujoco": _result(0.5, 0.9)})
    assert "No results recorded yet" in report.render({})


def test_other_results_never_rewrite_the_readme(tmp_path: Path) -> None:
    """A results folder other than the project's leaves the README alone unless --readme names a file; the
    table between the markers is then rewritten and the rest of the file kept."""
    report = _report()
    readme = REPORT.parents[1] / "README.md"
    before = readme.read_text()
    assert report.main(["--results", str(tmp_path), "--out", str(tmp_path / "p.md")]) == 0
    assert readme.read_text() == before
    mine = tmp_path / "R.md"
    mine.write_text(f"intro\n{report.README_BEGIN}\nold\n{report.README_END}\nend\n")
    assert report.main(["--results", str(tmp_path), "--out", str(tmp_path / "p.md"), "--readme", str(mine)]) == 0
    text = mine.read_text()
    assert text.startswith("intro\n") and text.endswith(f"{report.README_END}\nend\n") and "old" not in text
    assert "| task | trained on | DR |" in text
