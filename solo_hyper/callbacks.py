"""Lightning callbacks.

``MSGLDReplayBuffer`` is the home of EBCLR's replay buffer of SGLD chains (Kim & Ye, NeurIPS 2022,
Sec. 3.3): it builds the buffer when training starts, full before the first step (augmented
training images from the proposal q0, whichever pipeline makes the crops), and hands a method a
step's chain starts through one call, ``draw(crops) -> SGLDChains``, whose ``write_back`` stores the
step's MSGLD outputs. Its whole state (samples, counts and every random stream it draws from) travels in
the Lightning checkpoint, every DDP rank's own (gathered to rank 0, which writes the file; no other
rank holds another's), so that a resumed run continues with exactly the buffers it stopped with. The Lightning module comes from the adapter (``adapter.LIGHTNING``), so
the callback works with whichever Lightning the installed solo-learn runs on.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import Dataset

from solo_hyper.augment import to_float_rgb
from solo_hyper.distributed import gather_to_rank_zero, world_size
from solo_hyper.losses.infonce import free_memory_bytes
from solo_hyper.sgld import (
    PROPOSALS,
    STORAGES,
    PrivateRNG,
    Proposal,
    ReplayBuffer,
    SGLDChains,
    dataset_items,
    default_capacity,
)
from solo_hyper.solo import adapter

pl = adapter.LIGHTNING

_RANK_STRIDE = 1_000_003  # seed offset between DDP ranks (a prime, so streams never coincide)


def _train_dataset(trainer: Any) -> Dataset:
    """The training set behind the trainer's (possibly combined) training loader."""
    loader = trainer.train_dataloader
    loader = getattr(loader, "loaders", loader)  # Lightning 1.x wraps it in a CombinedLoader
    if isinstance(loader, dict):
        loader = next(iter(loader.values()))
    if isinstance(loader, (list, tuple)):
        loader = loader[0]
    dataset = getattr(loader, "dataset", None)
    if dataset is None or not hasattr(dataset, "__len__"):
        raise RuntimeError(
            "ebclr fills its replay buffer with augmented training images before the first "
            "step: train with a DataLoader over a map-style dataset (got "
            f"{type(loader).__name__}), or use method_kwargs.proposal=uniform with the "
            "on-device augmentation"
        )
    return dataset


def _first_crop(crops: Any) -> Tensor:
    """The first crop of a CPU pipeline's batched item (a list of (N, C, H, W) crops)."""
    if not isinstance(crops, (list, tuple)) or not isinstance(crops[0], Tensor):
        raise TypeError(
            "crops from a CPU pipeline: the replay buffer reads the training set's augmented "
            "crops (items (index, [crop, ...], target), as solo-learn's datasets), got items of "
            f"type {type(crops).__name__}"
        )
    return crops[0]


def pipeline_crop_shape(dataset: Dataset, seed: int, device: Any) -> tuple[int, ...]:
    """(C, H, W) of the crops a CPU pipeline's training set makes (one item, read with a random
    stream of its own so that the run's randomness is untouched)."""
    with PrivateRNG(seed + 5, torch.device(device)).active():
        return tuple(_first_crop(dataset_items(dataset, torch.zeros(1, dtype=torch.long))).shape[1:])


def buffer_shape(augmentation: Any) -> tuple[int, int, int]:
    """(C, H, W) of a training crop: the normalisation's channels and the first entry's size.

    Args:
        augmentation: the method's ``DeviceAugmentation`` (its ``entries`` and ``mean``).
    """
    size = int(augmentation.entries[0]["crop_size"])
    return (int(augmentation.mean.numel()), size, size)


MEMORY_SHARE = 0.5  # the buffer may take half the free memory: resuming holds a second copy


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def check_buffer_fits(
    buffer_size: int | None, shape: tuple[int, ...], storage: torch.device, copies: int = 1
) -> None:
    """ValueError naming ``method_kwargs.buffer_size`` (with the size that fits) when ``copies``
    buffers of ``shape`` chains would take more than half the free memory of ``storage``; run
    before anything is allocated (by the config check and again where the buffer is built).

    Args:
        buffer_size: the configured chains (None: ``default_capacity`` of the shape).
        shape: (C, H, W) of a chain.
        storage: the device the buffer lives on.
        copies: buffers held at once on that device (one per training process on the CPU).

    Raises:
        ValueError: the buffers do not fit.
    """
    capacity = buffer_size or default_capacity(shape)
    need = ReplayBuffer.bytes_needed(capacity, shape)
    free = free_memory_bytes(storage)
    if free is None or copies * need <= MEMORY_SHARE * free:
        return
    on_gpu = storage.type == "cuda"
    fits = int(MEMORY_SHARE * free / copies / (need / capacity))
    procs = f" x {copies} processes" if copies > 1 else ""
    hint = (
        " or keep it on the GPU with method_kwargs.buffer_device=device"
        if not on_gpu and torch.cuda.is_available()
        else ""
    )
    size = "x".join(str(s) for s in shape)
    raise ValueError(
        f"method_kwargs.buffer_size={capacity}{'' if buffer_size else ' (the default)'} needs "
        f"{_gib(need)}{procs} for {size} float32 chains, but only {_gib(free)} of "
        f"{'GPU' if on_gpu else 'host'} memory is available and the buffer may take at most half "
        "of it (resuming from a checkpoint holds a second copy): lower method_kwargs.buffer_size "
        f"to at most about {fits}{hint}"
    )


