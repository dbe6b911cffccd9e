"""Command line: ``python -m solo_hyper <command> ...`` (the top layer: it may import anything below).

The arguments are parsed before anything heavy is imported (torch, Lightning, solo-learn load
only inside the command that needs them), so ``--help`` answers at once and without warnings.
"""

from __future__ import annotations

import argparse
import sys


def _pretrain(args: argparse.Namespace) -> None:
    from solo_hyper.run.train import prepare, pretrain

    prep = prepare(args.config, args.overrides)
    result = pretrain(prep, quiet=args.quiet, on_mismatch="new" if args.new_run else "error")
    if not rank_zero():  # under DDP every rank returns here: one summary, from rank 0
        return
    if result.get("reused"):
        how = "a finished run of this config, nothing trained"
    else:
        how = f"{result['wall_time_s']:.1f} s"
        if result.get("resumed_from"):
            how += f", resumed after {result.get('resumed_at_step')} steps"
    print(
        f"{result['method']}: online linear top-1 {_pct(result['online_linear_acc1'])}, "
        f"online kNN top-1 {_pct(result['knn_acc1'])} (bank of augmented training crops), "
        f"{_plural(result['epochs'], 'epoch')} ({how}) -> {result['run_dir']}"
    )


def rank_zero() -> bool:
    """Whether this process is rank 0 (or not distributed): Lightning's DDP launcher starts the
    other ranks as copies of this command, with RANK / LOCAL_RANK set."""
    import os

    return all(int(os.environ.get(k, "0") or 0) == 0 for k in ("RANK", "LOCAL_RANK", "NODE_RANK"))


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}%"


def _plural(n: int, unit: str) -> str:
    return f"{n} {unit}{'' if n == 1 else 's'}"


def _compare(args: argparse.Namespace) -> None:
    from pathlib import Path

    from solo_hyper.evaluation.compare import compare
    from solo_hyper.launch.dispatch import launcher

    compare(
        args.configs, args.out, args.epochs, args.overrides, quiet=args.quiet,
        linear_epochs=args.linear_epochs, linear_config_path=args.linear_config,
        evaluate=not args.no_eval, plots_enabled=not args.no_plots, device=args.device,
        seeds=args.seeds, pairs=args.pairs, eval_dataset=args.eval_dataset,
        controls=not args.no_controls, eval_budget=args.eval_budget,
        launch=launcher(launch_options(args), args.out, _stderr),
    )  # fmt: skip
    print(Path(args.out, "results.md").read_text())
    extra = ", summary.csv, pairs.csv" if args.seeds is not None else ""
    print(f"written: {args.out}/results.md, {args.out}/results.csv{extra}")


def _linear(args: argparse.Namespace) -> None:
    from solo_hyper.evaluation.linear import linear_eval

    r = linear_eval(args.checkpoint, args.config, args.overrides, args.device, args.quiet,
                    args.eval_dataset)  # fmt: skip
    if r["linear_protocol"] == "logistic":
        how = f"logistic regression, C {r['linear_c']:g}, {r['linear_iterations']} iterations"
    else:
        how = f"SGD on {r['linear_features']} features, {_plural(r['linear_epochs'], 'epoch')}"
    stem = "linear" if args.eval_dataset is None else f"linear-{r['eval_dataset']}"
    print(f"{r['run']}: linear top-1 {_pct(r['linear_acc1'])} on {r['eval_dataset']} ({how}) -> "
          f"{stem}.json, {stem}.md next to {r['checkpoint']}")  # fmt: skip


def _knn(args: argparse.Namespace) -> None:
    from solo_hyper.evaluation.knn_probe import knn_eval, markdown

    r = knn_eval(
        args.checkpoint, args.k, args.temperature, args.delta_points, args.train_subset,
        args.val_subset, args.device, progress=not args.quiet, eval_dataset=args.eval_dataset,
    )  # fmt: skip
    print(markdown(r))
    stem = "knn" if args.eval_dataset is None else f"knn-{r['eval_dataset']}"
    print(f"written: {stem}.json, {stem}.md next to {r['checkpoint']}")


