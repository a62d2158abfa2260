#!/usr/bin/env python3
"""File-level import circles in every crate (issue 16, "a house without
circles"): builds, per crate, the graph of its source files — an edge from
a file to each file whose module it names (`use crate::…`, `super::…`,
`self::…`, a child module's path, or the same paths in code) — and prints
every strongly connected component of more than one file. Exit 1 if any.

What counts: library and binary sources under `src/` (test modules,
`#[cfg(test)] mod …`, are left out; tests import what they test). A
name a module only imports (`crate::Name` through the root's `pub use`,
`super::Name` through the parent's `use`) is followed to the file that
defines it: a facade is not a party to a circle. A child naming its
parent's own item (`super::Type`) while the parent calls into the child
*is* a circle: the item belongs in a file both can name. `--siblings` sets those child-to-ancestor references aside
and reports only circles between files that do not contain one another
(the looser measure: a module split into a parent and its children).

Usage: scripts/module-cycles.py [--siblings] [CRATE_DIR ...] (default: crates/*).
       scripts/module-cycles.py --self-test   (small crates with a known answer)
`.ci/run` runs the self-test, then the strict measure over every crate.
"""

import os
import re
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip_comments_and_strings(text):
    """Blank out comments, string and char literals (keeping newlines)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 20]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'r(#*)"', text[i:])
            end = '"' + m.group(1)
            j = text.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4] + text[i + 4:i + 12]):
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\x..|\\.|[^\\'])'", text[i:])
            if m:
                out.append("' '")
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def drop_test_modules(text):
    """Remove `#[cfg(test)] mod name { … }` bodies (code already stripped)."""
    while True:
        m = re.search(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+" + IDENT + r"\s*\{", text)
        if not m:
            return text
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        text = text[:m.start()] + "\n" * text.count("\n", m.start(), j) + text[j:]


class Crate:
    def __init__(self, root_dir):
        self.dir = root_dir
        self.files = {}  # module path tuple -> file
        self.inline = {}  # module path tuple -> containing file (inline `mod x {`)
        self.text = {}  # file -> stripped text
        src = os.path.join(root_dir, "src")
        for root in ("lib.rs", "main.rs"):
            path = os.path.join(src, root)
            if os.path.exists(path):
                self.load((), path, src, root)

    def load(self, mod_path, path, src_dir, root_name=None):
        if path in self.text:
            return
        with open(path, encoding="utf-8") as f:
            text = drop_test_modules(strip_comments_and_strings(f.read()))
        self.text[path] = text
        self.files.setdefault(mod_path, path)
        # Where this module's children live.
        base = os.path.basename(path)
        if root_name or base == "mod.rs":
            child_dir = os.path.dirname(path)
        else:
            child_dir = os.path.join(os.path.dirname(path), base[:-3])
        decl = re.compile(
            r"(#\[path\s*=\s*\"\"\]\s*)?(#\[[^\]]*\]\s*)*(pub(\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*(;|\{)"
        )
        for m in decl.finditer(text):
            name = m.group(5)
            if m.group(6) == "{":
                self.inline[mod_path + (name,)] = path
                continue
            attrs = m.group(0)
            if "cfg(test)" in attrs:
                continue
            for cand in (os.path.join(child_dir, name + ".rs"), os.path.join(child_dir, name, "mod.rs")):
                if os.path.exists(cand):
                    self.load(mod_path + (name,), cand, src_dir)
                    break

    def module_of(self, path):
        for mod_path, file in self.files.items():
            if file == path:
                return mod_path
        return None

    def resolve(self, segments, seen=None):
        """The file of the deepest module a path names (None: outside)."""
        best = None
        for k in range(len(segments), -1, -1):
            prefix = tuple(segments[:k])
            if prefix in self.files:
                best = self.files[prefix]
                rest = segments[k:]
                break
            if prefix in self.inline:
                return self.inline[prefix]
        if best is None:
            return None
        # A name a module only imports (`use`, `pub use`): follow it to the
        # file that defines it. A re-export is not a dependency on the
        # module that re-exports it — the facade is not a party to a circle.
        if rest and rest[0] != "*":
            seen = set() if seen is None else seen
            if (prefix, rest[0]) not in seen:
                seen.add((prefix, rest[0]))
                target = self.imported(prefix, rest[0], seen)
                if target:
                    return target
        return best

    def imported(self, mod_path, name, seen):
        """The defining file of `name` when module `mod_path` imports it."""
        children = self.children(mod_path)
        for path in use_paths(self.text[self.files[mod_path]]):
            if not path or path[-1] != name:
                continue
            absolute = absolute_path(mod_path, children, list(path))
            if absolute is not None:
                return self.resolve(absolute, seen)
        return None

    def children(self, mod_path):
        return {p[-1] for p in self.files if len(p) == len(mod_path) + 1 and p[:-1] == mod_path}


def absolute_path(mod_path, children, segs):
    """A path as written in module `mod_path`, from the crate root (None:
    another crate or the standard library)."""
    head = segs[0]
    if head == "crate":
        return segs[1:]
    if head in ("super", "self"):
        base = list(mod_path)
        while segs and segs[0] in ("super", "self"):
            if segs.pop(0) == "super":
                base = base[:-1]
        return base + segs
    if head in children:
        return list(mod_path) + segs
    return None


def expand(tree):
    """Expand a use tree (`a::{b, c::{d as e}}`) into paths."""
    tree = tree.strip()
    m = re.match(r"^(.*?)\{(.*)\}$", tree, re.S)
    if not m:
        tree = re.sub(r"\s+as\s+" + IDENT + "$", "", tree)
        return [tuple(s for s in tree.replace(" ", "").split("::") if s)]
    prefix = [s for s in m.group(1).replace(" ", "").split("::") if s]
    parts, depth, cur = [], 0, ""
    for ch in m.group(2):
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += {"{": 1, "}": -1}.get(ch, 0)
        cur += ch
    parts.append(cur)
    out = []
    for part in parts:
        if part.strip():
            for sub in expand(part):
                out.append(tuple(prefix) + (sub if sub != ("self",) else ()))
    return out


def use_paths(text):
    for m in re.finditer(r"\buse\s+([^;]+);", text):
        yield from expand(m.group(1))


def edges_of(crate, path):
    mod_path = crate.module_of(path)
    text = crate.text[path]
    children = crate.children(mod_path)
    paths = list(use_paths(text))
    # Paths written in code; `use` items are read whole above (scanning
    # them again would take `use a::b::{X, Y}` for a use of module `a::b`).
    code = re.sub(r"\buse\s+[^;]+;", "", text)
    # Nor is a visibility (`pub(in crate::cmd)`) a use of the module it names.
    code = re.sub(r"\bpub\s*\(\s*in\s+[^)]*\)", "pub", code)
    for m in re.finditer(r"(?<![:\w])((?:" + IDENT + r"::)+" + IDENT + ")", code):
        paths.append(tuple(m.group(1).split("::")))
    targets = set()
    for p in paths:
        if not p:
            continue
        absolute = absolute_path(mod_path, children, list(p))
        if absolute is None:
            continue
        target = crate.resolve(absolute)
        if target and target != path:
            targets.add(target)
    return targets


def cycles(graph):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
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
    return out


def measure(dirs, siblings, top, out):
    """Print the circles of each crate in `dirs`; return (files, circles)."""
    found = 0
    files = 0
    for d in dirs:
        crate = Crate(d)
        graph = {}
        for f in crate.text:
            edges = edges_of(crate, f)
            if siblings:
                mod_path = crate.module_of(f)
                ancestors = {crate.files.get(mod_path[:k]) for k in range(len(mod_path))}
                edges -= ancestors
            graph[f] = edges
        files += len(graph)
        for comp in cycles(graph):
            found += 1
            rel = [os.path.relpath(f, top) for f in comp]
            print("circle: " + " <-> ".join(rel), file=out)
            for f in comp:
                inside = sorted(os.path.relpath(t, top) for t in graph[f] if t in comp)
                print(f"  {os.path.relpath(f, top)} -> {', '.join(inside)}", file=out)
    return files, found


# Small crates with a known answer: the measure must find each circle and
# must not take a facade, a re-export, a visibility or a test for one.
SELF_TESTS = [
    ("a child naming its parent's own type while the parent calls it", 1, {
        "lib.rs": "mod a;\npub struct T;\npub fn f() { a::g(); }\n",
        "a.rs": "use crate::T;\npub fn g() {}\n",
    }),
    ("a glob of the parent while the parent calls the child", 1, {
        "lib.rs": "mod a;\nfn helper() {}\npub fn f() { a::g(); }\n",
        "a.rs": "use super::*;\npub fn g() { helper() }\n",
    }),
    ("three siblings in a ring", 1, {
        "lib.rs": "mod a;\nmod b;\nmod c;\n",
        "a.rs": "use crate::b::B;\npub struct A;\n",
        "b.rs": "use crate::c::C;\npub struct B;\n",
        "c.rs": "pub struct C(crate::a::A);\n",
    }),
    ("a name reached through the root's re-export", 0, {
        "lib.rs": "mod a;\nmod b;\npub use a::T;\npub fn f() { b::g(); }\n",
        "a.rs": "pub struct T;\n",
        "b.rs": "use crate::T;\npub fn g() {}\n",
    }),
    ("a name reached through a module's re-export, braces and all", 0, {
        "lib.rs": "mod m;\n",
        "m/mod.rs": "mod x;\nmod y;\npub use x::{T, U};\npub fn f() { y::g(); }\n",
        "m/x.rs": "pub struct T;\npub struct U;\n",
        "m/y.rs": "use super::{T, U};\npub fn g() {}\n",
    }),
    ("a visibility path and a test module", 0, {
        "lib.rs": "mod m;\n",
        "m/mod.rs": "mod y;\npub fn f() { y::g(); }\n",
        "m/y.rs": "pub(in crate::m) fn h() {}\npub fn g() { h() }\n"
                  "#[cfg(test)]\nmod tests {\n    use crate::m::f;\n}\n",
    }),
]


def self_test():
    import io
    import tempfile
    failed = 0
    for name, want, files in SELF_TESTS:
        with tempfile.TemporaryDirectory() as d:
            for rel, text in files.items():
                path = os.path.join(d, "src", rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
            out = io.StringIO()
            _, got = measure([d], False, d, out)
        if got != want:
            failed += 1
            print(f"self-test FAILED: {name}: {got} circle(s), expected {want}\n{out.getvalue()}")
    print(f"self-test: {len(SELF_TESTS) - failed}/{len(SELF_TESTS)} cases")
    return 1 if failed else 0


def main():
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    args = sys.argv[1:]
    if "--self-test" in args:
        return self_test()
    siblings = "--siblings" in args
    args = [a for a in args if a != "--siblings"]
    dirs = args or sorted(
        os.path.join(top, "crates", d) for d in os.listdir(os.path.join(top, "crates"))
    )
    files, found = measure(dirs, siblings, top, sys.stdout)
    print(f"{files} files in {len(dirs)} crates, {found} circle(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
