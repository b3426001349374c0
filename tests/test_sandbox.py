"""The math env's `python` tool sandbox (rtpo.tools.python_sandbox) against hostile programs.

Every hostile case asserts containment, not just an error code:
- the call returns within its wall-clock backstop (+ slack for a loaded 2-core box);
- the parent is alive, and so is a sentinel process of the test's own uid (kill(-1) and friends);
- canaries outside the sandbox are untouched: a private directory (0755/0644) and, in the namespace
  modes, a world-writable directory (0777/0666) that the sandbox can *see* (ro_paths) so only the
  read-only mount protects it; no file named with the case's token appears in the host's /tmp,
  /var/tmp, /dev/shm, /etc, / or $HOME;
- no process of the call is left (matched by the token or by this test process's bootstrap path);
- the output the model sees is at most max_output characters.

The main suite runs in whatever mode `PythonSandbox()` picks here (ns-root as root, ns-user as a
user with user namespaces), through the fork server; after every case the fork server must be the
same live process (no hostile program can kill, stop or replace it). A subset runs again with one
interpreter per call (the fallback path). As root, three more tests run sub-suites in the other
modes: ns-user and rlimit-user as uid 65534 (with the system python, which that uid can read),
rlimit-root in-process. Claims per mode: docs/security.md. Cases that a mode does not claim to
contain are skipped there.

The fork server's own risks have tests of their own: a call cannot see anything of an earlier one
(its memory is scanned for an earlier call's secret), a call starts in the same state as a fresh
interpreter, the server dies with its parent (exit or SIGKILL, calls in flight included), is
replaced when it dies or hangs, is not shared with a forked child of the parent, and concurrent
calls from 8 threads give the results of serial calls.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import re
import resource
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rtpo.tools import python_sandbox as ps
from rtpo.tools import sandbox_process as sp
from rtpo.tools.python_sandbox import PythonSandbox, SandboxResult

WALL, CPU, MEM, CAP = 2.0, 1, 256, 2000
MAX_WALL = 4.0  # the parent's plain wall-clock backstop in the hostile suites (keeps them short)
SLACK = 2.5  # seconds over max_wall_s a call may take on a loaded 2-core box (start-up, cleanup)
MODULE_PATH = Path(ps.__file__).resolve()
PROCESS_MODULE_PATH = Path(sp.__file__).resolve()  # its plumbing: starting a call's processes, the pipes
BOOT_PATH = MODULE_PATH.parent / "sandbox_boot" / "__main__.py"  # the program the child processes run

# The scripts below run the sandbox in a fresh interpreter, some under the system python as another
# user, where rtpo's dependencies (and so `import rtpo.tools`, whose __init__ imports the search tool)
# are not there. The sandbox is standard library only: its two modules are loaded from rtpo/tools/ as
# a package of their own, without that __init__.
_LOAD_SANDBOX = r"""
def load_sandbox(module_path):
    import importlib, os, types
    pkg = types.ModuleType("rtpo_sandbox")
    pkg.__path__ = [os.path.dirname(module_path)]
    sys.modules["rtpo_sandbox"] = pkg
    return importlib.import_module("rtpo_sandbox.python_sandbox"), importlib.import_module("rtpo_sandbox.sandbox_process")