def _sweep(args: argparse.Namespace) -> None:
    from solo_hyper.evaluation.compare import markdown_table
    from solo_hyper.evaluation.sweep import COLUMNS, resolve_sweep, sweep
    from solo_hyper.launch.dispatch import launcher

    rows = sweep(
        args.target, args.configs, args.out, args.values, args.epochs, args.overrides,
        args.quiet, args.linear_epochs, args.linear_config, args.device,
        controls=not args.no_controls, eval_budget=args.eval_budget,
        launch=launcher(launch_options(args), args.out, _stderr),
    )  # fmt: skip
    print(markdown_table(rows, COLUMNS))
    stem = f"{args.out}/sweep-{resolve_sweep(args.target, args.values)[0].split('.')[-1]}"
    print(f"\nwritten: {stem}.md, {stem}.csv, {stem}.png, {args.out}/curves.png")


def _robust(args: argparse.Namespace) -> None:
    from solo_hyper.evaluation import robust

    run = robust.finetune_adv if args.command == "finetune-adv" else robust.robust_eval
    log = (lambda _: None) if args.quiet else _stderr  # phase lines: stderr, results: stdout
    config = args.config if args.config is not None else default_robust_config(args.checkpoint)
    rows = run(args.checkpoint, config, args.overrides, log=log, progress=not args.quiet,
               twin=args.twin)  # fmt: skip
    print(robust.markdown_table(rows))


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def default_robust_config(checkpoint: str) -> str:
    """The shipped configs/robust/<the run's dataset>.yaml (as ``linear`` picks
    configs/linear/<dataset>.yaml); without one the command is refused, never run on RoCL's
    150-epoch full-split defaults by accident."""
    from solo_hyper.config import ConfigError
    from solo_hyper.config.shipped import configs_root
    from solo_hyper.evaluation.protocol import run_dataset
    from solo_hyper.run.checkpoints import resolve_checkpoint

    ckpt = resolve_checkpoint(checkpoint)
    try:
        dataset = run_dataset(ckpt.parent, ckpt)
    except (KeyError, TypeError):
        raise ConfigError(
            f"checkpoint {ckpt} does not match its config: it names no data.dataset; give a "
            "checkpoint of a pretraining run (or name the robust config with --config)"
        ) from None
    path = configs_root() / "robust" / f"{dataset}.yaml"
    if not path.is_file():
        raise ConfigError(
            f"no robust-evaluation config ships for {dataset!r} (configs/robust/{dataset}.yaml); "
            "give one with --config (configs/robust/cifar10.yaml is RoCL's protocol)"
        )
    return str(path)


def _reproduce(args: argparse.Namespace) -> None:
    from solo_hyper.config import ConfigError
    from solo_hyper.reproduce import campaign

    if args.list:
        print(campaign.listing())
        return
    if args.table is None:
        raise ConfigError("reproduce needs a table name (python -m solo_hyper reproduce --list "
                          "names them)")  # fmt: skip
    extra = dict(seeds=args.seeds, epochs=args.epochs, overrides=args.overrides,
                 columns=args.columns, data_root=args.data_root)  # fmt: skip
    launch = launch_options(args)
    jobs = [(args.rows, list(args.robust_overrides), not args.no_controls)]
    if args.robust_part is not None:
        jobs = _robust_part_jobs(args)
    for rows, robust_overrides, controls in jobs:
        if args.dry_run:  # on any machine: no data is read or downloaded
            cells = campaign.plan(args.table, args.scale, out=args.out, rows=rows, machine=False,
                                  robust_overrides=robust_overrides, **extra)  # fmt: skip
            print(campaign.dry_run_text(args.table, args.scale, cells, args.out, controls))
            print(campaign.launch_text(args.scale, cells, launch))
            continue
        path = campaign.reproduce(args.table, args.scale, args.out, rows=rows,
                                  robust_overrides=robust_overrides,
                                  linear_config=args.linear_config, device=args.device,
                                  quiet=args.quiet, log=_stderr, controls=controls,
                                  launch=launch, **extra)  # fmt: skip
        print(path.read_text())
    if args.dry_run:
        from solo_hyper.reproduce import robust_protocol

        if args.scale == "cpu" and args.table in robust_protocol.PARTS:
            seeds = len(args.seeds) if args.seeds else len(campaign.DEFAULT_SEEDS)
            print(robust_protocol.estimate_text(args.table, seeds, args.robust_part))


