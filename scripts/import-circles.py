#!/usr/bin/env python3
"""Import circles between the modules of each crate, level by level.

At the crate root, a module `a` uses `b` when a file under `a` names `crate::b` (in
a `use` or a path); inside a directory module `d`, child `a` uses child `b` when a
file under `d/a` names `crate::d::b` or reaches it through `super::`. A child naming
its parent (`super::Shared` from `d/a.rs`) is not a circle: the parent holds what
its children share. Circles are the strongly connected components of that graph with more than
one module. The circles that exist are listed in `scripts/import-circles.allowed`
(one per line: `crate: mod mod ...`, or
`crate/dir: mod mod ...` inside a directory module); a circle that is new, or that grew past the
one allowed, fails this check, so the layering can only get better.

    python3 scripts/import-circles.py           # check (CI)
    python3 scripts/import-circles.py --print   # every crate's circles and edges
    python3 scripts/import-circles.py --write   # record today's circles as allowed
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
ALLOWED = ROOT / "scripts" / "import-circles.allowed"
USE = re.compile(r"\bcrate::([a-z_][a-z0-9_]*)")
GROUP = re.compile(r"\bcrate::\{([^}]*)\}", re.S)


def strip_tests(text):
    """The file without its `#[cfg(test)] mod tests { ... }` tail."""
    i = text.find("#[cfg(test)]\nmod tests")
    return text if i < 0 else text[:i]


def module_path(src, path):
    """`src/a/b.rs` -> ("a", "b"); `src/a/mod.rs` -> ("a",); lib.rs -> ()."""
    parts = list(path.relative_to(src).parts)
    last = parts.pop().removesuffix(".rs")
    if last not in ("mod", "lib", "main"):
        parts.append(last)
    return tuple(parts)


PATH = re.compile(r"\b((?:crate|super|self)(?:::super)*)::((?:[A-Za-z_][A-Za-z0-9_]*::)*)(\{[^}]*\}|[A-Za-z_][A-Za-z0-9_]*)", re.S)


def references(here, text):
    """Absolute module paths (as tuples) that `text`, in module `here`, names."""
    out = []
    for head, mid, tail in PATH.findall(text):
        steps = head.split("::")
        if steps[0] == "crate":
            base = []
        else:
            base = list(here)
            for s in steps:
                if s == "super" and base:
                    base.pop()
        mids = [m for m in mid.split("::") if m]
        tails = (
            [x.strip().split("::")[0] for x in tail[1:-1].split(",")]
            if tail.startswith("{")
            else [tail]
        )
        for x in tails:
            if x and x not in ("self", "super"):
                out.append(tuple(base + mids + [x]))
            elif x == "self":
                out.append(tuple(base + mids))
    return out


def graph(crate_dir, container=()):
    """Uses between the child modules of `container` (the crate root by default)."""
    src = crate_dir / "src"
    mods, edges = set(), {}
    n = len(container)
    for path in sorted(src.rglob("*.rs")):
        if "bin" in path.relative_to(src).parts[:1] or path.name == "tests.rs":
            continue
        here = module_path(src, path)
        if len(here) <= n or here[:n] != tuple(container):
            continue
        m = here[n]
        mods.add(m)
        text = strip_tests(path.read_text())
        # Drop comments: a doc link is not an import.
        text = "\n".join(l.split("//")[0] for l in text.splitlines())
        for r in references(here, text):
            if len(r) > n and r[:n] == tuple(container) and r[n] != m:
                edges.setdefault(m, set()).add(r[n])
        edges.setdefault(m, set())
    for m in edges:
        edges[m] &= mods
    return mods, edges


def containers(crate_dir):
    """The crate root and every directory module under it."""
    src = crate_dir / "src"
    out = [()]
    for d in sorted(p for p in src.rglob("*") if p.is_dir() and p.name != "bin"):
        out.append(d.relative_to(src).parts)
    return out


def circles(mods, edges):
    """Tarjan's strongly connected components of more than one module."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
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

    sys.setrecursionlimit(10000)
    for v in sorted(mods):
        if v not in index:
            visit(v)
    return sorted(out)


def all_circles():
    found = {}
    for crate_dir in sorted((ROOT / "crates").iterdir()):
        if (crate_dir / "src").is_dir():
            for c in containers(crate_dir):
                mods, edges = graph(crate_dir, c)
                name = "/".join((crate_dir.name,) + tuple(c))
                found[name] = (circles(mods, edges), edges)
    return found


def main():
    found = all_circles()
    lines = [
        f"{name}: {' '.join(c)}" for name, (cs, _) in found.items() for c in cs
    ]
    if "--write" in sys.argv:
        ALLOWED.write_text(
            "# Import circles that exist today (scripts/import-circles.py --write).\n"
            + "\n".join(lines)
            + "\n"
        )
        print(f"{len(lines)} circles recorded in {ALLOWED.relative_to(ROOT)}")
        return 0
    if "--print" in sys.argv:
        for name, (cs, edges) in found.items():
            for c in cs:
                print(f"{name}: circle of {len(c)}: {' '.join(c)}")
                for m in c:
                    print(f"    {m} -> {' '.join(sorted(edges[m] & set(c)))}")
    allowed = {}
    for l in ALLOWED.read_text().splitlines():
        if l.strip() and not l.startswith("#"):
            name, mods = l.split(":", 1)
            allowed.setdefault(name.strip(), []).append(set(mods.split()))
    bad = []
    for name, (cs, _) in found.items():
        for c in cs:
            if not any(set(c) <= a for a in allowed.get(name, [])):
                bad.append(f"{name}: {' '.join(c)}")
    total = sum(len(cs) for cs, _ in found.values())
    print(f"{total} import circles ({sum(len(c) for cs, _ in found.values() for c in cs)} modules)")
    if bad:
        print("new or grown import circles (break them, or see the docstring):")
        for b in bad:
            print(f"  {b}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
