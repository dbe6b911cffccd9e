"""The configuration reference, ``docs/configuration.md``, made from the code.

Every key of the config schemas with its type, default and meaning (the description tables beside
the defaults: ``config.pretrain.DESCRIPTIONS``, ``evaluation.linear.LINEAR_DESCRIPTIONS``,
``config.robust.ROBUST_DESCRIPTIONS``), every plugin method's arguments (its objective's
``Args`` dataclass: field types and defaults, meanings from the ``Attributes:`` section of the
docstrings along its bases), and the ``method_kwargs`` this plugin passes to solo-learn's bundled
baselines (``solo.baselines``). One source: the page is printed, never written by hand.

``python -m solo_hyper.cli.reference > docs/configuration.md`` writes it in solo-learn 1.0.2's
environment (Lightning 1.9's Trainer keys; ``--trainer-keys`` in solo-learn main's prints the table
of Lightning 2's for docs/solo-main.md); the command exits with 1 and lists what is missing when a
key or an argument has no meaning. The schemas (and with the linear one, solo-learn) are imported
only when the page is made.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

COMMAND = "python -m solo_hyper.cli.reference > docs/configuration.md"
ENTRY = "<i>"  # the index of a list entry in a dotted key (augmentations.<i>.crop_size)
# the words a declared type must contain to hold a default of each Python type
TYPE_WORDS = {bool: ("bool",), int: ("int",), float: ("float",), str: ("str", "path"),
              list: ("list",), dict: ("mapping",)}  # fmt: skip


@dataclass(frozen=True)
class Section:
    """One config schema on the page: its title, the commands that read it, its defaults, its
    free-form paths (one row each) and its description table (dotted key -> (type, meaning))."""

    title: str
    intro: str
    defaults: Mapping[str, Any]
    free_form: Iterable[tuple[str, ...]]
    descriptions: Mapping[str, tuple[str, str]]


def sections() -> list[Section]:
    """The three config schemas, imported here (the linear one loads solo-learn)."""
    from solo_hyper.config import pretrain, robust
    from solo_hyper.evaluation import linear

    return [
        Section(
            "Pretraining", "`pretrain --config FILE`, and every run of `compare`, `sweep` and "
            "`reproduce`; shipped configs under `configs/pretrain/<dataset>/` (EBCLR's official "
            "settings under `configs/ebclr/`, HCL in other geometries under `configs/geometry/`; "
            "solo-learn main's own Hydra configs, another schema, under `configs/solo-main/`: "
            "docs/solo-main.md).",
            pretrain.PRETRAIN.defaults, pretrain.PRETRAIN.free_form, pretrain.DESCRIPTIONS,
        ),
        Section(
            "Linear evaluation", "`linear --checkpoint RUN [--config FILE]` (default: "
            "`configs/linear/<dataset>.yaml`), and the linear evaluation of `compare`, `sweep` "
            "and `reproduce` (`--linear-config`).",
            linear.LINEAR.defaults, linear.LINEAR.free_form, linear.LINEAR_DESCRIPTIONS,
        ),
        Section(
            "Robustness evaluation", "`robust-eval` and `finetune-adv --checkpoint RUN [--config "
            "FILE]` (default: `configs/robust/<dataset>.yaml`), and `reproduce`'s robust tables "
            "(`--robust-set`).",
            robust.ROBUST.defaults, robust.ROBUST.free_form, robust.ROBUST_DESCRIPTIONS,
        ),
    ]  # fmt: skip


# ------------------------------------------------------------------------------------ keys
def dotted_keys(
    defaults: Mapping[str, Any], free_form: Iterable[tuple[str, ...]] = (),
    prefix: tuple[str, ...] = (),
) -> list[tuple[str, Any]]:  # fmt: skip
    """(dotted key, default) of every key of a defaults tree, in its order: mappings are entered
    (except free-form and empty ones, one row each), a list of mappings has a row of its own and
    its first entry's keys under ``<i>``."""
    free = {tuple(p) for p in free_form}
    rows: list[tuple[str, Any]] = []
    for key, value in defaults.items():
        path = (*prefix, key)
        if isinstance(value, dict) and value and path not in free:
            rows += dotted_keys(value, free, path)
            continue
        rows.append((".".join(path), value))
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            rows += dotted_keys(value[0], free, (*path, ENTRY))
    return rows


