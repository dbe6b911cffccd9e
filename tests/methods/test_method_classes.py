"""One class per method, written as a class: each method of ``solo_hyper.methods`` is a class
statement in its own file under solo_hyper/methods/, named as the objective it runs (one class of
that name in each layer), and nothing there builds a class with ``type()``."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from solo.methods import METHODS

import solo_hyper.methods
from solo_hyper import objectives
from solo_hyper.methods import CLASSES

PACKAGE = Path(solo_hyper.methods.__file__).parent


def test_each_method_is_a_class_statement_in_its_own_file():
    for name, cls in CLASSES.items():
        path = Path(inspect.getsourcefile(cls))
        assert path == PACKAGE / f"{name}.py", (name, path)
        statements = [n.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef)]
        assert statements == [cls.__name__], (name, statements)
        assert getattr(solo_hyper.methods, cls.__name__) is cls and METHODS[name] is cls
        # the same name in the objectives' layer is the objective this class runs
        assert getattr(objectives, cls.__name__) is cls.OBJECTIVE is objectives.OBJECTIVES[name]


def test_no_class_is_built_with_type_under_the_methods_package():
    for path in PACKAGE.glob("*.py"):
        built = [
            node.lineno for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "type" and len(node.args) == 3
        ]  # fmt: skip
        assert not built, f"{path.name}:{built} builds a class with type(); write a class statement"
