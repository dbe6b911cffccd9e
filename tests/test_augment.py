"""The on-device pipeline: per-sample randomness, shapes, ranges, devices, no host read."""

from __future__ import annotations

import torch

from solo_hyper.augment import DeviceAugmentation, blur_kernel_size, with_defaults
from solo_hyper.syncs import HostReads

MEAN, STD = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)


def full_entry(**kw):
    entry = {
        "crop_size": 24, "num_crops": 2,
        "color_jitter": {"prob": 1.0}, "grayscale": {"prob": 0.5}, "gaussian_blur": {"prob": 0.5},
        "solarization": {"prob": 0.5}, "equalization": {"prob": 0.5}, "horizontal_flip": {"prob": 0.5},
    }  # fmt: skip
    entry.update(kw)
    return entry


def test_shapes_channels_and_pixel_range():
    aug = DeviceAugmentation([full_entry(), {"crop_size": 12, "num_crops": 3}], MEAN, STD)
    images = torch.randint(0, 256, (8, 1, 28, 28), dtype=torch.uint8)
    crops = aug.crops(images, normalize=False)
    assert [c.shape for c in crops] == [(8, 3, 24, 24)] * 2 + [(8, 3, 12, 12)] * 3
    for c in crops:
        assert c.dtype == torch.float32 and c.min() >= 0 and c.max() <= 1
    assert aug.num_crops == 5


def test_normalisation_uses_mean_and_std():
    aug = DeviceAugmentation(
        [
            {
                "crop_size": 28,
                "rrc": {"enabled": False},
                "color_jitter": {"prob": 0},
                "grayscale": {"prob": 0},
                "horizontal_flip": {"prob": 0},
            }
        ],
        MEAN,
        STD,
    )
    images = torch.full((2, 3, 28, 28), 255, dtype=torch.uint8)
    (crop, _) = aug.crops(images)
    assert torch.allclose(crop, torch.full_like(crop, (1 - 0.5) / 0.25))


def test_every_image_gets_its_own_parameters():
    """The same image repeated in a batch must come out differently (per-sample randomness)."""
    aug = DeviceAugmentation([full_entry()], MEAN, STD)
    image = torch.randint(0, 256, (1, 3, 28, 28), dtype=torch.uint8)
    torch.manual_seed(0)
    crops = aug.crops(image.repeat(16, 1, 1, 1), normalize=False)[0]
    distinct = {tuple(c.flatten()[:50].tolist()) for c in crops}
    assert len(distinct) > 8


def test_views_of_one_image_differ_between_crops():
    aug = DeviceAugmentation([full_entry()], MEAN, STD)
    images = torch.randint(0, 256, (4, 3, 28, 28), dtype=torch.uint8)
    a, b = aug.crops(images)
    assert not torch.allclose(a, b)


def test_seeded_runs_are_identical():
    aug = DeviceAugmentation([full_entry()], MEAN, STD)
    images = torch.randint(0, 256, (4, 3, 28, 28), dtype=torch.uint8)
    torch.manual_seed(3)
    first = aug.crops(images)
    torch.manual_seed(3)
    second = aug.crops(images)
    assert all(torch.equal(x, y) for x, y in zip(first, second))


def test_evaluation_view_resizes_and_centre_crops():
    aug = DeviceAugmentation([{"crop_size": 32}], MEAN, STD)
    out = aug.evaluation_view(torch.randint(0, 256, (2, 3, 40, 64), dtype=torch.uint8))
    assert out.shape == (2, 3, 32, 32)
    same = aug.evaluation_view(torch.zeros(2, 1, 32, 32, dtype=torch.uint8), normalize=False)
    assert same.shape == (2, 3, 32, 32) and same.abs().max() == 0


def test_defaults_fill_missing_keys_and_blur_kernel_is_odd():
    e = with_defaults({"color_jitter": {"prob": 0.3}})
    assert e["color_jitter"]["brightness"] == 0.4 and e["color_jitter"]["prob"] == 0.3
    assert blur_kernel_size(224) == 23 and blur_kernel_size(28) == 3 and blur_kernel_size(32) == 3


def test_module_moves_with_the_model():
    aug = DeviceAugmentation([{"crop_size": 28}], MEAN, STD).to(torch.float64)
    assert aug.mean.dtype == torch.float64


def shipped_entries() -> list[dict]:
    """Every augmentation entry of the shipped pretraining and solo-main configs."""
    import glob

    import yaml

    entries = []
    for path in sorted(glob.glob("configs/pretrain/*/*.yaml") + glob.glob("configs/solo-main/*/augmentations/*.yaml")):
        with open(path) as f:
            loaded = yaml.safe_load(f)
        entries += (loaded if isinstance(loaded, list) else loaded.get("augmentations")) or []
    return list({repr(e): e for e in entries}.values())


def test_every_pipeline_keeps_its_parameters_on_the_batchs_device_and_reads_nothing_back():
    """On ``meta`` (a device that holds no data: a read or a copy to the host would raise): every
    shipped entry, every augmentation at once, and a resize instead of the random crop. kornia's
    modules (grayscale, equalization, flips, noise) draw on the device the module moved to; only
    their record of the input's shape is a host tensor, made from Python numbers."""
    meta = torch.device("meta")
    entries = shipped_entries()
    assert len(entries) > 10 and any(int(e["crop_size"]) == 224 for e in entries)
    noisy = full_entry(gaussian_noise={"prob": 0.5, "std": 0.03})
    for entry in [*entries, noisy, {**noisy, "rrc": {"enabled": False}}]:
        aug = DeviceAugmentation([entry], MEAN, STD).to(meta)
        images = torch.empty(8, 1, 28, 28, dtype=torch.uint8, device=meta)
        with HostReads() as reads:
            crops = aug.crops(images, normalize=True)
        assert reads.reads == [], entry
        size = int(entry["crop_size"])
        assert [(c.device, c.shape) for c in crops] == [(meta, (8, 3, size, size))] * int(entry["num_crops"])
        drawn = [v for m in aug.pipelines[0] for k, v in getattr(m, "_params", {}).items() if k != "forward_input_shape"]
        assert {v.device for v in drawn} <= {meta}
    assert drawn  # the last pipeline's kornia modules drew
