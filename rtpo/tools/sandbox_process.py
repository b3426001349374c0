"""How one sandbox call's processes are started and talked to: the parent's side of the plumbing.

`rtpo.tools.python_sandbox.PythonSandbox` decides what a call may do (its limits, the isolation mode)
and what its outcome means; this module starts the call's first process P and moves the bytes:
- `BOOT`: the program the child processes run (sandbox_boot/__main__.py, read once as text), and
  `_boot_args`, which compiles it once per interpreter into a private directory (`boot_dir`);
- `start_call`: one call's five pipes, and P forked by this process's fork server for the interpreter
  (`ForkServer`, one per parent process and interpreter, in `servers`) or started as a fresh
  interpreter (the fallback);
- `Pump`: feeds P the call's parameters and code, and reads stdout, stderr and the status pipe with
  bounded memory.
Standard library only, like python_sandbox.py: both run under any python 3 (tests/test_sandbox.py
loads the two under the system python, as another user).
"""

from __future__ import annotations

import array
import atexit
import os
import secrets
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import warnings

# The child's whole environment. Nothing is inherited from the parent.
CHILD_ENV_FIXED = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONHASHSEED": "0",  # same code -> same output (set/dict-of-str order); rollouts stay reproducible
    "PYTHONUNBUFFERED": "1",  # output written before a timeout/crash still reaches the model
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONIOENCODING": "utf-8:backslashreplace",
    "OMP_NUM_THREADS": "1",  # numpy/BLAS thread pools would otherwise hit RLIMIT_NPROC on big hosts
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}

NS_WORKDIR = "/tmp/sandbox"  # the child's cwd inside the namespace modes (a private tmpfs)
EXIT_GRACE_S = 5.0  # after the lifeline is dropped: P kills C after 2 s, so this is never reached

# One re-entrant lock for the one-time set-up work: python_sandbox's mode probes, the compiled
# bootstrap and the site-packages lookup (re-entered: a probe run compiles the bootstrap).
setup_lock = threading.RLock()


class SandboxError(RuntimeError):
    """The sandbox itself could not be set up (never raised for anything the model's code does)."""


# --------------------------------------------------------------------------------------------------
# The child side: `BOOT`, the program in rtpo/tools/sandbox_boot/__main__.py, read below once as text.
# It is only ever run, never imported (it acts at its top level; `_BOOT_DIR` in it is a placeholder
# that `_boot_args` fills in); tests/test_sandbox.py pins its hash, so a change to it is deliberate.
# Runs as `python -s -S -B boot.pyc ...` (see `_boot_args`) with only what the
# interpreter preloads plus a few C extension modules (each `import` here costs every fresh
# interpreter: `ctypes` the package costs ~7 ms, so the raw `_ctypes` is used; `signal` pulls in
# `enum`, so `_signal` is used).
#   argv "zygote <socket fd>": the fork server (`_zygote`); each forked child is one call's P.
#   argv "<status fd> <lifeline fd>": one call's P directly (the per-call-interpreter fallback).
# stdin of P: "<n>\n", n bytes of NUL-separated parameters (mode workdir cpu_s mem_bytes nproc
#   fsize_bytes nofile uid tmp_mb wall_s total_cpu_s HOME TMPDIR [import paths...] -- [read-only
#   paths...]), then the model's code; read fully by P before anything else.
# Status pipe lines (to the parent): "start" (P exists), "warn <text>", "setup <error text>" (a failure
# of our own set-up; P, C or D then exits 70),
# "timeout wall|cpu <value>" (C stopped the run at a limit of its own),
# "exit <wait status> <cpu seconds> <maxrss KiB>" (C, when D is gone). P holds the status pipe until
# C is reaped, so its EOF tells the parent that every process of the call is gone (namespace modes).
# `#@phase NAME` comments mark the points that `scripts/bench_sandbox.py --phases` times (they are
# comments otherwise).
BOOT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_boot", "__main__.py")
with open(BOOT_PATH, encoding="utf-8") as _f:
    BOOT = _f.read()
del _f


# --------------------------------------------------------------------------------------------------
# Starting one call: its pipes, and P from the fork server or from a fresh interpreter.

