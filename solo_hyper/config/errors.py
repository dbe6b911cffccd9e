"""The error every config check raises, and the closest-name hint of its messages."""

from __future__ import annotations

import difflib


class ConfigError(ValueError):
    """A config that cannot run; the message says what to change."""


def closest(name: str, choices) -> str:
    """The hint of a message about an unknown name.

    Args:
        name: the name given.
        choices: the valid names.

    Returns:
        ``' (did you mean X?)'`` for the closest valid name X, or '' when none is close.
    """
    match = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=0.5)
    return f" (did you mean {match[0]!r}?)" if match else ""
