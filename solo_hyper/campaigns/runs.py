"""A campaign's runs as jobs, and their numbers once the jobs have ended.

``Protocol`` (the comparison protocol's options) and ``RobustProtocol`` (a robust config and its
overrides) each give the job step that evaluates a directory and read what that step stored; a
campaign makes one job per run that is not finished and evaluated (``job``), dispatches them,
then reads every run (``finished_row``, ``evaluated_row``): a result missing there means a job
did not do its work, and is an error, never computed in the campaign's process.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from pathlib import Path

from solo_hyper.evaluation import steps
from solo_hyper.evaluation.protocol import stored_evaluation
from solo_hyper.evaluation.robust_runs import robust_metrics, stored_rows
from solo_hyper.launch.jobs import Job, Step
from solo_hyper.run.rundir import plan_run
from solo_hyper.run.train import Prepared


class MissingResult(RuntimeError):
    """A run or control has no stored result although its job ended."""


@dataclass(frozen=True)
class Protocol:
    """The comparison protocol's options (``protocol.evaluate_run``'s): the linear probe's
    epochs and config, the 2-D disk map, the device, the transfer target, the budget."""

    linear_epochs: int | None = None
    linear_config_path: str | None = None
    disk: bool = False
    device: str = "auto"
    eval_dataset: str | None = None
    budget: str = "full"

    def step(self) -> Step:
        return functools.partial(steps.evaluated, **asdict(self))

    def stored(self, run_dir: Path) -> dict | None:
        """The directory's numbers under this protocol, or None."""
        return stored_evaluation(run_dir, self.linear_epochs, self.linear_config_path, self.disk,
                                 self.eval_dataset, self.budget)  # fmt: skip


@dataclass(frozen=True)
class RobustProtocol:
    """A robust evaluation: the robust config (shipped, ``configs/robust/``) and the campaign's
    overrides of it (``--robust-set``)."""

    config: str
    overrides: tuple[str, ...] = ()

    def step(self, finetune: bool, twin: Path | None = None) -> Step:
        """robust-eval (``finetune``: finetune-adv); ``twin``: the Euclidean twin's run."""
        return functools.partial(steps.robust_evaluated, config=self.config, overrides=self.overrides,
                                 finetune=finetune, twin=None if twin is None else str(twin))  # fmt: skip

    def stored(self, run_dir: Path, finetune: bool, twin: Path | None = None) -> list[dict] | None:
        return stored_rows(run_dir, self.config, self.overrides, finetune, twin)

    def metrics(self, run_dir: Path, finetunes, twin: Path | None = None) -> dict:
        """The stored evaluations' accuracies and verdicts (``robust_metrics``), each protocol of
        ``finetunes`` (False: robust-eval, True: finetune-adv) merged; ``twin``: the run the
        transfer checks were crafted on."""
        found: dict = {}
        for finetune in dict.fromkeys(finetunes):
            rows = self.stored(run_dir, finetune, twin)
            if rows is None:
                what = "finetune-adv" if finetune else "robust-eval"
                raise MissingResult(f"{run_dir}: no {what} with {self.config} after its job ended")
            found.update(robust_metrics(rows))
        return found


def planned_dir(prep: Prepared) -> tuple[Path, bool]:
    """(the run's directory, whether it is finished)."""
    planned = plan_run(prep.cfg, "new")
    return planned.run_dir, planned.status == "finished"


def job(prep: Prepared, steps: list[Step], title: str, after: tuple[str, ...] = (),
        name: str | None = None) -> Job:  # fmt: skip
    """The job that trains (or reuses) the prepared run, then runs ``steps`` on it."""
    run_dir = plan_run(prep.cfg, "new").run_dir
    return Job(name or run_dir.name, run_dir, prep.cfg, tuple(steps), after, title=title)


def finished_row(prep: Prepared) -> dict:
    """The run's stored result (result.json) with its directory: what training it returned."""
    planned = plan_run(prep.cfg, "new")
    if planned.status != "finished":
        raise MissingResult(f"{planned.run_dir} is not a finished run of {prep.cfg['name']} "
                            "although its job ended")  # fmt: skip
    return {**planned.result, "run_dir": str(planned.run_dir)}


def evaluated_row(row: dict, protocol: Protocol) -> dict:
    """``row`` with the protocol's numbers of its run (no per-query kNN table, no protocol echo)
    and what its delta_rel measured."""
    ev = protocol.stored(Path(row["run_dir"]))
    if ev is None:
        raise MissingResult(f"{row['run_dir']} has no evaluation of this protocol although its "
                            "job ended")  # fmt: skip
    delta = ev["knn"]["hierarchy"][ev["relative_delta_space"]]  # what delta_rel measured
    return {**row, **{k: v for k, v in ev.items() if k not in ("knn", "protocol")},
            "relative_delta_distance": delta["distance"],
            "relative_delta_points": delta["num_points"]}  # fmt: skip


__all__ = ["MissingResult", "Protocol", "RobustProtocol", "evaluated_row", "finished_row", "job",
           "planned_dir"]  # fmt: skip