def type_problem(key: str, declared: str, default: Any) -> str | None:
    """Why a declared type cannot hold its default (None: it can): a null default needs "null"
    or "required" in the type, any other default a word of its own type (``TYPE_WORDS``)."""
    if default is None:
        ok = "null" in declared or "required" in declared
        return None if ok else f"{key}: default null, but the type {declared!r} does not say null"
    words = TYPE_WORDS.get(type(default), ())
    if words and not any(w in declared for w in words):
        return f"{key}: the default {default!r} is a {words[0]}, the type says {declared!r}"
    return None


def description_problems(section: Section) -> list[str]:
    """A section's keys without a (type, meaning), meanings of keys that do not exist, and
    declared types that cannot hold their default."""
    keys = dict(dotted_keys(section.defaults, section.free_form))
    table = section.descriptions
    out = [f"{section.title}: {k} has no description" for k in keys if not _meaning(table.get(k))]
    out += [f"{section.title}: {k} is described but is not a key" for k in table if k not in keys]
    for key, (declared, _) in ((k, v) for k, v in table.items() if k in keys):
        problem = type_problem(key, declared, keys[key])
        if problem:
            out.append(f"{section.title}: {problem}")
    return out


def _meaning(entry: tuple[str, str] | None) -> bool:
    return bool(entry) and all(isinstance(s, str) and s.strip() for s in entry)


# ------------------------------------------------------------------------------ trainer keys
def passed_trainer_keys(names: Iterable[str]) -> list[str]:
    """The Trainer arguments among ``names`` (the installed Lightning's) that a pretraining config
    passes through as written: not refused (``trainer_keys.REFUSED``), not one of the config's
    own keys (those with a default, described with the schema)."""
    from solo_hyper.config.pretrain import DEFAULTS
    from solo_hyper.config.trainer_keys import REFUSED

    return sorted(set(names) - set(REFUSED) - set(DEFAULTS))


def installed_trainer() -> tuple[str, set[str]]:
    """The installed Lightning's version and Trainer argument names (the adapter's)."""
    from solo_hyper.solo import adapter

    return adapter.LIGHTNING.__version__, adapter.trainer_arg_names()


def trainer_problems(names: Iterable[str]) -> list[str]:
    """Passed-through Trainer arguments without a (type, meaning)."""
    from solo_hyper.config.trainer_keys import DESCRIPTIONS

    return [f"Trainer keys: {k} has no description" for k in passed_trainer_keys(names)
            if not _meaning(DESCRIPTIONS.get(k))]  # fmt: skip


def trainer_table(names: Iterable[str]) -> list[str]:
    """The table of the Trainer arguments a pretraining config passes through, of ``names``."""
    from solo_hyper.config.trainer_keys import DESCRIPTIONS

    rows = [(f"`{k}`", *DESCRIPTIONS.get(k, ("", ""))) for k in passed_trainer_keys(names)]
    return table(("key", "type", "meaning"), rows)


def trainer_markdown(version: str, names: Iterable[str]) -> list[str]:
    from solo_hyper.config.trainer_keys import REFUSED

    refused = [(f"`{k}`", why) for k, why in REFUSED.items() if k in set(names)]
    return [
        "### Lightning Trainer keys", "",
        f"Lightning {version}'s Trainer arguments (solo-learn 1.0.2's environment) that a "
        "pretraining config passes to the Trainer as written, besides those above: absent ones "
        "take Lightning's defaults. solo-learn main's Lightning 2 has its own set "
        "([docs/solo-main.md](solo-main.md#lightning-2s-trainer-keys)).", "",
        *trainer_table(names), "",
        "A config that gives one of these Trainer arguments is refused, with what to set instead:",
        "", *table(("key", "why"), refused), "",
    ]  # fmt: skip


# ------------------------------------------------------------------------------ docstrings
def parse_attributes(doc: str | None) -> dict[str, str]:
    """The ``Attributes:`` section of a Google-style docstring (``section_entries``)."""
    return section_entries(doc, "Attributes")