"""
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
    Case("kill_self", "import os, signal\nprint('bye', flush=True)\nos.kill(os.getpid(), signal.SIGKILL)",
         {"signal:SIGKILL"}, ALL_MODES, lambda r, c: _assert_in("bye", r)),
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
    return {srv.pid for srv in list(sp.servers.values()) if srv.pid is not None}


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
        limits = dict(wall_s=WALL, cpu_s=CPU, total_cpu_s=2 * CPU, max_wall_s=MAX_WALL, mem_mb=MEM, max_output=CAP)
        self.sandbox = PythonSandbox(**limits, ro_paths=[str(self.visible_dir)])
        self.fallback = PythonSandbox(**limits, ro_paths=[str(self.visible_dir)], fork_server=False)
        self.server = sp.servers.get(self.sandbox.python) if self.sandbox.fork_server else None
        self.server_id = (self.server.pid, self.server.starts) if self.server else None
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


def _assert_process_alive(pid: int) -> None:
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    assert state not in ("Z", "X", "T", "t"), f"process {pid} is in state {state}"


def _run_contained(h: Harness, case: Case, sandbox: PythonSandbox | None = None) -> SandboxResult:
    sandbox = sandbox or h.sandbox
    token = f"{h.token_base}-{case.name}"
    ctx = h.context(token)
    code = _fill(case.code, ctx)
    t0 = time.monotonic()
    r = sandbox.run(code)
    elapsed = time.monotonic() - t0
    worst_wall.append((elapsed, case.name))
    what = (f"{case.name} ({sandbox.mode}, fork server {sandbox.fork_server}): error={r.error!r} "
            f"output={r.output[-400:]!r}")
    assert elapsed <= MAX_WALL + SLACK, f"took {elapsed:.2f} s: {what}"
    assert r.wall_s <= MAX_WALL + SLACK, what
    assert r.error in case.expect, what
    assert r.ok == (r.error is None), what
    assert len(r.output) <= CAP, what
    if case.name == "daemon_writes_after_return":
        time.sleep(2.2)  # the daemon would be writing now, had it survived
    assert h.sentinel.poll() is None, f"sentinel killed by {what}"
    os.kill(os.getppid(), 0)  # pytest's parent is alive too
    assert _snapshot(str(h.hidden_dir), str(h.visible_dir)) == h.snapshot, f"canary changed: {what}"
    assert _stray_files(token) == [], what
    assert _wait_no_leftovers([token, sp.boot_dir()]) == [], f"leftover processes: {what}"
    if h.server is not None:  # the fork server is the same live process: not killed, stopped or replaced
        assert (h.server.pid, h.server.starts) == h.server_id, f"fork server replaced: {what}"
        _assert_process_alive(h.server.pid)
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


FALLBACK_CASES = ["infinite_loop", "fork_bomb", "double_fork_daemon", "kill_everything", "overwrite_canary",
                  "scan_proc_environ"]


@pytest.mark.parametrize("name", FALLBACK_CASES)
def test_hostile_program_is_contained_without_fork_server(harness, name):
    """The fallback path (one interpreter per call) keeps the same containment."""
    case = next(c for c in CASES if c.name == name)
    if harness.fallback.mode not in case.modes:
        pytest.skip(f"{case.name}: not contained in mode {harness.fallback.mode}")
    assert not harness.fallback.fork_server
    _run_contained(harness, case, harness.fallback)


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
    assert set(keys) <= set(sp.CHILD_ENV_FIXED) | {"HOME", "TMPDIR"}
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
    assert r.error == "cpu"
    assert r.output == "TimeoutError: the program exceeded the 1 s CPU-time limit and was stopped"
    assert r.wall_s < 20


def test_limits_and_their_defaults():
    """cpu_s (RLIMIT_CPU) decides CPU-bound programs; wall_s counts the code's wall-clock time but not
    its waits for a CPU (sleeping counts, being crowded out does not); total_cpu_s stops process
    bombs; max_wall_s is the parent's plain backstop. Defaults keep wall_s >= cpu_s + 2 so that a
    CPU-bound program always meets RLIMIT_CPU (and its SIGKILL at cpu_s + 1) first."""
    sb = PythonSandbox(cpu_s=5)
    assert (sb.wall_s, sb.total_cpu_s, sb.max_wall_s) == (10.0, 10.0, 40.0)
    assert (PythonSandbox(cpu_s=1).wall_s, PythonSandbox(cpu_s=1).total_cpu_s) == (3.0, 3.0)
    sb = PythonSandbox(cpu_s=1, wall_s=6, max_output=500)
    r = sb.run("import time\ntime.sleep(1)\nprint('awake', flush=True)\nwhile True:\n    pass")
    assert r.error == "cpu", r  # 1 s asleep + 1 s of CPU: the CPU limit, not the wall clock
    assert r.output == "awake\nTimeoutError: the program exceeded the 1 s CPU-time limit and was stopped"
    assert r.wall_s > 1.5
    r = PythonSandbox(cpu_s=1, wall_s=0.8, max_output=500).run("import time\ntime.sleep(100)")
    assert r.error == "timeout"
    assert r.output == "TimeoutError: the program exceeded the 0.8 s wall-clock limit and was stopped"
    assert 0.7 < r.wall_s < 0.8 + SLACK


def test_process_bomb_is_stopped_by_the_total_cpu_limit(sandbox):
    if sandbox.mode not in NS_MODES:
        pytest.skip("total_cpu_s is enforced in the namespace modes")
    sb = PythonSandbox(cpu_s=1, total_cpu_s=1, wall_s=30, max_wall_s=60, max_output=500)
    r = sb.run("import os\nfor _ in range(4):\n    os.fork()\nwhile True:\n    pass")  # 16 spinners
    assert r.error == "cpu", r  # (each has ~1/16 of the 1 s when the total is reached: RLIMIT_CPU is not)
    assert r.output == "TimeoutError: the program's processes exceeded the 1 s total CPU-time limit and were stopped"


# A loaded machine, made on purpose: the sandbox's processes and three spinners share one CPU, so
# the code gets about a quarter of it. Prints one JSON line: [(error, output, elapsed), ...].
_UNDER_LOAD = r"""
import json, os, subprocess, sys, time
""" + _LOAD_SANDBOX + r"""
m, sp = load_sandbox(sys.argv[1])
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # before the fork server starts: it inherits it
sb = m.PythonSandbox(cpu_s=1, wall_s=3, max_wall_s=60, max_output=500)
sb.run("print(0)")
spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(3)]
time.sleep(0.3)
out = []
try:
    for code in ("import time\ntime.sleep(1.5)\nt = time.process_time()\nwhile time.process_time() - t < 0.6:\n"
                 "    pass\nprint('done')", "while True:\n    pass"):
        t = time.monotonic()
        r = sb.run(code)
        out.append((r.error, r.output, time.monotonic() - t))
