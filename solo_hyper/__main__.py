"""Command line: ``python -m solo_hyper <command> ...``."""

from __future__ import annotations

import argparse
import sys

from solo_hyper.config import ConfigError
from solo_hyper.data import DatasetNotFoundError


def _pretrain(args: argparse.Namespace) -> None:
    from solo_hyper.train import prepare, pretrain

    result = pretrain(prepare(args.config, args.overrides), quiet=args.quiet)
    print(
        f"{result['method']}: online linear top-1 {result['online_linear_acc1']}, "
        f"kNN top-1 {result['knn_acc1']}, {result['wall_time_s']} s -> {result['run_dir']}"
    )


def _compare(args: argparse.Namespace) -> None:
    from solo_hyper.evaluation.compare import compare, markdown_table

    rows = compare(args.configs, args.out, args.epochs, args.overrides, quiet=args.quiet)
    print(markdown_table(rows))
    print(f"\nwritten: {args.out}/results.md, {args.out}/results.csv")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m solo_hyper", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("pretrain", help="pretrain one method from a YAML config")
    p.add_argument(
        "--config", required=True, help="YAML file, e.g. configs/pretrain/fashionmnist/hcl.yaml"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("overrides", nargs="*", help="dotted.key=value overrides")
    p.set_defaults(func=_pretrain)

    p = sub.add_parser("compare", help="train several configs and tabulate them side by side")
    p.add_argument("--configs", nargs="+", required=True)
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--out", default="results/compare")
    p.add_argument(
        "--set", dest="overrides", nargs="*", default=[], help="overrides for every config"
    )
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=_compare)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except (ConfigError, DatasetNotFoundError) as err:
        print(f"solo-hyper: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
