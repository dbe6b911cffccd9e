"""The one adapter (solo_hyper/solo/adapter.py) and its two shims: code outside solo_hyper/solo/
uses the adapter's public names only, both shim files define every name the adapter reads from a
shim, and what is the same under both versions is written once."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import solo_hyper.methods  # noqa: F401  (registers the methods)
from solo_hyper.config import ConfigError
from solo_hyper.solo import adapter, common
from solo_hyper.solo.baselines import baseline_defaults, installed_api

SOLO = Path(__file__).resolve().parents[2] / "solo_hyper" / "solo"


def _defined_names(path: Path) -> set[str]:
    """Module-level names a file defines or imports (what ``module.name`` finds)."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                elts = target.elts if isinstance(target, ast.Tuple) else [target]
                names |= {t.id for t in elts if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom):
            names |= {a.asname or a.name for a in node.names}
    return names


def test_the_installed_adapter_has_every_public_name():
    missing = [name for name in adapter.__all__ if not hasattr(adapter, name)]
    assert not missing
    assert isinstance(adapter.API, str) and isinstance(adapter.KNN_PERCENT, bool)
    assert hasattr(adapter.LIGHTNING, "Trainer") and "max_epochs" in adapter.trainer_arg_names()
    assert issubclass(adapter.ObjectiveMethod, adapter.PluginBase)
    assert issubclass(adapter.ObjectiveMethod, common.ObjectiveMethodMixin)
    assert issubclass(adapter.PluginBase, common.PluginMixin)


@pytest.mark.parametrize("version", ["v1.py", "v2.py"])
def test_both_shim_files_define_what_the_adapter_reads(version):
    """By source, so that the shim that is not installed is held to it too."""
    missing = sorted(set(adapter.SHIM) - _defined_names(SOLO / version))
    assert not missing, f"{version} lacks {missing}"


def test_the_adapter_reads_nothing_else_from_a_shim():
    tree = ast.parse((SOLO / "adapter.py").read_text())
    read = {n.attr for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "shim"}  # fmt: skip
    assert read == set(adapter.SHIM)


def test_no_function_is_written_in_both_shims():
    def functions(path: Path) -> set[str]:
        return {n.name for n in ast.walk(ast.parse(path.read_text()))
                if isinstance(n, ast.FunctionDef) and not n.name.startswith("__")}  # fmt: skip

    # the same name in both shims is the same hook in each version's form, never shared code
    shared = functions(SOLO / "v1.py") & functions(SOLO / "v2.py")
    assert shared <= {"construct", "linear_model"}, shared


def test_code_outside_the_solo_package_uses_only_the_adapters_public_names():
    package = SOLO.parent
    used = set()
    for path in package.rglob("*.py"):
        if path.parent == SOLO:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "adapter"
            ):
                used.add(node.attr)
    assert used and used <= set(adapter.__all__), sorted(used - set(adapter.__all__))


def test_registration_is_idempotent_and_refuses_a_taken_name():
    methods = adapter.registered_methods()
    cls = methods["hcl"]
    adapter.register("hcl", cls)
    assert adapter.registered_methods()["hcl"] is cls
    other = type("Other", (), {"__module__": "elsewhere"})
    with pytest.raises(ValueError, match="already"):
        adapter.register("hcl", other)


def test_plugin_class_mixes_the_plugin_base_in_once():
    simclr = adapter.registered_methods()["simclr"]
    mixed = adapter.plugin_class(simclr)
    assert issubclass(mixed, simclr) and issubclass(mixed, adapter.PluginBase)
    assert adapter.plugin_class(simclr) is mixed and adapter.plugin_class(mixed) is mixed


def test_method_info_of_a_plugin_method_is_its_objectives_declaration():
    from solo_hyper import objectives

    for name, objective in objectives.OBJECTIVES.items():
        info = adapter.method_info(name)
        assert info.cls is adapter.registered_methods()[name] and info.cls.METHOD == name
        assert info.defaults == objective.Args.defaults()
        assert info.required_crops == objective.required_crops
    with pytest.raises(ValueError, match="temperature must be > 0"):
        adapter.method_info("hcl").check_args({"temperature": 0.0})