finally:
    for p in spin:
        p.kill()
print(json.dumps(out))
"""


def test_outcomes_do_not_depend_on_the_machine_load():
    """With ~1/4 of a CPU: a program that sleeps 1.5 s and then computes 0.6 s (2.1 s of active time,
    ~4 s of plain wall clock under this load) passes its 3 s wall_s; an endless loop ends at its
    CPU-time limit, not at a wall clock. (With plain wall-clock limits both would time out.)"""
    p = subprocess.run([sys.executable, "-c", _UNDER_LOAD, str(MODULE_PATH)], capture_output=True, text=True,
                       timeout=120, cwd="/")
    assert p.returncode == 0, p.stderr[-2000:]
    (e1, o1, t1), (e2, o2, t2) = json.loads(p.stdout.splitlines()[-1])
    assert (e1, o1) == (None, "done\n"), (e1, o1, t1)
    assert (e2, o2) == ("cpu", "TimeoutError: the program exceeded the 1 s CPU-time limit and was stopped"), (e2, t2)
    print(f"\n[test_sandbox] under load: sleeper+compute {t1:.1f} s (wall_s 3), endless loop {t2:.1f} s (cpu_s 1)")


def test_math_env_observation_names_the_timeout_kind():
    """What the policy reads: the math env's observation carries the sandbox's text unchanged."""
    from rtpo.envs.math_env import MathEnv
    from rtpo.tools.parse import ToolCall
    env = MathEnv(sandbox_kwargs={"cpu_s": 1})
    assert env.sandbox.cpu_s == 1 and env.sandbox.wall_s == 3.0
    obs, ok = env._execute(ToolCall("python", {"code": "while True:\n    pass"}))
    assert (obs, ok) == ("TimeoutError: the program exceeded the 1 s CPU-time limit and was stopped", False)
    obs, ok = env._execute(ToolCall("python", {"code": "print((8839 - 4578) * 435)"}))
    assert (obs, ok) == ("1853535", True)


# Programs with deterministic results in every mode: (code, expected error).
DETERMINISTIC = [
    ("print(1 + 1)", None),
    ("print((8839 - 4578) * 435)", None),
    ("import math\nprint(math.factorial(30), math.comb(50, 25))", None),
    ("from fractions import Fraction\nprint(sum(Fraction(1, k) for k in range(1, 30)))", None),
    ("print(sorted({'pear', 'fig', 'kiwi', 'plum'}), hash('abc'))", None),
    ("import os\nprint(sorted(os.listdir('.')), os.getcwd() == os.environ['HOME'])", None),
    ("x = [i * i for i in range(10**5)]\nprint(sum(x))", None),
    ("import sys\nsys.stderr.write('warn\\n')\nprint('out')", None),
    ("print('partial')\n1 / 0", "exit:1"),
    ("import sys\nsys.exit(3)", "exit:3"),
    ("raise ValueError('bad value')", "exit:1"),
    ("def f(n):\n    return f(n + 1)\nf(0)", "exit:1"),
    ("x = bytearray(8 * 1024**3)", "memory"),
    ("print('y' * 5000)", "output_limit"),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", "signal:SIGKILL"),
    ("while True:\n    pass", "cpu"),
]


def test_concurrent_calls_from_8_threads_match_serial_calls():
    """The Roller steps envs from a thread pool: run() from 8 threads at once gives, call for call,
    what serial calls give (output, error), and every call's processes are gone afterwards."""
    sb = PythonSandbox(wall_s=30, cpu_s=1, mem_mb=256, max_output=2000)
    programs = DETERMINISTIC
    serial = [sb.run(code) for code, _ in programs]
    for (code, expect), r in zip(programs, serial):
        assert r.error == expect, (code, r)
    concurrent: list = [None] * len(programs)
    errors = []

    def work(k: int) -> None:
        try:
            for i in range(k, len(programs), 8):
                concurrent[i] = sb.run(programs[i][0])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert [(r.ok, r.output, r.error) for r in concurrent] == [(r.ok, r.output, r.error) for r in serial]
    assert _wait_no_leftovers([sp.boot_dir()]) == []


