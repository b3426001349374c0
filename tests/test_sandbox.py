"""The math env's `python` tool sandbox (rtpo.tools.python_sandbox) against hostile programs.

Every hostile case asserts containment, not just an error code:
- the call returns within its wall-clock limit (+ slack for a loaded 2-core box);
- the parent is alive, and so is a sentinel process of the test's own uid (kill(-1) and friends);
- canaries outside the sandbox are untouched: a private directory (0755/0644) and, in the namespace
  modes, a world-writable directory (0777/0666) that the sandbox can *see* (ro_paths) so only the
  read-only mount protects it; no file named with the case's token appears in the host's /tmp,
  /var/tmp, /dev/shm, /etc, / or $HOME;
- no process of the call is left (matched by the token or by this test process's bootstrap path);
- the output the model sees is at most max_output characters.

The main suite runs in whatever mode `PythonSandbox()` picks here (ns-root as root, ns-user as a
user with user namespaces). As root, three more tests run sub-suites in the other modes: ns-user and
rlimit-user as uid 65534 (with the system python, which that uid can read), rlimit-root in-process.
Claims per mode: docs/security.md. Cases that a mode does not claim to contain are skipped there.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import resource
import socket
import stat
import subprocess
import tempfile
import textwrap
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rtpo.tools import python_sandbox as ps
from rtpo.tools.python_sandbox import PythonSandbox, SandboxResult

WALL, CPU, MEM, CAP = 2.0, 1, 256, 2000
SLACK = 2.5  # seconds over wall_s a call may take on a loaded 2-core box (interpreter start, cleanup)
MODULE_PATH = Path(ps.__file__).resolve()
SYSTEM_PYTHON = "/usr/bin/python3"
NOBODY = 65534
SECRET_VAR = "RTPO_SANDBOX_TEST_SECRET"
NS_MODES = {"ns-root", "ns-user"}
ALL_MODES = {"ns-root", "ns-user", "rlimit-root", "rlimit-user"}
CONTAINING_MODES = {"ns-root", "ns-user", "rlimit-root"}  # rlimit-user is not a boundary (docs)
worst_wall: list[tuple[float, str]] = []  # (seconds, case) for the report at the end


# --------------------------------------------------------------------------------------------------
# Hostile programs. Placeholders: {token} {hidden_file} {hidden_dir} {visible_file} {visible_dir}
# {tcp_port} {udp_port} {abstract} {secret_var}. `expect`: the allowed `error` values (None in the
# set means ok); `modes`: where the containment claim holds; `check(result, ctx)`: extra assertions.

@dataclass
class Case:
    name: str
    code: str
    expect: set
    modes: set = field(default_factory=lambda: set(CONTAINING_MODES))
    check: object = None


def _no_secret(r: SandboxResult, ctx: dict) -> None:
    assert ctx["secret"] not in r.output


def _not_found(r: SandboxResult, ctx: dict) -> None:
    assert "FOUND" not in r.output, r.output


CASES = [
    # --- CPU and wall clock ----------------------------------------------------------------------
    Case("infinite_loop", "while True:\n    pass", {"cpu", "timeout"}, ALL_MODES),
    Case("sleep_forever", "import time\ntime.sleep(10**6)", {"timeout"}, ALL_MODES),
    Case("ignore_sigxcpu_and_spin", """
        import signal
        signal.signal(signal.SIGXCPU, signal.SIG_IGN)
        while True:
            pass""", {"cpu", "timeout"}, ALL_MODES),
    Case("signal_tampering", """
        import signal, time
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGALRM, signal.SIGUSR1,
                  signal.SIGXCPU, signal.SIGPIPE, signal.SIGCHLD):
            signal.signal(s, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
        time.sleep(10**6)""", {"timeout"}, ALL_MODES),
    Case("sigstop_self", "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)\nprint('resumed')",
         {"timeout"}, ALL_MODES),
    Case("spinning_threads", """
        import threading
        def spin():
            while True:
                pass
        for _ in range(8):
            threading.Thread(target=spin).start()""", {"cpu", "timeout"}, ALL_MODES),
    Case("close_stdio_and_spin", "import os\nos.close(1)\nos.close(2)\nwhile True:\n    pass",
         {"cpu", "timeout"}, ALL_MODES),
    Case("raise_own_limits", """
        import resource
        for r in (resource.RLIMIT_CPU, resource.RLIMIT_AS, resource.RLIMIT_NPROC):
            try:
                resource.setrlimit(r, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
                print("RAISED", r)
            except (ValueError, OSError):
                pass
        while True:
            pass""", {"cpu", "timeout"}, ALL_MODES, lambda r, c: _assert_not_in("RAISED", r)),
    # --- processes -------------------------------------------------------------------------------
    Case("fork_bomb", """
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass""", {"cpu", "timeout"}),
    Case("fork_bomb_exponential", "import os\nwhile True:\n    os.fork()",
         {"cpu", "timeout", "exit:1"}),
    Case("subprocess_bomb", """
        import subprocess, sys
        while True:
            try:
                subprocess.Popen([sys.executable, "-c", "while 1: pass  # {token}"])
            except OSError:
                pass""", {"cpu", "timeout"}),
    Case("thread_bomb", """
        import threading, time
        while True:
            threading.Thread(target=time.sleep, args=(1000,), daemon=True).start()""",
         {"exit:1", "timeout"}),
    Case("double_fork_daemon", """
        import os, sys, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(1000)  # {token}"])
            os._exit(0)
        time.sleep(0.3)
        print("daemon started")""", {None}),
    Case("daemon_writes_after_return", """
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                for _ in range(40):
                    time.sleep(0.05)
                    for p in ({hidden_file!r}, {visible_file!r}, "/tmp/{token}-late"):
                        try:
                            open(p, "w").write("pwned later")
                        except OSError:
                            pass
                os._exit(0)
            os._exit(0)
        print("returning")""", {None}),
    Case("kill_parent", """
        import os, signal
        for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP):
            try:
                os.kill(os.getppid(), sig)
            except OSError as e:
                print("denied", e)
        print("still here")""", {None, "exit:1"}),
    Case("kill_everything", """
        import os, signal
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            try:
                os.kill(-1, sig)
            except OSError as e:
                print("denied", e)
        print("still here")""", {None, "signal:SIGKILL"}),
    Case("kill_process_groups", """
        import os, signal
        for target in (0, os.getpgrp(), os.getsid(0)):
            try:
                os.killpg(target, signal.SIGKILL)
            except OSError as e:
                print("denied", e)
        print("still here")""", {None, "signal:SIGKILL"}),
    Case("kill_every_visible_pid", """
        import os, signal
        for p in os.listdir("/proc"):
            if p.isdigit() and int(p) != os.getpid():
                try:
                    os.kill(int(p), signal.SIGKILL)
                except OSError:
                    pass
        print("done")""", {None}),
    Case("ptrace_parent", """
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        r = libc.ptrace(16, os.getppid(), None, None)  # PTRACE_ATTACH
        print("ptrace", r, ctypes.get_errno())""", {None}, CONTAINING_MODES,
         lambda r, c: _assert_in("ptrace -1", r)),
    Case("become_root", """
        import os
        for f in (lambda: os.setuid(0), lambda: os.setgid(0), lambda: os.setgroups([0])):
            try:
                f()
                print("BECAME ROOT")
            except OSError:
                pass
        print(os.getuid())""", {None}, CONTAINING_MODES, lambda r, c: _assert_not_in("BECAME ROOT", r)),
    Case("orphan_zombie_storm", """
        import os
        for _ in range(200):  # 200 orphans > max_procs: init must reap them or forks start failing
            pid = os.fork()
            if pid == 0:
                if os.fork() == 0:
                    os._exit(0)
                os._exit(0)
            os.waitpid(pid, 0)
        print("done")""", {None}, NS_MODES, lambda r, c: _assert_in("done", r)),
    # --- memory and the C stack --------------------------------------------------------------------
    Case("memory_bomb", "x = bytearray(8 * 1024**3)", {"memory"}, ALL_MODES),
    Case("memory_growth", "chunks = []\nwhile True:\n    chunks.append(bytearray(10 * 1024**2))",
         {"memory", "timeout"}, ALL_MODES),
    Case("mmap_bomb", "import mmap\nm = mmap.mmap(-1, 4 * 1024**3)", {"memory"}, ALL_MODES),
    Case("deep_recursion", "def f(n):\n    return f(n + 1)\nf(0)", {"exit:1"}, ALL_MODES,
         lambda r, c: _assert_in("RecursionError", r)),
    Case("unlimited_recursion", """
        import sys
        sys.setrecursionlimit(10**9)
        def f(n):
            return f(n + 1)
        f(0)""", {"signal:SIGSEGV", "memory", "cpu", "timeout"}, ALL_MODES),
    Case("segfault_ctypes", "import ctypes\nctypes.string_at(0)", {"signal:SIGSEGV"}, ALL_MODES),
    Case("abort", "import os\nos.abort()", {"signal:SIGABRT"}, ALL_MODES),
    Case("fd_exhaustion", "fds = []\nwhile True:\n    fds.append(open('/dev/null'))", {"exit:1"}, ALL_MODES,
         lambda r, c: _assert_in("Too many open files", r)),
    # --- output ------------------------------------------------------------------------------------
    Case("gigabytes_of_stdout", "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)",
         {"output_limit"}, ALL_MODES),
    Case("gigabytes_of_stderr", "import sys\nwhile True:\n    sys.stderr.write('y' * 65536)",
         {"output_limit"}, ALL_MODES),
    Case("one_huge_write", "import sys\nsys.stdout.buffer.write(b'z' * 100_000_000)", {"output_limit"}, ALL_MODES),
    Case("many_tiny_lines", "for i in range(10**7):\n    print(i)", {"output_limit"}, ALL_MODES),
    # --- the file system ---------------------------------------------------------------------------
    Case("overwrite_canary", "open({hidden_file!r}, 'w').write('pwned')", {"exit:1"}),
    Case("delete_canary", """
        import os, shutil
        for f in (lambda: os.remove({hidden_file!r}), lambda: shutil.rmtree({hidden_dir!r}),
                  lambda: os.rename({hidden_file!r}, {hidden_file!r} + ".x")):
            try:
                f()
                print("DELETED")
            except OSError:
                pass""", {None}, CONTAINING_MODES, lambda r, c: _assert_not_in("DELETED", r)),
    Case("chmod_chown_canary", """
        import os
        for f in (lambda: os.chmod({hidden_file!r}, 0o777), lambda: os.chown({hidden_file!r}, os.getuid(), -1),
                  lambda: os.utime({hidden_file!r}, (0, 0))):
            try:
                f()
                print("CHANGED")
            except OSError:
                pass""", {None}, CONTAINING_MODES, lambda r, c: _assert_not_in("CHANGED", r)),
    Case("symlink_and_hardlink_escape", """
        import os
        for make in (os.symlink, os.link):
            try:
                make({hidden_file!r}, "alias")
                open("alias", "w").write("pwned")
                print("WROTE THROUGH", make.__name__)
            except OSError:
                pass
            try:
                os.remove("alias")
            except OSError:
                pass""", {None}, CONTAINING_MODES, lambda r, c: _assert_not_in("WROTE THROUGH", r)),
    Case("write_world_writable_visible_dir", """
        import os
        for f in (lambda: open({visible_file!r}, "w").write("pwned"), lambda: os.remove({visible_file!r}),
                  lambda: open(os.path.join({visible_dir!r}, "{token}"), "w")):
            try:
                f()
                print("WROTE")
            except OSError as e:
                print(e)""", {None}, NS_MODES, lambda r, c: _assert_not_in("WROTE", r)),
    Case("write_shared_scratch_dirs", """
        for d in ("/tmp", "/var/tmp", "/dev/shm"):
            open(d + "/{token}", "w").write("x")
        print("wrote private scratch")""", {None}, NS_MODES),
    Case("write_system_and_home_dirs", """
        import os
        home = os.path.expanduser("~")
        open(os.path.join(home, "{token}"), "w").write("x")  # HOME is the sandbox dir: allowed
        for d in ("/", "/etc", "/usr", "/root", "/home", {home_dir!r}, {repo_dir!r}):
            try:
                open(os.path.join(d, "{token}"), "w").write("x")
                print("WROTE", d)
            except OSError:
                pass""", {None}, CONTAINING_MODES, lambda r, c: _assert_not_in("WROTE", r)),
    Case("fill_the_disk", "f = open('big', 'wb')\nwhile True:\n    f.write(b'x' * 2**20)",
         {"exit:1", "signal:SIGXFSZ"}, ALL_MODES),
    Case("inode_flood", """
        import os
        i = 0
        while True:
            open("f%d" % i, "w").close()
            i += 1""", {"exit:1"}, NS_MODES, lambda r, c: _assert_in("No space left on device", r)),
    Case("remount_and_escape_chroot", """
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        print("remount", libc.mount(None, b"/", None, 32, None), ctypes.get_errno())   # MS_REMOUNT
        print("unshare", libc.unshare(0x10000000 | 0x00020000), ctypes.get_errno())  # NEWUSER|NEWNS
        try:
            os.chroot("/tmp")
            print("CHROOTED")
        except OSError:
            pass
        open({hidden_file!r}, "w")""", {"exit:1"}, NS_MODES,
         lambda r, c: (_assert_in("remount -1 ", r), _assert_in("unshare -1 ", r), _assert_not_in("CHROOTED", r))),
    # --- secrets -----------------------------------------------------------------------------------
    Case("dump_environment", "import os\nprint(sorted(os.environ.items()))", {None}, ALL_MODES, _no_secret),
    Case("scan_proc_environ", """
        import os
        for p in os.listdir("/proc"):
            try:
                if b"{secret_var}" in open("/proc/%s/environ" % p, "rb").read():
                    print("FOUND", p)
            except OSError:
                pass
        print("scanned")""", {None}, CONTAINING_MODES, _not_found),
    # --- the network -------------------------------------------------------------------------------
    Case("tcp_to_parent", """
        import socket
        try:
            socket.create_connection(("127.0.0.1", {tcp_port}), timeout=1).sendall(b"{token}")
            print("CONNECTED")
        except OSError as e:
            print(e)""", {None}, NS_MODES, lambda r, c: _assert_not_in("CONNECTED", r)),
    Case("udp_to_parent", """
        import socket
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.sendto(b"{token}", ("127.0.0.1", {udp_port}))
            print("SENT")
        except OSError as e:
            print(e)""", {None}, NS_MODES),
    Case("abstract_unix_socket", """
        import socket
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect("\\0{abstract}")
            s.sendall(b"{token}")
            print("CONNECTED")
        except OSError as e:
            print(e)""", {None}, NS_MODES, lambda r, c: _assert_not_in("CONNECTED", r)),
    Case("internet_and_dns", """
        import socket
        for host in ("1.1.1.1", "example.com"):
            try:
                socket.create_connection((host, 80), timeout=1)
                print("CONNECTED", host)
            except OSError as e:
                print(e)""", {None}, NS_MODES, lambda r, c: _assert_not_in("CONNECTED", r)),
    Case("raw_socket", """
        import socket
        try:
            socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
            print("RAW")
        except OSError as e:
            print(e)""", {None}, CONTAINING_MODES, lambda r, c: _assert_not_in("RAW", r)),
]


def _fill(code: str, ctx: dict) -> str:
    """Substitute the {name} / {name!r} placeholders that name a key of `ctx` (other braces, e.g.
    set literals in the hostile code, are left alone)."""
    def sub(m: re.Match) -> str:
        if m.group(1) not in ctx:
            return m.group(0)
        v = ctx[m.group(1)]
        return repr(v) if m.group(2) else str(v)
    return re.sub(r"\{(\w+)(!r)?\}", sub, textwrap.dedent(code).strip("\n"))


def _assert_in(needle: str, r: SandboxResult) -> None:
    assert needle in r.output, r.output


def _assert_not_in(needle: str, r: SandboxResult) -> None:
    assert needle not in r.output, r.output


# --------------------------------------------------------------------------------------------------
# Containment checks.

def _snapshot(*dirs: str) -> dict:
    """Everything observable about the files under `dirs`: mode, owner, size, mtime, content."""
    snap = {}
    for d in dirs:
        for root, subdirs, files in os.walk(d):
            for name in subdirs + files:
                p = os.path.join(root, name)
                st = os.lstat(p)
                data = Path(p).read_bytes() if stat.S_ISREG(st.st_mode) else None
                snap[p] = (st.st_mode, st.st_uid, st.st_size, st.st_mtime_ns, data)
        st = os.lstat(d)
        snap[d] = (st.st_mode, st.st_uid, st.st_mtime_ns)
    return snap


def _stray_files(token: str) -> list[str]:
    """Host paths named with `token` in the places a sandbox could try to drop files."""
    places = ["/", "/tmp", "/var/tmp", "/dev/shm", "/etc", "/usr", "/root", "/home",
              os.path.expanduser("~"), str(Path(__file__).resolve().parents[1])]
    found = []
    for d in places:
        try:
            found += [os.path.join(d, n) for n in os.listdir(d) if token in n]
        except OSError:
            pass
    return found


def _fork_server_pids() -> set[int]:
    """This process's fork servers: they live on between calls by design (they carry the bootstrap's
    path in their command line, as every process of a call forked from them does)."""
    return {srv.pid for srv in list(ps._servers.values()) if srv.pid is not None}


def _live_processes(markers: list[str]) -> list[str]:
    """Non-zombie processes whose command line contains one of `markers` (this process and its
    fork servers excepted)."""
    found = []
    skip = _fork_server_pids() | {os.getpid()}
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) in skip:
            continue
        try:
            cmd = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            state = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X") and any(m in cmd for m in markers):
            found.append(f"{p}: {cmd[:120]}")
    return found


def _wait_no_leftovers(markers: list[str], grace_s: float = 3.0) -> list[str]:
    deadline = time.monotonic() + grace_s
    while True:
        left = _live_processes(markers)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


class Harness:
    """Shared state of the main suite: the sandbox, canaries, sentinel, listening sockets."""

    def __init__(self, tmp_root: Path):
        self.token_base = uuid.uuid4().hex[:12]
        self.secret = "s3cr3t-" + uuid.uuid4().hex
        self.hidden_dir = tmp_root / "canary-hidden"
        self.hidden_dir.mkdir()
        os.chmod(self.hidden_dir, 0o755)
        self.hidden_file = self.hidden_dir / "canary.txt"
        self.hidden_file.write_text("precious\n")
        os.chmod(self.hidden_file, 0o644)
        # world-writable and visible inside the sandbox (ro_paths): only the read-only bind protects it
        self.visible_dir = Path(tempfile.mkdtemp(prefix="rtpo-canary-visible-"))
        os.chmod(self.visible_dir, 0o777)
        self.visible_file = self.visible_dir / "canary.txt"
        self.visible_file.write_text("precious too\n")
        os.chmod(self.visible_file, 0o666)
        self.sentinel = subprocess.Popen(["sleep", "600"])
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.tcp.setblocking(False)
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.udp.setblocking(False)
        self.abstract = f"rtpo-sandbox-test-{self.token_base}"
        self.unix = socket.socket(socket.AF_UNIX)
        self.unix.bind("\0" + self.abstract)
        self.unix.listen()
        self.unix.setblocking(False)
        os.environ[SECRET_VAR] = self.secret  # the parent's environment holds a secret
        self.sandbox = PythonSandbox(wall_s=WALL, cpu_s=CPU, mem_mb=MEM, max_output=CAP,
                                     ro_paths=[str(self.visible_dir)])
        self.snapshot = _snapshot(str(self.hidden_dir), str(self.visible_dir))

    def close(self) -> None:
        os.environ.pop(SECRET_VAR, None)
        self.sentinel.kill()
        self.sentinel.wait()
        for s in (self.tcp, self.udp, self.unix):
            s.close()
        subprocess.run(["rm", "-rf", str(self.visible_dir)], check=False)

    def context(self, token: str) -> dict:
        return dict(token=token, hidden_file=str(self.hidden_file), hidden_dir=str(self.hidden_dir),
                    visible_file=str(self.visible_file), visible_dir=str(self.visible_dir),
                    tcp_port=self.tcp.getsockname()[1], udp_port=self.udp.getsockname()[1],
                    abstract=self.abstract, secret_var=SECRET_VAR, secret=self.secret,
                    home_dir=os.path.expanduser("~"), repo_dir=str(Path(__file__).resolve().parents[1]))

    def assert_network_quiet(self) -> None:
        with pytest.raises(BlockingIOError):
            self.tcp.accept()
        with pytest.raises(BlockingIOError):
            self.udp.recvfrom(1024)
        with pytest.raises(BlockingIOError):
            self.unix.accept()


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    h = Harness(tmp_path_factory.mktemp("sandbox"))
    yield h
    h.close()


def _run_contained(h: Harness, case: Case) -> SandboxResult:
    token = f"{h.token_base}-{case.name}"
    ctx = h.context(token)
    code = _fill(case.code, ctx)
    t0 = time.monotonic()
    r = h.sandbox.run(code)
    elapsed = time.monotonic() - t0
    worst_wall.append((elapsed, case.name))
    what = f"{case.name} ({h.sandbox.mode}): error={r.error!r} output={r.output[-400:]!r}"
    assert elapsed <= WALL + SLACK, f"took {elapsed:.2f} s: {what}"
    assert r.wall_s <= WALL + SLACK, what
    assert r.error in case.expect, what
    assert r.ok == (r.error is None), what
    assert len(r.output) <= CAP, what
    if case.name == "daemon_writes_after_return":
        time.sleep(2.2)  # the daemon would be writing now, had it survived
    assert h.sentinel.poll() is None, f"sentinel killed by {what}"
    os.kill(os.getppid(), 0)  # pytest's parent is alive too
    assert _snapshot(str(h.hidden_dir), str(h.visible_dir)) == h.snapshot, f"canary changed: {what}"
    assert _stray_files(token) == [], what
    assert _wait_no_leftovers([token, ps._boot_dir()]) == [], f"leftover processes: {what}"
    if case.check is not None:
        case.check(r, ctx)
    return r


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_program_is_contained(harness, case):
    if harness.sandbox.mode not in case.modes:
        pytest.skip(f"{case.name}: not contained in mode {harness.sandbox.mode} (see docs/security.md)")
    _run_contained(harness, case)
    if case.name in ("tcp_to_parent", "udp_to_parent", "abstract_unix_socket"):
        harness.assert_network_quiet()


def test_suite_has_at_least_30_distinct_hostile_programs():
    assert len({c.name for c in CASES}) == len(CASES) >= 30
    assert len({textwrap.dedent(c.code) for c in CASES}) == len(CASES)


def test_gigabytes_of_output_do_not_reach_parent_memory(harness):
    """Reading stops at ~4*max_output bytes: the parent's peak RSS must not grow by the output."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    r = harness.sandbox.run("import sys\nblock = 'x' * 2**20\nwhile True:\n    sys.stdout.write(block)")
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert r.error == "output_limit" and len(r.output) <= CAP
    assert r.output.startswith("x" * 100) and "truncated" in r.output
    assert after - before < 64 * 1024, f"parent RSS grew by {(after - before) / 1024:.0f} MiB"


