"""What both adapters do the same way, whatever the solo-learn version.

The pieces of solo-learn used here have the same import path and meaning in 1.0.2 and in main
(``solo.methods.METHODS``, ``solo.methods.base.BaseMethod``, ``solo.utils.knn``); the adapters
(``v1.py``, ``v2.py``) keep only what differs: how a method is constructed (kwargs or an
OmegaConf cfg), the name of the backbone attribute, Lightning's import, solo's crop statistics.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, ClassVar

import torch
from solo.methods import METHODS
from solo.utils.knn import WeightedKNNClassifier
from torch import nn

from solo_hyper.backbones import FrozenBackbone
from solo_hyper.config import ConfigError, training_processes
from solo_hyper.metrics.knn import knn_accuracy
from solo_hyper.objectives import CropStats, Objective, ObjectiveArgs
from solo_hyper.solo.baselines import baseline_of, trainable_methods

Stats = tuple[tuple[float, ...], tuple[float, ...]]

_IMAGENET_MEAN = (0.485, 0.456, 0.406)
_CIFAR10 = ((0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261))
_STL10 = ((0.4914, 0.4823, 0.4466), (0.247, 0.243, 0.261))
# The normalisation of solo's pretraining crops per dataset: (solo-learn 1.0.2's, main's). 1.0.2
# uses CIFAR-10's statistics for CIFAR-100 and an ImageNet std of 0.228 (sic); custom data: the
# given mean/std (main: the first crop entry's, else ImageNet's).
SOLO_CROP_STATS: dict[str, tuple[Stats, Stats]] = {
    "cifar10": (_CIFAR10, ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))),
    "cifar100": (_CIFAR10, ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762))),
    "stl10": (_STL10, _STL10),
    "imagenet100": ((_IMAGENET_MEAN, (0.228, 0.224, 0.225)), (_IMAGENET_MEAN, (0.229, 0.224, 0.225))),
    "imagenet": ((_IMAGENET_MEAN, (0.228, 0.224, 0.225)), (_IMAGENET_MEAN, (0.229, 0.224, 0.225))),
}


def solo_crop_stats(version: int) -> dict[str, Stats]:
    """One column of SOLO_CROP_STATS: 0 for solo-learn 1.0.2, 1 for main."""
    return {dataset: stats[version] for dataset, stats in SOLO_CROP_STATS.items()}


# ---------------------------------------------------------------------------------- crop stats
def crop_stats(
    dataset: str | None,
    mean: Any,
    std: Any,
    solo_stats: dict[str, Stats],
    custom_default: Stats | None,
    no_dataset_default: Stats | None,
    prefer_explicit: bool = False,
) -> Stats:
    """(mean, std) with which the crops a method receives were normalised.

    solo's pipeline normalises a dataset it knows with its own statistics (``solo_stats``), whatever
    mean/std say, so those come first unless ``prefer_explicit`` (the on-device augmentation, which
    normalises with the given mean and std); then an explicit mean and std (this plugin's configs,
    solo's custom data); custom data without mean/std takes
    ``custom_default`` (solo main: ImageNet's, as its pipeline; 1.0.2: none, an error); no dataset
    at all (a Trainer built by hand) takes ``no_dataset_default``. Anything else is a ConfigError
    raised before training.
    """
    explicit = mean is not None and std is not None
    if explicit and (prefer_explicit or dataset not in solo_stats):
        stats = tuple(float(m) for m in mean), tuple(float(s) for s in std)
    elif dataset in solo_stats:
        stats = solo_stats[dataset]
    elif dataset == "custom" and custom_default is not None:
        stats = custom_default
    elif dataset is None and no_dataset_default is not None:
        stats = no_dataset_default
    else:
        what = "custom data" if dataset == "custom" else f"dataset {dataset!r}"
        raise ConfigError(
            f"cannot de-normalise the crops of {what}: the statistics solo's pipeline normalised "
            "them with are unknown; give them as mean and std (solo-learn 1.0.2: --mean/--std, "
            "solo main: data.mean/data.std or the augmentations' mean/std), or set "
            f"data.augment_on_device=true. Known datasets: {sorted(solo_stats)}"
        )
    if len(stats[0]) != len(stats[1]) or any(s <= 0 for s in stats[1]):
        raise ConfigError(f"crop statistics need one positive std per mean, got {stats}")
    return stats


# ---------------------------------------------------------------------------------- kNN
class AccumulatingKNN(WeightedKNNClassifier):
    """solo's online kNN metric, computed with this plugin's ``knn_accuracy``.

    Calling it only accumulates (solo's ``compute_on_step=False`` intent, which torchmetrics 0.11
    no longer honours: it would compute on every partial batch), and the number of classes is not
    taken from the test targets, which breaks on small validation splits. ``scale``: 100 where solo
    logs percent (main), 1 for fractions (1.0.2); ``reset_on_compute``: one epoch's features at a
    time where solo does not reset the metric itself.
    """

    scale = 1.0
    reset_on_compute = False

    def forward(self, *args: Any, **kwargs: Any) -> None:
        self.update(*args, **kwargs)

    @torch.no_grad()
    def compute(self) -> tuple[float, float]:
        if not self.train_features or not self.test_features:
            return -1.0, -1.0
        top1, top5 = knn_accuracy(
            torch.cat(self.train_features), torch.cat(self.train_targets),
            torch.cat(self.test_features), torch.cat(self.test_targets),
            k=self.k, distance=self.distance_fx, temperature=self.T, epsilon=self.epsilon,
        )  # fmt: skip
        if self.reset_on_compute:
            self.reset()
        return self.scale * top1, self.scale * top5


# ---------------------------------------------------------------------------------- modules
class PluginMixin:
    """What this plugin adds to solo's BaseMethod under either version (mixed in before it).

    The adapter's PluginBase sets ``device_augmentation`` (None: crops come from a CPU pipeline),
    ``crop_mean`` / ``crop_std`` (the statistics of the crops the method receives) and
    ``crop_noise`` (per crop of a CPU pipeline, the configured ``gaussian_noise`` that solo's
    pipeline does not know and the device adds; empty with the on-device augmentation).
    Methods set ``pixel_space_crops`` (they take [0, 1] crops and normalise themselves: attacks
    with a pixel budget) and ``required_crops``.
    """

    pixel_space_crops = False
    required_crops: int | None = None
    device_augmentation: nn.Module | None
    crop_mean: tuple[float, ...]
    crop_std: tuple[float, ...]
    crop_noise: list[nn.Module | None] = []

    @property
    def crop_stats(self) -> CropStats:
        """The crops' statistics, as the objectives take them."""
        return CropStats(self.crop_mean, self.crop_std)

    def normalize_pixels(self, x: torch.Tensor) -> torch.Tensor:
        """[0, 1] pixels -> the normalised crops the backbone takes."""
        return self.crop_stats.normalize(x)

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        """Crops normalised by a CPU pipeline back to [0, 1] pixels (for pixel-space methods)."""
        return self.crop_stats.denormalize(x)

    def pixels_to_input(self, x: torch.Tensor) -> torch.Tensor:
        """[0, 1] pixels -> what this method's training step receives as a crop."""
        return x if self.pixel_space_crops else self.normalize_pixels(x)

    def _noise_of(self, crop: int) -> nn.Module | None:
        return self.crop_noise[crop] if crop < len(self.crop_noise) else None

    def pipeline_pixels(self, x: torch.Tensor, crop: int) -> torch.Tensor:
        """Crop number ``crop`` as a CPU pipeline normalised it -> [0, 1] pixels, with the
        configured augmentations that pipeline lacks (``gaussian_noise``), as on the device."""
        noise = self._noise_of(crop)
        pixels = self.denormalize(x)
        return pixels if noise is None else noise(pixels)

    def pipeline_crops(self, crops: list[torch.Tensor]) -> list[torch.Tensor]:
        """A CPU pipeline's crops as this method takes them: as they are, unless pixels are
        needed (pixel-space methods) or the device adds an augmentation (``crop_noise``)."""
        out = []
        for i, x in enumerate(crops):
            if self._noise_of(i) is None and not self.pixel_space_crops:
                out.append(x)
            else:
                out.append(self.pixels_to_input(self.pipeline_pixels(x, i)))
        return out

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Training: un-augmented (uint8) images are augmented here; crop lists from a CPU
        pipeline pass through (``pipeline_crops``). Evaluation: uint8 images
        are resized and normalised here; float images pass through."""
        if self._trainer is None:
            return batch
        with torch.no_grad():
            if self.trainer.training:
                seed_batch = getattr(self, "seed_training_batch", None)
                if seed_batch is not None:  # run.resume.ExactResume: per-batch random states
                    seed_batch()
                indexes, images, targets = batch
                if isinstance(images, (list, tuple)):
                    return [indexes, self.pipeline_crops(list(images)), targets]
                if self.device_augmentation is None:
                    raise RuntimeError(
                        "the training batch holds un-augmented images but the on-device "
                        "augmentation is off: set data.augment_on_device=true"
                    )
                crops = self.device_augmentation.crops(images, normalize=not self.pixel_space_crops)
                return [indexes, crops, targets]
            images, targets = batch[-2], batch[-1]
            if self.device_augmentation is None or images.is_floating_point():
                return batch
            return [self.device_augmentation.evaluation_view(images), targets]

    @classmethod
    def check_args(cls, args: SimpleNamespace | dict) -> Any:
        """The check of ``method_kwargs`` (this plugin's methods: their objective's arguments;
        solo's bundled methods: none, their ``method_kwargs`` are checked by their schema)."""
        return None

    @classmethod
    def check_config(cls, cfg: dict) -> None:
        """Checks that need the whole run config, before any work: a bundled baseline's
        constraints (``solo.baselines``); EBCLR adds its buffer's memory."""
        entry = baseline_of(cls)
        for check in entry.checks if entry is not None else ():
            check(cfg)

    def extra_callbacks(self) -> list:
        """The callbacks this method needs (EBCLR: its replay buffer); none by default."""
        return []

    def configure_callbacks(self) -> list:
        """The callbacks a method needs (``extra_callbacks``, e.g. EBCLR's replay buffer), under
        every launcher: solo's scripts and any Trainer a user builds attach them from here
        (Lightning 1.9 and 2.x); ones of a type the Trainer already has are left out."""
        present = {type(c) for c in self.trainer.callbacks} if self._trainer is not None else set()
        return [c for c in self.extra_callbacks() if type(c) not in present]

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        if getattr(self, "solo_hyper_config", None) is not None:
            checkpoint["solo_hyper_config"] = self.solo_hyper_config


class MethodMixin:
    """A solo-learn method wrapping one objective (``OBJECTIVE``, a class of
    ``solo_hyper.objectives``), the same under either solo-learn. From the objective's declarations
    come the method's arguments (``ARGS``: ``method_kwargs`` and their defaults), their one check
    (``check_args``), its head (``projector``), crops (``required_crops``, ``pixel_space_crops``),
    per-step preparation and loss. A method adds what a training loop must supply to the
    objective each step (``step_inputs``: EBCLR's chain starts) and the callbacks that supply it
    (``extra_callbacks``).
    """

    OBJECTIVE: ClassVar[type[Objective]]
    ARGS: ClassVar[dict[str, Any]] = {}
    BACKBONE_ATTR = "backbone"  # solo 1.0.2: "encoder"
    args: ObjectiveArgs
    objective: Objective

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "OBJECTIVE" in vars(cls):
            cls.ARGS = cls.OBJECTIVE.Args.defaults()
            cls.required_crops = cls.OBJECTIVE.required_crops
            cls.pixel_space_crops = cls.OBJECTIVE.pixel_space_crops

    @classmethod
    def check_args(cls, args: SimpleNamespace | dict) -> ObjectiveArgs:
        """The objective's arguments from ``method_kwargs``; ValueError naming the key."""
        given = dict(args) if isinstance(args, dict) else vars(args)
        try:
            return cls.OBJECTIVE.Args.from_mapping(given)
        except (TypeError, ValueError) as err:
            raise ValueError(f"method_kwargs.{err}") from None

    def build(self) -> None:
        """The objective on the crops' statistics, and its head (``self.args`` is set)."""
        self.objective = self.OBJECTIVE(self.args, self.crop_stats)
        self.projector = self.objective.head(self.features_dim)

    def project(self, feats: torch.Tensor) -> torch.Tensor:
        return self.projector(feats)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Backbone features of a batch that solo's step does not encode (EBCLR's SGLD samples),
        as solo's forward computes them (solo main: channels-last input)."""
        return super().forward(x)["feats"]

    def step_inputs(self, batch: list[Any]) -> dict[str, Any]:
        """What the objective's ``prepare`` takes each step (its ``step_inputs``); none here."""
        return {}

    def prepare_step(self, batch: list[Any]) -> tuple[list[Any], dict[str, Any]]:
        return self.objective.prepare(self, batch, **self.step_inputs(batch))

    def method_loss(self, batch, out: dict, z: list[torch.Tensor], **extras: Any):
        return self.objective.loss(self, batch, out.get("feats", []), z, **extras)

    def step_projections(self, out: dict) -> list[torch.Tensor]:
        """The per-crop projections of solo's base training step (the versions differ)."""
        raise NotImplementedError

    @property
    def learnable_params(self) -> list[dict[str, Any]]:
        prefixes = (f"{self.BACKBONE_ATTR}.", "classifier.", "device_augmentation.")
        heads = [p for n, p in self.named_parameters() if not n.startswith(prefixes)]
        return super().learnable_params + [{"name": "heads", "params": heads}]

    def training_step(self, batch: list[Any], batch_idx: int) -> torch.Tensor:
        batch, extras = self.prepare_step(batch)
        out = super().training_step(batch, batch_idx)  # solo: online classifier, kNN, logging
        loss, metrics = self.method_loss(batch, out, self.step_projections(out), **extras)
        self.log_dict({f"train_{k}": v for k, v in metrics.items()}, on_epoch=True, sync_dist=True)
        return loss + out["loss"]


def linear_model_builder(solo_linear_model: Callable[..., Any]) -> Callable[..., Any]:
    """The contract's ``build_linear_model`` from a version's
    ``solo_linear_model(backbone, num_classes, linear_cfg, features_only, train_view, eval_view)
    -> LinearModel``."""

    def build_linear_model(
        encoder: nn.Module | None,
        num_features: int,
        num_classes: int,
        linear_cfg: dict,
        train_view: nn.Module | None = None,
        eval_view: nn.Module | None = None,
    ) -> Any:
        """solo's LinearModel on a frozen ``encoder`` (None: on precomputed features) from a
        validated linear-evaluation config (``solo_hyper.evaluation.linear``)."""
        backbone = FrozenBackbone(encoder, num_features)
        return solo_linear_model(
            backbone, int(num_classes), linear_cfg, encoder is None, train_view, eval_view
        )

    return build_linear_model


class PluginLinearMixin:
    """solo's LinearModel fed with this plugin's batches: uint8 ``(images, targets)`` or
    ``(indexes, images, targets)`` turned into model inputs on their device by ``train_view`` /
    ``eval_view`` (constructor arguments; None: the batch is used as it is, e.g. precomputed
    features)."""

    def __init__(
        self, *args: Any, train_view: nn.Module | None = None, eval_view: nn.Module | None = None,
        **kwargs: Any,
    ) -> None:  # fmt: skip
        super().__init__(*args, **kwargs)
        self.train_view, self.eval_view = train_view, eval_view

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        x, y = batch[-2], batch[-1]
        training = self._trainer is not None and self.trainer.training
        view = self.train_view if training else self.eval_view
        if view is not None:
            with torch.no_grad():
                x = view(x)
        return [x, y]


# ---------------------------------------------------------------------------------- registry
def register(name: str, cls: type) -> None:
    """Adds ``cls`` to solo.methods.METHODS under ``name``; idempotent, also across module
    reloads, and a name already taken by another class is an error."""
    current = METHODS.get(name)
    if current is not None and current is not cls:
        same = (current.__module__, current.__qualname__) == (cls.__module__, cls.__qualname__)
        if not same:
            raise ValueError(
                f"cannot register {cls.__qualname__} as {name!r}: solo.methods.METHODS[{name!r}] "
                f"is already {current.__module__}.{current.__qualname__}"
            )
    METHODS[name] = cls


def registered_methods() -> dict[str, type]:
    """solo's METHODS without its base classes (``base``, ``linear``: not pretraining methods)."""
    return trainable_methods(METHODS)


# ---------------------------------------------------------------------------------- config
def scaled_lr(cfg: dict) -> float:
    """optimizer.lr, times batch_size * devices * nodes / 256 when optimizer.scale_lr."""
    opt = cfg["optimizer"]
    lr = float(opt["lr"])
    if opt.get("scale_lr"):
        n_dev = training_processes(cfg.get("accelerator"), cfg.get("devices", 1))
        lr = lr * opt["batch_size"] * n_dev * int(cfg.get("num_nodes", 1)) / 256
    return lr


def init_arg_names(cls: type) -> set[str]:
    """The constructor's argument names (a Trainer's, for picking Trainer keys from a config)."""
    return set(inspect.signature(cls.__init__).parameters) - {"self"}
