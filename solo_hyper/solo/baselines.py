"""The solo-learn baselines, as one explicit table: which solo-learn versions ship each one, its
``method_kwargs`` defaults, and the run-config checks it needs before any work starts.

The defaults are solo-learn's published CIFAR hyperparameters: 1.0.2's
``bash_files/pretrain/cifar/<method>.sh`` (keys a script does not set: 1.0.2's argparse
defaults) and main's ``scripts/pretrain/cifar/<method>.yaml`` (keys a YAML does not set: the
defaults main's method reads with ``omegaconf_select``). Only keys the method's code reads are
listed, per version: 1.0.2 takes its momentum settings as constructor arguments
(``base_tau_momentum``, ``final_tau_momentum``, ``momentum_classifier``), main reads them from
``cfg.momentum``; a config gives the EMA schedule as ``method_kwargs.base_tau_momentum`` /
``final_tau_momentum`` under both versions (``main_cfg`` moves them into ``cfg.momentum``). This plugin's own methods take their arguments from their
objective (``solo_hyper.objectives``) and are not in the table; ``base`` and ``linear`` are solo's base classes, not methods.

The adapters call ``baseline_defaults_for`` (defaults of a class) and ``trainable_methods``;
the entry runs a baseline's checks (``adapter.method_info(name).check_config``, by ``baseline_of``);
the run calls ``unknown_method_message``. Imports no solo-learn at module level.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from solo_hyper.config import closest, training_processes

V1, V2 = "v1", "v2"  # solo_hyper.solo.detect_api's names of the two method APIs
VERSION = {V1: "1.0.2", V2: "main"}  # the solo-learn release that has each API
INSTALL_HINT = {
    V1: "pip install --no-deps solo-learn==1.0.2 (requirements/pypi-release.txt)",
    V2: "solo-learn's GitHub main (requirements/solo-main.txt, docs/solo-main.md)",
}
NOT_METHODS = {
    "base": "solo-learn's BaseMethod (the base class of every method)",
    "linear": "solo-learn's linear-evaluation model (use the 'linear' command)",
}

Check = Callable[[dict], None]


@dataclass(frozen=True)
class Baseline:
    """One solo-learn method as this plugin runs it.

    Attributes:
        name: its key in solo.methods.METHODS.
        solo_class: its class name (also the name of the mixed plugin class).
        apis: the method APIs (solo-learn versions) that ship it.
        kwargs: the method_kwargs shared by every version that ships it.
        only: per-API extra or differing keys.
        momentum: (base_tau, final_tau) of momentum methods; None for the others.
        checks: run-config checks (ValueError with the fix).
        note: said when the name is asked for on an installation that lacks it.
    """

    name: str
    solo_class: str
    apis: tuple[str, ...]
    kwargs: dict[str, Any]
    only: dict[str, dict[str, Any]] = field(default_factory=dict)
    momentum: tuple[float, float] | None = None
    checks: tuple[Check, ...] = ()
    note: str = ""


# ------------------------------------------------------------------------------------ checks
def _devices(cfg: dict) -> int:
    return training_processes(cfg.get("accelerator"), cfg.get("devices", 1))


def _queue_divides_global_batch(cfg: dict) -> None:
    """solo's queues take whole gathered batches (``assert queue_size % batch_size == 0``)."""
    queue = int(cfg["method_kwargs"]["queue_size"])
    batch = int(cfg["optimizer"]["batch_size"]) * _devices(cfg)
    if queue % batch:
        raise ValueError(
            f"method_kwargs.queue_size={queue} must be a multiple of the global batch "
            f"(optimizer.batch_size x devices = {batch}); e.g. {max(1, queue // batch) * batch}"
        )


