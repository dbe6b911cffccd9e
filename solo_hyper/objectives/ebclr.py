"""EBCLR (Kim & Ye, "Energy-Based Contrastive Learning of Visual Representations", NeurIPS 2022)
as a framework-free objective.

Per step: two views v, v' of the batch; B chain starts (``SGLDChains``, handed to ``prepare`` by
the training loop: solo-learn's ``MSGLDReplayBuffer`` callback, or ``ReplayChains`` in a plain
loop), T steps of multi-stage proximal SGLD (Eq. 21-22) on the marginal
log q(x) = logsumexp_j(-D(z(x), z'_j)/tau) (Eq. 20) against the detached second-view projections;
one forward of the SGLD samples; then L = L_disc + lambda2 * L_gen (Eq. 11 with the empirical
forms 18-19, ``ebclr_loss``).

Chains live in the official pixel range [-1, 1] whatever normalisation the crops have:
``chain_to_input`` maps them to the encoder's input for every energy evaluation, so alpha, delta
and sigma act on [-1, 1] pixels as in the official code, and the encoder sees SGLD samples
normalised as its views. The sampler takes input gradients only (``torch.autograd.grad``): no
parameter gradient is computed during SGLD, unlike the official code.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from solo_hyper.attacks import eval_mode
from solo_hyper.heads import SpaceProjector
from solo_hyper.losses.ebclr import ebclr_log_density, ebclr_loss
from solo_hyper.objectives.base import (
    Batch,
    Objective,
    SpaceArgs,
    check_bool,
    check_choice,
    check_int,
    is_int,
    is_number,
)
from solo_hyper.sgld import (
    PROPOSALS,
    STORAGES,
    ReplayBuffer,
    SGLDChains,
    default_capacity,
    msgld,
    pixels_to_chain,
)

ACTIVATIONS = {"relu": nn.ReLU, "lrelu": lambda: nn.LeakyReLU(0.2)}
NUMBER_ARGS = (
    "temperature", "lambda1", "lambda2", "curvature", "sgld_step_size", "sgld_grad_clamp",
    "sigma_min", "sigma_max", "noise_decay_K", "rho", "buffer_init_count",
)  # fmt: skip


@dataclass(frozen=True)
class EBCLRArgs(SpaceArgs):
    """EBCLR's arguments (the official code's defaults for CIFAR).

    Attributes:
        proj_hidden_dim: hidden width of the projector (Linear - activation - Linear).
        proj_output_dim: dimension of the projections.
        projector_activation: relu | lrelu (LeakyReLU(0.2), the official projector).
        lambda1: weight of the L2 penalty on the raw projections of v and of the SGLD samples.
        lambda2: weight of the generative term (the paper's lambda, Fig. 3a).
        sgld_steps: T, SGLD steps per training step.
        sgld_step_size: alpha, the SGLD step on [-1, 1] pixels.
        sgld_grad_clamp: delta of proximal SGLD (the gradient's clamp); .inf: no clamp.
        sigma_min: smallest SGLD noise of the multi-stage schedule (Eq. 22).
        sigma_max: largest SGLD noise (sigma_min == sigma_max: plain SGLD).
        noise_decay_K: K of the multi-stage noise schedule (Eq. 22).
        rho: fraction of the chains restarted from q0 each step, floor(B rho) drawn with
            replacement (0.2 for CIFAR, 0.6 for Fashion-MNIST).
        proposal: q0 of the restarts: data (augmented training images) | uniform (the
            ablation of Fig. 4b).
        buffer_size: chains in the replay buffer; None: the official 50,000 for images of up
            to 32 px, fewer for larger images (as many as fit in the official buffer's 614 MB:
            ``sgld.default_capacity``).
        buffer_device: where the buffer lives: cpu | device (the model's device: on a GPU no
            host copy per step; the GPU configs' choice, its memory checked before the run).
        buffer_init_count: kappa, the use count of the initial chains (the official 5: the
            noise starts at sigma_min).
        buffer_seed: seed of the buffer's draws; None: the run's seed (each DDP rank adds its
            own offset).
        sgld_eval_mode: BatchNorm uses its running statistics inside SGLD; False: the chains'
            batch statistics (the running ones are left untouched either way).
    """

    proj_hidden_dim: int = 512
    proj_output_dim: int = 128
    projector_activation: str = "lrelu"
    temperature: float = 0.1
    lambda1: float = 1e-3
    lambda2: float = 0.1
    # sphere: the paper's D = ||a/|a| - b/|b|||^2; poincare | lorentz: hyperbolic EBCLR
    geometry: str = "sphere"
    sgld_steps: int = 10
    sgld_step_size: float = 0.05
    sgld_grad_clamp: float = 1.0
    sigma_min: float = 0.01
    sigma_max: float = 0.05
    noise_decay_K: float = 3.0
    rho: float = 0.2
    proposal: str = "data"
    buffer_size: int | None = None
    buffer_device: str = "cpu"
    buffer_init_count: float = 5.0
    buffer_seed: int | None = None
    sgld_eval_mode: bool = False

    def check(self) -> None:
        for key in ("proj_hidden_dim", "proj_output_dim"):
            check_int(key, getattr(self, key), 1)
        if self.buffer_size is not None:
            check_int("buffer_size", self.buffer_size, 1)
        for key in NUMBER_ARGS:
            if not is_number(getattr(self, key)):
                raise ValueError(f"{key} must be a number, got {getattr(self, key)!r}")
        check_int("sgld_steps", self.sgld_steps, 0)
        check_choice("projector_activation", self.projector_activation, sorted(ACTIVATIONS))
        super().check()
        for key in ("lambda1", "lambda2", "sgld_step_size", "buffer_init_count"):
            if not getattr(self, key) >= 0:
                raise ValueError(f"{key} must be >= 0, got {getattr(self, key)!r}")
        if not self.sgld_grad_clamp > 0:
            raise ValueError(
                f"sgld_grad_clamp must be > 0 (.inf: no clamp), got {self.sgld_grad_clamp!r}"
            )
        if not 0 <= self.sigma_min <= self.sigma_max:
            raise ValueError(
                "sigma_min and sigma_max need 0 <= sigma_min <= sigma_max (sigma_min == sigma_max "
                f"is plain SGLD), got sigma_min={self.sigma_min!r}, sigma_max={self.sigma_max!r}"
            )
        if not self.noise_decay_K > 0:
            raise ValueError(f"noise_decay_K must be > 0, got {self.noise_decay_K!r}")
        if not 0 <= self.rho <= 1:
            raise ValueError(f"rho is a fraction and must be in [0, 1], got {self.rho!r}")
        check_choice("proposal", self.proposal, PROPOSALS)
        check_choice("buffer_device", self.buffer_device, STORAGES)
        if self.buffer_seed is not None and not is_int(self.buffer_seed):
            raise ValueError(f"buffer_seed must be an integer or null, got {self.buffer_seed!r}")
        check_bool("sgld_eval_mode", self.sgld_eval_mode)


def ebclr_projector(in_dim: int, hidden_dim: int, out_dim: int, activation: str) -> nn.Sequential:
    """The reference projector: Linear - activation - Linear, no BatchNorm (the energy of a view
    must not depend on the other views of its batch)."""
    return nn.Sequential(
        nn.Linear(in_dim, hidden_dim), ACTIVATIONS[activation](), nn.Linear(hidden_dim, out_dim)
    )


@contextlib.contextmanager
def frozen_norm_statistics(module: nn.Module) -> Iterator[None]:
    """BatchNorm running statistics untouched by the block: SGLD samples must not shift the
    statistics that evaluation uses (a no-op for the BatchNorm-free reference backbones).

    The block updates throw-away copies; the original tensors are put back afterwards, never
    written in place (the views' autograd graph holds them).
    """
    norms = [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    originals = [dict(m.named_buffers(recurse=False)) for m in norms]
    for m, buffers in zip(norms, originals):
        for name, value in buffers.items():
            setattr(m, name, value.clone())
    try:
        yield
    finally:
        for m, buffers in zip(norms, originals):
            for name, value in buffers.items():
                setattr(m, name, value)


def eval_mode_if(module: nn.Module, enabled: bool) -> contextlib.AbstractContextManager:
    """``attacks.eval_mode(module)`` when enabled (every submodule's own flag back afterwards),
    else nothing: the modes are left exactly as they are."""
    return eval_mode(module) if enabled else contextlib.nullcontext()


class EBCLR(Objective):
    """Energy-based contrastive learning; negatives from MSGLD chains (``step_inputs``: the
    training loop hands ``prepare`` the step's ``chains``)."""

    Args = EBCLRArgs
    args: EBCLRArgs
    required_crops = 2
    step_inputs = ("chains",)

    def head(self, features_dim: int) -> SpaceProjector:
        # normalise, then onto the space: the loss and evaluation see the same points
        a = self.args
        mlp = ebclr_projector(features_dim, a.proj_hidden_dim, a.proj_output_dim, a.projector_activation)
        return SpaceProjector(mlp, a.space())

    def log_density(self, net: nn.Module, x: Tensor, z_ref: Tensor) -> Tensor:
        """log q(x) of Eq. 19-20 against reference projections z_ref (B', D): (N,)."""
        a = self.args
        z = net.projector(net.encode(x))
        return ebclr_log_density(z, z_ref, a.temperature, net.projector.space, chunk_size=a.chunk_size)

    def chain_to_input(self, chain: Tensor) -> Tensor:
        """SGLD chains in [-1, 1] pixels -> the encoder's input (normalised as the crops:
        (p - mean) / std with p = (chain + 1) / 2; the identity for mean = std = 0.5, exactly)."""
        mean, std = self.crop_stats.like(chain)
        return chain * (0.5 / std) + (0.5 - mean) / std

    def sample_negatives(
        self, net: nn.Module, x: Tensor, counts: Tensor, z_ref: Tensor,
        generator: torch.Generator | None = None,
    ) -> Tensor:  # fmt: skip
        """T MSGLD steps from chains x (in [-1, 1] pixels, as the result) toward high log q of
        their encoder inputs (z_ref detached); no parameter gradients.

        Train mode by default, as the official code: the sampled density is then the one the loss
        evaluates (the views are forwarded in train mode too); with BatchNorm backbones that makes a
        chain's energy depend on the other chains of the batch, which sgld_eval_mode=True avoids
        (running statistics instead). Either way BatchNorm statistics are left untouched.
        """
        a = self.args
        z_ref = z_ref.detach()
        with frozen_norm_statistics(net), eval_mode_if(net, a.sgld_eval_mode):
            return msgld(
                lambda v: self.log_density(net, self.chain_to_input(v), z_ref), x, counts,
                a.sgld_steps, a.sgld_step_size,
                float(a.sgld_grad_clamp), a.sigma_min, a.sigma_max, a.noise_decay_K, generator,
            )  # fmt: skip

    def prepare(
        self, net: nn.Module, batch: Batch, chains: SGLDChains | None = None, **inputs: Any
    ) -> tuple[Batch, dict[str, Any]]:
        """The step's chain starts, as the training loop drew them (``step_inputs``)."""
        if chains is None:
            raise ValueError(
                "EBCLR needs the step's chain starts: prepare(net, batch, chains=...) with "
                "chains from a replay buffer (objectives.ebclr.ReplayChains, or solo-learn's "
                "MSGLDReplayBuffer callback)"
            )
        return batch, {"chains": chains}

    def loss(
        self, net: nn.Module, batch: Batch, feats: list[Tensor], z: list[Tensor],
        chains: SGLDChains | None = None, **extras: Any,
    ) -> tuple[Tensor, dict[str, Tensor]]:  # fmt: skip
        if chains is None:
            raise ValueError("EBCLR's loss needs the chains that prepare() passes on")
        a = self.args
        z1, z2 = z
        x_sgld = self.sample_negatives(net, chains.x, chains.counts, z2, chains.generator)
        chains.write_back(x_sgld)
        with frozen_norm_statistics(net):
            feats_sgld = net.encode(self.chain_to_input(x_sgld))
            z_sgld = net.projector(feats_sgld)
        # the official L2 term is on the raw (pre-normalisation) projections
        raw = [net.projector.mlp(feats[0]), net.projector.mlp(feats_sgld)]
        loss, parts = ebclr_loss(
            z1, z2, z_sgld, a.temperature, a.lambda1, a.lambda2, net.projector.space,
            regularised=raw, chunk_size=a.chunk_size,
        )  # fmt: skip
        metrics = {f"ebclr_{k}": v for k, v in parts.items()}
        metrics["ebclr_loss"] = loss.detach()
        metrics["sgld_restarted"] = (chains.counts == 0).float().mean()
        return loss, metrics


class ReplayChains:
    """A replay buffer of chains for a plain PyTorch loop (solo-learn runs use the
    ``MSGLDReplayBuffer`` callback): full from the start, floor(n rho) positions of each draw
    restarted from ``fresh`` (the official sampler).

    Args:
        args: EBCLR's arguments (``rho``, ``buffer_size``, ``buffer_init_count``).
        shape: (C, H, W) of a chain, a crop's.
        device: where the buffer lives.
        seed: seed of the buffer's draws and of the default proposal.
        fresh: n -> n new chains in [-1, 1] (None: U[-1, 1] noise, the uniform proposal).
    """

    def __init__(
        self, args: EBCLRArgs, shape: tuple[int, ...], device: str | torch.device = "cpu",
        seed: int = 0, fresh: Callable[[int], Tensor] | None = None,
    ) -> None:  # fmt: skip
        self.rho, self.device = args.rho, torch.device(device)
        capacity = args.buffer_size or default_capacity(shape)
        self.buffer = ReplayBuffer(capacity, shape, device, seed, args.buffer_init_count)
        self.generator = torch.Generator(device=self.device).manual_seed(seed + 1)
        self.fresh = fresh or (
            lambda n: pixels_to_chain(
                torch.rand((n, *shape), generator=self.generator, device=self.device)
            )
        )
        self.buffer.initialize(self.fresh)

    def draw(self, crops: Tensor) -> SGLDChains:
        """len(crops) chain starts (the crops give only the number)."""
        x, slots, counts = self.buffer.sample(int(crops.shape[0]), self.rho, self.fresh)
        return SGLDChains(x, counts, self.generator, lambda out: self.buffer.update(slots, out))
