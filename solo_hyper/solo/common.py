"""The LightningModule pieces both solo-learn versions share (the shims ``v1.py`` and ``v2.py``
build their classes on them), among them the base of this plugin's methods.

The pieces of solo-learn used here have the same import path and meaning in 1.0.2 and in main
(``solo.utils.knn``, ``solo.methods.METHODS``); the shims add only what differs. ``adapter.py``
is the public side.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any, ClassVar

import torch
from solo.methods import METHODS
from solo.utils.knn import WeightedKNNClassifier
from torch import nn

from solo_hyper.config import ConfigError, training_processes
from solo_hyper.geometry import Manifold
from solo_hyper.metrics.knn import knn_accuracy
from solo_hyper.objectives import CropStats, Net, Objective, ObjectiveArgs

Stats = tuple[tuple[float, ...], tuple[float, ...]]


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


class BatchSeeder:
    """A callback that seeds the random generators for each training batch before the module
    augments it (``run.resume.ExactResume``: per-batch random states, so that a resumed run
    draws the crops it would have drawn). The module calls ``seed_batch`` of every such callback
    first thing in ``on_after_batch_transfer``, before any batch hook runs."""

    def seed_batch(self, trainer: Any) -> None:
        raise NotImplementedError


# ---------------------------------------------------------------------------------- modules
class PluginMixin:
    """What this plugin adds to solo's BaseMethod under either version (mixed in before it).

    The adapter's PluginBase sets ``device_augmentation`` (None: crops come from a CPU pipeline),
    ``crop_mean`` / ``crop_std`` (the statistics of the crops the method receives),
    ``crop_noise`` (per crop of a CPU pipeline, the configured ``gaussian_noise`` that solo's
    pipeline does not know and the device adds; empty with the on-device augmentation) and
    ``solo_hyper_config`` (the run's config, written into every checkpoint; None for a method
    built by solo's own launchers), all in its constructor. ``pixel_space_crops``: the method
    takes [0, 1] crops and normalises them itself (attacks with a pixel budget).
    """

    pixel_space_crops = False
    device_augmentation: nn.Module | None
    crop_mean: tuple[float, ...]
    crop_std: tuple[float, ...]
    crop_noise: list[nn.Module | None] = []
    solo_hyper_config: dict | None = None

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
        """Training: un-augmented (uint8) images are augmented here (after the ``BatchSeeder``
        callbacks seeded the batch); crop lists from a CPU pipeline pass through
        (``pipeline_crops``). Evaluation: uint8 images are resized and normalised here; float
        images pass through."""
        if self._trainer is None:
            return batch
        with torch.no_grad():
            if self.trainer.training:
                for callback in self.trainer.callbacks:
                    if isinstance(callback, BatchSeeder):
                        callback.seed_batch(self.trainer)
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

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        if self.solo_hyper_config is not None:
            checkpoint["solo_hyper_config"] = self.solo_hyper_config


SPACE_CHECKPOINT_KEY = "embedding_space"  # where a checkpoint records the projector's space


_MADE: dict[tuple[str, str], ObjectiveArgs] = {}  # objective_args' results (frozen: shared)


class ObjectiveMethodMixin:
    """The solo-learn method around any of this plugin's objectives, the same under either
    solo-learn (each shim's ``ObjectiveMethod`` adds how its version constructs it).

    Each method is a subclass (``solo_hyper/methods/<name>.py``) that names its objective
    (``OBJECTIVE``: arguments, head, crops and loss, torch only) and overrides the glue hooks
    its objective needs (``check_config``, ``method_callbacks``, ``step_inputs``; EBCLR's replay
    buffer). The constructor checks the ``method_kwargs`` (``objective_args``) before solo's
    constructor runs and ends with ``build``: the objective on the crops' statistics and its
    head (``projector``). Each step: the objective's ``prepare`` (with ``step_inputs``), solo's
    base step (online classifier, kNN, logging) and the objective's ``loss``.
    """

    BACKBONE_ATTR = "backbone"  # solo 1.0.2: "encoder"
    METHOD: ClassVar[str | None] = None  # the method's name in solo's METHODS, set by each method
    OBJECTIVE: ClassVar[type[Objective] | None] = None  # the objective it runs, set likewise
    method: str
    args: ObjectiveArgs
    objective: Objective

    # ------------------------------------------------------------------ the method's declaration
    @classmethod
    def method_name(cls, given: str | None = None) -> str:
        """The method this class builds (``METHOD``); a launcher's ``method`` must agree."""
        if cls.METHOD is None or cls.OBJECTIVE is None:
            raise TypeError(
                f"{cls.__name__} is the base of this plugin's methods: build one of "
                f"solo.methods.METHODS[name] for name in {sorted(plugin_methods())}"
            )
        if given is not None and str(given) != cls.METHOD:
            raise ValueError(f"{cls.__name__} builds method {cls.METHOD!r}, got method={given!r}")
        return cls.METHOD

    @classmethod
    def objective_args(cls, given: SimpleNamespace | dict) -> ObjectiveArgs:
        """The method's arguments from ``method_kwargs`` (the objective's dataclass: the one check
        of each argument); ValueError naming the key. Made once per distinct ``method_kwargs``:
        ``prepare``'s are the ones solo main's config hook finds again when the module is built
        from them."""
        name = cls.method_name()
        given = dict(given) if isinstance(given, dict) else vars(given)
        key = (name, json.dumps(given, sort_keys=True, default=repr))
        if key not in _MADE:
            try:
                made = cls.OBJECTIVE.Args.from_mapping(given)
            except (TypeError, ValueError) as err:
                raise ValueError(f"method_kwargs.{err}") from None
            if len(_MADE) >= 256:
                _MADE.clear()
            _MADE[key] = made
        return _MADE[key]

    @staticmethod
    def check_config(cfg: dict) -> None:
        """Checks that need the whole run config, run before any work (none by default; EBCLR:
        its buffer's memory)."""

    def method_callbacks(self) -> list:
        """The Lightning callbacks that supply the objective's ``step_inputs`` (none by default;
        EBCLR: its replay buffer)."""
        return []

    def step_inputs(self, batch: list[Any]) -> dict[str, Any]:
        """What the objective's ``prepare`` takes besides the batch this step, read from the
        ``method_callbacks`` (none by default; EBCLR: its chain starts)."""
        return {}

    # ------------------------------------------------------------------ the objective and its head
    def build(self, args: ObjectiveArgs) -> None:
        """The objective on ``args`` (``objective_args``, checked before solo's constructor ran)
        and its head; called at the end of construction."""
        self.method, self.args = self.method_name(), args
        self.objective = self.OBJECTIVE(self.args, self.crop_stats)
        self.projector = self.objective.head(self.features_dim)

    @property
    def pixel_space_crops(self) -> bool:  # type: ignore[override]
        return self.OBJECTIVE.pixel_space_crops

    @property
    def required_crops(self) -> int | None:
        return self.OBJECTIVE.required_crops

    @property
    def embedding_space(self) -> Manifold:
        """The projector's space (stored in every checkpoint, so evaluation reads it)."""
        return self.projector.space

    @property
    def curvature(self):
        """The space's curvature c (a tensor when learnable)."""
        return self.embedding_space.curvature

    def project(self, feats: torch.Tensor) -> torch.Tensor:
        return self.projector(feats)

    def forward(self, X: torch.Tensor, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """solo's forward (backbone features, online-classifier logits) plus the head's ``z``."""
        out = super().forward(X, *args, **kwargs)
        return {**out, "z": self.project(out["feats"])}

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Backbone features of a batch that solo's step does not encode (EBCLR's SGLD samples),
        as solo's forward computes them (solo main: channels-last input)."""
        return super().forward(x)["feats"]

    def objective_net(self) -> Net:
        """What the objective computes with: the backbone, the head (and its space) and
        ``encode``, a view made each step (it holds no weights of its own)."""
        return Net(getattr(self, self.BACKBONE_ATTR), self.projector, self.encode)

    # ------------------------------------------------------------------ the step
    def configure_callbacks(self) -> list:
        """``method_callbacks``, under every launcher: this plugin's ``pretrain``, solo's scripts
        and any Trainer a user builds attach them from here (Lightning 1.9 and 2.x); one of a type
        the Trainer already has (a user's own) is left out."""
        present = {type(c) for c in self.trainer.callbacks} if self._trainer is not None else set()
        return [c for c in self.method_callbacks() if type(c) not in present]

    def training_step(self, batch: list[Any], batch_idx: int) -> torch.Tensor:
        net = self.objective_net()
        batch, extras = self.objective.prepare(net, batch, **self.step_inputs(batch))
        out = super().training_step(batch, batch_idx)  # solo: online classifier, kNN, logging
        feats = out["feats"]
        # solo main's base step runs forward (which adds z) on every crop; 1.0.2's encodes only
        z = out["z"] if "z" in out else [self.projector(f) for f in feats]
        loss, metrics = self.objective.loss(net, batch, feats, z, **extras)
        self.log_dict({f"train_{k}": v for k, v in metrics.items()}, on_epoch=True, sync_dist=True)
        return loss + out["loss"]

    @property
    def learnable_params(self) -> list[dict[str, Any]]:
        prefixes = (f"{self.BACKBONE_ATTR}.", "classifier.", "device_augmentation.")
        heads = [p for n, p in self.named_parameters() if not n.startswith(prefixes)]
        return super().learnable_params + [{"name": "heads", "params": heads}]

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint[SPACE_CHECKPOINT_KEY] = self.embedding_space.to_dict()


def plugin_methods() -> dict[str, type[ObjectiveMethodMixin]]:
    """This plugin's methods in solo's registry (``solo.methods.METHODS``), by name; empty until
    ``solo_hyper.methods`` registered them."""
    return {
        name: cls for name, cls in METHODS.items()
        if isinstance(cls, type) and issubclass(cls, ObjectiveMethodMixin) and cls.METHOD == name
    }  # fmt: skip


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


# ---------------------------------------------------------------------------------- config
def scaled_lr(cfg: dict) -> float:
    """optimizer.lr, times batch_size * devices * nodes / 256 when optimizer.scale_lr."""
    opt = cfg["optimizer"]
    lr = float(opt["lr"])
    if opt.get("scale_lr"):
        n_dev = training_processes(cfg.get("accelerator"), cfg.get("devices", 1))
        lr = lr * opt["batch_size"] * n_dev * int(cfg.get("num_nodes", 1)) / 256
    return lr
