"""What a run is: its resolved config (hashed), the code that ran it, and its files written safely.

A run directory is identified by the hash of its resolved config, without the keys that only say
where and how a run is stored or shown (``OPERATIONAL``): the same config in the same directory
resumes (or, finished, reports its stored results); another config there is refused, its
differences listed. ``result.json`` and ``run.json`` are written atomically (temporary file +
rename) and as strict JSON (NaN and infinities become null).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import subprocess
import tempfile
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import IO, Any

import yaml

from solo_hyper.version import __version__

# keys that do not change what a run computes: where it is stored, how it is logged or shown,
# how the data is read, where training starts from, the memory layout, compilation and the CUDA
# math modes of the step (the same values within float rounding)
OPERATIONAL = (
    ("name",), ("checkpoint",), ("auto_resume",), ("resume_from_checkpoint",), ("logger",),
    ("wandb",), ("enable_progress_bar",), ("enable_model_summary",), ("log_every_n_steps",),
    ("data", "num_workers"), ("channels_last",), ("compile",), ("tf32",), ("cudnn_benchmark",),
)  # fmt: skip
HASH_CHARS = 16


def canonical(cfg: Any) -> Any:
    """JSON-able, key-sorted copy (tuples -> lists), so that a config read back from
    config.yaml compares equal to the one it was written from."""
    return json.loads(json.dumps(cfg, sort_keys=True, default=str))


def identity_view(cfg: dict) -> dict:
    """The resolved config without the OPERATIONAL keys."""
    out = canonical(cfg)
    for path in OPERATIONAL:
        node = out
        for key in path[:-1]:
            node = node.get(key, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node.pop(path[-1], None)
    return out


def config_hash(cfg: dict) -> str:
    text = json.dumps(identity_view(cfg), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:HASH_CHARS]


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict) and node:
        out: dict[str, Any] = {}
        for key, value in node.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out
    if isinstance(node, list) and node and any(isinstance(v, (dict, list)) for v in node):
        out = {}
        for i, value in enumerate(node):
            out.update(_flatten(value, f"{prefix}{i}."))
        return out
    return {prefix[:-1]: node}


def config_diff(old: dict, new: dict) -> list[tuple[str, Any, Any]]:
    """(dotted key, old value, new value) for every identity key that differs."""
    a, b = _flatten(identity_view(old)), _flatten(identity_view(new))
    missing = object()
    rows = []
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key, missing), b.get(key, missing)
        if va != vb:
            rows.append((key, None if va is missing else va, None if vb is missing else vb))
    return rows


def read_run_config(run_dir: Path) -> dict | None:
    path = run_dir / "config.yaml"
    if not path.is_file():
        return None
    with open(path) as f:
        return yaml.safe_load(f)


def git_commit(root: Path | None = None) -> str | None:
    """The commit of the source checkout this package runs from ('+dirty' with local edits)."""
    root = root or Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=10,
        )  # fmt: skip
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in ("solo-hyper", "solo-learn", "torch", "torchvision", "pytorch-lightning",
                 "lightning", "torchmetrics", "kornia", "timm"):  # fmt: skip
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def code_version() -> dict:
    return {"solo_hyper": __version__, "git_commit": git_commit(), "packages": package_versions()}


def strict(value: Any) -> Any:
    """NaN and infinities -> None, recursively (JSON has neither)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict(v) for v in value]
    return value


def float32_value(value: Any) -> float:
    """A float32 number (a logged metric, a curvature parameter) as the shortest decimal that reads
    back as the same float32: 67.8, not the 67.79999732971191 its bits spell as a float64. No
    precision is lost; a float64 tensor keeps its own value."""
    import numpy as np

    dtype = getattr(value, "dtype", None)
    number = float(value)
    if dtype is not None and str(dtype) not in ("torch.float32", "float32", "torch.float16",
                                                "torch.bfloat16", "float16"):  # fmt: skip
        return number
    return float(str(np.float32(number)))


def write_atomic(path: Path, write: Callable[[IO], None], binary: bool = False) -> None:
    """``write(file)`` into a temporary file in the same folder, then renamed over ``path``: a
    reader (or a kill) never sees half a file, and a failed write leaves the old file as it was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb" if binary else "w") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 -> the mode open() would have given
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    write_atomic(path, lambda f: f.write(text))


def save_torch_atomic(path: Path, obj: Any) -> None:
    """torch.save, atomically (see ``write_atomic``)."""
    import torch

    write_atomic(path, lambda f: torch.save(obj, f), binary=True)


def write_json_atomic(path: Path, data: Any) -> None:
    """Strict JSON (no NaN or Infinity), written atomically."""
    write_text_atomic(path, json.dumps(strict(data), indent=2, allow_nan=False) + "\n")


def write_yaml_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, yaml.safe_dump(data, sort_keys=False))
