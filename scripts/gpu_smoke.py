"""The GPU check in one command (meant to take under 5 minutes on one GPU): whether the GPU is
usable, a training step of a GPU config at its precision and its speed, and whether the training
step of each method family synchronises, and where.

    python scripts/gpu_smoke.py [--device cuda|cpu] [--config configs/pretrain/cifar10/hcl.yaml]
                                [--batch-size N] [--steps 8] [--methods hcl rhcl ebclr simclr]
                                [--data FOLDER]

It prints a table (check | result | number | verdict), then each line of code that synchronised,
and exits 1 when a check FAILs (the functions are in ``benchmarks/smoke.py``):

1. cuda: the device, torch's build (``torch.version.cuda``), the NVIDIA driver (nvidia-smi). No
   usable CUDA device is a FAIL with the reason (torch.cuda's own error: no driver, a driver too
   old for the wheel's CUDA) and nothing else runs.
2. step: ``--steps`` training steps of ``--config`` (CIFAR-10 HCL: ResNet-18 with the CIFAR
   stem, 2 crops of 32 px) at the config's precision, batch ``--batch-size`` (the config's), on
   random images: losses finite (FAIL otherwise), images/s timed batch end to batch end (data and
   augmentation included), the dtypes of the crops (made on the GPU, FAIL otherwise), features
   and z; the dense rate (an 8192 x 8192 matmul in the step's dtype) and the step's fraction of
   it (its FLOPs counted by ``torch.utils.flop_counter``); the same step in channels-last.
3. syncs: 5 ``pretrain`` steps of each of ``--methods`` (their Fashion-MNIST configs, small CNN,
   batch 32, at the step config's precision) under ``torch.cuda.set_sync_debug_mode("warn")``:
   every synchronising call of a steady-state step is a FAIL, listed below the table per line of
   code with its callers. Fashion-MNIST is read from ``--data`` or where the project looks for
   it; where it is absent, random images in its format.

``--device cpu`` is a stand-in that runs 2 and 3 on the CPU (batch 4 and 8; 3 counts host reads
with ``solo_hyper.syncs.HostReads``, which sees no copies), so that this script is tested on a
machine without a GPU; its output says it is not a GPU check. ``benchmarks/step_limit.py
--device cuda --compile`` measures more (every method, compile).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import smoke  # noqa: E402

SYNC_BATCH = {"cuda": 32, "cpu": 8}
STEP_BATCH_ON_CPU = 4


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device", choices=("cuda", "cpu"), default="cuda",
        help=f"cpu: the stand-in that tests this script on a machine without a GPU ({smoke.STAND_IN})",
    )  # fmt: skip
    parser.add_argument("--config", default=str(smoke.STEP_CONFIG), help="the step's config")
    parser.add_argument("--batch-size", type=int, default=None,
                        help=f"the step's batch (default: the config's; {STEP_BATCH_ON_CPU} on cpu)")  # fmt: skip
    parser.add_argument("--steps", type=int, default=8, help="the step's training steps (>= 3)")
    parser.add_argument("--methods", nargs="*", default=list(smoke.SYNC_METHODS),
                        help="the sync check's methods (their Fashion-MNIST configs)")  # fmt: skip
    parser.add_argument("--data", help="a folder holding Fashion-MNIST's four idx files (default: "
                        "where the project looks for it; random images where it is absent)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.steps < 3:
        parser.error("--steps must be >= 3: a warm-up step and a FLOP-counted one are not timed")
    if args.batch_size is not None and args.batch_size < 2:
        parser.error("--batch-size must be >= 2")
    if args.data is not None and not Path(args.data).is_dir():
        parser.error(f"--data {args.data}: no such folder")
    unknown = sorted(set(args.methods) - {p.stem for p in (ROOT / "configs/pretrain/fashionmnist").glob("*.yaml")})
    if unknown:
        parser.error(f"--methods: no Fashion-MNIST config for {unknown} in configs/pretrain/fashionmnist")
    return args


def run_checks(args: argparse.Namespace) -> tuple[list[smoke.Check], list[str]]:
    """The rows of the table and the lines printed below it."""
    rows = [smoke.stand_in_check() if args.device == "cpu" else smoke.cuda_check()]
    if rows[0].failed:
        return rows, ["nothing else was run: every other check needs a usable CUDA device"]
    warnings.filterwarnings("ignore")
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    from solo_hyper.run.train import prepare

    precision = str(prepare(args.config).cfg["precision"])
    unsupported = smoke.precision_check(args.device, precision)
    if unsupported is not None:
        return [*rows, unsupported], []
    batch = args.batch_size or (STEP_BATCH_ON_CPU if args.device == "cpu" else None)
    try:
        rows += smoke.step_checks(args.device, args.steps, batch, Path(args.config))
    except Exception as err:
        traceback.print_exc()
        rows.append(smoke.failure("step", err))
    sync_batch = SYNC_BATCH[args.device]
    with tempfile.TemporaryDirectory() as scratch:
        folder, source = smoke.fashion_mnist_folder(
            args.data, Path(scratch), max(smoke.SYNC_STEPS * sync_batch, 256), 64
        )
        rows.append(smoke.Check("sync data", source, "", "info"))
        synced, details = smoke.sync_checks(args.device, args.methods, folder, sync_batch, precision)
    return rows + synced, details


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    stand_in = args.device == "cpu"
    if stand_in:
        print(smoke.STAND_IN, flush=True)
    with contextlib.redirect_stdout(sys.stderr):  # Lightning's bars and notes: stdout is the table
        rows, details = run_checks(args)
    failed = [row.check for row in rows if row.failed]
    print()
    print(smoke.format_checks(rows))
    print(*details, sep="\n")
    verdict = f"FAILED: {', '.join(failed)}" if failed else "all checks passed"
    print(f"\ngpu_smoke: {verdict} in {time.perf_counter() - start:.0f} s"
          + (f". {smoke.STAND_IN}." if stand_in else ""))  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