def test_child_runs_unprivileged(harness):
    """No capabilities, no_new_privs, and (as root) a throw-away uid that owns nothing on the host."""
    mode = harness.sandbox.mode
    if mode == "rlimit-user":
        pytest.skip("rlimit-user runs as the caller by design")
    r = harness.sandbox.run("import os\nprint(os.getuid(), os.getgid(), os.getgroups())\n"
                            "print(open('/proc/self/status').read())")
    assert r.ok, r.output
    first, status = r.output.split("\n", 1)
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    assert int(fields["CapEff"].strip(), 16) == 0 and int(fields["CapPrm"].strip(), 16) == 0
    assert fields["NoNewPrivs"].strip() == "1"
    uid = int(first.split()[0])
    if mode.endswith("-root"):
        assert ps._UID_BASE <= uid < ps._UID_BASE + ps._UID_SPAN
        with pytest.raises(KeyError):
            pwd.getpwuid(uid)


def test_namespace_mode_hides_the_host(harness):
    """Namespace modes: own PID namespace (the code is pid 2 under our init), no network
    interfaces but a down loopback, and a filesystem without /home, /root's files or the repo."""
    if harness.sandbox.mode not in NS_MODES:
        pytest.skip("namespace modes only")
    repo = str(Path(__file__).resolve().parents[1])
    r = harness.sandbox.run(textwrap.dedent(f"""
        import os, socket
        print(os.getpid(), sorted(p for p in os.listdir("/proc") if p.isdigit()))
        print(sorted(n for _, n in socket.if_nameindex()))
        print(os.path.exists({repo!r} + "/pyproject.toml"), os.path.exists("/home"))
        print(os.getcwd(), sorted(os.listdir(".")))
    """))
    assert r.ok, r.output
    lines = r.output.splitlines()
    assert lines[0] == "2 ['1', '2']"
    assert lines[1] == "['lo']"
    assert lines[2] == "False False"
    assert lines[3] == "/tmp/sandbox ['main.py']"