def _whitening_slices_the_batch(cfg: dict) -> None:
    """W-MSE whitens random slices of ``whitening_size`` rows of each per-rank batch."""
    size = int(cfg["method_kwargs"]["whitening_size"])
    batch = int(cfg["optimizer"]["batch_size"])
    dim = int(cfg["method_kwargs"]["proj_output_dim"])
    if size < 2 or size > batch or batch % size:
        raise ValueError(
            f"method_kwargs.whitening_size={size} must divide optimizer.batch_size={batch} and "
            f"be >= 2 (W-MSE whitens slices of that many rows), e.g. whitening_size={batch // 2}"
        )
    if size <= dim:
        raise ValueError(
            f"method_kwargs.whitening_size={size} must exceed proj_output_dim={dim}: the "
            f"covariance of {size} rows in {dim} dimensions is singular and cannot be whitened "
            "(solo-learn uses 128 rows for 64 dimensions)"
        )


def _teacher_warmup_within_training(cfg: dict) -> None:
    """DINO's teacher-temperature schedule has one entry per epoch."""
    warmup = int(cfg["method_kwargs"]["warmup_teacher_temperature_epochs"])
    epochs = int(cfg["max_epochs"])
    if not 0 <= warmup <= epochs:
        raise ValueError(
            f"method_kwargs.warmup_teacher_temperature_epochs={warmup} must be between 0 and "
            f"max_epochs={epochs} (DINO warms the teacher temperature up over that many epochs)"
        )