def _robust_part_jobs(args: argparse.Namespace) -> list[tuple[list[str], list[str], bool]]:
    """--robust-part: the part's jobs (rows, robust overrides, controls), the command's own
    --robust-set after the part's; --rows would contradict the part."""
    from solo_hyper.config import ConfigError
    from solo_hyper.reproduce import robust_protocol

    if args.rows is not None:
        raise ConfigError("--robust-part names its own rows; leave out --rows")
    if args.scale != "cpu":
        raise ConfigError("--robust-part is the CPU protocol; the GPU scale runs the standard "
                          "AutoAttack everywhere (configs/robust/cifar10.yaml)")  # fmt: skip
    part = robust_protocol.part(args.table, args.robust_part)
    return [(list(job.rows), [*job.overrides, *args.robust_overrides],
             job.controls and not args.no_controls) for job in part.jobs]  # fmt: skip


def launch_options(args: argparse.Namespace):
    """``--jobs`` / ``--executor`` / the cluster's parameters, checked before any work (a dry
    run plans a cluster's jobs on any machine)."""
    from solo_hyper.launch.cluster import load_cluster
    from solo_hyper.launch.dispatch import Launch

    launch = Launch(args.jobs, args.executor, load_cluster(args.cluster, args.cluster_set))
    launch.check(submits=not getattr(args, "dry_run", False))
    return launch


def _launch_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--jobs", type=int, default=1, metavar="N",
        help="runs at a time on this machine, each in its own process: one GPU each, or the CPU "
        "cores split between them (default 1: one after another in this process)",
    )  # fmt: skip
    p.add_argument(
        "--executor", choices=("slurm", "local"), default=None,
        help="submit one job per run through submitit: slurm (a job array; preempted or "
        "timed-out jobs requeue and resume exactly) or local (submitit's local executor); "
        "docs/campaigns.md",
    )  # fmt: skip
    p.add_argument(
        "--cluster", default=None, metavar="YAML",
        help="the jobs' resources: partition, account, gpus_per_job, tasks_per_job, nodes, "
        "cpus_per_job, mem_gb, time_min, max_timeouts, array_parallelism, signal_delay_s",
    )  # fmt: skip
    p.add_argument("--cluster-set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="resources over the YAML's, e.g. partition=gpu time_min=720")  # fmt: skip


def _export(args: argparse.Namespace) -> None:
    from solo_hyper.export import export_run

    info = export_run(args.checkpoint, args.out)
    b = info["backbone"]
    print(f"{info['method']} ({b['name']}, {b['format']} layout, {b['features_dim']} features) "
          f"-> {args.out}/backbone.pt, projector.pt, model.json")  # fmt: skip


def _run_solo(args: argparse.Namespace) -> None:
    from solo_hyper.cli.run_solo import run_solo

    run_solo(args.script, args.args)


def _bench(args: argparse.Namespace) -> None:
    """Runs benchmarks/run.py of the source checkout this package sits in."""
    import importlib
    from pathlib import Path

    from solo_hyper.config import ConfigError

    root = Path(__file__).resolve().parents[2]
    if not (root / "benchmarks" / "run.py").is_file():
        raise ConfigError(
            f"the benchmark suite is not next to this installation ({root}/benchmarks/run.py is "
            "missing); run 'python -m solo_hyper bench' from a source checkout of solo-hyper"
        )
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    module = importlib.import_module("benchmarks.run")
    argv = ["--device", args.device, "--threads", str(args.threads)]
    argv += ["--quick"] if args.quick else []
    argv += ["--only", *args.only] if args.only else []
    if module.main(argv):
        raise SystemExit(1)


def _evaluation_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--linear-epochs", type=int, default=None,
        help="epochs of the offline linear probe when its config says protocol: sgd (the "
        "default logistic probe runs to convergence)",
    )  # fmt: skip
    p.add_argument(
        "--linear-config", default=None,
        help="linear-evaluation YAML (default: configs/linear/<dataset>.yaml)",
    )  # fmt: skip
    p.add_argument("--device", default="auto", help="device of the evaluation: auto | cpu | cuda")
    p.add_argument(
        "--no-controls", action="store_true",
        help="no controls (each run's untrained backbone and the raw pixels, evaluated alike)",
    )  # fmt: skip
    p.add_argument(
        "--eval-budget", choices=("full", "smoke"), default="full",
        help="the evaluation sets of every run and control: full (default: the dataset's "
        "training and test splits, the only budget of a table of record) or smoke (fixed "
        "subsets of 2,000 training and 1,000 test images, named in the table: a quick check "
        "that the pipeline runs)",
    )  # fmt: skip


