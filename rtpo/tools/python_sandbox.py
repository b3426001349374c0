"""The `python` tool of the math environment: run model-written code in a contained child process.

The math task (paper Sec. 5, "math reasoning with a Python interpreter") lets the policy call a
Python tool; every call runs code we did not write, thousands of times per RL step. This module is
the containment. `PythonSandbox(...).run(code)` starts a fresh interpreter, feeds it `code`, and
returns a `SandboxResult` whose `output` is what the model sees.

Per call, the child gets
- a wall-clock limit (`wall_s`, enforced by the parent), a CPU-time limit (`cpu_s`, RLIMIT_CPU),
  an address-space limit (`mem_mb`, RLIMIT_AS), a process/thread limit (RLIMIT_NPROC), a file-size
  limit (RLIMIT_FSIZE), an open-file limit (RLIMIT_NOFILE) and no core dumps;
- an output cap: the parent reads at most ~4*max_output bytes of stdout (~max(1 MiB, 64*max_output)
  of stderr) and kills the child when it writes more, so gigabytes never reach memory;
- a fresh, empty working directory and a scrubbed environment (a fixed handful of variables; nothing
  inherited from the parent, so no API keys or tokens);
- no way to outlive the call: every process it starts is dead when `run` returns.

How much more it gets depends on what the kernel allows (docs/security.md has the full table):

mode "ns-root"   (running as root): new mount, PID, network, IPC and UTS namespaces; the child sees a
                 minimal read-only filesystem (/usr, /bin, /lib*, /etc, /sys, the interpreter's own
                 directories, /dev/{null,zero,full,random,urandom}, a private /proc) plus a private
                 size-capped tmpfs for /tmp (its working directory is /tmp/sandbox); it runs under a
                 throw-away uid/gid drawn per call (so RLIMIT_NPROC applies), with no capabilities and
                 no_new_privs. When the namespace's init exits the kernel kills everything left in it.
mode "ns-user"   (not root, unprivileged user namespaces available): the same, inside a new user
                 namespace, keeping the caller's uid with all capabilities dropped.
mode "rlimit-root"/"rlimit-user" (namespaces unavailable): resource limits, a host temp directory,
                 a new session; as root also the throw-away uid and a kill-by-uid sweep at the end.
                 Not a security boundary for a non-root caller (see docs/security.md).

Process layout (see `_BOOT`): the parent starts `P` (`python -s -S -B <compiled _BOOT>`), which enters the new
namespaces and forks `C`, the init of the new PID namespace and the supervisor; `C` builds the
filesystem view and forks `D`, which drops privileges, sets the limits and executes the model's code
as `__main__`. The parent kills the run by closing a "lifeline" pipe that `C` watches (C then exits
and the kernel kills the rest of the namespace), so the parent never signals a pid it does not own.

Per-call overhead of `print(1+1)` on the 2-core dev box: see `python -m rtpo.tools.python_sandbox
--bench 50` (numbers in docs/security.md).
"""

from __future__ import annotations

import argparse
import atexit
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["SandboxResult", "PythonSandbox", "SandboxError"]

# Throw-away uids for root mode: uid = _UID_BASE + random 20 bits, drawn per call. Far above normal
# users (< 65536) and subuid ranges (100000 + 65536*k for the first few thousand users).
_UID_BASE = 1_700_000_000
_UID_SPAN = 1 << 20

