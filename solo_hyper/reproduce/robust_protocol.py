"""The CPU protocol of HCL Table 3's robustness columns, in parts a 2-core machine can pay for.

The standard AutoAttack costs about a hundred PGD-20 evaluations per image on a model that
resists it, so at CPU scale it runs where the claim is decided and a cheaper, standard-derived
attack everywhere else, all on one fixed class-stratified subset of test images
(``evaluation.images``: every model attacked on the same images, so the differences pair):

- a: AutoAttack's standard version at the paper's radius 8/255 for RoCL and RHCL (LE and r-LE),
  for SimCLR and HCL (LE) and for RHCL+AT (AT), the diagnostics at 8/255;
- b: APGD-CE + APGD-T (the standard version's first two stages, exactly as it configures them)
  at 8/255 for every row, head and control (the rows of part a too, so that every pair of the
  table, the clean pairs included, has one attack in common beyond PGD); the standard version at
  0.1 (the Fashion-MNIST literature's radius) for RoCL and RHCL, every diagnostic at 0.1;
- c: the standard version at 16/255 for RoCL and RHCL, every diagnostic at 16/255;
- d, the claim: RoCL and RHCL under every attack of a-c at once, all read from their caches (run
  after them; it attacks nothing they did not): one table in which the primary claim (r-LE,
  AutoAttack at 8/255) stands beside one exploratory family, Holm-adjusted over every other head,
  radius and attack of the pair, rather than one family per part.

Every radius that carries a verdict of RHCL - RoCL is thus attacked by the full standard
AutoAttack and checked by every gradient-masking diagnostic at that radius.

Each part is one or more ``reproduce`` jobs (rows and ``--robust-set`` overrides); every
evaluation is cached per model and attack (``evaluation/robust_cache.py``), so a part stopped
half-way resumes where it was and a later part never redoes an earlier one's heads or attacks.
The GPU scale runs the full standard version everywhere instead (configs/robust/cifar10.yaml).
"""

from __future__ import annotations

from dataclasses import dataclass

from solo_hyper.config import ConfigError, closest

IMAGES = 500
# the shipped config's AutoAttack entries (standard, three radii) give way to each part's own
COMMON = (f"evaluation.images={IMAGES}", "evaluation.attacks.aa_16=null",
          "evaluation.attacks.aa_01=null")  # fmt: skip
NO_AA_8 = "evaluation.attacks.aa_8=null"


def _autoattack(name: str, eps: str, stages: bool) -> str:
    entry = (f"{{eps: {eps}, version: custom, attacks: [apgd-ce, apgd-t]}}" if stages
             else f"{{eps: {eps}, version: standard}}")  # fmt: skip
    return f"evaluation.attacks.{name}={{autoattack: {entry}}}"


AA_8 = _autoattack("aa_8", "8/255", stages=False)
AA_01 = _autoattack("aa_01", "0.1", stages=False)
AA_16 = _autoattack("aa_16", "16/255", stages=False)
APGD_8 = _autoattack("apgd_8", "8/255", stages=True)
LE_ONLY = "linear.robust=false"
PRIMARY_PAIR = ("rocl", "rhcl")


def _diagnosed_at(eps: str) -> str:
    """Every gradient-masking diagnostic (black-box, unbounded, monotone, transfer, gradients,
    strength) at this radius."""
    return f"evaluation.diagnostics.eps={eps}"

# CPU seconds per image and model, one torch thread, the fast attacked model: the standard
# version at 2 s (1-3 s measured on main-job runs), the others by the ratios of
# benchmarks/results/attacked-model.md (standard ~105 PGD-20 evaluations per image, APGD-CE +
# APGD-T ~27); the diagnostics per model (100 images, Square 5,000 queries) and a head's
# training (cached once per model), both rough.
CPU_S_PER_IMAGE = {"PGD-20": 0.02, "AA": 2.0, "APGD": 0.5}
CPU_DIAGNOSTICS_S = 200.0
CPU_HEAD_S = 120.0
PGD_COLUMNS = 3  # configs/robust/fashionmnist.yaml's PGD-20 at 8/255, 16/255 and 0.1


@dataclass(frozen=True)
class Job:
    """One ``reproduce`` invocation of a part: its rows, its robust overrides, and whether the
    controls (untrained networks, raw pixels) are evaluated under it."""

    rows: tuple[str, ...]
    overrides: tuple[str, ...]
    controls: bool = False
    attack: str = "APGD"  # the cost class of its added attack (CPU_S_PER_IMAGE)
    cached: bool = False  # every evaluation it reads was made by the earlier parts: costs none

    @property
    def heads(self) -> tuple[str, ...]:
        return ("LE",) if LE_ONLY in self.overrides else ("LE", "r-LE")


@dataclass(frozen=True)
class Part:
    key: str
    title: str
    jobs: tuple[Job, ...]


