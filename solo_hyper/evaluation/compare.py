"""Side-by-side comparison: train each config (or reuse its finished run), evaluate every run with
the same protocol (``protocol.evaluate_run``), write ``results.md``/``results.csv`` and figures.

``python -m solo_hyper compare --configs A.yaml B.yaml --epochs N --out DIR [--set k=v ...]
[--seeds 0 1 2] [--pairs A:B ...] [--linear-epochs N] [--linear-config FILE] [--no-plots]``

With ``--seeds`` every config is trained once per seed (run ``<folder>-<stem>-s<seed>``) and
``results.md`` gives mean ± std per config and the paired difference of each pair (``seeds.py``);
``results.csv`` keeps one row per run.
"""

from __future__ import annotations

import csv
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from solo_hyper.config import ConfigError
from solo_hyper.data import FASHION_MNIST_CLASSES, FASHION_MNIST_COARSE_CLASSES, ensure_dataset
from solo_hyper.evaluation import plots
from solo_hyper.evaluation.features import check_eval_dataset, run_data_config
from solo_hyper.evaluation.protocol import budget_words, evaluate_run, linear_config
from solo_hyper.evaluation.seeds import (
    check_labels,
    paired_rows,
    parse_seeds,
    resolve_pairs,
    run_label,
    seeded_name,
    summarize,
    verdict,
)
from solo_hyper.machine import machine_line
from solo_hyper.run.guards import RunStopped
from solo_hyper.run.identity import write_json_atomic
from solo_hyper.run.lock import holding
from solo_hyper.run.train import Prepared, check_environment, prepare, pretrain
from solo_hyper.solo import adapter

COLUMNS = [
    ("method", "method"),
    ("name", "run"),
    ("seed", "seed"),
    ("epochs", "epochs"),
    ("linear_acc1", "linear top-1"),
    ("online_linear_acc1", "online linear top-1"),
    ("knn_top1", "kNN top-1"),
    ("knn_coarse_top1", "kNN coarse top-1"),
    ("relative_delta", "delta_rel"),
    ("robust_acc1", "robust acc"),
    ("wall_time_s", "wall time (s)"),
    ("images_per_s", "images/s"),
    ("peak_memory_mb", "peak memory (MB)"),
]
RUN_COLUMNS = [("config", "config"), *COLUMNS]
SUMMARY_HEAD = [("config", "config"), ("method", "method"), ("seeds", "seeds")]
SUMMARY_COLUMNS = [c for c in COLUMNS if c[0] not in ("method", "name", "seed")]
# what each column means, printed under a table for the columns it shows; the parts that depend
# on what ran (split sizes, probe, distances) are filled from the rows (``notes``)
COLUMN_NOTES = {
    "linear_acc1": "linear top-1: offline linear probe on the frozen backbone, trained on "
    "{linear_sizes} ({linear_protocol})",
    "online_linear_acc1": "online linear top-1: solo-learn's online probe during pretraining",
    "knn_top1": "kNN: offline, backbone features of the un-augmented images ({knn_sizes}), "
    "cosine, k={knn_k}, T={knn_temperature} (solo's online kNN of the training curves votes with "
    "a bank of augmented training crops instead)",
    "knn_coarse_top1": "coarse = neighbours vote with coarse labels",
    "relative_delta": "delta_rel = 2 delta / diam of {delta_points} test {delta_space} outputs, "
    "with {delta_distances}: {delta_meaning}",
    "robust_acc1": "robust acc: PGD accuracy of the run's robust evaluation when one exists "
    "(protocol in results.csv)",
    "wall_time_s": "wall time, images/s and peak memory: pretraining (images/s: training images "
    "over the training steps' time, each step from the previous one's end, data and augmentation "
    "included, validation not; peak memory: CUDA allocations on a GPU, else the process's "
    "resident-set high-water mark, reset before each run)",
}
DISTANCE_WORDS = {"poincare": "Poincare distances on the ball", "lorentz": "Lorentz (hyperboloid) "
                  "geodesic distances", "euclidean": "Euclidean distances"}  # fmt: skip


LINEAR_PROTOCOLS = {
    "logistic": "logistic: multinomial logistic regression solved to convergence, C chosen on a "
    "held-out part of the training images",
    "sgd": "sgd: solo-learn's LinearModel trained by SGD for the linear config's epochs",
}


