"""What every objective shares: typed arguments checked once, the crops' pixel statistics, the
embedding-space arguments, and one training step for a plain PyTorch loop.

An objective is a method without a framework: its arguments (a dataclass whose fields are the
``method_kwargs``), its head onto the declared space, the crops it needs, an optional per-step
preparation, its loss and metrics, and the per-step inputs a training loop must supply (EBCLR's
chain starts), all declared on the class. The solo-learn methods (``solo_hyper.methods``) wrap
one each; nothing here imports more than torch.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from solo_hyper.geometry import Manifold, check_geometry, make_space
from solo_hyper.heads import SpaceProjector
from solo_hyper.losses.infonce import check_chunk_size

Batch = list[Any]  # [indexes (B,), crops (list of (B, C, H, W)), targets (B,)]


# ---------------------------------------------------------------------------------- checks
def is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float))


def is_int(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int)


def check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {value!r}")


def check_int(name: str, value: Any, minimum: int) -> None:
    if not is_int(value) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def check_choice(name: str, value: Any, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")


@dataclass(frozen=True)
class ObjectiveArgs:
    """Base of the objectives' arguments: the dataclass fields are the names, defaults and types;
    ``check`` (run once, at construction) the ranges. Messages name the field and the fix."""

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Overridden by each objective's arguments."""

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Every argument with its default (the ``method_kwargs`` section of a config)."""
        return {f.name: f.default for f in dataclasses.fields(cls)}

    @classmethod
    def from_mapping(cls, given: Mapping[str, Any]) -> ObjectiveArgs:
        """The arguments from a mapping; an unknown name is a ValueError with the closest one."""
        names = [f.name for f in dataclasses.fields(cls)]
        for key in given:
            if key not in names:
                match = difflib.get_close_matches(str(key), names, n=1, cutoff=0.6)
                hint = f" (did you mean {match[0]!r}?)" if match else ""
                raise ValueError(f"{key} is not an argument{hint}; known: {sorted(names)}")
        return cls(**given)


@dataclass(frozen=True)
class SpaceArgs(ObjectiveArgs):
    """The embedding space and its loss, shared by every objective that has a space.

    Attributes:
        temperature: tau of the logits -d/tau (of the energies, for EBCLR).
        geometry: the space, one of ``geometry.GEOMETRIES``: poincare, lorentz, euclidean, sphere.
        curvature: c > 0 of the hyperbolic spaces, whose curvature is -c.
        learnable_curvature: train c with the head (a softplus parameter), from ``curvature``.
        chunk_size: the loss's anchors per block: "auto" (the fastest measured path for the
            device and size), None (fused) or K (blocks of K anchors, O(K M) memory).
    """

    temperature: float = 0.2
    geometry: str = "poincare"
    curvature: float = 0.1
    learnable_curvature: bool = False
    chunk_size: int | str | None = "auto"

    def check(self) -> None:
        if not is_number(self.temperature) or not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature!r}")
        check_geometry(self.geometry, self.curvature)
        check_bool("learnable_curvature", self.learnable_curvature)
        check_chunk_size(self.chunk_size)

    def space(self) -> Manifold:
        return make_space(self.geometry, self.curvature, self.learnable_curvature)


# ---------------------------------------------------------------------------------- pixels
@dataclass(frozen=True)
class CropStats:
    """The (mean, std) with which crops were normalised: [0, 1] pixels <-> encoder inputs.

    Attributes:
        mean: per-channel mean.
        std: per-channel standard deviation.
    """

    mean: tuple[float, ...] = (0.5, 0.5, 0.5)
    std: tuple[float, ...] = (0.5, 0.5, 0.5)

    def like(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(mean, std) as (1, C, 1, 1) tensors of ``x``'s device and dtype, made once per
        (statistics, device, dtype) and shared: built per call they would be copied from the host
        each time (a blocking copy on a GPU, per attack or SGLD step). Read-only."""
        stats = (tuple(map(float, self.mean)), tuple(map(float, self.std)))
        return _stats_on(*stats, x.device, x.dtype)

    def normalize(self, x: Tensor) -> Tensor:
        """[0, 1] pixels -> the normalised crops the encoder takes."""
        mean, std = self.like(x)
        return (x - mean) / std

    def denormalize(self, x: Tensor) -> Tensor:
        """Normalised crops -> [0, 1] pixels."""
        mean, std = self.like(x)
        return (x * std + mean).clamp_(0.0, 1.0)


