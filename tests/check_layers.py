#!/usr/bin/env python3
"""The layer rule of src/ (docs/design.md, "The rule"), checked.

  util <- wire <- backend, gpu <- core <- api <- kv

A file may include headers of its own folder and of folders of a lower
rank, and the public headers (include/); nothing else. Folders of one rank
(backend, gpu) do not include each other. Calls upward go only through
function pointers registered at creation (the backend ops table, the op
path table), which no include shows.

Fails (exit 1, one line per finding, file:line where there is one) on:
  - an include that goes up or sideways, names a file that does not exist,
    or climbs out with "..";
  - a source file outside the layer folders;
  - a header private to a folder (core/worker.h: the worker's state)
    reached, even through other headers, from outside that folder;
  - an include cycle between modules (foo.c and foo.h are one module);
  - a declaration of a function or object defined elsewhere inside a .c
    file (prototypes belong in the owner's header);
  - with --lib, a global symbol of the static library that is neither
    xfer_* (public) nor xi_* (internal).

Usage: check_layers.py [--src DIR] [--include DIR] [--lib libxfer.a]
       check_layers.py --self-test
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

# Modules built on the public API (kv, and moe being written) share the top rank.
RANK = {"util": 0, "wire": 1, "backend": 2, "gpu": 2, "core": 3, "api": 4, "kv": 5, "moe": 5}
# Header -> the only folder whose files may reach it.
PRIVATE = {"core/worker.h": "core"}
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def sources(src):
    for root, _, names in os.walk(src):
        for n in sorted(names):
            if n.endswith((".c", ".h")):
                yield os.path.relpath(os.path.join(root, n), src)


def resolve(src, pub, rel, name):
    """The src-relative path of an included header, 'PUBLIC' for include/, or None."""
    here = os.path.dirname(os.path.join(src, rel))
    for base in (here, src):
        p = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(p):
            r = os.path.relpath(p, src)
            return None if r.startswith("..") else r
    if pub and os.path.isfile(os.path.join(pub, name)):
        return "PUBLIC"
    return None


def folder(rel):
    parts = rel.split(os.sep)
    return parts[0] if len(parts) > 1 else None


def module(rel):
    return os.path.splitext(rel)[0]


def scan_includes(src, pub):
    """{file: [(line, included, resolved)]} and the findings so far."""
    incs, errs = {}, []
    for rel in sources(src):
        incs[rel] = []
        with open(os.path.join(src, rel), encoding="utf-8", errors="replace") as f:
            for no, line in enumerate(f, 1):
                m = INCLUDE_RE.match(line)
                if not m:
                    continue
                name = m.group(1)
                where = f"src/{rel}:{no}"
                if ".." in name.split("/"):
                    errs.append(f'{where}: "{name}": name internal headers from src/, never with ".."')
                    continue
                r = resolve(src, pub, rel, name)
                if r is None:
                    errs.append(f'{where}: "{name}" is not a file of src/ or include/')
                    continue
                incs[rel].append((no, name, r))
    return incs, errs


def check_folders(incs):
    errs = []
    for rel, lst in incs.items():
        f = folder(rel)
        if f not in RANK:
            errs.append(f"src/{rel}: not in a layer folder ({', '.join(RANK)})")
            continue
        for no, name, r in lst:
            if r == "PUBLIC":
                continue
            g = folder(r)
            if g == f or g not in RANK:
                continue
            if RANK[g] == RANK[f]:
                errs.append(f'src/{rel}:{no}: "{name}": {f}/ and {g}/ are siblings of one rank')
            elif RANK[g] > RANK[f]:
                errs.append(f'src/{rel}:{no}: "{name}": {f}/ may not include {g}/ (a higher layer)')
    return errs


def check_private(incs):
    errs = []
    for rel in incs:
        seen, todo = set(), [rel]
        while todo:
            cur = todo.pop()
            for no, name, r in incs.get(cur, []):
                if r == "PUBLIC" or r in seen:
                    continue
                seen.add(r)
                todo.append(r)
                owner = PRIVATE.get(r)
                if owner and folder(rel) != owner:
                    how = "" if cur == rel else f" (through src/{cur}:{no})"
                    errs.append(f"src/{rel}: reaches {r}, private to {owner}/{how}")
    return errs


def check_cycles(incs):
    graph = {}
    for rel, lst in incs.items():
        a = module(rel)
        graph.setdefault(a, set())
        for _, _, r in lst:
            if r != "PUBLIC" and module(r) != a:
                graph[a].add(module(r))
                graph.setdefault(module(r), set())
    # Tarjan's strongly connected components, iteratively.
    index, low, on, stack, sccs, counter = {}, {}, set(), [], [], [0]
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on:
                    low[v] = min(low[v], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    sccs.append(sorted(comp))
    return [f"include cycle between modules: {' <-> '.join(c)}" for c in sccs]


def strip_code(text):
    """The text without comments, string and character literals (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


DECL_OK = re.compile(r"^(static|typedef|_Static_assert|struct|union|enum)\b")


def file_scope_statements(text):
    """(line, text) of each file-scope statement ending in ';' (braced parts dropped)."""
    lines = text.split("\n")
    for i, l in enumerate(lines):  # preprocessor lines, with their continuations
        if l.lstrip().startswith("#") or (i and lines[i - 1].rstrip().endswith("\\") and
                                          lines[i - 1].lstrip().startswith("#")):
            lines[i] = ""
    depth, stmt, start, line = 0, [], None, 1
    for c in "\n".join(lines):
        if c == "\n":
            line += 1
        if c == "{":
            if depth == 0:
                head = "".join(stmt).strip()
                func = head.endswith(")")
            depth += 1
            continue
        if c == "}":
            depth -= 1
            if depth == 0 and func:  # a function definition: no ';' follows
                stmt, start = [], None
            continue
        if depth:
            continue
        if c == ";":
            yield start, " ".join("".join(stmt).split())
            stmt, start = [], None
            continue
        if start is None and not c.isspace():
            start = line
        stmt.append(c)


def check_prototypes(src):
    errs = []
    for rel in sources(src):
        if not rel.endswith(".c"):
            continue
        with open(os.path.join(src, rel), encoding="utf-8", errors="replace") as f:
            text = strip_code(f.read())
        for line, body in file_scope_statements(text):
            if not body or "=" in body or DECL_OK.match(body):
                continue
            if "(" in body or body.startswith("extern"):
                errs.append(f"src/{rel}:{line}: declares '{body[:70]}' in a .c file: "
                            "it belongs in its owner's header")
    return errs


def check_symbols(names):
    # Names starting with "__" belong to the implementation (the sanitizers'
    # __odr_asan.* markers, for instance), never to the library's code.
    return [f"libxfer.a: global symbol {s} has no xfer_ or xi_ prefix"
            for s in sorted(set(names)) if not s.startswith(("xfer_", "xi_", "__"))]


def lib_symbols(lib):
    out = subprocess.run(["nm", "-g", "--defined-only", lib], check=True, capture_output=True,
                         text=True).stdout
    return [f[2] for f in (l.split() for l in out.splitlines()) if len(f) == 3]


def check(src, pub, lib=None):
    incs, errs = scan_includes(src, pub)
    errs += check_folders(incs) + check_private(incs) + check_cycles(incs) + check_prototypes(src)
    if lib:
        errs += check_symbols(lib_symbols(lib))
    return errs


def self_test():
    """The check fails where it must: a tiny tree with one of each fault."""
    def tree(files):
        d = tempfile.mkdtemp(prefix="check_layers.")
        for path, body in files.items():
            p = os.path.join(d, path)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w") as f:
                f.write(body)
        return os.path.join(d, "src"), os.path.join(d, "include")

    clean = {
        "include/xfer.h": "",
        "src/util/log.h": "",
        "src/util/log.c": '#include "util/log.h"\n#include "xfer.h"\n',
        "src/core/worker.h": '#include "util/log.h"\n',
        "src/core/op.h": "struct op;\nvoid xi_op_fail(struct op *op);\n",
        "src/core/op.c": '#include "core/op.h"\n#include "core/worker.h"\n'
                         "static int helper(int x);\nstatic int helper(int x) { return x; }\n"
                         "void xi_op_fail(struct op *op) { (void)op; int y(void); }\n",
        "src/api/submit.c": '#include "core/op.h"\n#include "xfer.h"\n',
    }
    cases = {
        "upward include": ({"src/util/bad.c": '#include "core/op.h"\n'}, "a higher layer"),
        "sideways include": ({"src/gpu/g.h": "", "src/backend/b.c": '#include "gpu/g.h"\n'},
                             "siblings of one rank"),
        "missing header": ({"src/api/x.c": '#include "core/nothere.h"\n'}, "is not a file"),
        "parent path": ({"src/api/x.c": '#include "../core/op.h"\n'}, 'never with ".."'),
        "file outside the layers": ({"src/loose.c": ""}, "not in a layer folder"),
        "private header": ({"src/api/peek.c": '#include "core/worker.h"\n'}, "private to core/"),
        "private header through another": (
            {"src/core/leak.h": '#include "core/worker.h"\n', "src/api/peek.c": '#include "core/leak.h"\n'},
            "(through src/core/leak.h:1)"),
        "module cycle": ({"src/core/a.h": '#include "core/b.h"\n', "src/core/b.h": "",
                          "src/core/b.c": '#include "core/b.h"\n#include "core/a.h"\n'},
                         "include cycle between modules: core/a <-> core/b"),
        "prototype in a .c file": ({"src/api/proto.c": "int xi_elsewhere(int a,\n\t\tint b);\n"},
                                   "src/api/proto.c:1: declares"),
        "extern object in a .c file": ({"src/api/ext.c": "extern const int xi_table;\n"}, "declares"),
    }
    failures = []
    s, p = tree(clean)
    errs = check(s, p)
    if errs:
        failures.append(f"clean tree: unexpected findings {errs}")
    for name, (extra, want) in cases.items():
        s, p = tree({**clean, **extra})
        errs = check(s, p)
        if not any(want in e for e in errs):
            failures.append(f"{name}: no finding containing {want!r} (got {errs})")
    sym = check_symbols(["xfer_write", "xi_op_fail", "now_ns", "__odr_asan.xi_log_level"])
    if sym != ["libxfer.a: global symbol now_ns has no xfer_ or xi_ prefix"]:
        failures.append(f"symbols: got {sym}")
    for f in failures:
        print("self-test FAILED:", f)
    print(f"self-test: {len(cases) + 2 - len(failures)} of {len(cases) + 2} checks found their fault")
    return 1 if failures else 0


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", default=os.path.join(here, "..", "src"))
    ap.add_argument("--include", default=os.path.join(here, "..", "include"))
    ap.add_argument("--lib", help="the static library, for the symbol check")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    errs = check(os.path.abspath(a.src), os.path.abspath(a.include), a.lib)
    for e in errs:
        print(e)
    n = len(list(sources(a.src)))
    print(f"check_layers: {n} files, {len(errs)} finding(s)" + ("" if a.lib else " (no --lib: symbols not checked)"))
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main())