def linear_protocol_note(rows: list[dict]) -> str:
    """Which probe produced the linear column (every protocol that appears in the rows)."""
    used = sorted({r["linear_protocol"] for r in rows if r.get("linear_protocol")})
    return "; ".join(LINEAR_PROTOCOLS[p] for p in used) or "protocol in results.csv"


def row_label(row: dict) -> str:
    return row.get("config") or row.get("name") or row["method"]


def by_value(rows: list[dict], value) -> list[tuple[object, list[str]]]:
    """(value, the labels of the rows that have it), in row order; rows without one left out."""
    groups: dict[object, list[str]] = {}
    for r in rows:
        v = value(r)
        if v is not None:
            groups.setdefault(v, [])
            if row_label(r) not in groups[v]:
                groups[v].append(row_label(r))
    return list(groups.items())


def described(groups: list[tuple[object, list[str]]], words) -> str:
    """One value in words, or each value with the runs it belongs to when they differ."""
    if len(groups) == 1:
        return words(groups[0][0])
    return "; ".join(f"{words(v)} ({', '.join(labels)})" for v, labels in groups) or "-"


def sizes(train_key: str, test_key: str):
    def value(r: dict):
        return (r[train_key], r[test_key]) if r.get(train_key) is not None else None

    return value


def size_words(pair) -> str:
    return f"{pair[0]:,} training images and scored on {pair[1]:,} test images"


def knn_size_words(pair) -> str:
    return f"{pair[0]:,} training images vote for {pair[1]:,} test images"


def notes(rows: list[dict], columns=COLUMNS) -> str:
    """The legend of a table: only the columns it shows (``markdown_table`` drops empty ones),
    with the split sizes, probe and distances the rows' evaluations recorded."""
    import inspect

    from solo_hyper.evaluation.knn_probe import DEFAULT_K, RELATIVE_DELTA_WORDS, evaluate_knn

    shown = {k for k, _ in columns if any(r.get(k) is not None for r in rows)}
    temperature = inspect.signature(evaluate_knn).parameters["temperature"].default
    fill = {
        "linear_protocol": linear_protocol_note(rows),
        "linear_sizes": described(by_value(rows, sizes("linear_train_images", "linear_test_images")), size_words),
        "knn_sizes": described(by_value(rows, sizes("eval_train_images", "eval_test_images")), knn_size_words),
        "knn_k": DEFAULT_K,
        "delta_meaning": RELATIVE_DELTA_WORDS,
        "knn_temperature": temperature,
        "delta_points": described(by_value(rows, lambda r: r.get("relative_delta_points")), str),
        "delta_space": described(by_value(rows, lambda r: r.get("relative_delta_space")), str),
        "delta_distances": described(
            by_value(rows, lambda r: r.get("relative_delta_distance")),
            lambda d: DISTANCE_WORDS.get(d, f"{d} distances"),
        ),
    }  # fmt: skip
    texts = [text.format(**fill) for key, text in COLUMN_NOTES.items() if key in shown]
    budgets = by_value(rows, lambda r: r.get("eval_budget"))
    if budgets:
        texts.insert(0, "evaluation budget " + described(budgets, lambda b: f"{b}: {budget_words(b)}"))
    transfers = sorted({(r["dataset"], r["eval_dataset"]) for r in rows
                        if r.get("eval_dataset") not in (None, r.get("dataset"))})  # fmt: skip
    if transfers:
        texts.append(
            "transfer " + ", ".join(f"{a} -> {b}" for a, b in transfers) + ": pretrained on the "
            "first, kNN and probe on the second's splits (the image counts above), its images "
            "standardised with the first's statistics (the official EBCLR transfer_acc / "
            "eval_knn_transfer_acc)"
        )
    return "; ".join(texts) + "."


def smoke_banner(rows: list[dict]) -> str:
    """The line above a table evaluated on a smoke budget: what it read, and that it is no
    measurement (empty for the full splits)."""
    smoke = sorted({r["eval_budget"] for r in rows if r.get("eval_budget") not in (None, "full")})
    if not smoke:
        return ""
    return "\n".join(f"**Evaluation budget {b}** (`--eval-budget {b}`): the probe and the kNN read "
                     f"{budget_words(b)}, not the full splits: a check that the pipeline runs, not "
                     "a table of record.\n" for b in smoke) + "\n"


def run_name(config_path: str) -> str:
    """'configs/pretrain/fashionmnist/hcl.yaml' -> 'fashionmnist-hcl'."""
    return run_label(config_path)


