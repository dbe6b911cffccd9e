"""compare and sweep end to end on tiny real Fashion-MNIST runs: tables, figures, reuse."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from solo_hyper.campaigns.compare import COLUMNS
from solo_hyper.cli.main import main
from solo_hyper.evaluation.plots import OFFLINE_KNN

pytestmark = pytest.mark.slow

CONFIGS = ["configs/pretrain/fashionmnist/simclr.yaml", "configs/pretrain/fashionmnist/hcl.yaml"]
TINY = [
    "limit_train_batches=2", "limit_val_batches=1", "data.train_subset=256",
    "data.val_subset=200", "optimizer.batch_size=32", "backbone.kwargs.width=8",
    "method_kwargs.proj_hidden_dim=32", "method_kwargs.proj_output_dim=16",
]  # fmt: skip
PNG = b"\x89PNG\r\n\x1a\n"
TINY_LINEAR = "tests/linear-tiny.yaml"  # the logistic probe and kNN on evaluation subsets


def compare_args(out: Path) -> list[str]:
    return ["compare", "--configs", *CONFIGS, "--epochs", "1", "--out", str(out), "--quiet", "--no-controls",
            "--linear-config", TINY_LINEAR, "--set", *TINY]  # fmt: skip


def read_table(out: Path) -> tuple[list[str], list[list[str]]]:
    lines = [ln for ln in (out / "results.md").read_text().splitlines() if ln.startswith("|")]
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]
    return cells[0], cells[2:]


@pytest.fixture(scope="module")
def compared(tmp_path_factory) -> Path:
    from solo_hyper.data import locate_fashion_mnist

    if locate_fashion_mnist(None) is None:
        pytest.fail("Fashion-MNIST is required: run ./scripts/bootstrap.sh")
    out = tmp_path_factory.mktemp("compare")
    assert main(compare_args(out)) == 0
    return out


def test_results_table_has_every_column_filled(compared):
    header, rows = read_table(compared)
    # no robust evaluation of these runs: that column is left out of the markdown table
    assert header == [title for _, title in COLUMNS if title != "robust acc"]
    assert [r[0] for r in rows] == ["simclr", "hcl"]
    for row in rows:
        for i, cell in enumerate(row):
            assert cell not in ("", "-", "None", "nan"), (header[i], row)
    with open(compared / "results.csv") as f:
        records = list(csv.DictReader(f))
    assert [r["method"] for r in records] == ["simclr", "hcl"]
    for r in records:
        assert 0 <= float(r["linear_acc1"]) <= 100 and 0 <= float(r["knn_top1"]) <= 100
        assert float(r["knn_coarse_top1"]) >= 25.0  # 4 coarse classes
        assert 0 <= float(r["relative_delta"]) <= 1
        assert int(r["epochs"]) == 1


def test_no_controls_evaluates_no_control(compared):
    assert not (compared / "controls").exists()
    assert "untrained backbone" not in (compared / "results.md").read_text()


def test_figures_are_written(compared):
    for name in ("curves.png", "comparison.png", "disk.png"):
        data = (compared / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 5000, name
    disk = json.loads((compared / "fashionmnist-hcl" / "eval.json").read_text())["disk"]
    assert "Poincare" in disk["source"] and disk["stress"] < 1
    assert all(x * x + y * y < 1 for x, y in disk["points"])
    assert len(disk["points"]) == len(disk["targets"]) == len(disk["coarse"]) == 256  # the evaluation subset of tests/linear-tiny.yaml
    simclr = json.loads((compared / "fashionmnist-simclr" / "eval.json").read_text())["disk"]
    assert "chordal" in simclr["source"]


def test_second_compare_reuses_runs_and_reads_a_robust_evaluation(compared):
    run = compared / "fashionmnist-hcl"
    stamps = {p: p.stat().st_mtime for p in (run / "result.json", run / "eval.json")}
    robust = ["robust-eval", "--checkpoint", str(run), "--quiet", "device=cpu",
              "data.batch_size=64", "data.train_subset=128", "data.val_subset=64",
              "linear.epochs=1", "linear.attack.steps=1", "evaluation.attacks.pgd20_8.steps=2",
              "evaluation.attacks.pgd20_16=null", "evaluation.attacks.pgd20_01=null",
              "evaluation.attacks.aa_8=null", "evaluation.attacks.aa_16=null", "evaluation.attacks.aa_01=null",
              "evaluation.diagnostics.enabled=false"]  # compare reads its PGD column: no AutoAttack, no diagnostics  # fmt: skip
    assert main(robust) == 0
    assert main(compare_args(compared)) == 0
    assert {p: p.stat().st_mtime for p in stamps} == stamps  # neither retrained nor re-evaluated
    header, rows = read_table(compared)
    by_method = {r[0]: r for r in rows}
    robust_col = header.index("robust acc")  # shown now that one run has a robust evaluation
    assert by_method["simclr"][robust_col] == "-"
    assert 0 <= float(by_method["hcl"][robust_col]) <= 100
    records = {r["method"]: r for r in csv.DictReader(open(compared / "results.csv"))}
    assert records["hcl"]["robust_protocol"].startswith("r-LE, PGD-")


def test_the_evaluation_cache_holds_however_the_run_directory_is_spelled(compared, monkeypatch):
    """compare evaluated the run by an absolute path; the same run by a relative one reuses that
    eval.json (a campaign run with --out spelled otherwise re-evaluated every run)."""
    from solo_hyper.evaluation.protocol import evaluate_run

    run = compared / "fashionmnist-hcl"
    linear = str(Path(TINY_LINEAR).resolve())
    stamp = (run / "eval.json").stat().st_mtime
    monkeypatch.chdir(compared.parent)
    result = evaluate_run(Path(compared.name) / run.name, linear_config_path=linear)
    assert (run / "eval.json").stat().st_mtime == stamp
    assert result["linear_acc1"] == json.loads((run / "eval.json").read_text())["linear_acc1"]


def test_sweep_curvature_trains_each_value(tmp_path, capsys):
    out = tmp_path / "sweep"
    args = ["sweep", "curvature", "--configs", CONFIGS[1], "--values", "0.2", "1.0",
            "--epochs", "1", "--out", str(out), "--quiet", "--linear-config", TINY_LINEAR, "--set", *TINY]  # fmt: skip
    assert main(args) == 0, capsys.readouterr().err
    assert (out / "sweep-curvature.png").read_bytes().startswith(PNG)
    records = list(csv.DictReader(open(out / "sweep-curvature.csv")))
    assert [float(r["value"]) for r in records] == [0.2, 1.0]
    for value in (0.2, 1.0):
        ev = json.loads((out / f"fashionmnist-hcl-curvature={value}" / "eval.json").read_text())
        assert ev["curvature"] == pytest.approx(value)  # read back from the trained model
    text = (out / "sweep-curvature.md").read_text()
    assert "| fashionmnist-hcl | 0.2 |" in text
    # the legend explains the sweep table's columns only
    assert "linear top-1: offline" in text and "robust acc" not in text
    assert "online linear top-1" not in text
    assert (out / "curves.png").read_bytes().startswith(PNG)
    printed = capsys.readouterr().out
    assert f"written: {out}/sweep-curvature.md, {out}/sweep-curvature.csv" in printed


def test_sweep_rejects_bad_input_before_training(tmp_path, capsys):
    out = tmp_path / "bad"
    assert main(["sweep", "curvatur", "--configs", CONFIGS[1], "--out", str(out)]) == 2
    assert "did you mean 'curvature'" in capsys.readouterr().err
    args = [
        "sweep",
        "curvature",
        "--configs",
        CONFIGS[1],
        "--values",
        "0.5",
        "-1",
        "--out",
        str(out),
    ]
    assert main(args) == 2
    assert "curvature must be > 0" in capsys.readouterr().err
    assert (
        main(["sweep", "method_kwargs.temperature", "--configs", CONFIGS[1], "--out", str(out)]) == 2
    )
    assert "--values" in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())


def test_compare_rejects_a_bad_linear_budget_before_training(tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare", "--configs", *CONFIGS, "--out", str(out), "--linear-epochs", "0"]) == 2
    assert "--linear-epochs must be an integer >= 1" in capsys.readouterr().err
    # epochs mean nothing to the default (converged) probe: said before any training
    assert main(["compare", "--configs", *CONFIGS, "--out", str(out), "--linear-epochs", "3"]) == 2
    assert "apply to the sgd protocol only" in capsys.readouterr().err
    bad = ["compare", "--configs", *CONFIGS, "--out", str(out), "--linear-config", str(tmp_path)]
    assert main(bad) == 2
    assert not out.exists() or not any(out.iterdir())


SEEDED = ["configs/pretrain/fashionmnist/hcl.yaml", "configs/pretrain/fashionmnist/simclr.yaml"]
RATES = ("linear_acc1", "online_linear_acc1", "knn_top1", "knn_coarse_top1", "relative_delta")


def seeded_args(out: Path, configs=SEEDED, seeds=("0", "1")) -> list[str]:
    return ["compare", "--configs", *configs, "--seeds", *seeds, "--epochs", "1", "--out",
            str(out), "--quiet", "--no-plots", "--linear-config", TINY_LINEAR, "--set", *TINY]  # fmt: skip


@pytest.fixture(scope="module")
def seeded(tmp_path_factory) -> Path:
    from solo_hyper.data import locate_fashion_mnist

    if locate_fashion_mnist(None) is None:
        pytest.fail("Fashion-MNIST is required: run ./scripts/bootstrap.sh")
    out = tmp_path_factory.mktemp("seeded")
    assert main(seeded_args(out)) == 0
    return out


def markdown_tables(text: str) -> list[list[list[str]]]:
    """Every markdown table of a file as rows of cells (header first, separator dropped)."""
    tables, current = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            if not line.startswith("|---"):
                current.append([c.strip() for c in line.strip("|").split("|")])
        elif current:
            tables.append(current)
            current = []
    return tables


def test_every_seed_is_its_own_run_with_its_own_seed(seeded):
    records = list(csv.DictReader(open(seeded / "results.csv")))
    assert [(r["config"], r["seed"], r["name"]) for r in records] == [
        ("fashionmnist-hcl", "0", "fashionmnist-hcl-s0"),
        ("fashionmnist-hcl", "1", "fashionmnist-hcl-s1"),
        ("fashionmnist-simclr", "0", "fashionmnist-simclr-s0"),
        ("fashionmnist-simclr", "1", "fashionmnist-simclr-s1"),
    ]
    for r in records:
        cfg = yaml.safe_load((seeded / r["name"] / "config.yaml").read_text())
        assert cfg["seed"] == int(r["seed"]) and cfg["name"] == r["name"]
    hcl = [r for r in records if r["config"] == "fashionmnist-hcl"]
    assert hcl[0]["online_linear_acc1"] != hcl[1]["online_linear_acc1"] or (
        hcl[0]["knn_top1"] != hcl[1]["knn_top1"]
    )  # another seed is another run


def test_seeded_tables_fill_every_column_and_summarise_the_runs(seeded):
    summary, pairs, controls, gains, runs = markdown_tables((seeded / "results.md").read_text())
    for table in (summary, pairs, controls, gains, runs):
        for row in table[1:]:
            assert len(row) == len(table[0])
            assert all(cell not in ("", "-", "None", "nan") for cell in row), row
    records = list(csv.DictReader(open(seeded / "results.csv")))
    stats = {r["config"]: r for r in csv.DictReader(open(seeded / "summary.csv"))}
    for config in ("fashionmnist-hcl", "fashionmnist-simclr"):
        values = [float(r["linear_acc1"]) for r in records if r["config"] == config]
        # the CSV cells are rounded to 6 significant digits: so is what is recomputed from them
        assert float(stats[config]["linear_acc1_mean"]) == pytest.approx(sum(values) / 2, abs=1e-3)
        assert float(stats[config]["linear_acc1_std"]) == pytest.approx(
            abs(values[0] - values[1]) / 2**0.5, abs=1e-3
        )
    assert [row[0] for row in pairs[1:]] == ["fashionmnist-hcl - fashionmnist-simclr"] * 4
    # the controls beside the runs (the main job's table): untrained backbones, raw pixels, and
    # each config's gain over its own untrained backbone, paired by seed
    assert [row[0].split(" (")[0] for row in controls[1:]] == ["untrained backbone", "raw pixels"]
    assert controls[1][1] == "2"  # SimCLR and HCL of one seed share their untrained backbone
    assert [(row[0], row[1], row[2]) for row in gains[1:]] == [
        (c, m, "2") for c in ("fashionmnist-hcl", "fashionmnist-simclr")
        for m in ("linear top-1", "kNN top-1")]  # fmt: skip
    untrained = {(r["name"], r["untrained_run"]) for r in records}
    assert len({u for _, u in untrained}) == 2 and all(
        (seeded / "controls" / u / "eval.json").is_file() for _, u in untrained)  # fmt: skip
    hcl = [r for r in records if r["config"] == "fashionmnist-hcl"]
    expected = sum(float(r["linear_acc1"]) - float(r["untrained_linear_acc1"]) for r in hcl) / 2
    assert float(gains[1][3]) == pytest.approx(expected, abs=0.01)


def test_paired_difference_is_the_hand_computed_t_interval(seeded):
    records = list(csv.DictReader(open(seeded / "results.csv")))
    by = {(r["config"], r["seed"]): float(r["knn_top1"]) for r in records}
    d = [by["fashionmnist-hcl", s] - by["fashionmnist-simclr", s] for s in ("0", "1")]
    m = (d[0] + d[1]) / 2
    half = 12.706205 * abs(d[0] - d[1]) / 2**0.5 / 2**0.5  # t_{0.975,1} * sd / sqrt(2)
    row = next(r for r in csv.DictReader(open(seeded / "pairs.csv")) if r["metric"] == "knn_top1")
    assert float(row["mean_difference"]) == pytest.approx(m, abs=1e-3)  # 6-digit CSV cells
    assert float(row["ci95_low"]) == pytest.approx(m - half, abs=5e-3)
    assert float(row["ci95_high"]) == pytest.approx(m + half, abs=5e-3)
    expected = "within noise" if m - half <= 0 <= m + half else ("hcl" if m > 0 else "simclr")
    assert expected in row["verdict"]


def test_same_seed_on_the_same_machine_gives_identical_numbers(seeded, tmp_path):
    assert main(seeded_args(tmp_path, configs=SEEDED[:1], seeds=("1",))) == 0
    again = next(csv.DictReader(open(tmp_path / "results.csv")))
    first = next(r for r in csv.DictReader(open(seeded / "results.csv"))
                 if r["name"] == "fashionmnist-hcl-s1")  # fmt: skip
    assert {k: again[k] for k in RATES} == {k: first[k] for k in RATES}


def test_an_unknown_pair_name_is_refused_before_training(tmp_path, capsys):
    out = tmp_path / "cmp"
    args = ["compare", "--configs", *SEEDED, "--seeds", "0", "1", "--pairs", "hcl:simclrr",
            "--out", str(out)]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "no compared config is called 'simclrr'" in err and "did you mean" in err
    assert main([*args[:-3], "hcl-simclr", "--out", str(out)]) == 2
    assert "METHOD:BASELINE" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("seeds", [["0", "one"], ["1.5"], ["0", "0"], ["-1"]])
def test_bad_seeds_are_refused_before_training(tmp_path, capsys, seeds):
    out = tmp_path / "cmp"
    assert main(["compare", "--configs", *SEEDED, "--seeds", *seeds, "--out", str(out)]) == 2
    assert "--seeds" in capsys.readouterr().err
    assert not out.exists()


def test_seeds_and_a_seed_override_conflict(tmp_path, capsys):
    args = ["compare", "--configs", *SEEDED, "--seeds", "0", "--out", str(tmp_path / "c"),
            "--set", "seed=3"]  # fmt: skip
    assert main(args) == 2
    assert "--seeds, not --set seed" in capsys.readouterr().err


def test_pairs_resolve_by_stem_in_hyphenated_folders_and_default_pairs_need_one_folder():
    from solo_hyper.campaigns.compare import plan
    from solo_hyper.evaluation.seeds import resolve_pairs

    study = sorted(str(p) for p in Path("configs/ebclr/batch-study").glob("*.yaml"))
    todo = plan(study, "unused-out", 1, (), seeds=["0", "1"],
                pairs=["ebclr-b16:simclr-b16", "batch-study-ebclr-b64:simclr-b64"])  # fmt: skip
    assert todo.pairs == [("batch-study-ebclr-b16", "batch-study-simclr-b16"),
                          ("batch-study-ebclr-b64", "batch-study-simclr-b64")]  # fmt: skip
    assert len(todo.runs) == 2 * len(study) and todo.seeds == [0, 1]
    assert {prep.cfg["name"] for _, prep in todo.runs} >= {"batch-study-ebclr-b16-s0"}
    assert not Path("unused-out").exists()  # planning writes nothing
    fm, c10 = "configs/pretrain/fashionmnist", "configs/pretrain/cifar10"
    assert resolve_pairs([f"{fm}/hcl.yaml", f"{c10}/simclr.yaml"], None) == []
    assert resolve_pairs([f"{fm}/shcl.yaml", f"{fm}/supcon.yaml", f"{fm}/hcl.yaml"], None) == [
        ("fashionmnist-shcl", "fashionmnist-supcon")
    ]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> tuple[Path, str]:
    """A smoke comparison: two configs, one seed, the controls, at the smoke evaluation budget."""
    import contextlib
    import io

    out = tmp_path_factory.mktemp("smoke")
    args = ["compare", "--configs", *CONFIGS, "--seeds", "0", "--epochs", "1", "--out", str(out),
            "--quiet", "--eval-budget", "smoke", "--set", *TINY]  # fmt: skip
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(args) == 0, err.getvalue()[-3000:]
    return out, err.getvalue()


def test_a_smoke_table_names_the_subsets_it_evaluated_on(smoke):
    out, _ = smoke
    text = (out / "results.md").read_text()
    assert text.startswith("**Evaluation budget smoke** (`--eval-budget smoke`): the probe and the kNN "
                           "read fixed random subsets of 2,000 training and 1,000 test images")
    assert "trained on 2,000 training images and scored on 1,000 test images" in text  # the legend
    assert "not a table of record" in text
    assert {r["eval_budget"] for r in csv.DictReader(open(out / "results.csv"))} == {"smoke"}
    for run in ("fashionmnist-simclr-s0", "fashionmnist-hcl-s0"):
        assert (out / run / "eval-smoke.json").is_file() and not (out / run / "eval.json").exists()


def test_smoke_controls_are_evaluated_once_each_and_announced(smoke):
    out, err = smoke
    names = sorted(p.name.split("-")[0] for p in (out / "controls").iterdir())
    assert names == ["pixels", "untrained"]  # SimCLR and HCL of seed 0 share their network
    assert all((p / "eval-smoke.json").is_file() for p in (out / "controls").iterdir())
    assert "[controls 1/2] untrained backbone" in err and "[controls 2/2] raw pixels" in err


def test_comparison_figure_is_drawn_with_the_control_rows(smoke):
    out, _ = smoke
    panels = json.loads((out / "figures.json").read_text())["comparison.png"]["panels"]
    for title in ("offline linear top-1 (%)\nfrozen backbone", OFFLINE_KNN):
        assert panels[title] == ["fashionmnist-simclr", "fashionmnist-hcl", "control: untrained backbone",
                                 "control: raw pixels"], panels  # fmt: skip
