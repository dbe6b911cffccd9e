"""A reproduce table as markdown (and CSV): per column the rows' mean ± std over seeds with the
paper's number beside each cell, the controls, the paired differences with their 95% intervals
(Holm-adjusted within a claim over several pairs), the best-row claim, the gains over the
untrained backbone, then the pairs across columns, the legends and the gradient-masking
diagnostics of a robust table. Made of the cells' numbers alone: nothing here trains or
evaluates.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from solo_hyper.campaigns.compare import machine_note, notes
from solo_hyper.evaluation import plots, tables
from solo_hyper.evaluation.bootstrap import paired_bootstrap
from solo_hyper.evaluation.controls import PIXELS, TITLES, UNTRAINED, gain_table, gains
from solo_hyper.evaluation.robust import MARK, is_attack
from solo_hyper.evaluation.seeds import verdict
from solo_hyper.evaluation.stats import Interval, holm_intervals, mean, paired_interval, sample_std
from solo_hyper.reproduce import pairs, paper
from solo_hyper.reproduce.cells import Cell
from solo_hyper.reproduce.tables import TRAIN_IMAGES, Column, Row, Table
from solo_hyper.run.identity import write_text_atomic

LINEAR_METRICS = (("linear_acc1", "linear top-1"), ("knn_top1", "kNN top-1"))
RUN_KEYS = ["linear_acc1", "knn_top1", "linear_protocol", "linear_c", "epochs", "wall_time_s"]


def write_tables(path: Path, spec: Table, scale: str, cells: list[Cell], pixels: dict[str, dict]) -> None:
    """The table's markdown at ``path``, its CSV beside it (one line per run: its numbers and
    robust columns) and, for a table read by the linear probe and kNN, one comparison figure per
    column (``<stem>.png``, ``<stem>-<column>.png`` with several columns): every run beside its
    controls, each claim's pairs with their intervals."""
    if not spec.robust:
        columns = list(dict.fromkeys(c.column for c in cells))
        for column in columns:
            group = [c for c in cells if c.column is column]
            runs, controls, pair_rows = figure_rows(group, pixels.get(column.name))
            stem = path.stem + (f"-{file_safe(column.name)}" if len(columns) > 1 else "")
            plots.comparison_figure(runs, pair_rows, path.with_name(f"{stem}.png"), controls,
                                    "the table's 95% interval (Holm within a claim)")  # fmt: skip
    write_text_atomic(path, markdown(spec, scale, cells, paper.load(), pixels))
    write_text_atomic(path.with_suffix(".csv"), tables.csv_text(
        [{"column": c.column.name, "row": c.row.key, "seed": c.seed, "run": c.result["run_dir"],
          **{k: v for k, v in c.result.items() if k in RUN_KEYS or _robust_column(k)}}
         for c in cells], ["column", "row", "seed", "run", *RUN_KEYS,
                           *dict.fromkeys(k for c in cells for k in c.result if _robust_column(k))]))  # fmt: skip


def file_safe(name: str) -> str:
    """A column's name as a file name part: ``MNIST short`` -> ``MNIST_short``, ``MNIST->FMNIST``
    -> ``MNIST-to-FMNIST`` (no spaces or shell metacharacters in the table's path)."""
    return re.sub(r"[^A-Za-z0-9+._-]", "_", name.replace("->", "-to-"))


def budget(column: Column, cfg: dict | None = None, batches: list[int] = ()) -> str:
    """The budget as the runs have it (their resolved config; ``batches``: every row's batch
    size), then the column's own note."""
    if cfg is None:
        return column.budget
    data, epochs = cfg["data"], int(cfg["max_epochs"])
    batch = cfg["optimizer"]["batch_size"]
    if len(set(batches)) > 1:
        batch = "/".join(str(b) for b in sorted(set(batches))) + " (the row's)"
    subset = data.get("train_subset")
    images = subset or TRAIN_IMAGES.get(data["dataset"])
    split = "the full training split" if not subset else "a training subset the seed draws"
    size = f"{images:,} images" if images else "the training images"
    text = (f"{data['dataset']}, {size} ({split}), {epochs} epoch{'s' * (epochs != 1)} of batch "
            f"{batch}, backbone {cfg['backbone']['name']}")  # fmt: skip
    return text + (f"; {column.budget}" if column.budget else "")



def robust_key(key: str) -> bool:
    """A robust accuracy of a reproduce row: 'LE A_nat', 'r-LE PGD-20 8/255', 'AT AA 8/255'."""
    protocol, _, metric = key.partition(" ")
    return protocol in ("LE", "r-LE", "AT") and (metric == "A_nat" or is_attack(metric))


