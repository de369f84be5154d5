"""A calibration's report: the JSON, a table of errors per channel before and after, and two pictures
(the loss per generation; one joint and the base height, reference against the model before and after)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from simbackend.errors import InvalidArgumentError
from simbackend.model_info import JOINT_BALL, JOINT_FREE

from .fit import CHANNELS, CalibrationResult

__all__ = ["error_table", "shown_joint", "write_report"]


def error_table(result: CalibrationResult) -> list[list[str]]:
    """Rows ``[set, channel, normalised before, after, rms before, after, units]`` (``fit`` and ``held-out``)."""
    rows = []
    sets: list[tuple[str, dict, dict]] = [("fit", result.before, result.after)]
    if result.validation_before is not None and result.validation_after is not None:
        sets.append(("held-out", result.validation_before, result.validation_after))
    for label, b, a in sets:
        for ch, vb in b["channels"].items():
            va = a["channels"][ch]
            rows.append(
                [
                    label,
                    ch,
                    f"{vb['normalised']:.4g}",
                    f"{va['normalised']:.4g}",
                    f"{vb['rms']:.4g}",
                    f"{va['rms']:.4g}",
                    CHANNELS[ch][1],
                ]
            )
        rows.append([label, "loss", f"{b['loss']:.4g}", f"{a['loss']:.4g}", "", "", ""])
    return rows


def shown_joint(trajectory: dict) -> tuple[str, int]:
    """The hinge/slide joint whose open-loop error fell most (name, qpos column)."""
    best, out = -np.inf, ("", -1)
    ref, before, after = (np.asarray(trajectory[k]) for k in ("reference", "before", "after"))
    for name, col, t in zip(trajectory["joint_names"], trajectory["qpos_columns"], trajectory["joint_types"]):
        if t in (JOINT_FREE, JOINT_BALL):
            continue
        gain = np.abs(before[:, col] - ref[:, col]).mean() - np.abs(after[:, col] - ref[:, col]).mean()
        if gain > best:
            best, out = gain, (name, col)
    return out


def write_report(result: CalibrationResult, folder: Any, *, title: str = "") -> dict[str, Path]:
    """Write ``report.json``, ``loss.png`` and ``trajectory.png`` into ``folder`` (made if missing; its parent
    folder must exist); returns their paths. ``title``: the report's and ``loss.png``'s; ``trajectory.png``
    is titled with the episode it replays (the first held-out one where there are held-out references)."""
    from simbackend._extras import require_extra

    require_extra("matplotlib", purpose="the calibration report's pictures")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(folder)
    if not out.absolute().parent.is_dir():
        raise InvalidArgumentError(f"folder: {str(out.parent)!r} does not exist")
    out.mkdir(exist_ok=True)
    paths = {"report": out / "report.json", "loss": out / "loss.png"}
    data = result.to_dict()
    data["title"] = title
    paths["report"].write_text(json.dumps(data, indent=2) + "\n")

    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=120)
    h = result.history
    if h:
        g = [e["generation"] for e in h]
        ax.semilogy(g, [e["best"] for e in h], label="best so far")
        ax.semilogy(g, [e["mean"] for e in h], label="generation mean", alpha=0.6)
    ax.axhline(result.before["loss"], color="grey", ls="--", lw=1, label="model as given")
    ax.set_xlabel("generation")
    ax.set_ylabel("normalised loss")
    ax.set_title(title or "calibration loss")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(paths["loss"])
    plt.close(fig)

    tr = result.trajectory
    if tr is not None:
        paths["trajectory"] = out / "trajectory.png"
        ref, before, after = (np.asarray(tr[k]) for k in ("reference", "before", "after"))
        t = np.arange(ref.shape[0]) * tr["dt"]
        name, col = shown_joint(tr)
        base = [c for c, ty in zip(tr["qpos_columns"], tr["joint_types"]) if ty == JOINT_FREE]
        panels = [(f"joint {name}", col, "rad")] if col >= 0 else []
        if base:
            panels.append(("base height", base[0] + 2, "m"))
        fig, axes = plt.subplots(len(panels), 1, figsize=(7, 2.6 * len(panels)), dpi=120, squeeze=False)
        for ax, (label, c, unit) in zip(axes[:, 0], panels):
            ax.plot(t, ref[:, c], color="black", lw=2, label="reference")
            ax.plot(t, before[:, c], color="tab:red", lw=1.2, label="before calibration")
            ax.plot(t, after[:, c], color="tab:green", lw=1.2, ls="--", label="after calibration")
            ax.set_ylabel(f"{label} ({unit})")
        which = "held out" if tr.get("held_out") else "fitted"
        axes[0, 0].set_title(f"{result.settings.get('sim', '')} open-loop replay of {tr['source']} ({which})".strip())
        axes[0, 0].legend(fontsize=8)
        axes[-1, 0].set_xlabel("time (s)")
        fig.tight_layout()
        fig.savefig(paths["trajectory"])
        plt.close(fig)
    return paths
