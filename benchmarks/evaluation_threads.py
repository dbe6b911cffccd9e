"""Evaluation's small tensor work on 1 vs 2 intra-op threads (why ``threads.single_thread``).

    python benchmarks/evaluation_threads.py [--rounds 5]

Times, in interleaved rounds, 40 SGD steps of a 128 -> 10 linear head on a 512-row batch (the
offline probe on precomputed features) and 20 Adam steps of the 2-D disk fit on 300 points, each
with torch.set_num_threads(1) and (2); prints the per-round ratios time(2 threads) / time(1).
A ratio above 1 means the second thread costs more than it brings.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.timing import Row, format_table, interleaved, paired_ratios, summarize  # noqa: E402
from solo_hyper.geometry import expmap0, poincare_distance_matrix, project  # noqa: E402
from solo_hyper.metrics.disk_map import classical_mds  # noqa: E402


def linear_head_steps(threads: int, steps: int = 40) -> None:
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(512, 128, generator=g), torch.randint(0, 10, (512,), generator=g)
    head = torch.nn.Linear(128, 10)
    opt = torch.optim.SGD(head.parameters(), lr=0.1, momentum=0.9)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(head(x), y).backward()
        opt.step()


def disk_steps(threads: int, steps: int = 20, n: int = 300) -> None:
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    z = expmap0(torch.randn(n, 16, generator=g, dtype=torch.float64), 1.0)
    d = poincare_distance_matrix(z, z, 1.0).fill_diagonal_(0)
    v = (classical_mds(d) / 2).requires_grad_(True)
    opt = torch.optim.Adam([v], lr=0.05)
    for _ in range(steps):
        opt.zero_grad()
        x = project(expmap0(v, 1.0), 1.0)
        ((poincare_distance_matrix(x, x, 1.0) - d) ** 2).sum().backward()
        opt.step()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rows = []
    for bench, fn in (("linear head", linear_head_steps), ("disk fit", disk_steps)):
        times = interleaved({"1": lambda f=fn: f(1), "2": lambda f=fn: f(2)}, args.rounds)
        ratio = summarize(paired_ratios(times["2"], times["1"]))
        note = f"1 thread {summarize(times['1']).median * 1e3:.0f} ms per call"
        rows.append(Row(bench, "2 threads", "1 thread", "time", ratio, None, note))
    print(format_table(rows))


if __name__ == "__main__":
    main()
