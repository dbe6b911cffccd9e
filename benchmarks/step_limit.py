"""The training step against the machine's dense fp32 limit, and what channels-last and
``torch.compile`` change.

    python benchmarks/step_limit.py [--device cpu|cuda] [--batch-size 256] [--steps 6]
                                    [--methods simclr hcl ebclr] [--compile]

The limit: a 2048 x 2048 fp32 matmul's rate, and the small CNN's forward+backward at the step's
shapes (its convolutions), in the default layout and channels-last. Each method's step (its
shipped Fashion-MNIST config, Lightning's loop, on-device augmentation) is timed from the end of
the previous step to its own (``solo_hyper.run.throughput.Throughput``: fetch and augmentation
included) after a warm-up step; its FLOPs are counted by ``torch.utils.flop_counter`` over the
second step, which is not timed (matmuls and convolutions of forward and backward, the attacks
and SGLD chains included); achieved rate =
FLOPs / median step time, reported as a fraction of the matmul's rate. The augmentation's share
is its time (``DeviceAugmentation.crops``) over the step's. Variants (default, channels-last,
compiled) alternate in rounds; ratios are per round, as everywhere in benchmarks/.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks.images import fashion_mnist_or_random  # noqa: E402
from benchmarks.throughput import time_augmentation  # noqa: E402
from benchmarks.timing import synchronize  # noqa: E402
from solo_hyper.run.throughput import Throughput  # noqa: E402


def matmul_gflops(device: str, n: int = 2048, repeats: int = 5,
                  dtype: torch.dtype = torch.float32) -> float:  # fmt: skip
    """The dense rate of an n x n matmul in ``dtype`` (GFLOPS: 2 n^3 per product, median)."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    a @ b
    times = []
    for _ in range(repeats):
        synchronize(device)
        t0 = time.perf_counter()
        a @ b
        synchronize(device)
        times.append(time.perf_counter() - t0)
    return 2 * n**3 / statistics.median(times) / 1e9


def counted_flops(fn) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def conv_gflops(device: str, batch: int, width: int = 32, repeats: int = 5) -> dict[str, float]:
    """The small CNN's forward+backward rate at the step's shapes, per memory layout."""
    from solo_hyper.backbones import build_backbone

    rates = {}
    for layout in (torch.contiguous_format, torch.channels_last):
        net = build_backbone("small_cnn", width=width).to(device).to(memory_format=layout)
        x = torch.randn(batch, 3, 28, 28, device=device).contiguous(memory_format=layout)

        def step(net=net, x=x):
            net(x).sum().backward()

        flops = counted_flops(step)
        step()
        times = []
        for _ in range(repeats):
            synchronize(device)
            t0 = time.perf_counter()
            step()
            synchronize(device)
            times.append(time.perf_counter() - t0)
        name = "channels_last" if layout is torch.channels_last else "default"
        rates[name] = flops / statistics.median(times) / 1e9
    return rates


@dataclass
class StepRun:
    seconds: list[float]  # per step, after the warm-up (and the FLOP-counted) step
    augment_seconds: list[float]
    flops: int
    final: dict[str, torch.Tensor]
    precision: str  # as Lightning ran it (on the CPU, Lightning 1.9 runs 16-mixed as bf16)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def augment_share(self) -> float:
        return statistics.median(self.augment_seconds) / self.median