@functools.lru_cache(maxsize=64)
def _stats_on(
    mean: tuple[float, ...], std: tuple[float, ...], device: torch.device, dtype: torch.dtype
) -> tuple[Tensor, Tensor]:
    # ordinary tensors even when first asked for inside inference mode (an inference tensor
    # cannot be saved for a later training step's backward)
    with torch.inference_mode(False), torch.no_grad():
        shape = (1, -1, 1, 1)
        made = (torch.tensor(v, dtype=dtype, device=device).view(shape) for v in (mean, std))
        return tuple(made)


# ---------------------------------------------------------------------------------- objective
def _described(value: Any) -> str:
    if isinstance(value, Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)}"
    return f"a {type(value).__name__}"


class Net(nn.Module):
    """An encoder and an objective's head: all the objectives compute with (``net.encoder``,
    ``net.projector`` and its space, and ``net.encode(x)``: the features of a batch the training
    loop did not encode itself, such as SGLD samples). The solo-learn methods hand their objective
    such a view of their backbone and head each step, with solo's forward as ``encode``
    (channels-last input under solo main), never themselves.

    Args:
        encoder: the backbone.
        projector: the objective's head onto its space.
        encode: the features of a batch (None: the encoder).
    """

    def __init__(
        self, encoder: nn.Module, projector: SpaceProjector,
        encode: Callable[[Tensor], Tensor] | None = None,
    ) -> None:  # fmt: skip
        super().__init__()
        self.encoder, self.projector = encoder, projector
        self._encode = encode

    def encode(self, x: Tensor) -> Tensor:
        return self.encoder(x) if self._encode is None else self._encode(x)


