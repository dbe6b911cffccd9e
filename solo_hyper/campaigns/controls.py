"""A campaign's controls as jobs: each distinct control evaluated once, by one job, never raced.

A campaign asks for controls (``Request``: the run a control belongs to, its kind, the protocol
it is evaluated by). ``plan`` writes each control's network (``evaluation.controls
.write_control``: cheap, and exact: the directory is named by a hash of the initial weights and
the evaluation's data, so runs whose untrained networks are equal share one) and gives every
directory that still lacks an asked-for evaluation to exactly one job, which evaluates all of
them there: two processes never compute the same control, whichever executor runs the jobs, and
a control already evaluated gets no job. ``results`` then reads each request's numbers.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from solo_hyper.campaigns.runs import MissingResult, Protocol, RobustProtocol
from solo_hyper.evaluation import controls, steps
from solo_hyper.launch.jobs import Job
from solo_hyper.run.train import Prepared


@dataclass(frozen=True)
class Request:
    """One control of one run: ``kind`` (``UNTRAINED``, ``PIXELS``) evaluated by the comparison
    ``protocol`` or, with ``RobustProtocol``, by robust-eval and (``finetunes``) finetune-adv."""

    prep: Prepared
    kind: str
    protocol: Protocol | RobustProtocol
    finetunes: tuple[bool, ...] = (False,)

    @property
    def eval_dataset(self) -> str | None:
        return self.protocol.eval_dataset if isinstance(self.protocol, Protocol) else None

    def evaluations(self) -> list[tuple]:
        """What the request asks of its directory, one entry per stored evaluation."""
        if isinstance(self.protocol, Protocol):
            return [(self.protocol,)]
        return [(self.protocol, finetune) for finetune in self.finetunes]


@dataclass
class Plan:
    """Each request's control directory (in the requests' order), the jobs that evaluate what is
    missing, and what each job evaluates (by job name: ``Request.evaluations``' entries)."""

    requests: list[Request]
    dirs: list[Path]
    jobs: list[Job]
    evaluations: dict[str, list[tuple]]


def _stored(run_dir: Path, evaluation: tuple) -> bool:
    protocol, *finetune = evaluation
    return (protocol.stored(run_dir) if not finetune else protocol.stored(run_dir, finetune[0])) is not None


def _steps(request: Request, run_dir: Path, evaluation: tuple, count: str) -> list:
    protocol, *finetune = evaluation
    if finetune:
        what = "finetune-adv" if finetune[0] else "robust-eval"
        line = controls.announcement(request.prep.cfg, request.kind, run_dir,
                                     f"{what} with {protocol.config}", count)  # fmt: skip
        return [functools.partial(steps.announced, line=line), protocol.step(finetune[0])]
    line = controls.announcement(request.prep.cfg, request.kind, run_dir,
                                 f"{protocol.budget} evaluation", count, protocol.eval_dataset)  # fmt: skip
    return [functools.partial(steps.announced, line=line), protocol.step()]


def plan(requests: list[Request], root: Path) -> Plan:
    """Writes every requested control's network under ``root/controls`` and plans one job per
    directory still missing an evaluation (a control of a run shares a directory with another
    run's when their networks are equal)."""
    dirs = [controls.write_control(r.prep, r.kind, Path(root), r.eval_dataset) for r in requests]
    groups: dict[Path, list[Request]] = {}
    for run_dir, request in zip(dirs, requests, strict=True):
        groups.setdefault(run_dir, []).append(request)
    todo = {}
    for run_dir, members in groups.items():
        asked = {e: r for r in members for e in r.evaluations()}  # each evaluation once
        missing = {e: r for e, r in asked.items() if not _stored(run_dir, e)}
        if missing:
            todo[run_dir] = missing
    jobs = []
    for i, (run_dir, missing) in enumerate(todo.items(), 1):
        count = f" {i}/{len(todo)}"
        work = [s for e, r in missing.items() for s in _steps(r, run_dir, e, count)]
        first = next(iter(missing.values()))
        jobs.append(Job(run_dir.name, run_dir, first.prep.cfg, tuple(work), train=False,
                        title=f"control {controls.TITLES[first.kind]}"))  # fmt: skip
    evaluations = {run_dir.name: list(missing) for run_dir, missing in todo.items()}
    return Plan(list(requests), dirs, jobs, evaluations)


def results(planned: Plan) -> list[dict]:
    """Each request's control numbers, in the requests' order (read from the directories; the
    jobs have evaluated them): the comparison protocol's (``controls.control_numbers``) or the
    robust protocols' accuracies and verdicts."""
    out = []
    for request, run_dir in zip(planned.requests, planned.dirs, strict=True):
        protocol = request.protocol
        if isinstance(protocol, Protocol):
            ev = protocol.stored(run_dir)
            if ev is None:
                raise MissingResult(f"control {run_dir} has no evaluation although its job ended")
            out.append(controls.control_numbers(request.prep.cfg, request.kind, run_dir, ev,
                                                protocol.eval_dataset, protocol.budget))  # fmt: skip
        else:
            out.append({"run_dir": str(run_dir), "control": request.kind,
                        "seed": int(request.prep.cfg["seed"]),
                        **protocol.metrics(run_dir, request.finetunes)})  # fmt: skip
    return out


__all__ = ["Plan", "Request", "plan", "results"]
