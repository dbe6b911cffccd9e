"""``python -m solo_hyper reproduce TABLE --scale cpu|gpu``: train (or reuse) every run of a paper
table, evaluate each with the comparison protocol (and robust-eval for HCL Table 3), and write
one markdown table: mean ± std over seeds, the paired difference to each row's baseline with its
95% interval, and the paper's number beside each cell.

``run_table`` reads as the campaign goes: ``plan`` (every cell validated before the first
trains: ``cells.plan``) -> ``dispatch`` (each cell not done, and each control not evaluated, is a
job: ``jobs``; run in this process, by ``--jobs`` workers or as cluster jobs: ``launch``) ->
``collect`` (each cell's numbers read from its run directory) -> ``read_controls`` (each
control's numbers) -> the report (``report.write_tables``). A campaign stopped at any point
restarts where it was, and a finished one trains and evaluates nothing.

The reproduce package, from the top: ``campaign`` -> ``planning`` (dry runs, estimates),
``report`` (the table) -> ``jobs`` -> ``cells`` -> ``pairs``, ``paper``, ``tables``; below it
``campaigns`` (runs' and controls' jobs and results), ``launch``, ``evaluation``, ``run``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

from solo_hyper.campaigns import controls as control_jobs
from solo_hyper.campaigns.runs import evaluated_row, finished_row
from solo_hyper.evaluation.seeds import parse_seeds
from solo_hyper.launch.dispatch import Launch, Progress, dispatch
from solo_hyper.reproduce import jobs, report
from solo_hyper.reproduce.cells import (
    DEFAULT_SEEDS,
    Cell,
    check_evaluations,
    plan,
    protocol,
    robust_protocol,
    twin_dir,
)
from solo_hyper.reproduce.planning import Tracker, dry_run_text, job_estimates
from solo_hyper.reproduce.tables import TABLES
from solo_hyper.run.lock import hold


def reproduce(name: str, scale: str, out: str, **options) -> Path:
    """Trains, evaluates and tabulates one table (``run_table``'s options); returns the markdown
    table's path. One writer per table file (``OUT/.locks/<its name>``): two terminals may run two
    tables (or two row or seed sets of one) into one OUT, and a run both need is trained by one while the
    other waits."""
    tag = file_tag(options.get("epochs"), options.get("rows"), options.get("columns"),
                   options.get("overrides", ()), options.get("seeds"),
                   options.get("robust_overrides", ()))  # fmt: skip
    with hold(Path(out) / ".locks" / f"{name}-{scale}{tag}", f"reproduce {name} --scale {scale}"):
        return run_table(name, scale, out, **options)


def run_table(
    name: str, scale: str, out: str, seeds=None, epochs: int | None = None, overrides=(),
    rows: list[str] | None = None, columns: list[str] | None = None, data_root: str | None = None,
    linear_config: str | None = None, device: str = "auto", quiet: bool = True,
    log: Callable[[str], None] = print, controls: bool = True, robust_overrides=(),
    launch: Launch | None = None,
) -> Path:  # fmt: skip
    """``reproduce`` without the table's lock. ``controls``: each run's untrained backbone and
    the raw pixels of each column, evaluated as the runs (robust tables: by the run's robust
    protocol); ``robust_overrides``: --robust-set; ``launch``: where the jobs run (``--jobs``,
    ``--executor``; default: one after another in this process)."""
    cells = plan(name, scale, seeds, epochs, overrides, out, rows, columns, data_root,
                 robust_overrides, linear_config=linear_config)  # fmt: skip
    check_evaluations(cells)
    log(dry_run_text(name, scale, cells, out, controls))
    wanted = control_jobs.plan(jobs.control_requests(cells, device), Path(out)) if controls else None
    work = [*jobs.cell_jobs(cells, device), *(wanted.jobs if wanted else [])]
    tracker = Tracker(work, job_estimates(cells, scale, wanted.evaluations if wanted else {}), log)
    dispatch(work, launch or Launch(), Path(out), log, Progress("reproduce", quiet, tracker.finished))
    collect(cells)
    pixels = read_controls(cells, wanted) if wanted else {}
    path = Path(out) / f"{name}-{scale}{file_tag(epochs, rows, columns, overrides, seeds, robust_overrides)}.md"
    report.write_tables(path, TABLES[name], scale, cells, pixels)
    log(f"written: {path}")
    return path


def collect(cells: list[Cell]) -> None:
    """Each cell's numbers, read from its run directory (its jobs trained and evaluated it):
    the training result, the comparison protocol's numbers and (robust tables) the robust
    protocol's accuracies and verdicts."""
    for cell in cells:
        row = evaluated_row(finished_row(cell.prep), protocol(cell))
        robust = robust_protocol(cell)
        if robust is not None:
            row.update(robust.metrics(cell.run_dir, [cell.row.finetune], twin_dir(cell)))
        cell.result = row


def read_controls(cells: list[Cell], wanted: control_jobs.Plan) -> dict[str, dict]:
    """Each cell's untrained network's numbers (into ``cell.untrained``) and each column's raw
    pixels' (returned by column name), in ``jobs.control_requests``' order."""
    found = control_jobs.results(wanted)
    for cell, numbers in zip(cells, found, strict=False):
        cell.untrained = numbers
    columns = dict.fromkeys(c.column for c in cells)
    return {column.name: numbers for column, numbers in zip(columns, found[len(cells):], strict=True)}


def file_tag(epochs, rows, columns, overrides, seeds=None, robust_overrides=()) -> str:
    """A narrowed or shrunk campaign writes its own table (and holds its own lock), never over the
    full one: ``--seeds 0`` must not replace the three-seed table with a one-seed one."""
    tag = f"-e{epochs}" if epochs is not None else ""
    chosen = tuple(parse_seeds(seeds)) if seeds is not None else DEFAULT_SEEDS
    tag += ("-seeds-" + "+".join(map(str, chosen)) if chosen != DEFAULT_SEEDS else "")
    tag += ("-rows-" + "+".join(rows) if rows else "")
    tag += ("-columns-" + "+".join(map(report.file_safe, columns)) if columns else "")
    if overrides:
        tag += "-set" + hashlib.sha256(" ".join(overrides).encode()).hexdigest()[:6]
    if robust_overrides:
        tag += "-robust" + hashlib.sha256(" ".join(robust_overrides).encode()).hexdigest()[:6]
    return tag


__all__ = ["collect", "file_tag", "read_controls", "reproduce", "run_table"]