class MSGLDReplayBuffer(pl.Callback):
    """EBCLR's replay buffer as a Lightning callback (one buffer per DDP rank).

    The buffer is full when training starts, as the official code: ``capacity`` augmented
    training images at ``init_count``, in the sampler's range [-1, 1]. The images are random
    training images augmented like the first crop: by the method's on-device augmentation
    (``pl_module.device_augmentation``), or, for crops from a CPU pipeline (solo-learn's), by the
    training set itself (its first crop, de-normalised with the pipeline's statistics, with the
    configured noise that pipeline lacks: ``pl_module.pipeline_pixels``). Restarted chains are
    fresh such images (count 0, as the official code), never the step's own crops.

    Args:
        capacity: number of stored chains (50,000 in the official code; None: ``default_capacity``
            of the crops, 50,000 up to 32 px), checked against the free memory before the
            buffer is allocated (``check_buffer_fits``).
        rho: of a step's n drawn chains, floor(n * rho) positions drawn with replacement restart
            from q0, as the official sampler (0.2 CIFAR, 0.6 Fashion-MNIST;
            ``ReplayBuffer.sample``).
        proposal: q0, "data" (augmented training images) or "uniform".
        storage: "cpu" (as the official code) or "device" (the model's device: no host-device
            copies, at the price of device memory).
        seed: seed of the buffer's draws; None takes torch.initial_seed() at the start of
            training (the run's seed after seed_everything); each rank adds its own offset.
        init_count: the use count of the initial chains (5.0 = official code, see ReplayBuffer).
        chunk_size: fresh images made per batch while the buffer is filled.

    Raises:
        ValueError: a capacity that is not a positive integer or None, rho outside [0, 1], or
            an unknown proposal or storage.
    """

    def __init__(
        self,
        capacity: int | None,
        rho: float,
        proposal: str = "data",
        storage: str = "cpu",
        seed: int | None = None,
        init_count: float = 5.0,
        chunk_size: int = 256,
    ) -> None:
        if capacity is not None and (
            isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1
        ):
            raise ValueError(f"capacity must be a positive integer or None, got {capacity!r}")
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
        self._start: dict[str, Any] = {}

    # ------------------------------------------------------------------ set-up
    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        """Builds the buffer on the module's device: restored from a checkpoint (never refilled),
        else filled from q0 before the first step, as the official code."""
        self.rank = int(trainer.global_rank)
        base = int(self.seed if self.seed is not None else torch.initial_seed()) % 2**62
        seed = base + _RANK_STRIDE * self.rank
        device = pl_module.device
        copies = 1 if self.storage == "device" and device.type == "cuda" else trainer.num_devices
        self._start = {"seed": seed, "step": int(trainer.global_step), "device": device,
                       "copies": int(copies)}  # fmt: skip
        aug = getattr(pl_module, "device_augmentation", None)
        dataset = _train_dataset(trainer) if self.proposal_kind == "data" or aug is None else None
        if aug is not None:
            shape, augment = buffer_shape(aug), self._device_augment(aug)
        else:  # crops from a CPU pipeline (solo-learn's): the dataset augments
            pending = self._own_state(self._pending)
            shape = (
                tuple(pending["buffer"]["shape"])
                if pending is not None
                else pipeline_crop_shape(dataset, seed, device)
            )
            augment = self._pipeline_augment(pl_module)
        if self.proposal_kind == "uniform":
            dataset = augment = None
        if self.buffer is None or self.buffer.shape != shape:
            self._build(shape, dataset, augment)
        elif dataset is not None:  # a second fit with the same callback keeps its chains
            self.proposal.dataset = dataset
        self._finish_start()
        if not self.buffer.initialized:
            self.buffer.initialize(self.proposal, chunk_size=self.chunk_size)

    @staticmethod
    def _device_augment(aug: Any):
        """uint8 training images -> one crop of the first entry each, in [0, 1] pixels."""

        def augment(images: Any) -> Tensor:
            if not isinstance(images, Tensor) or images.dim() != 4:
                raise TypeError(
                    "the replay buffer's data proposal reads un-augmented image tensors from the "
                    f"training set, got items of type {type(images).__name__}"
                )
            return aug.pipelines[0](to_float_rgb(images.to(aug.mean.device)))

        return augment

    @staticmethod
    def _pipeline_augment(pl_module: Any):
        """A CPU pipeline's crops of training images -> the first crop of each in [0, 1] pixels
        (de-normalised with the pipeline's statistics, with the noise the device adds)."""

        def augment(crops: Any) -> Tensor:
            return pl_module.pipeline_pixels(_first_crop(crops).to(pl_module.device), 0)

        return augment

    def _build(self, shape: tuple[int, ...], dataset=None, augment=None) -> None:
        seed, device = self._start["seed"], self._start["device"]
        storage = torch.device("cpu") if self.storage == "cpu" else device
        check_buffer_fits(self.capacity, shape, storage, self._start["copies"])
        self.buffer = ReplayBuffer(
            self.capacity or default_capacity(shape), shape, storage, seed, self.init_count
        )
        self.proposal = Proposal(self.proposal_kind, shape, device, seed + 1, augment, dataset)
        self.noise_generator = torch.Generator(device=device).manual_seed(seed + 3)

    def _finish_start(self) -> None:
        if self._pending is not None and self.buffer is not None:
            self._restore(self._pending, self._start["seed"], self._start["step"])
            self._pending = None

    def _own_state(self, state: dict[str, Any] | None) -> dict[str, Any] | None:
        """This rank's part of a saved state (every rank's is saved; older files: rank 0's)."""
        if not state:
            return None
        ranks = state.get("ranks")
        if ranks is None:
            return state
        return ranks[self.rank] if self.rank < len(ranks) else ranks[0]

    def _restore(self, saved_state: dict[str, Any], seed: int, step: int) -> None:
        state = self._own_state(saved_state)
        saved = state["buffer"]
        if int(saved["capacity"]) != self.buffer.capacity or tuple(saved["shape"]) != self.buffer.shape:
            raise ValueError(
                f"the checkpoint's replay buffer holds {saved['capacity']} chains of shape "
                f"{tuple(saved['shape'])}, this run asks for {self.buffer.capacity} of shape "
                f"{self.buffer.shape}: resume with method_kwargs.buffer_size={saved['capacity']} "
                "and the same crop size"
            )
        self.buffer.load_state_dict(saved)
        if int(state.get("rank", 0)) != self.rank:
            # a checkpoint without this rank's buffer (more ranks now than then): this rank starts
            # from another rank's chains, with its own random streams
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
    def draw(self, crops: Tensor) -> SGLDChains:
        """A step's B chain starts in [-1, 1] (floor(B rho) positions restarted from q0, independent of
        the step's crops, which give only B, the shape check and the device)."""
        if self.buffer is None:
            raise RuntimeError("MSGLDReplayBuffer.draw() before training started")
        if tuple(crops.shape[1:]) != self.buffer.shape:
            raise ValueError(
                f"the replay buffer holds chains of shape {self.buffer.shape}, the step's crops "
                f"are {tuple(crops.shape[1:])}"
            )
        x, slots, counts = self.buffer.sample(int(crops.shape[0]), self.rho, self.proposal)
        device = crops.device

        def write_back(result: Tensor) -> None:
            self.buffer.update(slots, result)

        return SGLDChains(
            x.to(device, non_blocking=True), counts.to(device), self.noise_generator, write_back
        )

    # ------------------------------------------------------------------ checkpointing
    def _local_state(self) -> dict[str, Any]:
        return {
            "buffer": self.buffer.state_dict(),
            "proposal": self.proposal.state_dict(),
            "noise_generator": {
                "device_type": self.noise_generator.device.type,
                "state": self.noise_generator.get_state().cpu(),
            },
            "rank": self.rank,
            "rho": self.rho,
            "proposal_kind": self.proposal_kind,
        }

    def state_dict(self) -> dict[str, Any]:
        """Every rank's buffer, gathered to rank 0 alone (Lightning writes rank 0's copy): the
        other ranks hold only their own and return nothing (Lightning leaves an empty state out)."""
        if self.buffer is None:
            return dict(self._pending or {})
        if world_size() == 1:
            return {"ranks": [self._local_state()]}  # by reference: nothing to send
        gathered = gather_to_rank_zero(_to_cpu(self._local_state()))
        return {"ranks": gathered} if gathered is not None else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Kept until training starts, when the module's device and the rank are known."""
        self._pending = dict(state_dict) if state_dict else None


def _to_cpu(state: Any) -> Any:
    """Tensors of a nested state on the CPU (to send them to rank 0)."""
    if isinstance(state, Tensor):
        return state.cpu()
    if isinstance(state, dict):
        return {k: _to_cpu(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(_to_cpu(v) for v in state)
    return state


__all__ = ["MSGLDReplayBuffer", "buffer_shape", "check_buffer_fits"]
