"""The public API documents its parameters in one style (Google's): every parameter of every
public function and class (the packages' ``__all__``) is an entry of an ``Args:`` section (a
dataclass's fields: of ``Attributes:``), and every ``Args:`` entry names a parameter that exists,
so a renamed or added argument fails here rather than misleading a reader.

A class's parameters are its constructor's (a dataclass's fields); it may document them in its
own docstring, its ``__init__``'s, or those of the package's classes it derives from (the shared
arguments of the objectives are documented once, on their base).
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass

from solo_hyper.cli.reference import section_entries

# the packages whose ``__all__`` is the library's public API, and the modules of their layers
# that list their own (the losses' functions, solo-learn's glue, the statistics of the tables)
PUBLIC = (
    "solo_hyper", "solo_hyper.attacks", "solo_hyper.callbacks", "solo_hyper.config",
    "solo_hyper.distributed", "solo_hyper.geometry", "solo_hyper.heads", "solo_hyper.losses",
    "solo_hyper.methods", "solo_hyper.objectives", "solo_hyper.pretrained", "solo_hyper.sgld",
    "solo_hyper.solo",
    "solo_hyper.config.shipped", "solo_hyper.losses.contrastive", "solo_hyper.losses.ebclr",
    "solo_hyper.losses.infonce", "solo_hyper.losses.robust",
    "solo_hyper.solo.adapter", "solo_hyper.solo.baselines", "solo_hyper.solo.compat",
    "solo_hyper.solo.main_cfg", "solo_hyper.evaluation.outputs", "solo_hyper.evaluation.stats",
)  # fmt: skip


def ours(obj: object) -> bool:
    return getattr(obj, "__module__", "").startswith("solo_hyper")


def public_objects() -> dict[str, object]:
    """Every function and class of this package exported by a PUBLIC ``__all__``, once."""
    found: dict[str, object] = {}
    for name in PUBLIC:
        module = importlib.import_module(name)
        for symbol in module.__all__:
            obj = getattr(module, symbol)
            if (inspect.isfunction(obj) or inspect.isclass(obj)) and ours(obj):
                found.setdefault(f"{obj.__module__}.{obj.__qualname__}", obj)
    return found


def docstrings(obj: object) -> list[str]:
    """A function's docstring; a class's and its ``__init__``'s, along this package's bases."""
    if not inspect.isclass(obj):
        return [obj.__doc__ or ""]
    out = []
    for cls in (c for c in obj.__mro__ if ours(c)):
        doc = cls.__dict__.get("__doc__") or ""
        # a dataclass without a docstring gets its signature as one: that documents nothing
        out.append("" if doc.startswith(f"{cls.__name__}(") else doc)
        init = cls.__dict__.get("__init__")
        out.append(getattr(init, "__doc__", None) or "")
    return out


def parameters(obj: object) -> list[str]:
    """The names a caller passes: a function's, or the constructor's of a class whose
    ``__init__`` this package writes (a dataclass's fields included)."""
    if inspect.isclass(obj):
        owner = next((c for c in obj.__mro__ if "__init__" in c.__dict__), object)
        if not ours(owner):
            return []
    return list(inspect.signature(obj).parameters)


def undocumented(obj: object) -> list[str]:
    """The parameters that no ``Args:`` or ``Attributes:`` entry documents."""
    listed = {entry for doc in docstrings(obj) for section in ("Args", "Attributes")
              for entry in section_entries(doc, section)}  # fmt: skip
    return [p for p in parameters(obj) if p not in listed]


def stale_args(obj: object) -> list[str]:
    """``Args:`` entries of the object's own docstrings that are not its parameters."""
    own = docstrings(obj)[:2] if inspect.isclass(obj) else docstrings(obj)
    names = set(parameters(obj))
    return [entry for doc in own for entry in section_entries(doc, "Args") if entry not in names]


def test_the_public_api_is_found():
    objects = public_objects()
    assert len(objects) > 100
    assert "solo_hyper.losses.modules.HyperbolicInfoNCELoss" in objects
    assert "solo_hyper.objectives.contrastive.HCLArgs" in objects


def test_every_public_parameter_has_an_args_entry():
    missing = {name: params for name, obj in public_objects().items() if (params := undocumented(obj))}
    assert not missing, "parameters without an Args: entry:\n" + "\n".join(
        f"  {name}: {params}" for name, params in sorted(missing.items())
    )


def test_every_args_entry_is_a_parameter():
    stale = {name: entries for name, obj in public_objects().items() if (entries := stale_args(obj))}
    assert not stale, "Args: entries that name no parameter:\n" + "\n".join(
        f"  {name}: {entries}" for name, entries in sorted(stale.items())
    )


def test_the_checks_catch_an_unnamed_parameter_and_a_stale_entry():
    def documented(alpha: int, beta: int) -> int:
        """Adds alpha and beta (named in prose: not an entry).

        Args:
            alpha: the first.
            gamma: a parameter that was renamed.
        """
        return alpha + beta

    assert undocumented(documented) == ["beta"]
    assert stale_args(documented) == ["gamma"]

    class Base:
        """Base.

        Args:
            shared: named once, here.
        """

        def __init__(self, shared: int) -> None:
            self.shared = shared

    class Child(Base):
        def __init__(self, shared: int, own: int) -> None:
            super().__init__(shared)

    Base.__module__ = Child.__module__ = "solo_hyper.example"
    assert undocumented(Child) == ["own"]
    assert stale_args(Base) == [] and stale_args(Child) == []

    @dataclass
    class Fields:
        size: int = 1
        kind: str = "a"

    Fields.__module__ = "solo_hyper.example"
    assert undocumented(Fields) == ["size", "kind"]  # the generated "Fields(size: ...)" is no doc
    Fields.__doc__ = """Fields.

    Attributes:
        size: documented.
    """
    assert undocumented(Fields) == ["kind"]
