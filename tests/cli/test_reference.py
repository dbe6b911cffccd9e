"""The configuration reference (docs/configuration.md) is what the code says: the committed page
equals the generator's output, every key and argument has a meaning, and the checks behind that
catch a missing, stale or mistyped entry."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from solo_hyper import objectives
from solo_hyper.cli import reference
from solo_hyper.config import ConfigError, pretrain, robust
from solo_hyper.geometry import GEOMETRIES

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "configuration.md"


def test_the_committed_page_is_what_the_code_prints():
    assert PAGE.read_text() == reference.reference(), (
        f"docs/configuration.md is stale: regenerate it with `{reference.COMMAND}`"
    )


def test_every_key_and_argument_has_a_meaning():
    assert reference.problems() == []


def test_the_page_lists_every_schema_key_method_argument_and_baseline():
    text = PAGE.read_text()
    for section in reference.sections():
        for key, _ in reference.dotted_keys(section.defaults, section.free_form):
            assert f"| `{key}` |" in text
    for name in ("hcl", "shcl", "rhcl", "rocl", "ebclr", "supervised", "simclr", "mae"):
        assert f"### `{name}`:" in text
    assert "| `sgld_grad_clamp` | float | `1.0` |" in text
    assert "| `warmup_teacher_temperature_epochs` | `50` | `0` |" in text  # 1.0.2 vs main


def test_a_key_without_meaning_or_a_stale_meaning_is_reported(monkeypatch):
    monkeypatch.delitem(pretrain.DESCRIPTIONS, "optimizer.lr")
    monkeypatch.setitem(robust.ROBUST_DESCRIPTIONS, "linear.gone", ("int", "a removed key"))
    monkeypatch.setitem(robust.ROBUST_DESCRIPTIONS, "seed", ("int", " "))
    found = reference.problems()
    assert "Pretraining: optimizer.lr has no description" in found
    assert "Robustness evaluation: linear.gone is described but is not a key" in found
    assert "Robustness evaluation: seed has no description" in found


def test_a_declared_type_that_cannot_hold_its_default_is_reported():
    section = reference.Section(
        "T", "", {"a": 1, "b": None, "c": "runs", "d": [1], "e": {"f": 0.5}}, (),
        {"a": ("float", "x"), "b": ("int", "x"), "c": ("path", "x"), "d": ("list[int]", "x"),
         "e.f": ("float", "x")},
    )  # fmt: skip
    found = reference.description_problems(section)
    assert found == [
        "T: a: the default 1 is a int, the type says 'float'",
        "T: b: default null, but the type 'int' does not say null",
    ]


def test_dotted_keys_enter_mappings_but_not_free_form_ones_and_describe_list_entries():
    defaults = {"a": {"b": 1, "free": {"x": 1}, "empty": {}}, "crops": [{"size": 2, "n": {"k": 3}}]}
    assert reference.dotted_keys(defaults, {("a", "free")}) == [
        ("a.b", 1), ("a.free", {"x": 1}), ("a.empty", {}),
        ("crops", [{"size": 2, "n": {"k": 3}}]), ("crops.<i>.size", 2), ("crops.<i>.n.k", 3),
    ]  # fmt: skip


@dataclass(frozen=True)
class _Base:
    """Base.

    Attributes:
        x: the first,
            continued here.
        y (int): the second.

    Returns:
        not an attribute: ignored.
    """

    x: int = 0
    y: int = 1


@dataclass(frozen=True)
class _Child(_Base):
    """Child.

    Attributes:
        y: redefined.
        z: new.
    """

    z: int = 2


def test_attributes_sections_are_read_along_the_bases():
    assert reference.parse_attributes(_Base.__doc__) == {
        "x": "the first, continued here.", "y": "the second.",
    }  # fmt: skip
    assert reference.attribute_meanings(_Child) == {
        "x": "the first, continued here.", "y": "redefined.", "z": "new.",
    }  # fmt: skip
    assert reference.args_problems("m", _Child) == []

    @dataclass(frozen=True)
    class Undocumented(_Child):
        w: int = 3

    assert reference.args_problems("m", Undocumented) == [
        "method m: Undocumented.w has no meaning in an Attributes: section"
    ]


def test_defaults_are_written_as_yaml():
    assert [reference.value_text(v) for v in (None, True, 1e-4, 8 / 255, float("inf"), "8/255")] == [
        "null", "true", "0.0001", "0.0313725", ".inf", "8/255",
    ]  # fmt: skip
    assert reference.value_text({"a": [1, None]}) == "{a: [1, null]}"
    assert reference.cell("a | b") == "a \\| b"


def test_the_command_prints_the_page():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "solo_hyper.cli.reference"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == PAGE.read_text()


# ------------------------------------------------------------- the page against the loader
def page_tables(text: str, heading: str) -> dict[str, list[str]]:
    """Key -> the other cells, of every ``| key | type | ...`` table under a heading of the page
    (up to the next heading of its level or above)."""
    level = heading.split(" ")[0]
    lines = text.split(heading + "\n", 1)[1].splitlines()
    rows: dict[str, list[str]] = {}
    in_table = False
    for line in lines:
        if line.startswith("#") and len(line.split(" ")[0]) <= len(level):
            break
        if line.startswith("| key | type |"):
            in_table = True
        elif not line.startswith("|"):
            in_table = False
        elif in_table and line.startswith("| `"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            rows[cells[0].strip("`")] = cells[1:]
    return rows


def test_the_pretraining_keys_listed_are_exactly_those_the_loader_accepts():
    """Every top-level key of the page's pretraining tables (the schema's and the installed
    Lightning's Trainer keys) is accepted by the loader, and every Trainer argument it does not
    list is refused: those of ``trainer_keys.REFUSED`` with what to set instead."""
    from solo_hyper.config.trainer_keys import REFUSED
    from solo_hyper.solo import adapter

    listed = {key.split(".")[0] for key in page_tables(PAGE.read_text(), "## Pretraining")}
    names = adapter.trainer_arg_names()
    assert set(reference.passed_trainer_keys(names)) <= listed
    base = {"method": "hcl", "data": {"dataset": "fashionmnist"}}
    for key in sorted(names | set(pretrain.DEFAULTS)):
        cfg = {**base, key: base.get(key, pretrain.DEFAULTS.get(key))}
        if key in listed:
            pretrain.complete(cfg, names)
            continue
        with pytest.raises(ConfigError, match=re.escape(REFUSED[key])):
            pretrain.complete(cfg, names)


def _head_behaviour(objective: type, geometry: str, **given) -> tuple[torch.Tensor, list[str]]:
    """A head's points for fixed features, and its trainable parameters."""
    args = objective.Args(**{"proj_hidden_dim": 16, "proj_output_dim": 8, "geometry": geometry,
                             **given})  # fmt: skip
    torch.manual_seed(0)
    head = objective(args).head(12)
    x = 3 * torch.randn(5, 12, generator=torch.Generator().manual_seed(1))
    return head(x).detach(), sorted(n for n, p in head.named_parameters() if p.requires_grad)