class Call:
    """The parent's ends of one call's pipes (stdin, stdout, stderr, status, lifeline) and how its
    P was started: `server` (forked by the fork server) or `proc` (a per-call interpreter)."""

    def __init__(self, fds: list[int], proc: subprocess.Popen | None, server: "ForkServer | None",
                 generation: int = 0):
        self.stdin, self.stdout, self.stderr, self.status, self.life = fds
        self.proc, self.server, self.generation = proc, server, generation

    def drop_lifeline(self) -> None:
        if self.life >= 0:
            os.close(self.life)
            self.life = -1

    def give_up(self) -> None:
        """P did not exit within the grace period after the lifeline was dropped (P kills C after
        2 s, so this needs a stopped or wedged P). A per-call P is our child: kill its process
        group (C is in it). A forked P is the fork server's child, whose pid we must not signal."""
        if self.proc is not None:
            _hard_kill(self.proc)
        else:
            warnings.warn("PythonSandbox: a call's supervisor did not exit within "
                          f"{EXIT_GRACE_S:g} s of being stopped; left to finish on its own", RuntimeWarning)

    def close(self) -> None:
        self.drop_lifeline()
        for name in ("stdin", "stdout", "stderr", "status"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)
        if self.proc is not None and self.proc.returncode is None:
            try:
                self.proc.wait(timeout=EXIT_GRACE_S)  # P has closed the status pipe: it is exiting
            except subprocess.TimeoutExpired:
                _hard_kill(self.proc)


def start_call(python: str, fork_server: bool, env: dict, cwd: str) -> Call:
    """Create the call's pipes and start its P (the child ends are closed here once P has them)."""
    pipes = [os.pipe() for _ in range(5)]  # stdin, stdout, stderr, status, lifeline (all O_CLOEXEC)
    child = [pipes[0][0], pipes[1][1], pipes[2][1], pipes[3][1], pipes[4][0]]
    mine = [pipes[0][1], pipes[1][0], pipes[2][0], pipes[3][0], pipes[4][1]]
    proc = server = None
    generation = 0
    try:
        if fork_server:
            server = _fork_server(python)
            generation = server.submit(child)
        else:
            try:
                proc = subprocess.Popen([python, "-s", "-S", "-B", *_boot_args(python), str(child[3]), str(child[4])],
                                        stdin=child[0], stdout=child[1], stderr=child[2], env=env, cwd=cwd,
                                        pass_fds=(child[3], child[4]), start_new_session=True)
            except OSError as e:
                raise SandboxError(f"PythonSandbox: cannot start {python!r}: {e}") from e
    except BaseException:
        for fd in mine:
            os.close(fd)
        raise
    finally:
        for fd in child:
            os.close(fd)
    return Call(mine, proc, server, generation)


