"""Evaluation at the speed of training: the probe, feature extraction, evaluation vs pretraining.

    python benchmarks/probe.py [--run RUN_DIR] [--runs FOLDER] [--rounds 1] [--out FILE]

- probe: one solve of the logistic probe (``metrics/logistic.py``) against scikit-learn's lbfgs
  on the same standardised features, the same objective and C (their top-1 side by side), and
  the whole probe (held-out path over the C grid + refit) against the 5 s target;
- features: ``features.embed`` (the evaluation's pass) against a bare ``torch.inference_mode``
  loop of the same model over the same images (the test split), normalised and in memory
  (``benchmarks/features.py``, which also times the settings the pass chose from);
- evaluation: ``eval_wall_time_s`` (eval.json) over pretraining ``wall_time_s`` (result.json)
  of every run under ``--runs`` (e.g. the main job's ``results/main``).
The probe reads the features of ``--run``'s checkpoint on Fashion-MNIST's 60,000 / 10,000
images (its cache, ``features.run_embeddings``), or of an untrained HCL network
(configs/pretrain/fashionmnist/hcl.yaml) without it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.features import feature_rows, untrained_model  # noqa: E402
from benchmarks.timing import (  # noqa: E402
    Row,
    format_table,
    interleaved,
    paired_ratios,
    summarize,
    timed,
)
from solo_hyper.evaluation.features import (  # noqa: E402
    Embeddings,
    embed,
    evaluation_loaders,
    run_embeddings,
)
from solo_hyper.metrics.logistic import (  # noqa: E402
    Standardizer,
    fit_logistic,
    logistic_probe,
    topk_accuracy,
)

PROBE_TARGET_S = 5.0


def model_and_config(run: str | None):
    """The run's model, config and checkpoint path, or an untrained HCL network's (no path)."""
    if run is not None:
        import solo_hyper.methods  # noqa: F401  (registers the methods)
        from solo_hyper.run.checkpoints import load_pretrained

        model, cfg, ckpt = load_pretrained(run)
        return model, cfg, ckpt["_path"]
    return (*untrained_model(), None)


def probe_rows(train: Embeddings, test: Embeddings, c: float, rounds: int) -> list[Row]:
    """One solve at ``c``: ours vs scikit-learn's lbfgs; the whole probe vs the 5 s target."""
    from sklearn.linear_model import LogisticRegression

    scale = Standardizer.fit(train.feats)
    x, tx = scale(train.feats), scale(test.feats)
    classes = int(train.targets.max()) + 1
    fits: dict = {}

    def ours() -> None:
        fits["ours"] = fit_logistic(x, train.targets, classes, c)

    def sklearn() -> None:
        model = LogisticRegression(C=c, max_iter=1000, tol=1e-4)
        fits["sklearn"] = model.fit(x.numpy(), train.targets.numpy())

    times = interleaved({"ours": ours, "sklearn": sklearn}, rounds, warmup=0)
    ours_acc = topk_accuracy(fits["ours"].logits(tx), test.targets)
    sklearn_acc = 100 * fits["sklearn"].score(tx.numpy(), test.targets.numpy())
    shape = f"{len(train.targets)} x {train.feats.shape[1]}"
    rows = [
        Row(
            "probe", "logistic_probe solve", "scikit-learn lbfgs", f"time, one solve at C={c:g}",
            summarize(paired_ratios(times["ours"], times["sklearn"])), "<= 0.1",
            f"{shape}: {summarize(times['ours']).median:.2f} s vs "
            f"{summarize(times['sklearn']).median:.2f} s; top-1 {ours_acc:.2f} vs "
            f"{sklearn_acc:.2f}",
        )  # fmt: skip
    ]
    runs = []
    whole = [
        timed(lambda: runs.append(logistic_probe(train.feats, train.targets, test.feats,
                                                 test.targets)))
        for _ in range(rounds)
    ]  # fmt: skip
    r = runs[-1]
    rows.append(
        Row(
            "probe", "whole probe (path + refit)", f"{PROBE_TARGET_S:g} s target", "time",
            summarize([t / PROBE_TARGET_S for t in whole]), "<= 1",
            f"{shape}: {summarize(whole).median:.2f} s; C={r.c:g} from "
            f"{sorted(r.holdout_acc1)}; {r.path_iterations} + {r.iterations} iterations; "
            f"top-1 {r.acc1:.2f}",
        )  # fmt: skip
    )
    return rows


def evaluation_rows(folder: Path) -> list[Row]:
    """eval.json's eval_wall_time_s / result.json's wall_time_s of every run under ``folder``."""
    ratios, notes = [], []
    for result in sorted(folder.rglob("result.json")):
        evaluation = result.parent / "eval.json"
        if not evaluation.is_file():
            continue
        pretrain = json.loads(result.read_text())["wall_time_s"]
        seconds = json.loads(evaluation.read_text())["eval_wall_time_s"]
        ratios.append(seconds / pretrain)
        notes.append(f"{result.parent.name} {seconds:.0f}/{pretrain:.0f} s")
    if not ratios:
        return []
    return [
        Row("evaluation", "evaluation (eval.json)", "pretraining (result.json)", "wall time",
            summarize(ratios), "<= 1", "; ".join(notes))  # fmt: skip
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", help="a run directory or checkpoint (default: untrained HCL)")
    parser.add_argument("--runs", type=Path, help="a folder of runs with eval.json (main job)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--c", type=float, default=1.0, help="C of the one-solve comparison")
    parser.add_argument("--out", type=Path, help="also write the table to this Markdown file")
    parser.add_argument("--subset", type=int, help="training images (test: a sixth): a smoke run")
    args = parser.parse_args(argv)
    data = None
    if args.subset is not None:
        data = {"train_subset": args.subset, "val_subset": max(1, args.subset // 6)}
    model, cfg, checkpoint = model_and_config(args.run)
    if checkpoint is not None:  # the run's cached features (computed here when absent)
        train, test = run_embeddings(model, cfg, checkpoint, data)
    else:
        train_loader, test_loader, _ = evaluation_loaders(cfg, data)
        train, test = embed(model, cfg, train_loader), embed(model, cfg, test_loader)
    rows = probe_rows(train, test, args.c, args.rounds)
    rows += feature_rows(model, cfg, data, args.rounds, variants=False)
    if args.runs is not None:
        rows += evaluation_rows(args.runs)
    table = format_table(rows)
    print(table)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        threads = torch.get_num_threads()
        args.out.write_text(
            f"# benchmarks/probe.py ({threads} threads)\n\n"
            f"`python benchmarks/probe.py {' '.join(argv or sys.argv[1:])}`\n\n{table}\n"
        )


if __name__ == "__main__":
    main()
