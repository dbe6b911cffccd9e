"""Multi-seed comparisons: checking ``--seeds`` and ``--pairs``, then mean +- std per config and the
paired difference of two configs over the seeds they share (``stats.paired_interval``).

A config is named by its label ``<dataset folder>-<file stem>`` ('fashionmnist-hcl', see
``run_label``); in ``--pairs`` the bare stem ('hcl') is accepted when only one config has it.
"""

from __future__ import annotations

from pathlib import Path

from solo_hyper.config import ConfigError, closest
from solo_hyper.evaluation.stats import Interval, mean, paired_interval, sample_std

# each method of the papers against its baseline (pairs whose configs are both compared)
DEFAULT_PAIRS = [("hcl", "simclr"), ("shcl", "supcon"), ("rhcl", "rocl"), ("ebclr", "simclr")]
PAIR_METRICS = [
    ("linear_acc1", "linear top-1"),
    ("online_linear_acc1", "online linear top-1"),
    ("knn_top1", "kNN top-1"),
    ("knn_coarse_top1", "kNN coarse top-1"),
    ("robust_acc1", "robust acc"),
]
SEED_MAX = 2**32 - 1  # numpy's and Lightning's seed range


def run_label(config_path: str) -> str:
    """'configs/pretrain/fashionmnist/hcl.yaml' -> 'fashionmnist-hcl'."""
    p = Path(config_path)
    return f"{p.parent.name}-{p.stem}"


def seeded_name(label: str, seed: int) -> str:
    """The run directory of one seed of a config: 'fashionmnist-hcl-s0'."""
    return f"{label}-s{seed}"


def parse_seeds(seeds) -> list[int]:
    """Integers in [0, 2^32 - 1], no repeats; a ConfigError naming the bad value otherwise."""
    parsed = []
    for s in seeds:
        text = str(s).strip()
        if isinstance(s, bool) or not text.lstrip("-").isdigit():
            raise ConfigError(f"--seeds takes integers (e.g. --seeds 0 1 2), got {s!r}")
        value = int(text)
        if not 0 <= value <= SEED_MAX:
            raise ConfigError(f"--seeds: {value} is outside 0 ... {SEED_MAX}")
        parsed.append(value)
    if not parsed:
        raise ConfigError("--seeds needs at least one seed (e.g. --seeds 0 1 2)")
    if len(set(parsed)) != len(parsed):
        raise ConfigError(f"--seeds {parsed} repeats a seed: each seed is one run per config")
    return parsed


def check_labels(configs: list[str]) -> list[str]:
    labels = [run_label(c) for c in configs]
    repeated = sorted({x for x in labels if labels.count(x) > 1})
    if repeated:
        raise ConfigError(
            f"two configs share the run name {repeated[0]!r} (<folder>-<file stem>): give each "
            "config of a comparison its own file name or folder"
        )
    return labels


def _resolve(name: str, labels: dict[str, str]) -> str:
    """The label of the config a --pairs name means: its label or its unique file stem."""
    if name in labels:
        return name
    matches = [label for label, stem in labels.items() if stem == name]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise ConfigError(
            f"--pairs: {name!r} names several configs ({', '.join(matches)}); use one of these"
        )
    stems = sorted(set(labels.values()))
    raise ConfigError(
        f"--pairs: no compared config is called {name!r}{closest(name, stems + list(labels))}; "
        f"the configs are {', '.join(labels)} (a file stem such as {stems[0]!r} also works)"
    )


def resolve_pairs(configs: list[str], pairs: list[str] | None) -> list[tuple[str, str]]:
    """[(label A, label B)] for 'A:B' strings, or the default pairs found among the configs
    (both files in one folder)."""
    labels = {run_label(c): Path(c).stem for c in configs}
    if pairs is None:
        paths = {Path(c) for c in configs}
        found = []
        for a, b in DEFAULT_PAIRS:
            for path in map(Path, configs):
                partner = path.with_name(f"{b}{path.suffix}")
                if path.stem == a and partner in paths:
                    found.append((run_label(str(path)), run_label(str(partner))))
        return found
    out = []
    for text in pairs:
        parts = str(text).split(":")
        if len(parts) != 2 or not all(parts):
            raise ConfigError(f"--pairs takes METHOD:BASELINE (e.g. hcl:simclr), got {text!r}")
        a, b = (_resolve(p, labels) for p in parts)
        if a == b:
            raise ConfigError(f"--pairs {text!r} compares a config with itself")
        out.append((a, b))
    return out


def _values(rows: list[dict], key: str) -> list[float]:
    return [float(r[key]) for r in rows if isinstance(r.get(key), (int, float))]


def summarize(rows: list[dict], columns: list[tuple[str, str]]) -> list[dict]:
    """One row per config: {'config', 'method', 'seeds', key: (mean, std or None) or None}."""
    out = []
    for label in dict.fromkeys(r["config"] for r in rows):
        group = [r for r in rows if r["config"] == label]
        row = {"config": label, "method": group[0]["method"],
               "seeds": " ".join(str(r["seed"]) for r in group)}  # fmt: skip
        for key, _ in columns:
            values = _values(group, key)
            if values:
                row[key] = (mean(values), sample_std(values) if len(values) > 1 else None)
            else:
                row[key] = None
        out.append(row)
    return out


def paired_rows(rows: list[dict], pairs: list[tuple[str, str]], metrics=PAIR_METRICS) -> list[dict]:
    """For each pair and metric with values, the paired difference over the shared seeds."""
    out = []
    for a, b in pairs:
        by_seed_a = {r["seed"]: r for r in rows if r["config"] == a}
        by_seed_b = {r["seed"]: r for r in rows if r["config"] == b}
        for key, title in metrics:
            seeds = [s for s in by_seed_a if s in by_seed_b
                     and isinstance(by_seed_a[s].get(key), (int, float))
                     and isinstance(by_seed_b[s].get(key), (int, float))]  # fmt: skip
            if not seeds:
                continue
            interval = paired_interval(
                [float(by_seed_a[s][key]) for s in seeds], [float(by_seed_b[s][key]) for s in seeds]
            )
            out.append({"pair": f"{a} - {b}", "metric": title, "key": key,
                        "seeds": " ".join(str(s) for s in seeds), "interval": interval})  # fmt: skip
    return out


def verdict(interval: Interval, a: str, b: str) -> str:
    if interval.within_noise is None:
        return "needs >= 2 seeds"
    if interval.within_noise:
        return "within noise"
    return f"{a} higher" if interval.mean > 0 else f"{b} higher"


__all__ = [
    "DEFAULT_PAIRS",
    "PAIR_METRICS",
    "check_labels",
    "paired_rows",
    "parse_seeds",
    "resolve_pairs",
    "run_label",
    "seeded_name",
    "summarize",
    "verdict",
]
