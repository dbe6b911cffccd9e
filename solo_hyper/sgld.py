"""Multi-stage SGLD (MSGLD) and the EBCLR replay buffer, framework-free (torch only).

Kim & Ye (NeurIPS 2022), Sec. 3.3.  Proximal SGLD on the marginal EBM log q(x):

    x_{t+1} = x_t + alpha * clamp(grad_x log q(x_t), -delta, delta) + sigma(kappa) * eps,
    eps ~ N(0, I),   sigma(kappa) = sigma_min + (sigma_max - sigma_min) * max(0, 1 - kappa / K),

where kappa counts how often a buffer sample has started an SGLD chain (sigma is a standard
deviation, as in the official code; no sqrt(2 alpha) coupling, no clamping of x to the image
range).  Chains start from a replay buffer; of the n chains drawn for a step, floor(n * rho)
positions drawn with replacement are re-initialised from a proposal (augmented data, or noise for
the ablation), as the official ``Buffer.sample``: an expected fraction 1 - (1 - 1/n)^floor(n rho)
of the chains restarts (0.449 for Fashion-MNIST's rho = 0.6 at n = 128, 0.178 for CIFAR's 0.2).  Chains live in the official
pixel range [-1, 1] (pixels * 2 - 1), so alpha, delta and sigma mean what they mean there,
whatever normalisation the encoder's inputs have (the method maps chains to its input).

Differences from the official code (deliberate): input gradients come from
``input_gradient.InputGradient`` (torch.autograd.grad of the input only, so no parameter .grad is
computed or accumulated: DDP-safe; under float16 autocast a scaled loss, so that no entry
underflows to zero); proposals are
drawn only for the restarted positions (the official code draws n and keeps those); all randomness
comes from explicit torch.Generator objects.
"""

from __future__ import annotations

import contextlib
import math
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import Dataset, default_collate

from solo_hyper.input_gradient import InputGradient

__all__ = [
    "OFFICIAL_CHAINS",
    "PROPOSALS",
    "STORAGES",
    "PrivateRNG",
    "Proposal",
    "ReplayBuffer",
    "SGLDChains",
    "dataset_items",
    "default_capacity",
    "expected_restart_fraction",
    "msgld",
    "noise_std",
    "pixels_to_chain",
    "restart_draws",
]

PROPOSALS = ("data", "uniform")  # q0: augmented training images | uniform noise
STORAGES = ("cpu", "device")  # where the buffer's chains live


def _check_schedule(sigma_min: float, sigma_max: float, K: float) -> None:
    """0 <= sigma_min <= sigma_max and K > 0."""
    if not 0 <= sigma_min <= sigma_max:
        raise ValueError(f"need 0 <= sigma_min <= sigma_max, got {sigma_min}, {sigma_max}")
    if not K > 0:
        raise ValueError(f"K must be > 0, got {K}")


def noise_std(counts: Tensor, sigma_min: float, sigma_max: float, K: float) -> Tensor:
    """Per-sample noise std sigma(kappa) = sigma_min + (sigma_max - sigma_min) * max(0, 1 - kappa/K).

    With the defaults (0.01, 0.05, 3): kappa = 0, 1, 2, >=3 -> 0.05, 0.0367, 0.0233, 0.01.

    Args:
        counts: non-negative use counts kappa (any shape).
        sigma_min: the std from kappa = K on.
        sigma_max: the std at kappa = 0.
        K: the count at which the std reaches sigma_min.

    Returns:
        A float tensor of the counts' shape.

    Raises:
        ValueError: a negative count, or a schedule with sigma_min > sigma_max or K <= 0.
    """
    _check_schedule(sigma_min, sigma_max, K)
    kappa = counts.to(torch.float64) if counts.dtype == torch.float64 else counts.float()
    torch._assert_async((kappa >= 0).all(), "counts must be >= 0")  # no host read on a GPU
    return sigma_min + (sigma_max - sigma_min) * (1.0 - kappa / K).clamp_min(0.0)