PARTS: dict[str, tuple[Part, ...]] = {
    "hcl-table3": (
        Part("a", "AutoAttack (standard) at 8/255: RoCL and RHCL (LE, r-LE), SimCLR and HCL (LE), "
             "RHCL+AT (AT)", (
            Job(PRIMARY_PAIR, (*COMMON, AA_8), attack="AA"),
            Job(("simclr", "hcl"), (*COMMON, AA_8, LE_ONLY), attack="AA"),
            Job(("rhcl-at",), (*COMMON, AA_8), attack="AA"),
        )),
        Part("b", "APGD-CE + APGD-T at 8/255 for every row, head and control (every pair then has "
             "one attack in common); AutoAttack (standard) and every diagnostic at 0.1 for RoCL "
             "and RHCL", (
            Job(("simclr", "hcl", "simclr-rocl-recipe", "hcl-rhcl-recipe", "rocl", "rhcl", "rhcl-at"),
                (*COMMON, NO_AA_8, APGD_8), controls=True),
            Job(PRIMARY_PAIR, (*COMMON, NO_AA_8, AA_01, _diagnosed_at("0.1")), attack="AA"),
        )),
        Part("c", "AutoAttack (standard) and every diagnostic at 16/255 for RoCL and RHCL", (
            Job(PRIMARY_PAIR, (*COMMON, NO_AA_8, AA_16, _diagnosed_at("16/255")), attack="AA"),
        )),
        Part("d", "the claim: RoCL and RHCL under every attack of a-c in one table (read from "
             "their caches; run after them): the primary claim and one exploratory family", (
            Job(PRIMARY_PAIR, (f"evaluation.images={IMAGES}", AA_8, AA_16, AA_01, APGD_8), attack="AA",
                cached=True),
        )),
    ),
}  # fmt: skip


def parts(table: str) -> tuple[Part, ...]:
    if table not in PARTS:
        raise ConfigError(f"--robust-part: {table} has no robust protocol in parts; the tables "
                          f"with one: {', '.join(PARTS)}")  # fmt: skip
    return PARTS[table]


def part(table: str, key: str) -> Part:
    found = {p.key: p for p in parts(table)}
    if key not in found:
        raise ConfigError(f"--robust-part: {table} has no part {key!r}{closest(key, list(found))}; "
                          f"its parts are {', '.join(found)}")  # fmt: skip
    return found[key]


def job_models(job: Job, seeds: dict[str, int], finetuned: frozenset[str] = frozenset({"rhcl-at"})) -> int:
    """Model evaluations of a job: each row's heads (a fine-tuned row: its one AT model) times its
    seeds (``seeds``: row -> how many), and with controls each seed's untrained network and the
    raw pixels (two heads each)."""
    models = sum((1 if row in finetuned else len(job.heads)) * seeds[row] for row in job.rows)
    controls = (max(seeds[row] for row in job.rows) + 1) * len(job.heads) if job.controls else 0
    return models + controls


def job_seconds(job: Job, seeds: dict[str, int]) -> float:
    """CPU seconds of a job on one thread with nothing cached: per model its head, the PGD
    columns and the added attack on IMAGES images, and the diagnostics; none for a job that
    reads the earlier parts' evaluations."""
    if job.cached:
        return 0.0
    per_image = PGD_COLUMNS * CPU_S_PER_IMAGE["PGD-20"] + CPU_S_PER_IMAGE[job.attack]
    return job_models(job, seeds) * (CPU_HEAD_S + IMAGES * per_image + CPU_DIAGNOSTICS_S)


def seed_counts(table: str, given: list[int] | None = None) -> dict[str, int]:
    """How many seeds each CPU row of the table evaluates: ``given`` (--seeds) for all, else each
    row's own count (``cells.row_seeds``)."""
    from solo_hyper.reproduce.cells import row_seeds
    from solo_hyper.reproduce.tables import TABLES

    return {row.key: len(row_seeds(row, given))
            for column in TABLES[table].scales["cpu"] for row in column.rows}  # fmt: skip


def command(table: str, job: Job) -> str:
    """The job as a plain reproduce command."""
    quoted = " ".join(f"'{o}'" if " " in o else o for o in job.overrides)
    controls = "" if job.controls else " --no-controls"
    return (f"python -m solo_hyper reproduce {table} --scale cpu --rows {' '.join(job.rows)}"
            f"{controls} --robust-set {quoted}")  # fmt: skip


def estimate_text(table: str, given: list[int] | None = None, chosen: str | None = None) -> str:
    """Every part's CPU estimate (one thread, nothing cached; runs already trained), the chosen
    one marked, each job with its command; ``given``: --seeds (else each row's own seeds)."""
    from solo_hyper.reproduce.planning import duration

    seeds = seed_counts(table, given)
    told = (f"{len(given)} seed(s)" if given is not None else "each row's seeds: " + ", ".join(
        f"{row} {n}" for row, n in seeds.items()))  # fmt: skip
    lines = [f"robust protocol of {table} at CPU scale ({IMAGES} class-stratified test images, "
             f"{told}; CPU-hours on one thread, nothing cached, runs already trained):"]  # fmt: skip
    for p in parts(table):
        seconds = sum(job_seconds(j, seeds) for j in p.jobs)
        models = sum(job_models(j, seeds) for j in p.jobs)
        mark = " <- this run" if p.key == chosen else ""
        cost = ("nothing new after the parts before it" if all(j.cached for j in p.jobs)
                else f"est. {duration(seconds)}")  # fmt: skip
        lines.append(f"  part {p.key}: {p.title}: {models} model evaluations, {cost}{mark}")
        for j in p.jobs:
            lines.append(f"    {command(table, j)}")
    return "\n".join(lines)


__all__ = ["PARTS", "Job", "Part", "estimate_text", "part", "parts", "seed_counts"]