def run_steps(method: str, batch_size: int, steps: int, device: str, channels_last: bool = False,
              compile: bool = False, count_flops: bool = True, config: Path | None = None,
              images: tuple[torch.Tensor, torch.Tensor] | None = None,
              callbacks: Sequence = ()) -> StepRun:  # fmt: skip
    """``steps`` training steps of ``method``'s shipped Fashion-MNIST config (or ``config``) at
    the config's precision, kNN and validation off.

    Args:
        images: uint8 (images, targets) to train on (default: Fashion-MNIST, or random 28 px
            images where it is absent); at least ``batch_size * steps`` of them.
        callbacks: more Lightning callbacks for the fit (probes, a profiler's window).
    """
    from solo_hyper.data import InMemoryImages, _batch_is_ready
    from solo_hyper.run.layout import TrainingLayout
    from solo_hyper.run.train import prepare
    from solo_hyper.solo import adapter

    pl = adapter.LIGHTNING
    config = config or ROOT / "configs/pretrain/fashionmnist" / f"{method}.yaml"
    extra = ["method_kwargs.buffer_size=1024"] if method == "ebclr" else []
    prep = prepare(str(config), [f"optimizer.batch_size={batch_size}", "knn_eval.enabled=false",
                                 "checkpoint.enabled=false", "auto_resume.enabled=false", *extra])  # fmt: skip
    pl.seed_everything(0)
    model = adapter.build_method(prep.cfg, 10, prep.small_images, prep.num_crops, prep.args, prep.crops)
    images, targets = images or fashion_mnist_or_random(batch_size * steps)[:2]
    loader = torch.utils.data.DataLoader(
        InMemoryImages(images, targets, with_index=True), batch_size=batch_size,
        drop_last=True, collate_fn=_batch_is_ready,
    )  # fmt: skip
    augment_seconds = time_augmentation(model, device)
    clock = Throughput(lambda: synchronize(device))
    flops = {"n": 0}

    class CountSecondStep(pl.Callback):  # the second step's FLOPs: counted, so not timed
        def on_train_batch_end(self, trainer, *args) -> None:
            from torch.utils.flop_counter import FlopCounterMode

            if len(clock.seconds) == 1:
                self.counter = FlopCounterMode(display=False)
                self.counter.__enter__()
            elif len(clock.seconds) == 2:
                self.counter.__exit__(None, None, None)
                flops["n"] = self.counter.get_total_flops()

    trainer = pl.Trainer(
        accelerator="gpu" if device == "cuda" else "cpu", devices=1, max_steps=steps,
        limit_val_batches=0, num_sanity_val_steps=0, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
        precision=adapter.trainer_precision(prep.cfg["precision"]),
        callbacks=[TrainingLayout(channels_last, compile), clock,
                   *([CountSecondStep()] if count_flops else []), *callbacks],
    )  # fmt: skip
    trainer.fit(model, loader)
    skip = 2 if count_flops else 1  # the warm-up step, and the counted one
    final = {k: v.detach().float().cpu().clone() for k, v in model.state_dict().items()
             if v.is_floating_point()}  # fmt: skip
    return StepRun(clock.seconds[skip:], augment_seconds[skip:], flops["n"], final,
                   str(trainer.precision))  # fmt: skip


def profile_step(method: str, batch_size: int, device: str, rows: int = 10) -> str:
    """Where a step's time goes: the ops with the most self time over 3 steps (after one)."""
    from torch.profiler import ProfilerActivity, profile

    from solo_hyper.solo import adapter

    pl = adapter.LIGHTNING
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    prof = profile(activities=activities)

    class Window(pl.Callback):
        def on_train_batch_end(self, trainer, *args) -> None:
            if trainer.global_step == 1:
                prof.__enter__()
            elif trainer.global_step == 4:
                prof.__exit__(None, None, None)

    run_steps(method, batch_size, 5, device, count_flops=False, callbacks=[Window()])
    key = "self_cuda_time_total" if device == "cuda" else "self_cpu_time_total"
    return prof.key_averages().table(sort_by=key, row_limit=rows)



def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--methods", nargs="+", default=["simclr", "hcl", "ebclr"])
    parser.add_argument("--compile", action="store_true", help="also the compiled backbone")
    parser.add_argument("--profile", metavar="METHOD", help="only: where METHOD's step time goes")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    import logging

    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    if args.profile:
        print(profile_step(args.profile, args.batch_size, args.device))
        return 0
    limit = matmul_gflops(args.device)
    convs = conv_gflops(args.device, args.batch_size)
    print(f"device {args.device}, {torch.get_num_threads()} threads; fp32 limit: 2048^2 matmul "
          f"{limit:.0f} GFLOPS; small CNN fwd+bwd at batch {args.batch_size}: "
          f"{convs['default']:.0f} GFLOPS default ({convs['default'] / limit:.2f} of the limit), "
          f"{convs['channels_last']:.0f} channels-last ({convs['channels_last'] / limit:.2f})")  # fmt: skip
    variants = {"default": {}, "channels_last": {"channels_last": True}}
    if args.compile:
        variants["compile"] = {"compile": True}
    for method in args.methods:
        runs: dict[str, list[StepRun]] = {v: [] for v in variants}
        for r in range(args.rounds):
            order = list(variants)[r % len(variants):] + list(variants)[:r % len(variants)]
            for name in order:
                runs[name].append(run_steps(method, args.batch_size, args.steps, args.device,
                                            count_flops=(name == "default"), **variants[name]))  # fmt: skip
        base = runs["default"]
        flops = base[0].flops
        step = statistics.median(run.median for run in base)
        print(f"{method}: {flops / 1e9:.1f} GFLOP per step, {1000 * step:.0f} ms, "
              f"{flops / step / 1e9:.0f} GFLOPS = {flops / step / 1e9 / limit:.2f} of the limit; "
              f"augmentation {statistics.median(r.augment_share for r in base):.2f} of the step")  # fmt: skip
        for name in variants:
            if name == "default":
                continue
            ratios = [b.median / v.median for b, v in zip(base, runs[name])]
            diff = max((runs[name][0].final[k] - base[0].final[k]).abs().max().item()
                       for k in base[0].final)  # fmt: skip
            print(f"    {name}: {statistics.median(ratios):.2f}x the default's speed (rounds "
                  f"{', '.join(f'{x:.2f}' for x in ratios)}); largest weight difference after "
                  f"{args.steps} steps {diff:.2e}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
