"""The configuration reference (docs/configuration.md) is what the code says: the committed page
equals the generator's output, every key and argument has a meaning, and the checks behind that
catch a missing, stale or mistyped entry."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from solo_hyper.cli import reference
from solo_hyper.config import pretrain, robust

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