def _eval_dataset_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--eval-dataset", default=None, metavar="DATASET",
        help="transfer: kNN and probe on this dataset's splits (e.g. mnist for a Fashion-MNIST "
        "run), its images standardised with the pretraining dataset's statistics",
    )  # fmt: skip


USER_HELP = """Hyperbolic and energy-based contrastive learning (HCL, SHCL, RHCL, EBCLR) on solo-learn.

Start here:
  pretrain --config configs/pretrain/fashionmnist/hcl.yaml     train one method
  compare --configs A.yaml B.yaml --seeds 0 1 2               train, evaluate, tabulate side by side
  linear / knn --checkpoint runs/<run>                         evaluate a run
  export --checkpoint runs/<run> --out exported/<run>          plain backbone + head files
Each command's options: <command> --help. Ctrl-C stops a command after saving; the same command
again goes on from there."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=program_name(), description=USER_HELP,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("pretrain", help="pretrain one method from a YAML config")
    p.add_argument(
        "--config", required=True, help="YAML file, e.g. configs/pretrain/fashionmnist/hcl.yaml"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--new-run", action="store_true",
        help="when the run directory holds a run of another config, train this one as a new run "
        "(<name>-<config hash>) instead of refusing",
    )  # fmt: skip
    p.add_argument(
        "overrides", nargs="*", help="dotted.key=value overrides (also spelt --set key=value ...), "
        "e.g. seed=0 (default seed: the config's, 5 unless it sets one)",
    )  # fmt: skip
    p.set_defaults(func=_pretrain)

    p = sub.add_parser("compare", help="train several configs and tabulate them side by side")
    p.add_argument("--configs", nargs="+", required=True, help="pretraining configs (YAML)")
    p.add_argument("--epochs", type=int, default=None,
                   help="every run's max_epochs (default: each config's own)")  # fmt: skip
    p.add_argument("--out", default="results/compare",
                   help="folder of the runs and the tables (default: results/compare)")  # fmt: skip
    p.add_argument(
        "--set", dest="overrides", nargs="*", default=[], help="overrides for every config"
    )
    p.add_argument(
        "--seeds", nargs="+", default=None, metavar="SEED",
        help="train every config once per seed (runs <folder>-<stem>-s<seed>) and report "
        "mean ± std and paired differences with 95%% t-intervals (default: one run per config "
        "with the config's own seed, 5 unless it sets one)",
    )  # fmt: skip
    p.add_argument(
        "--pairs", nargs="+", default=None, metavar="A:B",
        help="method:baseline pairs by config stem or <folder>-<stem> (default: hcl:simclr "
        "shcl:supcon rhcl:rocl ebclr:simclr, where both are compared)",
    )  # fmt: skip
    p.add_argument("--quiet", action="store_true")
    _evaluation_args(p)
    p.add_argument("--no-eval", action="store_true", help="pretraining numbers only")
    p.add_argument("--no-plots", action="store_true", help="no PNG figures")
    _eval_dataset_arg(p)
    _launch_args(p)
    p.set_defaults(func=_compare)

    p = sub.add_parser(
        "linear", help="offline linear probe of a run (default: logistic regression solved to "
        "convergence on the frozen features; protocol: sgd trains solo-learn's LinearModel)",
    )  # fmt: skip
    p.add_argument("--checkpoint", required=True, help="run directory or .ckpt file")
    p.add_argument(
        "--config", default=None,
        help="e.g. configs/linear/cifar10.yaml (default: configs/linear/<the run's dataset>.yaml)",
    )  # fmt: skip
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("overrides", nargs="*", help="dotted.key=value overrides of the linear config")
    _eval_dataset_arg(p)
    p.set_defaults(func=_linear)

    p = sub.add_parser("knn", help="weighted kNN grid and hierarchy metrics of a run")
    p.add_argument("--checkpoint", required=True, help="run directory or .ckpt file")
    p.add_argument("--k", type=int, nargs="+", default=[10, 20, 50, 100],
                   help="neighbour counts to score (default: 10 20 50 100)")  # fmt: skip
    p.add_argument("--temperature", type=float, default=0.07, help="of the cosine votes")
    p.add_argument("--delta-points", type=int, default=500, help="points for delta-hyperbolicity")
    p.add_argument("--train-subset", type=int, default=None,
                   help="training images that vote (default: the dataset's full training split)")
    p.add_argument("--val-subset", type=int, default=None,
                   help="test images scored (default: the dataset's full test split)")  # fmt: skip
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    _eval_dataset_arg(p)
    p.set_defaults(func=_knn)

    p = sub.add_parser("sweep", help="train and evaluate configs over the values of one key")
    p.add_argument(
        "target", help="a preset (curvature, normalize, lambda2, rho, batch_size, temperature) "
        "or a dotted config key",
    )  # fmt: skip
    p.add_argument("--configs", nargs="+", required=True,
                   help="one or more pretraining configs (each run with its config's seed, 5 "
                   "unless it sets one; --set seed=N for another)")  # fmt: skip
    p.add_argument("--values", nargs="+", default=None, help="values (YAML); default: the preset's")
    p.add_argument("--epochs", type=int, default=None,
                   help="every run's max_epochs (default: each config's own)")  # fmt: skip
    p.add_argument("--out", default="results/sweep", help="default: results/sweep")
    p.add_argument("--set", dest="overrides", nargs="*", default=[], help="overrides for every run")
    p.add_argument("--quiet", action="store_true")
    _evaluation_args(p)
    _launch_args(p)
    p.set_defaults(func=_sweep)

    for name, text in [
        ("robust-eval", "LE and r-LE heads on a pretrained encoder: PGD-20 and AutoAttack "
         "accuracy, gradient-masking diagnostics"),
        ("finetune-adv", "adversarial fine-tuning (AT) of a pretrained run, then robust-eval's "
         "attacks and diagnostics"),
    ]:
        p = sub.add_parser(name, help=text)
        p.add_argument("--checkpoint", required=True, help="run directory or .ckpt file")
        p.add_argument("--config", default=None,
                       help="default: configs/robust/<the run's dataset>.yaml (refused when "
                       "there is none)")  # fmt: skip
        p.add_argument("--twin", default=None, help="the Euclidean twin's run (RoCL for RHCL), "
                       "robust-evaluated first: the diagnostics' transfer attack is crafted on it")  # fmt: skip
        p.add_argument("--quiet", action="store_true")
        p.add_argument("overrides", nargs="*", help="dotted.key=value overrides")
        p.set_defaults(func=_robust)

    p = sub.add_parser("reproduce", help="train, evaluate and tabulate one table of the papers "
                       "beside the paper's numbers (reproduce --list names them)")  # fmt: skip
    p.add_argument("table", nargs="?", default=None, help="e.g. hcl-table1")
    p.add_argument("--list", action="store_true", help="the tables, their claims and budgets")
    p.add_argument("--scale", choices=("cpu", "gpu"), default="cpu",
                   help="cpu: Fashion-MNIST and MNIST, small CNN; gpu: the paper's recipe")  # fmt: skip
    p.add_argument("--seeds", nargs="+", default=None, metavar="SEED", help="default: 0 1 2")
    p.add_argument("--epochs", type=int, default=None, help="every run's max_epochs")
    p.add_argument("--out", default="results/reproduce", help="runs in OUT/runs, tables in OUT")
    p.add_argument("--set", dest="overrides", nargs="*", default=[], help="overrides for every run")
    p.add_argument("--rows", nargs="+", default=None, help="only these rows (e.g. rocl rhcl)")
    p.add_argument("--columns", nargs="+", default=None, help="only these columns (datasets)")
    p.add_argument("--data-root", default=None,
                   help="folder of the ImageFolder datasets of the GPU tables (default datasets/)")  # fmt: skip
    p.add_argument("--linear-config", default=None,
                   help="the linear evaluation of every run (default: each column's protocol)")  # fmt: skip
    p.add_argument("--robust-set", dest="robust_overrides", nargs="*", default=[],
                   help="overrides of the robust evaluation of every run and control (HCL Table "
                   "3), e.g. evaluation.attacks.aa_8=null")  # fmt: skip
    p.add_argument("--robust-part", default=None, metavar="PART",
                   help="one part of the table's CPU robust protocol (HCL Table 3: a, b, c; "
                   "reproduce/robust_protocol.py), its rows and attacks; --dry-run prints every "
                   "part's CPU estimate")  # fmt: skip
    p.add_argument("--dry-run", action="store_true", help="the runs and the estimated time only")
    p.add_argument("--no-controls", action="store_true",
                   help="no controls (each run's untrained backbone, the raw pixels)")  # fmt: skip
    p.add_argument("--device", default="auto", help="device of the evaluation: auto | cpu | cuda")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    _launch_args(p)
    p.set_defaults(func=_reproduce)

    p = sub.add_parser(
        "export",
        help="the backbone (torchvision/timm/own layout) and projector of a run as plain "
        "state_dicts, with model.json",
    )  # fmt: skip
    p.add_argument("--checkpoint", required=True, help="run directory or .ckpt file")
    p.add_argument("--out", required=True, help="output folder (new or empty)")
    p.set_defaults(func=_export)

    p = sub.add_parser(
        "run-solo",
        help="run solo-learn's own main_pretrain.py / main_linear.py / main_knn.py with this "
        "plugin's methods registered (e.g. --config-path configs/solo-main/cifar10 "
        "--config-name hcl.yaml)",
    )
    p.add_argument("script", help="path of the solo-learn script (in a solo-learn checkout)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    p.set_defaults(func=_run_solo)

    p = sub.add_parser("bench", help="the benchmark suite (benchmarks/run.py): one table of ratios")
    p.add_argument("--quick", action="store_true", help="small sizes, few rounds (about 2 min)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--only", nargs="+", metavar="NAME", help="e.g. loss throughput augment")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.set_defaults(func=_bench)
    for command in sub.choices.values():
        command.add_argument(
            "--verbose", action="store_true",
            help="also show third-party warnings and Lightning's banners (filtered by default) "
                 "and, in compare, sweep and reproduce, each evaluation's inner phases",
        )  # fmt: skip
    return parser


def own_options(parser: argparse.ArgumentParser, command: str) -> dict[str, int]:
    """A subcommand's options -> how many values each takes (0 for a switch)."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {
        option: 0 if action.nargs == 0 else 1
        for action in sub.choices[command]._actions
        for option in action.option_strings
    }