CHANGED = {"curvature": 0.7, "learnable_curvature": True, "normalize": False, "clip_radius": 0.3}


@pytest.mark.parametrize("name", sorted(objectives.OBJECTIVES))
def test_each_method_argument_listed_is_the_methods_and_read_where_the_page_says(name):
    """A method's rows are its arguments, exactly what the loader accepts for it; an argument
    the page says is read only with some geometries changes the method's head (its points or
    its trainable parameters) under those and nothing under the others."""
    objective = objectives.OBJECTIVES[name]
    rows = page_tables(PAGE.read_text(), f"### `{name}`: {objective.__name__} (`{objective.Args.__name__}`)")
    assert list(rows) == [f.name for f in dataclasses.fields(objective.Args)]
    check = adapter_check(name)
    check({key: objective.Args.defaults()[key] for key in rows})
    with pytest.raises(ValueError, match="did you mean"):
        check({next(iter(rows)) + "x": 1})
    for key, (_, _, meaning) in rows.items():
        found = re.match(r"read only with geometry ((?:\w+ \\\| )*\w+): ", meaning)
        if key not in CHANGED:
            assert found is None, key
            continue
        assert found is not None or "geometry" not in rows, key
        reads = set(found.group(1).split(" \\| ")) if found else set(GEOMETRIES)
        for geometry in GEOMETRIES:
            points, params = _head_behaviour(objective, geometry)
            changed_points, changed_params = _head_behaviour(objective, geometry, **{key: CHANGED[key]})
            same = params == changed_params and torch.allclose(points, changed_points, atol=1e-6)
            assert same is (geometry not in reads), (name, key, geometry)


def adapter_check(name: str):
    """The loader's check of method ``name``'s ``method_kwargs``."""
    import solo_hyper.methods  # noqa: F401  (registers the methods)
    from solo_hyper.solo import adapter

    return adapter.method_info(name).check_args
