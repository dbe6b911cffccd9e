"""The transfer protocol (EBCLR Table 2, official ``transfer_acc``): a run pretrained on one dataset
is probed and kNN-scored on another dataset's splits, the images standardised with the statistics
of the dataset it was pretrained on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from solo_hyper.cli.main import main
from solo_hyper.config import ConfigError
from solo_hyper.data import DATASETS, load_mnist
from solo_hyper.evaluation import features, protocol

pytestmark = pytest.mark.slow

TINY = [
    "max_epochs=1", "limit_train_batches=2", "limit_val_batches=1", "data.train_subset=256",
    "data.val_subset=64", "optimizer.batch_size=32", "backbone.kwargs.width=8",
    "method_kwargs.proj_hidden_dim=32", "method_kwargs.proj_output_dim=16",
]  # fmt: skip
LINEAR = str(Path(__file__).parents[1] / "linear-tiny.yaml")  # 512 / 256 evaluation images


@pytest.fixture(scope="module")
def fmnist_run(tmp_path_factory) -> Path:
    from solo_hyper.data import locate_fashion_mnist, locate_mnist
    from solo_hyper.run.train import prepare, pretrain

    if locate_fashion_mnist(None) is None or locate_mnist(None) is None:
        pytest.fail("Fashion-MNIST and MNIST are required: run ./scripts/bootstrap.sh")
    out = tmp_path_factory.mktemp("runs")
    prep = prepare("configs/pretrain/fashionmnist/simclr.yaml",
                   [*TINY, f"checkpoint.dir={out}", "name=tiny-simclr"])  # fmt: skip
    return Path(pretrain(prep, quiet=True)["run_dir"])


def test_transfer_standardises_with_the_source_statistics_on_the_target_splits(
    fmnist_run, monkeypatch
):
    seen = []
    real_embed = features.embed

    def spy(model, cfg, loader, with_z=True):
        out = real_embed(model, cfg, loader, with_z)
        seen.append((model, loader.dataset, out))
        return out

    monkeypatch.setattr(features, "embed", spy)
    result = protocol.evaluate_run(fmnist_run, linear_config_path=LINEAR, disk=False,
                                   eval_dataset="mnist")  # fmt: skip
    source, target = DATASETS["fashionmnist"], DATASETS["mnist"]
    assert result["eval_dataset"] == "mnist"
    assert result["eval_normalization"] == {"mean": list(source.mean), "std": list(source.std)}
    assert (result["eval_train_images"], result["eval_test_images"]) == (512, 256)
    assert result["linear_train_images"] == 512 and result["knn_coarse_top1"] is None  # MNIST: no coarse classes
    assert (fmnist_run / "eval-mnist.json").is_file() and not (fmnist_run / "eval.json").exists()
    (model, train_set, train), (_, test_set, _) = seen
    # the target's splits: images of MNIST's training and test splits (the subsets the linear
    # config draws), not of the run's Fashion-MNIST
    for dataset, split, n in ((train_set, load_mnist(True), 512), (test_set, load_mnist(False), 256)):
        images = {row.numpy().tobytes() for row in split[0]}
        assert len(dataset) == n and all(x.numpy().tobytes() in images for x in dataset.images)
    # standardised with Fashion-MNIST's statistics: the features are the network's on
    # (x - 0.2860) / 0.3530, not on MNIST's own (x - 0.1307) / 0.3081
    x = train_set.images[:64].float().div(255).expand(-1, 3, -1, -1)
    model.eval()
    with torch.no_grad():
        by_source = model((x - source.mean[0]) / source.std[0])["feats"]
        by_target = model((x - target.mean[0]) / target.std[0])["feats"]
    torch.testing.assert_close(train.feats[:64], by_source, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(train.feats[:64], by_target, atol=1e-3)


def test_transfer_through_the_commands_and_a_bad_target(fmnist_run, capsys):
    code = main(["linear", "--checkpoint", str(fmnist_run), "--config", LINEAR, "--quiet",
                 "--eval-dataset", "mnist"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    assert "on mnist" in capsys.readouterr().out
    result = json.loads((fmnist_run / "linear-mnist.json").read_text())
    assert result["eval_dataset"] == "mnist" and result["linear_train_images"] == 512
    code = main(["knn", "--checkpoint", str(fmnist_run), "--k", "5", "--delta-points", "50",
                 "--train-subset", "256", "--val-subset", "128", "--quiet", "--eval-dataset", "mnist"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    knn = json.loads((fmnist_run / "knn-mnist.json").read_text())
    assert (knn["eval_dataset"], knn["train_images"], knn["test_images"]) == ("mnist", 256, 128)
    assert knn["knn_coarse_top1"] is None and not (fmnist_run / "knn.json").exists()
    with pytest.raises(ConfigError, match="'mnst'.*did you mean 'mnist'"):
        protocol.evaluate_run(fmnist_run, linear_config_path=LINEAR, eval_dataset="mnst")


def test_compare_checks_the_target_before_training_and_its_legend_names_the_transfer(tmp_path, capsys):
    from solo_hyper.campaigns.compare import notes

    code = main(["compare", "--configs", "configs/pretrain/fashionmnist/simclr.yaml", "--out",
                 str(tmp_path / "out"), "--eval-dataset", "mnst", "--set", "checkpoint.dir=" + str(tmp_path)])  # fmt: skip
    assert code == 2 and "did you mean 'mnist'" in capsys.readouterr().err
    assert not any(tmp_path.glob("*simclr*"))  # nothing trained
    legend = notes([{"dataset": "fashionmnist", "eval_dataset": "mnist", "linear_acc1": 80.0}])
    assert "transfer fashionmnist -> mnist" in legend and "first's statistics" in legend
