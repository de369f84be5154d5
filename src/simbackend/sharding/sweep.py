"""Sweeps as Ray tasks: many independent jobs (parity over models, evaluation over seeds) at once.

:func:`fan_out` runs ``fn(*job)`` for every job, as Ray tasks when asked (each
reserving one CPU, so a local Ray runs as many at once as the machine has
cores and a cluster spreads them over its nodes), else one after another in
this process, with one progress bar either way. A job that raises does not
stop the others: its result is a :class:`JobFailed` the caller reports.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class JobFailed:
    """What a job raised: ``error`` is ``"Type: message"``."""

    error: str


def _guarded(fn: Callable[..., Any], *job: Any) -> Any:
    try:
        return fn(*job)
    except Exception as e:  # noqa: BLE001 - one failed job is reported, the sweep goes on
        return JobFailed(f"{type(e).__name__}: {e}")


def fan_out(
    fn: Callable[..., Any],
    jobs: Sequence[tuple],
    *,
    use_ray: bool,
    address: str | None = None,
    label: str = "jobs",
    progress: bool = True,
) -> list[Any]:
    """``[fn(*job) for job in jobs]`` (or :class:`JobFailed`), in the jobs' order; as Ray tasks when ``use_ray``.

    Args:
        fn: an importable function (Ray sends it by reference) taking a job's items.
        jobs: the argument tuples.
        use_ray: run the jobs as Ray tasks (Ray started here, or joined at ``address``).
        address: the Ray cluster to join (``"auto"``, ``"HOST:PORT"``); ``None``: a Ray in this process.
        label: what the progress bar counts.
        progress: show the progress bar (on stderr, when it is a terminal).
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    err = Console(stderr=True)
    bar = Progress(
        TextColumn(label, markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        disable=not progress or not err.is_terminal,  # a bar is for a terminal: nothing in a pipe or a file
        transient=True,
    )
    results: list[Any] = [None] * len(jobs)
    with bar:
        done = bar.add_task(label, total=len(jobs))
        if not use_ray:
            for i, job in enumerate(jobs):
                results[i] = _guarded(fn, *job)
                bar.advance(done)
            return results
        from simbackend.sharding.cluster import connect

        ray = connect(address)
        task = ray.remote(num_cpus=1)(_guarded)
        pending = {task.remote(fn, *job): i for i, job in enumerate(jobs)}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                i = pending.pop(ref)
                try:
                    results[i] = ray.get(ref)
                except Exception as e:  # noqa: BLE001 - the task's worker died: this job failed
                    results[i] = JobFailed(f"{type(e).__name__}: {' '.join(str(e).split())[:300]}")
                bar.advance(done)
    return results