def test_method_info_of_a_baseline_has_its_published_defaults_and_no_arg_check():
    info = adapter.method_info("simclr")
    assert issubclass(info.cls, adapter.PluginBase) and info.check_args is None
    assert info.defaults == baseline_defaults("simclr", installed_api()) and info.required_crops is None


def test_knn_metric_accumulates_and_scales_as_solo_logs():
    knn = adapter.AccumulatingKNN(k=1, distance_fx="euclidean")
    feats = torch.eye(4)
    knn(train_features=feats, train_targets=torch.arange(4))
    knn(test_features=feats, test_targets=torch.arange(4))
    top1, _ = knn.compute()
    assert top1 == (100.0 if adapter.KNN_PERCENT else 1.0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_knn_metric_on_a_mixed_precision_runs_features_is_the_float32_classifier(dtype):
    """A 16-mixed / bf16-mixed validation step hands the metric half-precision features: its
    accuracy is that of the same values in float32 (tight clusters with noisy labels, where
    half-precision distances reorder the neighbours)."""
    g = torch.Generator().manual_seed(0)
    centres = torch.randn(4, 16, generator=g)
    train_class, test_class = torch.arange(200) % 4, torch.arange(40) % 4
    train = centres[train_class] + 0.02 * torch.randn(200, 16, generator=g)
    test = centres[test_class] + 0.02 * torch.randn(40, 16, generator=g)
    train_targets = torch.where(torch.rand(200, generator=g) < 0.4,
                                torch.randint(4, (200,), generator=g), train_class)  # fmt: skip
    accuracies = []
    for features in (lambda x: x.to(dtype), lambda x: x.to(dtype).float()):
        knn = adapter.AccumulatingKNN(k=20, distance_fx="euclidean")
        knn(train_features=features(train), train_targets=train_targets)
        knn(test_features=features(test), test_targets=test_class)
        accuracies.append(knn.compute())
    assert accuracies[0] == accuracies[1]


@pytest.mark.parametrize(
    "dataset, mean, std, prefer, expected",
    [
        ("cifar10", [0.1] * 3, [0.2] * 3, False, "solo"),  # solo's pipeline ignores --mean
        ("cifar10", [0.1] * 3, [0.2] * 3, True, "explicit"),  # on-device augmentation
        ("custom", [0.1] * 3, [0.2] * 3, False, "explicit"),
        ("fashionmnist", [0.1] * 3, [0.2] * 3, False, "explicit"),
        (None, None, None, False, "no_dataset"),
    ],
)
def test_crop_statistics_follow_what_the_pipeline_normalised_with(
    dataset, mean, std, prefer, expected
):
    solo = {"cifar10": ((0.5,) * 3, (0.25,) * 3)}
    no_dataset = ((0.4,) * 3, (0.3,) * 3)
    got = common.crop_stats(dataset, mean, std, solo, None, no_dataset, prefer_explicit=prefer)
    want = {
        "solo": solo.get("cifar10"),
        "explicit": ((0.1,) * 3, (0.2,) * 3),
        "no_dataset": no_dataset,
    }[expected]
    assert got == want


@pytest.mark.parametrize("dataset", ["custom", "svhn"])
def test_crop_statistics_that_cannot_be_found_are_a_config_error(dataset):
    with pytest.raises(ConfigError, match="cannot de-normalise.*mean and std"):
        common.crop_stats(dataset, None, None, {"cifar10": ((0.5,), (0.5,))}, None, None)


def test_one_precision_table_read_both_ways():
    """Lightning 2's names for Lightning 1.9 and 1.x's spellings for Lightning 2, from one table."""
    to_19 = {"bf16-mixed": "bf16", "16-mixed": 16, "32-true": 32, "64-true": 64, "32": 32, 16: 16,
             "bf16": "bf16", "bf16-true": "bf16-true"}  # fmt: skip
    to_2 = {"16": "16-mixed", 16: "16-mixed", "bf16": "bf16-mixed", 32: "32-true", "64": "64-true",
            "bf16-mixed": "bf16-mixed", "16-true": "16-true"}  # fmt: skip
    for given, want in to_19.items():
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(adapter.shim, "LIGHTNING_2", False)
            assert adapter.trainer_precision(given) == want, given
    for given, want in to_2.items():
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(adapter.shim, "LIGHTNING_2", True)
            assert adapter.trainer_precision(given) == want, given