class ForkServer:
    """The parent's handle on one fork server (`_zygote` in the bootstrap) for one interpreter.

    Started lazily by the first call; restarted if it has died (a call in flight is retried, see
    `PythonSandbox._execute`); it exits by itself when this process's end of the socket closes: at
    exit (atexit closes it and waits), or when this process dies in any way (the kernel closes it).
    Sending is serialized by a lock; a SOCK_SEQPACKET message is atomic, so threads never interleave."""

    def __init__(self, python: str):
        self.python = python
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self.starts = 0
        self.last_death = ""  # why the last server was replaced, and what it printed

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def submit(self, fds: list[int]) -> int:
        """Hand one call's five child-side descriptors to the fork server (starting it if needed);
        returns the server's generation (how many times it has been started)."""
        boot = _boot_args(self.python)  # before self.lock: _boot_args may take setup_lock, which a
        with self.lock:                  # probe holds while it calls submit (lock order: probe, server)
            err = None
            for _ in range(2):
                if self.proc is None or self.proc.poll() is not None:
                    if self.proc is not None:
                        self._died_locked("it exited")
                    self._start_locked(boot)
                try:
                    self.sock.sendmsg([b"run"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
                    return self.starts
                except OSError as e:  # it died since the poll above
                    err = e
                    self._died_locked(f"sending failed: {e}")
            raise SandboxError(f"PythonSandbox: the fork server for {self.python!r} does not accept calls: {err}")

    def cpu(self) -> float:
        """CPU seconds of the server and of its reaped children so far (for benchmarks)."""
        r, w = os.pipe()
        try:
            with self.lock:
                if self.sock is None:
                    return 0.0
                self.sock.sendmsg([b"cpu"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [w]))])
            os.close(w)
            w = -1
            return float(os.read(r, 64) or 0.0)
        finally:
            os.close(r)
            if w >= 0:
                os.close(w)

    def restart(self, generation: int, why: str) -> None:
        """Replace the server of `generation` (no-op if another call has replaced it already)."""
        with self.lock:
            if self.proc is not None and self.starts == generation:
                self._died_locked(why)

    def _start_locked(self, boot: list[str]) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            # stdin/stdout/stderr are pipes, as for a per-call P: sys.stdin/stdout/stderr are built
            # at start-up (buffering, seekability), and every forked call inherits them.
            self.proc = subprocess.Popen(
                [self.python, "-s", "-S", "-B", *boot, "zygote", str(theirs.fileno())],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                pass_fds=(theirs.fileno(),), env=dict(CHILD_ENV_FIXED, HOME=NS_WORKDIR, TMPDIR="/tmp"),
                cwd="/", start_new_session=True)
        except OSError as e:
            mine.close()
            raise SandboxError(f"PythonSandbox: cannot start {self.python!r}: {e}") from e
        finally:
            theirs.close()
        self.proc.stdin.close()
        self.sock = mine
        self.starts += 1

    def _died_locked(self, why: str) -> None:
        """Forget the current server (killing it if it still runs) and say why."""
        proc, self.proc = self.proc, None
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        os.set_blocking(proc.stdout.fileno(), False)
        try:
            said = (proc.stdout.read() or b"").decode("utf-8", "replace")[-500:]
        except OSError:
            said = ""
        proc.stdout.close()
        self.last_death = f"{why} (exit status {proc.returncode}){': ' + said if said else ''}"
        warnings.warn(f"PythonSandbox: the fork server (pid {proc.pid}) for {self.python!r} was replaced: "
                      f"{self.last_death}", RuntimeWarning, stacklevel=2)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the server: close the socket (it exits after reaping its children) and wait."""
        with self.lock:
            proc, self.proc = self.proc, None
            if self.sock is not None:
                self.sock.close()
                self.sock = None
        if proc is not None:
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            proc.stdout.close()

    def abandon(self) -> None:
        """In a forked child of the parent: drop our copy of the socket (the server belongs to the
        parent and must still die with it) without waiting for or signalling the server."""
        if self.sock is not None:
            self.sock.close()
        if self.proc is not None:
            _abandoned.append(self.proc)  # not our child: keep it from Popen.__del__'s reaping
            self.proc.stdout.close()


servers: dict[str, ForkServer] = {}
_servers_lock = threading.Lock()
_abandoned: list[subprocess.Popen] = []


def _fork_server(python: str) -> ForkServer:
    with _servers_lock:
        srv = servers.get(python)
        if srv is None:
            srv = servers[python] = ForkServer(python)
        return srv


def _close_fork_servers() -> None:
    with _servers_lock:
        running = list(servers.values())
        servers.clear()
    for srv in running:
        srv.close()


def _after_fork_in_child() -> None:
    """A fork of this process (multiprocessing, ...) starts its own fork servers if it runs code."""
    global _servers_lock
    _servers_lock = threading.Lock()  # another thread may have held it at the fork
    for srv in servers.values():
        srv.abandon()
    servers.clear()


atexit.register(_close_fork_servers)
os.register_at_fork(after_in_child=_after_fork_in_child)


class Pump:
    """Feeds stdin and reads stdout/stderr/status of one call with bounded memory."""

    def __init__(self, call: Call, payload: bytes, *, out_cap: int, err_keep: int, err_cap: int):
        self.call, self.payload = call, payload
        self.out_cap, self.err_keep, self.err_cap = out_cap, err_keep, err_cap
        self.out = bytearray()
        self.err_tail = bytearray()
        self.err_total = 0
        self.status = bytearray()
        self.status_open = True

    def pump(self, deadline: float) -> str | None:
        """Run until the call is over (-> None) or a limit is hit (-> "timeout" or "output_limit";
        the caller then drops the lifeline). Never blocks past `deadline`.

        "Over" is the status pipe's EOF: P has exited, after C (in the namespace modes after the
        whole PID namespace); what is left in stdout/stderr is then taken without waiting for their
        EOF (in the rlimit modes an escaped process may hold them open)."""
        c = self.call
        fin, fout, ferr, fst = c.stdin, c.stdout, c.stderr, c.status
        os.set_blocking(fin, False)
        poller = select.poll()
        readers = {fout: "out", ferr: "err", fst: "status"}
        for fd in readers:
            poller.register(fd, select.POLLIN)
        code, pos = self.payload, 0
        poller.register(fin, select.POLLOUT)
        try:
            while fst in readers:
                left = deadline - time.monotonic()
                if left <= 0:
                    return "timeout"
                for fd, _ev in poller.poll(max(1, int(left * 1000) + 1)):
                    if fd == fin:
                        try:
                            pos += os.write(fin, code[pos:pos + (1 << 16)])
                        except BlockingIOError:
                            continue
                        except BrokenPipeError:
                            pos = len(code)
                        if pos >= len(code):
                            poller.unregister(fin)
                            self._close_stdin()
                        continue
                    if fd in readers and self._take(fd, readers, poller) is not None:
                        return "output_limit"
            for fd in (fout, ferr):  # what is already in the pipes
                if fd in readers:
                    os.set_blocking(fd, False)
                    try:
                        while fd in readers:
                            if self._take(fd, readers, poller) is not None:
                                return "output_limit"
                    except BlockingIOError:
                        pass
            return None
        finally:
            self.status_open = fst in readers
            if len(self.err_tail) > self.err_keep:
                del self.err_tail[:-self.err_keep]
            self._close_stdin()

    def finish(self, grace: float) -> bool:
        """After the lifeline is dropped: wait (at most `grace` s) for the status pipe's EOF, i.e.
        for P to exit, collecting the status lines still written. True if P is gone."""
        fd = self.call.status
        deadline = time.monotonic() + grace
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while self.status_open:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if poller.poll(max(1, int(left * 1000) + 1)):
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    self.status_open = False
                self.status += chunk
        return True

    def _close_stdin(self) -> None:
        if self.call.stdin >= 0:
            os.close(self.call.stdin)
            self.call.stdin = -1

    def _take(self, fd: int, readers: dict, poller) -> str | None:
        """Read one chunk from `fd` into its buffer; "output_limit" when a cap is exceeded."""
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            poller.unregister(fd)
            del readers[fd]
            return None
        kind = readers[fd]
        if kind == "out":
            self.out += chunk
            if len(self.out) > self.out_cap:
                return "output_limit"
        elif kind == "err":
            self.err_total += len(chunk)
            self.err_tail += chunk
            if len(self.err_tail) > 2 * self.err_keep:
                del self.err_tail[:-self.err_keep]
            if self.err_total > self.err_cap:
                return "output_limit"
        else:
            self.status += chunk
        return None

    def status_lines(self) -> list[str]:
        return self.status.decode("utf-8", "replace").splitlines()


def _hard_kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # P is unreaped, so its pgid cannot have been reused
    except OSError:
        pass
    proc.wait()


_boot_cache: dict[str, list[str]] = {}


def _boot_args(python: str) -> list[str]:
    """How to hand `BOOT` to `python`: ["<dir>/boot-N.pyc"], compiled once per interpreter and
    process (compiling the bootstrap on every call would cost ~10 ms of CPU), else ["-c", source].

    The .pyc lives in a fresh 0700 directory of this process (removed at exit), so nobody else can
    swap it for code that would then run with our privileges. If something deleted it (a /tmp
    cleaner), it is rebuilt."""
    args = _boot_cache.get(python)
    if args is not None and (args[0] == "-c" or os.path.exists(args[0])):
        return args
    with setup_lock:
        args = ["-c", BOOT.replace("_BOOT_DIR", "None")]
        try:
            d = boot_dir()
            src = os.path.join(d, "boot.py")
            dst = os.path.join(d, f"boot-{secrets.token_hex(4)}.pyc")
            with open(src, "w") as f:
                f.write(BOOT.replace("_BOOT_DIR", repr(d)))
            subprocess.run([python, "-s", "-S", "-c", "import py_compile, sys; py_compile.compile("
                            "sys.argv[1], cfile=sys.argv[2], dfile='<rtpo-sandbox-boot>', doraise=True)",
                            src, dst], check=True, capture_output=True, timeout=60, env=dict(CHILD_ENV_FIXED))
            args = [dst]
        except (OSError, subprocess.SubprocessError) as e:
            warnings.warn(f"PythonSandbox: cannot precompile the bootstrap for {python!r} ({e}); "
                          f"compiling it on every call instead", RuntimeWarning, stacklevel=4)
        _boot_cache[python] = args
        return args


_boot_dir_path: list[str] = []


def boot_dir() -> str:
    """This process's private directory for compiled bootstraps (0700; removed at exit)."""
    if not (_boot_dir_path and os.path.isdir(_boot_dir_path[0])):
        d = tempfile.mkdtemp(prefix="rtpo-sandbox-boot-")
        owner = os.getpid()
        # a forked child of this process exiting normally must not delete the parent's directory
        atexit.register(lambda: os.getpid() == owner and shutil.rmtree(d, True))
        _boot_dir_path[:] = [d]
    return _boot_dir_path[0]


_site_cache: dict[str, tuple[str, ...]] = {}


def site_packages(python: str) -> tuple[str, ...]:
    """The site-packages directories of `python` (asked once per interpreter; cached)."""
    with setup_lock:
        if python not in _site_cache:
            out = subprocess.run([python, "-s", "-c", "import site; print('\\n'.join(site.getsitepackages()))"],
                                 capture_output=True, text=True, timeout=60, env=dict(CHILD_ENV_FIXED))
            if out.returncode != 0:
                raise SandboxError(f"PythonSandbox: cannot list site-packages of {python!r}: {out.stderr[-500:]}")
            _site_cache[python] = tuple(p for p in out.stdout.split("\n") if p and os.path.isdir(p))
        return _site_cache[python]
