"""Lightning's Trainer argument names, read from its source without importing it, so that a
config's keys are checked in a command's first seconds, before Lightning and solo-learn load
(about 8 s). The full check after they load (``run.train.prepare``) uses the installed Trainer's
own signature; this one only has to be no stricter."""

from __future__ import annotations

import ast
import importlib.util
from functools import cache
from pathlib import Path

# where each Lightning distribution keeps its Trainer, relative to its package folder
TRAINER_SOURCES = {"pytorch_lightning": "trainer/trainer.py", "lightning": "pytorch/trainer/trainer.py"}


def init_arg_names(source: Path) -> set[str]:
    """The argument names of ``Trainer.__init__`` in a Lightning source file (empty: not found)."""
    tree = ast.parse(source.read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Trainer":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    args = item.args
                    every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
                    return {a.arg for a in every} - {"self"}
    return set()


@cache
def trainer_arg_names() -> frozenset[str] | None:
    """The Trainer arguments of every installed Lightning (their union: the adapter's own check
    narrows it to the one in use), or None when no Lightning source could be read."""
    names: set[str] = set()
    for package, relative in TRAINER_SOURCES.items():
        spec = importlib.util.find_spec(package)  # finds the package without importing it
        if spec is None or spec.origin is None:
            continue
        source = Path(spec.origin).parent / relative
        if source.is_file():
            names |= init_arg_names(source)
    return frozenset(names) or None


def check_pretrain_config(path: str | None, overrides: list[str] = ()) -> None:
    """The keys and types of a pretraining config (with its overrides), before the frameworks
    load: raises the same ConfigError the full check would (no Lightning found: nothing checked
    here, the full check still runs)."""
    from solo_hyper.config.loading import load_config
    from solo_hyper.config.pretrain import complete

    names = trainer_arg_names()
    if names is not None:
        complete(load_config(path, overrides), set(names))
