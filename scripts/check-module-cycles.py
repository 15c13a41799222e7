#!/usr/bin/env python3
"""Fails on an import cycle between the modules of a crate.

A cycle (a uses b, b uses c, c uses a) means none of them can be read,
tested or changed alone: each is a piece of one larger module. This check
keeps new ones out; the cycles that remain are listed, each with why, in
scripts/module-cycles-allowed.txt, and the check fails too when a listed
cycle is gone (so the list stays true).

How references are found: every `crate::X`, `super::X` and `self::X`
path in a crate's src/ (in `use` declarations, brace groups included, and
in code), with comments, string literals and `#[cfg(test)]` modules left
out (tests may reach anywhere). A reference from module a::b to c::d is an
edge between the siblings under their deepest common ancestor (here, a
and c); a child naming its ancestor (`super::Item`) is no edge. Each
level of the module tree is checked on its own, so a cycle between
`server/guard.rs` and `server/state.rs` is one too.

Usage: scripts/check-module-cycles.py [--allow FILE] [CRATE_DIR...]
(default: every crates/*/ with a src/); `--self-test` checks the checker
on small made-up crates.
"""

import argparse
import os
import re
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_ALLOW = os.path.join(ROOT, "scripts", "module-cycles-allowed.txt")


def strip_code(text):
    """`text` without comments, string and char literals (replaced by
    blanks so that nothing in them reads as a path)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    if text[i] == "\n":
                        out.append("\n")
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'r(#*)"', text[i:])
            end = text.find('"' + m.group(1), i + len(m.group(0)))
            end = n if end < 0 else end + 1 + len(m.group(1))
            out.append("\n" * text.count("\n", i, end))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append("\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'|'\\x[0-9a-fA-F]{2}'", text[i:]):
            m = re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'|'\\x[0-9a-fA-F]{2}'", text[i:])
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


# `#[cfg(test)]` and `#[cfg(all(test, ...))]`: code built for tests only.
TEST_CFG = r"#\[cfg\((?:all\(\s*)?test\b[^\]]*\]"


def strip_test_modules(code):
    """`code` without the bodies of `#[cfg(test)] mod NAME { ... }`."""
    out, i = [], 0
    pat = re.compile(TEST_CFG + r"\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{")
    while True:
        m = pat.search(code, i)
        if not m:
            out.append(code[i:])
            return "".join(out)
        out.append(code[i:m.start()])
        depth, j = 1, m.end()
        while j < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
        i = j


def module_files(src):
    """{module path (tuple): file} for a crate's src/ directory; the
    crate root (lib.rs or main.rs) is ()."""
    mods = {}
    for dirpath, _, files in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        base = () if rel == "." else tuple(rel.split(os.sep))
        for f in files:
            if not f.endswith(".rs"):
                continue
            stem = f[:-3]
            if base == () and stem in ("lib", "main"):
                path = ()
            elif stem == "mod":
                path = base
            elif base == () and dirpath != src:
                continue
            else:
                path = base + (stem,)
            if path == () and () in mods:
                continue  # a crate with both: lib.rs is the root
            mods[path] = os.path.join(dirpath, f)
    # src/bin/ holds other crate roots, not modules of this one.
    return {p: f for p, f in mods.items() if not (p and p[0] == "bin")}


def use_paths(code):
    """Every path a `use` declaration names, with brace groups expanded."""
    paths = []
    for m in re.finditer(r"\buse\s+([^;]+);", code):
        paths += expand(re.sub(r"\s+", "", m.group(1)))
    return paths


def expand(tree):
    """`a::{b,c::{d,e}}` -> [a::b, a::c::d, a::c::e]."""
    i = tree.find("{")
    if i < 0:
        return [tree]
    prefix, body = tree[:i], tree[i + 1:tree.rfind("}")]
    parts, depth, cur = [], 0, ""
    for ch in body:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += {"{": 1, "}": -1}.get(ch, 0)
        cur += ch
    parts.append(cur)
    return [x for p in parts if p for x in expand(prefix + p)]


def resolve(here, path, modules):
    """The module (tuple) that `path`, written in module `here`, refers
    to: its longest prefix that is a module. None for other crates."""
    segs = [s for s in path.split("::") if s]
    if not segs:
        return None
    if segs[0] == "crate":
        base, rest = (), segs[1:]
    elif segs[0] in ("super", "self"):
        base = here
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                base = base[:-1]
            segs = segs[1:]
        rest = segs
    else:
        return None
    target = base
    for s in rest:
        s = s.split(" as ")[0]
        if target + (s,) in modules:
            target = target + (s,)
        else:
            break
    return target


def test_file_modules(modules):
    """Modules declared `#[cfg(test)] mod NAME;` (tests in a file of
    their own), with everything under them: test code, as a
    `#[cfg(test)] mod NAME { ... }` body is."""
    tests = set()
    pat = re.compile(TEST_CFG + r"\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;")
    for here, f in modules.items():
        with open(f, encoding="utf-8") as fh:
            code = strip_code(fh.read())
        tests.update(here + (m.group(1),) for m in pat.finditer(code))
    return {p for p in modules if any(p[:len(t)] == t for t in tests)}


def edges_of(crate_dir):
    src = os.path.join(crate_dir, "src")
    modules = module_files(src)
    tests = test_file_modules(modules)
    edges = defaultdict(set)  # (parent, child_a) -> {child_b}; keyed per level
    for here, f in modules.items():
        if here in tests:
            continue
        with open(f, encoding="utf-8") as fh:
            code = strip_test_modules(strip_code(fh.read()))
        refs = use_paths(code)
        refs += re.findall(r"(?<![\w:])((?:crate|super|self)(?:::\w+)+)", code)
        for p in refs:
            t = resolve(here, p, modules)
            if t is None:
                continue
            k = 0
            while k < min(len(here), len(t)) and here[k] == t[k]:
                k += 1
            if k == len(here) or k == len(t):
                continue  # one is the other's ancestor
            edges[here[:k]].add((here[k], t[k]))
    return edges


def cycles(pairs):
    """Strongly connected components (Tarjan) of more than one node, each
    as a cycle through all of them, sorted, smallest node first."""
    graph = defaultdict(set)
    for a, b in pairs:
        graph[a].add(b)
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
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

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def load_allow(path):
    """{(crate, frozenset of module paths): reason}."""
    allowed = {}
    if not os.path.exists(path):
        return allowed
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            m = re.match(r"^(\S+):\s*(\S+(?:\s+\S+)*?)\s+--\s+(.+)$", line)
            if not m:
                sys.exit(f"{path}:{n}: expected `CRATE: MODULE MODULE ... -- reason`")
            crate, mods, reason = m.groups()
            names = mods.split()
            allowed[(crate, frozenset(names))] = reason
    return allowed


def self_test():
    """Made-up crates with and without cycles: each must be judged right."""
    import tempfile

    def crate(files):
        d = tempfile.mkdtemp(prefix="cycles-")
        for path, text in files.items():
            full = os.path.join(d, "src", path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w", encoding="utf-8") as fh:
                fh.write(text)
        return d

    def found(files):
        return {lvl: cycles(p) for lvl, p in edges_of(crate(files)).items() if cycles(p)}

    lib = "mod a;\nmod b;\nmod c;\n"
    cases = [
        # A cycle through a brace group and a path in code.
        ({"lib.rs": lib, "a.rs": "use crate::{b::X, c};", "b.rs": "fn f() { crate::a::g() }", "c.rs": ""},
         {(): [["a", "b"]]}),
        # One way only: no cycle.
        ({"lib.rs": lib, "a.rs": "use crate::b::X;", "b.rs": "use crate::c::Y;", "c.rs": ""}, {}),
        # Comments, strings and test modules do not count.
        ({"lib.rs": lib, "a.rs": "use crate::b::X;",
          "b.rs": '// crate::a::x\nconst S: &str = "crate::a::y";\n#[cfg(test)]\nmod tests { use crate::a::Z; }\n'
                 '#[cfg(all(test, not(loom)))]\nmod more { use crate::a::W; }',
          "c.rs": ""}, {}),
        # A child naming its parent is no edge; siblings through super:: are.
        ({"lib.rs": "mod s;", "s/mod.rs": "mod x;\nmod y;\nuse x::A;", "s/x.rs": "use super::y::B;\nuse super::C;",
          "s/y.rs": "use super::x::A;"},
         {("s",): [["x", "y"]]}),
        # A test module in a file of its own is test code too.
        ({"lib.rs": "mod a;\nmod b;\n", "a.rs": "use crate::b::X;\n#[cfg(test)]\nmod tests;",
          "a/tests.rs": "use crate::a::Y;", "b.rs": "#[cfg(test)]\nmod tests;", "b/tests.rs": "use crate::a::Z;"},
         {}),
    ]
    bad = 0
    for n, (files, want) in enumerate(cases):
        got = found(files)
        if got != want:
            bad += 1
            print(f"self-test case {n}: found {got}, want {want}")
    print("self-test:", "FAILED" if bad else "ok")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--allow", default=DEFAULT_ALLOW, help="allow-list file")
    ap.add_argument("--self-test", action="store_true", help="check the checker")
    ap.add_argument("crates", nargs="*", help="crate directories (default crates/*)")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    crates = a.crates or sorted(
        os.path.join(ROOT, "crates", d)
        for d in os.listdir(os.path.join(ROOT, "crates"))
        if os.path.isdir(os.path.join(ROOT, "crates", d, "src"))
    )
    allowed = load_allow(a.allow)
    seen, bad = set(), 0
    for c in crates:
        name = os.path.basename(os.path.normpath(c))
        for level, pairs in sorted(edges_of(c).items()):
            for comp in cycles(pairs):
                names = ["::".join(level + (m,)) for m in comp]
                key = (name, frozenset(names))
                seen.add(key)
                if key in allowed:
                    print(f"allowed: {name}: {' '.join(names)} ({allowed[key]})")
                else:
                    bad += 1
                    print(f"CYCLE: {name}: {' <-> '.join(names)}")
                    for x, y in sorted(pairs):
                        if x in comp and y in comp:
                            print(f"    {'::'.join(level + (x,))} uses {'::'.join(level + (y,))}")
    for key in sorted(set(allowed) - seen, key=lambda k: (k[0], sorted(k[1]))):
        if any(os.path.basename(os.path.normpath(c)) == key[0] for c in crates):
            bad += 1
            print(f"GONE: {key[0]}: {' '.join(sorted(key[1]))} is listed in {a.allow} but no longer a cycle: remove it")
    if bad:
        sys.stdout.flush()
        print(f"check-module-cycles: {bad} problem(s)")
        return 1
    print("check-module-cycles: no cycles beyond the allowed list")
    return 0


if __name__ == "__main__":
    sys.exit(main())