# --------------------------------------------------------------------------------------------------
# Ordinary behaviour: what the model sees.

@pytest.fixture(scope="module")
def sandbox():
    return PythonSandbox(wall_s=10, cpu_s=5, mem_mb=512, max_output=CAP)


def test_prints_stdout(sandbox):
    r = sandbox.run("print(1+1)")
    assert (r.ok, r.output, r.error) == (True, "2\n", None)
    assert 0 < r.wall_s < 10


def test_exception_shows_stdout_then_traceback_without_sandbox_frames(sandbox):
    r = sandbox.run("print('partial')\ndef f():\n    return 1/0\nf()")
    assert not r.ok and r.error == "exit:1"
    assert r.output.startswith("partial\n")
    assert r.output.rstrip().endswith("ZeroDivisionError: division by zero")
    assert "return 1/0" in r.output  # the source line is shown, like `python main.py`
    assert "rtpo-sandbox-boot" not in r.output and "<string>" not in r.output


def test_syntax_error_and_exit_codes(sandbox):
    r = sandbox.run("x = (")
    assert r.error == "exit:1" and "SyntaxError" in r.output
    assert sandbox.run("import sys\nsys.exit(3)").error == "exit:3"
    r = sandbox.run("raise SystemExit('bye')")
    assert r.error == "exit:1" and "bye" in r.output
    assert sandbox.run("import sys\nsys.exit(0)").ok


