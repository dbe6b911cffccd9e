"""`reproduce`: every table's cells have the paper's number on file, a restarted campaign trains
nothing that finished, bad names are one clear error, and a tiny table comes out with every cell
filled and the paper's numbers beside."""

from __future__ import annotations

import json
import re

import pytest

from solo_hyper.cli.main import main
from solo_hyper.config import ConfigError
from solo_hyper.reproduce import campaign, pairs, paper, report, tables
from solo_hyper.reproduce.cells import Cell, plan
from solo_hyper.reproduce.tables import NOT_RUNNABLE, TABLES

TINY_LINEAR = "tests/linear-tiny.yaml"
TINY = ["data.train_subset=64", "optimizer.batch_size=32", "knn_eval.enabled=false"]


def claimed_cells(name: str) -> set[tuple]:
    """(row, paper column, metric) of every cell a table prints a paper number beside."""
    spec, out = TABLES[name], set()
    for columns in spec.scales.values():
        for column in columns:
            rows = [r.key for r in column.rows] + [key for key, _ in spec.untrained]
            for row in rows:
                metrics = ("A_nat", "PGD") if spec.robust else (None,)
                out |= {(row, column.paper_column, m) for m in metrics}
    return out


@pytest.mark.parametrize("name", list(TABLES))
def test_the_paper_number_file_has_exactly_the_cells_each_table_claims(name):
    numbers = paper.load()
    if not TABLES[name].paper:  # a table of this package's own: no paper's number beside it
        assert name not in numbers
        return
    assert name in numbers, f"paper_numbers.yaml has no entry for {name}"
    on_file = set(numbers[name]["cells"])
    assert claimed_cells(name) == on_file
    untrained = {key for key, _ in TABLES[name].untrained}
    for cell, number in numbers[name]["cells"].items():
        assert number.value is None or 0 <= number.value <= 100, cell
        # every trained row's number says at which setting it was measured
        assert cell[0] in untrained or "method" in number.setting, cell


def test_one_setting_has_one_number_across_the_papers_tables():
    """The same experiment quoted by two tables (HCL at c = 0.6 on CIFAR-10: Tables 1 and 4,
    section 4.4) carries the same number, so a cell's number does not depend on the table (inside
    one table, RHCL+AT shares RHCL's config: the fine-tuning is the row's own)."""
    seen: dict = {}
    for entry in paper.load().values():
        for n in entry["cells"].values():
            if n.value is None or not n.setting:
                continue
            key = (entry["paper"], entry["metric"], n.column, n.metric, repr(sorted(n.setting.items())))
            table, value = seen.setdefault(key, (n.table, n.value))
            assert table == n.table or value == n.value, (key, table, n.table)


def test_the_paper_numbers_are_the_papers_own():
    """Spot checks against the paper text itself (not a copy of the data file)."""
    from vendored import paper_text

    text = paper_text("hyperbolic-contrastive-learning")
    numbers = paper.load()
    for name, entry in numbers.items():
        if entry["paper"] != "hyperbolic-contrastive-learning":
            continue
        for value in (n.value for n in entry["cells"].values() if n.value is not None):
            assert re.search(rf"(?<![\d.]){re.escape(format(value, 'g'))}(?![\d])", text) or \
                re.search(rf"(?<![\d.]){value:.2f}(?![\d])", text), (name, value)  # fmt: skip


def test_list_names_every_table_and_what_cannot_run(capsys):
    assert main(["reproduce", "--list"]) == 0
    out = capsys.readouterr().out
    for name in [*TABLES, *NOT_RUNNABLE]:
        assert name in out


