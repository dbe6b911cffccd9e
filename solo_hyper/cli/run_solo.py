"""``python -m solo_hyper run-solo SCRIPT [ARGS...]``: solo-learn's own launchers, with this plugin.

solo-learn's ``main_pretrain.py``, ``main_linear.py`` and ``main_knn.py`` live at the root of its
repository (not in the installed package) and look methods up in ``solo.methods.METHODS``.
Importing ``solo_hyper`` registers this plugin's methods (and backbones) there; the script then
runs as ``__main__`` with the remaining arguments, as if started with ``python SCRIPT ARGS``.

Hydra resolves a relative ``--config-path`` against the script's folder; here it is taken
relative to the current directory (what a user typing the command means) and made absolute.
"""

from __future__ import annotations

import contextlib
import importlib.util
import runpy
import sys
from pathlib import Path

from solo_hyper.config import ConfigError
from solo_hyper.solo.main_cfg import SOLO_MAIN_DATASETS

KNOWN_SCRIPTS = ("main_pretrain.py", "main_linear.py", "main_knn.py")
PATH_OPTIONS = ("--config-path", "-cp", "--config-dir", "-cd")
NAME_OPTIONS = ("--config-name", "-cn")


def _option_value(args: list[str], names: tuple[str, ...]) -> tuple[int, str] | None:
    """(index of the value, value) of the last occurrence of an option, '--opt=v' or '--opt v'."""
    found = None
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                found = (i + 1, args[i + 1])
            elif arg.startswith(name + "="):
                found = (i, arg.split("=", 1)[1])
    return found


def resolve_hydra_args(args: list[str], cwd: Path) -> list[str]:
    """Absolute config paths (relative ones taken from ``cwd``), and an early, clear error for a
    primary config that does not exist (Hydra's own message is 'Cannot find primary config')."""
    out = list(args)
    for i, arg in enumerate(args):
        for name in PATH_OPTIONS:
            if arg.startswith(name + "="):
                value = arg.split("=", 1)[1]
                out[i] = f"{name}={_absolute(value, cwd)}"
            elif arg == name and i + 1 < len(args):
                out[i + 1] = _absolute(args[i + 1], cwd)
    path = _option_value(out, ("--config-path", "-cp"))
    name = _option_value(out, NAME_OPTIONS)
    if path is not None:
        folder = Path(path[1])
        if not folder.is_dir():
            raise ConfigError(f"--config-path {path[1]!r} is not a folder")
        yamls = sorted(p.name for p in folder.glob("*.yaml"))
        if name is None:
            raise ConfigError(
                f"--config-name is missing: add --config-name NAME, one of {yamls} (in {path[1]})"
            )
        config = name[1]
        candidates = [c for c in (folder / config, folder / f"{config}.yaml") if c.is_file()]
        if not candidates:
            raise ConfigError(
                f"no config {config!r} in {str(folder)!r}; --config-name is one of {yamls}"
            )
        check_dialect(candidates[0])
    return out


def check_dialect(config: Path) -> None:
    """A config of this plugin's own launcher given to solo's launchers (no Hydra ``defaults``
    list, and its crops inline or a dataset solo main does not know): refused with the command
    that runs it."""
    import yaml

    try:
        loaded = yaml.safe_load(config.read_text())
    except yaml.YAMLError:
        return  # Hydra reports it
    if not isinstance(loaded, dict) or "defaults" in loaded or "hydra" in loaded:
        return
    data = loaded.get("data")
    dataset = data.get("dataset") if isinstance(data, dict) else None
    if "augmentations" in loaded or (dataset is not None and dataset not in SOLO_MAIN_DATASETS):
        raise ConfigError(
            f"{config} is a config of this plugin's own launcher (no Hydra 'defaults' list), not "
            f"one of solo-learn main's: run it with 'python -m solo_hyper pretrain --config "
            f"{config}', or give run-solo a YAML of configs/solo-main/ (docs/solo-main.md)"
        )


def _absolute(value: str, cwd: Path) -> str:
    p = Path(value).expanduser()
    return str(p if p.is_absolute() else (cwd / p).resolve())


# what solo-learn 1.0.2's launchers use from pytorch-lightning < 1.6, gone from Lightning 1.9
OLD_LIGHTNING = ("DDPPlugin", "checkpoint_callback=")


def check_setup(path: Path) -> None:
    """A clear error, before anything runs, for a script this environment cannot run."""
    source = path.read_text(errors="replace")
    if "import hydra" in source and importlib.util.find_spec("hydra") is None:
        raise ConfigError(
            f"{path.name} is a solo-learn main launcher (Hydra configs), and this environment has "
            "no hydra: run it in the solo-learn main set-up (./scripts/bootstrap-main.sh makes "
            ".venv-main from requirements/solo-main.txt and solo-learn main; docs/solo-main.md). "
            "With solo-learn 1.0.2 train with 'python -m solo_hyper pretrain' (README)"
        )
    if any(name in source for name in OLD_LIGHTNING):
        raise ConfigError(
            f"{path.name} is a solo-learn 1.0.2 launcher: it needs pytorch-lightning < 1.6 "
            "(DDPPlugin, Trainer(checkpoint_callback=...)), which does not run on torch 2. Use "
            "'python -m solo_hyper pretrain' with the same hyperparameters (README: solo-learn "
            "1.0.2's launchers), or solo-learn main's launchers in its set-up (docs/solo-main.md)"
        )


def launcher_dir() -> Path:
    """Where the set-up keeps solo main's launchers: ``<environment>/solo-learn``
    (``scripts/bootstrap-main.sh`` copies them there from the solo-learn sources)."""
    return Path(sys.prefix) / "solo-learn"


def resolve_script(script: str) -> Path:
    """A path to a script, or the bare name of one of solo main's launchers (found in
    ``launcher_dir``); a clear error otherwise."""
    path = Path(script)
    if path.is_file():
        return path
    kept = launcher_dir() / path.name
    if path.parent == Path(".") and kept.is_file():
        return kept
    raise ConfigError(
        f"solo-learn script {script!r} does not exist: give the path of one of "
        f"{', '.join(KNOWN_SCRIPTS)} in a checkout of solo-learn, or the bare name when the set-up "
        f"keeps them in {launcher_dir()} (scripts/bootstrap-main.sh does; they are not part of "
        "the installed package; see docs/solo-main.md)"
    )


def run_solo(script: str, args: list[str]) -> None:
    """Registers this plugin into the installed solo-learn, then runs ``script`` as __main__."""
    path = resolve_script(script)
    check_setup(path)
    import solo_hyper.methods  # noqa: F401  (registers the methods)
    from solo_hyper.solo import adapter

    if adapter.API_VERSION == "v2":  # solo main
        from solo_hyper.cli.solo_hooks import launch_hooks
    else:  # 1.0.2's launchers were refused by check_setup: a script of the user's, unhooked
        launch_hooks = contextlib.nullcontext

    args = resolve_hydra_args(args, Path.cwd())
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(path.resolve()), *args]
    sys.path.insert(0, str(path.resolve().parent))
    try:
        with launch_hooks() as summary:
            runpy.run_path(str(path), run_name="__main__")
            line = summary.line() if summary is not None else None
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    if line:
        print(line)


__all__ = ["KNOWN_SCRIPTS", "resolve_hydra_args", "run_solo"]