def test_stdin_is_empty(sandbox):
    r = sandbox.run("input()")
    assert r.error == "exit:1" and "EOFError" in r.output


def test_output_cap_boundary(sandbox):
    r = sandbox.run(f"print('a' * {CAP - 1})")
    assert r.ok and len(r.output) == CAP
    r = sandbox.run(f"print('a' * {CAP + 10})")
    assert r.error == "output_limit" and len(r.output) <= CAP and "truncated" in r.output
    r = sandbox.run("def f(n):\n    return f(n + 1)\nf(0)")  # a long traceback is capped too
    assert len(r.output) <= CAP and r.output.rstrip().endswith("maximum recursion depth exceeded")


def test_unicode_and_invalid_bytes(sandbox):
    r = sandbox.run("print('π ≈ 3.14159 — ✓')\nimport sys\nsys.stdout.flush()\nsys.stdout.buffer.write(b'\\xff\\n')")
    assert r.ok and r.output.startswith("π ≈ 3.14159 — ✓\n") and "\ufffd" in r.output


def test_each_call_gets_a_fresh_working_directory(sandbox):
    r1 = sandbox.run("import os\nopen('note.txt', 'w').write('1')\nprint(sorted(os.listdir('.')))")
    r2 = sandbox.run("import os\nprint(sorted(os.listdir('.')), os.path.exists('note.txt'))")
    assert r1.ok and "note.txt" in r1.output
    assert r2.ok and r2.output.strip().endswith("False") and "note.txt" not in r2.output


