"""Runs the benchmark suite and prints one table of ratios (median, min, max over rounds).

    python benchmarks/run.py [--quick] [--device cpu|cuda] [--only NAME ...] [--threads 2]
    python -m solo_hyper bench [--quick] ...

Benchmarks (``--only`` takes these names):
  loss        Poincare InfoNCE (fused, plain autograd) vs solo's simclr_loss_func: time, memory
  geoopt      geoopt's broadcasting distance in the same InfoNCE vs the fused loss
  chunked     blockwise InfoNCE (chunk_size) vs the fused loss and SimCLR, 2N up to 16k (CPU) or
              64k (--device cuda): time, peak memory, memory growth per view
  compile     torch.compile of the plain loss (full run only: compiling takes about a minute)
  throughput  HCL / SHCL vs SimCLR / SupCon: training images/s, the extra cost of their heads,
              kornia's share of a step
  augment     kornia DeviceAugmentation vs solo-learn's PIL pipeline (0 and 2 workers)
  rhcl        RHCL and RoCL step vs HCL step (benchmarks/rhcl_step.py)
  ebclr       EBCLR step vs SimCLR step, MSGLD with vs without weight gradients (ebclr_step.py)
  ddp         DDP step with vs without the unused-parameter search, 2 CPU ranks (ddp_unused.py)

Every ratio compares variants measured in the same rounds, so a busy machine slows both sides;
absolute numbers (the note column) only mean something on a quiet one. ``--quick`` uses small
sizes and few rounds (about 2 minutes on 2 quiet cores) and leaves out ``compile``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import math
import os
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

NAMES = ("loss", "geoopt", "chunked", "compile", "throughput", "augment", "rhcl", "ebclr", "ddp")
QUICK_SKIPS = ("compile",)


@dataclass(frozen=True)
class Settings:
    quick: bool
    device: str


def _quiet_imports() -> None:
    """Imports torch, Lightning and solo-learn with their import-time warnings muted."""
    warnings.filterwarnings("ignore")
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            import benchmarks.augment  # noqa: F401
            import benchmarks.loss  # noqa: F401
            import benchmarks.steps  # noqa: F401
            import benchmarks.throughput  # noqa: F401
            import solo_hyper.methods  # noqa: F401  (registers the methods)
    except Exception:
        sys.stderr.write(captured.getvalue())
        raise
    warnings.filterwarnings("ignore")  # pl_bolts re-enables its own warnings on import
    for name in ("pytorch_lightning", "lightning_fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.WARNING)


def _loss(s: Settings):
    from benchmarks.loss import loss_rows

    return loss_rows((1024, 4096), (5, 2) if s.quick else (15, 5), s.device)


def _geoopt(s: Settings):
    from benchmarks.loss import geoopt_rows

    return geoopt_rows(256, 1, s.device) if s.quick else geoopt_rows(1024, 3, s.device)


def _chunked(s: Settings):
    from benchmarks.loss import chunked_rows

    if s.quick:
        return chunked_rows((1024, 4096), (3, 2), s.device)
    if s.device == "cuda":
        return chunked_rows((1024, 4096, 16384, 65536), (10, 5, 3, 2), s.device)
    return chunked_rows((1024, 4096, 16384), (5, 3, 2), s.device)


def _compile(s: Settings):
    from benchmarks.loss import compile_rows

    return compile_rows(1024, 3 if s.quick else 10, s.device)


def _throughput(s: Settings):
    from benchmarks.throughput import head_rows, throughput_rows

    if s.quick:
        return head_rows(128, 5, s.device) + throughput_rows(128, 3, 2, s.device)
    return head_rows(256, 15, s.device) + throughput_rows(256, 6, 5, s.device)


def _augment(s: Settings):
    from benchmarks.augment import augment_rows

    if s.quick:
        return augment_rows((28, 32), 128, 4, 2, (0, 2), s.device)
    return augment_rows((28, 32), 256, 8, 3, (0, 2), s.device)


def _rhcl(s: Settings):
    from benchmarks.steps import rhcl_rows

    return rhcl_rows(64, 2, 2) if s.quick else rhcl_rows(128, 6, 3)


def _ebclr(s: Settings):
    from benchmarks.steps import ebclr_rows

    return ebclr_rows(64, 3, 2) if s.quick else ebclr_rows(128, 8, 3)


def _ddp(s: Settings):
    from benchmarks.ddp_unused import ddp_rows

    return ddp_rows(32, 4, 2) if s.quick else ddp_rows(64, 8, 5)


BENCHMARKS: dict[str, Callable[[Settings], list]] = {
    "loss": _loss, "geoopt": _geoopt, "chunked": _chunked, "compile": _compile, "throughput": _throughput,
    "augment": _augment, "rhcl": _rhcl, "ebclr": _ebclr, "ddp": _ddp,
}  # fmt: skip


@contextlib.contextmanager
def working_directory(path: Path) -> Iterator[None]:
    """The benchmarks name configs relative to the repository root."""
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def run(names: list[str], settings: Settings, log=print) -> tuple[list, list[str]]:
    """(rows of every benchmark in ``names``, names that failed); failures are logged, not raised."""
    from benchmarks.timing import Row, Stat

    rows, failed = [], []
    with working_directory(ROOT):
        for name in names:
            t0 = time.perf_counter()
            try:
                rows += BENCHMARKS[name](settings)
            except Exception as err:  # noqa: BLE001  (one broken benchmark must not hide the rest)
                failed.append(name)
                log(traceback.format_exc())
                nan = Stat(math.nan, math.nan, math.nan, 0)
                rows.append(Row(name, "FAILED", "", "", nan, None, f"{type(err).__name__}: {err}"))
            log(f"  {name}: {time.perf_counter() - t0:.0f} s")
    return rows, failed


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="benchmarks/run.py", description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 2)[2],
    )  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="small sizes, few rounds")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--only", nargs="+", choices=NAMES, metavar="NAME", help=", ".join(NAMES))
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    args = parser.parse_args(argv)
    if args.threads < 1:
        parser.error(f"--threads must be >= 1, got {args.threads}")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            parser.error("--device cuda: no CUDA device is visible to torch on this machine")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = args.only or [n for n in NAMES if not (args.quick and n in QUICK_SKIPS)]
    _quiet_imports()
    import torch

    from benchmarks.timing import format_table

    torch.set_num_threads(args.threads)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    print(f"torch {torch.__version__}, device {args.device}, {args.threads} CPU threads, "
          f"load average {load}, {'quick' if args.quick else 'full'} run: {', '.join(names)}")  # fmt: skip
    cores = os.cpu_count() or 1
    if hasattr(os, "getloadavg") and os.getloadavg()[0] > cores and args.threads > 1:
        print(f"warning: the machine is busy (load {os.getloadavg()[0]:.1f} on {cores} cores): "
              "multi-threaded small ops wait for their threads to be scheduled, which distorts "
              "ratios between cheap and costly variants; rerun on a quiet machine or with "
              "--threads 1")  # fmt: skip
    t0 = time.perf_counter()
    rows, failed = run(names, Settings(args.quick, args.device))
    print()
    print(format_table(rows))
    print(f"\n{len(rows)} rows in {time.perf_counter() - t0:.0f} s; ratios are medians over "
          "interleaved rounds (min, max beside them)" + (f"; FAILED: {failed}" if failed else ""))  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
