"""What each paper table is: its rows (a config and the overrides that make the row), the column
(dataset) each group of runs measures, the budget of each scale, and the paper cell beside it.

``cpu``: Fashion-MNIST (and MNIST, HCL Tables 1-2 and EBCLR's) with the small CNN, a budget a
2-core machine affords (stated in the table);
``gpu``: the paper's recipe (the configs under configs/pretrain/<dataset>/ and configs/ebclr/).
The paper's numbers are in ``paper_numbers.yaml``, one entry per (table, row, column, metric).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Primary:
    """A pair's claim as the paper makes it, declared before the runs: one metric of record (a
    result key, e.g. 'r-LE AA 8/255'), with the paper's own attack printed beside it; every other
    metric of the pair (other heads, radii, attacks) is one exploratory family, Holm-adjusted
    together, whose verdicts are read from the adjusted intervals only."""

    of_record: str  # the metric the claim is decided on
    beside: tuple[str, ...] = ()  # printed beside it (the paper's attack), from the family
    exploratory: str = ""  # the secondary family's words


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
    primary: Primary | None = None  # set: the claim's metric of record; the others exploratory


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
    twin: str = ""  # the twin of the other geometry (RoCL for RHCL, RHCL for RoCL): the robust
    # diagnostics' transfer attack is crafted on its run of the same seed
    seeds: int = 0  # how many seeds (0, 1, ...) the row trains when --seeds is not given; 0: the
    # campaign's default


@dataclass(frozen=True)
class Column:
    """The runs of one dataset: at CPU scale Fashion-MNIST (and MNIST) columns, at GPU scale one
    per dataset of the paper. ``paper_column`` names the paper column printed beside it;
    ``eval_dataset`` (EBCLR's transfer table) evaluates the runs on another dataset's splits."""

    name: str
    paper_column: str
    rows: tuple[Row, ...]
    overrides: tuple[str, ...] = ()  # the budget of this scale, for every row
    tag: str = ""  # added to run names, so that two budgets of one config keep two runs
    linear_config: str | None = None  # None: the dataset's default protocol
    robust_config: str | None = None  # set: robust-eval (LE, r-LE under PGD) of every run
    data_dir: str | None = None  # folder under --data-root holding train/ and val/
    budget: str = ""
    eval_dataset: str | None = None  # transfer: kNN and probe on this dataset's splits


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
    paper: str  # "": a table of this package's own (no paper's numbers beside it)
    title: str
    claim: str  # what the paper (or the table) says it shows
    scales: dict[str, tuple[Column, ...]] = field(default_factory=dict)
    robust: bool = False  # rows read robust-eval's accuracies instead of the linear probe
    untrained: tuple[tuple[str, str], ...] = ()  # (row, title) the paper has and this package
    # cannot train: printed with the paper's number only
    across: tuple[Across, ...] = ()
    best: Best | None = None


FMNIST = "configs/pretrain/fashionmnist"
MNIST = "configs/pretrain/mnist"

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
LOSS = ("method",)  # a supervised loss against cross-entropy: the method and its own arguments


def _pair(a: str, b: str, title_a: str, title_b: str, folder: str) -> tuple[Row, Row]:
    return (Row(b, title_b, f"{folder}/{b}.yaml"),
            Row(a, title_a, f"{folder}/{a}.yaml", claims=(Claim(b, "the geometry", GEOMETRY),)))  # fmt: skip


def _cpu_pair_columns(a: str, b: str, ta: str, tb: str) -> tuple[Column, ...]:
    """HCL Tables 1 and 2 on the CPU: Fashion-MNIST and MNIST (a second dataset for the claim),
    10 epochs on the full split each; the paper's numbers are its CIFAR-10 column."""
    return tuple(Column(name, "CIFAR-10", _pair(a, b, ta, tb, folder), ("max_epochs=10",))
                 for name, folder in (("Fashion-MNIST", FMNIST), ("MNIST", MNIST)))  # fmt: skip


def _supervised_columns() -> tuple[Column, ...]:
    """HCL Table 2 on the CPU: HCL Table 1's columns for SHCL vs SupCon, and cross-entropy (the
    same encoder trained end to end on the labels, SupCon's recipe and budget) as the table's
    supervised reference, SHCL paired with it too."""
    columns = []
    for column in _cpu_pair_columns("shcl", "supcon", "SHCL", "SupCon"):
        folder = FMNIST if column.name == "Fashion-MNIST" else MNIST
        supcon, shcl = column.rows
        ce = Row("ce", "cross-entropy", f"{folder}/supervised.yaml")
        shcl = Row(shcl.key, shcl.title, shcl.config,
                   claims=(*shcl.claims, Claim("ce", "the loss (SHCL's vs cross-entropy)", LOSS)))  # fmt: skip
        columns.append(Column(column.name, column.paper_column, (ce, supcon, shcl), column.overrides))
    return tuple(columns)


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


# HCL Table 3's claim as the paper makes it (section 4.2: linear evaluation with adversarial
# examples after fixing the backbone, i.e. r-LE; l_inf at 8/255), AutoAttack's standard version the
# attack of record, the paper's white-box PGD (PGD-20 here) beside it
RHCL_OVER_ROCL = Primary(
    "r-LE AA 8/255", beside=("r-LE PGD-20 8/255",),
    exploratory="RHCL - RoCL on every other head, radius and attack")  # fmt: skip
PRIMARY_SEEDS = 5  # the primary claim's pair at CPU scale; the other rows the campaign's default


def _robust_rows(folder: str, primary_seeds: int = 0) -> tuple[Row, ...]:
    """HCL Table 3's rows; ``primary_seeds``: the seeds of RoCL and RHCL, the primary claim's
    pair (0: the campaign's default, as every other row)."""
    attack = "the adversarial training"
    return (
        Row("simclr", "SimCLR", f"{folder}/simclr.yaml", twin="hcl"),
        Row("hcl", "HCL", f"{folder}/hcl.yaml", claims=(Claim("simclr", "the geometry", GEOMETRY),),
            twin="simclr"),
        # "SimCLR and HCL are not robust": each robust method against its own recipe without the
        # attack (simclr.yaml / hcl.yaml differ from RoCL's recipe in temperature, augmentation
        # and input normalisation too)
        Row("simclr-rocl-recipe", "SimCLR, RoCL's recipe", f"{folder}/simclr-rocl-recipe.yaml"),
        Row("hcl-rhcl-recipe", "HCL, RHCL's recipe", f"{folder}/hcl-rhcl-recipe.yaml"),
        Row("rocl", "RoCL", f"{folder}/rocl.yaml",
            claims=(Claim("simclr-rocl-recipe", attack, ATTACK),), twin="rhcl", seeds=primary_seeds),
        Row("rhcl", "RHCL", f"{folder}/rhcl.yaml",
            claims=(Claim("rocl", "the geometry", GEOMETRY, primary=RHCL_OVER_ROCL),
                    Claim("hcl-rhcl-recipe", attack, ATTACK)),
            twin="rocl", seeds=primary_seeds),
        # the fine-tuning is the row's own (finetune-adv of RHCL's runs): the same config
        Row("rhcl-at", "RHCL+AT", f"{folder}/rhcl.yaml",
            claims=(Claim("rhcl", "the adversarial fine-tuning", ()),), finetune=True, twin="rocl"),
    )  # fmt: skip


def ebclr_t1_rows(dataset: str) -> tuple[Row, ...]:
    """EBCLR Table 1's rows on one dataset: the official EBCLR config and its four baselines."""
    base = f"configs/ebclr/baselines/{dataset}"
    return (
        Row("simclr", "SimCLR", f"{base}-simclr.yaml"),
        Row("mocov2plus", "MoCo v2", f"{base}-mocov2plus.yaml"),
        Row("simsiam", "SimSiam", f"{base}-simsiam.yaml"),
        Row("byol", "BYOL", f"{base}-byol.yaml"),
        # "EBCLR consistently outperforms every baseline": paired with each
        Row("ebclr", "EBCLR", f"configs/ebclr/{dataset}-official.yaml",
            claims=tuple(Claim(b, "the method, each with its official recipe", OFFICIAL,
                               family="EBCLR outperforms every baseline")
                         for b in ("simclr", "mocov2plus", "simsiam", "byol"))),
    )  # fmt: skip


EBCLR_T1_ROWS = ebclr_t1_rows("fashionmnist")


def _small_cnn(rows: tuple[Row, ...]) -> tuple[Row, ...]:
    """The EBCLR Table 1 rows on the CPU: every encoder the small CNN (EBCLR's without batch
    norm, as its official no-BN ResNet) and EBCLR's replay buffer 5,000 chains (as the CPU
    batch-study configs: on a 10,000-image subset a 50,000-chain buffer is drawn about 0.2 times
    per slot in an epoch, the official 50,000 on 60,000 images about 1.2 times), the papers'
    optimisers and augmentations otherwise."""
    out = []
    for r in rows:
        extra = ["backbone.name=small_cnn"]
        if r.key == "ebclr":
            extra += ["backbone.kwargs={batch_norm: false}", "method_kwargs.buffer_size=5000"]
        else:
            extra.append("backbone.kwargs={}")
        out.append(Row(r.key, r.title, r.config, (*r.overrides, *extra), "-small_cnn", r.claims))
    return tuple(out)


BATCHES = (16, 64, 128)


def ebclr_t3_rows(folder: str) -> tuple[Row, ...]:
    """EBCLR Table 3's rows: EBCLR and SimCLR at each batch of the batch-study configs."""
    return tuple(
        row
        for b in BATCHES
        for row in (
            # beyond EBCLR vs SimCLR at each batch, the paper's batch claims: SimCLR degrades as
            # the batch shrinks, EBCLR does not, and EBCLR at 16 beats SimCLR at 128
            Row(f"simclr-b{b}", f"SimCLR, batch {b}", f"{folder}/simclr-b{b}.yaml",
                claims=(Claim("simclr-b128", "the batch", BATCH),) if b == 16 else ()),
            Row(f"ebclr-b{b}", f"EBCLR, batch {b}", f"{folder}/ebclr-b{b}.yaml",
                claims=(Claim(f"simclr-b{b}", "the method, each with its recipe", RECIPE,
                              family="EBCLR beats SimCLR at every batch size"),) + ((
                    Claim("simclr-b128", "the method and the batch", RECIPE + BATCH),
                    Claim("ebclr-b128", "the batch", BATCH)) if b == 16 else ())),
        )
    )  # fmt: skip


EBCLR_T3_ROWS = ebclr_t3_rows("configs/ebclr/batch-study")
EBCLR_T3_MNIST_ROWS = ebclr_t3_rows("configs/ebclr/batch-study/mnist")
# the dataset of each EBCLR column: (name, the paper's column, configs' dataset)
EBCLR_DATASETS = (("MNIST", "MNIST", "mnist"), ("Fashion-MNIST", "FMNIST", "fashionmnist"),
                  ("CIFAR-10", "CIFAR10", "cifar10"), ("CIFAR-100", "CIFAR100", "cifar100"))  # fmt: skip
EBCLR_CPU = ("data.train_subset=10000", "max_epochs=1")
EBCLR_CPU_BUDGET = ("the official configs' optimisers and augmentations, every encoder the small "
                    "CNN (ResNet-18 on the GPU), EBCLR's buffer 5,000 chains (50,000 on the GPU)")  # fmt: skip
# transfer (EBCLR Table 2): (source, target) by the names above; the CPU has the MNIST pair
TRANSFERS = (("MNIST", "Fashion-MNIST"), ("Fashion-MNIST", "MNIST"),
             ("CIFAR-10", "CIFAR-100"), ("CIFAR-100", "CIFAR-10"))  # fmt: skip


def ebclr_linear(dataset: str) -> str:
    """EBCLR's own linear protocol (Adam, 200 epochs on precomputed features) for a dataset."""
    return f"configs/linear/ebclr-{dataset}.yaml"


def _ebclr_t1_columns(scale: str) -> tuple[Column, ...]:
    if scale == "cpu":
        return tuple(Column(name, paper, _small_cnn(ebclr_t1_rows(ds)), EBCLR_CPU,
                            budget=EBCLR_CPU_BUDGET)
                     for name, paper, ds in EBCLR_DATASETS[:2])  # fmt: skip
    return tuple(Column(name, paper, ebclr_t1_rows(ds), linear_config=ebclr_linear(ds),
                        budget="the paper's recipe (ResNet-18, 100 epochs; EBCLR's linear protocol)")
                 for name, paper, ds in EBCLR_DATASETS)  # fmt: skip


def _ebclr_t2_columns(scale: str) -> tuple[Column, ...]:
    """One column per direction: the source's Table 1 runs (reused), evaluated on the target."""
    info = {name: (paper, ds) for name, paper, ds in EBCLR_DATASETS}
    out = []
    for source, target in TRANSFERS[:2] if scale == "cpu" else TRANSFERS:
        (paper_s, src), (paper_t, tgt) = info[source], info[target]
        rows = ebclr_t1_rows(src)
        common = dict(eval_dataset=tgt, paper_column=f"{paper_s}->{paper_t}")
        if scale == "cpu":
            out.append(Column(f"{paper_s}->{paper_t}", rows=_small_cnn(rows), overrides=EBCLR_CPU,
                              budget=EBCLR_CPU_BUDGET + f"; evaluated on {target}", **common))  # fmt: skip
        else:
            out.append(Column(f"{paper_s}->{paper_t}", rows=rows, linear_config=ebclr_linear(tgt),
                              budget=f"the paper's recipe on {source}; EBCLR's linear protocol "
                              f"on {target}", **common))  # fmt: skip
    return tuple(out)


def _ebclr_t3_across(prefix: str) -> tuple[Across, ...]:
    """Four times fewer epochs: EBCLR's short column against SimCLR's long one, batch by batch;
    then what the 4x longer budget gives each row (one dataset's columns)."""
    return (*(Across(f"{prefix}short", f"ebclr-b{b}", f"{prefix}long", f"simclr-b{b}",
                     "the method and 4x the epochs", RECIPE + EPOCHS,
                     family=f"EBCLR needs 4x fewer epochs, at every batch{' (' + prefix.strip() + ')' if prefix else ''}")
              for b in BATCHES),
            *(Across(f"{prefix}long", r.key, f"{prefix}short", r.key, "4x the epochs", EPOCHS)
              for r in EBCLR_T3_ROWS))  # fmt: skip


# solo-learn 1.0.2's bundled self-supervised baselines with a Fashion-MNIST config (key: the
# config's stem and method; title: solo-learn's name); SupCon stands beside SHCL (HCL Table 2)
BUNDLED = (("barlow_twins", "Barlow Twins"), ("byol", "BYOL"), ("deepclusterv2", "DeepCluster V2"),
           ("dino", "DINO"), ("mocov2plus", "MoCo V2+"), ("nnbyol", "NNBYOL"), ("nnclr", "NNCLR"),
           ("nnsiam", "NNSiam"), ("ressl", "ReSSL"), ("simclr", "SimCLR"), ("simsiam", "SimSiam"),
           ("swav", "SwAV"), ("vicreg", "VICReg"), ("wmse", "W-MSE"))  # fmt: skip
# HCL against a bundled baseline: each method with its own recipe, solo-learn's for the baselines
# (its loss, momentum and queue settings, head widths, optimiser, SwAV's and DeepCluster V2's
# end learning rate, ReSSL's weak teacher view), the main job's for HCL; docs/fairness.md
OWN_RECIPE = ("method", "method_kwargs", "optimizer", "scheduler.min_lr", "augmentations")
# the main job's budget (scripts/main.sh): 2 epochs on a 20,000-image subset, 156 steps of 256
MAIN_JOB = ("max_epochs=2", "data.train_subset=20000")


def _bundled_rows() -> tuple[Row, ...]:
    """HCL, paired with each bundled baseline (one claim over all of them, Holm-adjusted
    together), then the baselines, which are not compared among themselves."""
    claims = tuple(Claim(key, "the method, each with its own recipe", OWN_RECIPE,
                         family="HCL above every bundled baseline") for key, _ in BUNDLED)  # fmt: skip
    baselines = tuple(Row(key, title, f"{FMNIST}/{key}.yaml") for key, title in BUNDLED)
    return (Row("hcl", "HCL", f"{FMNIST}/hcl.yaml", claims=claims), *baselines)


TABLES: dict[str, Table] = {t.name: t for t in [
    Table(
        "hcl-table1", "hyperbolic-contrastive-learning", "HCL Table 1: SimCLR vs HCL, linear top-1",
        "HCL improves SimCLR on every dataset, by at least 0.44 points (IN-100)",
        {
            "cpu": _cpu_pair_columns("hcl", "simclr", "HCL", "SimCLR"),
            "gpu": _gpu_columns("hcl", "simclr", "HCL", "SimCLR", T1_DATASETS),
        },
    ),
    Table(
        "hcl-table2", "hyperbolic-contrastive-learning", "HCL Table 2: cross-entropy, SupCon and SHCL, top-1",
        "SHCL is slightly superior to SupCon and to cross-entropy (trained at CPU scale by the "
        "supervised method; at GPU scale the paper's CE numbers are printed)",
        {
            "cpu": _supervised_columns(),
            "gpu": _gpu_columns("shcl", "supcon", "SHCL", "SupCon",
                                [("cifar10", "CIFAR-10", None, None), ("cifar100", "CIFAR-100", None, None)]),
        },
        untrained=(("ce", "cross-entropy"),),
    ),
    Table(
        "hcl-table3", "hyperbolic-contrastive-learning",
        "HCL Table 3: white-box l_inf PGD (SimCLR, HCL, RoCL, RHCL, RHCL+AT)",
        "RHCL is more robust than RoCL (29.94 vs 26.57 under white-box PGD at 8/255, robust linear "
        "evaluation) at a similar clean accuracy; SimCLR and HCL are not robust; adversarial "
        "fine-tuning (AT) improves RHCL further",
        {
            # 3 epochs on the full split: the smallest measured budget at which RoCL and RHCL
            # are above their untrained network on clean accuracy under LE and r-LE (1 epoch on
            # 10,000 images is not; docs/robustness.md, "The budget at which pretraining helps")
            "cpu": (Column("Fashion-MNIST", "CIFAR-10", _robust_rows(FMNIST, PRIMARY_SEEDS),
                           ("data.train_subset=60000", "max_epochs=3"), tag="-t3",
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
        "baselines", "", "Every bundled baseline beside HCL: linear top-1 and kNN top-1",
        "HCL against each of solo-learn 1.0.2's 14 bundled self-supervised baselines, each method "
        "with its own recipe (docs/fairness.md), at the main job's budget; the baselines are not "
        "compared among themselves",
        {"cpu": (Column("Fashion-MNIST", "", _bundled_rows(), MAIN_JOB,
                        budget="each row with its own recipe (docs/fairness.md)"),)},
    ),
    Table(
        "ebclr-table1", "energy-based-contrastive-learning",
        "EBCLR Table 1: EBCLR vs SimCLR, MoCo v2, SimSiam, BYOL",
        "EBCLR consistently outperforms every baseline in linear evaluation, with at least x4 "
        "fewer epochs than the contrastive methods",
        {"cpu": _ebclr_t1_columns("cpu"), "gpu": _ebclr_t1_columns("gpu")},
    ),
    Table(
        "ebclr-table2", "energy-based-contrastive-learning",
        "EBCLR Table 2: transfer (pretrained on one dataset, probed on another)",
        "EBCLR always outperforms the baseline methods in transfer, the gap especially large on "
        "CIFAR-10 and CIFAR-100",
        {"cpu": _ebclr_t2_columns("cpu"), "gpu": _ebclr_t2_columns("gpu")},
    ),
    Table(
        "ebclr-table3", "energy-based-contrastive-learning",
        "EBCLR Table 3: EBCLR vs SimCLR at batch 16, 64, 128",
        "EBCLR beats SimCLR at every batch size and is invariant to it; SimCLR degrades as the "
        "batch shrinks, so EBCLR at 16 beats SimCLR at 128",
        {
            "cpu": tuple(
                Column(f"{prefix}{length}", paper, rows, ("data.train_subset=5000", f"max_epochs={epochs}"),
                       tag=f"-{length}", budget="the batch-study configs (small CNN, no schedule)")
                for prefix, paper, rows in (("", "FMNIST", EBCLR_T3_ROWS), ("MNIST ", "MNIST", EBCLR_T3_MNIST_ROWS))
                for length, epochs in (("short", 1), ("long", 4))
            ),
            "gpu": tuple(
                Column(name, paper, rows, linear_config=ebclr_linear(ds),
                       budget="the paper's 100 epochs, the batch-study encoders, EBCLR's linear protocol")
                for name, paper, ds, rows in (("Fashion-MNIST", "FMNIST", "fashionmnist", EBCLR_T3_ROWS),
                                              ("MNIST", "MNIST", "mnist", EBCLR_T3_MNIST_ROWS))
            ),
        },
        across=(*_ebclr_t3_across(""), *_ebclr_t3_across("MNIST ")),
    ),
]}  # fmt: skip

# what reproduce --list names but cannot run here, and why
NOT_RUNNABLE = {
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


__all__ = ["NOT_RUNNABLE", "TABLES", "Across", "Best", "Claim", "Column", "Primary", "Row", "Table"]