def test_environment_is_scrubbed_and_hash_seed_fixed(sandbox):
    os.environ[SECRET_VAR] = "do-not-leak"
    try:
        r = sandbox.run("import os\nprint(sorted(os.environ))\nprint(hash('abc'), sorted({'x', 'y', 'z', 'w'}))")
    finally:
        os.environ.pop(SECRET_VAR)
    assert r.ok and "do-not-leak" not in r.output and SECRET_VAR not in r.output
    keys = eval(r.output.splitlines()[0])
    assert set(keys) <= set(ps._CHILD_ENV_FIXED) | {"HOME", "TMPDIR"}
    assert sandbox.run("print(hash('abc'), sorted({'x', 'y', 'z', 'w'}))").output == r.output.split("\n", 1)[1]


def test_stdlib_math_and_large_code(sandbox):
    r = sandbox.run("import math, fractions, itertools, decimal, statistics\n"
                    "print(math.comb(10, 3), fractions.Fraction(1, 3) + fractions.Fraction(1, 6))")
    assert r.ok and r.output == "120 1/2\n", r.output
    big = "x = 0\n" + "x += 1\n" * 40_000 + "print(x)"  # ~280 KB: several pipe buffers of stdin
    r = sandbox.run(big)
    assert r.ok and r.output == "40000\n", r.output[-300:]