class Phases:
    """One line on stderr as each run of a multi-run command enters a phase: which run of how
    many, its config and seed, the phase, and how long the command has been running."""

    def __init__(self, command: str, total: int, log=None) -> None:
        self.command, self.total, self.start = command, total, time.perf_counter()
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))

    def __call__(self, index: int, label: str, seed, phase: str) -> None:
        elapsed = int(time.perf_counter() - self.start)
        clock = f"{elapsed // 60} min {elapsed % 60:02d} s" if elapsed >= 60 else f"{elapsed} s"
        seed_text = "" if seed is None else f" seed {seed}"
        self.log(f"[{self.command}] {index}/{self.total} {label}{seed_text}: {phase} "
                 f"({clock} elapsed)")  # fmt: skip


def train_or_reuse(prep: Prepared, quiet: bool = False) -> dict:
    """A finished run is reused only when its config hash matches (``run.train.plan_run``); a
    run directory holding another config is left alone and this one trains as
    ``<name>-<config hash>``. A run that ended before its budget is never a table's row."""
    result = pretrain(prep, quiet=quiet, on_mismatch="new")
    if not result.get("finished"):
        raise RunStopped(
            f"{result['run_dir']} stopped after {result['global_step']} steps, before its budget "
            f"(max_epochs={prep.cfg['max_epochs']}, max_steps={prep.cfg.get('max_steps')}); a "
            "table holds finished runs only: run the same command again to resume it"
        )
    return result


def check_linear(
    preps: list[Prepared], linear_epochs: int | None, linear_config_path: str | None,
    eval_dataset: str | None = None, budget: str = "full",
) -> None:  # fmt: skip
    """Every linear-evaluation config (and the transfer target's data, and the evaluation
    budget) is checked before the first run trains."""
    if linear_epochs is not None and (not isinstance(linear_epochs, int) or linear_epochs < 1):
        raise ConfigError(f"--linear-epochs must be an integer >= 1, got {linear_epochs!r}")
    check_eval_dataset(eval_dataset)  # first: its linear config is read by the target's name
    for prep in preps:
        linear_config(eval_dataset or prep.cfg["data"]["dataset"], linear_config_path, linear_epochs,
                      budget)  # fmt: skip
    if eval_dataset is not None:
        ensure_dataset(run_data_config(preps[0].cfg, {"dataset": eval_dataset}) if preps else {})


def evaluate_rows(
    rows: list[dict], linear_epochs=None, linear_config_path=None, disk: bool = False,
    device: str = "auto", quiet: bool = True, eval_dataset: str | None = None,
    phases: Phases | None = None, budget: str = "full",
) -> list[dict]:  # fmt: skip
    """Adds the protocol's numbers to every pretraining result (``disk``: with the 2-D map for
    disk.png); ``eval_dataset``: the transfer protocol, ``budget``: the evaluation sets
    (``protocol.evaluate_run``). Each evaluation phase prints a timed line on stderr, ``quiet``
    or not (``quiet``: no bars)."""
    out = []
    for i, row in enumerate(rows, 1):
        if phases is not None:
            phases(i, row_label(row), row.get("seed"), "evaluating")
        ev = evaluate_run(row["run_dir"], linear_epochs, linear_config_path, disk, device, quiet,
                          eval_dataset, phase_lines=True, budget=budget)  # fmt: skip
        delta = ev["knn"]["hierarchy"][ev["relative_delta_space"]]  # what delta_rel measured
        out.append({**row, **{k: v for k, v in ev.items() if k not in ("knn", "protocol")},
                    "relative_delta_distance": delta["distance"],
                    "relative_delta_points": delta["num_points"]})  # fmt: skip
    return out


def curves(rows: list[dict], out: Path):
    """curves.png from the runs' training logs (no evaluation needed): one mean line and seed
    band per config."""
    groups: dict[str, list[Path]] = {}
    for r in rows:
        groups.setdefault(row_label(r), []).append(Path(r["run_dir"]))
    knn_scale = 1.0 if adapter.KNN_PERCENT else 100.0
    return plots.training_curves(groups, out / "curves.png", knn_scale)