POSITIONAL_OVERRIDES = ("pretrain", "linear", "robust-eval", "finetune-adv")
CAMPAIGNS = ("compare", "sweep", "reproduce")  # many runs: their evaluations' inner lines under --verbose


def set_as_positional(argv: list[str]) -> list[str]:
    """``--set key=value ...`` (the spelling of compare, sweep and reproduce) as the positional
    overrides these commands take, so that one spelling works for every command (without this
    pretrain would read ``--set`` as a solo-learn 1.0.2 launcher flag)."""
    out = []
    for token in argv:
        if token == "--set":
            continue
        out.append(token[len("--set="):] if token.startswith("--set=") else token)
    return out


def overrides_last(argv: list[str], options: dict[str, int]) -> list[str]:
    """Moves the ``key=value`` overrides behind the options, so that they may come in any order
    (argparse takes the positional overrides in one block only, before or after the options)."""
    head, overrides, i = argv[:1], [], 1
    while i < len(argv):
        token = argv[i]
        take = 0 if "=" in token else options.get(token, 0)
        if token.startswith("-") or "=" not in token:
            head += argv[i : i + 1 + take]
            i += 1 + take
            continue
        overrides.append(token)
        i += 1
    return head + overrides


def program_name() -> str:
    """How this command was started: ``solo-hyper`` (the console script) or ``python -m
    solo_hyper``."""
    import os

    base = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return base if base and not base.endswith(".py") and base not in ("-c", "-m") else (
        "python -m solo_hyper"
    )


