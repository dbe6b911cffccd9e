"""A new user's first hour with the commands: quiet stderr, one-line errors for badly typed
values, instant silent help, evaluation outputs kept, and the comparison figures.

The commands run as a user runs them (``python -m solo_hyper ...`` in a subprocess), on a tiny
budget of real Fashion-MNIST.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from solo_hyper.cli.main import build_parser, main

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ["configs/pretrain/fashionmnist/simclr.yaml", "configs/pretrain/fashionmnist/hcl.yaml"]
TINY = [
    "limit_train_batches=3", "limit_val_batches=1", "data.train_subset=192", "data.val_subset=96",
    "optimizer.batch_size=32", "backbone.kwargs.width=8", "method_kwargs.proj_hidden_dim=32",
    "method_kwargs.proj_output_dim=16", "log_every_n_steps=1",
]  # fmt: skip
# what a third-party warning, a traceback or a Lightning banner looks like on stderr
NOISE = re.compile(
    r"Warning:|Traceback|site-packages|GPU available|TPU available|Global seed set|"
    r"exists and is not empty|`Trainer"
)
PNG = b"\x89PNG\r\n\x1a\n"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "solo_hyper", *args], capture_output=True, text=True,
        cwd=ROOT, timeout=600,
    )  # fmt: skip


def started(folder: Path, *args: str) -> tuple[subprocess.Popen, Path, Path]:
    """The command started in the background, its output into files (a pipe nobody reads would
    stall it once full)."""
    out, err = folder / "stdout.txt", folder / "stderr.txt"
    with open(out, "w") as o, open(err, "w") as e:
        proc = subprocess.Popen([sys.executable, "-m", "solo_hyper", *args], stdout=o, stderr=e,
                                text=True, cwd=ROOT)  # fmt: skip
    return proc, out, err


def finished(proc: subprocess.Popen, out: Path, err: Path) -> subprocess.CompletedProcess:
    proc.wait(timeout=600)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out.read_text(), err.read_text())


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> dict:
    """pretrain, knn, linear of one tiny run; compare of two configs over two seeds."""
    from solo_hyper.data import locate_fashion_mnist

    if locate_fashion_mnist(None) is None:
        pytest.fail("Fashion-MNIST is required: run ./scripts/bootstrap.sh")
    tmp = tmp_path_factory.mktemp("first-hour")
    run = tmp / "runs" / "hcl-fashionmnist"
    # compare beside the pretrain -> knn -> linear chain (independent: other directories; their
    # single-threaded start-ups overlap on two cores)
    compare = started(
        tmp, "compare", "--configs", *CONFIGS, "--seeds", "0", "1", "--epochs", "1",
        "--out", str(tmp / "compare"), "--linear-config", "tests/linear-tiny.yaml", "--set", *TINY,
    )  # fmt: skip
    try:
        procs = {
            "pretrain": cli("pretrain", "--config", CONFIGS[1], "max_epochs=1",
                            f"checkpoint.dir={tmp / 'runs'}", *TINY),  # fmt: skip
        }
        procs["knn"] = cli("knn", "--checkpoint", str(run), "--k", "5", "10", "--delta-points", "50",
                           "--train-subset", "512", "--val-subset", "256")  # fmt: skip
        procs["linear"] = cli("linear", "--checkpoint", str(run), "data.train_subset=512",
                              "data.val_subset=256")  # fmt: skip
        procs["compare"] = finished(*compare)
    finally:
        compare[0].kill()
    return {"procs": procs, "run": run, "compare": tmp / "compare"}


@pytest.mark.parametrize("command", ["pretrain", "knn", "linear", "compare"])
def test_commands_keep_stderr_free_of_third_party_noise(session, command):
    proc = session["procs"][command]
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stderr.replace("\r", "\n").splitlines()
    noisy = [line for line in lines if NOISE.search(line)]
    assert noisy == [], noisy[:5]
    assert "%|" not in proc.stdout  # progress bars go to stderr, results to stdout


def test_summaries_round_their_numbers(session):
    pretrain = session["procs"]["pretrain"].stdout.strip().splitlines()[-1]
    assert re.fullmatch(
        r"hcl: online linear top-1 \d+\.\d\d%, online kNN top-1 \d+\.\d\d% \(bank of augmented "
        r"training crops\), 1 epoch \(\d+\.\d s\) -> .*hcl-fashionmnist", pretrain
    ), pretrain  # fmt: skip
    linear = session["procs"]["linear"].stdout.strip().splitlines()[-1]
    assert re.search(
        r"linear top-1 \d+\.\d\d% on \w+ \(logistic regression, C [\d.]+, \d+ iterations\)", linear
    ), linear  # fmt: skip


def test_knn_phases_are_announced_and_earlier_results_kept(session, capsys):
    run = session["run"]
    err = session["procs"]["knn"].stderr
    assert "[features " in err and "[knn " in err and "k=[5, 10]" in err and "delta" in err
    first = json.loads((run / "knn.json").read_text())
    assert main(["knn", "--checkpoint", str(run), "--k", "3", "--delta-points", "20", "--quiet",
                 "--train-subset", "512", "--val-subset", "256"]) == 0  # fmt: skip
    err = capsys.readouterr().err
    (kept,) = run.glob("knn-*.json")
    assert f"knn.json: the earlier result is kept as {kept.name}" in err
    assert json.loads(kept.read_text()) == first
    assert {r["k"] for r in json.loads((run / "knn.json").read_text())["knn"]} == {3}


INNER_PHASES = ("[features ", "[knn ", "[linear probe ", "[disk ")


def test_compare_prints_a_line_per_run_and_phase_and_the_inner_phases_under_verbose(session, capsys):
    # its own lines, the bars aside (no --quiet here)
    lines = re.findall(r"^\[[a-z].*$", session["procs"]["compare"].stderr.replace("\r", "\n"), re.M)
    assert not [line for line in lines if line.startswith(INNER_PHASES)]
    phases = [line for line in lines if line.startswith("[compare] ")]
    assert len(phases) == 2 * 2 * 2 and all(re.search(r"\(.*elapsed\)$", p) for p in phases), phases
    assert len(lines) <= len(phases) + 4, lines  # + one line per control
    # --verbose: the same comparison, one run evaluated again, shows that evaluation's phases
    out = session["compare"]
    before = (out / "results.md").read_text()
    (out / "fashionmnist-hcl-s0" / "eval.json").unlink()
    args = ["--configs", *CONFIGS, "--seeds", "0", "1", "--epochs", "1", "--out", str(out),
            "--linear-config", "tests/linear-tiny.yaml", "--quiet", "--set", *TINY]  # fmt: skip
    assert main(["compare", *args, "--verbose"]) == 0
    err = capsys.readouterr().err
    assert [phase for phase in INNER_PHASES if phase in err] == list(INNER_PHASES), err
    assert (out / "results.md").read_text() == before  # evaluated again: the same numbers


def test_compare_draws_a_band_per_method_and_the_paired_intervals(session):
    out = session["compare"]
    for name in ("curves.png", "comparison.png", "disk.png"):
        data = (out / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 5000, name
    figures = json.loads((out / "figures.json").read_text())
    methods = ["fashionmnist-simclr", "fashionmnist-hcl"]
    curves = figures["curves.png"]["panels"]
    online_knn = [t for t in curves if t.startswith("online kNN")]
    assert len(online_knn) == 1 and "augmented training crops" in online_knn[0]
    assert "online linear top-1 (%)" in curves
    # each method's own loss in a panel of its own (cosine and Poincare InfoNCE: other scales)
    assert curves["train nce loss: simclr"] == methods[:1] and curves["train nce loss: hcl, poincare"] == methods[1:]
    for title, series in curves.items():
        if not title.startswith("train nce loss"):
            assert series == methods, title  # one mean line + seed band per method
    comparison = figures["comparison.png"]["panels"]
    points = {t: s for t, s in comparison.items() if not t.endswith("paired")}
    paired = {t: s for t, s in comparison.items() if t.endswith("paired")}
    controls = ["control: untrained backbone", "control: raw pixels"]  # beside the runs, greyed
    assert len(points) == 3 and all(s == methods + controls for s in points.values())
    assert all("offline" in t for t in points)
    assert len(paired) == 3 and all(s == ["fashionmnist-hcl - fashionmnist-simclr"]
                                    for s in paired.values())  # fmt: skip


BAD_VALUES = [
    ("optimizer.lr=abc", "optimizer.lr must be a number, got 'abc'"),
    ("optimizer.weight_decay=abc", "optimizer.weight_decay must be a number, got 'abc'"),
    ("max_epochs=abc", "max_epochs must be a number, got 'abc'"),
    ("method_kwargs.temperature=abc", "method_kwargs.temperature must be a number, got 'abc'"),
    ("method_kwargs.normalize=maybe", "method_kwargs.normalize must be true or false, got 'maybe'"),
    ("data.num_workers=four", "data.num_workers must be a number, got 'four'"),
    ("--weight_decay abc", "optimizer.weight_decay must be a number, got 'abc'"),  # 1.0.2 flag
    # compare's and reproduce's spelling of overrides works for pretrain too (it is no solo flag)
    ("--set method_kwargs.temprature=0.3", "unknown method 'hcl' key 'method_kwargs.temprature' "
     "(did you mean 'temperature'?)"),
    ("--set=optimizer.lr=abc", "optimizer.lr must be a number, got 'abc'"),
]


@pytest.mark.parametrize(("value", "message"), BAD_VALUES, ids=[v for v, _ in BAD_VALUES])
def test_badly_typed_value_is_one_error_line(value, message, capsys):
    assert main(["pretrain", "--config", CONFIGS[1], *value.split()]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"solo-hyper: error: {message}"]


def test_every_subcommand_helps_at_once_and_silently():
    sub = next(a for a in build_parser()._actions if hasattr(a, "choices") and a.choices)
    for command in sub.choices:
        start = time.perf_counter()
        proc = cli(command, "--help")
        took = time.perf_counter() - start
        assert proc.returncode == 0 and proc.stderr == "", (command, proc.stderr[:500])
        assert "--verbose" in proc.stdout and took < 3.0, (command, took)


def test_a_hydra_yaml_given_to_pretrain_names_run_solo(capsys):
    assert main(["pretrain", "--config", "configs/solo-main/custom/hcl.yaml"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "is a Hydra config for solo-learn main's own launchers" in line
    assert "run-solo PATH/TO/solo-learn/main_pretrain.py --config-path configs/solo-main/custom " \
           "--config-name hcl.yaml" in line  # fmt: skip


@pytest.mark.parametrize(
    ("env", "zero"),
    [({}, True), ({"LOCAL_RANK": "1"}, False), ({"RANK": "3"}, False), ({"NODE_RANK": "1"}, False),
     ({"RANK": "0", "LOCAL_RANK": "0"}, True)],
)  # fmt: skip
def test_only_rank_zero_prints_the_closing_summary(env, zero, monkeypatch):
    from solo_hyper.cli.main import rank_zero

    for key in ("RANK", "LOCAL_RANK", "NODE_RANK"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert rank_zero() is zero


def test_compare_legend_states_what_eval_json_recorded(session):
    """The legend is generated from the evaluations that ran: tests/linear-tiny.yaml names a
    512 / 256-image subset, SimCLR's delta_rel is Euclidean and HCL's on the Poincare ball."""
    out = session["compare"]
    legend = (out / "results.md").read_text()
    evals = {run.name: json.loads((run / "eval.json").read_text())
             for run in sorted(out.iterdir()) if (run / "eval.json").is_file()}  # fmt: skip
    assert len(evals) == 4
    (sizes,) = {(e["linear_train_images"], e["linear_test_images"]) for e in evals.values()}
    assert sizes == (512, 256)
    assert f"trained on {sizes[0]:,} training images and scored on {sizes[1]:,} test images" in legend
    assert "full training split" not in legend and "full test split" not in legend
    (knn_sizes,) = {(e["eval_train_images"], e["eval_test_images"]) for e in evals.values()}
    assert f"{knn_sizes[0]:,} training images vote for {knn_sizes[1]:,} test images" in legend
    distance = {name: e["knn"]["hierarchy"][e["relative_delta_space"]]["distance"]
                for name, e in evals.items()}  # fmt: skip
    assert distance == {"fashionmnist-hcl-s0": "poincare", "fashionmnist-hcl-s1": "poincare",
                        "fashionmnist-simclr-s0": "euclidean", "fashionmnist-simclr-s1": "euclidean"}
    assert ("Euclidean distances (fashionmnist-simclr); Poincare distances on the ball "
            "(fashionmnist-hcl)") in legend


def test_compare_names_each_run_and_phase_on_stderr(session):
    proc = session["procs"]["compare"]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("[compare]")]
    expected = [f"[compare] {i}/4 fashionmnist-{m} seed {s}: {phase}"
                for i, (m, s) in enumerate([("simclr", 0), ("simclr", 1), ("hcl", 0), ("hcl", 1)], 1)
                for phase in ("pretraining", "evaluating")]  # fmt: skip
    assert [ln.split(" (")[0] for ln in lines] == expected
    assert all(re.search(r"\(\d+( min \d\d)? s elapsed\)$", ln) for ln in lines)
    assert "[compare]" not in proc.stdout
