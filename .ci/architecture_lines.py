"""docs/architecture.md has one line per source file, and no line for a file that is gone.

A line is a bullet starting with a path in backticks: a path from the repository root
(`mysqlq/src/lib.rs`), or a path relative to the directory its section's heading names in
backticks (`### `store`: every SQL statement (`mysqlq/src/store/`)` then `- `claim.rs`: …`).
The files are every tracked `.rs` file. A bullet may name several files: `- `a.rs`, `b.rs`: …`."""
import re
import subprocess
import sys

DOC = 'docs/architecture.md'
files = subprocess.run(['git', 'ls-files', '*.rs'], capture_output=True, text=True, check=True).stdout.split()
sources = set(files)
listed, base = {}, None
for n, line in enumerate(open(DOC), 1):
    if line.startswith('#'):
        m = re.search(r'`([\w./-]+/)`\)?\s*$', line.strip()) or re.search(r'\(`([\w./-]+/)`', line)
        base = m.group(1) if m else None
        continue
    m = re.match(r"^- ((?:`[\w./-]+\.rs`(?:, )?)+)(?: \([^)]*\))?:", line)
    if not m:
        continue
    for p in re.findall(r'`([\w./-]+\.rs)`', m.group(1)):
        if not re.match(r'^(mysqlq|mysqlq-cli|mysqlq-macros|mysqlq-bench|mysqlq-testkit|examples|tests)/', p):
            if base is None:
                print(f'{DOC}:{n}: `{p}` is relative, but its section heading names no directory')
                sys.exit(1)
            p = base + p
        listed.setdefault(p, n)
missing = sorted(sources - set(listed))
stale = sorted(p for p in listed if p not in files)
for p in missing:
    print(f'{DOC}: no line for {p}')
for p in stale:
    print(f'{DOC}:{listed[p]}: a line for {p}, which is not in the repository')
if missing or stale:
    print('add one line per file (what it is for) in its crate\'s section, or drop the stale line')
    sys.exit(1)
print(f'{DOC} has a line for each of the {len(sources)} source files')
