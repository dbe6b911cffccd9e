"""Every shell command of README.md and docs/*.md is checked, so that a renamed flag, config key or
file breaks the build and not the reader (tests/doc_shell.py reads the blocks as bash would):

- ``python -m solo_hyper ...``: parsed by the command line's own parser (``cli.main.parse``), and
  its configs loaded with their overrides by the loaders the command uses (``prepare``, the
  comparison's and the sweep's plans, the linear and robust loaders, the cluster's parameters);
  ``reproduce`` runs as printed with ``--dry-run``, in-process; nothing trains or downloads, and
  the folder it runs in stays empty. A run a command reads (``--checkpoint runs/...``) must be one
  a documented command or shipped config makes.
- ``run-solo``: one of solo-learn's launchers, and its Hydra config found as the command does.
- ``pip``, ``./scripts/*.sh``, ``python -m pytest``, ``python -c``: their files exist, their
  code compiles; a few commands of other tools are listed in ``NOT_OURS`` with the reason.
A command of no known kind fails with its file:line.

The blocks marked ``<!-- runnable -->`` run as printed, in bash, in an empty folder holding only
``configs/`` and ``.venv`` (a few training steps in all); a command that needs a GPU, a dataset not
on this machine (CIFAR-10, ImageNet) or a cluster is checked, never run, and may not be marked."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
from functools import cache
from importlib import metadata
from pathlib import Path

import pytest
import tomllib
import yaml
from doc_shell import DOCS, ROOT, Command, blocks, commands

INTERPRETERS = ("python", ".venv/bin/python", ".venv-main/bin/python")
# the tools' commands this test does not check, and why
NOT_OURS = {
    ("git", "clone"): "fetches solo-learn's repository over the network",
    ("python3.11", "-m", "venv"): "makes an empty environment (scripts/bootstrap-main.sh does too)",
}
# the docs' placeholders and what the check reads in their place
PLACEHOLDERS = {
    "A.yaml": "configs/pretrain/fashionmnist/simclr.yaml",
    "B.yaml": "configs/pretrain/fashionmnist/hcl.yaml",
    # cluster.yaml: the ```yaml block of docs/campaigns.md headed "# cluster.yaml" (fixture below)
}
READERS_CLONE = "PATH/solo-learn/"  # solo-learn's repository where the reader cloned it: unchecked
# the runs a runnable command reads, made by an earlier runnable command in their place
STAND_INS = {"runs/hcl-fashionmnist": "runs/hcl-quick"}
# the datasets on this machine (Fashion-MNIST from Debian's package; MNIST alike)
HERE = {"fashionmnist", "mnist"}
# words that say a command needs what this machine lacks (the check must find it so)
ELSEWHERE = ("accelerator=gpu", "devices=4", "--scale gpu", "slurm", "cifar", "imagenet")
# what the docs' reader has: a machine of 8 GPUs (docs/campaigns.md: --jobs 8) and 16 cores
READERS_GPUS, READERS_CORES = list(range(8)), 16

ALL = commands()


def where_ids(cmds: list[Command]) -> list[str]:
    return [c.where for c in cmds]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """The folder the checks run in: the repository's configs/ and the docs' cluster.yaml."""
    path = tmp_path_factory.mktemp("reader")
    (path / "configs").symlink_to(ROOT / "configs")
    text = (ROOT / "docs" / "campaigns.md").read_text()
    cluster = text.split("```yaml\n# cluster.yaml\n", 1)[1].split("```", 1)[0]
    (path / "cluster.yaml").write_text(cluster)
    return path


@pytest.fixture
def readers_machine(folder, monkeypatch):
    """The checks run in ``folder`` as on the docs' reader's machine, and write nothing there."""
    from solo_hyper.launch import pool
    from solo_hyper.reproduce import gpu_hours

    monkeypatch.setattr(pool, "visible_gpus", lambda: READERS_GPUS)
    monkeypatch.setattr(pool, "cpu_cores", lambda: READERS_CORES)
    # the GPU-hours of a dry run count a step's FLOPs on the CPU, minutes for the GPU tables'
    # ResNets; tests/reproduce/test_planning.py checks that count, here any number does
    monkeypatch.setattr(gpu_hours, "count_step", lambda prep: gpu_hours.StepCount(1e9, True))
    monkeypatch.chdir(folder)
    before = sorted(folder.iterdir())
    yield folder
    assert sorted(folder.iterdir()) == before, "a check wrote into its folder"


def parsed(cmd: Command) -> argparse.Namespace:
    """The arguments of a ``python -m solo_hyper`` command, from the command line's own parser."""
    from solo_hyper.cli.main import parse
    from solo_hyper.config import ConfigError

    argv = [PLACEHOLDERS.get(w, w) for w in cmd.words[3:]]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return parse(argv)
    except SystemExit:
        pytest.fail(f"{cmd.where}: {err.getvalue().strip().splitlines()[-1]}")  # argparse's error
    except ConfigError as e:
        pytest.fail(f"{cmd.where}: {e}")


