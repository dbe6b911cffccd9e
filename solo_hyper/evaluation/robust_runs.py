"""The robust evaluation of a campaign's run, or of a control, cached in its directory.

A robust row (HCL Table 3) is evaluated by ``robust-eval`` (LE and r-LE heads) or, for a
fine-tuned row (RHCL+AT), by ``finetune-adv``, with the column's robust config and the campaign's
``--robust-set`` overrides. What a directory stores is reused only when it was made with exactly
that config. Controls go through the very same functions: the network at initialisation (seeded
as the run) and the raw pixels, each written as a run-like checkpoint by
``evaluation.controls.write_control`` and evaluated like a run, so a robust row's gain over its
untrained backbone is the pretraining's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from solo_hyper.config.shipped import shipped_config
from solo_hyper.evaluation.robust import is_attack, load_robust_config


def robust_config(config: str, overrides: Sequence[str] = ()) -> dict:
    """The column's robust config under the overrides, fully checked (a ConfigError names a bad
    key before any work)."""
    return load_robust_config(str(shipped_config(config)), list(overrides))


def _stem(finetune: bool) -> str:
    return "finetune_adv" if finetune else "robust_eval"


def stored_rows(
    run_dir: Path, config: str, overrides: Sequence[str], finetune: bool, twin: Path | None = None
) -> list[dict] | None:
    """The run directory's stored robust evaluation when it was made with this config and these
    overrides and (with the diagnostics on) its transfer check crafted on ``twin``'s run (by
    name; None: no transfer check), else None."""
    path = Path(run_dir) / "robust" / f"{_stem(finetune)}.json"
    if not path.is_file():
        return None
    stored = json.loads(path.read_text())
    rcfg = robust_config(config, overrides)
    wanted = json.loads(json.dumps(rcfg["raw"]))
    crafted_on = None if twin is None or rcfg["diagnostics"] is None else Path(twin).name
    same = stored.get("config") == wanted and stored.get("twin") == crafted_on
    return stored["rows"] if same else None


def evaluated_rows(
    run_dir: Path, config: str, overrides: Sequence[str], finetune: bool, quiet: bool = True,
    twin: Path | None = None,
) -> list[dict]:  # fmt: skip
    """The stored evaluation, or robust-eval's (finetune-adv's) rows, made now and stored."""
    from solo_hyper.evaluation import robust

    rows = stored_rows(run_dir, config, overrides, finetune, twin)
    if rows is None:
        run = robust.finetune_adv if finetune else robust.robust_eval
        rows = run(str(run_dir), str(shipped_config(config)), list(overrides), log=lambda _: None,
                   progress=not quiet, twin=None if twin is None else str(twin))  # fmt: skip
    return rows


def robust_metrics(rows: list[dict]) -> dict:
    """robust-eval's rows as one result: 'LE A_nat', 'r-LE PGD-20 8/255', 'AT masking',
    'r-LE strength', ..."""
    out = {}
    for r in rows:
        for key, value in r.items():
            if key == "A_nat" or is_attack(key):
                out[f"{r['protocol']} {key}"] = value
        for note in ("masking", "strength"):
            if note in r:
                out[f"{r['protocol']} {note}"] = r[note]
        if "images" in r:  # how many test images each accuracy is over (the legend says)
            out["robust_images"] = r["images"]
        if "outcomes" in r:  # per-image outcomes of each accuracy (the images' bootstrap)
            out[f"{r['protocol']} outcomes"] = r["outcomes"]
    return out


__all__ = ["evaluated_rows", "robust_config", "robust_metrics", "stored_rows"]