_STATE_PROBE = r"""
import gc, os, resource, signal, sys, threading
print("argv", sys.argv)
print("path", sys.path)
print("flags", tuple(sys.flags))
print("modules", sorted(sys.modules))
print("environ", sorted(os.environ.items()))
print("cwd", os.getcwd(), "umask", os.umask(0o022))
print("ids", os.getpid(), os.getppid(), os.getpgid(0) == os.getpid(), os.getsid(0) == os.getpid())
print("fds", sorted(os.listdir("/proc/self/fd")))
print("signals", [(s.name, str(signal.getsignal(s))) for s in sorted(signal.valid_signals()) if s < 32])
print("limits", [resource.getrlimit(r) for r in (resource.RLIMIT_CPU, resource.RLIMIT_AS, resource.RLIMIT_NPROC,
                                                  resource.RLIMIT_FSIZE, resource.RLIMIT_NOFILE, resource.RLIMIT_CORE)])
print("threads", threading.active_count(), "gc", gc.isenabled(), gc.get_threshold())
print("stdio", [(f.name, f.encoding, f.errors, f.line_buffering, f.write_through, f.seekable())
                for f in (sys.stdout, sys.stderr)], sys.stdin.seekable())
"""


def test_a_forked_call_starts_in_the_state_of_a_fresh_interpreter():
    """The fork server's child and a freshly started interpreter are the same to the code: argv,
    sys.path, flags, loaded modules, environment, cwd, umask, ids, open fds, signal dispositions,
    limits, threads, GC settings, stdio objects. (gc.get_freeze_count() differs: see docs.)"""
    forked = PythonSandbox(wall_s=10, cpu_s=5, mem_mb=512, max_output=50_000)
    fresh = PythonSandbox(wall_s=10, cpu_s=5, mem_mb=512, max_output=50_000, fork_server=False)
    assert forked.fork_server and not fresh.fork_server
    a, b = forked.run(_STATE_PROBE), fresh.run(_STATE_PROBE)
    assert a.ok and b.ok, (a, b)
    assert a.output.splitlines() == b.output.splitlines()
    assert "fds ['0', '1', '2', '3']" in a.output  # stdin, stdout, stderr and the listdir itself


