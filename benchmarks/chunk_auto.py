"""What ``chunk_size: auto`` resolves to: the fastest InfoNCE path per device and size.

    python -m benchmarks.chunk_auto [--sizes 256 512 1024 2048 4096 8192] [--blocks 256 512 1024]
                                    [--rounds 5] [--device cpu] [--threads N] [--out FILE]

For every 2N (views; D = 128, HCL's Poincare ball, as ``benchmarks/loss.py``) the forward and
backward of ``contrastive_loss`` on the fused path (``chunk_size=None``) and in blocks of K
anchors, in interleaved rounds; each row is one block size's time over the fused path's at that
2N, and the last column marks the fastest path. ``losses.infonce.AUTO_PATHS`` holds what these
rows chose for the device (with the results file it was read from); ``auto`` also caps K by the
device's free memory.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.loss import BALL, TEMPERATURE, views  # noqa: E402
from benchmarks.timing import Row, format_table, interleaved, paired_ratios, summarize  # noqa: E402
from solo_hyper.losses import contrastive_loss  # noqa: E402
from solo_hyper.losses.infonce import resolve_chunk_size  # noqa: E402


def step(z: torch.Tensor, ids: torch.Tensor, chunk: int | None):
    def run() -> None:
        z.grad = None
        contrastive_loss(z, ids, TEMPERATURE, BALL, chunk_size=chunk).backward()

    return run


def chunk_rows(
    sizes: tuple[int, ...] = (256, 512, 1024, 2048, 4096, 8192),
    blocks: tuple[int, ...] = (256, 512, 1024),
    rounds: int = 5,
    device: str = "cpu",
) -> list[Row]:
    """Per 2N: each block size K < 2N (and the one ``auto`` resolves to there) against the
    fused path (time fwd+bwd)."""
    rows: list[Row] = []
    for size in sizes:
        z, ids = views(size // 2, device=device)
        auto = resolve_chunk_size("auto", size, size, torch.device(device), z.dtype)
        auto_name = "fused" if auto is None else f"K={auto}"
        fns = {"fused": step(z, ids, None)}
        tried = sorted({k for k in blocks if k < size} | ({auto} if auto is not None else set()))
        fns |= {f"K={k}": step(z, ids, k) for k in tried}
        times = interleaved(fns, rounds, warmup=1, device=device)
        medians = {name: summarize(t).median for name, t in times.items()}
        fastest = min(medians, key=medians.get)
        for name in fns:
            if name == "fused":
                continue
            rows.append(Row(
                "chunk-auto", f"chunked {name}", "fused", f"time fwd+bwd 2N={size} ({device})",
                summarize(paired_ratios(times[name], times["fused"])), None,
                f"{1000 * medians[name]:.1f} vs {1000 * medians['fused']:.1f} ms"
                + ("; fastest" if name == fastest else "")
                + ("; auto" if name == auto_name else ""),
            ))  # fmt: skip
        if fastest == "fused" or auto_name == "fused":
            rows.append(Row(
                "chunk-auto", "fused", "fused", f"time fwd+bwd 2N={size} ({device})",
                summarize([1.0] * rounds), None,
                f"{1000 * medians['fused']:.1f} ms" + ("; fastest" if fastest == "fused" else "")
                + ("; auto" if auto_name == "fused" else ""),
            ))  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096, 8192])
    parser.add_argument("--blocks", type=int, nargs="+", default=[256, 512, 1024])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, help="intra-op threads (default: torch's)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    rows = chunk_rows(tuple(args.sizes), tuple(args.blocks), args.rounds, args.device)
    table = format_table(rows)
    print(table)
    if args.out is not None:
        args.out.write_text(
            f"# benchmarks/chunk_auto.py ({torch.get_num_threads()} threads)\n\n"
            f"`python -m benchmarks.chunk_auto {' '.join(argv or sys.argv[1:])}`\n\n{table}\n"
        )


if __name__ == "__main__":
    main()