# The child's whole environment. Nothing is inherited from the parent.
_CHILD_ENV_FIXED = {
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

_NS_WORKDIR = "/tmp/sandbox"  # the child's cwd inside the namespace modes (a private tmpfs)
_SETUP_EXIT = 70  # P/C/D exit code for a failure of our own setup (reported on the status pipe)


class SandboxError(RuntimeError):
    """The sandbox itself could not be set up (never raised for anything the model's code does)."""


@dataclass
class SandboxResult:
    """The outcome of one `PythonSandbox.run` call.

    ok:     the code exited with status 0 within every limit (wall, CPU, memory, output).
    output: what the model sees: stdout (at most `max_output` characters) when ok; on failure the
            stdout written so far (if any) followed by the error text (stderr tail with the
            traceback, "TimeoutError: ...", "MemoryError", "[output truncated ...]", ...), the whole
            capped at `max_output` characters with the error text kept.
    error:  None | "timeout" (wall clock) | "cpu" | "memory" | "output_limit" | "exit:<code>" |
            "signal:<name>" (e.g. "signal:SIGSEGV").
    wall_s: seconds the call took, start of the child to cleanup done.
    """

    ok: bool
    output: str
    error: str | None
    wall_s: float


# --------------------------------------------------------------------------------------------------
# The child side. Runs as `python -s -S -B boot.pyc <args>` (see `_boot_args`) with only what the interpreter preloads
# plus a few C extension modules (each `import` here is on the per-call critical path: `ctypes` the
# package costs ~7 ms, so the raw `_ctypes` is used; `signal` pulls in `enum`, so `_signal` is used).
# argv: mode workdir status_fd life_fd cpu_s mem_bytes nproc fsize_bytes nofile uid tmp_mb
#       [import paths...] -- [read-only paths...]
# stdin: the model's code (read fully by P before anything else).
# Status pipe lines (to the parent): "exit <wait status> <cpu seconds> <maxrss KiB>", "warn <text>",
# "setup <error text>".
_BOOT = r'''# rtpo-python-sandbox-boot
import sys
if sys.path and sys.path[0] in ("", _BOOT_DIR):
    del sys.path[0]  # never import from the (untrusted) cwd or the boot file's directory while privileged
import os


def _boot():
    import _ctypes, _signal, _thread, resource  # C modules; os.wait4 needs resource anyway

    a = sys.argv[1:]
    mode, workdir = a[0], a[1]
    status_fd, life_fd, cpu_s, mem_b, nproc, fsize_b, nofile, uid, tmp_mb = map(int, a[2:11])
    sep = a.index("--", 11)
    import_paths, ro_paths = a[11:sep], a[sep + 1:]  # sys.path additions; extra read-only binds
    ns, as_root = mode.startswith("ns-"), mode.endswith("-root")

    def say(msg):
        try:
            os.write(status_fd, (msg.replace("\n", " ") + "\n").encode("utf-8", "replace"))
        except OSError:
            pass

    # -- libc through the raw _ctypes module --------------------------------------------------
    class Int(_ctypes._SimpleCData):
        _type_ = "i"

    class Long(_ctypes._SimpleCData):
        _type_ = "l"

    class IntFn(_ctypes.CFuncPtr):
        _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
        _restype_ = Int

    class LongFn(_ctypes.CFuncPtr):
        _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
        _restype_ = Long

    class Libc:
        _handle = None  # set below, inside P's error handling

    def libc(name, fn_type=IntFn):
        f = fn_type((name, Libc))

        def call(*args):
            r = f(*args)
            if r == -1:
                e = _ctypes.get_errno()
                raise OSError(e, "%s: %s" % (name, os.strerror(e)))
            return r
        return call

    L = lambda v: Long(v)  # integer arguments passed as C long (varargs / unsigned long params)
    bo = sys.byteorder

    def mount(src, dst, fstype, flags, data=None):
        return libc("mount")(src and src.encode(), dst.encode(), fstype and fstype.encode(),
                             L(flags), data and data.encode())

    def mount_setattr(path, attr_set, attr_clr, recursive):  # Linux >= 5.12; syscall 442 on every arch
        attr = attr_set.to_bytes(8, bo) + attr_clr.to_bytes(8, bo) + bytes(16)  # struct mount_attr
        libc("syscall", LongFn)(L(442), L(-100), path.encode(), L(0x8000 if recursive else 0), attr, L(32))

    def prctl(option, arg):
        libc("prctl")(L(option), L(arg), L(0), L(0), L(0))

    MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 8, 4096, 16384, 1 << 18

    def build_root():
        """Build the child's filesystem view on a tmpfs at /tmp (of this mount namespace) and chroot.

        R/         tmpfs, read-only once built: symlinks and mount points only
        R/usr ...  /usr /bin /sbin /lib* /etc /sys, the interpreter's directories, ro_paths:
                   read-only recursive binds at their host paths
        R/dev      null zero full random urandom (binds), fd -> /proc/self/fd, shm -> R/tmp
        R/proc     a proc of the new PID namespace (only the sandbox's own processes)
        R/tmp      the writable scratch tmpfs (size tmp_mb), also at /var/tmp and /dev/shm;
                   the working directory is R/tmp/sandbox"""
        R = "/tmp"
        mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing we mount propagates to the host
        binds, links = [], []
        for name in ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "sys"):
            p = "/" + name
            if os.path.islink(p):
                links.append((os.readlink(p), name))
            elif os.path.isdir(p):
                binds.append(p)
        visible = list(binds)
        wanted = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix,
                  os.path.dirname(sys.executable), os.path.dirname(os.path.realpath(sys.executable))]
        wanted += [p for p in sys.path if p] + import_paths + ro_paths
        for p in sorted({os.path.realpath(p) for p in wanted}):
            if p != "/" and os.path.isdir(p) and not any(p == v or p.startswith(v + "/") for v in visible):
                binds.append(p)
                visible.append(p)
        # Bind sources are opened before the tmpfs covers /tmp (a source may live under /tmp).
        srcs = [(os.open(p, os.O_PATH | os.O_CLOEXEC), p) for p in binds]
        devs = [(os.open("/dev/" + d, os.O_PATH | os.O_CLOEXEC), d)
                for d in ("null", "zero", "full", "random", "urandom") if os.path.exists("/dev/" + d)]
        mount("tmpfs", R, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=256k,nr_inodes=1024")
        for target, name in links:
            os.symlink(target, R + "/" + name)
        for d in ("/dev", "/dev/shm", "/tmp", "/proc", "/var", "/var/tmp"):
            os.mkdir(R + d)
        # inodes are kernel memory outside RLIMIT_AS: cap them too (~16 per MiB of scratch space)
        mount("tmpfs", R + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV,
              "mode=1777,size=%dm,nr_inodes=%d" % (tmp_mb, max(1024, 16 * tmp_mb)))
        for fd, p in srcs:  # (binds under /tmp land inside the scratch tmpfs, above it)
            os.makedirs(R + p, exist_ok=True)
            mount("/proc/self/fd/%d" % fd, R + p, None, MS_BIND | MS_REC)
            os.close(fd)
        for fd, d in devs:
            os.close(os.open(R + "/dev/" + d, os.O_CREAT | os.O_WRONLY, 0o666))
            mount("/proc/self/fd/%d" % fd, R + "/dev/" + d, None, MS_BIND)
            os.close(fd)
        for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                             ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
            os.symlink(target, R + "/dev/" + name)
        try:
            mount("proc", R + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        except OSError as e:  # e.g. a container that masks parts of the host /proc; leave it empty
            say("warn no /proc in the sandbox (%s)" % e)
        mount_setattr(R, 0x1 | 0x2, 0, True)  # everything: MOUNT_ATTR_RDONLY | NOSUID ...
        mount_setattr(R + "/tmp", 0, 0x1, False)  # ... except the scratch tmpfs itself
        mount(R + "/tmp", R + "/var/tmp", None, MS_BIND)
        mount(R + "/tmp", R + "/dev/shm", None, MS_BIND)
        os.mkdir(R + workdir, 0o700)
        if as_root:
            os.chown(R + workdir, uid, uid)
        os.chroot(R)
        os.chdir("/")

    # -- P: read the code, enter the namespaces, fork C, wait for it --------------------------
    try:
        Libc._handle = _ctypes.dlopen(None, _ctypes.RTLD_LOCAL)
        chunks = []
        while True:
            b = os.read(0, 1 << 20)
            if not b:
                break
            chunks.append(b)
        code = b"".join(chunks)
        if ns:
            euid, egid = os.geteuid(), os.getegid()
            # NEWNS | NEWPID | NEWNET | NEWIPC | NEWUTS (+ NEWUSER when not root)
            flags = 0x00020000 | 0x20000000 | 0x40000000 | 0x08000000 | 0x04000000
            if not as_root:
                flags |= 0x10000000
            libc("unshare")(flags)
            if not as_root:
                for f, text in (("setgroups", "deny"), ("uid_map", "%d %d 1" % (euid, euid)),
                                ("gid_map", "%d %d 1" % (egid, egid))):
                    fd = os.open("/proc/self/" + f, os.O_WRONLY)
                    os.write(fd, text.encode())
                    os.close(fd)
        c = os.fork()
    except BaseException as e:
        say("setup P: %s: %s" % (type(e).__name__, e))
        os._exit(70)
    if c:
        os.close(status_fd)
        os.close(life_fd)
        try:
            os.waitpid(c, 0)
        except ChildProcessError:
            pass
        os._exit(0)

    # -- C: init of the PID namespace; build the view, fork D, supervise ----------------------
    try:
        os.umask(0o022)
        prctl(4, 0)  # PR_SET_DUMPABLE 0: D cannot ptrace C or open /proc/1/fd
        for s in (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP, _signal.SIGPIPE):
            _signal.signal(s, _signal.SIG_IGN)
        if ns:
            build_root()
        d = os.fork()
    except BaseException as e:
        say("setup C: %s: %s" % (type(e).__name__, e))
        os._exit(70)

    if d == 0:
        # -- D: drop privileges, set limits, then return the code to run ----------------------
        try:
            for s in (_signal.SIGTERM, _signal.SIGHUP):  # C ignores them; the code gets the defaults
                _signal.signal(s, _signal.SIG_DFL)
            _signal.signal(_signal.SIGINT, _signal.default_int_handler)  # SIGPIPE stays ignored, as in any python
            os.close(life_fd)
            fd = os.open("/dev/null", os.O_RDONLY)
            os.dup2(fd, 0)
            os.close(fd)
            if not ns:
                os.setsid()  # its own process group, so C can kill the group at the end
            os.chdir(workdir)
            if as_root:
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)  # all uids non-zero: the kernel clears every capability
                if os.getuid() == 0 or os.geteuid() == 0:
                    raise OSError("still root after setresuid")
            elif ns:  # ns-user: capset(v3, all three sets empty) -- drop the user-namespace capabilities
                libc("capset")((0x20080522).to_bytes(4, bo) + bytes(4), bytes(24))
            prctl(38, 1)  # PR_SET_NO_NEW_PRIVS: no setuid/file-capability gains through exec
            R = resource
            R.setrlimit(R.RLIMIT_CORE, (0, 0))
            R.setrlimit(R.RLIMIT_CPU, (cpu_s, cpu_s + 1))  # SIGXCPU at cpu_s, SIGKILL one second later
            R.setrlimit(R.RLIMIT_AS, (mem_b, mem_b))
            R.setrlimit(R.RLIMIT_FSIZE, (fsize_b, fsize_b))
            R.setrlimit(R.RLIMIT_NOFILE, (nofile, nofile))
            if nproc >= 0:  # -1: leave RLIMIT_NPROC alone (rlimit-user: it would count all our processes)
                R.setrlimit(R.RLIMIT_NPROC, (nproc, nproc))
            path = os.path.join(workdir, "main.py")
            with open(path, "wb") as f:
                f.write(code)
        except BaseException as e:
            say("setup D: %s: %s" % (type(e).__name__, e))
            os._exit(71)
        os.close(status_fd)
        return code, path, import_paths

    # C continues: wait for D (and, as init, reap orphans), or for the parent to drop the lifeline.
    # C writes nothing the model should see: its stdout/stderr go to /dev/null from here on.
    fd = os.open("/dev/null", os.O_WRONLY)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    def sweep():
        """Kill what D left behind. In the namespace modes C's own exit does it (the kernel kills the
        rest of the PID namespace); otherwise kill D's process group and, as root, every process of
        the throw-away uid (from a helper that takes that uid, so kill(-1) reaches only those)."""
        if ns:
            return
        try:
            os.killpg(d, 9)
        except OSError:
            pass
        if as_root:
            k = os.fork()
            if k == 0:
                try:
                    os.setgroups([])
                    os.setresgid(uid, uid, uid)
                    os.setresuid(uid, uid, uid)
                    for _ in range(1000):
                        os.kill(-1, 9)
                except BaseException:
                    pass
                os._exit(0)
            os.waitpid(k, 0)

    def watch_lifeline():  # a thread: the parent gave up on this run (timeout, output cap) or died
        while os.read(life_fd, 64):
            pass
        sweep()
        os._exit(0)

    _thread.start_new_thread(watch_lifeline, ())
    while True:  # reap everything that exits (D, and orphans reparented to us as init) until D does
        try:
            pid, st, ru = os.wait4(-1, 0)
        except ChildProcessError:  # cannot happen while D is unreaped
            os._exit(72)
        if pid == d:
            break
    sweep()
    say("exit %d %.4f %d" % (st, ru.ru_utime + ru.ru_stime, ru.ru_maxrss))
    os._exit(0)


def _run_main():
    import sys, os  # locals: the module globals are cleared below
    code, path, extra = _boot()  # only D gets here
    g = sys.modules["__main__"].__dict__
    for k in list(g):
        if k not in ("__name__", "__builtins__"):
            del g[k]
    g.update(__file__=path, __doc__=None, __package__=None, __spec__=None, __loader__=None,
             __cached__=None)
    sys.argv[:] = [path]
    sys.path[:0] = [os.path.dirname(path)] + extra

    def hook(t, v, tb, _orig=sys.__excepthook__):
        while tb is not None and tb.tb_frame.f_code.co_filename in ("<string>", "<rtpo-sandbox-boot>"):
            tb = tb.tb_next  # hide the bootstrap's own frames from the model
        if isinstance(v, BaseException):
            v.__traceback__ = tb  # 3.11's printer reads the traceback from the exception
        _orig(t, v, tb)

    sys.excepthook = hook
    exec(compile(code, path, "exec"), g)


_run_main()
'''


# --------------------------------------------------------------------------------------------------
# The parent side.

_probe_cache: dict[tuple[str, str], tuple] = {}
_probe_lock = threading.RLock()  # re-entered: the probe run compiles the bootstrap


def _tail_keep_error(prefix: str, error_text: str, limit: int) -> str:
    """`prefix` + `error_text`, at most `limit` characters: the error text's tail is kept whole
    first (it carries the exception), then as much of the prefix's head as fits."""
    error_text = error_text.strip("\n")
    if len(error_text) >= limit:
        return error_text[-limit:]
    if not prefix:
        return error_text
    room = limit - len(error_text) - 1
    if room <= 0:
        return error_text
    if len(prefix) > room:
        marker = "\n[...]"
        prefix = prefix[: max(0, room - len(marker))] + marker
    return prefix.rstrip("\n") + "\n" + error_text


class PythonSandbox:
    """Runs untrusted Python code in a contained child process; see the module docstring.

    wall_s:     wall-clock limit per call, seconds (the whole call, interpreter start included).
    cpu_s:      CPU-time limit of the code's main process, whole seconds (RLIMIT_CPU).
    mem_mb:     address-space limit per process, MiB (RLIMIT_AS); exceeding it raises MemoryError.
    max_output: characters of output the model sees; more output stops the program (output_limit).
    python:     the interpreter to run the code with (default: this one, `sys.executable`).

    Keyword-only:
    max_procs:     processes + threads the code may have at once (RLIMIT_NPROC; ignored in
                   "rlimit-user" mode where it would count all of the caller's processes).
    file_mb:       largest file the code may write, MiB (RLIMIT_FSIZE).
    tmp_mb:        size of the private /tmp (working directory included) in the namespace modes, MiB.
    isolation:     "auto" (namespaces when the kernel allows, else resource limits only, with a
                   warning), "namespaces" (error if unavailable) or "rlimits".
    site_packages: also let the code import the interpreter's site-packages (numpy, sympy, ...).
                   Off by default: `-S` keeps interpreter start ~3x cheaper.
    ro_paths:      extra host directories the code may read (namespace modes: bound read-only at the
                   same path; e.g. a data directory). In the rlimit modes everything is visible anyway.

    The first sandbox per (interpreter, isolation) runs one probe program (~50 ms) to choose the mode;
    `self.mode` says which was chosen, `self.warnings` what it could not do.
    Thread-safe: `run` may be called from several threads at once.
    """

    def __init__(self, wall_s: float = 5.0, cpu_s: int = 5, mem_mb: int = 512, max_output: int = 4000,
                 python: str | None = None, *, max_procs: int = 32, file_mb: int = 32, tmp_mb: int = 64,
                 isolation: str = "auto", site_packages: bool = False, ro_paths: Sequence[str] = ()):
        if not wall_s > 0:
            raise ValueError(f"PythonSandbox: wall_s must be > 0 seconds, got {wall_s!r}")
        if int(cpu_s) != cpu_s or cpu_s < 1:
            raise ValueError(f"PythonSandbox: cpu_s must be a whole number of seconds >= 1, got {cpu_s!r}")
        if mem_mb < 64:
            raise ValueError(f"PythonSandbox: mem_mb must be >= 64 (an interpreter needs ~30 MiB), got {mem_mb!r}")
        if max_output < 1:
            raise ValueError(f"PythonSandbox: max_output must be >= 1 character, got {max_output!r}")
        if max_procs < 1 or file_mb < 1 or tmp_mb < 1:
            raise ValueError(f"PythonSandbox: max_procs, file_mb and tmp_mb must be >= 1, got "
                             f"{max_procs!r}, {file_mb!r}, {tmp_mb!r}")
        if isolation not in ("auto", "namespaces", "rlimits"):
            raise ValueError(f"PythonSandbox: isolation must be 'auto', 'namespaces' or 'rlimits', got {isolation!r}")
        python = python or sys.executable
        if not (os.path.isfile(python) and os.access(python, os.X_OK)):
            raise ValueError(f"PythonSandbox: python interpreter {python!r} is not an executable file")
        self.wall_s = float(wall_s)
        self.cpu_s = int(cpu_s)
        self.mem_mb = int(mem_mb)
        self.max_output = int(max_output)
        self.python = python
        self.max_procs = int(max_procs)
        self.file_mb = int(file_mb)
        self.tmp_mb = int(tmp_mb)
        self.import_paths: tuple[str, ...] = _site_packages(python) if site_packages else ()
        self.ro_paths: tuple[str, ...] = tuple(os.path.realpath(p) for p in ro_paths)
        for p in self.ro_paths:
            if not os.path.isdir(p):
                raise ValueError(f"PythonSandbox: ro_paths entry {p!r} is not a directory")
        self.mode, self.warnings = self._choose_mode(isolation)

    # -- mode selection ---------------------------------------------------------------------------
    def _choose_mode(self, isolation: str) -> tuple[str, tuple[str, ...]]:
        """Pick the strongest mode that works here; every mode is probed once per interpreter."""
        root = os.geteuid() == 0
        ns_mode = "ns-root" if root else "ns-user"
        rl_mode = "rlimit-root" if root else "rlimit-user"
        if isolation != "rlimits":
            ok, notes = self._probe_cached(ns_mode)
            if ok:
                return ns_mode, notes
            if isolation == "namespaces":
                raise SandboxError(f"PythonSandbox: namespace isolation is not available here: {notes[0]}")
            warnings.warn(f"PythonSandbox: namespaces unavailable ({notes[0]}); falling back to "
                          f"'{rl_mode}' (resource limits only, see docs/security.md)", RuntimeWarning,
                          stacklevel=3)
        ok, notes = self._probe_cached(rl_mode)
        if not ok:
            hint = (f" The throw-away uid must be able to read the interpreter and its standard library; "
                    f"pass a world-readable one, e.g. python='/usr/bin/python3'.") if root else ""
            raise SandboxError(f"PythonSandbox: mode {rl_mode!r} does not work with {self.python!r}: "
                               f"{notes[0]}{hint}")
        return rl_mode, notes

    def _probe_cached(self, mode: str) -> tuple[bool, tuple[str, ...]]:
        key = (self.python, mode)
        with _probe_lock:
            if key not in _probe_cache:
                _probe_cache[key] = self._probe(mode)
            return _probe_cache[key]

    def _probe(self, mode: str) -> tuple[bool, tuple[str, ...]]:
        """Run one program that imports a stdlib module (so the interpreter's files must be visible)."""
        try:
            res, notes = self._execute("import json, sys\nsys.stdout.write(json.dumps('ok'))", mode)
        except SandboxError as e:
            return False, (str(e),)
        if not (res.ok and res.output == '"ok"'):
            return False, (f"probe program failed: {res.error}: {res.output[-300:]}",)
        return True, tuple(notes)

    # -- one call ---------------------------------------------------------------------------------
    def run(self, code: str) -> SandboxResult:
        """Run `code` as the `__main__` module of a fresh contained interpreter; never raises for
        anything the code does (SandboxError only if the sandbox itself cannot start)."""
        if not isinstance(code, str):
            raise TypeError(f"PythonSandbox.run: code must be str, got {type(code).__name__}")
        return self._execute(code, self.mode)[0]

    def _execute(self, code: str, mode: str) -> tuple[SandboxResult, list[str]]:
        t0 = time.monotonic()
        ns, as_root = mode.startswith("ns-"), mode.endswith("-root")
        uid = _UID_BASE + secrets.randbelow(_UID_SPAN) if as_root else os.geteuid()
        host_dir = None
        if ns:
            workdir = _NS_WORKDIR
        else:
            host_dir = tempfile.mkdtemp(prefix="rtpo-sandbox-")
            if as_root:
                os.chown(host_dir, uid, uid)
            workdir = host_dir
        env = dict(_CHILD_ENV_FIXED, HOME=workdir, TMPDIR="/tmp" if ns else workdir)
        status_r, status_w = os.pipe()
        life_r, life_w = os.pipe()
        # RLIMIT_NPROC counts per (user namespace, uid): in ns-user mode P and C count too; in
        # rlimit-user mode it would count every process of the caller, so it is not set (-1).
        nproc = {"ns-root": self.max_procs, "ns-user": self.max_procs + 2, "rlimit-root": self.max_procs,
                 "rlimit-user": -1}[mode]
        argv = [self.python, "-s", "-S", "-B", *_boot_args(self.python), mode, workdir, str(status_w), str(life_r),
                str(self.cpu_s), str(self.mem_mb << 20), str(nproc), str(self.file_mb << 20), "256",
                str(uid), str(self.tmp_mb), *self.import_paths, "--", *self.ro_paths]
        proc = None
        try:
            try:
                proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, env=env, cwd=workdir if not ns else "/",
                                        pass_fds=(status_w, life_r), start_new_session=True)
            except OSError as e:
                raise SandboxError(f"PythonSandbox: cannot start {self.python!r}: {e}") from e
            finally:
                os.close(status_w)
                os.close(life_r)
            io = _Pump(proc, code.encode("utf-8", "surrogatepass"), status_r,
                       out_cap=4 * self.max_output + 1024, err_keep=max(4 * self.max_output, 8192),
                       err_cap=max(1 << 20, 64 * self.max_output))
            killed = io.pump(deadline=t0 + self.wall_s)
            os.close(life_w)
            life_w = -1
            _reap(proc, io)
            status = io.status_lines()
        finally:
            if life_w >= 0:
                os.close(life_w)
            os.close(status_r)
            if proc is not None and proc.returncode is None:  # only on an exception above
                _hard_kill(proc)
            if host_dir is not None:
                shutil.rmtree(host_dir, onerror=_force_remove)
        wall = time.monotonic() - t0
        setup = [s[6:] for s in status if s.startswith("setup ")]
        notes = [s[5:] for s in status if s.startswith("warn ")]
        if setup and killed is None:
            raise SandboxError(f"PythonSandbox ({mode}): sandbox setup failed: {setup[0]}")
        if killed is None and proc.returncode > 0:  # P itself failed before it could report
            raise SandboxError(f"PythonSandbox ({mode}): the sandbox bootstrap failed (exit {proc.returncode}): "
                               f"{io.err_tail.decode('utf-8', 'replace')[-1000:]}")
        exit_line = next((s for s in status if s.startswith("exit ")), None)
        return self._classify(io, killed, exit_line, wall), notes

    def _classify(self, io: "_Pump", killed: str | None, exit_line: str | None, wall: float) -> SandboxResult:
        out = io.out.decode("utf-8", "replace")
        err = io.err_tail.decode("utf-8", "replace")
        if io.err_total > len(io.err_tail):
            err = "[...]\n" + err.split("\n", 1)[-1]
        cap = self.max_output

        def fail(error: str, text: str, prefix: str = out) -> SandboxResult:
            return SandboxResult(False, _tail_keep_error(prefix, text, cap), error, wall)

        if killed == "output_limit" or (killed is None and len(out) > cap):
            which = "stderr" if io.err_total > io.err_cap else "output"
            note = f"[{which} truncated: the program wrote more than the {cap}-character limit"
            note += " and was stopped]" if killed else "]"
            return fail("output_limit", note, out[:cap])
        if killed == "timeout":
            return fail("timeout", _join(err, f"TimeoutError: the program exceeded the {self.wall_s:g} s "
                                              f"wall-clock limit and was stopped"))
        if exit_line is None:  # C died without reporting: cannot happen short of a kernel-level kill
            return fail("signal:unknown", _join(err, "[the sandbox process was terminated unexpectedly]"))
        _, st, cpu, _maxrss = exit_line.split()
        st, cpu = int(st), float(cpu)
        low_mem = _mentions_memory(err)
        if os.WIFEXITED(st):
            rc = os.WEXITSTATUS(st)
            if rc == 0:
                return SandboxResult(True, out, None, wall)
            return fail("memory" if low_mem else f"exit:{rc}", err or f"[exit status {rc}]")
        sig = os.WTERMSIG(st) if os.WIFSIGNALED(st) else 0
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu >= self.cpu_s):
            return fail("cpu", _join(err, f"TimeoutError: the program exceeded the {self.cpu_s} s "
                                          f"CPU-time limit and was stopped"))
        name = _signal_name(sig)
        if low_mem:
            return fail("memory", _join(err, f"[killed by {name}]"))
        return fail(f"signal:{name}", _join(err, f"[killed by {name}]"))


