"""EBCLR (Kim & Ye, "Energy-Based Contrastive Learning of Visual Representations", NeurIPS 2022).

Per step: two views v, v' of the batch (the adapter's kornia augmentation, or solo's CPU pipeline);
B chain starts from the replay buffer (``MSGLDReplayBuffer``, Sec. 3.3; drawn by ``prepare_step``;
full of augmented training images before the first step), of which a fraction rho restart from
q0 (fresh augmented training images, independent of the batch); T steps of
multi-stage proximal SGLD (Eq. 21-22) on the marginal log q(x) = logsumexp_j(-D(z(x), z'_j)/tau)
(Eq. 20) against the detached second-view projections; one forward of the SGLD samples; then
L = L_disc + lambda2 * L_gen (Eq. 11 with the empirical forms 18-19, ``ebclr_loss``).

Chains live in the official pixel range [-1, 1] whatever normalisation the crops have (solo's
per-dataset statistics, or this plugin's mean/std): ``chain_to_input`` maps them to the encoder's
input for every energy evaluation, so alpha, delta and sigma act on [-1, 1] pixels as in the
official code, and the encoder sees SGLD samples normalised as its views.

The sampler takes input gradients only (``torch.autograd.grad``): no parameter gradient is
computed during SGLD, unlike the official code, which also back-propagates into every weight.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor, nn

from solo_hyper.callbacks import MSGLDReplayBuffer
from solo_hyper.heads import SpaceProjector
from solo_hyper.losses.ebclr import ebclr_log_density, ebclr_loss
from solo_hyper.losses.infonce import free_memory_bytes
from solo_hyper.methods.space import (
    EmbeddingSpaceMixin,
    check_space_args,
    space_args,
    space_from_args,
)
from solo_hyper.sgld import PROPOSALS, STORAGES, ReplayBuffer, SGLDChains, msgld
from solo_hyper.solo import adapter

NUMBER_ARGS = (
    "temperature", "lambda1", "lambda2", "curvature", "sgld_step_size", "sgld_grad_clamp",
    "sigma_min", "sigma_max", "noise_decay_K", "rho", "buffer_init_count",
)  # fmt: skip
ACTIVATIONS = {"relu": nn.ReLU, "lrelu": lambda: nn.LeakyReLU(0.2)}
MEMORY_SHARE = 0.5  # the buffer may take half the free memory: resuming holds a second copy


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


@contextlib.contextmanager
def eval_mode(module: nn.Module, enabled: bool) -> Iterator[None]:
    """module.eval() inside the block when enabled, the previous mode afterwards."""
    was_training = module.training
    if enabled:
        module.eval()
    try:
        yield
    finally:
        module.train(was_training)


def processes_per_host(devices: Any) -> int:
    """Training processes on this host, each with its own buffer (Trainer's ``devices``)."""
    if isinstance(devices, (list, tuple)):
        return max(1, len(devices))
    if isinstance(devices, int) and devices > 0:
        return devices
    if str(devices).isdigit() and int(devices) > 0:
        return int(devices)
    # "auto" or -1: every GPU of the host, else one process
    return max(1, torch.cuda.device_count())


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


class EBCLR(EmbeddingSpaceMixin, adapter.MethodBase):
    """Energy-based contrastive learning; negatives from MSGLD chains kept by a replay buffer."""

    required_crops = 2

    ARGS: dict[str, Any] = {
        "proj_hidden_dim": 512,
        "proj_output_dim": 128,
        "projector_activation": "lrelu",  # relu | lrelu (LeakyReLU(0.2), the official projector)
        "temperature": 0.1,
        "lambda1": 1e-3,  # L2 on the raw projections of v and of the SGLD samples
        "lambda2": 0.1,  # weight of the generative term (paper's lambda, Fig. 3a)
        # sphere: the paper's D = ||a/|a| - b/|b|||^2; poincare | lorentz: hyperbolic EBCLR
        **space_args("sphere"),
        "sgld_steps": 10,  # T
        "sgld_step_size": 0.05,  # alpha
        "sgld_grad_clamp": 1.0,  # delta (proximal SGLD); .inf disables the clamp
        "sigma_min": 0.01,
        "sigma_max": 0.05,
        "noise_decay_K": 3.0,  # K of the multi-stage noise schedule (Eq. 22)
        "rho": 0.2,  # re-initialisation probability (0.2 CIFAR, 0.6 Fashion-MNIST)
        "proposal": "data",  # q0: data (augmented images) | uniform (ablation, Fig. 4b)
        "buffer_size": 50000,
        "buffer_device": "cpu",  # cpu | device (the model's device)
        "buffer_init_count": 5.0,  # kappa of the initial buffer (official 5: sigma_min at once)
        "buffer_seed": None,  # None: the run's seed; each DDP rank adds its own offset
        "sgld_eval_mode": False,  # True: BatchNorm uses running statistics inside SGLD
    }

    @staticmethod
    def check_args(args: SimpleNamespace) -> None:
        def positive_int(key: str, minimum: int) -> None:
            value = getattr(args, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(
                    f"method_kwargs.{key} must be an integer >= {minimum}, got {value!r}"
                )

        for key in ("proj_hidden_dim", "proj_output_dim", "buffer_size"):
            positive_int(key, 1)
        for key in NUMBER_ARGS:
            value = getattr(args, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"method_kwargs.{key} must be a number, got {value!r}")
        positive_int("sgld_steps", 0)
        if args.projector_activation not in ACTIVATIONS:
            raise ValueError(
                f"method_kwargs.projector_activation must be one of {sorted(ACTIVATIONS)}, "
                f"got {args.projector_activation!r}"
            )
        if not args.temperature > 0:
            raise ValueError(f"method_kwargs.temperature must be > 0, got {args.temperature!r}")
        check_space_args(args)
        for key in ("lambda1", "lambda2", "sgld_step_size", "buffer_init_count"):
            value = getattr(args, key)
            if not value >= 0:
                raise ValueError(f"method_kwargs.{key} must be >= 0, got {value!r}")
        if not args.sgld_grad_clamp > 0:
            raise ValueError(
                f"method_kwargs.sgld_grad_clamp must be > 0 (.inf: no clamp), got {args.sgld_grad_clamp!r}"
            )
        if not 0 <= args.sigma_min <= args.sigma_max:
            raise ValueError(
                "method_kwargs needs 0 <= sigma_min <= sigma_max (sigma_min == sigma_max is plain "
                f"SGLD), got sigma_min={args.sigma_min!r}, sigma_max={args.sigma_max!r}"
            )
        if not args.noise_decay_K > 0:
            raise ValueError(f"method_kwargs.noise_decay_K must be > 0, got {args.noise_decay_K!r}")
        if not 0 <= args.rho <= 1:
            raise ValueError(
                f"method_kwargs.rho is a probability and must be in [0, 1], got {args.rho!r}"
            )
        if args.proposal not in PROPOSALS:
            raise ValueError(
                f"method_kwargs.proposal must be one of {PROPOSALS}, got {args.proposal!r}"
            )
        if args.buffer_device not in STORAGES:
            raise ValueError(
                f"method_kwargs.buffer_device must be one of {STORAGES}, got {args.buffer_device!r}"
            )
        if args.buffer_seed is not None and (
            isinstance(args.buffer_seed, bool) or not isinstance(args.buffer_seed, int)
        ):
            raise ValueError(
                f"method_kwargs.buffer_seed must be an integer or null, got {args.buffer_seed!r}"
            )
        if not isinstance(args.sgld_eval_mode, bool):
            raise ValueError(
                f"method_kwargs.sgld_eval_mode must be true or false, got {args.sgld_eval_mode!r}"
            )

    @staticmethod
    def check_config(cfg: dict) -> None:
        """Checks that need more than method_kwargs: the buffer's memory (full from the first step;
        the crop size is the first crop entry's)."""
        kw = cfg["method_kwargs"]
        augmentations = cfg.get("augmentations") or []
        if not augmentations:
            return
        crop = int(augmentations[0].get("crop_size", 32))
        channels = len(cfg["data"].get("mean") or (0, 0, 0))
        need = ReplayBuffer.bytes_needed(kw["buffer_size"], (channels, crop, crop))
        on_gpu = (
            kw["buffer_device"] == "device"
            and cfg.get("accelerator") in ("gpu", "cuda", "auto")
            and torch.cuda.is_available()
        )
        copies = 1 if on_gpu else processes_per_host(cfg.get("devices", 1))
        free = free_memory_bytes(torch.device("cuda" if on_gpu else "cpu"))
        if free is None:
            return
        if copies * need > MEMORY_SHARE * free:
            where = "GPU" if on_gpu else "host"
            fits = int(MEMORY_SHARE * free / copies / (need / kw["buffer_size"]))
            procs = f" x {copies} processes" if copies > 1 else ""
            hint = (
                " or keep it on the GPU with method_kwargs.buffer_device=device"
                if not on_gpu and torch.cuda.is_available()
                else ""
            )
            raise ValueError(
                f"method_kwargs.buffer_size={kw['buffer_size']} needs {_gib(need)}{procs} for "
                f"{channels}x{crop}x{crop} float32 chains, but only {_gib(free)} of {where} memory "
                f"is available and the buffer may take at most half of it (resuming from a "
                f"checkpoint holds a second copy): lower method_kwargs.buffer_size to at most "
                f"about {fits}{hint}"
            )

    def build(self) -> None:
        a = self.args
        # normalise, then onto the space: the loss and evaluation see the same points
        self.projector = SpaceProjector(
            ebclr_projector(
                self.features_dim, a.proj_hidden_dim, a.proj_output_dim, a.projector_activation
            ),
            space_from_args(a),
        )

    def project(self, feats: Tensor) -> Tensor:
        return self.projector(feats)

    def extra_callbacks(self) -> list:
        """The replay buffer that feeds this method its chain starts (attached under every
        launcher by the adapter's ``configure_callbacks``)."""
        a = self.args
        return [
            MSGLDReplayBuffer(
                a.buffer_size,
                a.rho,
                a.proposal,
                a.buffer_device,
                a.buffer_seed,
                a.buffer_init_count,
            )
        ]

    def log_density(self, x: Tensor, z_ref: Tensor) -> Tensor:
        """log q(x) of Eq. 19-20 against reference projections z_ref (B', D): (N,)."""
        a = self.args
        return ebclr_log_density(
            self(x)["z"], z_ref, a.temperature, self.embedding_space, chunk_size=a.chunk_size
        )

    def _chain_affine(self, like: Tensor) -> tuple[Tensor, Tensor]:
        """(scale, shift) with input = chain * scale + shift: [-1, 1] pixels -> the crops'
        normalisation ((p - mean) / std with p = (chain + 1) / 2; the identity for mean = std = 0.5,
        exactly)."""
        mean, std = self._stats_like(like)
        return 0.5 / std, (0.5 - mean) / std

    def chain_to_input(self, chain: Tensor) -> Tensor:
        """SGLD chains in [-1, 1] pixels -> the encoder's input (normalised as the crops)."""
        scale, shift = self._chain_affine(chain)
        return chain * scale + shift

    def sample_negatives(
        self, x: Tensor, counts: Tensor, z_ref: Tensor, generator: torch.Generator | None = None
    ) -> Tensor:
        """T MSGLD steps from chains x (in [-1, 1] pixels, as the result) toward high log q of
        their encoder inputs (z_ref detached); no parameter gradients.

        Train mode by default, as the official code: the sampled density is then the one the loss
        evaluates (the views are forwarded in train mode too); with BatchNorm backbones that makes a
        chain's energy depend on the other chains of the batch, which sgld_eval_mode=True avoids
        (running statistics instead). Either way BatchNorm statistics are left untouched.
        """
        a = self.args
        z_ref = z_ref.detach()
        with frozen_norm_statistics(self), eval_mode(self, a.sgld_eval_mode):
            return msgld(
                lambda v: self.log_density(self.chain_to_input(v), z_ref), x, counts,
                a.sgld_steps, a.sgld_step_size,
                float(a.sgld_grad_clamp), a.sigma_min, a.sigma_max, a.noise_decay_K, generator,
            )  # fmt: skip

    def replay_buffer(self) -> MSGLDReplayBuffer:
        """The trainer's MSGLDReplayBuffer (``configure_callbacks`` attaches one)."""
        trainer = self._trainer
        found = [c for c in getattr(trainer, "callbacks", []) if isinstance(c, MSGLDReplayBuffer)]
        if not found:
            raise RuntimeError(
                "ebclr takes its SGLD chain starts from the MSGLDReplayBuffer callback, which "
                "configure_callbacks attaches when a Trainer fits the model: train with "
                "Trainer.fit (or pass Trainer(callbacks=model.extra_callbacks()))"
            )
        return found[0]

    def prepare_step(self, batch: list[Any]) -> tuple[list[Any], dict[str, Any]]:
        """The step's chain starts, drawn from the replay buffer (the crops give their number)."""
        crops = batch[1]
        return batch, {"chains": self.replay_buffer().draw(crops[0].detach())}

    def method_loss(self, batch, out: dict, z: list[Tensor], chains: SGLDChains):
        a = self.args
        z1, z2 = z
        x_sgld = self.sample_negatives(chains.x, chains.counts, z2, chains.generator)
        chains.write_back(x_sgld)
        with frozen_norm_statistics(self):
            out_sgld = self(self.chain_to_input(x_sgld))
        # the official L2 term is on the raw (pre-normalisation) projections
        raw = [self.projector.mlp(out["feats"][0]), self.projector.mlp(out_sgld["feats"])]
        loss, parts = ebclr_loss(
            z1, z2, out_sgld["z"], a.temperature, a.lambda1, a.lambda2, self.embedding_space,
            regularised=raw, chunk_size=a.chunk_size,
        )  # fmt: skip
        metrics = {f"ebclr_{k}": v for k, v in parts.items()}
        metrics["ebclr_loss"] = loss.detach()
        metrics["sgld_restarted"] = (chains.counts == 0).float().mean()
        return loss, metrics


__all__ = ["EBCLR", "ebclr_projector", "frozen_norm_statistics"]