def test_a_call_cannot_see_anything_of_an_earlier_call(sandbox):
    """A call leaves a secret everywhere it can (globals, environment, builtins, sys.modules, signal
    handlers, limits, umask, files in its cwd, /tmp and /dev/shm, a SysV shared-memory segment, a
    daemon child); a later call scans its whole address space (a copy of the fork server's) and the
    state it starts in: no trace of the secret, and the same state as a call before it."""
    secret = "rtpo" + "-leak-" + uuid.uuid4().hex
    scan = textwrap.dedent(r'''
        import ctypes, os, re, signal, resource, sys, builtins
        pat = re.compile(b"rtpo" + b"-leak-" + b"[0-9a-f]{32}")
        libc = ctypes.CDLL(None, use_errno=True)
        class iovec(ctypes.Structure):
            _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
        buf = ctypes.create_string_buffer(1 << 20)
        hits, scanned = [], 0
        for line in open("/proc/self/maps").read().splitlines():
            addr, perms = line.split()[:2]
            if perms[0] != "r" or "[vvar" in line or "[vsyscall]" in line:
                continue
            lo, hi = (int(x, 16) for x in addr.split("-"))
            for at in range(lo, hi, (1 << 20) - 64):  # chunks overlap by more than the secret's length
                n = min(1 << 20, hi - at)
                ctypes.memset(buf, 0, n)  # (so reading the buffer's own pages finds only zeros)
                got = libc.process_vm_readv(os.getpid(), ctypes.byref(iovec(ctypes.addressof(buf), n)), 1,
                                            ctypes.byref(iovec(at, n)), 1, 0)
                if got > 0:
                    scanned += got
                    if pat.search(buf.raw[:got]):
                        hits.append(line)
        print("memory hits", hits, scanned > 1 << 20)
        print("builtins", sorted(k for k in vars(builtins) if "leak" in k), "modules", sorted(sys.modules))
        print("env", sorted(os.environ.items()), "umask", os.umask(0o022))
        print("signals", [str(signal.getsignal(s)) for s in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)])
        print("limits", resource.getrlimit(resource.RLIMIT_NOFILE), resource.getrlimit(resource.RLIMIT_CPU))
        print("files", sorted(os.listdir(".")), sorted(os.listdir("/tmp")), sorted(os.listdir("/dev/shm")))
        print("sysv", open("/proc/sysvipc/shm").read().splitlines()[1:])
        print("procs", sorted(p for p in os.listdir("/proc") if p.isdigit()))
    ''')
    polluter = textwrap.dedent(f'''
        import builtins, ctypes, os, resource, signal, sys, time
        SECRET = {secret!r}
        keep = [SECRET * 1000, SECRET.encode() * 1000]
        os.environ["LEAK"] = SECRET
        builtins.leak_value = SECRET
        sys.modules["leak_module"] = type(sys)("leak_module")
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        os.umask(0o077)
        for d in (".", "/tmp", "/dev/shm"):
            open(os.path.join(d, "leak.txt"), "w").write(SECRET)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.shmat.restype = ctypes.c_void_p
        shm = libc.shmget(0, 4096, 0o1666)  # IPC_PRIVATE, IPC_CREAT | 0666: outlives its creator
        addr = libc.shmat(shm, None, 0)
        ctypes.memmove(addr, SECRET.encode(), len(SECRET))
        if os.fork() == 0:
            os.setsid()
            time.sleep(30)
            os._exit(0)
    ''')
    before = sandbox.run(scan)
    assert before.ok, before.output
    polluted = sandbox.run(polluter + scan)  # the scan finds the secret where it is
    assert polluted.ok, polluted.output
    assert "memory hits []" not in polluted.output and "leak.txt" in polluted.output, polluted.output
    assert "leak_value" in polluted.output and "'LEAK'" in polluted.output
    after = sandbox.run(scan)
    assert after.ok, after.output
    assert after.output == before.output
    assert "memory hits [] True" in after.output and secret not in after.output


