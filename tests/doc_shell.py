"""The shell blocks of README.md and docs/*.md as the commands a reader types: ``\\``-continued
and multi-line quoted lines joined, comment lines dropped, each command's words as bash makes
them (braces, globs, quotes; bash itself expands them), a ``for`` loop's body with its variable
standing for the loop's pattern, and the ``<!-- runnable -->`` marker on the line before a block
(an HTML comment: GitHub shows nothing).

The marker: ``<!-- runnable -->`` (every command of the block runs in tests/test_doc_commands.py),
``<!-- runnable: 1 -->`` / ``<!-- runnable: 1-2 -->`` (the block's commands by their number), or
``<!-- runnable: tests/PATH.py -->`` (that test module runs the block as written)."""

from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(?P<indent> *)```bash\n(?P<body>.*?)^(?P=indent)```", flags=re.S | re.M)
MARKER = re.compile(r"^ *<!-- runnable(?::\s*(?P<which>[^>]*?))?\s*-->\s*$")
LOOP = re.compile(r"^for (?P<var>\w+) in (?P<items>.+); do$")


@dataclass(frozen=True)
class Command:
    where: str  # file:line of its first line
    text: str  # as written: continuations and quoted newlines kept, for bash
    words: tuple[str, ...]  # as bash passes them to the program
    number: int  # its number in the block (1, 2, ...)
    loop: str | None = None  # the ``for`` line whose body it is


@dataclass(frozen=True)
class Block:
    where: str
    commands: tuple[Command, ...]
    marker: str | None  # None: no marker; "": every command; else what follows "runnable:"

    def runnable(self) -> list[Command]:
        """The commands the marker names for tests/test_doc_commands.py to run."""
        if self.marker is None or self.marker.endswith(".py"):
            return []
        if self.marker == "":
            return list(self.commands)
        first, _, last = self.marker.partition("-")
        numbers = range(int(first), int(last or first) + 1)
        return [c for c in self.commands if c.number in numbers]


def expand(text: str, loop: tuple[str, str] | None = None) -> tuple[str, ...]:
    """The words bash passes to the command ``text`` (run in the repository root, a glob that
    matches nothing an error); in a loop body the variable is the loop's pattern, unexpanded."""
    if "$(" in text or "`" in text:
        raise ValueError(f"command substitution in a documented command: {text!r}")
    prelude = "shopt -s failglob"
    if loop is not None:
        prelude = f"set -f; {loop[0]}={shlex.quote(loop[1])}"
    proc = subprocess.run(["bash", "-c", f"{prelude}\nprintf '%s\\0' {text}"], cwd=ROOT,
                          capture_output=True, text=True)  # fmt: skip
    if proc.returncode != 0:
        raise ValueError(f"bash cannot expand {text!r}: {proc.stderr.strip()}")
    return tuple(proc.stdout.split("\0")[:-1])


def complete(text: str) -> bool:
    """Whether ``text`` is a whole command: no trailing ``\\``, no open quote."""
    if text.rstrip().endswith("\\"):
        return False
    try:
        shlex.split(text, comments=True)
    except ValueError:  # "No closing quotation"
        return False
    return True


def block_commands(path: Path, start: int, body: str, indent: str) -> list[Command]:
    """The commands of one block whose body begins on line ``start`` of ``path``."""
    out, pending, first, loop = [], "", 0, None
    for offset, raw in enumerate(body.splitlines()):
        line = raw[len(indent):] if raw.startswith(indent) else raw
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if not pending:
            first = start + offset
            if (m := LOOP.match(line.strip())) is not None:
                loop = (m["var"], m["items"], f"{path.name}:{first}")
                continue
            if line.strip() == "done":
                loop = None
                continue
        pending += line + "\n"
        if not complete(pending):
            continue
        command = pending.rstrip("\n")
        pending = ""
        words = expand(command, loop[:2] if loop else None)
        out.append(Command(f"{path.name}:{first}", command, words, len(out) + 1,
                           loop[2] if loop else None))  # fmt: skip
    assert not pending and loop is None, f"{path.name}:{first}: a command or loop never ends"
    return out


def blocks(paths: list[Path] = DOCS) -> list[Block]:
    """Every ```bash block of the pages, with its commands and marker."""
    out = []
    for path in paths:
        text = path.read_text()
        for m in FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1  # the fence's line
            before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
            marker = MARKER.match(before)
            commands = block_commands(path, line + 1, m["body"], m["indent"])
            out.append(Block(f"{path.name}:{line}", tuple(commands),
                             None if marker is None else (marker["which"] or "")))  # fmt: skip
    return out


def commands(paths: list[Path] = DOCS) -> list[Command]:
    return [c for b in blocks(paths) for c in b.commands]
