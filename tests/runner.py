#!/usr/bin/env python3
"""Runs the workspace's tests as `cargo test --workspace --no-fail-fast` would, but with several
test binaries at once (tests/run calls this after its set-up).

Most of the suite waits — on leases, private servers, worker processes, a browser — so one binary
after another leaves the machine idle most of the time. This builds every test target with one
`cargo test --no-run`, then runs the binaries in `MYSQLQ_TEST_JOBS` lanes (default: the number of
CPUs, at least 2), the slowest first (their times from the last run are kept in
`target/tests-run-times.json`), each as cargo runs it: from its package's directory, with
`CARGO_MANIFEST_DIR`, `CARGO_PKG_NAME`, `CARGO_PKG_VERSION`, `CARGO` and the library path
(`LD_LIBRARY_PATH`: target and toolchain libraries) set. The doc-tests run in
a lane of their own (`cargo test --workspace --doc`). A binary's output is printed whole when it
ends, under a header naming it, so that lanes do not interleave. Every binary runs even when one
fails; the last line is the summary.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
TIMES = os.path.join(TARGET, "tests-run-times.json")
# Before any run has recorded times: the binaries known to take longest go first.
KNOWN_SLOW = ["torture", "faults", "galera", "worker_procs", "dashboard", "clusters", "real_app",
              "redis_faults", "cli", "docs", "features", "worker", "doctests"]


def lanes():
    raw = os.environ.get("MYSQLQ_TEST_JOBS")
    if raw:
        try:
            n = int(raw)
        except ValueError:
            sys.exit(f"error: MYSQLQ_TEST_JOBS `{raw}` is not a number: set it to how many test binaries run at once")
        if n < 1:
            sys.exit("error: MYSQLQ_TEST_JOBS must be at least 1")
        return n
    return max(2, os.cpu_count() or 1)


def build(cargo):
    """`cargo test --workspace --no-run`: the test binaries, as (name, executable, package dir,
    package name, version)."""
    cmd = [cargo, "test", "--workspace", "--no-fail-fast", "--no-run",
           "--message-format=json-render-diagnostics"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    found = []
    for line in proc.stdout:
        if not line.startswith("{"):
            continue
        msg = json.loads(line)
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        if not msg["profile"]["test"]:
            continue
        target = msg["target"]
        pkg_dir = os.path.dirname(msg["manifest_path"])
        # package_id: "path+file:///work/main/tests#mysqlq-tests@0.1.0" (or "...#0.1.0" when the
        # directory is named like the package).
        spec = msg["package_id"].rsplit("#", 1)[-1]
        if "@" in spec:
            pkg, version = spec.split("@", 1)
        else:
            pkg, version = os.path.basename(pkg_dir), spec
        kinds = target["kind"]
        if "test" in kinds:
            name = target["name"]
        else:
            name = f"unittests {target['name']} ({'/'.join(kinds)})"
        found.append((name, msg["executable"], pkg_dir, pkg, version))
    return proc.wait(), found


def dylib_path(executables):
    """LD_LIBRARY_PATH as cargo sets it for tests: the target's deps and the toolchain's libraries
    (a proc-macro crate's test binary links libstd dynamically)."""
    dirs = []
    for exe in executables:
        for d in (os.path.dirname(exe), os.path.dirname(os.path.dirname(exe))):
            if d not in dirs:
                dirs.append(d)
    rustc = os.environ.get("RUSTC", "rustc")
    try:
        sysroot = subprocess.run([rustc, "--print", "sysroot"], cwd=ROOT, capture_output=True,
                                 text=True, check=True).stdout.strip()
        host = re.search(r"^host: (\S+)$", subprocess.run(
            [rustc, "-vV"], cwd=ROOT, capture_output=True, text=True, check=True).stdout, re.M)
        if host:
            dirs.append(os.path.join(sysroot, "lib", "rustlib", host.group(1), "lib"))
        dirs.append(os.path.join(sysroot, "lib"))
    except (OSError, subprocess.CalledProcessError):
        pass
    old = os.environ.get("LD_LIBRARY_PATH")
    return os.pathsep.join(dirs + ([old] if old else []))


def load_times():
    try:
        with open(TIMES) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def order(jobs, times):
    def key(job):
        name = job[0]
        if name in times:
            return (0, -times[name])
        if name in KNOWN_SLOW:
            return (1, KNOWN_SLOW.index(name))
        return (2, name)
    return sorted(jobs, key=key)


def main():
    cargo = os.environ.get("CARGO") or shutil.which("cargo") or "cargo"
    started = time.monotonic()
    status, binaries = build(cargo)
    if status != 0:
        print(f"tests/run: FAILED: the test binaries did not build (cargo exited {status}), "
              f"{int(time.monotonic() - started)}s")
        return 101
    built = time.monotonic()
    print(f"== built {len(binaries)} test binaries in {int(built - started)}s; running them in "
          f"{lanes()} lanes", flush=True)

    jobs = []
    libs = dylib_path([b[1] for b in binaries])
    for name, exe, pkg_dir, pkg, version in binaries:
        env = dict(os.environ, CARGO=cargo, CARGO_MANIFEST_DIR=pkg_dir, CARGO_PKG_NAME=pkg,
                   CARGO_PKG_VERSION=version, LD_LIBRARY_PATH=libs)
        jobs.append((name, [exe], pkg_dir, env))
    jobs.append(("doctests", [cargo, "test", "--workspace", "--doc", "--no-fail-fast"], ROOT,
                 dict(os.environ)))

    times = load_times()
    queue = order(jobs, times)
    lock = threading.Lock()
    results = []  # (name, code, seconds, output)
    children = set()

    def worker():
        while True:
            with lock:
                if not queue:
                    return
                name, cmd, cwd, env = queue.pop(0)
            t0 = time.monotonic()
            with tempfile.TemporaryFile(mode="w+") as out:
                child = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, text=True)
                with lock:
                    children.add(child)
                code = child.wait()
                with lock:
                    children.discard(child)
                secs = time.monotonic() - t0
                out.seek(0)
                text = out.read()
            with lock:
                results.append((name, code, secs, text))
                verdict = "ok" if code == 0 else f"FAILED (exit {code})"
                sys.stdout.write(f"\n==== {name}: {verdict}, {secs:.0f}s ====\n{text}")
                sys.stdout.flush()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(lanes())]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.5)
    except KeyboardInterrupt:
        with lock:
            for child in children:
                child.kill()
        print("tests/run: interrupted")
        return 130

    for name, _, secs, _ in results:
        times[name] = round(secs, 1)
    try:
        with open(TIMES, "w") as f:
            json.dump(times, f, indent=1, sort_keys=True)
    except OSError:
        pass

    passed = failed = ignored = binaries_run = 0
    for _, _, _, text in results:
        for m in re.finditer(r"^test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored",
                             text, re.M):
            passed += int(m.group(1))
            failed += int(m.group(2))
            ignored += int(m.group(3))
            binaries_run += 1
    bad = [name for name, code, _, _ in results if code != 0]
    slowest = sorted(results, key=lambda r: -r[2])[:5]
    print("\ntests/run: slowest test targets: "
          + ", ".join(f"{name} {secs:.0f}s" for name, _, secs, _ in slowest))
    total = int(time.monotonic() - started)
    summary = (f"{passed} passed, {failed} failed, {ignored} ignored in {binaries_run} test "
               f"binaries, {total}s (build {int(built - started)}s)")
    if bad:
        print(f"tests/run: FAILED: {summary}; failing: {', '.join(bad)} "
              "(their failures are listed under \"failures:\" above)")
        return 101
    print(f"tests/run: ok: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
