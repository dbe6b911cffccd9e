"""Misuse of a finished run, table-driven through the command line: each case is its clear
message (or a no-op) and, after all of them, the first run's result.json is byte-identical and
its directory untouched."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

import solo_hyper.methods  # noqa: F401  (registers the methods)
from solo_hyper.cli.main import main

CONFIG = "configs/pretrain/fashionmnist/hcl.yaml"
TINY = [
    "max_epochs=2", "limit_train_batches=2", "limit_val_batches=2", "data.train_subset=256",
    "data.val_subset=64", "optimizer.batch_size=32", "backbone.kwargs.width=8",
    "method_kwargs.proj_hidden_dim=16", "method_kwargs.proj_output_dim=8", "data.num_workers=0",
]  # fmt: skip
RUN = "hcl-fashionmnist"


def pretrain_argv(root: Path, *extra: str) -> list[str]:
    return ["pretrain", "--quiet", "--config", CONFIG, f"checkpoint.dir={root}", *TINY, *extra]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """One real finished run (2 epochs of 2 steps on Fashion-MNIST)."""
    from solo_hyper.data import locate_fashion_mnist

    if locate_fashion_mnist(None) is None:
        pytest.fail("Fashion-MNIST is required: run ./scripts/bootstrap.sh")
    root = tmp_path_factory.mktemp("runs")
    assert main(pretrain_argv(root)) == 0
    return root


def snapshot(run_dir: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(run_dir)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(run_dir.rglob("*"))
    }


def fake_checkpoint(path: Path, method: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": {}, "solo_hyper_config": {"method": method}}, path)
    return str(path)


def unfinished_copy(root: Path, tmp: Path) -> str:
    """A copy of the run without its result.json: a run killed before it finished."""
    shutil.copytree(root / RUN, root / "unfinished")
    (root / "unfinished" / "result.json").unlink()
    return "name=unfinished"


def empty_dir(tmp: Path) -> str:
    (tmp / "empty").mkdir(exist_ok=True)
    return str(tmp / "empty")


# (case, argv builder (run root, scratch dir), expected exit code, message regex on stdout+stderr)
CASES = [
    ("same command: stored results, nothing written",
     lambda r, t: pretrain_argv(r), 0,
     r"2 epochs \(a finished run of this config, nothing trained\) -> .*hcl-fashionmnist"),
    ("other method argument in the same run",
     lambda r, t: pretrain_argv(r, "method_kwargs.curvature=0.9"), 2,
     r"another config.*method_kwargs.curvature: 0.1 -> 0.9.*--new-run"),
    ("fewer epochs in the same run",
     lambda r, t: pretrain_argv(r, "max_epochs=1"), 2, r"max_epochs: 2 -> 1.*name=hcl-fashionmnist-2"),
    ("another seed in the same run",
     lambda r, t: pretrain_argv(r, "seed=6"), 2, r"seed: 5 -> 6"),
    ("resume from a checkpoint that does not exist",
     lambda r, t: pretrain_argv(r, "resume_from_checkpoint=does/not/exist.ckpt"), 2,
     r"'does/not/exist.ckpt' does not exist"),
    ("resume from a checkpoint of another method",
     lambda r, t: pretrain_argv(r, f"resume_from_checkpoint={fake_checkpoint(t / 'e.ckpt', 'ebclr')}"),
     2, r"checkpoint of method 'ebclr', but the config trains 'hcl'"),
    ("train_path an empty folder (no fall back to the system copy)",
     lambda r, t: pretrain_argv(r, f"data.train_path={empty_dir(t)}"), 2,
     r"holds no Fashion-MNIST"),
    ("train_path missing",
     lambda r, t: pretrain_argv(r, f"data.train_path={t}/nowhere"), 2, r"nowhere' does not exist"),
    ("GPU indices on the CPU (solo's devices=[0])",
     lambda r, t: pretrain_argv(r, "devices=[0]"), 2, r"devices=\[0\] lists GPU indices.*devices=1"),
    ("zero devices", lambda r, t: pretrain_argv(r, "devices=0"), 2, r"devices must be >= 1"),
    ("misspelt logger", lambda r, t: pretrain_argv(r, "logger=tensorbord"), 2,
     r"unknown logger 'tensorbord'.*did you mean 'tensorboard'"),
    ("misspelt retention key", lambda r, t: pretrain_argv(r, "checkpoint.keep_lst=2"), 2,
     r"checkpoint.keep_lst.*did you mean 'keep_last'"),
    ("negative retention", lambda r, t: pretrain_argv(r, "checkpoint.keep_last=-1"), 2,
     r"keep_last must be an integer >= 0"),
    ("auto_resume off over an unfinished run",
     lambda r, t: pretrain_argv(r, unfinished_copy(r, t), "auto_resume.enabled=false"), 2,
     r"unfinished run and auto_resume.enabled=false"),
    ("export into a file",
     lambda r, t: ["export", "--checkpoint", str(r / RUN), "--out", str(r / RUN / "result.json")],
     2, r"is a file"),
    ("knn on a GPU that is not there",
     lambda r, t: ["knn", "--checkpoint", str(r / RUN), "--device", "cuda:7"], 2, r"cuda:7"),
    ("linear with a misspelt config key",
     lambda r, t: ["linear", "--checkpoint", str(r / RUN), "optimizer.batchsize=8"], 2,
     r"unknown linear config key 'optimizer.batchsize'.*did you mean 'batch_size'"),
    ("robust-eval with an unknown device",
     lambda r, t: ["robust-eval", "--checkpoint", str(r / RUN), "device=tpu"], 2,
     r"device must be auto, cpu, cuda or cuda:N"),
]  # fmt: skip


def test_misuse_cases_are_clear_and_leave_the_finished_run_as_it_was(finished_run, tmp_path, capsys):
    run_dir = finished_run / RUN
    before = (run_dir / "result.json").read_bytes()
    files = snapshot(run_dir)
    json.loads(before)  # strict JSON (Python's json accepts NaN: check by hand below)
    assert b"NaN" not in before and b"Infinity" not in before
    failures = []
    for case, build, code, message in CASES:
        scratch = tmp_path / re.sub(r"\W+", "-", case)
        scratch.mkdir()
        got = main(build(finished_run, scratch))
        out = capsys.readouterr()
        text = out.out + out.err
        if got != code or not re.search(message, text, flags=re.DOTALL):
            failures.append(f"{case}: exit {got} (want {code}), output {text[-600:]!r}")
        if "Epoch" in out.err:
            failures.append(f"{case}: training started")
    assert not failures, "\n".join(failures)
    assert (run_dir / "result.json").read_bytes() == before
    assert snapshot(run_dir) == files
    assert len(CASES) >= 12


def test_new_run_flag_trains_the_other_config_beside_the_finished_one(finished_run, capsys):
    run_dir = finished_run / RUN
    before = (run_dir / "result.json").read_bytes()
    assert main(pretrain_argv(finished_run, "method_kwargs.curvature=0.9", "--new-run")) == 0
    capsys.readouterr()
    sibling = [p for p in finished_run.iterdir() if p.name.startswith(f"{RUN}-")]
    assert len(sibling) == 1
    result = json.loads((sibling[0] / "result.json").read_text())
    assert result["finished"] and result["config_hash"].startswith(sibling[0].name.split("-")[-1])
    assert json.loads(before)["config_hash"] != result["config_hash"]
    assert (run_dir / "result.json").read_bytes() == before


def test_the_finished_run_records_what_it_is(finished_run):
    run_dir = finished_run / RUN
    result = json.loads((run_dir / "result.json").read_text())
    info = json.loads((run_dir / "run.json").read_text())
    assert result["finished"] and result["epochs"] == 2 and result["global_step"] == 4
    assert result["config_hash"] == info["config_hash"]
    assert torch.__version__.startswith(result["code"]["packages"]["torch"])
    assert "solo-learn" in result["code"]["packages"] and "git_commit" in result["code"]
    # one unit: the kNN accuracy is in percent like the online probe (solo 1.0.2 logs a fraction)
    assert result["knn_acc1"] == result["metrics"]["val_knn_acc1"]
    assert 0 <= result["knn_acc1"] <= 100 and result["units"] == "accuracies in percent"
    # retention: last.ckpt + the final epoch, not every epoch
    assert sorted(p.name for p in run_dir.glob("*.ckpt")) == ["epoch=1.ckpt", "last.ckpt"]
    # the resolved config is the logger's hyperparameters; the learning rate is logged
    import yaml

    hparams = yaml.safe_load((run_dir / "logs" / "version_0" / "hparams.yaml").read_text())
    assert hparams["method"] == "hcl" and hparams["method_kwargs"]["curvature"] == 0.1
    assert hparams["config_hash"] == info["config_hash"]
    header = (run_dir / "logs" / "version_0" / "metrics.csv").read_text().splitlines()[0]
    assert any(col.startswith("lr-") for col in header.split(","))


def test_more_epochs_train_the_run_on_and_keep_the_shorter_result(finished_run, tmp_path, capsys):
    root = tmp_path / "copy"
    shutil.copytree(finished_run / RUN, root / RUN)
    shorter = (root / RUN / "result.json").read_bytes()
    assert main(pretrain_argv(root, "max_epochs=3")) == 0
    capsys.readouterr()
    result = json.loads((root / RUN / "result.json").read_text())
    assert result["finished"] and result["epochs"] == 3 and result["global_step"] == 6
    assert result["resumed_from"].endswith("last.ckpt")
    assert (root / RUN / "result.max_epochs=2.json").read_bytes() == shorter
    info = json.loads((root / RUN / "run.json").read_text())
    assert info["config_hash"] == result["config_hash"]
    assert info["history"] == [{"config_hash": json.loads(shorter)["config_hash"], "max_epochs": 2}]


def test_a_campaign_never_trains_an_old_run_on(finished_run, tmp_path):
    """compare/sweep/reproduce plan with on_mismatch="new": a larger max_epochs is a run of its
    own from the start (the old run's first epochs followed the 2-epoch schedule), while pretrain
    (on_mismatch="error") trains the same run on."""
    from solo_hyper.run.rundir import plan_run
    from solo_hyper.run.train import prepare

    root = tmp_path / "copy"
    shutil.copytree(finished_run / RUN, root / RUN)
    cfg = prepare(CONFIG, [f"checkpoint.dir={root}", *TINY, "max_epochs=3"]).cfg
    campaign = plan_run(cfg, "new")
    assert campaign.status == "new" and campaign.resume is None
    assert campaign.run_dir.name == f"{RUN}-{campaign.config_hash[:8]}"
    single = plan_run(cfg, "error")
    assert single.status == "extend" and single.run_dir == root / RUN


def test_compare_reuses_a_run_only_when_its_config_hash_matches(tmp_path, capsys, fashion_mnist_available):
    out = tmp_path / "cmp"

    def compare(*extra: str) -> int:
        argv = ["compare", "--configs", CONFIG, "--epochs", "1", "--out", str(out), "--no-eval",
                "--no-plots", "--quiet", "--set", *TINY, *extra]  # fmt: skip
        code = main(argv)
        capsys.readouterr()
        return code

    assert compare() == 0
    first = out / "fashionmnist-hcl" / "result.json"
    before = first.read_bytes()
    assert compare("method_kwargs.curvature=0.5") == 0  # other settings: a new run beside it
    others = [p for p in out.iterdir() if p.name.startswith("fashionmnist-hcl-")]
    assert len(others) == 1
    assert yaml_load(others[0] / "config.yaml")["method_kwargs"]["curvature"] == 0.5
    assert first.read_bytes() == before
    files = snapshot(out / "fashionmnist-hcl")
    assert compare() == 0  # the first settings again: reused, nothing trained or written
    assert snapshot(out / "fashionmnist-hcl") == files
    assert "| hcl | fashionmnist-hcl | 5 | 1 |" in (out / "results.md").read_text()  # seed 5, 1 epoch


def yaml_load(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text())


def test_resume_from_checkpoint_starts_a_new_run_where_the_other_stopped(finished_run, capsys):
    start = finished_run / RUN / "last.ckpt"
    argv = pretrain_argv(finished_run, "name=from-first", f"resume_from_checkpoint={start}",
                         "max_epochs=3")  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    result = json.loads((finished_run / "from-first" / "result.json").read_text())
    assert result["resumed_from"] == str(start)
    assert result["epochs"] == 3 and result["global_step"] == 6  # 4 steps before, 2 here
