"""Cost of one RHCL (and RoCL) training step relative to one HCL step, on the small CNN (CPU).

An RHCL step adds the instance-wise attack (one no-grad forward of x+, then ``steps`` forward +
input-only backward passes of the anchor batch) and the forward/backward of x_adv to HCL's two
crops. Counting a forward as 1 unit, a full backward as 2 and an input-only backward as ~1:
HCL = 2 x 3 = 6 units, RHCL = 3 x 3 + 1 + 7 x 2 = 24 units, so expect about 4x with 7 steps
(measured: 4.5-4.7x RHCL, 4.1-4.6x RoCL at batch 128 with --threads 1 on a shared 2-core CPU;
with 2 threads on a loaded machine thread contention makes the figures noisy).
Each step is timed from the end of the previous one (``solo_hyper.run.throughput.Throughput``:
fetch, augmentation, forward, backward and optimiser step included);
the methods alternate over several rounds in one process and the median step time is reported.

    python benchmarks/rhcl_step.py [--batch-size 128] [--steps-per-round 6] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import warnings

import torch

warnings.filterwarnings("ignore")
os.environ.setdefault("PL_DISABLE_FORK", "1")

import solo_hyper.methods  # noqa: E402,F401  (registers the methods)
from solo_hyper.data import InMemoryImages, _batch_is_ready  # noqa: E402
from solo_hyper.run.throughput import Throughput  # noqa: E402
from solo_hyper.run.train import prepare  # noqa: E402
from solo_hyper.solo import adapter  # noqa: E402

CONFIGS = {
    "hcl": "configs/pretrain/fashionmnist/hcl.yaml",
    "rhcl": "configs/pretrain/fashionmnist/rhcl.yaml",
    "rocl": "configs/pretrain/fashionmnist/rocl.yaml",
}


def step_times(method: str, batch_size: int, steps: int) -> list[float]:
    prep = prepare(CONFIGS[method], [f"optimizer.batch_size={batch_size}"])
    model = adapter.build_method(prep.cfg, 10, prep.small_images, prep.num_crops)
    g = torch.Generator().manual_seed(0)
    n = batch_size * (steps + 1)
    images = torch.randint(0, 256, (n, 1, 28, 28), dtype=torch.uint8, generator=g)
    data = InMemoryImages(images, torch.randint(0, 10, (n,), generator=g), with_index=True)
    loader = torch.utils.data.DataLoader(
        data, batch_size=batch_size, drop_last=True, collate_fn=_batch_is_ready
    )
    timer = Throughput()
    trainer = adapter.LIGHTNING.Trainer(
        max_steps=steps + 1, limit_val_batches=0, accelerator="cpu", devices=1, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=[timer],
    )  # fmt: skip
    trainer.fit(model, loader)
    return timer.seconds[1:]  # the first step pays for lazy initialisation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--steps-per-round", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    times: dict[str, list[float]] = {m: [] for m in CONFIGS}
    for _ in range(args.rounds):
        for method in CONFIGS:
            times[method] += step_times(method, args.batch_size, args.steps_per_round)
    base = statistics.median(times["hcl"])
    print(f"small_cnn (width 32), batch {args.batch_size}, {args.threads} threads, "
          f"{len(times['hcl'])} timed steps per method")  # fmt: skip
    for method, t in times.items():
        med = statistics.median(t)
        print(f"{method:5s} median step {1000 * med:7.1f} ms   x{med / base:.2f} of HCL")


if __name__ == "__main__":
    main()
