"""solo-learn's GitHub main (Hydra/OmegaConf, lightning 2) beside the PyPI release (1.0.2).

The module detects the installed solo-learn API. The API detection, the translation of this
plugin's configs into solo main's layout, the shipped Hydra YAMLs (configs/solo-main) and the
``run-solo`` launcher are tested under either installation. The tests marked ``needs_main`` build
and train the methods through solo main's own classes and launchers; they run where solo main is
installed (docs/solo-main.md; CI runs this module there: scripts/test-main.sh) and are skipped,
with that reason, under 1.0.2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from conftest import fake_loaders, tiny_config

import solo_hyper.methods  # noqa: F401  (registers the methods)
from solo_hyper.augment import DEFAULT_CROP
from solo_hyper.cli.run_solo import resolve_hydra_args, run_solo
from solo_hyper.config import ConfigError
from solo_hyper.geometry import make_space
from solo_hyper.methods import CLASSES
from solo_hyper.run.train import prepare
from solo_hyper.solo import adapter, detect_api
from solo_hyper.solo.main_cfg import SOLO_MAIN_DATASETS, solo_config

ROOT = Path(__file__).resolve().parents[2]
SOLO_MAIN_CONFIGS = ROOT / "configs" / "solo-main"
DATASET_FOLDERS = ("cifar10", "cifar100", "imagenet-100", "custom")
MAIN = adapter.API.startswith("solo-learn main")
needs_main = pytest.mark.skipif(
    not MAIN, reason=f"needs solo-learn's GitHub main installed (found {adapter.API})"
)
# fields solo main's BaseMethod reads without a default (reference-implementations.md 5.1)
REQUIRED_FIELDS = [
    ("method",), ("backbone", "name"), ("data", "dataset"), ("data", "num_classes"),
    ("data", "num_large_crops"), ("data", "num_small_crops"), ("max_epochs",),
    ("optimizer", "name"), ("optimizer", "batch_size"), ("optimizer", "lr"),
    ("optimizer", "weight_decay"), ("optimizer", "classifier_lr"), ("scheduler", "name"),
]  # fmt: skip
# keys every crop entry needs in solo main's CPU pipeline (build_transform_pipeline)
SOLO_CROP_KEYS = {
    "rrc": {"enabled", "crop_min_scale", "crop_max_scale"},
    "color_jitter": {"prob", "brightness", "contrast", "saturation", "hue"},
    "grayscale": {"prob"}, "gaussian_blur": {"prob"}, "solarization": {"prob"},
    "equalization": {"prob"}, "horizontal_flip": {"prob"},
}  # fmt: skip


# ------------------------------------------------------------------ either installation
def test_detect_api_picks_the_adapter_from_the_method_api():
    class Old:
        @staticmethod
        def add_model_specific_args(parser):
            return parser

    class New:
        @staticmethod
        def add_and_assert_specific_cfg(cfg):
            return cfg

    class Unknown:
        pass

    assert detect_api(Old) == "v1" and detect_api(New) == "v2"
    with pytest.raises(ImportError, match="supported: solo-learn 1.0.2 .*GitHub main"):
        detect_api(Unknown)
    from solo.methods.base import BaseMethod

    assert detect_api(BaseMethod) == ("v2" if MAIN else "v1")


def _pretrain_configs() -> list[Path]:
    return sorted((ROOT / "configs" / "pretrain").glob("*/*.yaml"))


def _walk(node, path=()):
    yield path, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _walk(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, (*path, i))


@pytest.mark.parametrize("config", _pretrain_configs(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_pretrain_config_translates_to_solo_main_layout(config):
    prep = prepare(str(config))
    out = solo_config(prep.cfg, 10, prep.small_images, prep.num_crops)
    for path, value in _walk(out):  # plain containers only: no OmegaConf, no tuples, no paths
        assert value is None or isinstance(value, (dict, list, str, int, float, bool)), path
    assert yaml.safe_load(yaml.safe_dump(out)) == out
    for field in REQUIRED_FIELDS:
        node = out
        for key in field:
            node = node[key]
        assert node is not None, field
    assert (out["data"]["num_large_crops"], out["data"]["num_small_crops"]) == prep.num_crops
    kwargs = dict(prep.cfg["method_kwargs"])
    schedule = [kwargs.pop(k) for k in ("base_tau_momentum", "final_tau_momentum") if k in kwargs]
    assert out["method_kwargs"] == kwargs  # the EMA schedule moves into main's cfg.momentum
    if schedule:
        assert [out["momentum"]["base_tau"], out["momentum"]["final_tau"]] == schedule
    assert out["backbone"]["cifar_stem"] is prep.small_images
    assert out["data"]["augment_on_device"] is prep.cfg["data"]["augment_on_device"]
    assert out["knn_eval"]["distance_func"] == "euclidean"
    expected = "epoch" if prep.cfg["scheduler"]["name"] in ("cosine", "step") else "step"
    assert out["scheduler"]["interval"] == expected


def test_translation_scales_lr_maps_lars_and_copies():
    cfg = prepare(
        None,
        base=tiny_config(
            "hcl",
            optimizer={
                "name": "lars",
                "batch_size": 128,
                "lr": 0.3,
                "scale_lr": True,
                "eta_lars": 0.02,
                "grad_clip_lars": True,
                "exclude_bias_n_norm": True,
            },
            devices=2,
            data={"train_subset": 256},
        ),  # fmt: skip
    ).cfg
    out = solo_config(cfg, 10, True, (2, 0))
    assert out["optimizer"]["lr"] == pytest.approx(0.3 * 128 * 2 / 256)
    assert out["optimizer"]["kwargs"] == {
        "momentum": 0.9, "eta": 0.02, "clip_lr": True, "exclude_bias_n_norm": True,
    }  # fmt: skip
    out["method_kwargs"]["temperature"] = -1.0
    out["augmentations"][0]["crop_size"] = 99
    assert cfg["method_kwargs"]["temperature"] == 0.2 and cfg["augmentations"][0]["crop_size"] == 28


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _composed(folder: Path, name: str) -> dict:
    """A solo-main YAML with its defaults list applied (Hydra's _self_-first order)."""
    cfg = _load(folder / name)
    for entry in cfg.pop("defaults"):
        if isinstance(entry, dict) and not any(k.startswith("override") for k in entry):
            ((group, option),) = entry.items()
            assert (folder / group / option).is_file(), f"{folder.name}/{name}: {group}/{option}"
            cfg[group] = _load(folder / group / option)
    return cfg


@pytest.mark.parametrize("folder", DATASET_FOLDERS)
@pytest.mark.parametrize("method", sorted(CLASSES))
def test_shipped_solo_main_config(folder, method):
    """Every method has a config per dataset, in solo main's schema, that the method accepts."""
    base = SOLO_MAIN_CONFIGS / folder
    cfg = _composed(base, f"{method}.yaml")
    info = adapter.method_info(method)
    assert cfg["method"] == method and cfg["hydra"] == {"output_subdir": None, "run": {"dir": "."}}
    assert cfg["data"]["dataset"] in SOLO_MAIN_DATASETS
    unknown = set(cfg["method_kwargs"]) - set(info.defaults)
    assert not unknown, f"keys {unknown} are not arguments of {method}"
    info.check_args(SimpleNamespace(**{**info.defaults, **cfg["method_kwargs"]}))
    crops = cfg["augmentations"]
    assert sum(e["num_crops"] for e in crops) == (info.required_crops or 2)
    for entry in crops:
        assert set(entry) <= set(DEFAULT_CROP) | {"mean", "std"}
        for key, fields in SOLO_CROP_KEYS.items():
            assert fields <= set(entry[key]), (key, entry[key])
    on_device = cfg["data"]["augment_on_device"]
    assert on_device is (CLASSES[method].OBJECTIVE.pixel_space_crops or method == "ebclr")
    if on_device and cfg["data"]["dataset"] not in ("cifar10", "cifar100", "stl10"):
        assert cfg["data"]["image_size"] >= crops[0]["crop_size"]
    assert cfg["backbone"]["name"] in set(adapter.SOLO_BACKBONES) | {"small_cnn", "resnet18_nobn"}
    assert isinstance(cfg["devices"], list)  # solo main's parse_cfg takes len(devices)


@pytest.mark.parametrize("folder", DATASET_FOLDERS)
def test_shipped_linear_configs(folder):
    cfg = _composed(SOLO_MAIN_CONFIGS / "linear", f"{folder}.yaml")
    assert cfg["data"]["dataset"] in SOLO_MAIN_DATASETS
    assert cfg["pretrain_method"] in CLASSES and "pretrained_feature_extractor" in cfg


def test_hydra_config_paths_are_taken_from_the_working_directory(tmp_path):
    (tmp_path / "confs").mkdir()
    (tmp_path / "confs" / "hcl.yaml").write_text("method: hcl\n")
    args = resolve_hydra_args(
        ["--config-path", "confs", "--config-name", "hcl.yaml", "x=1"], tmp_path
    )
    assert args == ["--config-path", str(tmp_path / "confs"), "--config-name", "hcl.yaml", "x=1"]
    args = resolve_hydra_args(["-cp=confs", "-cn", "hcl"], tmp_path)
    assert args[0] == f"-cp={tmp_path / 'confs'}"
    with pytest.raises(ConfigError, match=r"no config 'hcl2.yaml'.*\['hcl.yaml'\]"):
        resolve_hydra_args(["--config-path", "confs", "--config-name", "hcl2.yaml"], tmp_path)
    with pytest.raises(ConfigError, match="is not a folder"):
        resolve_hydra_args(["--config-path", "nope", "--config-name", "hcl.yaml"], tmp_path)


def test_run_solo_with_a_missing_script_exits_with_a_message(capsys):
    from solo_hyper.cli.main import main

    assert main(["run-solo", "no/such/main_pretrain.py", "--config-name", "x"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_run_solo_says_which_set_up_a_script_needs(tmp_path, monkeypatch):
    """Without hydra a solo main launcher is refused with the set-up it needs; solo 1.0.2's
    launchers (pytorch-lightning < 1.6 only) are refused with the command to use instead."""
    import importlib.util

    hydra_script = tmp_path / "main_pretrain.py"
    hydra_script.write_text("import hydra\nraise SystemExit('ran')\n")
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "hydra" else real_find_spec(name, *a)
    )
    with pytest.raises(ConfigError, match="no hydra.*bootstrap-main.sh.*solo_hyper pretrain"):
        run_solo(str(hydra_script), [])
    old = tmp_path / "old" / "main_pretrain.py"
    old.parent.mkdir()
    old.write_text("from pytorch_lightning.plugins import DDPPlugin\nraise SystemExit('ran')\n")
    with pytest.raises(ConfigError, match="solo-learn 1.0.2 launcher.*solo_hyper pretrain"):
        run_solo(str(old), [])


def test_run_solo_runs_the_script_as_main_with_the_methods_registered(tmp_path, monkeypatch):
    script = tmp_path / "main_probe.py"
    script.write_text(
        "import json, sys\n"
        "from solo.methods import METHODS\n"
        "assert __name__ == '__main__'\n"
        "json.dump({'argv': sys.argv, 'methods': sorted(METHODS)}, open(sys.argv[-1], 'w'))\n"
    )
    (tmp_path / "confs").mkdir()
    (tmp_path / "confs" / "hcl.yaml").write_text("method: hcl\n")
    monkeypatch.chdir(tmp_path)
    argv_before = list(sys.argv)
    out = tmp_path / "probe.json"
    run_solo(str(script), ["--config-path", "confs", "--config-name", "hcl.yaml", str(out)])
    probe = json.loads(out.read_text())
    assert sys.argv == argv_before
    assert probe["argv"] == [
        str(script), "--config-path", str(tmp_path / "confs"), "--config-name", "hcl.yaml", str(out),
    ]  # fmt: skip
    assert set(CLASSES) <= set(probe["methods"])


# ------------------------------------------------------------------ solo-learn main installed
def _main_cfg(method: str, **sections):
    """solo main's OmegaConf cfg for a tiny CPU run (via this plugin's config translation)."""
    from omegaconf import OmegaConf

    prep = prepare(None, base=tiny_config(method, **sections))
    return OmegaConf.create(solo_config(prep.cfg, 10, prep.small_images, prep.num_crops))


FAST = {  # tiny settings for the costly methods
    "rhcl": {"steps": 1},
    "rocl": {"steps": 1},
    "ebclr": {"buffer_size": 32, "sgld_steps": 2},
}


def _kwargs(method: str) -> dict:
    if method == "supervised":  # a classifier head: 8 outputs stand for the projector's 8
        return {"classes": 10}
    return {"proj_hidden_dim": 16, "proj_output_dim": 8, **FAST.get(method, {})}


@needs_main
def test_solo_main_page_lists_the_trainer_keys_the_loader_passes_through_here():
    """docs/solo-main.md's table of Lightning 2's Trainer keys is what the reference prints in
    this environment, and its keys (with the schema's own) are exactly the Trainer arguments the
    loader accepts here: the others are refused."""
    import re

    from solo_hyper.cli import reference
    from solo_hyper.config import pretrain

    names = adapter.trainer_arg_names()
    table = reference.trainer_table(names)
    assert "\n".join(table) in (ROOT / "docs" / "solo-main.md").read_text()
    listed = set(re.findall(r"^\| `(\w+)` \|", "\n".join(table), flags=re.M))
    base = {"method": "hcl", "data": {"dataset": "fashionmnist"}}
    for key in sorted(names):
        if key in listed or key in pretrain.DEFAULTS:
            pretrain.complete({**base, key: base.get(key, pretrain.DEFAULTS.get(key))}, names)
        else:
            with pytest.raises(ConfigError, match=key):
                pretrain.complete({**base, key: None}, names)


@needs_main
@pytest.mark.parametrize("method", sorted(CLASSES))
def test_method_follows_solo_mains_contract(method):
    from solo.methods import METHODS

    kwargs = _kwargs(method)
    cfg = _main_cfg(method, method_kwargs=kwargs)
    dropped = "classes" if method == "supervised" else "temperature"
    del cfg.method_kwargs[dropped]  # a default comes from ARGS
    model = METHODS[method](cfg)
    assert model.cfg.method_kwargs[dropped] == adapter.method_info(method).defaults[dropped]
    assert [g["name"] for g in model.learnable_params] == ["backbone", "classifier", "heads"]
    out = model(torch.randn(3, 3, 28, 28))
    assert out["logits"].shape == (3, 10) and out["feats"].shape == (3, model.features_dim)
    width = kwargs.get("proj_output_dim", 10)  # the supervised head: its 10 classes
    assert out["z"].shape == (3, width)
    assert model.multicrop_forward(torch.randn(3, 3, 16, 16))["z"].shape == (3, width)
    assert model.encoder is model.backbone


@needs_main
def test_bad_method_kwargs_fail_before_the_backbone_is_built(monkeypatch):
    from solo.methods import METHODS
    from solo.methods.base import BaseMethod

    built = []
    factory = BaseMethod._BACKBONES["small_cnn"]
    monkeypatch.setitem(
        BaseMethod._BACKBONES, "small_cnn", lambda *a, **k: built.append(1) or factory(*a, **k)
    )
    cfg = _main_cfg("hcl")
    cfg.method_kwargs.curvatur = 0.5
    with pytest.raises(ValueError, match=r"method_kwargs.curvatur is not an argument \(did you mean 'curvature'\?\)"):
        METHODS["hcl"](cfg)
    cfg = _main_cfg("hcl")
    cfg.method_kwargs.curvature = 0.0
    with pytest.raises(ValueError, match="curvature must be > 0"):
        METHODS["hcl"](cfg)
    assert built == []
    METHODS["hcl"](_main_cfg("hcl"))
    assert built == [1]


@needs_main
@pytest.mark.parametrize("method", [*sorted(CLASSES), "simclr", "supcon"])
def test_fast_dev_run_fit_on_device_crops(method):
    """Un-augmented batches, crops made on the device; no callbacks passed to the Trainer (EBCLR's
    replay buffer comes from the method's configure_callbacks, as under solo's launchers)."""
    prep = prepare(None, base=tiny_config(method, method_kwargs=_kwargs(method)))
    model = adapter.build_method(prep.cfg, 10, prep.small_images, prep.num_crops)
    before = [p.detach().clone() for p in model.backbone.parameters()]
    trainer = adapter.LIGHTNING.Trainer(
        fast_dev_run=True, accelerator="cpu", devices=1, logger=False,
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(model, *fake_loaders())
    assert any(not torch.equal(a, b) for a, b in zip(model.backbone.parameters(), before))
    assert torch.isfinite(trainer.callback_metrics["train_class_loss"])
    assert 0.0 <= float(trainer.callback_metrics["val_knn_acc1"]) <= 100.0


@needs_main
def test_shcls_baseline_under_main_is_the_mean_over_positives_supcon():
    """main's own SupCon scores an anchor by the log of its summed positives; under this plugin it
    trains SupCon's mean-over-positives loss, so that on the same weights and batch it equals
    SHCL with cosine logits (geometry sphere) and differs from main's function."""
    from solo.losses.simclr import simclr_loss_func

    from solo_hyper.losses import contrastive_loss

    def build(method, **kwargs):
        prep = prepare(None, base=tiny_config(method, method_kwargs={**_kwargs(method), **kwargs}))
        return adapter.build_method(prep.cfg, 10, prep.small_images, prep.num_crops)

    supcon = build("supcon", temperature=0.2)
    shcl = build("shcl", temperature=0.2, geometry="sphere")
    # the same weights: solo's projector is an nn.Sequential, the plugin's head wraps it as .mlp
    weights = {
        k.replace("projector.", "projector.mlp.", 1) if k.startswith("projector.") else k: v
        for k, v in supcon.state_dict().items()
    }
    missing, unexpected = shcl.load_state_dict(weights, strict=False)
    assert not unexpected and not [k for k in missing if not k.startswith("momentum")]
    g = torch.Generator().manual_seed(3)
    crops = [torch.rand(8, 3, 28, 28, generator=g) for _ in range(2)]
    targets = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2])  # several positives per anchor
    batch = (torch.arange(8), crops, targets)
    for model in (supcon, shcl):
        model.eval()  # the same BatchNorm statistics in both steps
    with torch.no_grad():
        z = torch.cat([supcon(x)["z"] for x in crops])
        ids = targets.repeat(2)
        want = contrastive_loss(z, ids, 0.2, make_space("sphere"))
        logsum = simclr_loss_func(z, indexes=ids, temperature=0.2)
        got_supcon = supcon.training_step(batch, 0)
        got_shcl = shcl.training_step(batch, 0)
    got = got_supcon["loss"] if isinstance(got_supcon, dict) else got_supcon
    other = got_shcl["loss"] if isinstance(got_shcl, dict) else got_shcl
    torch.testing.assert_close(got, other, rtol=1e-5, atol=1e-6)
    class_loss = got - want
    assert 0 < float(class_loss) < 10  # the online classifier's cross-entropy, the rest
    assert abs(float(logsum - want)) > 1e-2  # the two forms differ on this batch


class SoloPipelineBatches(torch.utils.data.Dataset):
    """Batches as solo main's CPU pipeline makes them: (index, [normalised float crops], target)."""

    def __init__(self, n: int, mean, std) -> None:
        g = torch.Generator().manual_seed(0)
        self.pixels = torch.rand(n, 2, 3, 28, 28, generator=g)
        self.mean, self.std = torch.tensor(mean).view(3, 1, 1), torch.tensor(std).view(3, 1, 1)
        self.targets = torch.randint(0, 10, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, i: int):
        crops = [(self.pixels[i, v] - self.mean) / self.std for v in range(2)]
        return i, crops, self.targets[i]


@needs_main
def test_solo_pipeline_crops_pass_through_and_pixel_methods_get_pixels():
    from torch.utils.data import DataLoader

    prep = prepare(None, base=tiny_config("hcl", data={"augment_on_device": False}))
    model = adapter.build_method(prep.cfg, 10, prep.small_images, prep.num_crops)
    assert model.device_augmentation is None
    data = SoloPipelineBatches(32, model.crop_mean, model.crop_std)
    trainer = adapter.LIGHTNING.Trainer(
        fast_dev_run=True, accelerator="cpu", logger=False, enable_progress_bar=False,
        enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(model, DataLoader(data, batch_size=16, drop_last=True))
    assert torch.isfinite(trainer.callback_metrics["train_nce_loss"])

    prep = prepare(None, base=tiny_config("rhcl", method_kwargs=_kwargs("rhcl")))
    rhcl = adapter.build_method(prep.cfg, 10, prep.small_images, prep.num_crops)
    batch = next(iter(DataLoader(SoloPipelineBatches(4, rhcl.crop_mean, rhcl.crop_std), 4)))
    rhcl.trainer = adapter.LIGHTNING.Trainer(accelerator="cpu", logger=False)
    rhcl.trainer.training = True
    _, crops, _ = rhcl.on_after_batch_transfer(batch, 0)
    pixels = SoloPipelineBatches(4, rhcl.crop_mean, rhcl.crop_std).pixels
    assert torch.allclose(torch.stack(crops, 1), pixels, atol=1e-5)


@needs_main
def test_plugin_backbones_in_solos_table():
    from solo.methods import METHODS
    from solo.methods.base import BaseMethod

    assert {"small_cnn", "resnet18_nobn"} <= set(BaseMethod._BACKBONES)
    assert not {"small_cnn", "resnet18_nobn"} & set(adapter.SOLO_BACKBONES)
    # resnet18_nobn on CIFAR: solo's ResNet surgery (fc, conv1, maxpool) leaves it as it is
    cfg = _main_cfg("hcl", backbone={"name": "resnet18_nobn", "kwargs": {}})
    cfg.data.dataset = "cifar10"
    model = METHODS["hcl"](cfg)
    names = {n for n, _ in model.backbone.named_parameters()}
    assert not any(n.startswith(("conv1", "fc", "maxpool")) for n in names)
    assert model.features_dim == 512
    # solo's resnet18 on small images of a dataset solo does not know as CIFAR gets the 3x3 stem
    model = adapter.build_method(
        prepare(None, base=tiny_config("hcl", backbone={"name": "resnet18", "kwargs": {}})).cfg,
        10,
        True,
        (2, 0),
    )
    assert model.backbone.conv1.kernel_size == (3, 3)
    # what main_linear.py does with a backbone name (its LinearModel reads inplanes first)
    backbone = BaseMethod._BACKBONES["small_cnn"](method="hcl", width=8)
    assert backbone.inplanes == backbone.num_features == 32


@needs_main
def test_knn_metric_in_percent_one_epoch_at_a_time():
    knn = adapter.AccumulatingKNN(k=1, distance_fx="euclidean")
    feats, targets = torch.eye(3), torch.tensor([0, 1, 2])
    knn(train_features=feats, train_targets=targets)
    knn(test_features=feats, test_targets=targets)
    assert knn.compute() == (100.0, 100.0)
    assert knn.train_features == [] and knn.test_features == []  # one epoch at a time
    knn(train_features=feats, train_targets=targets.flip(0))
    knn(test_features=feats, test_targets=targets)
    top1, _ = knn.compute()
    assert top1 == pytest.approx(100.0 / 3)


@needs_main
def test_cosine_schedule_and_1_0_2_checkpoint_keys():
    prep = prepare(None, base=tiny_config("hcl", scheduler={"name": "cosine"}, max_epochs=7))
    model = adapter.build_method(prep.cfg, 10, prep.small_images, prep.num_crops)
    _, (scheduler,) = model.configure_optimizers()
    assert isinstance(scheduler, torch.optim.lr_scheduler.CosineAnnealingLR)
    # solo's own schedule is off (it lacks cosine), ours is added; the configs keep cosine
    assert scheduler.T_max == 7 and model.cosine_schedule and model.scheduler == "none"
    assert model.solo_hyper_config["scheduler"]["name"] == model.cfg.scheduler.name == "cosine"
    state = {
        ("encoder." + k[len("backbone.") :] if k.startswith("backbone.") else k): v + 1
        for k, v in model.state_dict().items()
    }
    model.load_state_dict(state)
    first = next(iter(model.backbone.state_dict()))
    assert torch.equal(model.backbone.state_dict()[first], state["encoder." + first])


def _image_folder(root: Path, per_class: int) -> Path:
    from PIL import Image

    g = torch.Generator().manual_seed(0)
    for c in "abcde":  # solo's linear model reports top-5: at least 5 classes
        (root / c).mkdir(parents=True)
        for i in range(per_class):
            pixels = torch.randint(0, 256, (36, 36, 3), dtype=torch.uint8, generator=g)
            Image.fromarray(pixels.numpy()).save(root / c / f"{i}.png")
    return root


@pytest.fixture(scope="module")
def solo_scripts(tmp_path_factory) -> Path:
    """solo main's launchers (main_pretrain.py, main_linear.py, main_knn.py): the vendored
    sources, unpacked (they are not part of the installed package)."""
    from vendored import unpack

    return unpack("main", tmp_path_factory.mktemp("solo-main-src"))


CPU_RUN = [
    'devices="1"', "accelerator=cpu", "strategy=auto", "precision=32", "sync_batchnorm=False",
    "data.num_workers=0", "optimizer.batch_size=4", "max_epochs=1", "auto_resume.enabled=False",
    "+enable_progress_bar=False", "+enable_model_summary=False", "+limit_train_batches=2",
    "+limit_val_batches=1", "+num_sanity_val_steps=0",
]  # fmt: skip


@needs_main
def test_run_solo_pretrain_linear_and_knn_with_solos_own_scripts(
    tmp_path, monkeypatch, capsys, solo_scripts
):
    """solo main's main_pretrain.py trains HCL and RHCL on solo's CPU crops, EBCLR on solo's
    crops and on on-device crops (its replay buffer callback attached by the method and saved in
    the checkpoint); main_linear.py on the HCL checkpoint, and main_knn.py, which needs "z" from
    forward. main_knn.py is CUDA-only: Tensor.cuda is the identity here."""
    solo_root = solo_scripts
    train, val = _image_folder(tmp_path / "train", 4), _image_folder(tmp_path / "val", 2)
    monkeypatch.chdir(tmp_path)
    data = [f"data.train_path={train}", f"data.val_path={val}", f"checkpoint.dir={tmp_path}/ck"]
    small = [
        "backbone.name=small_cnn", "+backbone.kwargs.width=8", "augmentations.0.crop_size=32",
        "method_kwargs.proj_hidden_dim=16", "method_kwargs.proj_output_dim=8",
    ]  # fmt: skip
    custom = ["--config-path", str(SOLO_MAIN_CONFIGS / "custom")]
    run_solo(
        str(solo_root / "main_pretrain.py"),
        [*custom, "--config-name", "hcl.yaml", *data, *small, *CPU_RUN],
    )
    run_solo(
        str(solo_root / "main_pretrain.py"),
        [*custom, "--config-name", "rhcl.yaml", *data, *small, *CPU_RUN,
         "data.augment_on_device=False", "method_kwargs.steps=2"],
    )  # fmt: skip
    for on_device, name in ((True, "ebclr-device"), (False, "ebclr-solo")):
        run_solo(
            str(solo_root / "main_pretrain.py"),
            [*custom, "--config-name", "ebclr.yaml", *data, *small, *CPU_RUN, f"name={name}",
             "data.image_size=36", f"data.augment_on_device={on_device}",
             "method_kwargs.buffer_size=16", "method_kwargs.sgld_steps=2"],
        )  # fmt: skip
    (hcl_ckpt,) = (tmp_path / "ck" / "hcl").glob("*/*.ckpt")
    assert json.loads((hcl_ckpt.parent / "args.json").read_text())["method"] == "hcl"
    (rhcl_ckpt,) = (tmp_path / "ck" / "rhcl").glob("*/*.ckpt")
    assert torch.load(rhcl_ckpt, map_location="cpu", weights_only=False)["global_step"] == 2
    for on_device in (True, False):
        kind = "device" if on_device else "solo"
        (ebclr_ckpt,) = (tmp_path / "ck" / "ebclr").glob(f"*/ebclr-{kind}*.ckpt")
        saved = torch.load(ebclr_ckpt, map_location="cpu", weights_only=False)
        (state,) = [v for k, v in saved["callbacks"].items() if k.startswith("MSGLDReplayBuffer")]
        (buffer,) = [r["buffer"] for r in state["ranks"]]  # the method's own, under solo's script
        # full from the start whichever pipeline made the crops: 2 steps of 4 chains drawn
        assert buffer["capacity"] == 16 and buffer["samples"].shape == (16, 3, 32, 32)
        assert int((buffer["counts"] == 5.0).sum()) >= 16 - 8

    run_solo(
        str(solo_root / "main_linear.py"),
        ["--config-path", str(SOLO_MAIN_CONFIGS / "linear"), "--config-name", "custom.yaml",
         *data, "backbone.name=small_cnn", "+backbone.kwargs.width=8",
         f"pretrained_feature_extractor='{hcl_ckpt}'", *CPU_RUN],
    )  # fmt: skip
    (linear_ckpt,) = (tmp_path / "ck" / "linear").glob("*/*.ckpt")
    pretrained = torch.load(hcl_ckpt, map_location="cpu", weights_only=False)["state_dict"]
    linear = torch.load(linear_ckpt, map_location="cpu", weights_only=False)["state_dict"]
    key = "backbone.features.0.weight"
    assert torch.equal(linear[key], pretrained[key])  # loaded, and frozen by the linear probe

    monkeypatch.setattr(torch.Tensor, "cuda", lambda self, *a, **k: self)
    capsys.readouterr()
    run_solo(
        str(solo_root / "main_knn.py"),
        ["--pretrained_checkpoint_dir", str(hcl_ckpt.parent), "--batch_size", "4",
         "--num_workers", "0", "--k", "3", "--temperature", "0.07", "--distance_function",
         "euclidean", "--feature_type", "projector", "--dataset", "custom",
         "--train_data_path", str(train), "--val_data_path", str(val)],
    )  # fmt: skip
    printed = capsys.readouterr().out
    assert "### PROJECTOR ###" in printed and "Result: acc@1=" in printed


def _curvature_multirun(tmp_path: Path, solo_scripts: Path, *launcher: str) -> str:
    """run-solo of solo main's main_pretrain.py as a Hydra multirun over two curvatures with the
    ``launcher``'s overrides: each sweep value is a submitit job that trains this plugin's
    method for its two steps. Returns the jobs' stdout logs."""
    train, val = _image_folder(tmp_path / "train", 4), _image_folder(tmp_path / "val", 2)
    run_solo(
        str(solo_scripts / "main_pretrain.py"),
        ["--config-path", str(SOLO_MAIN_CONFIGS / "custom"), "--config-name", "hcl.yaml", "-m",
         f"data.train_path={train}", f"data.val_path={val}", f"checkpoint.dir={tmp_path}/ck",
         "backbone.name=small_cnn", "+backbone.kwargs.width=8", "augmentations.0.crop_size=32",
         "method_kwargs.proj_hidden_dim=16", "method_kwargs.proj_output_dim=8", *CPU_RUN,
         *launcher, "hydra.launcher.timeout_min=10", f"hydra.sweep.dir={tmp_path}/multirun",
         "method_kwargs.curvature=0.1,0.6"],
    )  # fmt: skip
    runs = sorted((tmp_path / "ck" / "hcl").glob("*/args.json"))
    curvatures = sorted(json.loads(p.read_text())["method_kwargs"]["curvature"] for p in runs)
    assert curvatures == [0.1, 0.6]
    for args in runs:  # each job trained its two steps
        (ckpt,) = args.parent.glob("*.ckpt")
        assert torch.load(ckpt, map_location="cpu", weights_only=False)["global_step"] == 2
    logs = list((tmp_path / "multirun" / ".submitit").glob("*/*_log.out"))
    assert len(logs) == 2
    return "".join(p.read_text() for p in logs)


@needs_main
def test_run_solo_under_hydra_multirun_with_the_submitit_launcher(tmp_path, monkeypatch, solo_scripts):
    """Hydra's multirun with hydra-submitit-launcher (``-m hydra/launcher=submitit_local``, the
    same launcher as ``submitit_slurm`` without a cluster)."""
    monkeypatch.chdir(tmp_path)
    _curvature_multirun(tmp_path, solo_scripts, "hydra/launcher=submitit_local")


@needs_main
@pytest.mark.slurm
def test_run_solo_under_hydra_multirun_on_a_real_slurm(tmp_path, monkeypatch, solo_scripts, slurm):
    """The same multirun with ``hydra/launcher=submitit_slurm`` on the one-node SLURM of
    tests/slurm_cluster.py: sbatch takes both sweep values as one job array, each job trains
    under srun, and Hydra collects them."""
    monkeypatch.chdir(tmp_path)
    before = {job.split("_")[0] for job in slurm.jobs()}
    logs = _curvature_multirun(
        tmp_path, solo_scripts, "hydra/launcher=submitit_slurm", "hydra.launcher.cpus_per_task=1",
        "hydra.launcher.mem_gb=2", f"hydra.launcher.partition={slurm.partition}",
    )  # fmt: skip
    def ours() -> dict[str, str]:
        return {job: state for job, state in slurm.jobs().items() if job.split("_")[0] not in before}

    jobs = slurm.wait_for(lambda: set(ours().values()) == {"COMPLETED"} and ours(),
                          "the sweep's jobs to end", timeout_s=120, poll_s=0.5)  # fmt: skip
    assert len(jobs) == 2 and len({job.split("_")[0] for job in jobs}) == 1  # one array of two
    assert all(f"Starting with JobEnvironment(job_id={job}," in logs for job in jobs), logs


@needs_main
@pytest.mark.parametrize("dataset", ["fashionmnist", "mnist"])
def test_pretrain_command_runs_on_solo_main(tmp_path, request, dataset):
    from solo_hyper.run.train import pretrain

    request.getfixturevalue(f"{dataset}_available".replace("fashionmnist", "fashion_mnist"))
    cfg = tiny_config("shcl", checkpoint={"enabled": True, "dir": str(tmp_path)})
    cfg["data"]["dataset"] = dataset
    result = pretrain(prepare(None, base=cfg), quiet=True)
    assert result["global_step"] == 4 and 0.0 <= result["knn_acc1"] <= 100.0
    assert (tmp_path / "test-shcl" / "last.ckpt").is_file()


# what docs/solo-main.md gives as the CPU smoke command (the plugin's devices: 1, as written)
CPU_SMOKE = [
    "accelerator=cpu", "devices=1", "precision=32", "data.num_workers=0",
    "optimizer.batch_size=4", "max_epochs=1", "auto_resume.enabled=False",
    "+enable_progress_bar=False", "+limit_train_batches=2", "+limit_val_batches=1",
]  # fmt: skip


@needs_main
def test_one_shipped_yaml_trains_the_method_and_its_baseline_under_run_solo(
    tmp_path, monkeypatch, capsys, solo_scripts
):
    """configs/solo-main/custom/hcl.yaml, unchanged but for the budget, trains HCL and, with
    method=simclr, SimCLR (scheduler ``cosine`` and a 4-image validation split that solo's own
    kNN cannot score: k=20 > bank, classes counted from the split); each run ends in one
    summary line; main_linear.py takes small_cnn's width from the run's args.json."""
    train, val = _image_folder(tmp_path / "train", 4), _image_folder(tmp_path / "val", 2)
    monkeypatch.chdir(tmp_path)
    common = [
        "--config-path", str(SOLO_MAIN_CONFIGS / "custom"), "--config-name", "hcl.yaml",
        f"data.train_path={train}", f"data.val_path={val}", f"checkpoint.dir={tmp_path}/ck",
        "backbone.name=small_cnn", "+backbone.kwargs.width=8", "augmentations.0.crop_size=32",
        "method_kwargs.proj_hidden_dim=16", "method_kwargs.proj_output_dim=8", *CPU_SMOKE,
    ]  # fmt: skip
    lines = {}
    for method in ("hcl", "simclr"):
        extra = [] if method == "hcl" else ["method=simclr", "name=simclr-custom",
                                            "~method_kwargs.curvature", "~method_kwargs.normalize"]  # fmt: skip
        capsys.readouterr()
        run_solo(str(solo_scripts / "main_pretrain.py"), [*common, *extra])
        lines[method] = capsys.readouterr().out.strip().splitlines()[-1]
        (ckpt,) = (tmp_path / "ck" / method).glob("*/*.ckpt")
        saved = torch.load(ckpt, map_location="cpu", weights_only=False)
        assert saved["global_step"] == 2
        assert json.loads((ckpt.parent / "args.json").read_text())["scheduler"]["name"] == "cosine"
    for method, line in lines.items():
        assert line.startswith(f"{method}-custom [{method}]: 2 steps, 1 epoch, "), line
        assert "online kNN top-1 (bank of augmented training crops)" in line, line
    (hcl_ckpt,) = (tmp_path / "ck" / "hcl").glob("*/*.ckpt")
    capsys.readouterr()
    run_solo(
        str(solo_scripts / "main_linear.py"),
        ["--config-path", str(SOLO_MAIN_CONFIGS / "linear"), "--config-name", "custom.yaml",
         f"data.train_path={train}", f"data.val_path={val}", f"checkpoint.dir={tmp_path}/ck",
         "backbone.name=small_cnn", f"pretrained_feature_extractor='{hcl_ckpt}'", *CPU_SMOKE],
    )  # fmt: skip
    assert "linear" in capsys.readouterr().out.strip().splitlines()[-1]


def test_run_solo_names_the_configs_and_tells_the_dialects_apart(tmp_path):
    (tmp_path / "confs").mkdir()
    (tmp_path / "confs" / "hcl.yaml").write_text("defaults:\n  - _self_\nmethod: hcl\n")
    with pytest.raises(ConfigError, match=r"--config-name is missing.*\['hcl.yaml'\]"):
        resolve_hydra_args(["--config-path", "confs"], tmp_path)
    plugin_yaml = ROOT / "configs" / "pretrain" / "fashionmnist" / "hcl.yaml"
    with pytest.raises(ConfigError, match="python -m solo_hyper pretrain --config .*hcl.yaml"):
        resolve_hydra_args(
            ["--config-path", str(plugin_yaml.parent), "--config-name", "hcl.yaml"], tmp_path
        )


def test_run_solo_finds_solo_mains_launchers_by_name_in_the_environment(tmp_path, monkeypatch):
    from solo_hyper.cli import run_solo as module

    monkeypatch.setattr(module.sys, "prefix", str(tmp_path))
    with pytest.raises(ConfigError, match=rf"or the bare name when the set-up keeps them in {tmp_path}"):
        module.resolve_script("main_pretrain.py")
    (tmp_path / "solo-learn").mkdir()
    (tmp_path / "solo-learn" / "main_pretrain.py").write_text("")
    assert module.resolve_script("main_pretrain.py") == tmp_path / "solo-learn" / "main_pretrain.py"
    with pytest.raises(ConfigError, match="does not exist"):  # a path is taken as a path
        module.resolve_script("elsewhere/main_pretrain.py")


@needs_main
def test_the_docs_cpu_smoke_block_runs_as_written_after_the_set_up(tmp_path):
    """docs/solo-main.md's CPU smoke block, pasted into bash in a folder laid out as the
    repository root (its configs/ and .venv-main/ linked), after scripts/bootstrap-main.sh put
    solo main's launchers into .venv-main/solo-learn/."""
    import subprocess

    text = (ROOT / "docs" / "solo-main.md").read_text()
    block = text.split("CPU smoke test, as pasted")[1].split("```bash\n", 1)[1].split("```", 1)[0]
    assert "run-solo main_pretrain.py" in block
    for name in ("configs", ".venv-main"):
        (tmp_path / name).symlink_to(ROOT / name)
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path,
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[hcl]" in proc.stdout, proc.stdout  # the run's summary line
    assert (tmp_path / "smoke" / "train").is_dir()
