"""Lightning callbacks.

``MSGLDReplayBuffer`` keeps EBCLR's replay buffer of SGLD chains (Kim & Ye, NeurIPS 2022, Sec. 3.3):
it fills the buffer from the proposal q0 (augmented training images, or uniform noise for the
ablation of Fig. 4b), hands each training step its chain starts and counts (``pl_module.sgld_chains``),
and writes the step's MSGLD outputs back. Its whole state (samples, counts and every random stream
it draws from) travels in the Lightning checkpoint, so that a resumed run continues with exactly the
buffer it stopped with. The Lightning module comes from the adapter (``adapter.LIGHTNING``), so the
callback works with whichever Lightning the installed solo-learn runs on.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import Dataset, default_collate

from solo_hyper.augment import to_float_rgb
from solo_hyper.sgld import ReplayBuffer
from solo_hyper.solo import adapter

pl = adapter.LIGHTNING

PROPOSALS = ("data", "uniform")
STORAGES = ("cpu", "device")
_RANK_STRIDE = 1_000_003  # seed offset between DDP ranks (a prime, so streams never coincide)


@dataclass
class SGLDChains:
    """One step's chain starts, handed from the callback to the method and back.

    x: (B, C, H, W) normalised images on the model's device; counts: (B,) pre-increment use counts
    kappa (noise std sigma(kappa)); generator: the SGLD noise stream; result: set by the method to
    the detached MSGLD outputs, which the callback writes back into the buffer.
    """

    x: Tensor
    counts: Tensor
    generator: torch.Generator
    result: Tensor | None = None


class PrivateRNG:
    """A random stream of its own for code that draws from torch's global generators (kornia).

    ``with rng.active():`` swaps the stream's states in (CPU, and the CUDA device if any) and
    swaps the caller's back afterwards, so fresh proposal samples neither consume nor depend on the
    training run's global randomness, and the stream's state can be checkpointed.
    """

    def __init__(self, seed: int, device: torch.device) -> None:
        self.device = torch.device(device)
        self.cpu_state = torch.Generator().manual_seed(seed).get_state()
        self.cuda_state = None
        if self.device.type == "cuda":
            self.cuda_state = torch.Generator(device=self.device).manual_seed(seed).get_state()

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        cuda = self.device.type == "cuda"
        devices = [self.device.index or 0] if cuda else []
        with torch.random.fork_rng(devices=devices):
            torch.set_rng_state(self.cpu_state)
            if cuda:
                torch.cuda.set_rng_state(self.cuda_state, self.device)
            yield
            self.cpu_state = torch.get_rng_state()
            if cuda:
                self.cuda_state = torch.cuda.get_rng_state(self.device)

    def state_dict(self) -> dict[str, Any]:
        return {"cpu": self.cpu_state, "cuda": self.cuda_state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.cpu_state = state["cpu"]
        if self.device.type == "cuda" and state.get("cuda") is not None:
            self.cuda_state = state["cuda"]


def dataset_images(dataset: Dataset, indices: list[int]) -> Tensor:
    """Un-augmented images of ``dataset`` at ``indices`` (solo's (index, image, target) layout)."""
    getitems = getattr(dataset, "__getitems__", None)
    items = getitems(indices) if getitems is not None else default_collate(
        [dataset[i] for i in indices]
    )  # fmt: skip
    images = items[1]
    if not isinstance(images, Tensor) or images.dim() != 4:
        raise TypeError(
            "the replay buffer's data proposal needs a training set of un-augmented image tensors "
            "(data.augment_on_device=true), got items of type "
            f"{type(images).__name__}"
        )
    return images


class Proposal:
    """q0 of the paper's Sec. 3.3: fresh chain starts, as the network sees them (normalised).

    kind="data": random training images, each augmented by the first crop entry of the method's
    own kornia pipeline (one crop per image, per-image parameters); kind="uniform": uniform noise
    in [0, 1] pixel space, normalised (the official code's U[-1, 1] when mean = std = 0.5).
    """

    def __init__(
        self,
        kind: str,
        augmentation: Any,
        shape: tuple[int, ...],
        device: torch.device,
        seed: int,
        dataset: Dataset | None = None,
        normalize: bool = True,
    ) -> None:
        if kind not in PROPOSALS:
            raise ValueError(f"proposal must be one of {PROPOSALS}, got {kind!r}")
        if kind == "data" and (dataset is None or len(dataset) == 0):
            raise ValueError("the data proposal needs a non-empty training set")
        self.kind, self.augmentation, self.shape = kind, augmentation, tuple(shape)
        self.device, self.dataset, self.normalize = torch.device(device), dataset, normalize
        self.index_generator = torch.Generator().manual_seed(seed)
        self.rng = PrivateRNG(seed + 1, self.device)

    @torch.no_grad()
    def __call__(self, n: int) -> Tensor:
        if self.kind == "data":
            idx = torch.randint(len(self.dataset), (n,), generator=self.index_generator)
            images = dataset_images(self.dataset, idx.tolist()).to(self.device)
            with self.rng.active():
                x = self.augmentation.pipelines[0](to_float_rgb(images))
        else:
            with self.rng.active():
                x = torch.rand((n, *self.shape), device=self.device)
        return self.augmentation.normalize(x) if self.normalize else x

    def state_dict(self) -> dict[str, Any]:
        return {"index_generator": self.index_generator.get_state(), "rng": self.rng.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.index_generator.set_state(state["index_generator"])
        self.rng.load_state_dict(state["rng"])


def _train_dataset(trainer: Any) -> Dataset:
    """The training set behind the trainer's (possibly combined) training loader."""
    loader = trainer.train_dataloader
    loader = getattr(loader, "loaders", loader)  # Lightning 1.x wraps it in a CombinedLoader
    if isinstance(loader, dict):
        loader = next(iter(loader.values()))
    if isinstance(loader, (list, tuple)):
        loader = loader[0]
    return loader.dataset


def buffer_shape(augmentation: Any) -> tuple[int, int, int]:
    """(C, H, W) of a training crop: the normalisation's channels and the first entry's size."""
    size = int(augmentation.entries[0]["crop_size"])
    return (int(augmentation.mean.numel()), size, size)


class MSGLDReplayBuffer(pl.Callback):
    """EBCLR's replay buffer as a Lightning callback (one buffer per DDP rank).

    capacity: number of stored chains (50,000 in the official code); rho: probability that a drawn
    chain restarts from q0 (0.2 CIFAR, 0.6 Fashion-MNIST); proposal: "data" | "uniform";
    storage: "cpu" (as the official code) or "device" (the model's device: no host-device copies,
    at the price of device memory); seed: None takes torch.initial_seed() at the start of training
    (the run's seed after seed_everything); each rank adds its own offset. init_count: the count
    of the initial buffer (5.0 = official code, see ReplayBuffer).
    """

    def __init__(
        self,
        capacity: int,
        rho: float,
        proposal: str = "data",
        storage: str = "cpu",
        seed: int | None = None,
        init_count: float = 5.0,
        chunk_size: int = 256,
    ) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be a positive integer, got {capacity!r}")
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"rho must be in [0, 1], got {rho!r}")
        if proposal not in PROPOSALS:
            raise ValueError(f"proposal must be one of {PROPOSALS}, got {proposal!r}")
        if storage not in STORAGES:
            raise ValueError(f"storage must be one of {STORAGES}, got {storage!r}")
        self.capacity, self.rho, self.proposal_kind = capacity, float(rho), proposal
        self.storage, self.seed, self.init_count = storage, seed, float(init_count)
        self.chunk_size = int(chunk_size)
        self.buffer: ReplayBuffer | None = None
        self.proposal: Proposal | None = None
        self.noise_generator: torch.Generator | None = None
        self.rank = 0
        self._pending: dict[str, Any] | None = None
        self._slots: Tensor | None = None

    # ------------------------------------------------------------------ set-up
    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        """Builds the buffer on the module's device: restored from a checkpoint, or filled from q0."""
        aug = getattr(pl_module, "device_augmentation", None)
        if aug is None:
            raise RuntimeError(
                "MSGLDReplayBuffer augments its chain starts with the method's kornia pipeline: "
                "set data.augment_on_device=true"
            )
        device = pl_module.device
        self.rank = int(trainer.global_rank)
        base = int(self.seed if self.seed is not None else torch.initial_seed()) % 2**62
        seed = base + _RANK_STRIDE * self.rank
        dataset = _train_dataset(trainer) if self.proposal_kind == "data" else None
        shape = buffer_shape(aug)
        normalize = not getattr(pl_module, "pixel_space_crops", False)
        if self.buffer is None or self.buffer.shape != shape:
            storage = torch.device("cpu") if self.storage == "cpu" else device
            self.buffer = ReplayBuffer(self.capacity, shape, storage, seed, self.init_count)
            self.proposal = Proposal(
                self.proposal_kind, aug, shape, device, seed + 1, dataset, normalize
            )
            self.noise_generator = torch.Generator(device=device).manual_seed(seed + 3)
        else:  # a second fit with the same callback keeps its chains
            self.proposal.dataset = dataset if dataset is not None else self.proposal.dataset
        if self._pending is not None:
            self._restore(self._pending, seed, int(trainer.global_step))
            self._pending = None
        if not self.buffer.initialized:
            self.buffer.initialize(self.proposal, chunk_size=self.chunk_size)

    def _restore(self, state: dict[str, Any], seed: int, step: int) -> None:
        saved = state["buffer"]
        if int(saved["capacity"]) != self.capacity or tuple(saved["shape"]) != self.buffer.shape:
            raise ValueError(
                f"the checkpoint's replay buffer holds {saved['capacity']} chains of shape "
                f"{tuple(saved['shape'])}, this run asks for {self.capacity} of shape "
                f"{self.buffer.shape}: resume with method_kwargs.buffer_size={saved['capacity']} "
                "and the same crop size"
            )
        self.buffer.load_state_dict(saved)
        if int(state.get("rank", 0)) != self.rank:
            # Lightning saves rank 0's state only: other ranks start from its chains, with their
            # own random streams so that the ranks do not draw in lockstep.
            reseed = seed + 7 * (step + 1)
            self.buffer.generator.manual_seed(reseed)
            self.proposal.index_generator.manual_seed(reseed + 1)
            self.proposal.rng = PrivateRNG(reseed + 2, self.proposal.device)
            self.noise_generator.manual_seed(reseed + 3)
            return
        self.proposal.load_state_dict(state["proposal"])
        noise = state["noise_generator"]
        if noise["device_type"] == self.noise_generator.device.type:
            self.noise_generator.set_state(noise["state"])
        else:
            warnings.warn(
                "replay buffer: the SGLD noise stream was saved on another device type; it is "
                "re-seeded (the chains and counts are restored exactly)",
                stacklevel=2,
            )

    # ------------------------------------------------------------------ per step
    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, *args: Any) -> None:  # fmt: skip
        """Draws B chain starts (a fraction rho restarted from q0) for this step's negatives."""
        n = int(batch[0].shape[0])
        x, slots, counts = self.buffer.sample(n, self.rho, self.proposal)
        self._slots = slots
        device = pl_module.device
        pl_module.sgld_chains = SGLDChains(
            x.to(device, non_blocking=True), counts.to(device), self.noise_generator
        )

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, *args: Any) -> None:  # fmt: skip
        """Writes the step's MSGLD outputs back into the slots they started from."""
        chains = getattr(pl_module, "sgld_chains", None)
        if chains is not None and chains.result is not None and self._slots is not None:
            self.buffer.update(self._slots, chains.result)
        pl_module.sgld_chains = None
        self._slots = None

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self) -> dict[str, Any]:
        if self.buffer is None:
            return dict(self._pending or {})
        return {
            "buffer": self.buffer.state_dict(),
            "proposal": self.proposal.state_dict(),
            "noise_generator": {
                "device_type": self.noise_generator.device.type,
                "state": self.noise_generator.get_state(),
            },
            "rank": self.rank,
            "rho": self.rho,
            "proposal_kind": self.proposal_kind,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Kept until training starts, when the module's device and the rank are known."""
        self._pending = dict(state_dict) if state_dict else None


__all__ = [
    "MSGLDReplayBuffer",
    "PROPOSALS",
    "PrivateRNG",
    "Proposal",
    "SGLDChains",
    "STORAGES",
    "buffer_shape",
    "dataset_images",
]
