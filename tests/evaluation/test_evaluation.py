"""The evaluation commands end to end on one tiny HCL run pretrained on real Fashion-MNIST."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from solo_hyper.cli.main import main
from solo_hyper.config import ConfigError
from solo_hyper.evaluation.linear import load_linear_config, with_epochs
from solo_hyper.evaluation.logs import epoch_metrics, loss_keys, series

pytestmark = pytest.mark.slow

HCL = "configs/pretrain/fashionmnist/hcl.yaml"
TINY = [
    "max_epochs=1", "limit_train_batches=2", "limit_val_batches=1", "data.train_subset=256",
    "data.val_subset=200", "optimizer.batch_size=32", "backbone.kwargs.width=8",
    "method_kwargs.proj_hidden_dim=32", "method_kwargs.proj_output_dim=16",
]  # fmt: skip


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    from solo_hyper.data import locate_fashion_mnist
    from solo_hyper.run.train import prepare, pretrain

    if locate_fashion_mnist(None) is None:
        pytest.fail("Fashion-MNIST is required: run ./scripts/bootstrap.sh")
    out = tmp_path_factory.mktemp("runs")
    result = pretrain(prepare(HCL, [*TINY, f"checkpoint.dir={out}", "name=tiny-hcl"]), quiet=True)
    return Path(result["run_dir"])


def test_knn_command_grid_and_hierarchy_metrics(run_dir, capsys):
    code = main(["knn", "--checkpoint", str(run_dir), "--k", "5", "20", "--delta-points", "100",
                 "--train-subset", "256", "--val-subset", "200"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    result = json.loads((run_dir / "knn.json").read_text())
    assert (run_dir / "knn.md").is_file()
    assert result["train_images"] == 256 and result["test_images"] == 200
    # HCL's projector outputs are on the ball of its curvature
    assert result["curvature"] == pytest.approx(0.1)
    cells = {(r["space"], r["distance"], r["k"]) for r in result["knn"]}
    expected = {("backbone", d, k) for d in ("cosine", "euclidean") for k in (5, 20)}
    expected |= {("projector", d, k) for d in ("cosine", "euclidean", "poincare") for k in (5, 20)}
    assert cells == expected
    for r in result["knn"]:
        assert 0 <= r["top1"] <= r["top5"] <= 100
        assert r["coarse_top1"] >= r["top1"]  # a right fine neighbour vote is a right coarse one
    assert result["knn_headline"] == {"space": "backbone", "distance": "cosine", "k": 20}
    hier = result["hierarchy"]
    assert (
        hier["projector"]["distance"] == "poincare" and hier["backbone"]["distance"] == "euclidean"
    )
    for space in ("backbone", "projector"):
        assert 0 <= hier[space]["relative_delta"] <= 1 and hier[space]["num_points"] == 100
        assert len(hier[space]["class_mean_norm"]) == 10
    # normalised before expmap0: every projector output at radius tanh(sqrt(c)) / sqrt(c)
    radius = float(torch.tanh(torch.tensor(0.1).sqrt()) / torch.tensor(0.1).sqrt())
    for norm in hier["projector"]["class_mean_norm"]:
        assert norm is None or norm == pytest.approx(radius, rel=1e-4)


def test_linear_command_default_is_the_converged_logistic_probe(run_dir, capsys):
    code = main(["linear", "--checkpoint", str(run_dir), "--quiet", "data.train_subset=1000",
                 "data.val_subset=300"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    result = json.loads((run_dir / "linear.json").read_text())
    assert result["linear_protocol"] == "logistic" and result["linear_converged"] is True
    # configs/linear/fashionmnist.yaml's grid, grown tenfold while its top is chosen (to 1e4)
    solved = set(result["linear_holdout_acc1"])
    assert {"0.01", "0.1", "1.0", "10.0", "100.0"} <= solved <= {"0.01", "0.1", "1.0", "10.0",
                                                                  "100.0", "1000.0", "10000.0"}
    assert str(result["linear_c"]) in solved
    assert result["linear_train_images"] == 1000 and result["linear_test_images"] == 300
    assert result["linear_acc1"] > 30.0  # 10 classes: chance is 10%
    assert "logistic" in (run_dir / "linear.md").read_text()


def test_linear_command_sgd_precomputed_learns_above_chance(run_dir, capsys):
    code = main(["linear", "--checkpoint", str(run_dir), "--quiet", "protocol=sgd",
                 "features=precomputed", "optimizer.lr=0.1", "max_epochs=40",
                 "scheduler.name=none", "optimizer.batch_size=64", "data.train_subset=256",
                 "data.val_subset=200"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    result = json.loads((run_dir / "linear.json").read_text())
    assert result["linear_protocol"] == "sgd"
    assert result["linear_features"] == "precomputed" and result["linear_epochs"] == 40
    assert result["linear_train_images"] == 256 and result["linear_test_images"] == 200
    assert result["linear_acc1"] > 30.0  # 10 classes: chance is 10%
    assert "linear top-1" in (run_dir / "linear.md").read_text()
    assert list(run_dir.glob("linear_logs/version_*/metrics.csv"))


def test_linear_command_augmented_views(run_dir, capsys):
    code = main(["linear", "--checkpoint", str(run_dir), "--quiet", "protocol=sgd",
                 "features=augmented",
                 "max_epochs=1", "data.train_subset=64", "data.val_subset=50"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    result = json.loads((run_dir / "linear.json").read_text())
    assert result["linear_features"] == "augmented"
    assert result["linear_train_images"] == 64 and result["linear_test_images"] == 50
    assert 0 <= result["linear_acc1"] <= 100


def test_bad_linear_config_fails_before_any_work(run_dir, capsys, tmp_path):
    before = (
        (run_dir / "linear.json").stat().st_mtime if (run_dir / "linear.json").exists() else None
    )
    code = main(["linear", "--checkpoint", str(run_dir), "optimizer.nmae=sgd"])
    err = capsys.readouterr().err
    assert code == 2 and "optimizer.nmae" in err and "did you mean 'name'" in err
    after = (
        (run_dir / "linear.json").stat().st_mtime if (run_dir / "linear.json").exists() else None
    )
    assert before == after
    assert main(["linear", "--checkpoint", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_linear_config_checks_and_budget_scaling():
    with pytest.raises(ConfigError, match="protocol must be one of .*did you mean 'logistic'"):
        load_linear_config(None, ["protocol=logistc"])
    with pytest.raises(ConfigError, match="logistic.c_grid"):
        load_linear_config(None, ["logistic.c_grid=[0]"])
    with pytest.raises(ConfigError, match="logistic.holdout"):
        load_linear_config(None, ["logistic.holdout=1.5"])
    with pytest.raises(ConfigError, match="logistic.c_max must be a number > 0"):
        load_linear_config(None, ["logistic.c_max=0"])
    with pytest.raises(ConfigError, match="sgd protocol only"):
        with_epochs(load_linear_config(None), 10)
    with pytest.raises(ConfigError, match="features must be one of"):
        load_linear_config(None, ["features=cached"])
    with pytest.raises(ConfigError, match="lr_decay_steps"):
        load_linear_config(None, ["scheduler.lr_decay_steps=null"])
    with pytest.raises(ConfigError, match="solo-learn's LinearModel"):
        load_linear_config(None, ["optimizer.name=lars"])
    with pytest.raises(ConfigError, match="train_subst"):
        load_linear_config(None, ["data.train_subst=10"])
    paper = load_linear_config("configs/linear/cifar10.yaml")
    assert paper["max_epochs"] == 100 and paper["optimizer"]["lr"] == 10.0
    assert paper["scheduler"]["lr_decay_steps"] == [60, 80] and paper["features"] == "augmented"
    short = with_epochs(paper, 10)
    assert short["max_epochs"] == 10 and short["scheduler"]["lr_decay_steps"] == [6, 8]
    assert paper["scheduler"]["lr_decay_steps"] == [60, 80]  # not modified in place


def test_run_logs_are_read_per_epoch(run_dir):
    metrics = epoch_metrics(run_dir)
    assert list(metrics) == [0]
    epochs, values = series(metrics, "val_acc1")
    assert epochs == [0] and 0 <= values[0] <= 100
    assert "train_nce_loss_epoch" in loss_keys(metrics)


def test_knn_command_rejects_bad_arguments(run_dir, capsys):
    assert main(["knn", "--checkpoint", str(run_dir), "--k", "0"]) == 2
    assert "--k needs positive integers" in capsys.readouterr().err
    assert main(["knn", "--checkpoint", str(run_dir), "--delta-points", "2"]) == 2
    assert "--delta-points" in capsys.readouterr().err


def test_features_are_computed_once_per_evaluation_and_then_read_from_the_cache(
    run_dir, monkeypatch, tmp_path, capsys
):
    import os

    from solo_hyper.evaluation import features
    from solo_hyper.evaluation.protocol import evaluate_run
    from solo_hyper.run.checkpoints import resolve_checkpoint

    calls = []
    real_embed = features.embed

    def counting_embed(*args, **kwargs):
        calls.append(len(args[2].dataset))
        return real_embed(*args, **kwargs)

    monkeypatch.setattr(features, "embed", counting_embed)
    for old in [*run_dir.glob("features-*.pt"), run_dir / "eval.json"]:
        old.unlink(missing_ok=True)
    tiny = Path("tests/linear-tiny.yaml")  # data: train_subset 512, val_subset 256
    first = evaluate_run(run_dir, linear_config_path=str(tiny), disk=False, quiet=False)
    # one pass over each split, shared by both kNN evaluations, delta and the probe
    assert calls == [512, 256]
    assert (run_dir / "features-fashionmnist-512x256.pt").is_file()
    err = capsys.readouterr().err
    assert "[features" in err and "[knn" in err and "[linear probe" in err
    # another protocol: a new evaluation, the same features, read from the cache
    other = tmp_path / "other.yaml"
    other.write_text(tiny.read_text().replace("c_grid: [0.1, 1.0]", "c_grid: [1.0]"))
    second = evaluate_run(run_dir, linear_config_path=str(other), disk=False)
    assert calls == [512, 256] and second["linear_c"] == 1.0
    assert second["knn_top1"] == first["knn_top1"]
    # the knn command on the same evaluation sets reads them too
    assert main(["knn", "--checkpoint", str(run_dir), "--k", "20", "--train-subset", "512",
                 "--val-subset", "256"]) == 0  # fmt: skip
    assert calls == [512, 256]
    # a rewritten checkpoint (another mtime) is embedded afresh
    ckpt = resolve_checkpoint(run_dir)
    stat = ckpt.stat()
    try:
        os.utime(ckpt, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
        evaluate_run(run_dir, linear_config_path=str(other), disk=False)
        assert calls == [512, 256, 512, 256]
    finally:
        os.utime(ckpt, ns=(stat.st_atime_ns, stat.st_mtime_ns))