def test_multiprocessing_and_threads_work_within_limits(sandbox):
    r = sandbox.run(textwrap.dedent("""
        from multiprocessing import Pool
        import threading
        if __name__ == "__main__":
            with Pool(2) as p:
                print(p.map(abs, [-1, -2, -3]))
            t = threading.Thread(target=print, args=("thread",))
            t.start(); t.join()
    """))
    assert r.ok and r.output == "[1, 2, 3]\nthread\n", r.output


def test_cpu_limit_is_reported_as_cpu():
    sb = PythonSandbox(wall_s=20, cpu_s=1, max_output=500)
    r = sb.run("while True:\n    pass")
    assert r.error == "cpu" and "CPU-time limit" in r.output
    assert r.wall_s < 20


def test_concurrent_calls_from_threads(sandbox):
    results = [None] * 6

    def work(i):
        results[i] = sandbox.run(f"print({i} * {i})")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.output for r in results] == [f"{i * i}\n" for i in range(6)]


def test_bad_arguments_are_rejected_clearly(sandbox):
    with pytest.raises(ValueError, match="wall_s"):
        PythonSandbox(wall_s=0)
    with pytest.raises(ValueError, match="cpu_s"):
        PythonSandbox(cpu_s=0.5)
    with pytest.raises(ValueError, match="not an executable"):
        PythonSandbox(python="/nonexistent/python")
    with pytest.raises(ValueError, match="isolation"):
        PythonSandbox(isolation="docker")
    with pytest.raises(ValueError, match="ro_paths"):
        PythonSandbox(ro_paths=["/nonexistent-dir"])
    with pytest.raises(TypeError, match="str"):
        sandbox.run(b"print(1)")


