"""Fixes that let solo-learn's bundled methods run under this plugin, without editing solo-learn.

Each fix is a small mixin put in front of the mixed plugin class that ``plugin_class`` builds
(the only classes this package creates at run time: solo's own methods with the adapter's base
mixed in); ``FIXES`` says which solo class and method API
(``v1``: solo-learn 1.0.2 on pytorch-lightning 1.9, ``v2``: solo-learn main) it applies to.

solo-learn 1.0.2 on Lightning 1.9 with this plugin's backbones:
- momentum methods (BYOL, MoCo V2+, NNBYOL, ReSSL, DINO) build their momentum backbone from
  solo's own encoder table (a ResNet-18 even when the online backbone is ours: "size 7 vs 3"),
  and their ``on_train_batch_end`` still requires the ``dataloader_idx`` that Lightning 1.9 no
  longer passes;
- DINO's ``clip_gradients(clip)`` shadows Lightning's ``clip_gradients(optimizer, ...)``, which
  Lightning's ``configure_gradient_clipping`` calls on every step;
- W-MSE's whitening calls ``torch.cholesky``, which torch 2 removed;
- MoCo V2+, ReSSL, W-MSE and DINO return their projection under another name than ``"z"``;
- SimCLR/SupCon, NNCLR and VICReg compute their loss on the local batch only, where solo main
  (and this plugin's losses) use every rank's samples: under DDP they are made to gather, as
  main does, so that baselines and our methods see the same candidates.
solo-learn main:
- SimCLR and SupCon score each anchor by the log of its summed positives,
  -log(sum_p e^{s_ip} / sum_{a != i} e^{s_ia}) (SupCon's L_in), where 1.0.2's SupCon and this
  plugin's SHCL average the log-probability over the positives (L_out, SHCL's Eq. 8): with class
  labels (or more than two crops) the two are different losses, so main's are made L_out, the
  same ``contrastive_loss`` on the sphere as on 1.0.2 (with one positive they are equal).
Both versions: SwAV and DeepCluster V2 make buffers at train start, without which a checkpoint
of theirs does not load; DeepCluster V2 has no cluster assignments in its first epoch, and its
loss, a mean over zero assigned samples, is 0/0 = NaN (which the non-finite-loss guard stops
on): here it is 0, the value of an empty mean in this plugin's losses too (its gradient is 0
either way).
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from solo_hyper.distributed import gather_with_grad, rank
from solo_hyper.geometry import Sphere
from solo_hyper.losses import contrastive_loss

_SPHERE = Sphere()  # cosine logits, solo's SimCLR loss


@contextlib.contextmanager
def replaced(module_name: str, name: str, replacement: Callable) -> Iterator[None]:
    """``module.name`` is ``replacement`` inside the block (a solo method's training step reads
    its loss function from its module's globals at call time).

    Args:
        module_name: the imported module, e.g. "solo.methods.vicreg".
        name: the global to replace.
        replacement: what it is inside the block; the original is put back after.
    """
    module = sys.modules[module_name]
    original = getattr(module, name)
    setattr(module, name, replacement)
    try:
        yield
    finally:
        setattr(module, name, original)


# ------------------------------------------------------------------------------ momentum (1.0.2)
class MomentumBackboneIsACopy:
    """1.0.2's BaseMomentumMethod builds its momentum backbone with ``self.base_model``, solo's
    encoder factory; with one of this plugin's backbones it gets a copy of the online backbone
    instead (``initialize_momentum_params`` then copies the weights, as for solo's own)."""

    @property
    def base_model(self) -> Callable[..., nn.Module]:
        factory = self.__dict__["_solo_base_model"]
        if getattr(self, "backbone_name", None) in (None, *_solo_backbones()):
            return factory
        return self._copy_of_online_backbone

    @base_model.setter
    def base_model(self, factory: Callable[..., nn.Module]) -> None:
        self.__dict__["_solo_base_model"] = factory

    def _copy_of_online_backbone(self, **_: Any) -> nn.Module:
        twin = copy.deepcopy(self.encoder)
        twin.inplanes = twin.num_features  # what 1.0.2 reads as a ResNet's feature size
        return twin

    def on_train_batch_end(self, outputs, batch, batch_idx: int, dataloader_idx: int = 0):
        """Lightning 1.9 calls this without ``dataloader_idx``, which 1.0.2 requires."""
        return super().on_train_batch_end(outputs, batch, batch_idx, dataloader_idx)


def _solo_backbones() -> tuple[str, ...]:
    from solo.methods.base import BaseMethod

    return tuple(getattr(BaseMethod, "_SUPPORTED_ENCODERS", {}))


# ------------------------------------------------------------------------------ DINO (1.0.2)
class LightningGradientClipping:
    """Lightning's gradient clipping for DINO, whose ``clip_gradients(clip)`` (called from its
    ``on_after_backward``) has the name of Lightning's ``clip_gradients(optimizer, ...)``."""

    def configure_gradient_clipping(
        self, optimizer, optimizer_idx=None, gradient_clip_val=None, gradient_clip_algorithm=None
    ) -> None:
        from pytorch_lightning import LightningModule

        LightningModule.clip_gradients(
            self, optimizer, gradient_clip_val=gradient_clip_val,
            gradient_clip_algorithm=gradient_clip_algorithm,
        )  # fmt: skip


# ------------------------------------------------------------------------------ gathering (1.0.2)
class GatheredSimCLR:
    """SimCLR / SupCon whose candidates are every rank's views (solo main's SimCLR gathers).

    The loss is this plugin's ``contrastive_loss`` on the sphere, which equals 1.0.2's
    ``simclr_loss_func`` (with or without the label positives) on one process and gathers with
    gradients under DDP, exactly as HCL's loss does. With small crops too it is the same
    mean-over-positives InfoNCE over all crops (1.0.2 uses a variant that leaves the other
    positives out of each positive's denominator).
    """

    def training_step(self, batch: list[Any], batch_idx: int) -> torch.Tensor:
        from solo.methods.simclr import SimCLR

        indexes, _, targets = batch
        out = super(SimCLR, self).training_step(batch, batch_idx)  # solo's base step
        nce_loss = self.gathered_nce_loss(out["feats"], indexes, targets)
        self.log("train_nce_loss", nce_loss, on_epoch=True, sync_dist=True)
        return nce_loss + out["loss"]

    def gathered_nce_loss(
        self, feats: list[torch.Tensor], indexes: torch.Tensor, targets: torch.Tensor
    ) -> torch.Tensor:
        """InfoNCE of this rank's crops against every rank's; feats: per-crop (B, F)."""
        z = torch.cat([self.projector(f) for f in feats])
        ids = (targets if self.supervised else indexes).repeat(len(feats))
        return contrastive_loss(z, ids, self.temperature, space=_SPHERE)


# ------------------------------------------------------------------------------ mean over positives (main)
def mean_over_positives_loss(
    z: torch.Tensor, indexes: torch.Tensor, temperature: float = 0.1
) -> torch.Tensor:
    """main's ``simclr_loss_func(z, indexes, temperature)`` signature with SupCon's
    mean-over-positives InfoNCE (cosine logits, every rank's crops as candidates)."""
    return contrastive_loss(z, indexes, temperature, space=_SPHERE)


class _MeanOverPositives:
    """A main training step whose ``simclr_loss_func`` is ``mean_over_positives_loss``."""

    LOSS_MODULE = ""  # the solo module whose globals the step reads its loss from

    def training_step(self, batch: list[Any], batch_idx: int):
        with replaced(self.LOSS_MODULE, "simclr_loss_func", mean_over_positives_loss):
            return super().training_step(batch, batch_idx)


class MeanOverPositivesSimCLR(_MeanOverPositives):
    LOSS_MODULE = "solo.methods.simclr"


class MeanOverPositivesSupCon(_MeanOverPositives):
    LOSS_MODULE = "solo.methods.supcon"


def gathered_nnclr_loss(nn: torch.Tensor, p: torch.Tensor, temperature: float = 0.1):
    """NNCLR's loss with every rank's predictions as candidates (solo main's form).

    Args:
        nn: (B, D) this rank's nearest neighbours; each ``nn_i`` must pick its own prediction
            among the gathered ones.
        p: (B, D) this rank's predictions.
        temperature: tau of the logits.

    Returns:
        The cross-entropy over the local neighbours.
    """
    nn, p = F.normalize(nn, dim=-1), F.normalize(p, dim=-1)
    logits = nn @ gather_with_grad(p).T / temperature
    labels = torch.arange(nn.shape[0], device=nn.device) + rank() * nn.shape[0]
    return F.cross_entropy(logits, labels)


class GatheredNNCLR:
    """NNCLR's 1.0.2 training step with ``gathered_nnclr_loss``."""

    def training_step(self, batch: list[Any], batch_idx: int):
        with replaced("solo.methods.nnclr", "nnclr_loss_func", gathered_nnclr_loss):
            return super().training_step(batch, batch_idx)


def gathered_vicreg_loss(z1: torch.Tensor, z2: torch.Tensor, **weights: float) -> torch.Tensor:
    """solo's VICReg loss on every rank's projections (solo main and the official code gather
    them: variance and covariance are batch statistics).

    Args:
        z1: this rank's (B, D) projections of the first views.
        z2: this rank's (B, D) projections of the second views.
        weights: solo's ``vicreg_loss_func`` weights (sim_loss_weight, var_loss_weight,
            cov_loss_weight).
    """
    from solo.losses.vicreg import vicreg_loss_func

    return vicreg_loss_func(gather_with_grad(z1), gather_with_grad(z2), **weights)


class GatheredVICReg:
    """VICReg's 1.0.2 training step with ``gathered_vicreg_loss``."""

    def training_step(self, batch: list[Any], batch_idx: int):
        with replaced("solo.methods.vicreg", "vicreg_loss_func", gathered_vicreg_loss):
            return super().training_step(batch, batch_idx)


# ------------------------------------------------------------------------------ W-MSE (1.0.2)
class CholeskyWhitening(nn.Module):
    """W-MSE's whitening as 1.0.2's ``Whitening2d`` computes it, with ``torch.linalg`` (torch 2
    removed the ``torch.cholesky`` that 1.0.2 calls): x (N, D) -> (x - mean) L^-T, where
    L L^T = (1 - eps) cov + eps I (cov with N - 1), so the output covariance is the identity.

    Args:
        output_dim: D, the whitened dimension.
        eps: the shrinkage of the covariance towards the identity.
    """

    def __init__(self, output_dim: int, eps: float = 0.0) -> None:
        super().__init__()
        self.output_dim, self.eps = output_dim, eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type=x.device.type, enabled=False):
            x = x.float()  # a Cholesky factorisation in half precision is not reliable
            centred = x - x.mean(dim=0, keepdim=True)
            cov = centred.T @ centred / (x.shape[0] - 1)
            eye = torch.eye(self.output_dim, dtype=x.dtype, device=x.device)
            factor = torch.linalg.cholesky((1 - self.eps) * cov + self.eps * eye)
            inverse = torch.linalg.solve_triangular(factor, eye, upper=False)
            return centred @ inverse.T


class LinalgWhitening:
    """W-MSE with ``CholeskyWhitening`` in place of 1.0.2's ``Whitening2d``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.whitening = CholeskyWhitening(self.whitening.output_dim, self.whitening.eps)


# ------------------------------------------------------------------------------ DeepCluster V2
class EmptyDeepClusterLossIsZero:
    """DeepCluster V2's loss is 0 (not 0/0) while no sample has a cluster assignment yet."""

    def training_step(self, batch: list[Any], batch_idx: int):
        from solo.losses.deepclusterv2 import deepclusterv2_loss_func

        def loss(outputs: torch.Tensor, assignments: torch.Tensor, temperature: float = 0.1):
            if bool((assignments >= 0).any()):
                return deepclusterv2_loss_func(outputs, assignments, temperature)
            return outputs.sum() * 0.0  # attached to the graph, zero gradient

        with replaced("solo.methods.deepclusterv2", "deepclusterv2_loss_func", loss):
            return super().training_step(batch, batch_idx)


# ------------------------------------------------------------------------------ outputs (1.0.2)
class ProjectionNamedZ:
    """The projector output under ``"z"``, as solo main names it for every method (1.0.2 calls
    it ``"q"`` in MoCo V2+ and ReSSL, ``"v"`` in W-MSE, ``"p"`` in DINO), so that evaluation
    measures every baseline's projector space (delta-hyperbolicity, disk map)."""

    def forward(self, X: torch.Tensor, *args: Any, **kwargs: Any) -> dict[str, Any]:
        out = super().forward(X, *args, **kwargs)
        if "z" not in out:
            name = next((k for k in ("q", "v", "p") if k in out), None)
            if name is not None:
                out["z"] = out[name]
        return out


# ------------------------------------------------------------------------------ checkpoints
class BuffersMadeAtTrainStart:
    """SwAV (its queue) and DeepCluster V2 (its memory banks) register buffers in
    ``on_train_start``, so a freshly built model lacks them when a checkpoint is loaded for
    evaluation or resumption (strict loading fails): they are made with the checkpoint's shapes
    first (on resumption ``on_train_start`` then remakes them, as solo does)."""

    LATE_BUFFERS = ("queue", "local_memory_index", "local_memory_embeddings")

    def load_state_dict(self, state_dict, strict: bool = True, **kwargs: Any):
        present = dict(self.named_buffers())
        for name in self.LATE_BUFFERS:
            if name in state_dict and name not in present:
                self.register_buffer(name, torch.empty_like(state_dict[name]))
        return super().load_state_dict(state_dict, strict=strict, **kwargs)


# ------------------------------------------------------------------------------ the table
# (solo class as "module:Name", APIs, fix): a fix applies to that class and its subclasses
FIXES: tuple[tuple[str, tuple[str, ...], type], ...] = (
    ("solo.methods.base:BaseMomentumMethod", ("v1",), MomentumBackboneIsACopy),
    ("solo.methods.dino:DINO", ("v1",), LightningGradientClipping),
    ("solo.methods.simclr:SimCLR", ("v1",), GatheredSimCLR),
    ("solo.methods.simclr:SimCLR", ("v2",), MeanOverPositivesSimCLR),
    ("solo.methods.supcon:SupCon", ("v2",), MeanOverPositivesSupCon),
    ("solo.methods.nnclr:NNCLR", ("v1",), GatheredNNCLR),
    ("solo.methods.vicreg:VICReg", ("v1",), GatheredVICReg),
    ("solo.methods.wmse:WMSE", ("v1",), LinalgWhitening),
    ("solo.methods.mocov2plus:MoCoV2Plus", ("v1",), ProjectionNamedZ),
    ("solo.methods.ressl:ReSSL", ("v1",), ProjectionNamedZ),
    ("solo.methods.wmse:WMSE", ("v1",), ProjectionNamedZ),
    ("solo.methods.dino:DINO", ("v1",), ProjectionNamedZ),
    ("solo.methods.deepclusterv2:DeepClusterV2", ("v1", "v2"), EmptyDeepClusterLossIsZero),
    ("solo.methods.deepclusterv2:DeepClusterV2", ("v1", "v2"), BuffersMadeAtTrainStart),
    ("solo.methods.swav:SwAV", ("v1", "v2"), BuffersMadeAtTrainStart),
)


def fixes_for(cls: type, api: str) -> tuple[type, ...]:
    """The fix mixins that apply to ``cls`` under method API ``api``, most specific first.

    Args:
        cls: a solo method class.
        api: the method API, 'v1' or 'v2'.
    """
    found = []
    for target, apis, fix in FIXES:
        if api not in apis:
            continue
        module_name, class_name = target.split(":")
        solo_class = getattr(importlib.import_module(module_name), class_name, None)
        if solo_class is not None and issubclass(cls, solo_class):
            found.append(fix)
    return tuple(reversed(found))


_PLUGIN_CLASSES: dict[tuple[type, str], type] = {}


def plugin_class(cls: type, plugin_base: type, api: str) -> type:
    """A solo-learn method class ``cls`` with ``plugin_base`` (the adapter's PluginBase) mixed in
    right above solo's BaseMethod and, in front, the fixes that apply to it under ``api``;
    cached, under its name. This plugin's methods (already on ``plugin_base``) come back as they
    are.

    For ``class SimCLR(BaseMethod)`` this builds ``SimCLR(*fixes, SimCLR, PluginBase)``, whose MRO
    runs the fixes, SimCLR's constructor, then PluginBase's (backbone swap, augmentation), then
    BaseMethod's.

    Args:
        cls: the solo-learn method class.
        plugin_base: the adapter's PluginBase.
        api: the method API, 'v1' or 'v2'.
    """
    if issubclass(cls, plugin_base):
        return cls
    key = (cls, api)
    if key not in _PLUGIN_CLASSES:
        bases = (*fixes_for(cls, api), cls, plugin_base)
        _PLUGIN_CLASSES[key] = type(cls.__name__, bases, {"__module__": cls.__module__})
    return _PLUGIN_CLASSES[key]


__all__ = [
    "CholeskyWhitening",
    "FIXES",
    "fixes_for",
    "plugin_class",
    "gathered_nnclr_loss",
    "gathered_vicreg_loss",
    "replaced",
]