# The fork server's life, each scenario in a fresh interpreter. Prints JSON lines.
_LIFECYCLE = r"""
import json, os, signal, sys, threading, time, warnings
""" + _LOAD_SANDBOX + r"""
cfg = json.loads(sys.argv[1])
m, sp = load_sandbox(cfg["module"])
sb = m.PythonSandbox(wall_s=cfg.get("wall", 10), cpu_s=2)
srv = sp.servers[sb.python]
say = lambda **kw: print(json.dumps(kw), flush=True)
what = cfg["scenario"]


def wait_gone(pid):
    for _ in range(200):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    return False


if what in ("exit", "killed"):
    assert sb.run("print(1)").ok
    if what == "killed":  # a call in flight when the parent is SIGKILLed
        threading.Thread(target=sb.run, args=(cfg["code"],), daemon=True).start()
        time.sleep(1.0)
    say(server=srv.pid)
    if what == "killed":
        time.sleep(1000)
elif what == "replace":
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r1 = sb.run("print(1)")
        first = srv.pid
        os.kill(first, signal.SIGKILL)  # between calls (a zombie until the next call reaps it)
        r2 = sb.run("print(2)")
        second = srv.pid
        box = {}
        slow = "import time\ntime.sleep(1)\nprint('survived')"
        t = threading.Thread(target=lambda: box.setdefault("r", sb.run(slow)))
        t.start()
        time.sleep(0.4)
        os.kill(second, signal.SIGKILL)  # with a call in flight
        t.join()
        r3 = box["r"]
        r4 = sb.run("print(4)")
        third = srv.pid
        os.kill(third, signal.SIGSTOP)  # wedged: the next call is not forked until it is replaced
        quick = m.PythonSandbox(wall_s=1.5, cpu_s=1, max_wall_s=1.5)
        r5 = quick.run("print(5)")
        fourth = srv.pid
        stat = f"/proc/{third}/stat"
        third_state = open(stat).read().rsplit(")", 1)[1].split()[0] if os.path.exists(stat) else "gone"
    say(outputs=[r.output for r in (r1, r2, r3, r4, r5)], errors=[r.error for r in (r1, r2, r3, r4, r5)],
        pids=[first, second, third, fourth], starts=srv.starts, third_state=third_state,
        warnings=[str(w.message) for w in caught])
elif what == "fork":
    r1 = sb.run("print(1)")
    parent_server = srv.pid
    rd, wr = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(rd)
        r = m.PythonSandbox(wall_s=10, cpu_s=2).run("print('child')")
        child_server = sp.servers[sb.python].pid
        os.write(wr, json.dumps([r.output, child_server]).encode())
        os._exit(0)
    os.close(wr)
    child_out, child_server = json.loads(os.read(rd, 4096))
    os.waitpid(child, 0)
    r2 = sb.run("print(2)")
    say(parent_server=parent_server, after=srv.pid, child_server=child_server, child_out=child_out,
        outputs=[r1.output, r2.output], child_server_gone=wait_gone(child_server))
"""


def _lifecycle(scenario: str, **cfg) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _LIFECYCLE,
                             json.dumps(dict(cfg, scenario=scenario, module=str(MODULE_PATH)))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/")


def _gone(pid: int, grace_s: float = 5.0) -> bool:
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not os.path.exists(f"/proc/{pid}"):
            return True
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def _descendants(pid: int) -> set[int]:
    parent = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                parent[int(p)] = int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError):
                pass
    found, todo = set(), [pid]
    while todo:
        q = todo.pop()
        kids = [c for c, pp in parent.items() if pp == q]
        found.update(kids)
        todo += kids
    return found


def test_fork_server_exits_with_its_parent():
    p = _lifecycle("exit")
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    server = json.loads(out.splitlines()[-1])["server"]
    assert _gone(server), "the fork server outlived its parent's normal exit"