def main(argv: list[str] | None = None) -> int:
    from solo_hyper.run.stop import Interrupted, stop_on_signals

    argv = sys.argv[1:] if argv is None else list(argv)
    with stop_on_signals():
        try:
            return _main(argv)
        except Interrupted as err:
            import shlex

            again = shlex.join([*program_name().split(), *argv])
            print(f"solo-hyper: {err.signal_name}: {err}. Run the same command again to go on "
                  f"(finished runs are reused, a stopped run resumes): {again}",
                  file=sys.stderr)  # fmt: skip
            return err.exit_code


def check_configs_first(args: argparse.Namespace) -> None:
    """The pretraining configs a command names, keys and types, checked before solo-learn and
    Lightning load (seconds instead of about ten): a misspelt key is reported at once."""
    from solo_hyper.config.pretrain import check_pretrain_config

    paths = {"pretrain": [getattr(args, "config", None)], "compare": getattr(args, "configs", None),
             "sweep": getattr(args, "configs", None)}.get(args.command) or []  # fmt: skip
    for path in paths:
        check_pretrain_config(path, args.overrides)


def wants_verbose(argv: list[str]) -> bool:
    """``--verbose`` among the command's own arguments (run-solo's: only before the script;
    what follows is the script's own)."""
    return "--verbose" in (argv[:2] if argv[:1] == ["run-solo"] else argv)