def draw(
    rows: list[dict], out: Path, pairs: list[tuple[str, str]] = (), controls: list[dict] = ()
) -> list[Path]:
    """curves.png (per-step training curves, a band per config over its seeds), comparison.png
    (final offline metrics beside the ``controls``' rows, paired differences) and disk.png (the
    first seed of each config); figures.json lists every figure's panels and the series drawn
    in each."""
    figures = {
        "curves.png": curves(rows, out),
        "comparison.png": plots.comparison_figure(
            [{**r, "config": r.get("config") or r["name"]} for r in rows],
            paired_rows(rows, list(pairs)) if pairs else [], out / "comparison.png", list(controls),
        ),
    }
    first_seed = rows[0].get("seed") if rows else None  # one run per config keeps them legible
    firsts = [r for r in rows if r.get("seed") == first_seed]
    maps = {row_label(r): r["disk"] for r in firsts if r.get("disk")}
    datasets = {r.get("dataset") for r in rows}
    names = coarse_names = None
    if datasets == {"fashionmnist"}:
        names, coarse_names = FASHION_MNIST_CLASSES, FASHION_MNIST_COARSE_CLASSES
    disk = plots.poincare_disk(maps, out / "disk.png", names, coarse_names)
    manifest = {name: {"panels": f[1]} for name, f in figures.items() if f is not None}
    if disk is not None:
        manifest["disk.png"] = {"panels": {"disk": list(maps)}}
    write_json_atomic(out / "figures.json", manifest)
    return [f[0] for f in figures.values() if f is not None] + ([disk] if disk else [])


# runs prepared runs as parallel jobs, each evaluated with evaluate_run's options (None: not)
Launcher = Callable[[list[Prepared], "dict | None"], None]


@dataclass
class Plan:
    """What a comparison will train: one prepared run per (config, seed), checked up front."""

    runs: list[tuple[str, Prepared]]  # (config label, the prepared run of one seed)
    pairs: list[tuple[str, str]]
    seeds: list[int] | None


def plan(
    configs: list[str], out_dir: str, epochs: int | None = None, overrides: list[str] = (),
    seeds=None, pairs: list[str] | None = None,
) -> Plan:  # fmt: skip
    """Validates every config, seed and pair before anything trains.

    With ``seeds``, each config runs once per seed as ``<label>-s<seed>`` with ``seed=<seed>``
    (so runs of different seeds never share a directory); without, once with its own seed.
    """
    labels = check_labels(list(configs))
    seed_list = parse_seeds(seeds) if seeds is not None else None
    if seed_list is not None and any(str(o).split("=", 1)[0] == "seed" for o in overrides):
        raise ConfigError("give the seeds with --seeds, not --set seed=...")
    pair_list = resolve_pairs(list(configs), pairs)
    runs = []
    for path, label in zip(configs, labels):
        for seed in seed_list if seed_list is not None else [None]:
            name = label if seed is None else seeded_name(label, seed)
            extra = [f"checkpoint.dir={out_dir}", f"name={name}", *overrides]
            if seed is not None:
                extra.append(f"seed={seed}")
            if epochs is not None:
                extra.append(f"max_epochs={epochs}")
            runs.append((label, prepare(path, extra)))
    return Plan(runs, pair_list, seed_list)


@holding("out_dir", "compare output")
def compare(
    configs: list[str], out_dir: str, epochs: int | None = None, overrides: list[str] = (),
    quiet: bool = False, linear_epochs: int | None = None, linear_config_path: str | None = None,
    evaluate: bool = True, plots_enabled: bool = True, device: str = "auto",
    seeds=None, pairs: list[str] | None = None, eval_dataset: str | None = None,
    controls: bool = True, eval_budget: str = "full", launch: Launcher | None = None,
) -> list[dict]:  # fmt: skip
    """Trains every (config, seed) into ``out_dir`` (finished runs are reused), evaluates every
    run with the same protocol (on ``eval_budget``'s sets, ``protocol.EVAL_BUDGETS``), and
    beside them (``controls``) each run's untrained backbone and the raw pixels, and writes the
    tables (and figures); returns one row per run. ``launch``: trains and evaluates the runs as
    parallel jobs first (``--jobs``, ``--executor``); the loop below then reuses them, and
    evaluates the controls in this process."""
    out = Path(out_dir)
    todo = plan(configs, out_dir, epochs, overrides, seeds, pairs)
    preps = [prep for _, prep in todo.runs]
    for prep in preps:
        check_environment(prep.cfg)
    if evaluate:
        check_linear(preps, linear_epochs, linear_config_path, eval_dataset, eval_budget)
    if launch is not None:
        launch(preps, dict(linear_epochs=linear_epochs, linear_config_path=linear_config_path,
                           disk=plots_enabled, device=device, eval_dataset=eval_dataset,
                           budget=eval_budget) if evaluate else None)  # fmt: skip
    rows = []
    phases = Phases("compare", len(todo.runs))
    for i, (label, prep) in enumerate(todo.runs, 1):
        phases(i, label, int(prep.cfg["seed"]), "pretraining")
        row = train_or_reuse(prep, quiet)
        rows.append({**row, "config": label, "seed": int(prep.cfg["seed"])})
    extra, control_rows = "", []
    if evaluate:
        rows = evaluate_rows(rows, linear_epochs, linear_config_path, plots_enabled, device,
                             eval_dataset=eval_dataset, phases=phases, budget=eval_budget)  # fmt: skip
        if controls:  # on the evaluated dataset (the target under transfer)
            extra, control_rows = with_controls(
                rows, preps, out, linear_epochs, linear_config_path, device, quiet,
                eval_dataset=eval_dataset, budget=eval_budget,
            )  # fmt: skip
        if plots_enabled:
            draw(rows, out, todo.pairs, control_rows)
    elif plots_enabled:  # the training curves need no evaluation
        drawn = curves(rows, out)
        if drawn is not None:
            write_json_atomic(out / "figures.json", {"curves.png": {"panels": drawn[1]}})
    if todo.seeds is None:
        write_tables(rows, out, extra=extra)
    else:
        write_seed_tables(rows, todo.pairs, out, extra)
    return rows