def test_fork_server_and_calls_in_flight_die_when_the_parent_is_killed():
    token = uuid.uuid4().hex
    code = ("import subprocess, sys, time\n"
            f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(1000)  # {token}'])\ntime.sleep(1000)")
    p = _lifecycle("killed", code=code, wall=60)
    try:
        line = p.stdout.readline()
        server = json.loads(line)["server"]
        in_flight = _descendants(server)
        assert len(in_flight) >= 3, "the call in flight should have P, C, D and the code's child"
        assert _live_processes([token]), "the call's child process should be running"
        p.kill()  # SIGKILL: no atexit, no cleanup in the parent
        p.wait(timeout=10)
        assert _gone(server), "the fork server outlived its SIGKILLed parent"
        assert all(_gone(q) for q in in_flight), "a call's process outlived the SIGKILLed parent"
        assert _wait_no_leftovers([token]) == []
    finally:
        if p.poll() is None:
            p.kill()
        p.communicate()


def test_fork_server_is_replaced_when_it_dies_or_hangs():
    """Killed between calls, killed with a call in flight (that call still completes: its processes
    do not depend on the server), stopped (SIGSTOP: the next call is not forked, so it is retried on
    a new server once its wall-clock limit passes, and the stopped one is killed)."""
    p = _lifecycle("replace")
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    res = json.loads(out.splitlines()[-1])
    assert res["outputs"] == ["1\n", "2\n", "survived\n", "4\n", "5\n"], res
    assert res["errors"] == [None] * 5, res
    assert len(set(res["pids"])) == 4 and res["starts"] == 4, res
    assert res["third_state"] in ("gone", "Z"), res
    assert sum("was replaced" in w for w in res["warnings"]) == 3, res["warnings"]


def test_a_forked_child_of_the_parent_gets_its_own_fork_server():
    """After os.fork() the child must not share the parent's server (its socket is closed in the
    child, so the parent's server still dies with the parent alone); the child starts its own."""
    p = _lifecycle("fork")
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    res = json.loads(out.splitlines()[-1])
    assert res["outputs"] == ["1\n", "2\n"] and res["child_out"] == "child\n", res
    assert res["parent_server"] == res["after"] != res["child_server"], res
    assert res["child_server_gone"], res


def test_fork_server_process_is_minimal(sandbox):
    """Between calls the server has one thread and four descriptors (stdin, stdout, stderr pipes
    and its socket), and none of the parent's environment."""
    assert sandbox.fork_server
    sandbox.run("print(1)")
    pid = sp.servers[sandbox.python].pid
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    assert status["Threads"].strip() == "1"
    fds = {int(f): os.readlink(f"/proc/{pid}/fd/{f}") for f in os.listdir(f"/proc/{pid}/fd")}
    assert sorted(fds) == [0, 1, 2, max(fds)] and [fds[k][:5] for k in (0, 1, 2)] == ["pipe:"] * 3
    assert fds[max(fds)].startswith("socket:")
    env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert {e.split(b"=", 1)[0].decode() for e in env if e} <= set(sp.CHILD_ENV_FIXED) | {"HOME", "TMPDIR"}


def test_bad_arguments_are_rejected_clearly(sandbox):
    with pytest.raises(ValueError, match="wall_s"):
        PythonSandbox(wall_s=0)
    with pytest.raises(ValueError, match="cpu_s"):
        PythonSandbox(cpu_s=0.5)
    with pytest.raises(ValueError, match="max_wall_s"):
        PythonSandbox(wall_s=10, max_wall_s=5)
    with pytest.raises(ValueError, match="total_cpu_s"):
        PythonSandbox(total_cpu_s=0)
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
# The bootstrap program (rtpo/tools/sandbox_boot/__main__.py) and the benchmark script.

# sha256 of `sp.BOOT`, the text the sandbox hands to `python`. Update it only when the bootstrap is
# changed on purpose (and then run this whole file as root and as a user: it is the containment).
BOOT_SHA256 = "0f3558c2610c1faa67cec7d84f047fe110d4fca0b92c177441d218b6a5ae7630"


def test_bootstrap_program_is_pinned():
    assert sp.BOOT == BOOT_PATH.read_text(encoding="utf-8")
    got = hashlib.sha256(sp.BOOT.encode()).hexdigest()
    assert got == BOOT_SHA256, (
        f"the sandbox's bootstrap program ({BOOT_PATH}) changed: sha256 {got}. If that was on purpose, "
        f"set BOOT_SHA256 in tests/test_sandbox.py to it (after running this file's containment tests)")


def test_bootstrap_program_is_run_never_imported():
    """A `__main__.py` (tests/test_imports.py imports every other .py of rtpo/): importing it would
    run it. Nothing of rtpo imports it, and the sandbox module has no command line of its own (the
    benchmark is scripts/bench_sandbox.py)."""
    assert BOOT_PATH.name == "__main__.py" and sp.BOOT_PATH == str(BOOT_PATH)
    assert not [m for m in sys.modules if m.startswith("rtpo.tools.sandbox_boot.")]
    root = MODULE_PATH.parents[2]
    importers = [str(f) for d in ("rtpo", "scripts", "tests") for f in (root / d).rglob("*.py")
                 if re.search(r"^\s*(from|import)\s+\S*sandbox_boot", f.read_text(errors="replace"), re.M)]
    assert importers == []
    assert not [mod for mod in (ps, sp) if hasattr(mod, "main") or "argparse" in vars(mod)]


def test_bench_script_runs():
    """scripts/bench_sandbox.py: --phases patches the bootstrap (`sp.BOOT`) in its own process; the
    plain form runs code from the command line."""
    script = str(MODULE_PATH.parents[2] / "scripts" / "bench_sandbox.py")
    p = subprocess.run([sys.executable, script, "--phases", "2"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "phase (wall, median ms):" in p.stdout and "C_start -> C_root" in p.stdout, p.stdout
    p = subprocess.run([sys.executable, script, "print(6 * 7)"], capture_output=True, text=True, timeout=120)
    assert (p.returncode, p.stdout) == (0, "42\n"), p.stderr[-3000:]
    assert "[ok=True error=None" in p.stderr


# --------------------------------------------------------------------------------------------------
# The other modes (as root): ns-user and rlimit-user as uid 65534, rlimit-root in-process.

def _readable_by_others(path: str) -> bool:
    p = Path(path).resolve()
    if not p.stat().st_mode & stat.S_IROTH:
        return False
    return all(q.stat().st_mode & stat.S_IXOTH for q in p.parents)


needs_root_and_system_python = pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists(SYSTEM_PYTHON) or not _readable_by_others(SYSTEM_PYTHON)
    or not all(_readable_by_others(str(p)) for p in (MODULE_PATH, PROCESS_MODULE_PATH, BOOT_PATH)),
    reason="needs root (to act as uid 65534) and a system python 65534 can run")

_SUBSUITE = r"""
import json, sys, time
""" + _LOAD_SANDBOX + r"""
cfg = json.loads(sys.argv[1])
m, sp = load_sandbox(cfg["module"])
sb = m.PythonSandbox(wall_s=cfg["wall"], cpu_s=cfg["cpu"], mem_mb=cfg["mem"], max_output=cfg["cap"],
                     max_wall_s=cfg["max_wall"], python=cfg["python"], isolation=cfg["isolation"],
                     ro_paths=cfg["ro_paths"])
res = {"mode": sb.mode, "boot_dir": sp.boot_dir(), "results": {}}
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
    cfg = dict(module=str(MODULE_PATH), wall=WALL, cpu=CPU, mem=MEM, cap=CAP, max_wall=MAX_WALL, python=SYSTEM_PYTHON,
               isolation=isolation, ro_paths=[str(canary.parent)] if ro_canary else [], cases=codes)
    sentinel = subprocess.Popen(["sleep", "600"], user=user, group=user, extra_groups=[]) if user \
        else subprocess.Popen(["sleep", "600"])
    before = _snapshot(str(canary.parent))
    try:
        p = subprocess.run([SYSTEM_PYTHON, "-c", _SUBSUITE, json.dumps(cfg)], capture_output=True, text=True,
                           timeout=len(names) * (MAX_WALL + SLACK) + 30, cwd="/",
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
        assert r["elapsed"] <= MAX_WALL + SLACK, what
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
    assert worst[-1][0] <= MAX_WALL + SLACK