def as_dry_run(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` as a dry run would take them: a cluster's jobs planned, not submitted."""
    return argparse.Namespace(**{**vars(args), "dry_run": True})


@cache
def run_names() -> frozenset[str]:
    """The run directories the docs' commands and the shipped configs make (``runs/<name>``) and
    the folders of the documented comparisons, sweeps and reproductions (``--out``)."""
    names = set()
    for path in (ROOT / "configs").rglob("*.yaml"):
        loaded = yaml.safe_load(path.read_text())
        if isinstance(loaded, dict) and isinstance(loaded.get("name"), str):
            names.add(f"runs/{loaded['name']}")
    for cmd in ALL:
        names |= {f"runs/{w[5:]}" for w in cmd.words if w.startswith("name=")}
        names |= {cmd.words[i + 1] for i, w in enumerate(cmd.words[:-1]) if w == "--out"}
    return frozenset(names)


def check_run(cmd: Command, checkpoint: str) -> None:
    made = run_names()
    assert checkpoint in made or any(checkpoint.startswith(f"{out}/") for out in made), (
        f"{cmd.where}: --checkpoint {checkpoint}: no documented command or shipped config makes it"
    )


def needs(args: argparse.Namespace, cfgs: list[dict]) -> set[str]:
    """Why the command cannot run on this CPU-only machine: a GPU, a dataset not here, a cluster."""
    out = set()
    if getattr(args, "executor", None) == "slurm":
        out.add("a SLURM cluster")
    if getattr(args, "scale", None) == "gpu":
        out.add("a GPU and the paper's datasets")
    for cfg in cfgs:
        devices = cfg.get("devices")
        if cfg.get("accelerator") not in ("cpu", None) or (isinstance(devices, int) and devices > 1):
            out.add("a GPU")
        if cfg["data"]["dataset"] not in HERE:
            out.add(f"the {cfg['data']['dataset']} dataset")
    return out


def check_solo_hyper(cmd: Command) -> set[str]:
    """Parses and loads one ``python -m solo_hyper`` command; returns what it needs to run."""
    from solo_hyper.campaigns import compare, sweep
    from solo_hyper.cli.main import launch_options, main
    from solo_hyper.cli.run_solo import KNOWN_SCRIPTS, resolve_hydra_args
    from solo_hyper.config import ConfigError
    from solo_hyper.evaluation.linear import load_linear_config
    from solo_hyper.evaluation.robust import load_robust_config
    from solo_hyper.run.train import prepare

    args = parsed(cmd)
    cfgs: list[dict] = []
    lacking: set[str] = set()
    try:
        if args.command == "pretrain":
            cfgs = [prepare(args.config, args.overrides).cfg]
        elif args.command in ("compare", "sweep"):
            if args.command == "compare":
                todo = compare.plan(args.configs, args.out, args.epochs, args.overrides,
                                    args.seeds, args.pairs)  # fmt: skip
                preps = [prep for _, prep in todo.runs]
            else:
                _, cells = sweep.plan(args.target, args.configs, args.out, args.values,
                                      args.epochs, args.overrides)  # fmt: skip
                preps = [prep for _, _, prep in cells]
            compare.check_linear(preps, args.linear_epochs, args.linear_config,
                                 args.eval_dataset if args.command == "compare" else None,
                                 args.eval_budget)  # fmt: skip
            launch_options(as_dry_run(args))
            cfgs = [prep.cfg for prep in preps]
        elif args.command in ("linear", "knn", "export", "robust-eval", "finetune-adv"):
            check_run(cmd, args.checkpoint)
            if args.checkpoint not in STAND_INS:
                lacking.add(f"the reader's run {args.checkpoint}")
            if args.command == "linear" and args.config is not None:
                load_linear_config(args.config, args.overrides)
            if args.command in ("robust-eval", "finetune-adv") and args.config is not None:
                load_robust_config(args.config, args.overrides)
        elif args.command == "reproduce":
            argv = [PLACEHOLDERS.get(w, w) for w in cmd.words[3:]]
            argv += [] if args.list or args.dry_run else ["--dry-run"]
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(argv)
            assert code == 0 and out.getvalue(), f"{cmd.where}: {' '.join(argv)}: {err.getvalue()}"
        elif args.command == "run-solo":
            assert Path(args.script).name in KNOWN_SCRIPTS, f"{cmd.where}: {args.script}"
            if not args.script.startswith(READERS_CLONE):
                resolve_hydra_args(args.args, Path.cwd())
            if "hydra/launcher=submitit_slurm" in args.args:
                return {"a SLURM cluster"}
            return {"solo-learn main (.venv-main)"}
        elif args.command == "bench":
            return {"minutes of benchmarks (benchmarks/run.py's own tests check it)"}
        else:
            pytest.fail(f"{cmd.where}: no check for the command {args.command!r}: add one here")
    except ConfigError as e:
        pytest.fail(f"{cmd.where}: {e}")
    return lacking | needs(args, cfgs)


def check_pip(cmd: Command) -> None:
    words = [w for w in cmd.words[2:] if w not in ("--no-deps", "--no-build-isolation", "-e")]
    assert cmd.words[1] == "install", cmd.where
    if words[:1] == ["-r"]:
        assert (ROOT / words[1]).is_file(), f"{cmd.where}: no {words[1]}"
        return
    (target,) = words
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    if target.startswith("."):  # this package, with its extras
        extras = target[2:-1].split(",") if target.startswith(".[") else []
        assert set(extras) <= set(project["optional-dependencies"]), f"{cmd.where}: {target}"
    elif "==" in target:  # the pin the tests run against
        name, version = target.split("==")
        assert metadata.version(name) == version, f"{cmd.where}: {target}"
    else:  # a clone the page's own `git clone` makes
        page = next(d for d in DOCS if d.name == cmd.where.split(":")[0]).read_text()
        assert f"/{target}.git" in page, f"{cmd.where}: nothing on the page makes {target}/"


def check(cmd: Command) -> set[str]:
    """Checks one command by its kind; returns what it needs that this machine lacks."""
    words = cmd.words
    for prefix, why in NOT_OURS.items():
        if words[: len(prefix)] == prefix:
            return {f"not checked: {why}"}
    if words[0].startswith("./scripts/"):
        path = ROOT / words[0]
        assert path.is_file() and os.access(path, os.X_OK), f"{cmd.where}: {words[0]}"
        return {"the set-up and minutes of work"}
    if words[0].endswith("pip"):
        check_pip(cmd)
        return {"the network"}
    assert words[0] in INTERPRETERS, f"{cmd.where}: a command this test does not know: {cmd.text}"
    main_only = {"solo-learn main (.venv-main)"} if words[0].startswith(".venv-main/") else set()
    if words[1:3] == ("-m", "solo_hyper"):
        return check_solo_hyper(cmd) | main_only
    if words[1:3] == ("-m", "pytest"):
        paths = [w for w in words[3:] if not w.startswith("-")]
        assert paths and all((ROOT / p).exists() for p in paths), f"{cmd.where}: {paths}"
        return {"solo-learn main (.venv-main)"}
    if words[1] == "-c":
        compile(words[2], cmd.where, "exec")
        return main_only
    pytest.fail(f"{cmd.where}: a command this test does not know: {cmd.text}")


def test_every_page_is_read_and_every_command_is_found():
    for page in DOCS:  # a shell block under another label would escape the check
        assert not re.search(r"^ *```(sh|shell|console|zsh)$", page.read_text(), flags=re.M), page.name
    pages = {c.where.split(":")[0] for c in ALL}
    assert {"README.md", "guide.md", "results.md", "campaigns.md", "solo-main.md"} <= pages
    assert len(ALL) >= 90 and len(DOCS) >= 9
    # the harder shapes: a loop body, a multi-line quoted argument, braces, a glob
    assert any(c.loop for c in ALL) and any("\n" in w for c in ALL for w in c.words)
    assert any("configs/pretrain/fashionmnist/supcon.yaml" in c.words for c in ALL)
    assert any("configs/ebclr/batch-study/simclr-b64.yaml" in c.words for c in ALL)


@pytest.mark.parametrize("cmd", ALL, ids=where_ids(ALL))
def test_every_documented_command_parses_and_loads(cmd, readers_machine):
    lacking = check(cmd)
    text = " ".join(cmd.words).lower()
    if any(word in text for word in ELSEWHERE):
        assert lacking, f"{cmd.where}: a GPU, CIFAR-10/ImageNet or cluster command found runnable here"


def test_a_pretrain_off_the_recipes_budget_writes_its_own_run_name():
    """A documented pretrain that changes the recipe's budget names its own run: in the recipe's
    run directory it would be a run of another config, and the full recipe after it refused."""
    budget = {"max_epochs", "max_steps", "limit_train_batches", "data.train_subset"}
    changed = 0
    for cmd in ALL:
        if cmd.words[1:4] != ("-m", "solo_hyper", "pretrain"):
            continue
        args = parsed(cmd)
        overrides = dict(o.split("=", 1) for o in args.overrides)
        if budget & set(overrides):
            changed += 1
            recipe = yaml.safe_load((ROOT / args.config).read_text())["name"]
            assert overrides.get("name") not in (None, recipe), f"{cmd.where}: give it name=..."
    assert changed >= 2


def test_the_markers_name_blocks_and_tests_that_exist():
    marked = [b for b in blocks() if b.marker is not None]
    assert sum(len(b.runnable()) for b in marked) >= 3
    for block in marked:
        assert block.marker.endswith(".py") or block.runnable(), f"{block.where}: {block.marker}"
        if block.marker.endswith(".py"):  # that test runs the block: it reads it from the page
            test = (ROOT / block.marker).read_text()
            page = block.where.split(":")[0]
            assert f'"{page}"' in test or f"/{page}" in test, f"{block.where}: {block.marker}"


RUNNABLE = [c for b in blocks() for c in b.runnable()]


@pytest.mark.parametrize("cmd", RUNNABLE, ids=where_ids(RUNNABLE))
def test_a_runnable_command_needs_no_gpu_no_dataset_not_here_and_no_cluster(cmd, readers_machine):
    lacking = check(cmd)
    assert not lacking, f"{cmd.where} is marked runnable but needs {lacking}"


def written(cmd: Command, folder: Path) -> list[Path]:
    """What a command says it writes."""
    from solo_hyper.run.train import prepare

    args = parsed(cmd)
    if args.command == "compare":
        tables = ["results.md", "results.csv"] + (["summary.csv"] if args.seeds else [])
        return [folder / args.out / name for name in tables]
    if args.command == "pretrain":
        cfg = prepare(args.config, args.overrides).cfg
        return [folder / cfg["checkpoint"]["dir"] / cfg["name"] / "last.ckpt"]
    if args.command == "export":
        return [folder / args.out / name for name in ("backbone.pt", "projector.pt", "model.json")]
    pytest.fail(f"{cmd.where}: what does it write? (add its files here)")


def venv_link(folder: Path) -> None:
    """``.venv`` in ``folder``: this interpreter's environment, as the docs' commands name it."""
    if sys.prefix != sys.base_prefix:
        (folder / ".venv").symlink_to(sys.prefix)
    else:
        (folder / ".venv" / "bin").mkdir(parents=True)
        (folder / ".venv" / "bin" / "python").symlink_to(sys.executable)


def test_the_runnable_blocks_run_as_printed_and_write_what_they_say(tmp_path):
    """In bash, in an empty folder holding configs/ and .venv; a command run once already (the
    README's smoke comparison is the guide's) runs once."""
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    venv_link(tmp_path)
    env = {**os.environ, "PATH": f"{tmp_path / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    done = set()
    for cmd in RUNNABLE:
        if cmd.words[1:] in done:
            continue
        done.add(cmd.words[1:])
        for reader, stand_in in STAND_INS.items():
            if reader in cmd.words:
                assert (tmp_path / stand_in).is_dir(), f"{cmd.where}: no earlier command made {stand_in}"
                shutil.copytree(tmp_path / stand_in, tmp_path / reader)
        proc = subprocess.run(["bash", "-euo", "pipefail", "-c", cmd.text], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)  # fmt: skip
        assert proc.returncode == 0, f"{cmd.where}: {cmd.text}\n{proc.stderr[-3000:]}"
        missing = [str(p.relative_to(tmp_path)) for p in written(cmd, tmp_path) if not p.is_file()]
        assert not missing, f"{cmd.where}: wrote no {missing}\n{proc.stdout[-2000:]}"
