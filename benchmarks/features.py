"""Feature extraction: the evaluation's pass against a bare loop, and the settings it runs with.

    python benchmarks/features.py [--images 4096] [--rounds 3] [--out FILE]

- ``features.embed`` (loader, evaluation view, folded channels-last backbone, projector) against
  a bare ``torch.inference_mode`` loop of the same model, unchanged, over the same images
  already normalised in memory (what a user would write);
- what ``evaluation/inference.py`` chose from: the backbone alone, plain vs BatchNorm folded vs
  channels-last vs both, at batches of 256 / 1024 / 4096 and on 1 vs 2 intra-op threads, each
  against the plain backbone at the evaluation's batch (``features.EVAL_BATCH``);
- the loader and the evaluation view alone (the data path) against the bare loop.
An untrained HCL network (configs/pretrain/fashionmnist/hcl.yaml: the main job's SmallCNN) on
Fashion-MNIST's test images.
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.timing import Row, format_table, interleaved, paired_ratios, summarize  # noqa: E402
from solo_hyper.evaluation.features import (  # noqa: E402
    EVAL_BATCH,
    embed,
    evaluation_loaders,
    evaluation_view,
)
from solo_hyper.evaluation.inference import folded  # noqa: E402
from solo_hyper.pretrained import backbone_of  # noqa: E402

HCL = "configs/pretrain/fashionmnist/hcl.yaml"


def untrained_model(overrides: list[str] | None = None):
    """The main job's HCL network at initialisation (seed 0) and its config."""
    import solo_hyper.methods  # noqa: F401  (registers the methods)
    from solo_hyper.run.train import prepare
    from solo_hyper.solo import adapter

    prep = prepare(str(ROOT / HCL), list(overrides or []))
    torch.manual_seed(0)
    model = adapter.build_method(prep.cfg, 10, prep.small_images, prep.num_crops).eval()
    return model, prep.cfg


def loop(module, images: torch.Tensor, batch: int, threads: int | None = None) -> Callable[[], None]:
    def run() -> None:
        before = torch.get_num_threads()
        if threads is not None:
            torch.set_num_threads(threads)
        try:
            with torch.inference_mode():
                for part in images.split(batch):
                    module(part)
        finally:
            torch.set_num_threads(before)

    return run


def feature_rows(model, cfg: dict, data: dict | None, rounds: int, variants: bool = True) -> list[Row]:
    """embed vs the bare loop over the test split (``data``: its subset); with ``variants``,
    the backbone settings and the data path against the plain backbone."""
    _, loader, _ = evaluation_loaders(cfg, data)
    view = evaluation_view(model, cfg)
    images = view.evaluation_view(loader.dataset.images)
    n = len(images)
    timed_fns = {
        "embed": lambda: embed(model, cfg, loader),
        "bare": loop(model, images, EVAL_BATCH),
    }
    if variants:
        backbone = backbone_of(model).eval()
        fast = folded(backbone)
        last = images.contiguous(memory_format=torch.channels_last)
        cl = copy.deepcopy(backbone).to(memory_format=torch.channels_last)
        fast_cl = copy.deepcopy(fast).to(memory_format=torch.channels_last)
        timed_fns |= {
            "plain": loop(backbone, images, EVAL_BATCH),
            "folded": loop(fast, images, EVAL_BATCH),
            "channels-last": loop(cl, last, EVAL_BATCH),
            "folded, channels-last": loop(fast_cl, last, EVAL_BATCH),
            **{f"folded, channels-last, batch {b}": loop(fast_cl, last, b) for b in (256, 4096)},
            "folded, channels-last, 1 thread": loop(fast_cl, last, EVAL_BATCH, 1),
            "data path (loader + view)": lambda: [view.evaluation_view(b[0]) for b in loader],
        }
    times = interleaved(timed_fns, rounds, 1)

    def median(name: str) -> float:
        return summarize(times[name]).median

    rows = [
        Row("features", "features.embed", "bare inference_mode loop", "time",
            summarize(paired_ratios(times["embed"], times["bare"])), "<= 1",
            f"{n} images: embed {median('embed'):.2f} s, bare model loop {median('bare'):.2f} s "
            f"(unchanged model on normalised images in memory, batch {EVAL_BATCH})"),
    ]  # fmt: skip
    if variants:
        for name in [k for k in timed_fns if k not in ("embed", "bare", "plain")]:
            rows.append(
                Row("features", name, f"plain backbone, batch {EVAL_BATCH}", "time",
                    summarize(paired_ratios(times[name], times["plain"])), None,
                    f"{n} images: {median(name):.2f} s vs {median('plain'):.2f} s")  # fmt: skip
            )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=4096, help="test images (of 10,000)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, help="also write the table to this Markdown file")
    args = parser.parse_args(argv)
    model, cfg = untrained_model()
    table = format_table(feature_rows(model, cfg, {"val_subset": args.images}, args.rounds))
    print(table)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            f"# benchmarks/features.py ({torch.get_num_threads()} threads)\n\n"
            f"`python benchmarks/features.py {' '.join(argv or sys.argv[1:])}`\n\n{table}\n"
        )


if __name__ == "__main__":
    main()
