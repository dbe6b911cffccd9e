"""What each paper table is: its rows (a config and the overrides that make the row), the column
(dataset) each group of runs measures, the budget of each scale, and the paper cell beside it.

``cpu``: Fashion-MNIST with the small CNN, a budget a 2-core machine affords (stated in the table);
``gpu``: the paper's recipe (the configs under configs/pretrain/<dataset>/ and configs/ebclr/).
The paper's numbers are in ``paper_numbers.yaml``, one entry per (table, row, column, metric).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Claim:
    """What one pair's verdict is about: the config keys its two runs may differ in.

    ``keys`` are dotted config keys, each naming its whole subtree ('optimizer' covers
    'optimizer.lr'). With 'method' named, the arguments only one of the two methods has
    (``method_kwargs`` keys the other lacks) count as the method's own; every key both configs
    have must be equal unless named. ``reproduce`` checks every pair before any run
    (``pairs.undeclared``)."""

    baseline: str  # the row it is compared with
    about: str  # in words, for the table's legend and docs/fairness.md
    keys: tuple[str, ...]
    family: str = ""  # set: one claim over several pairs (its words); Holm-adjusted together


@dataclass(frozen=True)
class Row:
    """One line of a paper table: a config, the overrides that make the line, its claims."""

    key: str  # the row in paper_numbers.yaml: 'hcl', 'c=0.3', 'rhcl-at'
    title: str  # as the paper writes it
    config: str  # relative to the repository root
    overrides: tuple[str, ...] = ()
    suffix: str = ""  # added to the run name when the overrides change the config
    claims: tuple[Claim, ...] = ()  # the rows it is compared with (paired differences)
    finetune: bool = False  # RHCL + AT: adversarial fine-tuning of the base row's runs, compared
    # with its baselines' linear evaluations (AT at an attack vs LE and r-LE at the same attack)


@dataclass(frozen=True)
class Column:
    """The runs of one dataset: at CPU scale the single Fashion-MNIST column, at GPU scale one per
    dataset of the paper. ``paper_column`` names the paper column printed beside it."""

    name: str
    paper_column: str
    rows: tuple[Row, ...]
    overrides: tuple[str, ...] = ()  # the budget of this scale, for every row
    tag: str = ""  # added to run names, so that two budgets of one config keep two runs
    linear_config: str | None = None  # None: the dataset's default protocol
    robust_config: str | None = None  # set: robust-eval (LE, r-LE under PGD) of every run
    data_dir: str | None = None  # folder under --data-root holding train/ and val/
    budget: str = ""


@dataclass(frozen=True)
class Across:
    """A pair of one seed's runs in two columns of a table (EBCLR's "fewer epochs": EBCLR in the
    short column vs SimCLR in the long one)."""

    column_a: str
    row_a: str
    column_b: str
    row_b: str
    about: str
    keys: tuple[str, ...]
    family: str = ""  # as Claim.family


@dataclass(frozen=True)
class Best:
    """A claim that one row is best (HCL Table 4's "c = 0.6 is best"): the highest mean is paired
    with every other row of ``rows``, Holm-adjusted over those pairs, and called best only when
    every interval excludes 0."""

    rows: tuple[str, ...]
    about: str  # what the rows vary: 'c'
    keys: tuple[str, ...]  # the config keys they may differ in
    claimed: str  # the row the paper calls best


@dataclass(frozen=True)
class Table:
    name: str
    paper: str
    title: str
    claim: str  # what the paper says the table shows
    scales: dict[str, tuple[Column, ...]] = field(default_factory=dict)
    robust: bool = False  # rows read robust-eval's accuracies instead of the linear probe
    untrained: tuple[tuple[str, str], ...] = ()  # (row, title) the paper has and this package
    # cannot train: printed with the paper's number only
    across: tuple[Across, ...] = ()
    best: Best | None = None


FMNIST = "configs/pretrain/fashionmnist"

# what the pairs' claims are about, as config keys (Claim)
GEOMETRY = ("method", "method_kwargs.geometry", "method_kwargs.curvature")
ATTACK = ("method",)  # the robust method's attack arguments are its own (eps, steps, lambda_adv)
CURVATURE = ("method_kwargs.curvature",)
NORMALIZE = ("method_kwargs.normalize",)
# each method as its official configs train it: EBCLR's Adam, batch, noise augmentation, [-1, 1]
# inputs and BN-free encoder against each baseline's own optimiser and inputs (docs/fairness.md)
RECIPE = ("method", "optimizer", "augmentations.0.gaussian_noise", "data.mean", "data.std",
          "backbone")  # fmt: skip
# EBCLR Table 1: the baselines' own loss temperature and head sizes too (MoCo v2's 0.07, SimSiam's
# and BYOL's projector and predictor), as solo-learn publishes them
OFFICIAL = RECIPE + ("method_kwargs.temperature", "method_kwargs.proj_hidden_dim",
                     "method_kwargs.proj_output_dim")  # fmt: skip
BATCH = ("optimizer.batch_size", "optimizer.lr")  # the batch-study configs scale lr with the batch
EPOCHS = ("max_epochs",)


def _pair(a: str, b: str, title_a: str, title_b: str, folder: str) -> tuple[Row, Row]:
    return (Row(b, title_b, f"{folder}/{b}.yaml"),
            Row(a, title_a, f"{folder}/{a}.yaml", claims=(Claim(b, "the geometry", GEOMETRY),)))  # fmt: skip


def _gpu_columns(a: str, b: str, ta: str, tb: str, datasets) -> tuple[Column, ...]:
    out = []
    for folder, paper_column, data_dir, linear in datasets:
        out.append(Column(
            paper_column, paper_column, _pair(a, b, ta, tb, f"configs/pretrain/{folder}"),
            linear_config=linear, data_dir=data_dir,
            budget="the paper's recipe (configs/pretrain/" + folder + "/)",
        ))  # fmt: skip
    return tuple(out)


T1_DATASETS = [
    ("cifar10", "CIFAR-10", None, None),
    ("cifar100", "CIFAR-100", None, None),
    ("tiny-imagenet", "TinyIN", "tiny-imagenet-200", "configs/linear/cifar100.yaml"),
    ("imagenet-100", "IN-100", "imagenet-100", "configs/linear/imagenet.yaml"),
    ("imagenet-200", "IN-200", "imagenet-200", "configs/linear/imagenet.yaml"),
    ("imagenet", "IN-1K", "imagenet", "configs/linear/imagenet.yaml"),
]
CURVATURES = [round(0.1 * i, 1) for i in range(1, 11)]


def _curvature_rows(config: str) -> tuple[Row, ...]:
    # c = 0.1 is the shipped configs' own value: that row is the unmodified config (no suffix),
    # so the normalisation ablation's "normalized" row of the same budget reuses its runs; the
    # rows are compared through the table's Best claim (the best c against every other)
    return tuple(
        Row(f"c={c}", f"c = {c}", config, (f"method_kwargs.curvature={c}",),
            suffix="" if c == 0.1 else f"-c{c}")
        for c in CURVATURES
    )  # fmt: skip


def _normalization_rows(config: str) -> tuple[Row, ...]:
    return (
        Row("normalized", "with normalisation", config),
        Row("unnormalized", "without normalisation", config, ("method_kwargs.normalize=false",),
            suffix="-unnormalized", claims=(Claim("normalized", "the normalisation", NORMALIZE),)),
    )  # fmt: skip


def _robust_rows(folder: str) -> tuple[Row, ...]:
    attack = "the adversarial training"
    return (
        Row("simclr", "SimCLR", f"{folder}/simclr.yaml"),
        Row("hcl", "HCL", f"{folder}/hcl.yaml", claims=(Claim("simclr", "the geometry", GEOMETRY),)),
        # "SimCLR and HCL are not robust": each robust method against its own recipe without the
        # attack (simclr.yaml / hcl.yaml differ from RoCL's recipe in temperature, augmentation
        # and input normalisation too)
        Row("simclr-rocl-recipe", "SimCLR, RoCL's recipe", f"{folder}/simclr-rocl-recipe.yaml"),
        Row("hcl-rhcl-recipe", "HCL, RHCL's recipe", f"{folder}/hcl-rhcl-recipe.yaml"),
        Row("rocl", "RoCL", f"{folder}/rocl.yaml",
            claims=(Claim("simclr-rocl-recipe", attack, ATTACK),)),
        Row("rhcl", "RHCL", f"{folder}/rhcl.yaml",
            claims=(Claim("rocl", "the geometry", GEOMETRY), Claim("hcl-rhcl-recipe", attack, ATTACK))),
        # the fine-tuning is the row's own (finetune-adv of RHCL's runs): the same config
        Row("rhcl-at", "RHCL+AT", f"{folder}/rhcl.yaml",
            claims=(Claim("rhcl", "the adversarial fine-tuning", ()),), finetune=True),
    )  # fmt: skip


EBCLR_T1_ROWS = (
    Row("simclr", "SimCLR", "configs/ebclr/baselines/fashionmnist-simclr.yaml"),
    Row("mocov2plus", "MoCo v2", "configs/ebclr/baselines/fashionmnist-mocov2plus.yaml"),
    Row("simsiam", "SimSiam", "configs/ebclr/baselines/fashionmnist-simsiam.yaml"),
    Row("byol", "BYOL", "configs/ebclr/baselines/fashionmnist-byol.yaml"),
    # "EBCLR consistently outperforms every baseline": paired with each
    Row("ebclr", "EBCLR", "configs/ebclr/fashionmnist-official.yaml",
        claims=tuple(Claim(b, "the method, each with its official recipe", OFFICIAL,
                           family="EBCLR outperforms every baseline")
                     for b in ("simclr", "mocov2plus", "simsiam", "byol"))),
)


def _small_cnn(rows: tuple[Row, ...]) -> tuple[Row, ...]:
    """The EBCLR Table 1 rows on the CPU: every encoder the small CNN (EBCLR's without batch
    norm, as its official no-BN ResNet), the papers' optimisers and augmentations otherwise."""
    out = []
    for r in rows:
        extra = ["backbone.name=small_cnn"]
        extra.append("backbone.kwargs={batch_norm: false}" if r.key == "ebclr" else "backbone.kwargs={}")
        out.append(Row(r.key, r.title, r.config, (*r.overrides, *extra), "-small_cnn", r.claims))
    return tuple(out)


BATCHES = (16, 64, 128)
EBCLR_T3_ROWS = tuple(
    row
    for b in BATCHES
    for row in (
        # beyond EBCLR vs SimCLR at each batch, the paper's batch claims: SimCLR degrades as the
        # batch shrinks, EBCLR does not, and EBCLR at 16 beats SimCLR at 128
        Row(f"simclr-b{b}", f"SimCLR, batch {b}", f"configs/ebclr/batch-study/simclr-b{b}.yaml",
            claims=(Claim("simclr-b128", "the batch", BATCH),) if b == 16 else ()),
        Row(f"ebclr-b{b}", f"EBCLR, batch {b}", f"configs/ebclr/batch-study/ebclr-b{b}.yaml",
            claims=(Claim(f"simclr-b{b}", "the method, each with its recipe", RECIPE,
                          family="EBCLR beats SimCLR at every batch size"),) + ((
                Claim("simclr-b128", "the method and the batch", RECIPE + BATCH),
                Claim("ebclr-b128", "the batch", BATCH)) if b == 16 else ())),
    )
)  # fmt: skip
EBCLR_LINEAR = "configs/linear/ebclr-fashionmnist.yaml"

TABLES: dict[str, Table] = {t.name: t for t in [
    Table(
        "hcl-table1", "hyperbolic-contrastive-learning", "HCL Table 1: SimCLR vs HCL, linear top-1",
        "HCL improves SimCLR on every dataset, by at least 0.44 points (IN-100)",
        {
            "cpu": (Column("Fashion-MNIST", "CIFAR-10", _pair("hcl", "simclr", "HCL", "SimCLR", FMNIST),
                           ("max_epochs=10",)),),
            "gpu": _gpu_columns("hcl", "simclr", "HCL", "SimCLR", T1_DATASETS),
        },
    ),
    Table(
        "hcl-table2", "hyperbolic-contrastive-learning", "HCL Table 2: SupCon vs SHCL, top-1",
        "SHCL is slightly superior to SupCon (and to cross-entropy, which is not trained here: "
        "this package has no supervised trainer; the paper's CE numbers are in the data file)",
        {
            "cpu": (Column("Fashion-MNIST", "CIFAR-10", _pair("shcl", "supcon", "SHCL", "SupCon", FMNIST),
                           ("max_epochs=10",)),),
            "gpu": _gpu_columns("shcl", "supcon", "SHCL", "SupCon",
                                [("cifar10", "CIFAR-10", None, None), ("cifar100", "CIFAR-100", None, None)]),
        },
        untrained=(("ce", "cross-entropy"),),
    ),
    Table(
        "hcl-table3", "hyperbolic-contrastive-learning",
        "HCL Table 3: white-box l_inf PGD (SimCLR, HCL, RoCL, RHCL, RHCL+AT)",
        "RHCL is more robust than RoCL (29.94 vs 26.57 under PGD) at a similar clean accuracy; "
        "SimCLR and HCL are not robust; adversarial fine-tuning (AT) improves RHCL further",
        {
            "cpu": (Column("Fashion-MNIST", "CIFAR-10", _robust_rows(FMNIST),
                           ("data.train_subset=10000", "max_epochs=1"), tag="-t3",
                           robust_config="configs/robust/fashionmnist.yaml",
                           budget="robust-eval: configs/robust/fashionmnist.yaml"),),
            "gpu": (Column("CIFAR-10", "CIFAR-10", _robust_rows("configs/pretrain/cifar10"),
                           robust_config="configs/robust/cifar10.yaml",
                           budget="the paper's recipe; robust-eval: configs/robust/cifar10.yaml"),),
        },
        robust=True,
    ),
    Table(
        "hcl-table4", "hyperbolic-contrastive-learning", "HCL Table 4: HCL's curvature c",
        "HCL is only slightly affected by c (86.72-87.98 on CIFAR-10); c = 0.6 is best",
        {
            "cpu": (Column("Fashion-MNIST", "CIFAR-10", _curvature_rows(f"{FMNIST}/hcl.yaml"),
                           ("data.train_subset=10000", "max_epochs=1"), tag="-ab"),),
            "gpu": (Column("CIFAR-10", "CIFAR-10", _curvature_rows("configs/pretrain/cifar10/hcl.yaml"),
                           budget="the paper's recipe (configs/pretrain/cifar10/hcl.yaml)"),),
        },
        best=Best(tuple(f"c={c}" for c in CURVATURES), "c", CURVATURE, claimed="c=0.6"),
    ),
    Table(
        "hcl-normalization", "hyperbolic-contrastive-learning",
        "HCL section 4.4: normalising the projector output before expmap0",
        "without normalisation HCL drops from 87.98 to 85.37 (CIFAR-10) and 55.89 to 46.44 "
        "(CIFAR-100): the normalisation is vital",
        {
            "cpu": (Column("Fashion-MNIST", "CIFAR-10", _normalization_rows(f"{FMNIST}/hcl.yaml"),
                           ("data.train_subset=10000", "max_epochs=1"), tag="-ab"),),
            "gpu": tuple(
                Column(paper, paper, _normalization_rows(f"configs/pretrain/{folder}/hcl.yaml"),
                       budget=f"the paper's recipe (configs/pretrain/{folder}/hcl.yaml)")
                for folder, paper in (("cifar10", "CIFAR-10"), ("cifar100", "CIFAR-100"))
            ),
        },
    ),
    Table(
        "ebclr-table1", "energy-based-contrastive-learning",
        "EBCLR Table 1: EBCLR vs SimCLR, MoCo v2, SimSiam, BYOL (Fashion-MNIST column)",
        "EBCLR consistently outperforms every baseline in linear evaluation, with at least x4 "
        "fewer epochs than the contrastive methods",
        {
            "cpu": (Column("Fashion-MNIST", "FMNIST", _small_cnn(EBCLR_T1_ROWS),
                           ("data.train_subset=10000", "max_epochs=1"),
                           budget="the official configs' optimisers and augmentations, every "
                           "encoder the small CNN (ResNet-18 on the GPU)"),),
            "gpu": (Column("Fashion-MNIST", "FMNIST", EBCLR_T1_ROWS, linear_config=EBCLR_LINEAR,
                           budget="the paper's recipe (ResNet-18, 100 epochs; EBCLR's linear "
                           "protocol)"),),
        },
    ),
    Table(
        "ebclr-table3", "energy-based-contrastive-learning",
        "EBCLR Table 3: EBCLR vs SimCLR at batch 16, 64, 128",
        "EBCLR beats SimCLR at every batch size and is invariant to it; SimCLR degrades as the "
        "batch shrinks, so EBCLR at 16 beats SimCLR at 128",
        {
            "cpu": (
                Column("short", "FMNIST", EBCLR_T3_ROWS,
                       ("data.train_subset=5000", "max_epochs=1"), tag="-short",
                       budget="the batch-study configs (small CNN, no schedule)"),
                Column("long", "FMNIST", EBCLR_T3_ROWS,
                       ("data.train_subset=5000", "max_epochs=4"), tag="-long",
                       budget="the batch-study configs (small CNN, no schedule)"),
            ),
            "gpu": (Column("Fashion-MNIST", "FMNIST", EBCLR_T3_ROWS, linear_config=EBCLR_LINEAR,
                           budget="the paper's 100 epochs, the batch-study encoders, EBCLR's "
                           "linear protocol"),),
        },
        # four times fewer epochs: EBCLR's short column against SimCLR's long one, batch by batch;
        # then what the 4x longer budget gives each row
        across=(*(Across("short", f"ebclr-b{b}", "long", f"simclr-b{b}",
                         "the method and 4x the epochs", RECIPE + EPOCHS,
                         family="EBCLR needs 4x fewer epochs, at every batch") for b in BATCHES),
                *(Across("long", r.key, "short", r.key, "4x the epochs", EPOCHS)
                  for r in EBCLR_T3_ROWS)),
    ),
]}  # fmt: skip

# what reproduce --list names but cannot run here, and why
NOT_RUNNABLE = {
    "ebclr-table2": "EBCLR Table 2 (transfer between datasets): needs a second dataset on the "
    "machine and a transfer probe; only Fashion-MNIST is installed here",
    "ebclr-figures": "EBCLR Figs. 1, 3, 4 (epochs, lambda, projection dimension, rho, q0, SGLD vs "
    "MSGLD): the paper's text gives no numbers; `sweep lambda2|rho` trains their curves",
}

# pretraining throughput (images/s) on the 2-core development machine with 2 torch threads,
# measured by this package's runs; the dry run's estimate (GPU scale: no measured figure)
CPU_IMAGES_PER_S = {"simclr": 900.0, "hcl": 850.0, "supcon": 1000.0, "shcl": 950.0,
                    "rocl": 200.0, "rhcl": 190.0, "ebclr": 150.0, "mocov2plus": 500.0,
                    "byol": 600.0, "simsiam": 800.0}  # fmt: skip
CPU_EVAL_S = 90.0  # kNN + converged probe on the full 60,000 / 10,000 splits
CPU_ROBUST_S = 300.0  # robust-eval with configs/robust/fashionmnist.yaml
CPU_FINETUNE_S = 200.0
TRAIN_IMAGES = {"mnist": 60000, "fashionmnist": 60000, "cifar10": 50000, "cifar100": 50000}


__all__ = ["NOT_RUNNABLE", "TABLES", "Across", "Best", "Claim", "Column", "Row", "Table"]
