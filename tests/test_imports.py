"""No import cycles between the repository's own modules (the root modules, data/, experiments/,
experiments/lib/; tests/ aside). Every `import` and `from ... import` counts, at the top of a file
or inside a function: an import moved into a function to dodge a cycle still leaves the cycle."""
import ast
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def module_files(root):
    """{module name: path} of the .py files of the repository outside tests/: the tracked ones
    in a git checkout (those that exist now), else every one found (an sdist)."""
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=root, capture_output=True, text=True).stdout.split()
    paths = [root / f for f in listed] or [p for p in root.rglob("*.py")]
    mods = {}
    for path in paths:
        rel = path.relative_to(root)
        if rel.parts[0] == "tests" or not path.is_file():
            continue
        parts = rel.with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return mods


def import_graph(mods, root):
    """{module: {imported module: 'path:line' (relative to root), its first import there}} over the modules of `mods`. `import a.b` and
    `from a import b` name the module a.b where it is one of ours, else the package a;
    `from .x import y` is resolved against the importing module's package. An import names only
    the module it asks for: the packages above it are left out (a submodule importing its own
    package while that package imports it is how packages work, not a cycle)."""
    graph = {}
    for name, path in mods.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        edges = graph.setdefault(name, {})
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module.split(".") if node.module else []
                if node.level:
                    base = package[:len(package) - (node.level - 1)] + base
                base = ".".join(base)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            for target in targets:
                parts = target.split(".")
                ours = next((".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in mods),
                            None)
                if ours is not None:
                    edges.setdefault(ours, f"{path.relative_to(root).as_posix()}:{node.lineno}")
    return graph


def find_cycles(graph):
    """One cycle [m0, m1, ..., m0] per back edge a depth-first search meets (none when the
    graph is acyclic), each set of modules reported once."""
    cycles, seen, state = [], set(), {}   # state: 1 on the current path, 2 done

    def visit(node, path):
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt):] + [nxt]
                if frozenset(cycle) not in seen:
                    seen.add(frozenset(cycle))
                    cycles.append(cycle)
            elif nxt not in state:
                visit(nxt, path)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    return cycles


def describe(cycle, graph):
    return " -> ".join(f"{a} ({graph[a][b]})" for a, b in zip(cycle, cycle[1:])) + f" -> {cycle[-1]}"


def test_the_repository_has_no_import_cycle():
    mods = module_files(ROOT)
    assert {"train", "flags", "data", "data.common"} <= set(mods), sorted(mods)
    graph = import_graph(mods, ROOT)
    assert "flags" in graph["train"] and "data.common" in graph["data"], "the graph misses plain imports"
    cycles = find_cycles(graph)
    assert not cycles, "import cycles (module (where it imports the next)):\n  " + "\n  ".join(
        describe(c, graph) for c in cycles)


def test_the_graph_resolves_every_kind_of_import_and_the_search_finds_cycles(tmp_path):
    files = {
        "a.py": "import pkg\nfrom pkg.sub import leaf\nimport numpy\n",
        "b.py": "def f():\n    from a import x  # inside a function: still an edge\n",
        "pkg/__init__.py": "from . import sub\nfrom .sub import leaf as _\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/leaf.py": "from ..sub import other\nimport pkg.sub\n",
        "pkg/sub/other.py": "def g():\n    import b\n",
        "tests/test_x.py": "import a\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    mods = module_files(tmp_path)
    assert set(mods) == {"a", "b", "pkg", "pkg.sub", "pkg.sub.leaf", "pkg.sub.other"}
    graph = import_graph(mods, tmp_path)
    assert {k: set(v) for k, v in graph.items()} == {
        "a": {"pkg", "pkg.sub.leaf"}, "b": {"a"}, "pkg": {"pkg.sub", "pkg.sub.leaf"}, "pkg.sub": set(),
        "pkg.sub.leaf": {"pkg.sub.other", "pkg.sub"}, "pkg.sub.other": {"b"}}
    assert graph["b"]["a"] == "b.py:2" and graph["pkg.sub.leaf"]["pkg.sub.other"] == "pkg/sub/leaf.py:1"
    cycles = find_cycles(graph)
    assert cycles and all(c[0] == c[-1] and all(b in graph[a] for a, b in zip(c, c[1:])) for c in cycles)
    assert {"a", "pkg.sub.leaf", "pkg.sub.other", "b"} <= set(cycles[0])
    assert "b (b.py:2) -> a" in describe(cycles[0], graph)
    (tmp_path / "pkg/sub/other.py").write_text("")
    assert find_cycles(import_graph(module_files(tmp_path), tmp_path)) == []