def test_per_call_overhead(sandbox):
    """The math env pays this per tool call. Generous bound (shared 2-core box); the measured
    numbers are printed and reported in docs/security.md."""
    for _ in range(2):
        sandbox.run("print(1+1)")
    walls = sorted(sandbox.run("print(1+1)").wall_s for _ in range(15))
    median = walls[len(walls) // 2]
    print(f"\n[test_sandbox] print(1+1) per-call wall ({sandbox.mode}): median {1000 * median:.1f} ms, "
          f"min {1000 * walls[0]:.1f} ms, max {1000 * walls[-1]:.1f} ms")
    assert median < 1.0


# --------------------------------------------------------------------------------------------------
# The other modes (as root): ns-user and rlimit-user as uid 65534, rlimit-root in-process.

def _readable_by_others(path: str) -> bool:
    p = Path(path).resolve()
    if not p.stat().st_mode & stat.S_IROTH:
        return False
    return all(q.stat().st_mode & stat.S_IXOTH for q in p.parents)


needs_root_and_system_python = pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists(SYSTEM_PYTHON) or not _readable_by_others(SYSTEM_PYTHON)
    or not _readable_by_others(str(MODULE_PATH)),
    reason="needs root (to act as uid 65534) and a system python 65534 can run")

_SUBSUITE = r"""
import importlib.util, json, sys, time
cfg = json.loads(sys.argv[1])
spec = importlib.util.spec_from_file_location("python_sandbox", cfg["module"])
m = importlib.util.module_from_spec(spec); sys.modules["python_sandbox"] = m; spec.loader.exec_module(m)
sb = m.PythonSandbox(wall_s=cfg["wall"], cpu_s=cfg["cpu"], mem_mb=cfg["mem"], max_output=cfg["cap"],
                     python=cfg["python"], isolation=cfg["isolation"], ro_paths=cfg["ro_paths"])
res = {"mode": sb.mode, "boot_dir": m._boot_dir(), "results": {}}
for name, code in cfg["cases"].items():
    t = time.monotonic()
    r = sb.run(code)
    res["results"][name] = {"error": r.error, "output": r.output[-600:], "elapsed": time.monotonic() - t,
                            "len": len(r.output)}
print(json.dumps(res))
"""


def _subsuite_canary(owner: int) -> tuple[Path, Path]:
    """A world-traversable directory owned by `owner` with a canary file (owner-writable)."""
    top = Path(tempfile.mkdtemp(prefix="rtpo-canary-sub-"))
    os.chmod(top, 0o755)
    d = top / "owned"
    d.mkdir()
    f = d / "canary.txt"
    f.write_text("precious\n")
    for p in (d, f):
        os.chown(p, owner, owner)
    os.chmod(d, 0o755)
    os.chmod(f, 0o644)
    return top, f