class Objective:
    """A training objective on an encoder's features (subclasses: HCL, SHCL, RHCL, RoCL, EBCLR).

    Declared per class: ``Args`` (the arguments' dataclass), ``required_crops`` (None: any number
    of crops, at least ``min_crops``), ``pixel_space_crops`` (the crops come as [0, 1] pixels: attacks with a pixel budget)
    and ``step_inputs`` (what a training loop hands ``prepare`` each step: EBCLR's "chains").

    Args:
        args: the objective's arguments, an instance of its ``Args`` (None: the defaults).
        crop_stats: the (mean, std) with which the crops were normalised (attacks and SGLD
            work on [0, 1] pixels).

    Raises:
        TypeError: ``args`` of another objective's ``Args``.
    """

    Args: ClassVar[type[ObjectiveArgs]] = ObjectiveArgs
    required_crops: ClassVar[int | None] = None
    min_crops: ClassVar[int] = 2  # a crop's positive is another crop of its image
    pixel_space_crops: ClassVar[bool] = False
    step_inputs: ClassVar[tuple[str, ...]] = ()

    def __init__(self, args: ObjectiveArgs | None = None, crop_stats: CropStats = CropStats()):
        if args is None:
            args = self.Args()
        if not isinstance(args, self.Args):
            raise TypeError(f"{type(self).__name__} takes {self.Args.__name__}, got {type(args).__name__}")
        self.args, self.crop_stats = args, crop_stats
        self._values_checked = False  # ``step`` checks the first batch's values

    def head(self, features_dim: int) -> SpaceProjector:
        """The projector from the encoder's features onto the declared space."""
        raise NotImplementedError

    def prepare(self, net: nn.Module, batch: Batch, **inputs: Any) -> tuple[Batch, dict[str, Any]]:
        """The step's own state, made before the crops are encoded (default: none)."""
        return batch, {}

    def loss(
        self, net: nn.Module, batch: Batch, feats: list[Tensor], z: list[Tensor], **extras: Any
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """(loss, metrics) of one step from the per-crop features and projections."""
        raise NotImplementedError

    def check_batch(self, batch: Batch, values: bool = True) -> None:
        """ValueError, before anything is computed, for a batch this objective cannot train on:
        it must be [indexes (B,), crops, targets (B,)] with the crops the class declares, each
        (B, C, H, W) with the same B, and finite (a NaN/Inf crop is named as such).
        ``values=False``: the structure only, which reads nothing back from the device."""
        name = type(self).__name__
        if not isinstance(batch, (list, tuple)) or len(batch) != 3:
            raise ValueError(f"{name} takes a batch [indexes (B,), crops (a list of (B, C, H, W) "
                             f"tensors, one per view), targets (B,)], got {_described(batch)}")  # fmt: skip
        indexes, crops, targets = batch
        if not isinstance(crops, (list, tuple)):
            raise ValueError(f"{name}: the crops must be a list of (B, C, H, W) tensors, one per "
                             f"view, got {_described(crops)}")  # fmt: skip
        wanted = self.required_crops
        if wanted is not None and len(crops) != wanted:
            raise ValueError(f"{name} trains on exactly {wanted} crops per image, got {len(crops)}")
        if len(crops) < self.min_crops:
            raise ValueError(
                f"{name} needs at least {self.min_crops} crops per image (a crop's positive is "
                f"another crop of its image; with {len(crops)} the loss has no positive), got "
                f"{len(crops)}"
            )
        if not isinstance(indexes, Tensor) or indexes.dim() != 1:
            raise ValueError(f"{name}: indexes must be a (B,) tensor, got {_described(indexes)}")
        size = indexes.shape[0]
        if not isinstance(targets, Tensor) or tuple(targets.shape) != (size,):
            raise ValueError(f"{name}: targets must be a ({size},) tensor like the indexes, got "
                             f"{_described(targets)}")  # fmt: skip
        for i, x in enumerate(crops):
            if not isinstance(x, Tensor) or x.dim() != 4:
                raise ValueError(f"{name}: crop {i} must be a (B, C, H, W) tensor, got {_described(x)}")
            if x.shape[0] != size:
                raise ValueError(f"{name}: crop {i} holds {x.shape[0]} images, the indexes {size}: "
                                 "every crop holds one view of each image of the batch")  # fmt: skip
        for i, x in enumerate(crops if values else ()):
            if x.is_floating_point() and not bool(torch.isfinite(x).all()):
                what = "NaN" if bool(torch.isnan(x).any()) else "Inf"
                bad = int((~torch.isfinite(x)).sum())
                raise ValueError(f"{name}: crop {i} holds {what} values ({bad} of {x.numel()}); "
                                 "drop or repair those images before the step")  # fmt: skip

    check_every_step = False  # True: ``step`` checks the crops' values every step, not the first

    def step(self, net: nn.Module, batch: Batch, **inputs: Any) -> tuple[Tensor, dict[str, Tensor]]:
        """One training step outside any framework: the batch checked, prepare, encode every
        crop, the loss. The batch's structure is checked every step, its values (NaN/Inf crops)
        on the first step and with ``check_every_step`` (or ``check_batch(batch)`` on demand):
        that check reads the crops back from the device, which a step should not wait for."""
        self.check_batch(batch, values=self.check_every_step or not self._values_checked)
        self._values_checked = True
        batch, extras = self.prepare(net, batch, **inputs)
        feats = [net.encoder(x) for x in batch[1]]
        return self.loss(net, batch, feats, [net.projector(f) for f in feats], **extras)
