"""robust-eval's cache: trained heads (fine-tuned classifiers) and each attack's accuracy, per
model and attack, in ``<out>/cache/``.

Why: one AutoAttack evaluation of one model costs CPU-hours; a campaign stopped half-way must
keep what it finished, and a later config that adds or removes an attack must not redo the
others. Each entry's file name carries a hash of everything its number depends on (the
checkpoint, the evaluation data and seed, the head's training section, the attack, the
evaluation subset), so a changed setting misses the cache instead of reading a stale number.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from solo_hyper.run.identity import save_torch_atomic, write_json_atomic


def describe(spec: Any) -> dict:
    """An attack spec (a dataclass) as JSON-ready data, its type included."""
    return {"type": type(spec).__name__, **dataclasses.asdict(spec)}


class EvaluationCache:
    """Entries of one evaluated run, keyed by ``identity`` (what every entry depends on) and
    the entry's own parts."""

    def __init__(self, folder: Path, identity: dict) -> None:
        self.folder = Path(folder)
        self.identity = identity

    def path(self, kind: str, parts: dict, suffix: str) -> Path:
        text = json.dumps({**self.identity, **parts}, sort_keys=True, default=str)
        return self.folder / f"{kind}-{hashlib.sha256(text.encode()).hexdigest()[:16]}{suffix}"

    def json(
        self, kind: str, parts: dict, compute: Callable[[], dict], required: tuple[str, ...] = ()
    ) -> dict:
        """The stored entry, or ``compute()``'s, stored before it is returned; a stored entry
        without every ``required`` key (made before the key existed) is computed again."""
        path = self.path(kind, parts, ".json")
        if path.is_file():
            stored = json.loads(path.read_text())
            if all(key in stored for key in required):
                return stored
        value = compute()
        write_json_atomic(path, value)
        return value

    def load_torch(self, kind: str, parts: dict) -> Any | None:
        import torch

        path = self.path(kind, parts, ".pt")
        return torch.load(path, map_location="cpu", weights_only=False) if path.is_file() else None

    def save_torch(self, kind: str, parts: dict, value: Any) -> None:
        save_torch_atomic(self.path(kind, parts, ".pt"), value)
