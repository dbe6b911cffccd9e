"""The documentation reads as a front page and a manual: README.md short, with Installation and the
CIFAR-10 GPU command on its first screen; docs/results.md opening with the claims table; no page
naming a commit of this repository (the history lives in git, run provenance in the results files)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
HEX_WORD = re.compile(r"(?<![0-9A-Za-z])[0-9a-f]{7,40}(?![0-9A-Za-z])")


def commits_named(text: str) -> list[str]:
    """The hex words of ``text`` that name a commit of this repository."""
    words = sorted({w for w in HEX_WORD.findall(text) if re.search(r"[a-f]", w) and re.search(r"\d", w)})
    if not words:
        return []
    proc = subprocess.run(["git", "cat-file", "--batch-check"], cwd=ROOT, input="\n".join(words) + "\n",
                          capture_output=True, text=True, check=True)  # fmt: skip
    answers = proc.stdout.splitlines()  # "<sha> <type> <size>", "<word> missing" or "<word> ambiguous"
    return [w for w, line in zip(words, answers) if line.split()[1:2] in (["commit"], ["ambiguous"])]


@pytest.mark.skipif(not (ROOT / ".git").exists() or shutil.which("git") is None, reason="needs the git checkout")
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_page_names_a_commit_of_this_repository(page):
    named = commits_named(page.read_text())
    assert not named, f"{page.name} names commits of this repository: {named}"


@pytest.mark.skipif(not (ROOT / ".git").exists() or shutil.which("git") is None, reason="needs the git checkout")
def test_the_commit_check_finds_a_commit_and_passes_other_hex():
    # a commit whose short name has a letter (an all-digit name reads as a number, not a commit)
    log = subprocess.run(["git", "rev-list", "-n", "50", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
    short = next(c[:9] for c in log.stdout.split() if re.search("[a-f]", c[:9]))
    assert commits_named(f"trained at {short}; sha256 deadbeef00; 0x7f3a9c1") == [short]
    assert commits_named("figures 1234567 and cafe12345abc0 (not objects)") == []


def test_the_readme_is_a_front_page():
    lines = README.read_text().splitlines()
    assert len(lines) <= 260, f"README.md has {len(lines)} lines; move detail into docs/"
    first = "\n".join(lines[:80])
    assert re.search(r"^## Installation", first, flags=re.M), "no Installation section in the first 80 lines"
    assert "./scripts/test.sh" in first and "./scripts/main.sh" in first
    gpu = [ln for ln in lines[:80] if "configs/pretrain/cifar10/hcl.yaml" in ln and "solo_hyper pretrain" in ln]
    assert gpu and any("accelerator=gpu" in ln or "devices" in ln for ln in gpu), "no CIFAR-10 GPU command"
    assert "run-solo main_pretrain.py" in first and "--config-path configs/solo-main/cifar10 --config-name hcl.yaml" in first, (
        "no CIFAR-10 command for solo-learn main's own launcher"
    )
    for page in ("results", "configuration", "campaigns", "performance", "robustness", "fairness", "solo-main"):
        assert f"(docs/{page}.md" in README.read_text(), f"README.md does not link docs/{page}.md"


def test_results_open_with_the_claims_table():
    lines = (ROOT / "docs" / "results.md").read_text().splitlines()[:60]
    rows = [ln for ln in lines if ln.startswith("|")]
    header = rows[0].lower()
    for column in ("claim", "paper", "measured", "interval", "verdict", "budget"):
        assert column in header, f"claims table lacks a {column!r} column: {header}"
    body = rows[2:]
    assert len(body) >= 10, "the claims table should list every claim"
    assert all(re.search(r"\[[-+]?\d", row) for row in body), "every claim row gives its interval"


def test_the_readmes_layout_names_every_module_and_package_as_it_is():
    """The README's layout of ``solo_hyper/`` names each package (``name/``) and top-level module
    (``name.py``) as the tree has it, and nothing the tree lacks."""
    text = README.read_text()
    layout = text.split("Layout of `solo_hyper/`:\n", 1)[1].split("\n\n", 1)[0]
    named = re.findall(r"`([\w.]+/?)`", layout)
    package = ROOT / "solo_hyper"
    tree = {p.name + "/" for p in package.iterdir() if (p / "__init__.py").is_file()}
    tree |= {p.name for p in package.glob("*.py") if p.name != "__init__.py"}
    listed = {n for n in named if n.endswith("/") or n.endswith(".py")}
    assert listed == tree, f"missing: {sorted(tree - listed)}; not in the tree: {sorted(listed - tree)}"
