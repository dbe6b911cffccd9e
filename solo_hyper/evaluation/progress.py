"""A progress bar for the long loops outside Lightning (feature extraction, attacks)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from tqdm.auto import tqdm


class Progress:
    """``loader`` that draws a tqdm bar on stderr while it is iterated (``enabled=False``: none).

    Other attributes (``dataset``, ``num_workers``, ...) are the loader's own.
    """

    def __init__(self, loader: Iterable, desc: str, enabled: bool = True) -> None:
        self.loader, self.desc, self.enabled = loader, desc, enabled

    def __iter__(self) -> Iterator:
        total = len(self.loader) if hasattr(self.loader, "__len__") else None
        yield from tqdm(
            self.loader, desc=self.desc, total=total, leave=False, disable=not self.enabled,
            dynamic_ncols=True,
        )  # fmt: skip

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)
