"""The package's layout: every module of rtpo/ imports on its own, and no two modules of
rtpo/ import each other, directly or round a loop, even through imports inside functions (the kind
that hid the data <-> envs cycle: it fails only when the wrong module is imported first).

Each module is imported in a process of its own with no rtpo module loaded before it: a child forked
from this test's interpreter before it imported anything of rtpo, in which only the third-party
packages the modules import at their top are preloaded (so each child costs milliseconds, not the
seconds of torch's import). A cycle among rtpo's modules shows there as an ImportError of a
partially initialised module, whichever module comes first.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "rtpo"


def modules() -> dict[str, Path]:
    """Every module of rtpo/ by dotted name (`__main__` files are entry points, run, not imported)."""
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        if p.name == "__main__.py":
            continue
        parts = p.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = p
    return out


def imports(path: Path, name: str, mods: dict[str, Path], top_only: bool = False) -> tuple[set[str], set[str]]:
    """(the rtpo modules `name` imports, the other modules it imports), skipping `if TYPE_CHECKING:`
    blocks, and with `top_only` the imports inside functions (which run only when called)."""
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    ours: set[str] = set()
    theirs: set[str] = set()

    def resolve(target: str) -> str | None:
        while target and target not in mods:
            target = target.rpartition(".")[0]
        return target or None

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, (ast.Import, ast.ImportFrom)) and not (top_only and in_function):
                if isinstance(child, ast.Import):
                    targets = [a.name for a in child.names]
                else:
                    base = child.module or ""
                    if child.level:
                        pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                        pkg = pkg[: len(pkg) - child.level + 1]
                        base = ".".join(pkg + ([child.module] if child.module else []))
                    # `from a import b`: the submodule a.b when b is one, else the module a
                    targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in child.names]
                for t in targets:
                    if t.split(".")[0] != "rtpo":
                        theirs.add(t)
                    elif (r := resolve(t)) and r != name:
                        ours.add(r)
            visit(child, inner)

    visit(tree, False)
    return ours, theirs


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_cycle_finder_finds_a_loop_through_a_function_level_import(tmp_path):
    """The checker itself: a.py imports b at its top, b.py imports a inside a function."""
    (tmp_path / "rtpo").mkdir()
    (tmp_path / "rtpo" / "a.py").write_text("import rtpo.b\n")
    (tmp_path / "rtpo" / "b.py").write_text("def f():\n    from rtpo import a\n")
    (tmp_path / "rtpo" / "c.py").write_text("from rtpo import a\n")
    mods = {"rtpo.a": tmp_path / "rtpo" / "a.py", "rtpo.b": tmp_path / "rtpo" / "b.py",
            "rtpo.c": tmp_path / "rtpo" / "c.py"}
    graph = {m: imports(p, m, mods)[0] for m, p in mods.items()}
    assert graph == {"rtpo.a": {"rtpo.b"}, "rtpo.b": {"rtpo.a"}, "rtpo.c": {"rtpo.a"}}
    assert cycles(graph) == [["rtpo.a", "rtpo.b"]]
    assert cycles({m: imports(p, m, mods, top_only=True)[0] for m, p in mods.items()}) == []


def test_no_import_cycle_among_the_modules_of_rtpo():
    mods = modules()
    graph = {m: imports(p, m, mods)[0] for m, p in mods.items()}
    found = cycles(graph)
    detail = "; ".join(" <-> ".join(c) + " (" + ", ".join(f"{a} -> {b}" for a in c for b in sorted(graph[a]) if b in c)
                       + ")" for c in found)
    assert not found, f"import cycles in rtpo/: {detail}"


# Run by a fresh interpreter: preload the third-party modules, then fork one child per rtpo module.
CHILD = """
import importlib, json, os, sys, time
third, names = json.loads(sys.argv[1]), json.loads(sys.argv[2])
t0 = time.perf_counter()
for t in third:
    try:
        importlib.import_module(t)
    except ImportError:  # an optional dependency (faiss, vllm): its importer fails below if it needs it
        pass
assert not [m for m in sys.modules if m.split(".")[0] == "rtpo"], "a third-party import loaded rtpo"
t1 = time.perf_counter()
bad = []
for name in names:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            importlib.import_module(name)
            os._exit(0)
        except BaseException as e:
            os.write(w, f"{type(e).__name__}: {e}".encode()[:2000])
            os._exit(1)
    os.close(w)
    msg = os.read(r, 4000).decode(errors="replace")
    os.close(r)
    if os.waitpid(pid, 0)[1]:
        bad.append(f"{name}: {msg}")
print("\\n".join(bad))
print(f"preloaded {len(third)} modules in {t1 - t0:.1f} s; imported {len(names)} rtpo modules alone in "
      f"{time.perf_counter() - t1:.1f} s", file=sys.stderr)
sys.exit(1 if bad else 0)
"""


def test_every_module_of_rtpo_imports_alone():
    mods = modules()
    if importlib.util.find_spec("verl") is None:  # the verl plugin needs the dev extra's verl
        mods = {m: p for m, p in mods.items() if not m.startswith("rtpo.verl_ext")}
    # what the modules import at their top from outside rtpo (torch, transformers, verl's trainer, ...)
    third = set().union(*(imports(p, m, mods, top_only=True)[1] for m, p in mods.items())) - {"__future__"}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("VERL_USE_EXTERNAL_MODULES", None)  # verl would import rtpo's plugin modules itself
    res = subprocess.run([sys.executable, "-c", CHILD, json.dumps(sorted(third)), json.dumps(sorted(mods))],
                         capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert res.returncode == 0, f"modules that do not import on their own:\n{res.stdout}\n{res.stderr[-3000:]}"
    print(res.stderr.strip().splitlines()[-1])


def test_no_module_of_rtpo_is_over_800_lines():
    """The house rule (developers' guide): every module of rtpo/ under 800 lines. The report's ledger had
    grown to 1,068 lines (its claim builders, verdict engine and writers in one file; now rtpo/report/claims/).
    rtpo/verl_ext/startup.py is being split under an issue of its own."""
    exempt = {PKG / "verl_ext" / "startup.py"}
    long = {str(p.relative_to(ROOT)): n for p in sorted(PKG.rglob("*.py")) if p not in exempt
            and (n := len(p.read_text().splitlines())) > 800}
    assert not long, long


def test_the_tables_runs_are_a_torch_free_report_module():
    """Which runs each of the paper's tables reads was a report concept kept in rtpo.experiment (TABLE_RUNS);
    it is rtpo.report.table_names, which the DAG imports without torch."""
    code = ("import sys; import rtpo.report.table_names as t, rtpo.dag, rtpo.experiment as e; "
            "assert 'torch' not in sys.modules, 'torch'; assert not hasattr(e, 'TABLE_RUNS'); print(len(t.TABLE_RUNS))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and int(r.stdout) >= 20, r.stderr[-2000:]