def _mentions_memory(err: str) -> bool:
    """Whether the last lines of stderr report an allocation failure (MemoryError, ENOMEM, ...)."""
    last = [line for line in err.splitlines() if line.strip()][-3:]
    return any(m in line for line in last for m in ("MemoryError", "Cannot allocate memory", "out of memory"))


def _join(a: str, b: str) -> str:
    a = a.rstrip("\n")
    return f"{a}\n{b}" if a else b


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)


def _force_remove(func, path, _exc_info):
    """shutil.rmtree onerror: the code may have chmod-ed its files read-only; make them writable and retry."""
    try:
        os.chmod(os.path.dirname(path), 0o700)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, 0o700)
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except OSError:
        pass


class _Pump:
    """Feeds the code to the child's stdin and reads stdout/stderr/status with bounded memory."""

    def __init__(self, proc: subprocess.Popen, code: bytes, status_fd: int, *, out_cap: int, err_keep: int,
                 err_cap: int):
        self.proc, self.code, self.status_fd = proc, code, status_fd
        self.out_cap, self.err_keep, self.err_cap = out_cap, err_keep, err_cap
        self.out = bytearray()
        self.err_tail = bytearray()
        self.err_total = 0
        self.status = bytearray()

    def pump(self, deadline: float) -> str | None:
        """Run until the child side is done (-> None) or a limit is hit (-> "timeout" or
        "output_limit"; the caller then drops the lifeline). Never blocks past `deadline`.

        "Done" is: stdout and stderr at EOF, or the status pipe at EOF (C has exited) and P reaped.
        The second case matters only where an escaped process may still hold the pipes (rlimit
        modes); in the namespace modes P exits after the whole PID namespace is gone."""
        proc = self.proc
        fin, fout, ferr = proc.stdin.fileno(), proc.stdout.fileno(), proc.stderr.fileno()
        os.set_blocking(fin, False)
        poller = select.poll()
        readers = {fout: "out", ferr: "err", self.status_fd: "status"}
        for fd in readers:
            poller.register(fd, select.POLLIN)
        poller.register(fin, select.POLLOUT)
        pos = 0
        if not self.code:
            poller.unregister(fin)
            proc.stdin.close()
        try:
            while fout in readers or ferr in readers:
                left = deadline - time.monotonic()
                if left <= 0:
                    return "timeout"
                if self.status_fd not in readers and proc.poll() is not None:
                    for fd in (fout, ferr):  # what is already in the pipes, without waiting for EOF
                        if fd in readers:
                            os.set_blocking(fd, False)
                            try:
                                while fd in readers:
                                    if self._take(fd, readers, poller) is not None:
                                        return "output_limit"
                            except BlockingIOError:
                                pass
                    return None
                timeout_ms = max(1, int(left * 1000) + 1)
                if self.status_fd not in readers:
                    timeout_ms = min(timeout_ms, 50)  # C is gone: also watch for P's exit
                for fd, _ev in poller.poll(timeout_ms):
                    if fd == fin:
                        try:
                            pos += os.write(fin, self.code[pos:pos + (1 << 16)])
                        except BlockingIOError:
                            continue
                        except BrokenPipeError:
                            pos = len(self.code)
                        if pos >= len(self.code):
                            poller.unregister(fin)
                            proc.stdin.close()
                        continue
                    if self._take(fd, readers, poller) is not None:
                        return "output_limit"
            return None
        finally:
            if len(self.err_tail) > self.err_keep:
                del self.err_tail[:-self.err_keep]
            if not proc.stdin.closed:
                try:
                    proc.stdin.close()
                except OSError:
                    pass

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

    def drain_status(self) -> None:
        """Collect status lines still in the pipe (non-blocking; after the child side has gone)."""
        os.set_blocking(self.status_fd, False)
        try:
            while True:
                chunk = os.read(self.status_fd, 1 << 16)
                if not chunk:
                    return
                self.status += chunk
        except BlockingIOError:
            return