def _prototypes_fit_the_memory(cfg: dict) -> None:
    """DeepCluster V2 stacks its heads (one prototype count) and seeds k-means with k distinct
    remembered samples per rank."""
    given = cfg["method_kwargs"]["num_prototypes"]
    counts = [int(k) for k in given] if isinstance(given, (list, tuple)) else []
    if not counts or len(set(counts)) != 1:
        raise ValueError(
            f"method_kwargs.num_prototypes={counts} must be a non-empty list of one repeated "
            "count (DeepCluster V2 stacks its heads), e.g. [3000, 3000, 3000]"
        )
    subset = cfg["data"].get("train_subset")
    if subset is None:
        return
    batch = int(cfg["optimizer"]["batch_size"])
    per_rank = (int(subset) // (batch * _devices(cfg))) * batch
    too_many = [k for k in cfg["method_kwargs"]["num_prototypes"] if int(k) > per_rank]
    if too_many:
        raise ValueError(
            f"method_kwargs.num_prototypes {too_many} exceed the {per_rank} samples each rank "
            f"remembers per epoch (data.train_subset={subset}): use at most {per_rank} "
            "prototypes per head, or more training images"
        )


def _vit_backbone(cfg: dict) -> None:
    """MAE reconstructs masked patches of a ViT's input: the backbone is a ViT."""
    name = str(cfg["backbone"]["name"])
    if not name.startswith("vit"):
        raise ValueError(
            f"mae reconstructs masked patches and needs a ViT backbone (backbone.name=vit_tiny, "
            f"vit_small, ...), got backbone.name={name!r}"
        )


# ------------------------------------------------------------------------------------ table
BOTH = (V1, V2)
MAIN_ONLY = (V2,)
PROJ_2048_256 = {"proj_hidden_dim": 2048, "proj_output_dim": 256}

BASELINES: dict[str, Baseline] = {
    b.name: b
    for b in (
        Baseline("simclr", "SimCLR", BOTH, {**PROJ_2048_256, "temperature": 0.2},
                 only={V1: {"supervised": False}}),
        # 1.0.2: SimCLR with supervised=True (registered by solo_hyper as 'supcon')
        Baseline("supcon", "SupCon", BOTH, {**PROJ_2048_256, "temperature": 0.2},
                 only={V1: {"supervised": True}}),
        Baseline("byol", "BYOL", BOTH,
                 {"proj_hidden_dim": 4096, "proj_output_dim": 256, "pred_hidden_dim": 4096},
                 momentum=(0.99, 1.0)),
        Baseline("mocov2plus", "MoCoV2Plus", BOTH,
                 {"proj_hidden_dim": 2048, "queue_size": 32768, "temperature": 0.2},
                 only={V1: {"proj_output_dim": 128}, V2: {"proj_output_dim": 256}},
                 momentum=(0.99, 0.999), checks=(_queue_divides_global_batch,)),
        Baseline("nnbyol", "NNBYOL", BOTH,
                 {"proj_hidden_dim": 4096, "proj_output_dim": 256, "pred_hidden_dim": 4096,
                  "queue_size": 65536},
                 momentum=(0.99, 1.0), checks=(_queue_divides_global_batch,)),
        Baseline("ressl", "ReSSL", BOTH,
                 {"proj_hidden_dim": 4096, "proj_output_dim": 256, "queue_size": 65536,
                  "temperature_q": 0.1, "temperature_k": 0.04},
                 momentum=(0.99, 1.0), checks=(_queue_divides_global_batch,)),
        Baseline("simsiam", "SimSiam", BOTH,
                 {"proj_hidden_dim": 2048, "proj_output_dim": 2048, "pred_hidden_dim": 512}),
        Baseline("nnsiam", "NNSiam", BOTH,
                 {"proj_hidden_dim": 2048, "proj_output_dim": 2048, "pred_hidden_dim": 4096,
                  "queue_size": 65536},
                 checks=(_queue_divides_global_batch,)),
        Baseline("nnclr", "NNCLR", BOTH,
                 {**PROJ_2048_256, "pred_hidden_dim": 4096, "queue_size": 65536,
                  "temperature": 0.2},
                 checks=(_queue_divides_global_batch,)),
        Baseline("barlow_twins", "BarlowTwins", BOTH,
                 {"proj_hidden_dim": 2048, "proj_output_dim": 2048, "lamb": 0.0051,
                  "scale_loss": 0.1}),
        Baseline("vicreg", "VICReg", BOTH,
                 {"proj_hidden_dim": 2048, "proj_output_dim": 2048, "sim_loss_weight": 25.0,
                  "var_loss_weight": 25.0, "cov_loss_weight": 1.0}),
        Baseline("swav", "SwAV", BOTH,
                 {"proj_hidden_dim": 2048, "proj_output_dim": 128, "queue_size": 3840,
                  "temperature": 0.1, "num_prototypes": 3000, "sk_epsilon": 0.05, "sk_iters": 3,
                  "freeze_prototypes_epochs": 2, "epoch_queue_starts": 50}),
        Baseline("deepclusterv2", "DeepClusterV2", BOTH,
                 {"proj_hidden_dim": 2048, "proj_output_dim": 128,
                  "num_prototypes": [3000, 3000, 3000], "temperature": 0.1, "kmeans_iters": 10},
                 checks=(_prototypes_fit_the_memory,)),
        Baseline("dino", "DINO", BOTH,
                 {**PROJ_2048_256, "num_prototypes": 4096, "use_bn_in_head": False,
                  "norm_last_layer": True, "clip_grad": 0, "freeze_last_layer": 1,
                  "student_temperature": 0.1, "teacher_temperature": 0.07,
                  "warmup_teacher_temperature": 0.04},
                 only={V1: {"warmup_teacher_temperature_epochs": 50},
                       V2: {"warmup_teacher_temperature_epochs": 0}},
                 momentum=(0.9995, 1.0), checks=(_teacher_warmup_within_training,)),
        Baseline("wmse", "WMSE", BOTH,
                 {"proj_hidden_dim": 1024, "proj_output_dim": 64, "whitening_size": 128,
                  "whitening_iters": 1, "whitening_eps": 0.0},
                 checks=(_whitening_slices_the_batch,)),
        Baseline("mocov3", "MoCoV3", MAIN_ONLY,
                 {"proj_hidden_dim": 4096, "proj_output_dim": 256, "pred_hidden_dim": 4096,
                  "temperature": 0.2},
                 momentum=(0.99, 1.0)),
        Baseline("vibcreg", "VIbCReg", MAIN_ONLY,
                 {"proj_hidden_dim": 2048, "proj_output_dim": 2048, "sim_loss_weight": 25.0,
                  "var_loss_weight": 25.0, "cov_loss_weight": 200.0, "iternorm": True}),
        Baseline("all4one", "All4One", MAIN_ONLY,
                 {**PROJ_2048_256, "pred_hidden_dim": 4096, "queue_size": 98304,
                  "temperature": 0.2},
                 momentum=(0.99, 1.0), checks=(_queue_divides_global_batch,)),
        Baseline("mae", "MAE", MAIN_ONLY,
                 {"decoder_embed_dim": 512, "decoder_depth": 8, "decoder_num_heads": 16,
                  "mask_ratio": 0.75, "norm_pix_loss": True},
                 checks=(_vit_backbone,), note="with a ViT backbone only"),
    )
}  # fmt: skip
_BY_CLASS = {b.solo_class: b for b in BASELINES.values()}


# ------------------------------------------------------------------------------------ lookups
def baseline_defaults(name: str, api: str) -> dict[str, Any]:
    """``method_kwargs`` defaults of baseline ``name`` under method API ``api`` ('v1'/'v2');
    KeyError when that solo-learn version does not ship it.

    Args:
        name: a key of ``BASELINES``.
        api: the method API, 'v1' or 'v2'.

    Returns:
        The defaults, lists copied.

    Raises:
        KeyError: that solo-learn version does not ship the baseline.
    """
    entry = BASELINES[name]
    if api not in entry.apis:
        raise KeyError(f"{name} is not a method of solo-learn {VERSION[api]}")
    out = {**entry.kwargs, **entry.only.get(api, {})}
    if entry.momentum is not None:
        # the EMA schedule has 1.0.2's constructor names under both versions; main reads it from
        # cfg.momentum, where solo_hyper.solo.main_cfg moves these two keys
        base_tau, final_tau = entry.momentum
        out.update(base_tau_momentum=base_tau, final_tau_momentum=final_tau)
        if api == V1:
            out["momentum_classifier"] = True
    return {k: list(v) if isinstance(v, list) else v for k, v in out.items()}


def baseline_of(cls: type) -> Baseline | None:
    """The table entry of a method class.

    Args:
        cls: a solo method class, or its mixed plugin class (which keeps the name).

    Returns:
        Its entry; None for this plugin's methods and for classes the table does not know.
    """
    return _BY_CLASS.get(cls.__name__)


def baseline_defaults_for(cls: type, api: str) -> dict[str, Any] | None:
    """``baseline_defaults`` of a class.

    Args:
        cls: a solo method class, or its mixed plugin class.
        api: the method API, 'v1' or 'v2'.

    Returns:
        Its method_kwargs defaults, or None when it is not a bundled baseline of that API.
    """
    entry = baseline_of(cls)
    if entry is None or api not in entry.apis:
        return None
    return baseline_defaults(entry.name, api)


def trainable_methods(registry: Mapping[str, type]) -> dict[str, type]:
    """The methods a run can train.

    Args:
        registry: solo's METHODS (name -> class).

    Returns:
        The registry without its base classes (``base``, ``linear``).
    """
    return {name: cls for name, cls in registry.items() if name not in NOT_METHODS}


def installed_api() -> str:
    from solo.methods.base import BaseMethod

    from solo_hyper.solo.api import detect_api

    return detect_api(BaseMethod)


def unknown_method_message(name: Any, known: Iterable[str], api: str | None = None) -> str:
    """Why ``method=name`` cannot run here.

    Args:
        name: the method asked for.
        known: the methods this installation has.
        api: the installed method API (None: detected).

    Returns:
        The message: a base class, a baseline of another solo-learn version (and how to get
        it), or an unknown name with the closest known one.
    """
    api = api or installed_api()
    known = sorted(known)
    listing = f"known: {known}"
    if name in NOT_METHODS:
        return f"method {name!r} is {NOT_METHODS[name]}, not a pretraining method; {listing}"
    entry = BASELINES.get(name) if isinstance(name, str) else None
    if entry is not None and api not in entry.apis:
        other = entry.apis[0]
        note = f" ({entry.note})" if entry.note else ""
        return (
            f"{name} is a solo-learn {VERSION[other]} method{note}; this installation has "
            f"solo-learn {VERSION[api]}. To use it, install {INSTALL_HINT[other]}; {listing}"
        )
    return f"unknown method {name!r}{closest(name, known)}; {listing}"


__all__ = [
    "BASELINES",
    "Baseline",
    "NOT_METHODS",
    "VERSION",
    "baseline_defaults",
    "baseline_defaults_for",
    "baseline_of",
    "trainable_methods",
    "unknown_method_message",
]
