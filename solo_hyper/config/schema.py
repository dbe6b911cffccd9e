"""A config schema: the one shape every config of the package has.

A ``Schema`` is a tree of defaults (its keys and their types by example), the paths whose values are
free-form mappings, and a value check. ``Schema.load`` is the single entry of every command:
``defaults < YAML < dotted.key=value overrides``, the keys checked (closest-name hints), the
defaults merged in, then the values checked; what comes out is complete and valid. The schemas:
``config.pretrain.PRETRAIN``, ``evaluation.linear.LINEAR``, ``config.robust.ROBUST``, and each
method's section, keys and defaults from its objective's ``Args`` dataclass (``method_schema``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from solo_hyper.config.errors import ConfigError
from solo_hyper.config.loading import check_keys, check_types, load_config, merge


@dataclass(frozen=True)
class Schema:
    """One config's shape; ``complete`` and ``load`` make a complete, checked config of it.

    Attributes:
        label: "config", "linear config", ... (in messages: "unknown <label> key ...").
        defaults: the tree of defaults: the keys, and their types by example.
        free_form: paths whose values are free-form mappings (not checked key by key).
        check: the value checks of the complete config (None: none).
        prefix: where the section sits in a larger config (for messages).
    """

    label: str
    defaults: dict[str, Any]
    free_form: frozenset[tuple[str, ...]] = field(default_factory=frozenset)
    check: Callable[[dict], None] | None = None
    prefix: tuple[str, ...] = ()

    def complete(self, given: dict, extra_top: set[str] = frozenset()) -> dict:
        """Key check, type check (numbers and switches, by the defaults' example), defaults
        merged in, value check.

        Args:
            given: the config as written.
            extra_top: further valid top-level keys (Lightning's Trainer arguments).

        Returns:
            The complete config (a new mapping).

        Raises:
            ConfigError: the first key, type or value that is wrong, with the fix.
        """
        if not isinstance(given, dict):
            where = ".".join(self.prefix) or self.label
            raise ConfigError(f"{where} must be a mapping, got {given!r}")
        check_keys(given, self.defaults, self.label, set(self.free_form), set(extra_top),
                   self.prefix)  # fmt: skip
        check_types(given, self.defaults, self.prefix)
        cfg = merge(self.defaults, given)
        if self.check is not None:
            self.check(cfg)
        return cfg

    def load(
        self, path: str | Path | None, overrides: list[str] = (), base: dict | None = None,
        extra_top: set[str] = frozenset(),
    ) -> dict:  # fmt: skip
        """Every command's entry: ``defaults < YAML < dotted.key=value overrides``, checked.

        Args:
            path: the YAML file (None: none).
            overrides: ``dotted.key=value`` strings, applied in order.
            base: the mapping under the file (None: empty).
            extra_top: further valid top-level keys (Lightning's Trainer arguments).

        Returns:
            The complete, checked config.

        Raises:
            ConfigError: an unreadable file, a malformed override, or what ``complete``
                refuses.
        """
        return self.complete(load_config(path, overrides, base), extra_top)


def method_schema(method: str, args: dict[str, Any]) -> Schema:
    """A method's ``method_kwargs`` section: ``args`` (its objective's ``Args`` defaults, or a
    baseline's published ones) are the keys and defaults; the values are checked by the
    objective's ``Args`` (``run.train.prepare``).

    Args:
        method: the method's name (in messages).
        args: the keys and their defaults.
    """
    return Schema(f"method {method!r}", dict(args), prefix=("method_kwargs",))
