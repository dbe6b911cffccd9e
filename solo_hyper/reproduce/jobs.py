"""A reproduce campaign's jobs: each cell that is not done trains its run, evaluates it with its
column's protocol and, in a robust table, robust-evaluates it; each control the table shows
(every run's untrained network, each column's raw pixels) is a job of its own, planned so that a
control shared by several runs is evaluated once (``campaigns.controls``).

A fine-tuned row (RHCL+AT) shares its base row's run: its job starts once the base row's job has
ended. A row with a twin of the other geometry (RHCL's RoCL) starts once the twin's job has ended,
so that its gradient-masking diagnostics craft the transfer attack on the twin's evaluated heads.
Twins of each other (RoCL and RHCL): the earlier row's job evaluates without the transfer check,
and a job of its own (``<run>-transfer``), after the later row's, adds it (every other evaluation
and check is cached, so it costs the transfer attack alone). Every executor honours that order (a
cluster submits the jobs in waves).
"""

from __future__ import annotations

from solo_hyper.campaigns.controls import Request
from solo_hyper.evaluation.controls import PIXELS, UNTRAINED
from solo_hyper.launch.jobs import Job
from solo_hyper.reproduce.cells import Cell, done, protocol, robust_protocol, twin_dir


def job_names(cells: list[Cell]) -> dict[int, str]:
    """Each cell's job name: its run's, and for a second cell of the same run (a fine-tuned row,
    another column's evaluation) with what tells it apart."""
    names: dict[int, str] = {}
    for cell in cells:
        name = cell.run_dir.name + ("-finetune" if cell.row.finetune else "")
        taken = set(names.values())
        names[id(cell)] = name if name not in taken else f"{name}-{_file_part(cell.column.name)}"
    return names


def _file_part(text: str) -> str:
    return "".join(c if c.isalnum() or c in "+.-" else "_" for c in text)


def cell_jobs(cells: list[Cell], device: str = "auto") -> list[Job]:
    """The jobs of the cells that are not done (trained, evaluated, robust-evaluated); a job
    whose run another job also trains or evaluates, or whose row has a twin, starts once that
    one has ended; the earlier of two mutual twins gets its transfer check from a job of its own
    (module docstring)."""
    jobs, names = [], job_names(cells)
    for index, cell in enumerate(cells):
        if done(cell):
            continue
        steps = [protocol(cell, device).step()]
        after = [names[id(c)] for c in cells[:index] if c.run_dir == cell.run_dir]
        robust = robust_protocol(cell)
        title = f"{cell.row.key} ({cell.column.name}) seed {cell.seed}"
        deferred = robust is not None and _waits_for_its_twin(cell, cells)
        if robust is not None:
            if cell.twin is not None and not deferred:
                after.append(names[id(cell.twin)])
            steps.append(robust.step(cell.row.finetune, None if deferred else twin_dir(cell)))
        jobs.append(Job(names[id(cell)], cell.run_dir, cell.prep.cfg, tuple(steps), tuple(after),
                        title=title))  # fmt: skip
        if deferred:
            jobs.append(Job(f"{names[id(cell)]}-transfer", cell.run_dir, cell.prep.cfg,
                            (robust.step(cell.row.finetune, twin_dir(cell)),),
                            (names[id(cell)], names[id(cell.twin)]), title=f"{title}: transfer check"))  # fmt: skip
    return jobs


def _waits_for_its_twin(cell: Cell, cells: list[Cell]) -> bool:
    """Whether the cell's transfer check waits for a later job: its twin names its row as twin
    too and comes after it."""
    twin = cell.twin
    if twin is None or twin.twin is not cell:
        return False
    order = {id(c): i for i, c in enumerate(cells)}
    return order[id(twin)] > order[id(cell)]


def control_requests(cells: list[Cell], device: str = "auto") -> list[Request]:
    """The controls of the table, in order: each cell's untrained network (evaluated as the cell:
    its protocol, or its robust protocol: robust-eval, finetune-adv for a fine-tuned row), then
    each column's raw pixels (through every protocol the column's rows use)."""
    requests = [_request(cell, UNTRAINED, (cell.row.finetune,), device) for cell in cells]
    for column in dict.fromkeys(c.column for c in cells):
        group = [c for c in cells if c.column is column]
        requests.append(_request(group[0], PIXELS, tuple(sorted({c.row.finetune for c in group})), device))
    return requests


def _request(cell: Cell, kind: str, finetunes: tuple[bool, ...], device: str) -> Request:
    robust = robust_protocol(cell)
    return Request(cell.prep, kind, robust or protocol(cell, device), finetunes)


__all__ = ["cell_jobs", "control_requests", "job_names"]
