"""The CPU protocol of HCL Table 3's robustness columns, in parts a 2-core machine can pay for.

The standard AutoAttack costs about a hundred PGD-20 evaluations per image on a model that
resists it, so at CPU scale it runs where the claim is decided and a cheaper, standard-derived
attack everywhere else, all on one fixed class-stratified subset of test images
(``evaluation.images``: every model attacked on the same images, so the differences pair):

- a: AutoAttack's standard version at the paper's radius 8/255 for RoCL and RHCL (LE and r-LE)
  and for SimCLR and HCL (LE);
- b: APGD-CE + APGD-T (the standard version's first two stages, exactly as it configures them)
  at 8/255 for every row, head and control (the rows of part a too, so that every pair of the
  table, the clean pairs included, has one attack in common beyond PGD), and at 0.1 (the
  Fashion-MNIST literature's radius) for RoCL and RHCL;
- c: APGD-CE + APGD-T at 16/255 for RoCL and RHCL, as the budget allows.

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
APGD_8 = _autoattack("apgd_8", "8/255", stages=True)
APGD_01 = _autoattack("apgd_01", "0.1", stages=True)
APGD_16 = _autoattack("apgd_16", "16/255", stages=True)
LE_ONLY = "linear.robust=false"

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
        Part("a", "AutoAttack (standard) at 8/255: RoCL and RHCL (LE, r-LE), SimCLR and HCL (LE)", (
            Job(("rocl", "rhcl"), (*COMMON, AA_8), attack="AA"),
            Job(("simclr", "hcl"), (*COMMON, AA_8, LE_ONLY), attack="AA"),
        )),
        Part("b", "APGD-CE + APGD-T at 8/255 for every row, head and control (every pair then has "
             "one attack in common); at 0.1 for RoCL and RHCL", (
            Job(("simclr", "hcl", "simclr-rocl-recipe", "hcl-rhcl-recipe", "rocl", "rhcl", "rhcl-at"),
                (*COMMON, NO_AA_8, APGD_8), controls=True),
            Job(("rocl", "rhcl"), (*COMMON, NO_AA_8, APGD_01)),
        )),
        Part("c", "APGD-CE + APGD-T at 16/255 for RoCL and RHCL", (
            Job(("rocl", "rhcl"), (*COMMON, NO_AA_8, APGD_16)),
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


def job_models(job: Job, seeds: int, finetuned: frozenset[str] = frozenset({"rhcl-at"})) -> int:
    """Model evaluations of a job: each row's heads (a fine-tuned row: its one AT model) per
    seed, and with controls each seed's untrained network and the raw pixels (two heads each)."""
    per_seed = sum(1 if row in finetuned else len(job.heads) for row in job.rows)
    controls = (seeds + 1) * len(job.heads) if job.controls else 0
    return per_seed * seeds + controls


def job_seconds(job: Job, seeds: int) -> float:
    """CPU seconds of a job on one thread with nothing cached: per model its head, the PGD
    columns and the added attack on IMAGES images, and the diagnostics."""
    per_image = PGD_COLUMNS * CPU_S_PER_IMAGE["PGD-20"] + CPU_S_PER_IMAGE[job.attack]
    return job_models(job, seeds) * (CPU_HEAD_S + IMAGES * per_image + CPU_DIAGNOSTICS_S)


def command(table: str, job: Job) -> str:
    """The job as a plain reproduce command."""
    quoted = " ".join(f"'{o}'" if " " in o else o for o in job.overrides)
    controls = "" if job.controls else " --no-controls"
    return (f"python -m solo_hyper reproduce {table} --scale cpu --rows {' '.join(job.rows)}"
            f"{controls} --robust-set {quoted}")  # fmt: skip


def estimate_text(table: str, seeds: int, chosen: str | None = None) -> str:
    """Every part's CPU estimate (one thread, nothing cached; runs already trained), the chosen
    one marked, each job with its command."""
    from solo_hyper.reproduce.planning import duration

    lines = [f"robust protocol of {table} at CPU scale ({IMAGES} class-stratified test images, "
             f"{seeds} seed(s); CPU-hours on one thread, nothing cached, runs already trained):"]  # fmt: skip
    for p in parts(table):
        seconds = sum(job_seconds(j, seeds) for j in p.jobs)
        models = sum(job_models(j, seeds) for j in p.jobs)
        mark = " <- this run" if p.key == chosen else ""
        lines.append(f"  part {p.key}: {p.title}: {models} model evaluations, est. "
                     f"{duration(seconds)}{mark}")  # fmt: skip
        for j in p.jobs:
            lines.append(f"    {command(table, j)}")
    return "\n".join(lines)


__all__ = ["PARTS", "Job", "Part", "estimate_text", "part", "parts"]
