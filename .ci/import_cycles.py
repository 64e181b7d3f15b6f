"""No import cycle between the modules of mysqlq, at any level (docs/architecture.md, "Layering").

Reads mysqlq/src as text and builds the module tree from its files. A module refers to another
when its code (not its comments, strings or unit tests) names a path into it: `crate::store::x`,
`super::write::y`, or an item re-exported on the way (`crate::JobContext`, `use super::Released`:
the `use` lines of lib.rs and of each mod.rs say where each re-exported name comes from). Each
reference is counted between the two sibling modules it crosses (`worker::executor` naming
`crate::store::claim` is an edge worker -> store; `worker::lease` naming `super::write` is an edge
lease -> write inside worker), so every level is checked: the crate's top modules, and the files
of each directory module. A name that resolves to nothing fails the check, so a new way of
naming another module cannot slip past it.

  python3 .ci/import_cycles.py [--edges] [--root DIR]   check (DIR defaults to mysqlq/src)
  python3 .ci/import_cycles.py --self-test              the check finds cycles it must find

Exits 1 and prints the cycle and the files behind each edge when there is one."""
import os
import re
import sys
import tempfile

IDENT = r'[A-Za-z_][A-Za-z0-9_]*'


def code_of(text):
    """The code of a file: no unit tests, comments, or contents of string and char literals."""
    text = re.split(r'#\[cfg\(test\)\]\s*(?:pub\s+)?mod\s+\w+\s*\{', text)[0]
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('//', i):
            j = text.find('\n', i)
            i = n if j < 0 else j
        elif text.startswith('/*', i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith('/*', i):
                    depth, i = depth + 1, i + 2
                elif text.startswith('*/', i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif re.match(r'b?r#*"', text[i:i + 40]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == '_')):
            m = re.match(r'b?r(#*)"', text[i:])
            end = '"' + m.group(1)
            j = text.find(end, i + m.end())
            out.append('""')
            i = n if j < 0 else j + len(end)
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == '\\' else 1
            out.append('""')
            i = j + 1
        elif c == "'" and (text.startswith('\\', i + 1) or text[i + 2:i + 3] == "'"):
            j = text.find("'", i + 3 if text[i + 1] == '\\' else i + 2)
            out.append("' '")
            i = j + 1
        else:
            out.append(c)
            i += 1
    return ''.join(out)


def flatten(path):
    """`a::{b, c::{d, e as f}}` -> [(a::b, b), (a::c::d, d), (a::c::e, f)]: full path, bound name."""
    m = re.match(r'^(.*?)\{(.*)\}$', path)
    if not m:
        full, _, alias = path.partition('@')
        return [(full, alias or full.split('::')[-1])]
    prefix, inner = m.groups()
    parts, depth, cur = [], 0, ''
    for ch in inner:
        if ch == ',' and depth == 0:
            parts.append(cur)
            cur = ''
            continue
        depth += ch == '{'
        depth -= ch == '}'
        cur += ch
    parts.append(cur)
    res = []
    for p in parts:
        if p:
            res.extend(flatten(prefix + p))
    return res


def use_paths(code):
    """Every `use` of the code: (full path, name it binds)."""
    out = []
    for stmt in re.findall(r'\buse\s+([^;]*);', code, re.S):
        stmt = re.sub(r'\s+as\s+', '@', re.sub(r'\s+', ' ', stmt)).replace(' ', '')
        out.extend(flatten(stmt))
    return out


class Tree:
    def __init__(self, root):
        self.root = root
        self.files = {}   # module path (tuple) -> file
        self.code = {}
        self.find((), os.path.join(root, 'lib.rs'), root)
        # module -> {bound name -> absolute path (tuple)} from its `use` lines
        self.uses = {m: {} for m in self.files}
        for m in self.files:
            for full, name in use_paths(self.code[m]):
                if name == 'self':
                    full, name = full[:-len('::self')], full.split('::')[-2]
                if name == '*':
                    continue
                self.uses[m][name] = self.absolute(m, full.split('::'))

    def find(self, mod, path, directory):
        self.files[mod] = path
        self.code[mod] = code = code_of(open(path).read())
        for child in re.findall(r'\bmod\s+(' + IDENT + r')\s*;', code):
            here = directory if path.endswith(('lib.rs', 'mod.rs')) else path[:-3]
            f = os.path.join(here, child + '.rs')
            d = os.path.join(here, child)
            if os.path.exists(f):
                self.find(mod + (child,), f, d)
            else:
                self.find(mod + (child,), os.path.join(d, 'mod.rs'), d)

    def absolute(self, mod, segs):
        """A path as written in `mod`, made absolute (a tuple of segments from the crate root)."""
        segs = [s for s in segs if s]
        if not segs:
            return ()
        head, rest = segs[0], segs[1:]
        if head == 'crate':
            return tuple(rest)
        if head == 'self':
            return mod + tuple(rest)
        if head == 'super':
            up = mod[:-1]
            while rest and rest[0] == 'super':
                up, rest = up[:-1], rest[1:]
            return up + tuple(rest)
        if mod + (head,) in self.files:
            return mod + tuple(segs)
        return ('<extern>',) + tuple(segs)  # another crate (std, sqlx, …)

    def resolve(self, path, seen=()):
        """The module a path (absolute) ends in, following re-exports; None when nothing is
        there. Items defined in a module resolve to that module."""
        if path[:1] == ('<extern>',):
            return '<extern>'
        mod = ()
        for i, seg in enumerate(path):
            if mod + (seg,) in self.files:
                mod = mod + (seg,)
                continue
            target = self.uses[mod].get(seg)
            if target is not None and (mod, seg) not in seen:
                return self.resolve(target + path[i + 1:], seen + ((mod, seg),))
            if re.search(r'\b(fn|struct|enum|trait|type|const|static|macro_rules!|union)\s+' + re.escape(seg) + r'\b', self.code[mod]) \
                    or re.search(r'#\[macro_export\][^;]*macro_rules!\s*' + re.escape(seg), self.code[mod]):
                return mod
            return None
        return mod


def check(root, show_edges=False, out=print):
    t = Tree(root)
    edges, where, unknown = {}, {}, set()
    for m in t.files:
        code = t.code[m]
        refs = [p.split('::') for p in re.findall(r'\b(?:crate|super|self)(?:::' + IDENT + r')+', code)]
        refs += [re.sub(r'::self$', '', full).split('::') for full, _ in use_paths(code)]
        for segs in refs:
            path = t.absolute(m, segs)
            if path[:1] == ('<extern>',):
                continue
            target = t.resolve(path)
            if target is None:
                unknown.add(('/'.join(m) or 'lib', '::'.join(segs)))
                continue
            # the two siblings under the modules' lowest common ancestor
            k = 0
            while k < len(m) and k < len(target) and m[k] == target[k]:
                k += 1
            if k == len(m) or k == len(target):
                continue  # a module and its own ancestor or descendant
            a, b = m[:k + 1], target[:k + 1]
            edges.setdefault(a, set()).add(b)
            where.setdefault((a, b), set()).add(os.path.relpath(t.files[m], root))
    if unknown:
        out('import check: these paths name nothing in mysqlq (or this script cannot follow them):')
        for m, p in sorted(unknown):
            out(f'  {m}: {p}')
        return 1
    name = lambda m: '::'.join(m) or 'crate'
    if show_edges:
        for a in sorted(edges):
            out(name(a), '->', ' '.join(name(b) for b in sorted(edges[a])))
    index, low, stack, on, cycles, counter = {}, {}, [], set(), [], [0]
    nodes = set(edges) | {b for v in edges.values() for b in v}

    def strongconnect(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                strongconnect(w)
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
                cycles.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            strongconnect(v)
    if not cycles:
        out(f'no import cycle between the {len(t.files)} modules of mysqlq at any level '
            f'({sum(len(v) for v in edges.values())} sibling edges, re-exports followed)')
        return 0
    out('import cycles between the modules of mysqlq:')
    for c in cycles:
        out('  cycle:', ', '.join(name(x) for x in c))
        for a in c:
            for b in c:
                if b in edges.get(a, ()):
                    out('   ', name(a), '->', name(b), sorted(where[(a, b)]))
    return 1


def self_test():
    """Small crates the check must judge right: a cycle through a root re-export (the one issue 16
    found missed), one through `super::` between the files of a directory module, one through a
    mod.rs re-export, an unresolvable name, and an acyclic crate."""
    cases = {
        'root re-export cycle': (1, {
            'lib.rs': 'mod a;\nmod b;\npub use a::A;\npub use b::B;\n',
            'a.rs': 'use crate::B;\npub struct A(B);\n',
            'b.rs': 'pub struct B;\nfn f() -> Option<crate::A> { None }\n',
        }),
        'sibling files through super': (1, {
            'lib.rs': 'mod w;\n',
            'w/mod.rs': 'mod x;\nmod y;\n',
            'w/x.rs': 'pub(crate) fn fx() { super::y::fy() }\n',
            'w/y.rs': 'use super::x::fx;\npub(crate) fn fy() {}\nfn g() { fx() }\n',
        }),
        'through a mod.rs re-export': (1, {
            'lib.rs': 'mod w;\nmod s;\npub use w::Y;\n',
            'w/mod.rs': 'mod y;\npub use y::Y;\n',
            'w/y.rs': 'pub struct Y(crate::s::S);\n',
            's.rs': 'pub struct S;\nfn g(_: crate::Y) {}\n',
        }),
        'a name that is nowhere': (1, {
            'lib.rs': 'mod a;\n',
            'a.rs': 'use crate::Missing;\n',
        }),
        'acyclic, comments and strings ignored': (0, {
            'lib.rs': 'mod a;\nmod b;\npub use a::A;\n',
            'a.rs': '// crate::b::B would be a cycle\npub struct A;\nconst S: &str = "crate::b::B";\n',
            'b.rs': 'pub struct B(crate::A);\n#[cfg(test)]\nmod tests {\n    use crate::b::B;\n}\n',
        }),
    }
    failed = 0
    for title, (want, files) in cases.items():
        with tempfile.TemporaryDirectory() as d:
            for rel, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
                open(os.path.join(d, rel), 'w').write(text)
            lines = []
            got = check(d, out=lambda *a: lines.append(' '.join(map(str, a))))
            ok = got == want
            failed += not ok
            print(('ok   ' if ok else 'FAIL ') + title + f' (exit {got}, want {want})')
            if not ok:
                print('\n'.join('     ' + l for l in lines))
    return 1 if failed else 0


if __name__ == '__main__':
    if '--self-test' in sys.argv:
        sys.exit(self_test())
    root = sys.argv[sys.argv.index('--root') + 1] if '--root' in sys.argv else 'mysqlq/src'
    sys.exit(check(root, show_edges='--edges' in sys.argv))
