"""Export round trip: a run's ResNet-18 loads into a plain torchvision resnet18 (the CIFAR stem
replaced as model.json says) and gives the same features; the hyperbolic projector rebuilds
from projector.pt and its recorded curvature."""

from __future__ import annotations

import json

import pytest
import torch
import torchvision
from conftest import tiny_config
from torch import nn

import solo_hyper.methods  # noqa: F401  (registers the methods)
from solo_hyper.cli.main import main
from solo_hyper.heads import HyperbolicProjector
from solo_hyper.run.train import prepare
from solo_hyper.solo import adapter


def saved_run(tmp_path, backbone: str, curvature: float = 0.3):
    """A checkpoint as pretrain writes it (weights and config), BN statistics made non-trivial."""
    base = tiny_config("hcl", backbone={"name": backbone, "kwargs": {}})
    base["method_kwargs"]["curvature"] = curvature
    prep = prepare(None, base=base)
    model = adapter.build_method(prep.cfg, 10, prep.small_images, prep.num_crops)
    g = torch.Generator().manual_seed(0)
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.copy_(torch.randn(module.running_mean.shape, generator=g) * 0.1)
            module.running_var.copy_(torch.rand(module.running_var.shape, generator=g) + 0.5)
    run = tmp_path / "run"
    run.mkdir()
    torch.save({"state_dict": model.state_dict(), "solo_hyper_config": prep.cfg, "epoch": 3},
               run / "last.ckpt")  # fmt: skip
    return model.eval(), run


def test_exported_resnet18_loads_into_plain_torchvision_with_the_same_features(tmp_path, capsys):
    model, run = saved_run(tmp_path, "resnet18")
    out = tmp_path / "export"
    assert main(["export", "--checkpoint", str(run), "--out", str(out)]) == 0
    info = json.loads((out / "model.json").read_text())
    b = info["backbone"]
    assert b["format"] == "torchvision" and b["constructor"] == "torchvision.models.resnet18"
    assert b["cifar_stem"] is True  # 28 px crops: solo's CIFAR stem

    plain = torchvision.models.resnet18()
    conv = b["stem"]["conv1"]
    plain.conv1 = nn.Conv2d(
        conv["in_channels"], conv["out_channels"], tuple(conv["kernel_size"]),
        tuple(conv["stride"]), tuple(conv["padding"]), bias=conv["bias"],
    )  # fmt: skip
    plain.maxpool = nn.Identity()
    plain.fc = nn.Identity()
    plain.load_state_dict(torch.load(out / "backbone.pt"), strict=True)
    plain.eval()
    x = torch.rand(4, 3, 28, 28, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours, theirs = model.encoder(x), plain(x)
    assert ours.shape == (4, b["features_dim"]) == (4, 512)
    torch.testing.assert_close(theirs, ours)

    p = info["projector"]
    assert p["curvature"] == pytest.approx(0.3)
    head = HyperbolicProjector(512, p["proj_hidden_dim"], p["proj_output_dim"], p["curvature"],
                               p["normalize"], p.get("clip_radius"))  # fmt: skip
    head.load_state_dict(torch.load(out / "projector.pt"), strict=True)
    with torch.no_grad():
        torch.testing.assert_close(head(theirs), model.projector(ours))
    assert info["source"]["epoch"] == 3 and len(info["source"]["config_hash"]) == 16


def test_exported_small_cnn_is_its_own_class(tmp_path):
    from solo_hyper.backbones import SmallCNN

    model, run = saved_run(tmp_path, "small_cnn")
    out = tmp_path / "export"
    assert main(["export", "--checkpoint", str(run / "last.ckpt"), "--out", str(out)]) == 0
    info = json.loads((out / "model.json").read_text())
    assert info["backbone"]["constructor"] == "solo_hyper.backbones.SmallCNN"
    plain = SmallCNN(**info["backbone"]["kwargs"]).eval()
    plain.load_state_dict(torch.load(out / "backbone.pt"), strict=True)
    x = torch.rand(2, 3, 28, 28)
    with torch.no_grad():
        torch.testing.assert_close(plain(x), model.encoder(x))


def test_export_refuses_a_folder_with_other_files(tmp_path, capsys):
    _, run = saved_run(tmp_path, "small_cnn")
    out = tmp_path / "busy"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["export", "--checkpoint", str(run), "--out", str(out)]) == 2
    assert "holds other files" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_export_keeps_an_earlier_export_aside(tmp_path, capsys):
    _, run = saved_run(tmp_path, "small_cnn")
    out = tmp_path / "exported"
    assert main(["export", "--checkpoint", str(run), "--out", str(out)]) == 0
    first = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert main(["export", "--checkpoint", str(run), "--out", str(out)]) == 0
    (kept,) = [p for p in tmp_path.iterdir() if p.name.startswith("exported-")]
    assert f"the earlier export is kept as {kept}" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in kept.iterdir()} == first
    assert sorted(p.name for p in out.iterdir()) == ["backbone.pt", "model.json", "projector.pt"]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    # the float32 curvature as the number it is, not its float64 spelling 0.30000001192092896
    assert json.loads((out / "model.json").read_text())["projector"]["curvature"] == 0.3