def _reap(proc: subprocess.Popen, io: _Pump) -> None:
    """Wait for P (which exits only after C, i.e. after the whole PID namespace is gone); escalate to
    SIGKILL of P's process group if it does not go within 2 s (C holds that group too)."""
    try:
        proc.wait(timeout=2.0)
    except subprocess.TimeoutExpired:
        _hard_kill(proc)
    io.drain_status()
    for f in (proc.stdout, proc.stderr):
        f.close()


def _hard_kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # P is unreaped, so its pgid cannot have been reused
    except OSError:
        pass
    proc.wait()


_boot_cache: dict[str, list[str]] = {}


def _boot_args(python: str) -> list[str]:
    """How to hand `_BOOT` to `python`: ["<dir>/boot-N.pyc"], compiled once per interpreter and
    process (compiling the bootstrap on every call would cost ~10 ms of CPU), else ["-c", source].

    The .pyc lives in a fresh 0700 directory of this process (removed at exit), so nobody else can
    swap it for code that would then run with our privileges. If something deleted it (a /tmp
    cleaner), it is rebuilt."""
    args = _boot_cache.get(python)
    if args is not None and (args[0] == "-c" or os.path.exists(args[0])):
        return args
    with _probe_lock:
        args = ["-c", _BOOT.replace("_BOOT_DIR", "None")]
        try:
            d = _boot_dir()
            src = os.path.join(d, "boot.py")
            dst = os.path.join(d, f"boot-{secrets.token_hex(4)}.pyc")
            with open(src, "w") as f:
                f.write(_BOOT.replace("_BOOT_DIR", repr(d)))
            subprocess.run([python, "-s", "-S", "-c", "import py_compile, sys; py_compile.compile("
                            "sys.argv[1], cfile=sys.argv[2], dfile='<rtpo-sandbox-boot>', doraise=True)",
                            src, dst], check=True, capture_output=True, timeout=60, env=dict(_CHILD_ENV_FIXED))
            args = [dst]
        except (OSError, subprocess.SubprocessError) as e:
            warnings.warn(f"PythonSandbox: cannot precompile the bootstrap for {python!r} ({e}); "
                          f"compiling it on every call instead", RuntimeWarning, stacklevel=4)
        _boot_cache[python] = args
        return args


