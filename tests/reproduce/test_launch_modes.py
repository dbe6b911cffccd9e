"""A campaign's cells and controls are jobs, whichever runs them: a tiny table of each kind (a
linear table as ``compare`` makes, a robust table) comes out the same to the
last digit in this process (the default) and with ``--jobs 2`` (the timing column aside, at the
same threads per run)."""

from __future__ import annotations

import contextlib
import csv
import io
import json
from pathlib import Path

import pytest
import torch

from solo_hyper.cli.main import main
from solo_hyper.launch.pool import slots

TINY = ["data.train_subset=64", "data.val_subset=32", "optimizer.batch_size=32",
        "knn_eval.enabled=false", "backbone.kwargs.width=8", "method_kwargs.proj_hidden_dim=32",
        "method_kwargs.proj_output_dim=16", "limit_train_batches=1", "limit_val_batches=1"]  # fmt: skip
# seconds: heads of one epoch on 128 images, PGD of 2 steps on 64, the diagnostics on 16 images
# (they attack RHCL from RoCL's run: the twin's job must have ended first)
TINY_ROBUST = ["data.batch_size=64", "data.train_subset=128", "data.val_subset=64", "linear.epochs=1",
               "finetune.epochs=1", "linear.attack.steps=2", "finetune.attack.steps=2",
               "evaluation.attacks.pgd20_8.steps=2", "evaluation.attacks.pgd20_16=null",
               "evaluation.attacks.pgd20_01=null", "evaluation.attacks.aa_8=null",
               "evaluation.attacks.aa_16=null", "evaluation.attacks.aa_01=null",
               "evaluation.diagnostics.images=16", "evaluation.diagnostics.steps=2",
               "evaluation.diagnostics.long_steps=4", "evaluation.diagnostics.restarts=2",
               "evaluation.diagnostics.square_queries=20"]  # fmt: skip
KINDS = {
    "linear": ["hcl-normalization", "--linear-config", "tests/linear-tiny.yaml"],
    # RoCL and its twin RHCL (the diagnostics' transfer needs both); the RHCL+AT row's jobs are
    # planned and run by tests/reproduce/test_reproduce.py, test_planning.py and launch/test_jobs.py
    "robust": ["hcl-table3", "--rows", "rocl", "rhcl", "--robust-set", *TINY_ROBUST],
}  # fmt: skip
THREADS = slots(2)[0].threads  # a --jobs 2 worker's share of this machine's cores
MODES = {"jobs": ["--jobs", "2"]}


def campaign(kind: str, out: Path, launch: list[str] = ()) -> dict[str, str]:
    """The table's markdown and CSV (out folder as OUT, the CSV's wall time left out), made by
    ``reproduce`` with this process at a worker's threads."""
    table, *options = KINDS[kind]
    argv = ["reproduce", table, "--scale", "cpu", "--seeds", "0", "--epochs", "1", "--out", str(out),
            "--quiet", *options, "--set", *TINY, *launch]  # fmt: skip
    previous = torch.get_num_threads()
    torch.set_num_threads(THREADS)  # the campaign's own process runs the sequential jobs
    try:
        assert main(argv) == 0
    finally:
        torch.set_num_threads(previous)
    (md,) = out.glob(f"{table}-cpu-*.md")
    rows = list(csv.reader(io.StringIO(md.with_suffix(".csv").read_text())))
    keep = [i for i, key in enumerate(rows[0]) if key != "wall_time_s"]
    text = "\n".join(",".join(r[i] for i in keep) for r in rows)
    return {"md": md.read_text().replace(str(out), "OUT"), "csv": text.replace(str(out), "OUT")}


@pytest.fixture(scope="module")
def sequential(tmp_path_factory) -> dict:
    """Each kind's table made in this process, one job after another (made once, when asked)."""
    made: dict = {}

    def table(kind: str) -> dict[str, str]:
        if kind not in made:
            with contextlib.redirect_stdout(io.StringIO()):
                made[kind] = campaign(kind, tmp_path_factory.mktemp(f"{kind}-sequential"))
        return made[kind]

    return table


# submitit's local executor runs the same jobs as --jobs (launch.dispatch hands both the same Job
# list); both kinds go through --jobs 2 here (CI's time budget). The local executor's jobs:
# tests/launch/test_cluster.py (a preempted run resumes to the same numbers) and
# tests/campaigns/test_control_jobs.py (the controls). The transfer kind's jobs are the linear
# kind's with another evaluated dataset (Protocol.eval_dataset): in this process
# (tests/reproduce/test_reproduce.py, EBCLR Table 2 at a tiny budget), not again through a pool.
CASES = [("linear", "jobs"), ("robust", "jobs")]


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "mode"), CASES)
def test_a_table_is_the_same_whichever_executor_runs_its_jobs(kind, mode, sequential, tmp_path,
                                                              fashion_mnist_available):  # fmt: skip
    expected = sequential(kind)
    with contextlib.redirect_stdout(io.StringIO()):
        found = campaign(kind, tmp_path / mode, MODES[mode])
    assert found["csv"] == expected["csv"]
    assert found["md"] == expected["md"]
    assert "| control: raw pixels |" in found["md"]
    if kind == "robust":  # every row measured, the diagnostics' verdicts said
        assert "| RHCL |" in found["md"] and "- RHCL (r-LE): " in found["md"]
        # each twin's transfer check crafted on the other's run: RoCL's by a job of its own
        for row, twin in (("rocl", "rhcl"), ("rhcl", "rocl")):
            (stored,) = (tmp_path / mode / "runs").glob(f"fashionmnist-{row}-t3-s0*/robust/robust_eval.json")
            saved = json.loads(stored.read_text())
            assert saved["twin"].startswith(f"fashionmnist-{twin}-t3-s0")
            checks = [c for d in saved["diagnostics"] for c in d["checks"] if c["name"] == "transfer"]
            assert len(checks) == 2 and all(c["flagged"] is not None for c in checks)
            assert all(f"crafted on {saved['twin']}" in c["detail"] for c in checks)