@pytest.mark.parametrize("source", ["run", "export"])
def test_load_pretrained_gives_the_backbone_and_head_on_its_space(tmp_path, source):
    import solo_hyper

    model, run = saved_run(tmp_path, "small_cnn", curvature=0.3)
    path = run
    if source == "export":
        path = tmp_path / "exported"
        assert main(["export", "--checkpoint", str(run), "--out", str(path)]) == 0
    loaded = solo_hyper.load_pretrained(path)
    assert not loaded.backbone.training and not loaded.head.training
    assert loaded.space.name == "poincare" and float(loaded.space.curvature) == pytest.approx(0.3)
    x = torch.rand(4, 3, 28, 28)
    model.eval()
    with torch.no_grad():  # a plain PyTorch forward: the run's own features and points
        feats = loaded.backbone(x)
        torch.testing.assert_close(feats, model.encoder(x) if hasattr(model, "encoder") else model.backbone(x))
        z = loaded.head(feats)
        torch.testing.assert_close(z, model.projector(feats))
    assert float(z.norm(dim=1).max()) < 0.3**-0.5  # inside the ball of curvature -0.3
    assert loaded.input["crop_size"] == 28


def test_load_pretrained_works_in_a_fresh_interpreter(tmp_path):
    """``solo_hyper.load_pretrained`` registers what it builds: a process that imports nothing
    else loads an export, a run directory and a .ckpt, each giving the run's own points."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    model, run = saved_run(tmp_path, "small_cnn", curvature=0.3)
    export = tmp_path / "exported"
    assert main(["export", "--checkpoint", str(run), "--out", str(export)]) == 0
    x = torch.rand(4, 3, 28, 28, generator=torch.Generator().manual_seed(2))
    torch.save(x, tmp_path / "x.pt")
    code = (
        "import sys, torch, solo_hyper\n"
        "m = solo_hyper.load_pretrained(sys.argv[1])\n"
        "with torch.no_grad():\n"
        "    torch.save(m.head(m.backbone(torch.load(sys.argv[2]))), sys.argv[3])\n"
    )
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    sources = {"export": export, "run": run, "ckpt": run / "last.ckpt"}
    procs = {
        name: subprocess.Popen([sys.executable, "-c", code, str(path), str(tmp_path / "x.pt"),
                                str(tmp_path / f"{name}.pt")], env=env, cwd=tmp_path,
                               stderr=subprocess.PIPE, text=True)
        for name, path in sources.items()
    }  # fmt: skip
    errors = {name: proc.communicate(timeout=300)[1] for name, proc in procs.items()}
    with torch.no_grad():
        expected = model.projector(model.encoder(x))
    for name, proc in procs.items():
        assert proc.returncode == 0, f"{name}: {errors[name][-2000:]}"
        torch.testing.assert_close(torch.load(tmp_path / f"{name}.pt"), expected)
