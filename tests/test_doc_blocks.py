"""Every Python block of README.md and docs/*.md runs as printed, each in a fresh interpreter
(nothing imported for it but what it imports), and so does each variant its comments name. A
block that reads what a reader has at hand gets only that, made here: a ``loader`` of the kind
its text describes, and the run directory and export folder its commands wrote."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# what a block leaves to the reader, keyed by a line of the block: the reader's data
LOADERS = {
    # solo-style (indexes, [crop1, crop2], targets) batches; [0, 1] pixels suit every objective
    "objective.step(net, batch, **inputs)": (
        "loader = [[torch.arange(8), [x, x.flip(3)], torch.arange(8) % 3] "
        "for x in [torch.rand(8, 3, 32, 32)] * 2]"
    ),
    # two augmented views in [-1, 1]
    "for x1, x2 in loader:": "loader = [(torch.rand(8, 3, 32, 32) * 2 - 1, torch.rand(8, 3, 32, 32) * 2 - 1)] * 2",
}
OBJECTIVE = "EBCLR(EBCLRArgs(proj_hidden_dim=64, sgld_steps=2, buffer_size=256))"
# the variants a block's comments name: the comment's words, then the edits that make the variant
VARIANTS = {
    'solo_hyper.load_pretrained("exported/hcl")': {
        '# or "runs/hcl-fashionmnist"': [('"exported/hcl"', '"runs/hcl-fashionmnist"')],
    },
    OBJECTIVE: {
        f"{name}({name}Args())": [("EBCLR, EBCLRArgs", f"{name}, {name}Args"), (OBJECTIVE, f"{name}({name}Args())")]
        for name in ("HCL", "SHCL", "RHCL", "RoCL")
    },
}  # fmt: skip


def doc_blocks() -> list[tuple[str, str]]:
    """(file:line, code) of every ```python block."""
    out = []
    for path in DOCS:
        text = path.read_text()
        for match in re.finditer(r"```python\n(.*?)```", text, flags=re.S):
            out.append((f"{path.name}:{text.count(chr(10), 0, match.start()) + 1}", match.group(1)))
    return out


def cases() -> list[tuple[str, str]]:
    """(name, program) per block and per variant its comments name."""
    out = []
    for where, code in doc_blocks():
        prelude = "".join(f"import torch\n{setup}\n" for key, setup in LOADERS.items() if key in code)
        out.append((where, prelude + code))
        for key, variants in VARIANTS.items():
            if key not in code:
                continue
            for words, edits in variants.items():
                assert words in code, f"{where}: the comment no longer names {words!r}: update VARIANTS"
                variant = code
                for old, new in edits:
                    assert old in variant, f"{where}: {old!r} not in the block"
                    variant = variant.replace(old, new)
                out.append((f"{where} ({words})", prelude + variant))
    return out


@pytest.fixture
def reader_folder(tmp_path) -> Path:
    """A folder holding what the README's commands wrote: runs/hcl-fashionmnist (a ResNet-18 run,
    as the torchvision block expects) and its export, exported/hcl."""
    from test_export import saved_run

    from solo_hyper.cli.main import main

    (tmp_path / "made").mkdir()
    _, run = saved_run(tmp_path / "made", "resnet18")
    (tmp_path / "runs").mkdir()
    run.rename(tmp_path / "runs" / "hcl-fashionmnist")
    args = ["export", "--checkpoint", str(tmp_path / "runs" / "hcl-fashionmnist"), "--out", str(tmp_path / "exported" / "hcl")]
    assert main(args) == 0
    return tmp_path


def test_the_docs_have_the_blocks_this_test_knows():
    names = [name for name, _ in cases()]
    assert len(doc_blocks()) >= 6 and len(names) == len(doc_blocks()) + 5, names


def test_every_python_block_of_the_docs_runs_as_printed_in_a_fresh_interpreter(reader_folder):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    procs = {
        name: subprocess.Popen([sys.executable, "-c", program], cwd=reader_folder, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for name, program in cases()
    }  # fmt: skip
    failed = {}
    for name, proc in procs.items():
        output = proc.communicate(timeout=300)[0]
        if proc.returncode != 0:
            failed[name] = output[-1500:]
    assert not failed, "\n\n".join(f"{name}:\n{out}" for name, out in failed.items())