def test_an_unknown_table_is_one_error_that_lists_the_known_ones(capsys):
    assert main(["reproduce", "hcl-tabel1", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "did you mean 'hcl-table1'" in err
    assert all(name in err for name in TABLES)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"rows": ["nope"]}, "has no row 'nope'"),
        ({"columns": ["CIFAR-10"]}, "has no column 'CIFAR-10'"),
        ({"seeds": ["x"]}, "--seeds takes integers"),
        ({"epochs": 0}, "--epochs must be an integer >= 1"),
        ({"overrides": ["seed=3"]}, "give the seeds with --seeds"),
        ({"overrides": ["method_kwargs.curvatur=0.2"]}, "curvatur"),
    ],
)
def test_bad_input_is_refused_before_any_work(tmp_path, kwargs, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        plan("hcl-normalization", "cpu", out=str(tmp_path), **kwargs)
    assert not (tmp_path / "runs").exists()


def test_a_gpu_column_without_its_dataset_says_where_to_put_it(tmp_path):
    with pytest.raises(ConfigError, match="--data-root"):
        plan("hcl-table1", "gpu", out=str(tmp_path), data_root=str(tmp_path))


def test_the_cpu_table1_runs_are_the_compare_runs_of_the_same_budget(tmp_path):
    """reproduce hcl-table1 names its runs as `compare --seeds` does, so that a comparison run
    into OUT/runs with the same budget is reused (hash and directory equal)."""
    from solo_hyper.campaigns.compare import plan as compare_plan
    from solo_hyper.run.identity import config_hash

    cells = plan("hcl-table1", "cpu", seeds=[0], out=str(tmp_path))
    other = compare_plan([f"configs/pretrain/{ds}/{m}.yaml" for ds in ("fashionmnist", "mnist")
                          for m in ("simclr", "hcl")], str(tmp_path / "runs"), 10, seeds=[0])  # fmt: skip
    mine = {c.prep.cfg["name"]: config_hash(c.prep.cfg) for c in cells}
    theirs = {p.cfg["name"]: config_hash(p.cfg) for _, p in other.runs}
    assert mine == theirs


@pytest.mark.slow
def test_a_restarted_reproduce_trains_nothing_that_finished(tmp_path, capsys, monkeypatch):
    import solo_hyper.launch.jobs as launch_jobs

    out = str(tmp_path)
    args = ["reproduce", "hcl-normalization", "--seeds", "0", "--epochs", "1", "--out", out,
            "--linear-config", TINY_LINEAR, "--quiet", "--set", *TINY]  # fmt: skip
    assert main([*args, "--rows", "normalized"]) == 0  # an interrupted campaign: one row done
    statuses = {c.row.key: c.status for c in plan(
        "hcl-normalization", "cpu", seeds=[0], epochs=1, overrides=TINY, out=out)}  # fmt: skip
    assert statuses == {"normalized": "finished", "unnormalized": "new"}

    trained = []
    real = launch_jobs.train_or_reuse

    def counting(prep, quiet=False):
        row = real(prep, quiet)
        if not row.get("reused"):
            trained.append(prep.cfg["name"])
        return row

    monkeypatch.setattr(launch_jobs, "train_or_reuse", counting)
    capsys.readouterr()
    assert main(args) == 0
    assert trained == ["fashionmnist-hcl-unnormalized-ab-s0"]
    table = capsys.readouterr().out
    # every measured cell is filled and the paper's numbers stand beside the linear column
    rows = [line for line in table.splitlines()  # the table's rows, not the gain lines
            if line.startswith(("| with normalisation |", "| without normalisation |"))
            and "top-1 |" not in line]  # fmt: skip
    assert len(rows) == 2 and all(" - |" not in line and "| -" not in line for line in rows)
    # the runs are at c = 0.1: the paper's c = 0.1 number (its Table 4), none without normalisation
    assert "(paper 87.19, its Table 4)" in rows[0] and "(paper -)" in rows[1]
    assert "without normalisation - with normalisation | linear top-1 | 1 |" in table
    # the controls beside the rows: the untrained backbone (one: both rows start from it) and
    # the raw pixels, and each row's gain over its own untrained backbone
    assert "| control: untrained backbone |" in table and "| control: raw pixels |" in table
    assert "Raw pixels: the evaluation view's normalised 1 x 28 x 28 pixels" in table
    assert "| with normalisation | linear top-1 | 1 |" in table.split("Gain over the untrained")[1]

    trained.clear()
    assert main(args) == 0  # a finished campaign trains nothing
    assert trained == []


def test_two_campaigns_of_one_table_and_out_are_refused(tmp_path):
    from solo_hyper.run.lock import RunLockedError, hold

    with hold(tmp_path / ".locks" / "hcl-normalization-cpu-e1-seeds-0"):
        with pytest.raises(RunLockedError, match="reproduce hcl-normalization --scale cpu"):
            campaign.reproduce("hcl-normalization", "cpu", str(tmp_path), seeds=[0], epochs=1)


def test_a_narrowed_seed_set_writes_its_own_table_and_holds_its_own_lock():
    """`--seeds 0` must neither overwrite the three-seed table nor block `--seeds 1` of the same
    rows in another terminal (each trains its own runs; the full command then tabulates them)."""
    tag = campaign.file_tag
    assert tag(None, None, None, ()) == tag(None, None, None, (), [0, 1, 2]) == ""
    assert tag(None, ["simclr"], None, (), ["2"]) == "-seeds-2-rows-simclr"
    assert tag(10, None, None, (), [0, 1]) == "-e10-seeds-0+1"
    assert len({tag(None, None, None, (), s) for s in ([0], [1], [0, 1, 2])}) == 3
    # a column's name becomes a plain file-name part (no spaces, no shell redirection)
    assert tag(None, None, ["MNIST short", "MNIST->FMNIST"], ()) == "-columns-MNIST_short+MNIST-to-FMNIST"


def test_rows_on_different_backbones_get_one_control_line_each():
    """EBCLR's BatchNorm-free network and its baselines' network are different untrained
    controls: the table shows each (mean over its own seeds), not one mean over both."""
    from types import SimpleNamespace

    column = TABLES["ebclr-table3"].scales["cpu"][0]
    cells = []
    for row, kwargs, base in ((column.rows[0], {"width": 32}, 90.0),
                              (column.rows[1], {"width": 32, "batch_norm": False}, 80.0)):  # fmt: skip
        for seed in (0, 1):
            prep = SimpleNamespace(cfg={"backbone": {"name": "small_cnn", "kwargs": kwargs}})
            cell = Cell(column, row, seed, prep=prep)
            cell.untrained = {"run_dir": f"{row.key}-{seed}", "linear_acc1": base + seed, "knn_top1": base}
            cells.append(cell)
    metrics = [("linear_acc1", "linear top-1", None), ("knn_top1", "kNN top-1", None)]
    lines = report.control_rows(cells, metrics, {"linear_acc1": 70.0, "knn_top1": 71.0})
    assert lines == [
        "| control: untrained backbone, small_cnn (width=32) | 90.50 ± 0.71 | 90.00 ± 0.00 |",
        "| control: untrained backbone, small_cnn (batch_norm=False, width=32) | 80.50 ± 0.71 | 80.00 ± 0.00 |",
        "| control: raw pixels | 70.00 | 71.00 |",
    ]
    # one backbone: one plain line, as every single-backbone table has it
    assert report.control_rows(cells[:2], metrics, None)[0].startswith("| control: untrained backbone | ")


def test_the_papers_pgd_number_stands_beside_the_robust_heads_8_255_attack():
    """HCL Table 3's l_inf column is PGD at 8/255 (the attack the robust configs list first) of
    the robust linear evaluation (the paper's section 4.2), never LE's."""
    spec = TABLES["hcl-table3"]
    column = spec.scales["cpu"][0]
    cells = []
    for row in column.rows[2:4]:  # RoCL, RHCL
        cell = Cell(column, row, 0, prep=None)
        cell.result = {"run_dir": "x", "LE A_nat": 70.0, "LE PGD-20 8/255": 50.0,
                       "LE PGD-20 16/255": 30.0, "r-LE A_nat": 69.0, "r-LE PGD-20 8/255": 55.0,
                       "r-LE PGD-20 16/255": 40.0}  # fmt: skip
        cells.append(cell)
    metrics = report.metric_columns(spec, cells)
    assert [m[0] for m in metrics][:3] == ["LE A_nat", "LE PGD-20 8/255", "LE PGD-20 16/255"]
    paper = {key: p for key, _, p in metrics}
    assert paper["r-LE PGD-20 8/255"] == "PGD" and paper["r-LE PGD-20 16/255"] == "-"
    assert paper["r-LE A_nat"] == "A_nat" and paper["LE PGD-20 8/255"] == "-"
    assert paper["LE A_nat"] == "-"


def test_rhcl_at_is_paired_with_rhcls_linear_evaluations_at_the_same_attack():
    """"AT improves RHCL further": RHCL+AT's AT accuracy minus RHCL's LE and r-LE accuracy at the
    same attack, seed by seed; RHCL is also paired with HCL and RoCL with SimCLR."""
    spec = TABLES["hcl-table3"]
    column = spec.scales["cpu"][0]
    rows = {r.key: r for r in column.rows}
    cells = []
    for seed, shift in ((0, 0.0), (1, 1.0), (2, 3.0)):
        for key in ("simclr", "hcl", "simclr-rocl-recipe", "hcl-rhcl-recipe", "rocl", "rhcl"):
            cell = Cell(column, rows[key], seed, prep=None)
            cell.result = {"LE A_nat": 70.0 + shift, "LE PGD-20 8/255": 50.0 + shift,
                           "r-LE A_nat": 69.0, "r-LE PGD-20 8/255": 55.0}  # fmt: skip
            cells.append(cell)
        at = Cell(column, rows["rhcl-at"], seed, prep=None)
        at.result = {"AT A_nat": 60.0, "AT PGD-20 8/255": 52.0 + 2 * shift}
        cells.append(at)
    text = "\n".join(report.pairs_text(cells, report.metric_columns(spec, cells)))
    # AT - LE at 8/255: 2, 3, 5 over the seeds (mean 10/3); AT - r-LE: -3, -1, +3 (mean -1/3)
    assert "| RHCL+AT - RHCL | AT PGD-20 8/255 vs LE | 3 | +3.33 |" in text
    assert "| RHCL+AT - RHCL | AT PGD-20 8/255 vs r-LE | 3 | -0.33 |" in text
    assert "| RHCL+AT - RHCL | AT A_nat vs LE | 3 | -11.33 |" in text
    # adversarial training against the same recipe without the attack, not against simclr.yaml
    assert "| RHCL - HCL, RHCL's recipe | LE PGD-20 8/255 | 3 | +0.00 |" in text
    assert "| RoCL - SimCLR, RoCL's recipe | LE A_nat | 3 | +0.00 |" in text
    assert "| RoCL - SimCLR |" not in text and "| RHCL - HCL |" not in text
    assert "RHCL+AT - RHCL | LE" not in text  # a fine-tuned row has no LE of its own


def test_a_pair_is_titled_by_its_metric_not_its_result_key():
    spec = TABLES["hcl-normalization"]
    column = spec.scales["cpu"][0]
    cells = []
    for seed in (0, 1):
        for row, acc in zip(column.rows, (84.0, 83.0 + seed)):
            cell = Cell(column, row, seed, prep=None)
            cell.result = {"linear_acc1": acc, "knn_top1": 77.0}
            cells.append(cell)
    text = "\n".join(report.pairs_text(cells, report.metric_columns(spec, cells)))
    assert "| without normalisation - with normalisation | linear top-1 | 2 | -0.50 |" in text
    assert "| kNN top-1 | 2 | +0.00 |" in text and "linear_acc1" not in text


def test_ebclr_table3_pairs_the_batch_claims_and_the_epochs_across_columns():
    """EBCLR at 16 vs SimCLR at 128, SimCLR 16 vs 128, EBCLR 16 vs 128 inside a column; EBCLR's
    short column vs SimCLR's long one (4x fewer epochs) across the two."""
    spec = TABLES["ebclr-table3"]
    short, long = spec.scales["cpu"][:2]  # Fashion-MNIST's (MNIST's: the next two)
    cells = []
    for column, level in ((short, 80.0), (long, 82.0)):
        for row in column.rows:
            for seed in (0, 1):
                cell = Cell(column, row, seed, prep=None)
                bonus = 1.0 if row.key == "ebclr-b16" else 0.0
                cell.result = {"linear_acc1": level + bonus + seed, "knn_top1": 70.0}
                cells.append(cell)
    within = "\n".join(report.pairs_text([c for c in cells if c.column is long],
                                            report.metric_columns(spec, cells)))  # fmt: skip
    assert "| EBCLR, batch 16 - SimCLR, batch 128 | linear top-1 | 2 | +1.00 |" in within
    assert "| EBCLR, batch 16 - EBCLR, batch 128 | linear top-1 | 2 | +1.00 |" in within
    assert "| SimCLR, batch 16 - SimCLR, batch 128 | linear top-1 | 2 | +0.00 |" in within
    across = "\n".join(report.across_text(spec, cells))
    assert "| EBCLR, batch 16 (short) - SimCLR, batch 16 (long) | linear top-1 | 2 | -1.00 |" in across
    assert "| EBCLR, batch 128 (short) - SimCLR, batch 128 (long) | linear top-1 | 2 | -2.00 |" in across
    assert report.across_text(TABLES["hcl-table1"], cells) == []  # a table without such pairs


def fabricated_cells(name: str, scale: str, accuracy: dict[str, float], column: int = 0):
    """One seed of a table's column with fabricated accuracies, each row's config resolved as the
    campaign resolves it (no run, no data)."""
    from solo_hyper.run.train import prepare

    col = TABLES[name].scales[scale][column]
    cells = []
    for row in col.rows:
        if row.key not in accuracy:
            continue
        prep = prepare(row.config, [*col.overrides, *row.overrides])
        cell = Cell(col, row, 0, prep)
        cell.result = {"run_dir": "x", "linear_acc1": accuracy[row.key], "knn_top1": 70.0}
        cells.append(cell)
    return cells


def test_a_table4_cell_at_c_0_1_shows_the_papers_c_0_1_number():
    cells = fabricated_cells("hcl-table4", "cpu", {"c=0.1": 83.0, "c=0.6": 82.0})
    text = report.markdown(TABLES["hcl-table4"], "cpu", cells, paper.load())
    assert "| c = 0.1 | 83.00 (paper 87.19) |" in text
    assert "| c = 0.6 | 82.00 (paper 87.98) |" in text
    assert "| c = 0.1 - c = 0.6 | linear top-1 | 1 | +1.00 | - Holm 1 | " in text
    assert text.count("| -0.79 |") == 1  # the paper's c = 0.1 - c = 0.6: 87.19 - 87.98


def test_hcl_table1_at_c_0_1_quotes_the_c_0_1_number_not_the_c_0_6_one():
    """Table 1's CIFAR-10 HCL number is the paper's c = 0.6 result; the CPU runs are at c = 0.1,
    so the paper's number beside them (and the paper's gap) is its Table 4's c = 0.1 one."""
    cells = fabricated_cells("hcl-table1", "cpu", {"simclr": 86.0, "hcl": 86.5})
    text = report.markdown(TABLES["hcl-table1"], "cpu", cells, paper.load())
    assert "87.98" not in text.split("Settings the paper's table differs in")[0]
    assert "| HCL | 86.50 (paper 87.19, its Table 4) |" in text
    assert "| SimCLR | 86.00 (paper 86.58) |" in text
    assert "| HCL - SimCLR | linear top-1 | 1 | +0.50 | - | " in text and "| +0.61 |" in text
    assert "| HCL - SimCLR | kNN top-1 | 1 | +0.00 | - | needs >= 2 seeds | - |" in text
    assert "- HCL: the table's own number (87.98) is at method_kwargs.curvature=0.6 (run: 0.1)" in text
    # at the paper's setting (the CIFAR-10 config, c = 0.6) the table's own number stands
    gpu = fabricated_cells("hcl-table1", "gpu", {"simclr": 86.0, "hcl": 86.5})
    text = report.markdown(TABLES["hcl-table1"], "gpu", gpu, paper.load())
    assert "| HCL | 86.50 (paper 87.98) |" in text and "| +1.40 |" in text


def test_a_run_at_a_setting_the_paper_never_measured_gets_a_dash():
    cells = fabricated_cells("hcl-normalization", "cpu", {"normalized": 84.0, "unnormalized": 83.0})
    text = report.markdown(TABLES["hcl-normalization"], "cpu", cells, paper.load())
    assert "| without normalisation | 83.00 (paper -) |" in text
    assert "| without normalisation - with normalisation | linear top-1 | 1 | -1.00 | - | " in text
    line = next(x for x in text.splitlines() if x.startswith("| without normalisation - with"))
    assert line.endswith("| - |")  # no paper gap: the paper has no unnormalised c = 0.1 number


def resolved(column, row) -> dict:
    from solo_hyper.run.train import prepare

    return prepare(row.config, [*column.overrides, *row.overrides]).cfg


@pytest.mark.parametrize("name", list(TABLES))
def test_every_pair_reproduce_prints_differs_only_in_what_its_claim_is_about(name):
    """For every pair of every scale (rows' claims and pairs across columns), the two resolved
    configs, method defaults filled in, differ only in the keys the claim names."""
    spec, checked = TABLES[name], 0
    for scale in spec.scales:
        for pair in pairs.table_pairs(spec, scale):
            a, b = resolved(pair.column_a, pair.row_a), resolved(pair.column_b, pair.row_b)
            assert pairs.undeclared(a, b, pair.keys) == [], (scale, pair.title)
            checked += 1
    assert checked > 0


def test_the_old_robustness_pairs_were_confounded_and_would_be_refused():
    """RoCL vs simclr.yaml differs in far more than the attack: temperature, crops, jitter,
    grayscale and the input normalisation; its recipe twin differs in the method alone."""
    column = TABLES["hcl-table3"].scales["cpu"][0]
    rows = {r.key: r for r in column.rows}
    rocl = resolved(column, rows["rocl"])
    extra = pairs.undeclared(rocl, resolved(column, rows["simclr"]), tables.ATTACK)
    assert {"method_kwargs.temperature", "augmentations.0.rrc.crop_min_scale", "data.mean",
            "augmentations.0.grayscale.prob"} <= set(extra)  # fmt: skip
    assert pairs.undeclared(rocl, resolved(column, rows["simclr-rocl-recipe"]), tables.ATTACK) == []
    assert pairs.differences(rocl, resolved(column, rows["simclr-rocl-recipe"]))  # not vacuous


def test_a_table_with_an_unclean_pair_is_refused_before_any_work(tmp_path, monkeypatch):
    from dataclasses import replace

    spec = TABLES["hcl-table3"]
    column = spec.scales["cpu"][0]
    rows = tuple(replace(r, claims=(tables.Claim("simclr", "the attack", tables.ATTACK),))
                 if r.key == "rocl" else r for r in column.rows)  # fmt: skip
    bad = replace(spec, scales={"cpu": (replace(column, rows=rows),)})
    monkeypatch.setitem(TABLES, "hcl-table3", bad)
    with pytest.raises(ConfigError, match=r"RoCL - SimCLR differs in .*method_kwargs\.temperature"):
        plan("hcl-table3", "cpu", seeds=[0], out=str(tmp_path))
    assert not (tmp_path / "runs").exists()


def test_fairness_doc_lists_every_pair():
    text = " ".join(open("docs/fairness.md").read().split())  # titles may wrap
    for spec in TABLES.values():
        for scale in spec.scales:
            for pair in pairs.table_pairs(spec, scale):
                if pair.best:  # which row is best comes from the runs: the doc names the claim
                    assert f"the best {spec.best.about} against every other" in text
                    continue
                assert re.search(re.escape(pair.title) + r"[:,\s]", text), (spec.name, pair.title)


def seeded_cells(name: str, accuracy: dict[str, list[float]], scale: str = "cpu"):
    """Fabricated linear accuracies, one cell per seed of each row (the rows' configs resolved)."""
    cells = []
    for first in fabricated_cells(name, scale, {k: v[0] for k, v in accuracy.items()}):
        for seed, acc in enumerate(accuracy[first.row.key]):
            cell = Cell(first.column, first.row, seed, first.prep)
            cell.result = {"run_dir": "x", "linear_acc1": acc, "knn_top1": 70.0}
            cells.append(cell)
    return cells


def table4(leader: str, lead: float) -> str:
    """Table 4 with every c at the same level (seed noise) and ``leader`` ``lead`` points ahead."""
    noise = [[0.3, -0.2, 0.1], [0.0, 0.4, -0.3], [-0.2, 0.1, 0.3]]
    accuracy = {f"c={c}": [83.0 + noise[i % 3][s] + (lead if f"c={c}" == leader else 0.0)
                           for s in range(3)] for i, c in enumerate(tables.CURVATURES)}  # fmt: skip
    return report.markdown(TABLES["hcl-table4"], "cpu", seeded_cells("hcl-table4", accuracy),
                             paper.load())  # fmt: skip


def test_table4_calls_a_best_c_only_when_resolved_against_every_other_row():
    resolved = table4("c=0.6", 3.0)
    assert "**c = 0.6 is best**, resolved against every other row (9 pairs, Holm-adjusted)" in resolved
    assert resolved.count("| c = 0.6 - c = ") == 9 and "Holm 9 |" in resolved
    assert "Holm-adjusted over the m pairs of one claim" in resolved  # the legend says so
    tie = table4("c=0.1", 0.2)
    assert "**no best resolved**: c = 0.1 has the highest mean" in tie
    assert "is best**" not in tie


def test_holm_withholds_a_best_that_one_unadjusted_interval_would_grant():
    """c = 0.4 ahead of one row by a margin a lone 95% interval resolves, not after Holm over 9."""
    from solo_hyper.evaluation.stats import paired_interval

    base = [83.0, 83.5, 84.0]
    others = [f"c={c}" for c in tables.CURVATURES if c not in (0.1, 0.4)]
    accuracy = {k: [x + 0.05 * i + e for x, e in zip(base, (0.5, -0.6, 0.2))]
                for i, k in enumerate(others)}  # fmt: skip
    accuracy["c=0.1"] = base
    accuracy["c=0.4"] = [x + 0.6 + e for x, e in zip(base, (0.0, 0.1, -0.1))]
    lone = paired_interval(accuracy["c=0.4"], accuracy["c=0.1"])
    assert not lone.within_noise  # alone: "c = 0.4 higher"
    text = report.markdown(TABLES["hcl-table4"], "cpu", seeded_cells("hcl-table4", accuracy),
                             paper.load())  # fmt: skip
    line = next(x for x in text.splitlines() if x.startswith("| c = 0.4 - c = 0.1 | linear"))
    assert "within noise" in line and "Holm 9" in line
    assert "**no best resolved**: c = 0.4" in text


def test_ebclr_table1_reads_every_baseline_through_holm_adjusted_intervals():
    base = [80.0, 80.5, 81.0]
    accuracy = {"simclr": base, "mocov2plus": [x - 0.4 for x in base],
                "simsiam": [x - 3.0 for x in base], "byol": [x - 2.5 for x in base]}
    accuracy["ebclr"] = [x + 2.0 + e for x, e in zip(base, (0.3, -0.3, 0.1))]
    text = report.markdown(TABLES["ebclr-table1"], "cpu", seeded_cells("ebclr-table1", accuracy),
                             paper.load())  # fmt: skip
    lines = [x for x in text.splitlines() if x.startswith("| EBCLR - ") and "| linear top-1 |" in x]
    assert len(lines) == 4 and all("Holm 4 |" in x for x in lines)
    assert "EBCLR outperforms every baseline (linear top-1): **holds against every pair** (4," in text
    accuracy["mocov2plus"] = [x + 2.1 for x in base]  # level with EBCLR
    text = report.markdown(TABLES["ebclr-table1"], "cpu", seeded_cells("ebclr-table1", accuracy),
                             paper.load())  # fmt: skip
    assert "(linear top-1): **not resolved**: within noise against MoCo v2 (Holm-adjusted over 4" in text

def test_the_baselines_table_draws_every_row_beside_its_controls_and_the_adjusted_pairs(tmp_path):
    """reproduce's comparison figure (the compare command's, plots.comparison_figure): each row's
    seeds, then the controls, and HCL against each baseline with the interval the table prints,
    the Holm-adjusted one of the claim's family."""
    from solo_hyper.evaluation.stats import paired_interval

    rows = [r.key for r in TABLES["baselines"].scales["cpu"][0].rows]
    accuracy = {key: [80.0 + 0.1 * i + e for e in (0.0, 0.4, -0.3)] for i, key in enumerate(rows)}
    accuracy["hcl"] = [82.0, 82.6, 81.9]
    cells = seeded_cells("baselines", accuracy)
    for cell in cells:
        cell.untrained = {"run_dir": f"untrained-s{cell.seed}", "linear_acc1": 78.0 + cell.seed,
                          "knn_top1": 70.0}  # fmt: skip
    pixels = {"run_dir": "pixels", "linear_acc1": 84.0, "knn_top1": 85.0}
    runs, controls, pairs = report.figure_rows(cells, pixels)
    assert len(runs) == 3 * len(rows) and {r["config"] for r in runs} == {c.row.title for c in cells}
    assert [c["config"] for c in controls] == ["control: untrained backbone"] * 3 + ["control: raw pixels"]
    linear = [p for p in pairs if p["key"] == "linear_acc1"]
    assert len(linear) == len(rows) - 1 and all(p["pair"].startswith("HCL - ") for p in linear)
    lone = paired_interval(accuracy["hcl"], accuracy["simclr"])
    adjusted = next(p["interval"] for p in linear if p["pair"] == "HCL - SimCLR")
    assert adjusted.mean == pytest.approx(lone.mean) and adjusted.high - adjusted.low > lone.high - lone.low
    path = tmp_path / "baselines-cpu.md"
    report.write_tables(path, TABLES["baselines"], "cpu", cells, {"Fashion-MNIST": pixels})
    assert path.with_suffix(".png").stat().st_size > 10_000


def test_ebclr_table2_is_runnable_and_reuses_table1s_runs(tmp_path, capsys):
    """EBCLR's transfer table is listed as runnable; each direction's runs are Table 1's runs of
    the source dataset (the same names and config hashes: trained once, evaluated twice)."""
    assert main(["reproduce", "--list"]) == 0
    listed = capsys.readouterr().out
    runnable = listed.split("Not runnable here:")[0]
    assert "ebclr-table2" in runnable and "ebclr-table2" not in listed.split("Not runnable here:")[1]
    from solo_hyper.run.identity import config_hash

    t1 = {c.prep.cfg["name"]: config_hash(c.prep.cfg) for c in plan("ebclr-table1", "cpu", seeds=[0], out=str(tmp_path))}
    t2 = plan("ebclr-table2", "cpu", seeds=[0], out=str(tmp_path))
    assert {c.prep.cfg["name"]: config_hash(c.prep.cfg) for c in t2} == t1
    directions = {(c.prep.cfg["data"]["dataset"], c.column.eval_dataset) for c in t2}
    assert directions == {("mnist", "fashionmnist"), ("fashionmnist", "mnist")}


@pytest.mark.slow
def test_ebclr_table2_at_a_tiny_budget_fills_every_cell(tmp_path, capsys, mnist_available,
                                                        fashion_mnist_available):
    """`reproduce ebclr-table2 --scale cpu --seeds 0 --epochs 1 --set data.train_subset=...`: both
    directions, EBCLR and its four baselines, each probed and kNN-scored on the other dataset."""
    out = str(tmp_path)
    linear = tmp_path / "linear.yaml"  # a smoke-test probe (one C, few iterations), not a measurement
    linear.write_text("protocol: logistic\nlogistic: {c_grid: [1.0], holdout: 0.2, max_iter: 50}\n"
                      "data: {train_subset: 256, val_subset: 128}\n")  # fmt: skip
    args = ["reproduce", "ebclr-table2", "--scale", "cpu", "--seeds", "0", "--epochs", "1",
            "--out", out, "--linear-config", str(linear), "--quiet", "--set", *TINY,
            "limit_train_batches=1", "limit_val_batches=1"]  # fmt: skip
    assert main(args) == 0
    table = capsys.readouterr().out
    for direction in ("MNIST->FMNIST", "FMNIST->MNIST"):
        section = table.split(f"## {direction} ")[1].split("\n## ")[0]
        lines = [line for line in section.split("Paired differences")[0].splitlines()
                 if line.startswith(("| SimCLR |", "| MoCo v2 |", "| SimSiam |", "| BYOL |", "| EBCLR |"))]  # fmt: skip
        assert len(lines) == 5, section
        assert all(" - |" not in line.split("(paper")[0] for line in lines), lines
        assert "| EBCLR - BYOL | linear top-1 | 1 |" in section
        # the controls are evaluated on the target, as the runs are
        # EBCLR's BatchNorm-free network and the baselines' network: a control line each
        assert "| control: untrained backbone, small_cnn (batch_norm=False) |" in section
        assert "| control: untrained backbone, small_cnn |" in section
        assert "| control: raw pixels |" in section
    for source, target in (("mnist", "fashionmnist"), ("fashionmnist", "mnist")):
        controls = list((tmp_path / "controls").glob(f"*-{source}-*"))
        assert {c.name.split("-")[0] for c in controls} == {"untrained", "pixels"}
        for control in controls:
            result = json.loads((control / f"eval-{target}.json").read_text())
            assert result["eval_dataset"] == target and result["eval_train_images"] == 256
    runs = tmp_path / "runs"
    for source, target in (("mnist", "fashionmnist"), ("fashionmnist", "mnist")):
        for run in runs.glob(f"*-{source}-*"):
            result = json.loads((run / f"eval-{target}.json").read_text())
            assert result["eval_dataset"] == target and result["eval_train_images"] == 256
            assert not (run / "eval.json").exists()  # the source's own evaluation is not made


def test_autoattack_columns_masking_marks_and_twins_of_hcl_table3():
    """HCL Table 3 carries robust-eval's AutoAttack columns beside PGD's, marks the robust columns
    of a model its diagnostics flagged, and names the twins of the other geometry (RoCL and RHCL,
    SimCLR and HCL, each the other's; RoCL for RHCL+AT), whose run the transfer attack is crafted
    on (the jobs' order: test_planning.py)."""
    spec = TABLES["hcl-table3"]
    column = spec.scales["cpu"][0]
    rows = {r.key: r for r in column.rows}
    twins = {key: rows[key].twin for key in ("simclr", "hcl", "rocl", "rhcl", "rhcl-at")}
    assert twins == {"simclr": "hcl", "hcl": "simclr", "rocl": "rhcl", "rhcl": "rocl", "rhcl-at": "rocl"}
    cells = []
    for seed in (0, 1):
        for key in ("rocl", "rhcl"):
            cell = Cell(column, rows[key], seed, prep=None)
            run = f"{key}-{seed}"
            flagged = key == "rhcl" and seed == 1
            cell.result = {"run_dir": str(run), "LE A_nat": 70.0, "LE PGD-20 8/255": 50.0,
                           "LE AA 8/255": 41.0, "LE masking": "passed",
                           "r-LE masking": "FLAGGED (unbounded)" if flagged else "passed",
                           "r-LE A_nat": 69.0, "r-LE PGD-20 8/255": 55.0, "r-LE AA 8/255": 45.0,
                           "r-LE strength": f"PGD-200 -{seed}.0, x10 restarts +0.0 (100 images); "
                                            "AA -10.0 vs PGD-20"}  # fmt: skip
            cells.append(cell)
    metrics = {key: paper for key, _, paper in report.metric_columns(spec, cells)}
    assert metrics["r-LE AA 8/255"] == "-" and metrics["r-LE PGD-20 8/255"] == "PGD"
    assert metrics["LE PGD-20 8/255"] == "-"
    assert "LE masking" not in metrics  # a verdict, not a number
    rhcl = [c for c in cells if c.row.key == "rhcl"]
    seeds = [c.result for c in rhcl]
    assert report.masked(seeds, "r-LE AA 8/255") and report.masked(seeds, "r-LE PGD-20 8/255")
    assert not report.masked(seeds, "r-LE A_nat") and not report.masked(seeds, "LE AA 8/255")
    text = "\n".join(report.diagnostics_text(cells))
    assert "- RHCL (r-LE): seed 1: FLAGGED (unbounded)" in text
    assert "- RoCL (r-LE): passed (seeds 0 1); stronger attacks than PGD-20: seed 0: PGD-200 -0.0, " \
        "x10 restarts +0.0 (100 images); AA -10.0 vs PGD-20; seed 1: PGD-200 -1.0" in text
    assert "- RoCL (LE): passed (seeds 0 1)\n" in text + "\n"  # no strength measured: none said