def parse(argv: list[str]) -> argparse.Namespace:
    """The arguments as every command reads them: ``--set`` and the ``key=value`` overrides in
    any order, solo-learn 1.0.2's launcher flags after ``pretrain``'s YAML as overrides (a flag
    it cannot map: ConfigError). argparse's own errors exit with status 2, as on the command
    line; the docs' test (tests/test_doc_commands.py) parses every documented command here."""
    from solo_hyper.cli.quiet import filtered_warnings

    parser = build_parser()
    solo_flags: list[str] = []
    asks_help = any(a in ("-h", "--help") for a in argv)
    if argv[:1] and argv[0] in POSITIONAL_OVERRIDES:
        argv = set_as_positional(argv)
    if argv[:1] == ["pretrain"] and not asks_help:  # solo 1.0.2's launcher flags may follow
        with filtered_warnings(wants_verbose(argv)):  # solo_hyper.solo imports solo-learn
            from solo_hyper.cli.solo_flags import split_pretrain_argv

        argv, solo_flags = split_pretrain_argv(argv, own_options(parser, "pretrain"))
    if argv[:1] and argv[0] in POSITIONAL_OVERRIDES:
        argv = overrides_last(argv, own_options(parser, argv[0]))
    args = parser.parse_args(argv)
    if solo_flags:  # solo 1.0.2's launcher flags (docs/guide.md; solo_hyper/cli/solo_flags.py)
        from solo_hyper.cli.solo_flags import to_overrides

        args.overrides = [*args.overrides, *to_overrides(solo_flags)]
    return args


def _main(argv: list[str]) -> int:
    from solo_hyper.cli.quiet import filtered_warnings, quiet_run

    verbose = wants_verbose(argv)
    try:  # --help and argparse's errors exit in parse, before solo_hyper.config imports torch
        args = parse(argv)
        check_configs_first(args)
    except ValueError as err:
        from solo_hyper.config import ConfigError

        if not isinstance(err, ConfigError):
            raise
        print(f"solo-hyper: error: {err}", file=sys.stderr)
        return 2
    from solo_hyper.config import ConfigError
    if args.command != "bench":
        # solo-learn's dependencies (pl_bolts, lightning_fabric) warn about themselves at import
        # time (about 14 lines a user can do nothing about): load them once, filtered
        with filtered_warnings(verbose):
            import solo_hyper.methods  # noqa: F401  (registers the methods into solo-learn)
    from solo_hyper.data import DatasetNotFoundError
    from solo_hyper.evaluation.progress import phase_details
    from solo_hyper.launch.failures import RunsFailed

    try:  # a campaign: one line per run and phase, the evaluation's inner phases under --verbose
        with quiet_run(verbose), phase_details(verbose or args.command not in CAMPAIGNS):
            args.func(args)
    except (ConfigError, DatasetNotFoundError) as err:
        print(f"solo-hyper: error: {err}", file=sys.stderr)
        return 2
    except RunsFailed as err:
        print(f"solo-hyper: {err}", file=sys.stderr)
        return 1
    except Exception as err:
        guards = sys.modules.get("solo_hyper.run.guards")  # loaded only by commands that train
        if guards is None or not isinstance(err, guards.RunStopped):
            raise
        print(f"solo-hyper: stopped: {err}", file=sys.stderr)
        return 3
    return 0