def _randn(shape: torch.Size, generator: torch.Generator | None, like: Tensor) -> Tensor:
    """N(0, I) noise from `generator` (drawn on the generator's device, then moved to like's)."""
    device = generator.device if generator is not None else like.device
    eps = torch.randn(shape, generator=generator, device=device, dtype=like.dtype)
    return eps.to(like.device)


def msgld(
    log_q: Callable[[Tensor], Tensor],
    x: Tensor,
    counts: Tensor,
    steps: int = 10,
    step_size: float = 0.05,
    grad_clamp: float = 1.0,
    sigma_min: float = 0.01,
    sigma_max: float = 0.05,
    K: float = 3.0,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Run `steps` MSGLD steps (gradient ASCENT on log q) from x and return detached samples.

    Gradients are taken with respect to the input only (torch.autograd.grad): parameters' .grad
    are never touched. Works under torch.no_grad (grad is enabled locally), not under
    torch.inference_mode.

    Args:
        log_q: maps (N, ...) inputs to (N,) unnormalised log-densities (e.g. ebclr_log_density
            of the projections against the detached second-view projections).
        x: (N, ...) chain starts, floating point.
        counts: (N,) chain-start counts kappa (pre-increment) giving the per-sample noise std.
        steps: T, the SGLD steps (>= 0).
        step_size: alpha, the gradient step (>= 0).
        grad_clamp: delta, the gradient's clamp (> 0; math.inf: no clamp).
        sigma_min: the noise std of a much-used chain (sigma_min == sigma_max: plain proximal
            SGLD).
        sigma_max: the noise std of a fresh chain.
        K: the use count at which the noise reaches sigma_min (Eq. 22).
        generator: random source of the noise, on x's device.

    Returns:
        The samples (N, ...), detached.

    Raises:
        TypeError: an x that is not floating point.
        ValueError: shapes that do not match, or an argument out of its range.
    """
    if not x.is_floating_point():
        raise TypeError(f"x must be floating point, got {x.dtype}")
    if x.dim() < 1 or x.shape[0] < 1:
        raise ValueError(f"x must have shape (N >= 1, ...), got {tuple(x.shape)}")
    if counts.shape != (x.shape[0],):
        raise ValueError(f"counts must have shape ({x.shape[0]},), got {tuple(counts.shape)}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be an int >= 0, got {steps!r}")
    if not step_size >= 0:
        raise ValueError(f"step_size must be >= 0, got {step_size}")
    if not grad_clamp > 0:
        raise ValueError(f"grad_clamp must be > 0, got {grad_clamp}")
    _check_schedule(sigma_min, sigma_max, K)

    n = x.shape[0]
    bshape = (n,) + (1,) * (x.dim() - 1)
    sigma = noise_std(counts, sigma_min, sigma_max, K).to(device=x.device, dtype=x.dtype)
    sigma = sigma.reshape(bshape)
    x = x.detach().clone()

    def summed_log_q(x: Tensor) -> Tensor:
        lq = log_q(x)
        if lq.shape != (n,):
            raise ValueError(f"log_q must return shape ({n},), got {tuple(lq.shape)}")
        return lq.float().sum()

    gradient = InputGradient()  # under float16 autocast: a scaled loss, no underflow to zero
    with torch.enable_grad():
        for _ in range(steps):
            grad = gradient(summed_log_q, x)
            if math.isfinite(grad_clamp):
                grad = grad.clamp(-grad_clamp, grad_clamp)
            x = x + step_size * grad
            if sigma_max > 0:
                x = x + sigma * _randn(x.shape, generator, x)
    return x.detach()


def restart_draws(n: int, rho: float) -> int:
    """How many positions of an n-chain draw the official sampler re-initialises: int(n * rho)
    (floor, in the same float arithmetic as the official code), each drawn with replacement.

    Args:
        n: chains drawn.
        rho: the restart fraction.
    """
    return int(n * rho)


def expected_restart_fraction(n: int, rho: float) -> float:
    """Expected fraction of an n-chain draw that restarts: 1 - (1 - 1/n)^floor(n * rho), since
    each of the floor(n * rho) positions misses a given chain with probability 1 - 1/n.

    Args:
        n: chains drawn.
        rho: the restart fraction.
    """
    return 1.0 - (1.0 - 1.0 / n) ** restart_draws(n, rho)


def _last_index(slots: Tensor) -> Tensor:
    """For each position k, the last position holding the same slot as k: writing
    ``values[_last_index(slots)]`` to ``slots`` makes every duplicate write the same value (the
    last one wins, whatever the order of the writes), with no output size the host must read
    (``unique`` has one). O(n^2) comparisons of a step's n chains."""
    same = slots[:, None] == slots[None, :]
    positions = torch.arange(slots.shape[0], device=slots.device)
    return torch.where(same, positions, -1).amax(dim=1)


# The official buffer: 50,000 chains of 3x32x32 float32 (CIFAR-10), about 614 MB with its counts
OFFICIAL_CHAINS = 50_000
OFFICIAL_CHAIN_SHAPE = (3, 32, 32)


def default_capacity(shape: Sequence[int]) -> int:
    """The buffer size when none is given, so that the default never asks for more memory than
    the paper's buffer.

    Args:
        shape: (C, H, W) of a chain.

    Returns:
        The official 50,000 chains for images of up to 32 px, and as many larger chains as fit
        in the official buffer's memory (a 224-px crop: 1,020).
    """
    budget = ReplayBuffer.bytes_needed(OFFICIAL_CHAINS, OFFICIAL_CHAIN_SHAPE)
    per_chain = ReplayBuffer.bytes_needed(1, shape)
    return max(1, min(OFFICIAL_CHAINS, budget // per_chain))


class ReplayBuffer:
    """Replay buffer of SGLD chains with per-slot use counts (framework-free state).

    samples: (capacity, *shape) tensor on `device`; counts: (capacity,) float32 on `device`.
    Slot draws and re-initialised positions come from the buffer's own torch.Generator on its
    device (seeded; part of state_dict), so a restored buffer continues exactly like the
    original, and a step neither copies draws to the device nor reads anything back.  fresh_fn(n) -> (n, *shape) supplies proposal samples
    (augmented data or uniform noise); its own randomness is the caller's responsibility.

    Args:
        capacity: the number of slots (> 0).
        shape: a chain's shape, e.g. (C, H, W).
        device: where samples and counts live.
        seed: seed of the buffer's own CPU generator.
        init_count: the count given to every slot by initialize(). Default 5.0 = the official
            code (the configuration behind the paper's results): the initial data-filled buffer
            is treated as already "used", so its chains start with sigma_min noise, and only
            re-initialised chains (count 0) get the high-noise exploration phase. The paper's
            text ("number of times it has been used") would suggest 0; pass 0.0 for that
            reading.
        dtype: the samples' floating dtype.

    Raises:
        ValueError: a capacity or shape that is not positive, a negative init_count, or a dtype
            that is not floating point.
    """

    def __init__(
        self,
        capacity: int,
        shape: Sequence[int],
        device: str | torch.device = "cpu",
        seed: int = 0,
        init_count: float = 5.0,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity <= 0:
            raise ValueError(f"capacity must be a positive int, got {capacity!r}")
        shape = tuple(int(s) for s in shape)
        if len(shape) == 0 or any(s <= 0 for s in shape):
            raise ValueError(f"shape must be a non-empty tuple of positive ints, got {shape}")
        if not init_count >= 0:
            raise ValueError(f"init_count must be >= 0, got {init_count}")
        if not dtype.is_floating_point:
            raise ValueError(f"dtype must be floating point, got {dtype}")
        self.capacity = capacity
        self.shape = shape
        self.device = torch.device(device)
        self.init_count = float(init_count)
        self.samples = torch.zeros((capacity, *shape), dtype=dtype, device=self.device)
        self.counts = torch.full(
            (capacity,), self.init_count, dtype=torch.float32, device=self.device
        )
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)
        self.initialized = False  # full only after initialize() (or a restored state)

    def __len__(self) -> int:
        return self.capacity

    @staticmethod
    def bytes_needed(
        capacity: int, shape: Sequence[int], dtype: torch.dtype = torch.float32
    ) -> int:
        """Bytes of storage: capacity * prod(shape) * itemsize(dtype) + capacity * 4 (counts)."""
        itemsize = torch.empty((), dtype=dtype).element_size()
        return int(capacity) * math.prod(int(s) for s in shape) * itemsize + int(capacity) * 4

    def _fresh(self, fresh_fn: Callable[[int], Tensor], n: int) -> Tensor:
        """Call fresh_fn(n) and check the result's shape."""
        x = fresh_fn(n)
        if not isinstance(x, Tensor) or tuple(x.shape) != (n, *self.shape):
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"fresh_fn({n}) must return shape {(n, *self.shape)}, got {got}")
        return x.to(device=self.device, dtype=self.samples.dtype)

    def initialize(self, fresh_fn: Callable[[int], Tensor], chunk_size: int = 256) -> None:
        """Fill every slot with fresh_fn samples (in chunks of chunk_size); counts = init_count."""
        if chunk_size <= 0:
            raise ValueError(f"chunk_size must be > 0, got {chunk_size}")
        for start in range(0, self.capacity, chunk_size):
            n = min(chunk_size, self.capacity - start)
            self.samples[start : start + n] = self._fresh(fresh_fn, n)
        self.counts.fill_(self.init_count)
        self.initialized = True

    def sample(
        self, n: int, rho: float, fresh_fn: Callable[[int], Tensor]
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Draw n chain starts: returns (x, slots, counts), all on the buffer's device.

        Slots are uniform with replacement; then, as the official code, floor(n * rho) positions
        of the draw, themselves drawn with replacement, are replaced by fresh_fn samples (count
        0): at most n * rho distinct ones, an expected fraction 1 - (1 - 1/n)^floor(n * rho)
        (:func:`expected_restart_fraction`).  The returned counts are the pre-increment kappa to
        use for the noise; the stored counts of the drawn slots become kappa + 1 (a slot drawn
        twice in one call is incremented once, as in the official code).
        """
        if not self.initialized:
            raise RuntimeError("ReplayBuffer.sample() called before initialize()")
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise ValueError(f"n must be a positive int, got {n!r}")
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"rho must be in [0, 1], got {rho}")
        device, g = self.device, self.generator  # drawn where the buffer lives: no copy, no read
        slots = torch.randint(self.capacity, (n,), generator=g, device=device)
        x = self.samples[slots].clone()
        counts = self.counts[slots].clone()
        draws = restart_draws(n, rho)
        if draws > 0:  # a position drawn twice takes the later of its fresh samples
            positions = torch.randint(n, (draws,), generator=g, device=device)
            fresh = self._fresh(fresh_fn, draws)[_last_index(positions)]
            x.index_copy_(0, positions, fresh)
            counts.index_fill_(0, positions, 0.0)
        self.counts.index_copy_(0, slots, (counts + 1.0)[_last_index(slots)])
        return x, slots, counts

    def update(self, slots: Tensor, x: Tensor) -> None:
        """Write SGLD outputs x back into slots (for duplicate slots the last write wins)."""
        if slots.dim() != 1 or tuple(x.shape) != (slots.shape[0], *self.shape):
            raise ValueError(
                f"need slots (n,) and x (n, *{self.shape}), got {tuple(slots.shape)}, {tuple(x.shape)}"
            )
        if slots.numel() == 0:
            return
        slots = slots.to(device=self.device, dtype=torch.long)
        inside = ((slots >= 0) & (slots < self.capacity)).all()
        torch._assert_async(inside, f"slots must be in [0, {self.capacity})")  # no host read
        x = x.detach().to(device=self.device, dtype=self.samples.dtype)
        self.samples.index_copy_(0, slots, x[_last_index(slots)])

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly: samples, counts, sizes and the generator state.

        The tensors are returned by reference (no copy; a CIFAR buffer of 50k is ~615 MB).
        """
        return {
            "samples": self.samples,
            "counts": self.counts,
            "capacity": self.capacity,
            "shape": self.shape,
            "init_count": self.init_count,
            "initialized": self.initialized,
            "generator_state": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state_dict() (capacity and shape must match; tensors are copied in)."""
        if int(state["capacity"]) != self.capacity or tuple(state["shape"]) != self.shape:
            raise ValueError(
                f"state is for capacity {state['capacity']} and shape {tuple(state['shape'])}, "
                f"buffer has {self.capacity} and {self.shape}"
            )
        held = int(state["samples"].shape[0])
        if held != self.capacity:
            raise ValueError(
                f"the saved replay buffer holds {held} of its {self.capacity} chains (a buffer "
                "that grew from the training crops, saved by an older solo-hyper); this version "
                "fills it before the first step: start a new run instead of resuming this one"
            )
        self.samples.copy_(state["samples"])
        self.counts.copy_(state["counts"])
        self.init_count = float(state["init_count"])
        self.initialized = bool(state["initialized"])
        try:
            self.generator.set_state(state["generator_state"])
        except RuntimeError:
            raise ValueError(
                f"the saved replay buffer's random state is not one of a {self.device.type} "
                "generator (saved with another buffer_device, or by an older solo-hyper whose "
                "draws ran on the CPU): resume with the buffer_device it was saved with, or "
                "start a new run"
            ) from None


# ---------------------------------------------------------------------------------- chains
@dataclass
class SGLDChains:
    """One step's chain starts, drawn from the replay buffer for the method's step.

    Attributes:
        x: (B, C, H, W) chain starts in the sampler's range [-1, 1], on the model's device.
        counts: (B,) pre-increment use counts kappa (noise std sigma(kappa)).
        generator: the SGLD noise stream.
        write_back: stores the step's detached MSGLD outputs (B, C, H, W) in the slots x came
            from.
    """

    x: Tensor
    counts: Tensor
    generator: torch.Generator
    write_back: Callable[[Tensor], None]


class PrivateRNG:
    """A random stream of its own for code that draws from the global generators (kornia,
    torchvision and solo-learn's transforms: torch's and Python's ``random``).

    ``with rng.active():`` swaps the stream's states in (CPU, the CUDA device if any, and Python's
    ``random``) and swaps the caller's back afterwards, so fresh proposal samples neither consume
    nor depend on the training run's global randomness, and the stream's state can be checkpointed.

    Args:
        seed: seed of the stream (CPU, CUDA and Python states alike).
        device: the device whose CUDA generator the stream also owns (a CPU device: none).
    """

    def __init__(self, seed: int, device: torch.device) -> None:
        self.device = torch.device(device)
        self.cpu_state = torch.Generator().manual_seed(seed).get_state()
        self.cuda_state = None
        if self.device.type == "cuda":
            self.cuda_state = torch.Generator(device=self.device).manual_seed(seed).get_state()
        self.python_state = random.Random(seed).getstate()

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        cuda = self.device.type == "cuda"
        devices = [self.device.index or 0] if cuda else []
        caller = random.getstate()
        try:
            with torch.random.fork_rng(devices=devices):
                torch.set_rng_state(self.cpu_state)
                if cuda:
                    torch.cuda.set_rng_state(self.cuda_state, self.device)
                random.setstate(self.python_state)
                yield
                self.cpu_state = torch.get_rng_state()
                if cuda:
                    self.cuda_state = torch.cuda.get_rng_state(self.device)
                self.python_state = random.getstate()
        finally:
            random.setstate(caller)

    def state_dict(self) -> dict[str, Any]:
        return {"cpu": self.cpu_state, "cuda": self.cuda_state, "python": self.python_state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.cpu_state = state["cpu"]
        if self.device.type == "cuda" and state.get("cuda") is not None:
            self.cuda_state = state["cuda"]
        if state.get("python") is not None:
            self.python_state = state["python"]


def dataset_items(dataset: Dataset, indices: Tensor) -> Any:
    """The images of ``dataset`` at ``indices``, batched (solo's (index, images, target) layout):
    a tensor of un-augmented images, or, for a dataset that augments (solo-learn's CPU pipeline),
    the list of its crops, each (N, C, H, W). A dataset with ``__getitems__`` takes the index
    tensor as it is; one item at a time needs Python ints.

    Args:
        dataset: the training set.
        indices: the items to read, a CPU tensor.
    """
    getitems = getattr(dataset, "__getitems__", None)
    items = getitems(indices) if getitems is not None else None
    if items is None or (isinstance(items, list) and len(items) == len(indices)):
        if items is None:
            items = [dataset[i] for i in indices.tolist()]
        items = default_collate(items)
    return items[1]


def pixels_to_chain(pixels: Tensor) -> Tensor:
    """[0, 1] pixels -> the sampler's range [-1, 1] (the official code's 2x - 1).

    Args:
        pixels: images in [0, 1].
    """
    return pixels * 2.0 - 1.0


class Proposal:
    """q0 of the paper's Sec. 3.3: fresh chain starts in the sampler's range [-1, 1].

    kind="data": random training images of ``dataset``, read and turned into one [0, 1]-pixel
    crop per image by ``augment`` (on-device: the training augmentation of the uint8 images;
    solo-learn's CPU pipeline: the dataset's own augmented crop, de-normalised), all inside the
    proposal's own random stream; kind="uniform": U[-1, 1] noise, as the official code without
    data. Either way independent of the training step's batch.

    Args:
        kind: "data" or "uniform".
        shape: (C, H, W) of a chain start.
        device: where the starts are made.
        seed: seed of the proposal's own random stream (``PrivateRNG``).
        augment: a batch of dataset items -> [0, 1]-pixel crops (kind "data").
        dataset: the training set (kind "data").

    Raises:
        ValueError: an unknown kind, or kind "data" without a non-empty dataset and its
            augmentation.
    """

    def __init__(
        self,
        kind: str,
        shape: tuple[int, ...],
        device: torch.device,
        seed: int,
        augment: Callable[[Any], Tensor] | None = None,
        dataset: Dataset | None = None,
    ) -> None:
        if kind not in PROPOSALS:
            raise ValueError(f"proposal must be one of {PROPOSALS}, got {kind!r}")
        if kind == "data" and (dataset is None or augment is None):
            raise ValueError("the data proposal needs the training set and its augmentation")
        if dataset is not None and len(dataset) == 0:
            raise ValueError("the data proposal needs a non-empty training set")
        self.kind, self.shape, self.device = kind, tuple(shape), torch.device(device)
        self.augment, self.dataset = augment, dataset
        self.index_generator = torch.Generator().manual_seed(seed)
        self.rng = PrivateRNG(seed + 1, self.device)

    @torch.no_grad()
    def __call__(self, n: int) -> Tensor:
        if self.kind == "uniform":
            with self.rng.active():
                return pixels_to_chain(torch.rand((n, *self.shape), device=self.device))
        idx = torch.randint(len(self.dataset), (n,), generator=self.index_generator)
        with self.rng.active():  # a dataset that augments draws from the global generators
            return pixels_to_chain(self.augment(dataset_items(self.dataset, idx)))

    def state_dict(self) -> dict[str, Any]:
        return {"index_generator": self.index_generator.get_state(), "rng": self.rng.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.index_generator.set_state(state["index_generator"])
        self.rng.load_state_dict(state["rng"])
