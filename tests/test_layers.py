"""The package's layers: imports point down, never in a circle, and the algorithm, metric and
objective modules never load solo-learn or Lightning (they must work with torch alone)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "solo_hyper"

# From the ground up; a module may import its own layer and the layers below it.
LAYERS: list[tuple[str, ...]] = [
    (
        "solo_hyper.geometry", "solo_hyper.losses", "solo_hyper.heads", "solo_hyper.sgld",
        "solo_hyper.attacks", "solo_hyper.input_gradient", "solo_hyper.augment",
        "solo_hyper.augment_ops", "solo_hyper.data", "solo_hyper.backbones", "solo_hyper.distributed",
        "solo_hyper.threads", "solo_hyper.syncs", "solo_hyper.machine", "solo_hyper.version",
    ),  # fmt: skip
    ("solo_hyper.metrics",),
    ("solo_hyper.objectives",),  # the methods without a framework: built on the layer above
    ("solo_hyper.config",),
    ("solo_hyper.solo",),
    ("solo_hyper.methods", "solo_hyper.callbacks"),
    ("solo_hyper.run",),
    ("solo_hyper.evaluation", "solo_hyper.export", "solo_hyper.pretrained"),
    ("solo_hyper.launch",),  # runs as jobs: worker processes, cluster jobs
    ("solo_hyper.reproduce",),
    ("solo_hyper.cli", "solo_hyper.__main__"),
    ("solo_hyper",),  # the root package alone: its lazy attributes reach the layers below
]
TORCH_ONLY = LAYERS[0] + LAYERS[1] + LAYERS[2]
FRAMEWORKS = ("solo", "pytorch_lightning", "lightning", "pl_bolts", "omegaconf", "hydra")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imported_modules(name: str) -> set[str]:
    """The solo_hyper modules ``name`` imports anywhere (top level or inside functions)."""
    path = MODULES[name]
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


GRAPH = {name: imported_modules(name) for name in MODULES}


def layer_of(name: str) -> int | None:
    for i, layer in enumerate(LAYERS):
        if any(name == m or (m != "solo_hyper" and name.startswith(m + ".")) for m in layer):
            return i
    return None


def test_every_module_has_a_layer():
    missing = sorted(n for n in MODULES if layer_of(n) is None)
    assert not missing, f"modules outside the layer table: {missing}"


def test_imports_point_down():
    upward = [
        f"{a} (layer {layer_of(a)}) imports {b} (layer {layer_of(b)})"
        for a, targets in GRAPH.items() for b in targets if layer_of(b) is not None and layer_of(b) > layer_of(a)
    ]  # fmt: skip
    assert not upward, "\n".join(upward)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (a package's __init__ importing its own submodules and
    those importing siblings through it are still cycles), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_find_cycle_finds_a_planted_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_the_package_has_no_import_cycle():
    assert find_cycle(GRAPH) is None, " -> ".join(find_cycle(GRAPH))


def test_algorithm_and_metric_modules_load_no_framework():
    """One fresh interpreter imports them one by one and names the first that loads a framework."""
    modules = sorted(n for n in MODULES if n.startswith(TORCH_ONLY))
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"    bad = sorted(m for m in sys.modules if m.split('.')[0] in {FRAMEWORKS!r})\n"
        "    if bad:\n"
        "        print(name, 'loads', ', '.join(bad[:5])); sys.exit(1)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert len(modules) > 10
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
