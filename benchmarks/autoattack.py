"""Cost of AutoAttack and of the gradient-masking diagnostics per image, against one PGD-20
evaluation of the same images (robust-eval's columns), on a small CNN classifier.

    python benchmarks/autoattack.py [--images 64] [--rounds 1] [--device cpu|cuda] [--threads 2]

The classifier is the project's small CNN (width 16) under a linear head, trained for a few
hundred steps on Fashion-MNIST so that it is right on most images and not robust (AutoAttack's
cost grows with the images still correct after each of its attacks: it attacks only those). Each
variant runs batched where the model is; the table gives seconds per image and the ratio to
PGD-20 measured in the same rounds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.timing import Row, format_table, interleaved, paired_ratios, summarize  # noqa: E402
from solo_hyper.backbones import SmallCNN  # noqa: E402
from solo_hyper.data import DATASETS, load_fashion_mnist  # noqa: E402
from solo_hyper.evaluation.adversarial import PGDSpec, PixelClassifier, robust_accuracy  # noqa: E402
from solo_hyper.evaluation.autoattack import AutoAttackSpec  # noqa: E402
from solo_hyper.evaluation.diagnostics import DiagnosticsSpec, diagnose  # noqa: E402

EPS = 8 / 255


def trained_classifier(steps: int, device: torch.device, width: int = 16):
    """A small-CNN classifier trained ``steps`` Adam steps (batch 64) on Fashion-MNIST's training
    images, and the test images ([0, 1] pixels, the stored grey channel, which the classifier
    repeats) with their labels."""
    info = DATASETS["fashionmnist"]
    images, labels = load_fashion_mnist(train=True)
    test_images, test_labels = load_fashion_mnist(train=False)

    def pixels(u8: torch.Tensor) -> torch.Tensor:
        return u8.float().div(255).reshape(-1, 1, 28, 28)

    torch.manual_seed(0)
    encoder = SmallCNN(width=width)
    model = PixelClassifier(encoder, nn.Linear(encoder.num_features, 10), info.mean, info.std)
    model.to(device).train()
    opt = torch.optim.Adam(model.parameters(), 3e-3)
    for step in range(steps):
        i = (step * 64) % (len(labels) - 64)
        x, y = pixels(images[i : i + 64]).to(device), labels[i : i + 64].to(device)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval(), pixels(test_images).to(device), test_labels.to(device)


def autoattack_rows(
    images: int = 64, rounds: int = 1, device: str = "cpu", train_steps: int = 300,
    autoattack: AutoAttackSpec | None = None, diagnostics: DiagnosticsSpec | None = None,
) -> list[Row]:  # fmt: skip
    """AutoAttack (standard, 8/255) and the default diagnostics vs one PGD-20 evaluation."""
    dev = torch.device(device)
    autoattack = autoattack or AutoAttackSpec(EPS)
    diagnostics = diagnostics or DiagnosticsSpec(images=images)
    model, x, y = trained_classifier(train_steps, dev)
    x, y = x[:images], y[:images]
    batches = lambda: iter([(x, y)])  # noqa: E731
    pgd = PGDSpec(EPS, EPS / 10, 20)
    found: dict[str, float] = {}

    def run(name: str, attacks: dict) -> None:
        found.update(robust_accuracy(model, batches, {name: attacks[name]}, dev))

    variants = {
        "pgd": lambda: run("pgd", {"pgd": pgd}),
        "autoattack": lambda: run("aa", {"aa": autoattack}),
        "diagnostics": lambda: diagnose(model, x, y, diagnostics, "bench", batch_size=256),
    }
    times = interleaved(variants, rounds, warmup=0, device=dev)
    n_diag = min(diagnostics.images, images)
    per_image = {k: [t / (n_diag if k == "diagnostics" else images) for t in v]
                 for k, v in times.items()}  # fmt: skip

    def ms(name: str) -> str:
        return f"{1000 * summarize(per_image[name]).median:.1f} ms/image"

    accuracy = (f"clean {found['A_nat']:.1f}%, PGD-20 {found['pgd']:.1f}%, "
                f"{autoattack.label} {found['aa']:.1f}%")  # fmt: skip
    return [
        Row("autoattack", f"{autoattack.label} ({autoattack.version})", "PGD-20 8/255",
            "time per image", summarize(paired_ratios(per_image["autoattack"], per_image["pgd"])),
            None, f"{ms('autoattack')} vs {ms('pgd')}; {images} images, {device}; {accuracy}"),
        Row("autoattack", "gradient-masking diagnostics", "PGD-20 8/255", "time per image",
            summarize(paired_ratios(per_image["diagnostics"], per_image["pgd"])), None,
            f"{ms('diagnostics')} vs {ms('pgd')}; {n_diag} images, PGD-{diagnostics.steps}, "
            f"PGD-{diagnostics.long_steps}, {diagnostics.restarts} restarts, "
            f"{len(diagnostics.sweep) + 1} radii, Square {diagnostics.square_queries} queries"),
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--train-steps", type=int, default=300)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = autoattack_rows(args.images, args.rounds, args.device, args.train_steps)
    print(format_table(rows))


if __name__ == "__main__":
    main()