def section_entries(doc: str | None, title: str) -> dict[str, str]:
    """A section of a Google-style docstring (``Args``, ``Attributes``, ...): name -> meaning on
    one line (continuation lines, indented deeper, joined); empty when there is none."""
    found: dict[str, str] = {}
    lines = inspect.cleandoc(doc or "").splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == f"{title}:")
    except StopIteration:
        return found
    indent, name = None, None
    for line in lines[start + 1:]:
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        if indent is None:
            indent = depth
        if depth < indent or depth == 0:
            break
        match = re.match(r"(\w+)(?: \([^)]*\))?: ?(.*)$", line.strip())
        if depth == indent and match:
            name = match.group(1)
            found[name] = match.group(2).strip()
        elif name is not None:
            found[name] = f"{found[name]} {line.strip()}".strip()
    return found


def attribute_meanings(cls: type) -> dict[str, str]:
    """Each attribute's meaning from the nearest class of the MRO whose docstring has it."""
    meanings: dict[str, str] = {}
    for base in reversed(cls.__mro__):
        meanings.update(parse_attributes(base.__dict__.get("__doc__")))
    return meanings


def args_problems(name: str, args: type) -> list[str]:
    meanings = attribute_meanings(args)
    return [f"method {name}: {args.__name__}.{f.name} has no meaning in an Attributes: section"
            for f in dataclasses.fields(args) if not meanings.get(f.name)]  # fmt: skip


def summary(obj: Any) -> str:
    """The first paragraph of an object's docstring, on one line."""
    doc = inspect.cleandoc(obj.__doc__ or "")
    return markdown_text(doc.split("\n\n")[0])


def markdown_text(text: str) -> str:
    """Docstring prose on one line, its reST literals as Markdown code, no closing period."""
    return " ".join(text.replace("``", "`").split()).removesuffix(".")


# ------------------------------------------------------------------------------- markdown
def value_text(value: Any) -> str:
    """A default as YAML writes it, shortened to 6 significant digits where repr is long."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        text = repr(value)
        return text if len(text) <= 10 else f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(value_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {value_text(v)}" for k, v in value.items()) + "}"
    return str(value)


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def table(header: tuple[str, ...], rows: Iterable[tuple[str, ...]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]


def default_cell(value: Any) -> str:
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return f"{len(value)} entry, keys below" if len(value) == 1 else f"{len(value)} entries"
    return f"`{value_text(value)}`"


def schema_markdown(section: Section) -> list[str]:
    rows = []
    for key, default in dotted_keys(section.defaults, section.free_form):
        declared, meaning = section.descriptions.get(key, ("", ""))
        rows.append((f"`{key}`", declared, default_cell(default), meaning))
    return [f"## {section.title}", "", section.intro, "",
            *table(("key", "type", "default", "meaning"), rows), ""]  # fmt: skip


def read_with(field: str, args: type) -> str:
    """Where a method argument is read only under some geometries (``heads.GEOMETRY_ONLY_ARGS``,
    for methods with a ``geometry``), the words that say which; else empty."""
    from solo_hyper.heads import GEOMETRY_ONLY_ARGS

    has_geometry = "geometry" in {f.name for f in dataclasses.fields(args)}
    if not has_geometry or field not in GEOMETRY_ONLY_ARGS:
        return ""
    return "read only with geometry " + " | ".join(GEOMETRY_ONLY_ARGS[field]) + ": "


def method_markdown(name: str, objective: type) -> list[str]:
    args = objective.Args
    meanings = attribute_meanings(args)
    rows = [(f"`{f.name}`", str(f.type).replace("None", "null"), f"`{value_text(f.default)}`",
             read_with(f.name, args) + markdown_text(meanings.get(f.name, "")))
            for f in dataclasses.fields(args)]  # fmt: skip
    return [f"### `{name}`: {objective.__name__} (`{args.__name__}`)", "", summary(objective), "",
            *table(("key", "type", "default", "meaning"), rows), ""]  # fmt: skip


def baseline_markdown(entry: Any) -> list[str]:
    from solo_hyper.solo.baselines import VERSION, baseline_defaults

    apis = entry.apis
    by_api = {api: baseline_defaults(entry.name, api) for api in apis}
    keys = list(dict.fromkeys(k for api in apis for k in by_api[api]))
    rows = [(f"`{k}`", *(f"`{value_text(by_api[a][k])}`" if k in by_api[a] else "(not read)"
                          for a in apis)) for k in keys]  # fmt: skip
    versions = " and ".join(VERSION[a] for a in apis)
    note = f", {entry.note}" if entry.note else ""
    lines = [f"### `{entry.name}`: {entry.solo_class} (solo-learn {versions}{note})", "",
             *table(("key", *(f"solo-learn {VERSION[a]}" for a in apis)), rows), ""]  # fmt: skip
    if entry.checks:
        lines += ["Checked before any work: " + "; ".join(summary(c) for c in entry.checks), ""]
    return lines


HEADER = f"""# Configuration reference

