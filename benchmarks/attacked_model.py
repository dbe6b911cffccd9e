"""The attacked model on the fast inference path (BatchNorm folded, channels-last on the CPU:
``evaluation.inference.attacked_at_inference_speed``) against the plain model: PGD-20 and
AutoAttack's standard version, seconds per image, on the same images.

    python benchmarks/attacked_model.py [--images 24] [--rounds 3] [--threads 1]

The classifier is ``benchmarks/autoattack.py``'s (the main job's small CNN, width 32, under a
linear head, trained a few hundred Adam steps on Fashion-MNIST, attacked on its stored 1-channel
test images). PGD-20 runs ``rounds`` interleaved rounds; AutoAttack (minutes per variant) one.
The accuracies of both paths are printed: the same function, so the same numbers up to ties
that float rounding breaks differently.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.autoattack import EPS, trained_classifier  # noqa: E402
from benchmarks.timing import Row, format_table, interleaved, paired_ratios, summarize  # noqa: E402
from solo_hyper.evaluation.adversarial import PGDSpec, robust_accuracy  # noqa: E402
from solo_hyper.evaluation.autoattack import AutoAttackSpec  # noqa: E402
from solo_hyper.evaluation.inference import attacked_at_inference_speed  # noqa: E402


def attacked_rows(
    images: int = 24, rounds: int = 3, device: str = "cpu", train_steps: int = 300,
    width: int = 32, autoattack: AutoAttackSpec | None = None,
) -> list[Row]:  # fmt: skip
    """PGD-20 and AutoAttack through the fast attacked model vs the plain one."""
    dev = torch.device(device)
    autoattack = autoattack or AutoAttackSpec(EPS)
    model, x, y = trained_classifier(train_steps, dev, width)
    x, y = x[:images], y[:images]
    batches = lambda: iter([(x, y)])  # noqa: E731
    found: dict[str, float] = {}

    def run(name: str, spec, fast: bool):
        def go() -> None:
            if fast:
                with attacked_at_inference_speed(model, dev):
                    acc = robust_accuracy(model, batches, {"x": spec}, dev)
            else:
                acc = robust_accuracy(model, batches, {"x": spec}, dev)
            found["clean"], found[name] = acc["A_nat"], acc["x"]

        return go

    pgd = PGDSpec(EPS, EPS / 10, 20)
    times = interleaved({"pgd plain": run("pgd plain", pgd, False),
                         "pgd fast": run("pgd fast", pgd, True)}, rounds, warmup=1, device=dev)  # fmt: skip
    times |= interleaved({"aa plain": run("aa plain", autoattack, False),
                          "aa fast": run("aa fast", autoattack, True)}, 1, warmup=0, device=dev)  # fmt: skip
    per_image = {k: [t / images for t in v] for k, v in times.items()}

    def seconds(name: str) -> str:
        return f"{summarize(per_image[name]).median:.3f} s/image"

    rows = []
    for key, label in (("pgd", pgd.label), ("aa", f"{autoattack.label} ({autoattack.version})")):
        fast, plain = f"{key} fast", f"{key} plain"
        rows.append(Row(
            "attacked-model", f"{label}, fast attacked model", f"{label}, plain model",
            "time per image", summarize(paired_ratios(per_image[fast], per_image[plain])), None,
            f"{seconds(fast)} vs {seconds(plain)}; {images} images, {device}, "
            f"{torch.get_num_threads()} thread(s); accuracy {found[fast]:.1f}% vs "
            f"{found[plain]:.1f}% (clean {found['clean']:.1f}%)",
        ))  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--train-steps", type=int, default=300)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(format_table(attacked_rows(args.images, args.rounds, args.device, args.train_steps)))


if __name__ == "__main__":
    main()