def with_controls(
    rows: list[dict], preps: list[Prepared], out: Path, linear_epochs: int | None,
    linear_config_path: str | None, device: str, quiet: bool, label=None,
    eval_dataset: str | None = None, budget: str = "full",
) -> tuple[str, list[dict]]:  # fmt: skip
    """Evaluates the controls of ``rows`` (one prepared run each, same order; on
    ``eval_dataset`` under transfer and on ``budget``'s sets, as the rows were), records each
    run's untrained numbers in its row; returns the controls' markdown section and their rows
    for comparison.png (one per distinct control)."""
    from solo_hyper.evaluation import controls

    untrained, pixels = controls.controls_for(preps, out, linear_epochs, linear_config_path,
                                              device, quiet, eval_dataset, budget)  # fmt: skip
    for row, control in zip(rows, untrained, strict=True):
        row.update({f"untrained_{k}": control.get(k) for k, _ in controls.GAIN_METRICS})
        row["untrained_run"] = Path(control["run_dir"]).name
    return controls.controls_markdown(rows, untrained, pixels, label), controls.figure_rows(untrained, pixels)


def format_cell(key: str, value) -> str:
    if value is None:
        return "-"
    if isinstance(value, tuple):  # (mean, std or None) of a multi-seed summary
        m, sd = value
        if key == "epochs" and not sd:
            return str(round(m))
        return format_cell(key, m) + ("" if sd is None else " ± " + format_cell(key, sd))
    if key.endswith(("acc1", "top1")):
        return f"{value:.2f}"
    if key == "relative_delta":
        return f"{value:.3f}"
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


def markdown_table(rows: list[dict], columns=COLUMNS) -> str:
    """A markdown table; a column that no row fills (e.g. robust acc without a robust
    evaluation) is left out, so every printed cell holds a value."""
    columns = [(k, t) for k, t in columns if any(r.get(k) is not None for r in rows)]
    head = "| " + " | ".join(title for _, title in columns) + " |"
    sep = "|" + "|".join("---" for _ in columns) + "|"
    body = ["| " + " | ".join(format_cell(k, r.get(k)) for k, _ in columns) + " |" for r in rows]
    return "\n".join([head, sep, *body])


def csv_keys(rows: list[dict], columns=COLUMNS) -> list[str]:
    keys = [k for k, _ in columns]
    keys += [k for k in ("linear_protocol", "linear_c", "linear_train_images", "linear_test_images",
                         "eval_budget", "eval_train_images", "eval_test_images",
                         "relative_delta_distance")
             if any(k in r for r in rows)]  # fmt: skip
    if any("robust_protocol" in r for r in rows):
        keys.append("robust_protocol")
    keys += [k for k in ("untrained_linear_acc1", "untrained_knn_top1", "untrained_run")
             if any(k in r for r in rows)]  # fmt: skip
    return keys


def readable(value):
    """A CSV cell as a person reads it: a float to 6 significant digits (67.8, not
    67.79999732971191); each run's eval.json and result.json keep the full values."""
    return float(f"{value:.6g}") if isinstance(value, float) else value


