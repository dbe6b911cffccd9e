"""Each shipped Fashion-MNIST baseline config is solo-learn 1.0.2's own recipe for its method
(``bash_files/pretrain/cifar/<method>.sh``, and 1.0.2's argparse defaults for what a script does
not set, both read from the vendored sources), scaled to the small CNN by one rule for every row,
and differs from it exactly where docs/fairness.md's tables say, with the values they state."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from vendored import bash_flags, unpack

import solo_hyper.methods  # noqa: F401  (registers the methods)
from solo_hyper.cli.solo_flags import FLAG_KEYS, SWITCHES
from solo_hyper.run.train import prepare
from solo_hyper.solo import detect_api
from solo_hyper.solo.baselines import BASELINES, baseline_defaults

ROOT = Path(__file__).resolve().parents[2]
FMNIST = ROOT / "configs" / "pretrain" / "fashionmnist"
FAIRNESS = ROOT / "docs" / "fairness.md"
SECTION = "## solo-learn's other baselines"
API = detect_api(__import__("solo.methods.base", fromlist=["BaseMethod"]).BaseMethod)


def _method(path: Path) -> str:
    return yaml.safe_load(path.read_text())["method"]


# the shipped config of each solo-learn baseline, <method>.yaml (simclr-rocl-recipe.yaml is HCL
# Table 3's); SupCon is HCL Table 2's pair with SHCL (tests/evaluation/test_fairness.py), and
# 1.0.2 has no script of its own for it
CONFIGS = sorted(
    p.stem
    for p in FMNIST.glob("*.yaml")
    if p.stem == _method(p) and p.stem in BASELINES and p.stem != "supcon"
)
# the one scaling of every row: hidden layers /8, outputs and prototype counts /4
WIDTHS = {"proj_hidden_dim": 8, "pred_hidden_dim": 8, "proj_output_dim": 4, "num_prototypes": 4}
# the keys of a recipe outside method_kwargs (where the data lives and what is logged are not)
RECIPE_KEYS = (
    "backbone.name", "backbone.kwargs.zero_init_residual", "max_epochs", "optimizer.name",
    "optimizer.batch_size", "optimizer.lr", "optimizer.classifier_lr", "optimizer.weight_decay",
    "optimizer.eta_lars", "optimizer.grad_clip_lars", "optimizer.exclude_bias_n_norm",
    "scheduler.name", "scheduler.min_lr", "scheduler.warmup_epochs", "scheduler.warmup_start_lr",
)  # fmt: skip
LARS_ONLY = ("optimizer.eta_lars", "optimizer.grad_clip_lars", "optimizer.exclude_bias_n_norm")
WARMUP_ONLY = ("scheduler.warmup_epochs", "scheduler.warmup_start_lr")
COLOUR = ("brightness", "contrast", "saturation", "hue")


@pytest.fixture(scope="module")
def solo_102(tmp_path_factory) -> Path:
    return unpack("1.0.2", tmp_path_factory.mktemp("solo-102"))


# ------------------------------------------------------------------------------ solo's recipe
def _arguments(source: str) -> dict[str, dict[str, tuple[Any, str]]]:
    """{class: {flag: (default, type name)}} of every ``parser.add_argument`` in a module."""
    out: dict[str, dict[str, tuple[Any, str]]] = {}
    for cls in (n for n in ast.parse(source).body if isinstance(n, ast.ClassDef)):
        args = out.setdefault(cls.name, {})
        for call in ast.walk(cls):
            if not (
                isinstance(call, ast.Call) and getattr(call.func, "attr", "") == "add_argument"
            ):
                continue
            flag = call.args[0].value.lstrip("-")
            kw = {k.arg: k.value for k in call.keywords}
            if "action" in kw:  # store_true
                args[flag] = (False, "bool")
                continue
            default = ast.literal_eval(kw["default"]) if "default" in kw else None
            args[flag] = (default, ast.unparse(kw["type"]) if "type" in kw else "str")
    return out


def _typed(values: list[str], kind: str, default: Any) -> Any:
    convert = {"float": float, "int": int, "str": str}.get(kind, yaml.safe_load)
    typed = [convert(v) for v in values]
    return typed if isinstance(default, list) else typed[0]


def _scaled(key: str, value: Any) -> Any:
    factor = WIDTHS.get(key.removeprefix("method_kwargs."))
    if factor is None:
        return value
    if isinstance(value, list):
        return [_scaled(key, v) for v in value]
    assert value % factor == 0, (key, value)
    return value // factor


def _scripts(solo: Path) -> dict[str, Path]:
    """{method: its CIFAR script} of solo-learn 1.0.2."""
    out = {}
    for script in sorted((solo / "bash_files" / "pretrain" / "cifar").glob("*.sh")):
        flags = bash_flags(script, "cifar10")
        out[flags[flags.index("--method") + 1]] = script
    return out


def _given(solo: Path, method: str) -> dict[str, list[str]]:
    given: dict[str, list[str]] = {}
    for token in bash_flags(_scripts(solo)[method], "cifar10"):
        if token.startswith("--"):
            flag = token[2:]
            given[flag] = []
        else:
            given[flag].append(token)
    return given


def solo_recipe(solo: Path, method: str) -> dict[str, Any]:
    """solo-learn 1.0.2's recipe for ``method`` in this plugin's keys, the head widths scaled as
    every row's: its script's flags over the argparse defaults of its class and of BaseMethod."""
    base = _arguments((solo / "solo" / "methods" / "base.py").read_text())
    module = ast.parse((solo / "solo" / "methods" / f"{method}.py").read_text())
    (cls,) = [  # the method's class: the one with arguments (DINO's module has its head too)
        n for n in module.body if isinstance(n, ast.ClassDef)
        and any(getattr(f, "name", "") == "add_model_specific_args" for f in n.body)
    ]  # fmt: skip
    own = dict(_arguments(ast.unparse(module))[cls.name])
    if any(ast.unparse(b) == "BaseMomentumMethod" for b in cls.bases):
        own.update(base["BaseMomentumMethod"])
    given = _given(solo, method)
    parsed = {**base["BaseMethod"], **own}
    trainer = {flag: (None, "yaml") for flag in given if flag not in parsed}  # e.g. max_epochs
    recipe: dict[str, Any] = {}
    for flag, (default, kind) in {**parsed, **trainer}.items():
        value = default
        if flag in given:  # a switch, or its values
            value = _typed(given[flag], kind, default) if given[flag] else True
        if flag in own:
            recipe[f"method_kwargs.{flag}"] = _scaled(flag, value)
        elif flag in SWITCHES and SWITCHES[flag][0] in RECIPE_KEYS:
            key, on = SWITCHES[flag]
            if key == "optimizer.name":  # --lars wraps --optimizer sgd
                continue
            recipe[key] = on if value else False
        elif FLAG_KEYS.get(flag) in RECIPE_KEYS:
            recipe[FLAG_KEYS[flag]] = value
    if given.get("lars") is not None:
        recipe["optimizer.name"] = "lars"
    return recipe


# ------------------------------------------------------------------------------ ours
def _at(cfg: dict, key: str) -> Any:
    node: Any = cfg
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def shipped_recipe(name: str) -> dict[str, Any]:
    """The shipped config's recipe keys, completed as a run completes them (method defaults of
    the installed solo-learn included)."""
    cfg = prepare(str(FMNIST / f"{name}.yaml")).cfg
    ours = {key: _at(cfg, key) for key in RECIPE_KEYS}
    ours["backbone.kwargs.zero_init_residual"] = bool(ours["backbone.kwargs.zero_init_residual"])
    ours.update({f"method_kwargs.{k}": v for k, v in cfg["method_kwargs"].items()})
    return ours


def differences(solo: dict[str, Any], ours: dict[str, Any], method: str) -> dict[str, tuple]:
    """{key: (solo-learn's, ours)} over the keys the run reads: LARS options only under LARS,
    warm-up keys only under warm-up, method arguments the installed solo-learn reads."""
    read = {f"method_kwargs.{k}" for k in baseline_defaults(method, API)}
    skip = set(LARS_ONLY) if ours["optimizer.name"] != "lars" else set()
    skip |= set(WARMUP_ONLY) if ours["scheduler.name"] != "warmup_cosine" else set()
    keys = (set(solo) | set(ours)) - skip
    keys = {k for k in keys if not k.startswith("method_kwargs.") or k in read}
    return {k: (solo.get(k), ours.get(k)) for k in sorted(keys) if solo.get(k) != ours.get(k)}


# ------------------------------------------------------------------------------ the docs
def _rows(table_head: str) -> list[list[str]]:
    """The cells of the rows of the table under ``table_head`` in fairness.md's section."""
    text = FAIRNESS.read_text()
    section = text[text.index(SECTION) :]
    section = section[: section.find("\n## ")]
    lines = section[section.index(table_head) :].splitlines()[2:]
    rows = []
    for line in lines:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def _value(text: str) -> Any:
    return yaml.safe_load(text.strip())


def documented_shared() -> dict[str, tuple]:
    return {
        re.fullmatch(r"`([\w.]+)`", key).group(1): (_value(solo), _value(here))
        for key, solo, here in _rows("| key | solo-learn 1.0.2 | every row here |")
    }


def documented_per_baseline() -> dict[str, dict[str, tuple]]:
    out = {}
    for row in _rows("| baseline | differs from solo-learn 1.0.2's recipe |"):
        name = re.fullmatch(r"`(\w+)`", row[0]).group(1)
        entries = re.findall(r"`([\w.]+)`: ([^;]+?) -> ([^;]+)", row[1])
        assert entries or row[1] == "nothing", row
        out[name] = {key: (_value(solo), _value(here)) for key, solo, here in entries}
    return out


# ------------------------------------------------------------------------------ tests
def test_every_cifar_script_of_solo_1_0_2_has_a_shipped_config_and_one_row(solo_102):
    methods = set(_scripts(solo_102))
    assert set(CONFIGS) == methods
    assert set(documented_per_baseline()) == methods


@pytest.mark.parametrize("name", CONFIGS)
def test_config_differs_from_solos_recipe_exactly_where_fairness_md_says(name, solo_102):
    solo = solo_recipe(solo_102, name)
    found = differences(solo, shipped_recipe(name), name)
    assert found == {**documented_shared(), **documented_per_baseline()[name]}


@pytest.mark.parametrize("name", CONFIGS)
def test_config_keeps_solos_loss_hyper_parameters(name, solo_102):
    """Every method argument that is not a head width is solo-learn's value (temperatures, loss
    weights, queue sizes, momentum schedule, Sinkhorn and k-means settings), bar the ones
    fairness.md lists; the widths are solo-learn's scaled by the one rule of every row."""
    read = {f"method_kwargs.{k}" for k in baseline_defaults(name, API)}
    listed = documented_per_baseline()[name]
    solo = {k: v for k, v in solo_recipe(solo_102, name).items() if k in read - set(listed)}
    ours = shipped_recipe(name)
    assert solo and {k: ours[k] for k in solo} == solo


@pytest.mark.parametrize("name", CONFIGS)
def test_every_row_has_simclrs_views_and_a_weak_view_where_solos_has_one(name, solo_102):
    """The augmentation of every row is simclr.yaml's; a view solo-learn's recipe leaves without
    colour jitter (every strength 0) is that view without it (ReSSL's teacher)."""
    shared = yaml.safe_load((FMNIST / "simclr.yaml").read_text())["augmentations"]
    (entry,) = shared
    given = _given(solo_102, name)
    pipelines = max(len(given.get(f, [0])) for f in COLOUR)
    weak = [all(float(given.get(f, ["1"] * pipelines)[i]) == 0 for f in COLOUR)
            for i in range(pipelines)]  # fmt: skip
    expected = shared
    if any(weak):
        one = {**entry, "num_crops": 1}
        expected = [
            {**one, "color_jitter": {**one["color_jitter"], "prob": 0.0}} if w else one
            for w in weak
        ]
    assert yaml.safe_load((FMNIST / f"{name}.yaml").read_text())["augmentations"] == expected


def test_a_deviation_from_solos_recipe_is_found():
    """The comparison sees a changed loss weight, a width off the rule and a LARS option."""
    solo = {"method_kwargs.lamb": 0.0051, "method_kwargs.proj_hidden_dim": 256,
            "optimizer.name": "lars", "optimizer.eta_lars": 0.02, "scheduler.name": "cosine"}  # fmt: skip
    ours = {**solo, "method_kwargs.lamb": 0.01, "method_kwargs.proj_hidden_dim": 512,
            "optimizer.eta_lars": 0.001}  # fmt: skip
    assert differences(solo, ours, "barlow_twins") == {
        "method_kwargs.lamb": (0.0051, 0.01),
        "method_kwargs.proj_hidden_dim": (256, 512),
        "optimizer.eta_lars": (0.02, 0.001),
    }
    assert _scaled("method_kwargs.num_prototypes", [3000, 3000]) == [750, 750]
    assert _scaled("method_kwargs.queue_size", 65536) == 65536