<!-- Made by `{COMMAND}` from the code; do not edit (a test checks it is current). -->

Every command reads one config: its defaults, then a YAML file (`--config FILE`), then
`dotted.key=value` overrides on the command line (`optimizer.lr=0.5`, `augmentations.0.crop_size=28`).
The keys are checked against the defaults and, in a pretraining config, the Lightning Trainer keys
listed below (an unknown key is refused with the closest name), and the values before any work
starts. `<i>` in a key is the index of a list entry; a key of type
`mapping` is one row, whose meaning says what its entries may be.
"""


def reference() -> str:
    """The whole page."""
    from solo_hyper.objectives import OBJECTIVES
    from solo_hyper.solo.baselines import BASELINES

    lines = [HEADER]
    for i, section in enumerate(sections()):
        lines += schema_markdown(section)
        if i == 0:  # the pretraining config's Trainer keys
            lines += trainer_markdown(*installed_trainer())
    lines += ["## Method arguments (`method_kwargs`)", "",
              "A plugin method's `method_kwargs` are its objective's `Args` dataclass "
              "(`solo_hyper.objectives`); a plain PyTorch loop passes the same dataclass to the "
              "objective. Absent keys take these defaults; the values are checked before any work.",
              ""]  # fmt: skip
    for name, objective in OBJECTIVES.items():
        lines += method_markdown(name, objective)
    lines += ["## solo-learn's baselines", "",
              "The `method_kwargs` this plugin passes to solo-learn's own methods: solo-learn's "
              "published CIFAR hyperparameters (1.0.2's `bash_files/pretrain/cifar/<method>.sh`, "
              "main's `scripts/pretrain/cifar/<method>.yaml`), the keys each version's method "
              "reads; solo-learn documents their meaning. A config's `method_kwargs` override "
              "them.", ""]  # fmt: skip
    for entry in BASELINES.values():
        lines += baseline_markdown(entry)
    return "\n".join(lines).rstrip("\n") + "\n"


def problems() -> list[str]:
    """Everything the page would leave without a meaning; empty when it is complete."""
    from solo_hyper.objectives import OBJECTIVES

    out = [p for section in sections() for p in description_problems(section)]
    out += trainer_problems(installed_trainer()[1])
    return out + [p for name, obj in OBJECTIVES.items() for p in args_problems(name, obj.Args)]


def main(argv: list[str] | None = None) -> int:
    """The page on stdout (1 and what is missing on stderr when a key has no meaning), made in
    solo-learn 1.0.2's environment; ``--trainer-keys``: only the table of the installed
    Lightning's Trainer keys (solo-learn main's environment: docs/solo-main.md's table)."""
    from solo_hyper.solo import adapter

    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--trainer-keys"]:
        missing = trainer_problems(installed_trainer()[1])
        text = "\n".join(trainer_table(installed_trainer()[1])) + "\n"
    elif argv:
        print(f"usage: {COMMAND}\n       python -m solo_hyper.cli.reference --trainer-keys",
              file=sys.stderr)  # fmt: skip
        return 2
    elif adapter.API_VERSION != "v1":
        print(f"the configuration reference is made in solo-learn 1.0.2's environment (found "
              f"{adapter.API}); this one's Trainer keys: --trainer-keys", file=sys.stderr)  # fmt: skip
        return 2
    else:
        missing, text = problems(), reference()
    if missing:
        print("the configuration reference is incomplete:\n  " + "\n  ".join(missing),
              file=sys.stderr)  # fmt: skip
        return 1
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