def write_csv(path: Path, keys: list[str], records: list[list]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(keys)
        writer.writerows([[readable(v) for v in record] for record in records])


def write_tables(
    rows: list[dict], out: Path, stem: str = "results", columns=COLUMNS, extra: str = ""
) -> None:
    """STEM.md (the table, ``extra`` such as the controls, the legend) and STEM.csv."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.md").write_text(
        smoke_banner(rows) + markdown_table(rows, columns) + "\n\n" + (extra + "\n\n" if extra else "")
        + notes(rows, columns) + "\n\n" + machine_note(rows) + "\n"
    )
    keys = csv_keys(rows, columns)
    write_csv(out / f"{stem}.csv", keys, [[r.get(k) for k in keys] for r in rows])


def pairs_table(pair_rows: list[dict]) -> str:
    head = ("| pair (A - B) | metric | seeds | mean difference | 95% t-interval | verdict |\n"
            "|---|---|---|---|---|---|")  # fmt: skip
    body = []
    for p in pair_rows:
        iv = p["interval"]
        a, b = p["pair"].split(" - ")
        ci = "-" if iv.low is None else f"[{iv.low:+.2f}, {iv.high:+.2f}]"
        body.append(f"| {p['pair']} | {p['metric']} | {p['seeds']} | {iv.mean:+.2f} | {ci} | "
                    f"{verdict(iv, a, b)} |")  # fmt: skip
    return "\n".join([head, *body])


def seed_markdown(rows: list[dict], pairs: list[tuple[str, str]], extra: str = "") -> str:
    """Mean ± std per config, the paired differences, ``extra`` (the controls), then every run."""
    parts = ["Mean ± sample std over seeds (one run per config and seed):", "",
             markdown_table(summarize(rows, SUMMARY_COLUMNS), SUMMARY_HEAD + SUMMARY_COLUMNS)]  # fmt: skip
    differences = paired_rows(rows, pairs)
    if differences:
        parts += ["", "Paired differences A - B over the seeds both ran (95% Student-t interval "
                  "of the mean difference; 'within noise' when it holds 0):", "",
                  pairs_table(differences)]  # fmt: skip
    if extra:
        parts += ["", extra]
    parts += ["", "Every run:", "", markdown_table(rows, RUN_COLUMNS)]
    return "\n".join(parts)


def write_seed_tables(
    rows: list[dict], pairs: list[tuple[str, str]], out: Path, extra: str = ""
) -> None:
    """results.md (summary, pairs, controls, runs), results.csv (one row per run), summary.csv,
    pairs.csv."""
    out.mkdir(parents=True, exist_ok=True)
    legend = notes(rows, RUN_COLUMNS)
    text = (smoke_banner(rows) + seed_markdown(rows, pairs, extra) + "\n\n" + legend + "\n\n"
            + machine_note(rows) + "\n")  # fmt: skip
    (out / "results.md").write_text(text)
    keys = csv_keys(rows, RUN_COLUMNS)
    write_csv(out / "results.csv", keys, [[r.get(k) for k in keys] for r in rows])
    summary = summarize(rows, SUMMARY_COLUMNS)
    keys = [k for k, _ in SUMMARY_HEAD]
    keys += [f"{k}_{stat}" for k, _ in SUMMARY_COLUMNS for stat in ("mean", "std")]
    records = []
    for s in summary:
        cells = [s.get(k) for k, _ in SUMMARY_HEAD]
        for k, _ in SUMMARY_COLUMNS:
            cells += list(s[k]) if s[k] is not None else [None, None]
        records.append(cells)
    write_csv(out / "summary.csv", keys, records)
    differences = paired_rows(rows, pairs)
    write_csv(
        out / "pairs.csv",
        ["pair", "metric", "seeds", "n", "mean_difference", "std_difference", "ci95_low",
         "ci95_high", "verdict"],
        [[p["pair"], p["key"], p["seeds"], p["interval"].n, p["interval"].mean,
          p["interval"].std, p["interval"].low, p["interval"].high,
          verdict(p["interval"], *p["pair"].split(" - "))] for p in differences],
    )  # fmt: skip


def machine_note(rows: list[dict] = ()) -> str:
    """Where the numbers come from: the machine the rows' runs recorded when they trained (for
    cluster jobs the jobs', not this process's), else this process's (``solo_hyper.machine``)."""
    recorded = [r["machine"] for r in rows if isinstance(r.get("machine"), dict)]
    return machine_line(recorded if rows and len(recorded) == len(rows) else [])


__all__ = ["COLUMNS", "compare", "markdown_table", "plan", "run_name", "write_tables"]
