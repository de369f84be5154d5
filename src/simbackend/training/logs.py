"""The training log: a CSV row per iteration, the same rows in a JSON file, and a learning-curve PNG."""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path
from typing import Any

__all__ = ["COLUMNS", "TrainingLog", "plot_learning_curve"]

#: columns of ``log.csv`` (and keys of every row of ``log.json``); empty / ``null`` where not measured
COLUMNS = (
    "iteration",  # PPO updates done (1-based)
    "env_steps",  # training env steps so far
    "wall_s",  # seconds since training started (evaluations included)
    "mean_return",  # training episodes that ended in this iteration: mean return (empty when none ended)
    "mean_length",  # ... their mean length (policy steps)
    "success_rate",  # ... the fraction that met the task's success criterion
    "episodes",  # ... how many (training episodes that ended in this iteration)
    "eval_return",  # evaluation after this iteration (deterministic policy, fixed seed; on the schedule of
    # TrainConfig.eval_iterations and at the last iteration, empty otherwise): mean return
    "eval_length",  # ... mean episode length
    "eval_success",  # ... success rate
    "success_by_engine",  # a mixed backend (envs on several engines): success_rate per engine, over the
    # episodes its envs ended ("mujoco=0.91 sapien=0.88" in log.csv, an object in log.json); empty otherwise
    "eval_success_by_engine",  # ... eval_success per engine
    "fps",  # env steps per second of this iteration (rollout and update)
    "collect_s",  # rollout time of this iteration
    "learn_s",  # update time of this iteration
    "loss_value",  # rsl-rl's mean value loss
    "loss_surrogate",  # ... surrogate loss
    "loss_entropy",  # ... entropy
    "learning_rate",  # after the adaptive schedule
    "action_std",  # mean std of the Gaussian action noise
    "command_level",  # the training task's command curriculum: fraction of the command ranges (empty: none)
    "terrain_level",  # the training task's terrain curriculum: the envs' mean level (empty: no terrain)
)


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _csv_row(row: dict) -> dict:
    """A row as ``log.csv`` writes it: ``None`` empty, a per-engine mapping as ``"mujoco=0.91 sapien=0.88"``."""
    return {
        k: "" if v is None else " ".join(f"{e}={x:.4g}" for e, x in v.items()) if isinstance(v, dict) else v
        for k, v in row.items()
    }


class TrainingLog:
    """``log.csv`` (a row appended and flushed every iteration; written again when :meth:`update_last`
    adds the final evaluation to the last row) and ``log.json`` (``{"meta", "columns", "rows"}``, rewritten
    by :meth:`write_json`: at evaluations, checkpoints and the end)."""

    def __init__(self, out_dir: Path, meta: dict):
        self.out_dir = Path(out_dir)
        self.csv_path = self.out_dir / "log.csv"
        self.json_path = self.out_dir / "log.json"
        self.png_path = self.out_dir / "learning_curve.png"
        self.meta = meta
        self.rows: list[dict] = []
        self._file = open(self.csv_path, "w", newline="", encoding="utf-8")  # noqa: SIM115 - open for the run
        self._csv = csv.DictWriter(self._file, fieldnames=COLUMNS)
        self._csv.writeheader()
        self._file.flush()

    def append(self, row: dict) -> None:
        row = {k: _clean(row.get(k)) for k in COLUMNS}
        self.rows.append(row)
        self._csv.writerow(_csv_row(row))
        self._file.flush()

    def update_last(self, **values: Any) -> None:
        """Set columns of the last row (the final evaluation of a run that stopped between two scheduled ones)
        and write ``log.csv`` again with it."""
        self.rows[-1].update({k: _clean(v) for k, v in values.items() if k in COLUMNS})
        self._file.seek(0)
        self._file.truncate()
        self._csv.writeheader()
        for row in self.rows:
            self._csv.writerow(_csv_row(row))
        self._file.flush()

    def write_json(self, **extra: Any) -> None:
        self.meta.update(extra)
        tmp = self.json_path.with_name(self.json_path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"meta": self.meta, "columns": list(COLUMNS), "rows": self.rows}, f, indent=1)
            f.write("\n")
        os.replace(tmp, self.json_path)

    def plot(self, title: str | None = None) -> Path:
        return plot_learning_curve(self.rows, self.png_path, title=title)

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


def plot_learning_curve(rows: list[dict], path: Any, title: str | None = None) -> Path:
    """Return and success rate against env steps (training episodes per iteration and evaluations) as a PNG.

    Uses matplotlib's Agg canvas directly (no pyplot, no display, no global backend change).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import EngFormatter

    fig = Figure(figsize=(9, 3.6), dpi=100)
    FigureCanvasAgg(fig)
    ax_r, ax_s = fig.subplots(1, 2)

    def series(key: str) -> tuple[list, list]:
        pts = [(r["env_steps"], r[key]) for r in rows if r.get(key) is not None]
        return [p[0] for p in pts], [p[1] for p in pts]

    for ax, train_key, eval_key, label in (
        (ax_r, "mean_return", "eval_return", "return"),
        (ax_s, "success_rate", "eval_success", "success rate"),
    ):
        x, y = series(train_key)
        ax.plot(x, y, ".-", color="tab:blue", ms=2, lw=1, label="training (episodes ended in the iteration)")
        x, y = series(eval_key)
        ax.plot(x, y, "o-", color="tab:orange", ms=3, lw=1, label="evaluation (deterministic)")
        ax.set_xlabel("env steps")
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    ax_s.set_ylim(-0.05, 1.05)
    ax_r.legend(loc="lower right", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    return path