_boot_dir_path: list[str] = []


def _boot_dir() -> str:
    """This process's private directory for compiled bootstraps (0700; removed at exit)."""
    if not (_boot_dir_path and os.path.isdir(_boot_dir_path[0])):
        d = tempfile.mkdtemp(prefix="rtpo-sandbox-boot-")
        owner = os.getpid()
        # a forked child of this process exiting normally must not delete the parent's directory
        atexit.register(lambda: os.getpid() == owner and shutil.rmtree(d, True))
        _boot_dir_path[:] = [d]
    return _boot_dir_path[0]


_site_cache: dict[str, tuple[str, ...]] = {}


def _site_packages(python: str) -> tuple[str, ...]:
    """The site-packages directories of `python` (asked once per interpreter; cached)."""
    with _probe_lock:
        if python not in _site_cache:
            out = subprocess.run([python, "-s", "-c", "import site; print('\\n'.join(site.getsitepackages()))"],
                                 capture_output=True, text=True, timeout=60, env=dict(_CHILD_ENV_FIXED))
            if out.returncode != 0:
                raise SandboxError(f"PythonSandbox: cannot list site-packages of {python!r}: {out.stderr[-500:]}")
            _site_cache[python] = tuple(p for p in out.stdout.split("\n") if p and os.path.isdir(p))
        return _site_cache[python]