def _run_subsuite(names: list[str], *, user: int | None, isolation: str, canary_owner: int,
                  ro_canary: bool) -> tuple[dict, dict]:
    """Run the named cases in a fresh interpreter (as `user`, or as us); assert the shared
    containment checks; return (results, context)."""
    top, canary = _subsuite_canary(canary_owner)
    ctx_base = dict(hidden_file=str(canary), hidden_dir=str(canary.parent), visible_file=str(canary),
                    visible_dir=str(canary.parent), tcp_port=9, udp_port=9, abstract="unused",
                    secret_var=SECRET_VAR, secret="s3cr3t-" + uuid.uuid4().hex, home_dir="/nonexistent",
                    repo_dir=str(Path(__file__).resolve().parents[1]))
    by_name = {c.name: c for c in CASES}
    token_base = uuid.uuid4().hex[:12]
    codes = {n: _fill(by_name[n].code, dict(ctx_base, token=f"{token_base}-{n}")) for n in names}
    cfg = dict(module=str(MODULE_PATH), wall=WALL, cpu=CPU, mem=MEM, cap=CAP, python=SYSTEM_PYTHON,
               isolation=isolation, ro_paths=[str(canary.parent)] if ro_canary else [], cases=codes)
    sentinel = subprocess.Popen(["sleep", "600"], user=user, group=user, extra_groups=[]) if user \
        else subprocess.Popen(["sleep", "600"])
    before = _snapshot(str(canary.parent))
    try:
        p = subprocess.run([SYSTEM_PYTHON, "-c", _SUBSUITE, json.dumps(cfg)], capture_output=True, text=True,
                           timeout=len(names) * (WALL + SLACK) + 30, cwd="/",
                           env={"PATH": "/usr/bin:/bin", SECRET_VAR: ctx_base["secret"]},
                           **({"user": user, "group": user, "extra_groups": []} if user else {}))
        assert p.returncode == 0, p.stderr[-3000:]
        out = json.loads(p.stdout)
        assert sentinel.poll() is None, "the sentinel (same uid as the caller) was killed"
        assert _snapshot(str(canary.parent)) == before, "canary changed"
        assert _wait_no_leftovers([token_base, out["boot_dir"]]) == []
        for n in names:
            assert _stray_files(f"{token_base}-{n}") == [], n
        return out, ctx_base
    finally:
        sentinel.kill()
        sentinel.wait()
        subprocess.run(["rm", "-rf", str(top)], check=False)


def _check_subsuite(out: dict, names: list[str], ctx: dict) -> None:
    by_name = {c.name: c for c in CASES}
    for n in names:
        r = out["results"][n]
        what = f"{n} ({out['mode']}): {r}"
        assert r["error"] in by_name[n].expect, what
        assert r["elapsed"] <= WALL + SLACK, what
        assert r["len"] <= CAP, what
        worst_wall.append((r["elapsed"], f"{out['mode']}:{n}"))
        if by_name[n].check is not None:
            by_name[n].check(SandboxResult(r["error"] is None, r["output"], r["error"], r["elapsed"]), ctx)


@needs_root_and_system_python
def test_non_root_user_namespace_mode():
    """As uid 65534: the user-namespace mode. The canary is owned (and writable) by 65534 on the
    host and visible in the sandbox, so only the read-only bind keeps it intact."""
    names = ["infinite_loop", "fork_bomb", "memory_bomb", "gigabytes_of_stdout", "kill_everything",
             "kill_parent", "double_fork_daemon", "overwrite_canary", "write_world_writable_visible_dir",
             "write_shared_scratch_dirs", "internet_and_dns", "scan_proc_environ", "segfault_ctypes"]
    out, ctx = _run_subsuite(names, user=NOBODY, isolation="auto", canary_owner=NOBODY, ro_canary=True)
    if out["mode"] != "ns-user":
        pytest.skip(f"unprivileged user namespaces unavailable here (got {out['mode']})")
    _check_subsuite(out, names, ctx)


@needs_root_and_system_python
def test_rlimit_root_mode():
    """As root without namespaces: throw-away uid, limits, and the kill-by-uid sweep (a setsid
    daemon must not survive)."""
    names = ["infinite_loop", "sleep_forever", "fork_bomb", "memory_bomb", "gigabytes_of_stderr",
             "kill_everything", "kill_parent", "double_fork_daemon", "overwrite_canary", "delete_canary",
             "scan_proc_environ", "become_root"]
    out, ctx = _run_subsuite(names, user=None, isolation="rlimits", canary_owner=0, ro_canary=False)
    assert out["mode"] == "rlimit-root"
    _check_subsuite(out, names, ctx)


@needs_root_and_system_python
def test_rlimit_user_mode_limits():
    """As uid 65534 without namespaces: only the resource limits and the process-group kill are
    claimed (docs/security.md), so only those are tested."""
    names = ["infinite_loop", "memory_bomb", "gigabytes_of_stdout", "deep_recursion", "dump_environment"]
    out, ctx = _run_subsuite(names, user=NOBODY, isolation="rlimits", canary_owner=0, ro_canary=False)
    assert out["mode"] == "rlimit-user"
    _check_subsuite(out, names, ctx)


def test_report_worst_case_wall():
    """Runs last: every hostile case above stayed within wall_s + slack; print the slowest."""
    if not worst_wall:
        pytest.skip("no hostile case ran in this session")
    worst = sorted(worst_wall)[-5:]
    print("\n[test_sandbox] slowest hostile cases (s): " + ", ".join(f"{n}={t:.2f}" for t, n in reversed(worst)))
    assert worst[-1][0] <= WALL + SLACK