def _robust_column(key: str) -> bool:
    """A robust accuracy, a model's gradient-masking verdict ('r-LE masking') or its attack
    strength ('r-LE strength')."""
    protocol, _, note = key.partition(" ")
    return robust_key(key) or (protocol in ("LE", "r-LE", "AT") and note in ("masking", "strength"))


def _images_text(cells: list[Cell]) -> str:
    """'A_nat and PGD on 2000 test images, AA on the first 1000' from the runs' counts."""
    found = [c.result["robust_images"] for c in cells if c.result and c.result.get("robust_images")]
    if not found:
        return ""
    counts = found[0]
    others = sorted({n for k, n in counts.items() if not k.startswith("AA")})
    aa = sorted({n for k, n in counts.items() if k.startswith("AA")})
    if not aa or aa == others:
        return f" Every column on the same {', '.join(map(str, others))} test images per run."
    text = f" A_nat and PGD on {', '.join(map(str, others))} test images per run"
    return text + f", AutoAttack on the first {', '.join(map(str, aa))} of them."


def _stat(values: list[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{mean(values):.2f} ± {sample_std(values):.2f}"


def metric_columns(spec: Table, cells: list[Cell]) -> list[tuple[str, str, str | None]]:
    """(result key, title, paper metric) of the table's columns."""
    if not spec.robust:
        return [(LINEAR_METRICS[0][0], LINEAR_METRICS[0][1], None),
                (LINEAR_METRICS[1][0], LINEAR_METRICS[1][1], "-")]  # fmt: skip
    keys = list(dict.fromkeys(k for c in cells for k in c.result if robust_key(k)))
    # by protocol, each protocol's attacks in robust-eval's order (its config's: 8/255 first)
    keys.sort(key=lambda k: ["LE", "r-LE", "AT"].index(k.split(" ")[0]))
    out = []
    for k in keys:
        protocol, metric = k.split(" ", 1)
        # the paper's numbers are its robust linear evaluation's (section 4.2: "linear evaluation
        # with adversarial examples", r-LE) and, for RHCL+AT, the fine-tuned model's; never LE's
        paper = None if protocol in PAPER_HEADS else "-"
        if paper is None:
            paper = "A_nat" if metric == "A_nat" else ("PGD" if k == _first_attack(keys, protocol) else "-")
        out.append((k, k, paper))
    return out


PAPER_HEADS = ("r-LE", "AT")  # the heads HCL Table 3's numbers were measured with


def _first_attack(keys: list[str], protocol: str) -> str | None:
    attacks = [k for k in keys if k.startswith(protocol + " PGD-")]
    return attacks[0] if attacks else None


PaperValues = dict[tuple[str, str, str], float]  # (column, row, result key) -> the paper's number


def markdown(
    spec: Table, scale: str, cells: list[Cell], numbers: dict[str, dict],
    pixels: dict[str, dict] | None = None,
) -> str:  # fmt: skip
    """The table's markdown; ``numbers``: every paper number (``paper.load()``); the controls:
    each cell's ``untrained`` numbers and ``pixels`` (column name -> the raw-pixel control)."""
    source = f" ({spec.paper})" if spec.paper else " (this package's own table)"
    parts = [f"# {spec.title}", "", f"Claim{source}: {spec.claim}.", ""]
    values: PaperValues = {}
    setting_notes: dict[str, str] = {}
    for column in dict.fromkeys(c.column for c in cells):
        group = [c for c in cells if c.column is column]
        beside = f"; the paper's numbers: its {column.paper_column} column" if column.paper_column else ""
        parts += [f"## {column.name} (scale {scale}{beside})", "", f"Budget: {budget(column, group[0].prep.cfg, [c.prep.cfg['optimizer']['batch_size'] for c in group])}; "  # fmt: skip
                  f"seeds {' '.join(str(s) for s in dict.fromkeys(c.seed for c in group))}.", ""]
        metrics = [m for m in metric_columns(spec, group) if any(m[0] in c.result for c in group)]
        parts.append("| row | " + " | ".join(title for _, title, _ in metrics) + " |")
        parts.append("|---|" + "---|" * len(metrics))
        for row in dict.fromkeys(c.row for c in group):
            mine = [c for c in group if c.row is row]
            cfg = mine[0].prep.cfg if mine[0].prep is not None else None
            cells_text = []
            for key, _, metric in metrics:
                measured = [float(c.result[key]) for c in mine if isinstance(c.result.get(key), (int, float))]
                if not measured:
                    cells_text.append("-")
                    continue
                protocol = key.split(" ")[0] if spec.robust else None
                skip = metric == "-" or (spec.robust and (protocol == "AT") != row.finetune)
                own, shown = (None, None) if skip else paper.resolve(
                    numbers, spec.name, row.key, column.paper_column, metric, cfg)
                mark = MARK if spec.robust and masked([c.result for c in mine], key) else ""
                cells_text.append(_stat(measured) + mark + paper.beside(own, shown))
                if shown is not None and shown.value is not None:
                    values[(column.name, row.key, key)] = shown.value
                if own is not None and shown is not own and cfg is not None:
                    setting_notes[row.title] = paper.setting_note(row.title, own, shown, cfg)
            parts.append(f"| {row.title} | " + " | ".join(cells_text) + " |")
        for key, title in spec.untrained:
            if any(r.key == key for r in column.rows):  # trained at this scale
                continue
            beside = paper.beside(*paper.resolve(numbers, spec.name, key, column.paper_column,
                                                 None if not spec.robust else "A_nat", None))
            parts.append(f"| {title} | not trained here{beside} |" + " |" * (len(metrics) - 1))
        parts += control_rows(group, metrics, (pixels or {}).get(column.name))
        parts += ["", *pairs_text(group, metrics, values), *_best_text(spec, group, metrics, values)]
        parts += gain_text(group, metrics if spec.robust else None)
        note = ((pixels or {}).get(column.name) or {}).get("note")
        parts += [note, ""] if note else []
    parts += across_text(spec, cells, values)
    parts += _claims_legend(spec, scale, cells)
    entry = numbers.get(spec.name)
    if entry is not None:
        parts += [f"Paper numbers: {entry['source'].strip()} (solo_hyper/reproduce/paper_numbers.yaml), "
                  "each beside the runs that have its setting; 'paper' in a pair is the paper's "
                  "own difference at the runs' settings.", ""]  # fmt: skip
    if setting_notes:
        parts += ["Settings the paper's table differs in:", "", *setting_notes.values(), ""]
    rows = [c.result for c in cells if c.result]
    if rows and not spec.robust:
        parts += [notes(rows, [(k, t) for k, t in LINEAR_METRICS]), ""]
    if spec.robust:
        parts += diagnostics_text(cells, pixels)
        parts += ["LE: linear head on clean features; r-LE: head trained on PGD-10 examples; AT: "
                  "encoder and head fine-tuned adversarially (Madry et al.); A_nat clean accuracy, "
                  "PGD-20 white-box l_inf accuracy at each eps, AA AutoAttack's (Croce & Hein, "
                  "standard version: the point-wise worst case over APGD-CE, APGD-T, FAB-T and "
                  "Square) (robust-eval's protocol, "
                  f"{_robust_protocol_text(cells[0])})." + _images_text(cells), ""]
        if any(c.untrained for c in cells):
            parts += ["Controls of a robust table: each row's network at initialisation and the "
                      "raw pixels, put through the row's own robust protocol (LE and r-LE heads "
                      "by robust-eval; for AT, the same adversarial fine-tuning from "
                      "initialisation), `evaluation/robust_runs.py`.", ""]  # fmt: skip
    parts += ["Runs: " + ", ".join(sorted({Path(c.result['run_dir']).name for c in cells if c.result})), "",
              f"Code (the commit each run was trained at): {', '.join(_commits(cells))}. "
              + machine_note(rows), ""]  # fmt: skip
    return "\n".join(parts)


def _robust_protocol_text(cell: Cell) -> str:
    overrides = " ".join(cell.robust_overrides)
    return cell.column.robust_config + (f" with --robust-set {overrides}" if overrides else "")


def _backbone_text(cell: Cell) -> str:
    """The row's backbone as its config has it, e.g. ``small_cnn (batch_norm=False, width=32)``."""
    backbone = (cell.prep.cfg.get("backbone") or {}) if cell.prep is not None else {}
    kwargs = ", ".join(f"{k}={v}" for k, v in sorted((backbone.get("kwargs") or {}).items()))
    return str(backbone.get("name", "?")) + (f" ({kwargs})" if kwargs else "")


def control_rows(group: list[Cell], metrics, pixels: dict | None) -> list[str]:
    """The controls' lines of a column's table: the untrained backbones (mean ± std over the
    distinct networks), one line per backbone and input where the rows differ in them (EBCLR's
    BatchNorm-free network beside its baselines', RoCL's un-normalised pixels beside SimCLR's),
    and the raw pixels; a control the diagnostics flagged is marked as a row is."""
    lines = []
    for title, results in _controls(group, pixels):
        lines.append(f"| control: {title} | " + " | ".join(
            _stat([float(r[k]) for r in results if isinstance(r.get(k), (int, float))])
            + (MARK if masked(results, k) else "") for k, _, _ in metrics) + " |")  # fmt: skip
    return lines


def _controls(group: list[Cell], pixels: dict | None) -> list[tuple[str, list[dict]]]:
    """Each control line's title and results: every distinct untrained network per backbone
    and input, then the raw pixels."""
    by_network: dict[str, dict[str, dict]] = {}
    texts = {c.row: (_backbone_text(c), _input_text(c)) for c in group}
    vary = [len({t[i] for t in texts.values()}) > 1 for i in (0, 1)]
    for c in group:
        if c.untrained:  # a fine-tuned row's control is its base row's network, other protocol
            text = ", ".join(t for t, v in zip(texts[c.row], vary, strict=True) if v)
            by_network.setdefault(text, {}).setdefault(c.untrained["run_dir"], {}).update(c.untrained)
    found = [(TITLES[UNTRAINED] + (f", {text}" if text else ""), list(distinct.values()))
             for text, distinct in by_network.items()]  # fmt: skip
    return found + ([(TITLES[PIXELS], [pixels])] if pixels is not None else [])


def _input_text(cell: Cell) -> str:
    """'un-normalised input' where the run's data.mean/std leave the pixels as they are."""
    data = (cell.prep.cfg.get("data") or {}) if cell.prep is not None else {}
    plain = (all(float(m) == 0.0 for m in data.get("mean") or (1,))
             and all(float(s) == 1.0 for s in data.get("std") or (0,)))  # fmt: skip
    return "un-normalised input" if plain else "normalised input"


def gain_text(group: list[Cell], metrics=None) -> list[str]:
    """Each row's gain over its own untrained backbone, paired over seeds (``metrics``: the
    table's (key, title, paper) columns; default: the linear probe and kNN)."""
    with_control = [c for c in group if c.untrained]
    chosen = None if metrics is None else [(key, title) for key, title, _ in metrics]
    found = gains([{"config": c.row.title, **c.result} for c in with_control],
                  [c.untrained for c in with_control], metrics=chosen)  # fmt: skip
    if not found:
        return []
    lines = ["Gain over the untrained backbone (each run minus its own network at initialisation, "
             "seeded as the run; both evaluated alike, `evaluation/controls.py`; 95% Student-t "
             "interval):", "", *gain_table(found, "row")]  # fmt: skip
    return [*lines, ""]


def masked(results: list[dict], key: str) -> bool:
    """Whether ``key`` is an attack column of a model (a row's seeds, a control's networks) the
    diagnostics flagged in any of ``results``."""
    protocol, _, metric = key.partition(" ")
    return is_attack(metric) and any(
        str(r.get(f"{protocol} masking", "")).startswith("FLAGGED") for r in results)


def diagnostics_text(cells: list[Cell], pixels: dict[str, dict] | None = None) -> list[str]:
    """Each model's gradient-masking verdict over the seeds (robust-eval's diagnostics.md), then
    each control's over its networks."""
    lines = []
    for row in dict.fromkeys(c.row for c in cells):
        mine = [c for c in cells if c.row is row and c.result]
        for protocol in ("LE", "r-LE", "AT"):
            verdicts = [(c.seed, c.result.get(f"{protocol} masking")) for c in mine]
            verdicts = [(seed, v) for seed, v in verdicts if v]
            if not verdicts:
                continue
            bad = [f"seed {seed}: {v}" for seed, v in verdicts if v.startswith("FLAGGED")]
            seeds = " ".join(str(seed) for seed, _ in verdicts)
            strength = [f"seed {c.seed}: {c.result[f'{protocol} strength']}" for c in mine
                        if c.result.get(f"{protocol} strength")]  # fmt: skip
            lines.append(f"- {row.title} ({protocol}): " + ("; ".join(bad) if bad else
                         f"passed (seeds {seeds})") + (f"; stronger attacks than PGD-20: "
                         f"{'; '.join(strength)}" if strength else ""))  # fmt: skip
    for column in dict.fromkeys(c.column for c in cells):
        group = [c for c in cells if c.column is column]
        for title, results in _controls(group, (pixels or {}).get(column.name)):
            for protocol in ("LE", "r-LE", "AT"):
                verdicts = [str(r[f"{protocol} masking"]) for r in results if r.get(f"{protocol} masking")]
                if verdicts:
                    lines.append(f"- control: {title} ({protocol}): {_control_verdict(verdicts)}")
    if not lines:
        return []
    return ["Gradient-masking diagnostics (each run's robust/diagnostics.md, docs/robustness.md: "
            "Square at 5,000 queries vs white-box, PGD at the unbounded eps 0.5 vs chance, "
            "accuracy monotone in eps, transfer from the Euclidean twin, input-gradient norms); "
            f"{MARK} marks the robust columns of a model flagged in any seed. Then the drop "
            "from PGD-20 to PGD-200, to PGD-20 x10 restarts and to AutoAttack, each on its own:",
            "", *lines, ""]  # fmt: skip


def _control_verdict(verdicts: list[str]) -> str:
    """A control's verdict over its networks: the flags and how many networks had them, or
    'passed (N networks)'."""
    bad = [v for v in verdicts if v.startswith("FLAGGED")]
    n = len(verdicts)
    if not bad:
        return f"passed ({n} network{'s' * (n > 1)})"
    return "; ".join(bad) + (f" ({len(bad)} of {n} networks)" if n > 1 else "")


def _claims_legend(spec: Table, scale: str, cells: list[Cell]) -> list[str]:
    """What each printed pair's two configs differ in (checked by ``plan`` before any run)."""
    present = {(c.column.name, c.row.key) for c in cells}
    lines = [f"the best {p.about} against every other: {p.about}" if p.best else f"{p.title}: {p.about}"
             for p in pairs.table_pairs(spec, scale)
             if {(p.column_a.name, p.row_a.key), (p.column_b.name, p.row_b.key)} <= present]  # fmt: skip
    if not lines:
        return []
    return ["Each pair's two configs differ only in what its claim is about (checked before any "
            "run; docs/fairness.md): " + "; ".join(dict.fromkeys(lines)) + ".", ""]  # fmt: skip


def _commits(cells: list[Cell]) -> list[str]:
    found = []
    for c in cells:
        info = Path(c.result.get("run_dir", "")) / "run.json"
        commit = json.loads(info.read_text()).get("code", {}).get("git_commit") if info.is_file() else None
        found.append((commit or "unknown")[:7])
    return list(dict.fromkeys(found))


def _compared_keys(row: Row, key: str, title: str) -> list[tuple[str, str]]:
    """(baseline's result key, metric title) each of ``row``'s results is paired with: the same
    key, except a fine-tuned row's AT accuracy, which stands against the baseline's linear
    evaluations at the same attack (the paper's "AT improves RHCL further")."""
    if not (row.finetune and key.startswith("AT ")):
        return [(key, title)]
    attack = key[len("AT "):]
    return [(f"{p} {attack}", f"{key} vs {p}") for p in ("LE", "r-LE")]


@dataclass
class _Comparison:
    """One printed pair on one metric: A's and B's values over the seeds both measured."""

    name_a: str
    name_b: str
    title: str
    a: list[float]
    b: list[float]
    paper_a: float | None = None
    paper_b: float | None = None
    family: str = ""  # one claim over several pairs: Holm-adjusted together
    role: str = ""  # 'primary': a claim's metric of record; 'exploratory': the rest of its pair
    key: str = ""  # the result key (A's)
    seeds: tuple[int, ...] = ()  # the seeds both measured, in the order of ``a`` and ``b``

    @property
    def holm_group(self) -> tuple[str, str]:
        """The comparisons adjusted together: a claim's pairs on one metric, or one pair's
        exploratory metrics all together."""
        return (self.family, "" if self.role == EXPLORATORY else self.title)


PRIMARY, EXPLORATORY = "primary", "exploratory"


def _comparison(a: dict, b: dict, key_a: str, key_b: str, name_a: str, name_b: str, title: str,
                paper_a: float | None = None, paper_b: float | None = None,
                family: str = "", role: str = "") -> _Comparison | None:
    """A's ``key_a`` against B's ``key_b`` over the seeds both measured (``a`` and ``b`` map
    seed -> result), or None when no seed has both."""
    seeds = [s for s in a if s in b and isinstance(a[s].get(key_a), (int, float))
             and isinstance(b[s].get(key_b), (int, float))]  # fmt: skip
    if not seeds:
        return None
    return _Comparison(name_a, name_b, title, [float(a[s][key_a]) for s in seeds],
                       [float(b[s][key_b]) for s in seeds], paper_a, paper_b, family, role, key_a,
                       tuple(seeds))  # fmt: skip


def _intervals(comparisons: list[_Comparison]) -> list[Interval]:
    """Each comparison's interval: 95% alone, Holm-adjusted within its family (a claim's pairs on
    one metric; a pair's exploratory metrics together)."""
    out: list[Interval | None] = [None] * len(comparisons)
    families: dict[tuple[str, str], list[int]] = {}
    for i, c in enumerate(comparisons):
        if c.family:
            families.setdefault(c.holm_group, []).append(i)
        else:
            out[i] = paired_interval(c.a, c.b)
    for members in families.values():
        for i, iv in zip(members, holm_intervals([(comparisons[i].a, comparisons[i].b) for i in members])):
            out[i] = iv
    return out  # type: ignore[return-value]


def _lines(comparisons: list[_Comparison]) -> list[str]:
    """The pair table's lines, then one verdict per claim over several pairs."""
    intervals, lines = _intervals(comparisons), []
    for c, iv in zip(comparisons, intervals):
        ci = "-" if iv.low is None else f"[{iv.low:+.2f}, {iv.high:+.2f}]"
        if c.family:
            ci += f" Holm {sum(x.holm_group == c.holm_group for x in comparisons)}"
            ci += f" {EXPLORATORY}" if c.role == EXPLORATORY else ""
        elif c.role == PRIMARY:
            ci += " primary"
        gap = "-" if c.paper_a is None or c.paper_b is None else f"{c.paper_a - c.paper_b:+.2f}"
        lines.append(f"| {c.name_a} - {c.name_b} | {c.title} | {len(c.a)} | {iv.mean:+.2f} | {ci} | "
                     f"{verdict(iv, c.name_a, c.name_b)} | {gap} |")  # fmt: skip
    return lines


def _family_verdicts(comparisons: list[_Comparison]) -> list[str]:
    """'claim (metric): holds against every pair' only when every Holm-adjusted interval of the
    claim's pairs excludes 0 with A ahead; else which pairs are within noise or reversed."""
    intervals, out = _intervals(comparisons), []
    out += _exploratory_verdicts(comparisons, intervals)
    keys = dict.fromkeys((c.family, c.title) for c in comparisons if c.family and c.role != EXPLORATORY)
    for family, title in keys:
        members = [(c, iv) for c, iv in zip(comparisons, intervals)
                   if (c.family, c.title) == (family, title) and c.role != EXPLORATORY]  # fmt: skip
        if any(iv.within_noise is None for _, iv in members):
            out.append(f"- {family} ({title}): needs >= 2 seeds in every pair.")
            continue
        noise = [c.name_b for c, iv in members if iv.within_noise]
        reversed_ = [c.name_b for c, iv in members if not iv.within_noise and iv.mean < 0]
        if not noise and not reversed_:
            out.append(f"- {family} ({title}): **holds against every pair** ({len(members)}, "
                       "Holm-adjusted).")  # fmt: skip
            continue
        parts = [f"within noise against {', '.join(noise)}"] if noise else []
        parts += [f"reversed against {', '.join(reversed_)}"] if reversed_ else []
        out.append(f"- {family} ({title}): **not resolved**: {'; '.join(parts)} (Holm-adjusted "
                   f"over {len(members)} pairs).")  # fmt: skip
    return out


def _exploratory_verdicts(comparisons: list[_Comparison], intervals: list[Interval]) -> list[str]:
    """One line per exploratory family: each metric's verdict from its Holm-adjusted interval."""
    out = []
    for family in dict.fromkeys(c.family for c in comparisons if c.role == EXPLORATORY):
        members = [(c, iv) for c, iv in zip(comparisons, intervals)
                   if c.role == EXPLORATORY and c.family == family]  # fmt: skip
        if any(iv.within_noise is None for _, iv in members):
            out.append(f"- {family} (exploratory): needs >= 2 seeds in every comparison.")
            continue
        said = "; ".join(f"{c.title}: {verdict(iv, c.name_a, c.name_b)}" for c, iv in members)
        out.append(f"- {family} (exploratory, Holm-adjusted over {len(members)} comparisons): "
                   f"{said}.")  # fmt: skip
    return out


def _outcomes(result: dict, key: str) -> str | None:
    """A result's per-image outcomes of one accuracy ('r-LE AA 8/255'), or None if not stored."""
    protocol, _, label = key.partition(" ")
    return (result.get(f"{protocol} outcomes") or {}).get(label)


def _bootstrap_text(group: list[Cell], row: Row, baseline: str, c: _Comparison) -> str:
    """The paired bootstrap over seeds and images of a primary comparison, or why there is none
    (a stored evaluation without per-image outcomes: re-running robust-eval fills them)."""
    by_seed = {key: {x.seed: x.result for x in group if x.row.key == key} for key in (row.key, baseline)}
    stored = {(key, s): _outcomes(by_seed[key][s], c.key) for key in by_seed for s in c.seeds}
    missing = sorted({Path(str(by_seed[key][s].get("run_dir", f"{key} seed {s}"))).name
                      for (key, s), bits in stored.items() if bits is None})  # fmt: skip
    if missing:
        return ("image bootstrap: none, the stored robust evaluation of " + ", ".join(missing)
                + " has no per-image outcomes (re-running robust-eval fills them)")
    if len({len(bits) for bits in stored.values()}) != 1:
        return "image bootstrap: none, the runs' outcomes are over different numbers of images"
    a, b = ([[ch == "1" for ch in stored[(key, s)]] for s in c.seeds] for key in (row.key, baseline))
    _, low, high = paired_bootstrap(torch.tensor(a), torch.tensor(b), BOOTSTRAP_RESAMPLES)
    images = len(next(iter(stored.values())))
    return (f"paired bootstrap over the seeds and the {images} images (resampled together, "
            f"{BOOTSTRAP_RESAMPLES} resamples, 95% percentile): [{low:+.2f}, {high:+.2f}]")


BOOTSTRAP_RESAMPLES = 2000


def _results(cells: list[Cell], column: str, row: str) -> dict[int, dict]:
    return {c.seed: c.result for c in cells if c.column.name == column and c.row.key == row}


PAIR_HEADER = "| pair (A - B) | metric | seeds | mean | 95% interval | verdict | paper |"
PAIR_RULE = "|---|---|---|---|---|---|---|"
HOLM_NOTE = ("'Holm m': the interval is Holm-adjusted over the m pairs of one claim (family-wise "
             "95%: the pair with the k-th smallest p-value at 1 - 0.05/(m - k + 1), stepping down "
             "as Holm's procedure), so it excludes 0 exactly when Holm rejects; a claim over "
             "several pairs holds only when every one of them does. 'Holm m exploratory': "
             "adjusted over the m metrics of a pair whose claim has a primary metric (its "
             "secondary comparisons, one family).")  # fmt: skip


def _table(intro: str, comparisons: list[_Comparison]) -> list[str]:
    if not comparisons:
        return []
    out = [intro, "", PAIR_HEADER, PAIR_RULE, *_lines(comparisons), ""]
    verdicts = _family_verdicts(comparisons)
    if verdicts:
        out += [*verdicts, "", HOLM_NOTE, ""]
    return out


def across_text(spec: Table, cells: list[Cell], values: PaperValues | None = None) -> list[str]:
    """The table's pairs across two columns (same seed, the table's metrics)."""
    values = values or {}
    comparisons = []
    for pair in spec.across:
        col_a, row_a, col_b, row_b = pair.column_a, pair.row_a, pair.column_b, pair.row_b
        first_a, first_b = (next((c for c in cells if c.column.name == col and c.row.key == key), None)
                            for col, key in ((col_a, row_a), (col_b, row_b)))  # fmt: skip
        if first_a is None or first_b is None:
            continue
        a, b = _results(cells, col_a, row_a), _results(cells, col_b, row_b)
        name_a, name_b = f"{first_a.row.title} ({col_a})", f"{first_b.row.title} ({col_b})"
        for key, title, _ in metric_columns(spec, [first_a, first_b]):
            comparisons.append(_comparison(a, b, key, key, name_a, name_b, title,
                                           values.get((col_a, row_a, key)),
                                           values.get((col_b, row_b, key)), pair.family))  # fmt: skip
    comparisons = [c for c in comparisons if c is not None]
    if not comparisons:
        return []
    return ["## Across columns", "", *_table("Paired over the seeds both ran (95% Student-t "
                                             "interval):", comparisons)]  # fmt: skip


def pair_comparisons(group: list[Cell], metrics, values: PaperValues | None = None) -> list[_Comparison]:
    """Every claim of the column's rows against its baseline row, on each metric, over the seeds
    both ran (``values``: the paper's numbers beside them)."""
    values = values or {}
    comparisons = []
    group_rows = list(dict.fromkeys(c.row for c in group))
    column = group[0].column.name
    for row in group_rows:
        a = {c.seed: c.result for c in group if c.row is row}
        for claim in row.claims:
            base = next((r for r in group_rows if r.key == claim.baseline), None)
            if base is None:
                continue
            b = {c.seed: c.result for c in group if c.row is base}
            for key, metric, _ in metrics:
                family, role = claim.family, ""
                if claim.primary is not None:
                    role = PRIMARY if key == claim.primary.of_record else EXPLORATORY
                    family = "" if role == PRIMARY else claim.primary.exploratory
                for base_key, title in _compared_keys(row, key, metric):
                    comparisons.append(_comparison(
                        a, b, key, base_key, row.title, base.title, title,
                        values.get((column, row.key, key)), values.get((column, base.key, base_key)),
                        family, role))  # fmt: skip
    return [c for c in comparisons if c is not None]


def pairs_text(group: list[Cell], metrics, values: PaperValues | None = None) -> list[str]:
    comparisons = pair_comparisons(group, metrics, values)
    return [*primary_text(group, comparisons), *_table(
        "Paired differences over the seeds both ran (95% Student-t interval; 'within noise' when "
        "it holds 0):", comparisons)]  # fmt: skip


def figure_rows(group: list[Cell], pixels: dict | None) -> tuple[list[dict], list[dict], list[dict]]:
    """The column as ``plots.comparison_figure`` draws it: one row per run (by its row's title),
    the controls (each distinct untrained network, the raw pixels), and each claim's pair on
    each linear metric with the interval the table prints (Holm-adjusted within its family)."""
    runs = [{"config": c.row.title, "seed": c.seed, **c.result} for c in group if c.result]
    controls = [{**result, "config": f"control: {title}"} for title, results in _controls(group, pixels)
                for result in results]  # fmt: skip
    metrics = [(key, title, None) for key, title in LINEAR_METRICS]
    comparisons = pair_comparisons(group, metrics)
    pair_rows = [{"pair": f"{c.name_a} - {c.name_b}", "key": c.key, "interval": iv}
                 for c, iv in zip(comparisons, _intervals(comparisons))]  # fmt: skip
    return runs, controls, pair_rows


def primary_text(group: list[Cell], comparisons: list[_Comparison]) -> list[str]:
    """The column's primary claims: each pair's metric of record with its seed interval and the
    image bootstrap, the paper's attack beside it (its interval from the exploratory family) and
    the paper's own difference labelled with its attack and head."""
    intervals = _intervals(comparisons)
    out = []
    for c, iv in zip(comparisons, intervals):
        if c.role != PRIMARY:
            continue
        row = next(x.row for x in group if x.row.title == c.name_a)
        claim = next(k for k in row.claims if k.primary is not None)
        ci = "-" if iv.low is None else f"[{iv.low:+.2f}, {iv.high:+.2f}]"
        out += [f"Primary claim ({c.name_a} > {c.name_b}, declared in the table's definition): "
                f"{c.title} (the attack of record), {len(c.a)} seeds: {iv.mean:+.2f}, 95% seed "
                f"interval {ci}: **{verdict(iv, c.name_a, c.name_b)}**; "
                f"{_bootstrap_text(group, row, claim.baseline, c)}.", ""]  # fmt: skip
        for beside in claim.primary.beside:
            found = [(x, xv) for x, xv in zip(comparisons, intervals)
                     if x.key == beside and x.name_a == c.name_a and x.name_b == c.name_b]  # fmt: skip
            for x, xv in found:
                xci = "-" if xv.low is None else f"[{xv.low:+.2f}, {xv.high:+.2f}]"
                paper_gap = ("" if x.paper_a is None or x.paper_b is None else
                             f"; the paper's {x.paper_a - x.paper_b:+.2f} is this attack and head")
                out += [f"- beside it, {x.title} (the paper's attack): {xv.mean:+.2f}, {xci} "
                        f"(Holm-adjusted with the exploratory family): "
                        f"{verdict(xv, x.name_a, x.name_b)}{paper_gap}.", ""]  # fmt: skip
        out += [f"Every other {c.name_a} - {c.name_b} comparison is exploratory: one family, "
                "Holm-adjusted together, its verdicts from the adjusted intervals.", ""]
    return out


def _best_text(spec: Table, group: list[Cell], metrics, values: PaperValues) -> list[str]:
    """The table's Best claim: the highest mean against every other row, Holm-adjusted; "best"
    only when resolved against all of them."""
    best = spec.best
    rows = [r for r in dict.fromkeys(c.row for c in group) if best is not None and r.key in best.rows]
    if len(rows) < 2:
        return []
    column = group[0].column.name
    results = {r.key: {c.seed: c.result for c in group if c.row is r} for r in rows}
    out = [f"Which {best.about} is best: the highest mean against "
           "every other row (Holm-adjusted over those pairs); best only when resolved against "
           f"all of them. The paper's best: {next((r.title for r in rows if r.key == best.claimed), best.claimed)}.",
           "", PAIR_HEADER, PAIR_RULE]  # fmt: skip
    sentences = []
    for key, title, _ in metrics:
        means = {r.key: mean(v) for r in rows
                 if (v := [float(x[key]) for x in results[r.key].values()
                           if isinstance(x.get(key), (int, float))])}  # fmt: skip
        if len(means) < 2:
            continue
        top = next(r for r in rows if r.key == max(means, key=means.get))
        family = f"{top.title} is the best {best.about}"
        comparisons = [c for c in (
            _comparison(results[top.key], results[r.key], key, key, top.title, r.title, title,
                        values.get((column, top.key, key)), values.get((column, r.key, key)), family)
            for r in rows if r is not top and r.key in means) if c is not None]  # fmt: skip
        out += _lines(comparisons)
        intervals = _intervals(comparisons)
        tied = [c.name_b for c, iv in zip(comparisons, intervals) if iv.within_noise is not False]
        if not tied:
            sentences.append(f"- {title}: **{top.title} is best**, resolved against every other "
                             f"row ({len(comparisons)} pairs, Holm-adjusted).")  # fmt: skip
        else:
            sentences.append(f"- {title}: **no best resolved**: {top.title} has the highest mean "
                             f"({means[top.key]:.2f}) but is within noise of {', '.join(tied)} "
                             "(Holm-adjusted).")  # fmt: skip
    if not sentences:
        return []
    return [*out, "", *sentences, "", HOLM_NOTE, ""]


__all__ = ["across_text", "budget", "control_rows", "diagnostics_text", "file_safe", "figure_rows",
           "gain_text", "markdown", "masked", "metric_columns", "pair_comparisons", "pairs_text", "primary_text",
           "write_tables"]  # fmt: skip