def _bench(n: int, python: str | None) -> None:
    """Per-call wall time of `print(1+1)`: the overhead the math env pays per tool call."""
    sb = PythonSandbox(python=python)
    print(f"mode: {sb.mode}  interpreter: {sb.python}")
    for _ in range(3):
        sb.run("print(1+1)")
    times = []
    for _ in range(n):
        r = sb.run("print(1+1)")
        assert r.ok and r.output == "2\n", r
        times.append(r.wall_s)
    times.sort()
    print(f"print(1+1) x{n}: mean {1000 * sum(times) / n:.1f} ms, median {1000 * times[n // 2]:.1f} ms, "
          f"p90 {1000 * times[int(0.9 * n)]:.1f} ms, min {1000 * times[0]:.1f} ms")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rtpo.tools.python_sandbox",
                                 description="Run Python code in the sandbox, or measure its per-call overhead.")
    ap.add_argument("code", nargs="?", help="code to run (default: read stdin)")
    ap.add_argument("--bench", type=int, metavar="N", help="time N runs of print(1+1) and exit")
    ap.add_argument("--python", help="interpreter for the child (default: this one)")
    ap.add_argument("--wall-s", type=float, default=5.0)
    args = ap.parse_args(argv)
    if args.bench:
        _bench(args.bench, args.python)
        return 0
    code = args.code if args.code is not None else sys.stdin.read()
    r = PythonSandbox(wall_s=args.wall_s, python=args.python).run(code)
    sys.stdout.write(r.output)
    print(f"\n[ok={r.ok} error={r.error} wall_s={r.wall_s:.3f}]", file=sys.stderr)
    return 0 if r.ok else 1


if __name__ == "__main__":
    sys.exit(main())
