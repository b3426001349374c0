"""The `python` tool of the math environment: run model-written code in a contained child process.

The math task (paper Sec. 5, "math reasoning with a Python interpreter") lets the policy call a
Python tool; every call runs code we did not write, thousands of times per RL step. This module is
the containment. `PythonSandbox(...).run(code)` runs `code` in a fresh, contained copy of a freshly
started interpreter and returns a `SandboxResult` whose `output` is what the model sees.

Per call, the child gets
- time limits that do not depend on the machine's load: CPU time per process (`cpu_s`, RLIMIT_CPU),
  which is what normally stops a runaway program; wall-clock time not counting the time spent
  waiting for a CPU (`wall_s`, for programs that sleep or block); CPU time of all its processes
  together (`total_cpu_s`, namespace modes); and a plain wall-clock backstop for the whole call
  (`max_wall_s`, enforced by the parent). Also an address-space limit (`mem_mb`, RLIMIT_AS), a
  process/thread limit (RLIMIT_NPROC), a file-size limit (RLIMIT_FSIZE), an open-file limit
  (RLIMIT_NOFILE) and no core dumps;
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

Process layout (see `_BOOT`). Per call there is a chain P -> C -> D: `P` enters the new namespaces and
forks `C`, the init of the new PID namespace and the supervisor; `C` builds the filesystem view and
forks `D`, which drops privileges, sets the limits and executes the model's code as `__main__`. The
parent kills a run by closing a "lifeline" pipe that `C` watches (C then exits and the kernel kills
the rest of the namespace; P kills C if it has not gone 2 s later), so the parent never signals a
pid it does not own. P holds the call's status pipe until C is reaped: its EOF means the call is over.

Where P comes from: by default from a fork server (`_zygote` in `_BOOT`), one per parent process and
interpreter, started lazily with `python -s -S -B <compiled _BOOT> zygote`, a scrubbed environment and
nothing imported beyond the bootstrap's C modules. For each call the parent sends it the call's five
pipe ends over a socketpair (SCM_RIGHTS) and it forks P; the code, its parameters and its output
travel on those pipes between the parent and P, never through the server, which runs no model code
and holds nothing of any call. Each call therefore starts from the same state: a copy of the server
just after its start-up. The fallback (`fork_server=False`, or where the server cannot run) starts P
as a new interpreter per call, as before (~2x the CPU time per call).

Per-call cost: `python -m rtpo.tools.python_sandbox --bench 50 [--vs OLD_CHECKOUT] [--threads 1,4]`,
by phase `--phases 50` (numbers in docs/security.md).
"""

from __future__ import annotations

import argparse
import array
import atexit
import os
import re
import resource
import secrets
import select
import shutil
import signal
import socket
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
    error:  None | "timeout" (wall clock: wall_s or max_wall_s) | "cpu" (cpu_s or total_cpu_s) |
            "memory" | "output_limit" | "exit:<code>" | "signal:<name>" (e.g. "signal:SIGSEGV").
            The output's last line names the limit: "TimeoutError: the program exceeded the 5 s
            CPU-time limit and was stopped", "... the 10 s wall-clock limit ...", "TimeoutError: the
            program's processes exceeded the 10 s total CPU-time limit and were stopped".
    wall_s: seconds the call took, start of the child to cleanup done.
    """

    ok: bool
    output: str
    error: str | None
    wall_s: float


# --------------------------------------------------------------------------------------------------
# The child side. Runs as `python -s -S -B boot.pyc ...` (see `_boot_args`) with only what the
# interpreter preloads plus a few C extension modules (each `import` here costs every fresh
# interpreter: `ctypes` the package costs ~7 ms, so the raw `_ctypes` is used; `signal` pulls in
# `enum`, so `_signal` is used).
#   argv "zygote <socket fd>": the fork server (`_zygote`); each forked child is one call's P.
#   argv "<status fd> <lifeline fd>": one call's P directly (the per-call-interpreter fallback).
# stdin of P: "<n>\n", n bytes of NUL-separated parameters (mode workdir cpu_s mem_bytes nproc
#   fsize_bytes nofile uid tmp_mb wall_s total_cpu_s HOME TMPDIR [import paths...] -- [read-only
#   paths...]), then the model's code; read fully by P before anything else.
# Status pipe lines (to the parent): "start" (P exists), "warn <text>", "setup <error text>",
# "timeout wall|cpu <value>" (C stopped the run at a limit of its own),
# "exit <wait status> <cpu seconds> <maxrss KiB>" (C, when D is gone). P holds the status pipe until
# C is reaped, so its EOF tells the parent that every process of the call is gone (namespace modes).
# `#@phase NAME` comments mark the points `--phases` times (they are comments otherwise).
_BOOT = r'''# rtpo-python-sandbox-boot
import sys
if sys.path and sys.path[0] in ("", _BOOT_DIR):
    del sys.path[0]  # never import from the (untrusted) cwd or the boot file's directory while privileged
import os
import _ctypes, _signal, _thread, resource, select, time  # C modules (os.wait4 needs resource anyway)


def _zygote(sock_fd):
    """The fork server: forks one P per call and returns only in that child.

    It serves one parent process over a SOCK_SEQPACKET socketpair: each message is b"run" plus five
    file descriptors (SCM_RIGHTS): the call's stdin, stdout, stderr, status pipe and lifeline. The
    server forks, closes its copies and waits for the next message; the child returns from here as
    P with those five on fds 0-4 and no other descriptor (the socket is closed first, so nothing
    of the call can ever talk to the server). The server never reads a call's code, parameters or
    output (they travel on the pipes, between the parent and P), so its memory holds nothing of
    any call; it imports nothing but _socket beyond the bootstrap's modules and starts no thread
    (a fork copies only the calling thread, and no lock can be held by another). It exits when the
    parent's end of the socket closes (the parent exited, crashed or was killed), after reaping its
    children, whose CPU time is thereby accounted to it and on to the parent."""
    import _socket, gc
    sock = _socket.socket(fileno=sock_fd)
    anc = _socket.CMSG_SPACE(4 * 5)
    # Every object so far (the bootstrap's) goes to the permanent generation: a child's garbage
    # collections then skip them instead of writing to each one's header, which would copy every
    # page of the server's heap into every call (measured: ~1.5 ms of CPU per call).
    gc.freeze()

    def reap(flags):
        while True:
            try:
                if os.waitpid(-1, flags)[0] == 0:
                    return
            except ChildProcessError:
                return

    while True:
        try:
            msg, ancdata, flags, _ = sock.recvmsg(16, anc, _socket.MSG_CMSG_CLOEXEC)
        except OSError:
            msg, ancdata, flags = b"", [], 0
        fds = []
        for level, kind, data in ancdata:
            if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
                fds += [int.from_bytes(data[i:i + 4], sys.byteorder, signed=True)
                        for i in range(0, len(data) - 3, 4)]
        if not msg and not fds:  # EOF: the parent is gone; in-flight calls end on their lifelines
            reap(0)
            os._exit(0)
        if msg == b"cpu" and len(fds) == 1:  # (benchmarks) CPU time of the server and its reaped children
            reap(os.WNOHANG)
            us, uc = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
            try:
                os.write(fds[0], b"%.6f" % (us.ru_utime + us.ru_stime + uc.ru_utime + uc.ru_stime))
            except OSError:
                pass
        pid = -1
        if msg == b"run" and len(fds) == 5 and not flags & _socket.MSG_CTRUNC:
            try:
                pid = os.fork()
            except OSError as e:
                try:
                    os.write(fds[3], ("setup zygote: fork: %s\n" % e).encode())
                except OSError:
                    pass
        if pid == 0:
            break
        for fd in fds:
            os.close(fd)
        reap(os.WNOHANG)
    #@phase Z_forked
    sock.close()
    hi = max(fds) + 1  # above every received fd, so no dup2 below clobbers one not yet moved
    for k, fd in enumerate(fds):
        os.dup2(fd, hi + k)
        os.close(fd)
    for k in range(5):
        os.dup2(hi + k, k)  # (inheritable: the code's subprocesses get stdin/stdout/stderr)
    os.closerange(5, max(hi + 5, resource.getrlimit(resource.RLIMIT_NOFILE)[0]))
    del sys.modules["_socket"], sys.modules["gc"]  # sys.modules as in a fresh bootstrap
    os.setsid()  # like the fallback's start_new_session: P leads its own session and group
    return 3, 4


def _boot(status_fd, life_fd):
    def say(msg):
        try:
            os.write(status_fd, (msg.replace("\n", " ") + "\n").encode("utf-8", "replace"))
        except OSError:
            pass

    say("start")
    #@phase P_start

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
        data = b"".join(chunks)
        n, _, data = data.partition(b"\n")
        a, code = data[:int(n)].decode("utf-8", "surrogateescape").split("\0"), data[int(n):]
        mode, workdir = a[0], a[1]
        cpu_s, mem_b, nproc, fsize_b, nofile, uid, tmp_mb = map(int, a[2:9])
        wall_s, total_cpu_s = float(a[9]), float(a[10])
        os.environ["HOME"], os.environ["TMPDIR"] = a[11], a[12]
        sep = a.index("--", 13)
        import_paths, ro_paths = a[13:sep], a[sep + 1:]  # sys.path additions; extra read-only binds
        ns, as_root = mode.startswith("ns-"), mode.endswith("-root")
        os.chdir("/" if ns else workdir)
        #@phase P_read
        if ns:
            euid, egid = os.geteuid(), os.getegid()
            # NEWNS | NEWPID | NEWNET | NEWIPC | NEWUTS (+ NEWUSER when not root)
            flags = 0x00020000 | 0x20000000 | 0x40000000 | 0x08000000 | 0x04000000
            if not as_root:
                flags |= 0x10000000
            libc("unshare")(flags)
            #@phase P_unshare
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
        # P keeps the status pipe until C is reaped: its EOF tells the parent the call is over (in the
        # namespace modes C's reaping comes after the last process of its PID namespace is gone).
        # If C has not gone 2 s after the parent dropped the lifeline, P kills it (through a pidfd:
        # never a recycled pid); in the namespace modes that kills everything left in the call.
        # (No thread here: after unshare(CLONE_NEWPID) the kernel refuses to create one.)
        try:
            pidfd = os.pidfd_open(c)
            waiter = select.poll()
            waiter.register(pidfd, select.POLLIN)
            waiter.register(life_fd, select.POLLIN)
            while True:
                ready = dict(waiter.poll())
                if pidfd in ready:
                    break
                if life_fd in ready and not os.read(life_fd, 64):
                    waiter.unregister(life_fd)
                    if not waiter.poll(2000):
                        _signal.pidfd_send_signal(pidfd, 9)
                    break
        except (AttributeError, OSError):  # no pidfd (Linux < 5.3): just wait
            pass
        try:
            os.waitpid(c, 0)
        except ChildProcessError:
            pass
        #@phase P_reaped
        os._exit(0)

    # -- C: init of the PID namespace; build the view, fork D, supervise ----------------------
    try:
        os.umask(0o022)
        prctl(4, 0)  # PR_SET_DUMPABLE 0: D cannot ptrace C or open /proc/1/fd
        #@phase C_start
        for s in (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP, _signal.SIGPIPE):
            _signal.signal(s, _signal.SIG_IGN)
        if ns:
            build_root()
        #@phase C_root
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
            #@phase D_ready
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

    def run_delay():
        """Seconds D's main thread has waited for a CPU (runnable, not running); 0 if unknown."""
        try:
            with open("/proc/%d/schedstat" % d, "rb") as f:
                return int(f.read().split()[1]) / 1e9
        except (OSError, ValueError, IndexError):
            return 0.0

    hz = os.sysconf("SC_CLK_TCK")

    def call_cpu():
        """CPU seconds of every process of the call so far (namespace modes: everything in this PID
        namespace but C, each with its reaped children; plus the orphans C has reaped)."""
        ticks = 0
        for p in os.listdir("/proc"):
            if p.isdigit() and p != "1":
                try:
                    with open("/proc/%s/stat" % p, "rb") as f:
                        st = f.read().rsplit(b")", 1)[1].split()
                    ticks += int(st[11]) + int(st[12]) + int(st[13]) + int(st[14])
                except (OSError, ValueError, IndexError):
                    pass
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        return ticks / hz + ru.ru_utime + ru.ru_stime

    def watch():
        """A thread. Ends the run (C exits) when the parent drops the lifeline (its deadline, the
        output cap, or it died), or when a limit that does not depend on the machine's load is hit:
        - wall_s of D's active time: wall-clock time minus the time D waited for a CPU, so a
          program that sleeps or blocks stops at the same point however loaded the machine is;
        - total_cpu_s of CPU time of all the call's processes (namespace modes), which stops
          process bombs that RLIMIT_CPU, counted per process, does not."""
        waiter = select.poll()
        waiter.register(life_fd, select.POLLIN)
        t0, q0 = time.monotonic(), run_delay()
        while True:
            now = time.monotonic()
            active = now - t0 - (run_delay() - q0)
            if active >= wall_s:
                say("timeout wall %.3f" % active)
                break
            step = wall_s - active
            if ns and now - t0 >= 0.2:
                used = call_cpu()
                if used >= total_cpu_s:
                    say("timeout cpu %.3f" % used)
                    break
            if ns:
                step = min(step, 0.2)
            if waiter.poll(max(1, int(step * 1000) + 1)) and not os.read(life_fd, 64):
                break
        sweep()
        os._exit(0)

    _thread.start_new_thread(watch, ())
    while True:  # reap everything that exits (D, and orphans reparented to us as init) until D does
        try:
            pid, st, ru = os.wait4(-1, 0)
        except ChildProcessError:  # cannot happen while D is unreaped
            os._exit(72)
        if pid == d:
            break
    #@phase C_reaped
    sweep()
    say("exit %d %.4f %d" % (st, ru.ru_utime + ru.ru_stime, ru.ru_maxrss))
    os._exit(0)


def _run_main():
    import sys, os  # locals: the module globals are cleared below
    if sys.argv[1:2] == ["zygote"]:
        fds = _zygote(int(sys.argv[2]))  # returns in each forked child (P of one call)
    else:
        fds = int(sys.argv[1]), int(sys.argv[2])
    code, path, extra = _boot(*fds)  # only D gets here
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

_probe_cache: dict[tuple[str, str, bool], tuple] = {}
_probe_lock = threading.RLock()  # re-entered: the probe run compiles the bootstrap

# Which limit stops what (issue 18: a program's outcome must not depend on the machine's load).
# - cpu_s (RLIMIT_CPU, per process): an endless loop, at cpu_s of CPU time however loaded the
#   machine is. This is the limit that decides normal timeouts.
# - wall_s (C, D's active time: wall clock minus the time D waited for a CPU): a program that sleeps
#   or blocks. Active time >= D's CPU time, and the default is >= cpu_s + 2, so a CPU-bound program
#   always meets RLIMIT_CPU (and its SIGKILL one second later) first.
# - total_cpu_s (C, all the call's processes; namespace modes): fork and process bombs.
# - max_wall_s (the parent, plain wall clock, start-up included): the backstop if all else fails
#   (e.g. a machine so loaded that the program gets < 1/8 of a core). The only load-dependent one.
def default_wall_s(cpu_s: float) -> float:
    return float(max(2 * cpu_s, cpu_s + 2))


default_total_cpu_s = default_wall_s
MAX_WALL_PER_WALL = 4.0
_EXIT_GRACE_S = 5.0  # after the lifeline is dropped: P kills C after 2 s, so this is never reached


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

    cpu_s:      CPU-time limit of each of the code's processes, whole seconds (RLIMIT_CPU; all of a
                process's threads together). This is the limit that normally stops a runaway
                program, and CPU time does not depend on how loaded the machine is (error "cpu").
    wall_s:     limit on the code's wall-clock time, not counting the time its main process waited
                for a CPU (so it does not depend on the load either), seconds; default
                max(2*cpu_s, cpu_s+2). It stops programs that sleep or block (error "timeout").
    mem_mb:     address-space limit per process, MiB (RLIMIT_AS); exceeding it raises MemoryError.
    max_output: characters of output the model sees; more output stops the program (output_limit).
    python:     the interpreter to run the code with (default: this one, `sys.executable`).

    Keyword-only:
    total_cpu_s:   CPU time of all the code's processes together, seconds (namespace modes; default
                   max(2*cpu_s, cpu_s+2); error "cpu"): stops fork and process bombs.
    max_wall_s:    plain wall-clock limit of the whole call, start-up included, enforced by the parent
                   (default 4*wall_s): a backstop that only a machine so loaded that the code gets
                   less than ~1/8 of a core, or a wedged sandbox, reaches (error "timeout").
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
    fork_server:   fork each call from this process's fork server for `python` (default; one
                   freshly started interpreter per parent process and interpreter, see `_zygote`)
                   instead of starting a new interpreter per call. Falls back to the latter, with a
                   warning, where the fork server cannot run. `self.fork_server` says which is used.

    The first sandbox per (interpreter, isolation) runs one probe program to choose the mode;
    `self.mode` says which was chosen, `self.warnings` what it could not do.
    Thread-safe: `run` may be called from several threads at once.
    """

    def __init__(self, wall_s: float | None = None, cpu_s: int = 5, mem_mb: int = 512, max_output: int = 4000,
                 python: str | None = None, *, total_cpu_s: float | None = None, max_wall_s: float | None = None,
                 max_procs: int = 32, file_mb: int = 32, tmp_mb: int = 64, isolation: str = "auto",
                 site_packages: bool = False, ro_paths: Sequence[str] = (), fork_server: bool = True):
        if isinstance(cpu_s, bool) or not isinstance(cpu_s, (int, float)) or int(cpu_s) != cpu_s or cpu_s < 1:
            raise ValueError(f"PythonSandbox: cpu_s must be a whole number of seconds >= 1, got {cpu_s!r}")
        wall_s = default_wall_s(cpu_s) if wall_s is None else wall_s
        total_cpu_s = default_total_cpu_s(cpu_s) if total_cpu_s is None else total_cpu_s
        if not wall_s > 0:
            raise ValueError(f"PythonSandbox: wall_s must be > 0 seconds, got {wall_s!r}")
        if not total_cpu_s > 0:
            raise ValueError(f"PythonSandbox: total_cpu_s must be > 0 seconds, got {total_cpu_s!r}")
        max_wall_s = MAX_WALL_PER_WALL * wall_s if max_wall_s is None else max_wall_s
        if not max_wall_s >= wall_s:
            raise ValueError(f"PythonSandbox: max_wall_s must be >= wall_s ({wall_s!r}), got {max_wall_s!r}")
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
        self.total_cpu_s = float(total_cpu_s)
        self.max_wall_s = float(max_wall_s)
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
        self.fork_server = bool(fork_server)
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
        """Probe `mode` (once per interpreter): through the fork server if asked for, else (or if
        the fork server fails where a per-call interpreter works) with one interpreter per call."""
        with _probe_lock:
            if self.fork_server:
                key = (self.python, mode, True)
                if key not in _probe_cache:
                    _probe_cache[key] = self._probe(mode, True)
                ok, notes = _probe_cache[key]
                if ok:
                    return ok, notes
                ok2, notes2 = self._probe_cached_direct(mode)
                if not ok2:
                    return ok2, notes2
                if (self.python, mode, "warned") not in _probe_cache:
                    _probe_cache[(self.python, mode, "warned")] = True
                    warnings.warn(f"PythonSandbox: the fork server does not work here ({notes[0]}); "
                                  f"starting one interpreter per call instead", RuntimeWarning, stacklevel=4)
                self.fork_server = False
                return ok2, notes2
            return self._probe_cached_direct(mode)

    def _probe_cached_direct(self, mode: str) -> tuple[bool, tuple[str, ...]]:
        key = (self.python, mode, False)
        if key not in _probe_cache:
            _probe_cache[key] = self._probe(mode, False)
        return _probe_cache[key]

    def _probe(self, mode: str, fork_server: bool) -> tuple[bool, tuple[str, ...]]:
        """Run one program that imports a stdlib module (so the interpreter's files must be visible)."""
        try:
            res, notes = self._execute("import json, sys\nsys.stdout.write(json.dumps('ok'))", mode, fork_server)
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
        return self._execute(code, self.mode, self.fork_server)[0]

    def _execute(self, code: str, mode: str, fork_server: bool) -> tuple[SandboxResult, list[str]]:
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
        home, tmpdir = workdir, "/tmp" if ns else workdir
        # RLIMIT_NPROC counts per (user namespace, uid): in ns-user mode P and C count too; in
        # rlimit-user mode it would count every process of the caller, so it is not set (-1).
        nproc = {"ns-root": self.max_procs, "ns-user": self.max_procs + 2, "rlimit-root": self.max_procs,
                 "rlimit-user": -1}[mode]
        params = [mode, workdir, str(self.cpu_s), str(self.mem_mb << 20), str(nproc), str(self.file_mb << 20),
                  "256", str(uid), str(self.tmp_mb), repr(self.wall_s), repr(self.total_cpu_s), home, tmpdir,
                  *self.import_paths, "--", *self.ro_paths]
        head = "\0".join(params).encode("utf-8", "surrogateescape")
        payload = b"%d\n" % len(head) + head + code.encode("utf-8", "surrogatepass")
        env = dict(_CHILD_ENV_FIXED, HOME=home, TMPDIR=tmpdir)
        try:
            for attempt in range(2):
                t0 = time.monotonic()
                call = _start_call(self.python, fork_server, env, "/" if ns else workdir)
                try:
                    io = _Pump(call, payload, out_cap=4 * self.max_output + 1024,
                               err_keep=max(4 * self.max_output, 8192), err_cap=max(1 << 20, 64 * self.max_output))
                    killed = io.pump(deadline=t0 + self.max_wall_s)
                    call.drop_lifeline()  # C exits on its EOF (a no-op if the call is over)
                    gone = io.finish(0.2)
                    if not gone and (call.server is None or "start" in io.status_lines()):
                        gone = io.finish(_EXIT_GRACE_S)  # P exists: wait for it (not if never forked)
                    status = io.status_lines()
                    if call.server is not None and "start" not in status and not any(
                            s.startswith("setup ") for s in status):
                        # The fork server died or hung before it forked this call (so the code never
                        # ran): replace it and run the call once more.
                        why = f"it did not fork a call ({killed or 'its pipes closed'})"
                        call.server.restart(call.generation, why)
                        if attempt == 0:
                            continue
                        raise SandboxError(f"PythonSandbox ({mode}): the fork server for {self.python!r} "
                                           f"does not fork calls: {call.server.last_death}")
                    if not gone:
                        call.give_up()
                finally:
                    call.close()
                break
        finally:
            if host_dir is not None:
                shutil.rmtree(host_dir, onerror=_force_remove)
        wall = time.monotonic() - t0
        setup = [s[6:] for s in status if s.startswith("setup ")]
        notes = [s[5:] for s in status if s.startswith("warn ")]
        if setup and killed is None:
            raise SandboxError(f"PythonSandbox ({mode}): sandbox setup failed: {setup[0]}")
        if killed is None and call.proc is not None and call.proc.returncode and call.proc.returncode > 0:
            # P itself failed before it could report (e.g. the bootstrap does not run with this python)
            raise SandboxError(f"PythonSandbox ({mode}): the sandbox bootstrap failed (exit {call.proc.returncode}): "
                               f"{io.err_tail.decode('utf-8', 'replace')[-1000:]}")
        exit_at = next((i for i, s in enumerate(status) if s.startswith("exit ")), None)
        stop_at = next((i for i, s in enumerate(status) if s.startswith("timeout ")), None)
        if stop_at is not None and exit_at is not None and stop_at < exit_at:
            exit_at = None  # C stopped the run first (in the rlimit modes its sweep is what kills D)
        elif exit_at is not None:
            stop_at = None  # D ended by itself first
        exit_line = status[exit_at] if exit_at is not None else None
        stopped = status[stop_at] if stop_at is not None else None
        return self._classify(io, killed, exit_line, stopped, wall), notes

    def _classify(self, io: "_Pump", killed: str | None, exit_line: str | None, stopped: str | None,
                  wall: float) -> SandboxResult:
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
        if exit_line is None and stopped is not None:  # C's limits: the code had not ended by itself
            if stopped.startswith("timeout wall"):
                return fail("timeout", _join(err, f"TimeoutError: the program exceeded the {self.wall_s:g} s "
                                                  f"wall-clock limit and was stopped"))
            return fail("cpu", _join(err, f"TimeoutError: the program's processes exceeded the "
                                          f"{self.total_cpu_s:g} s total CPU-time limit and were stopped"))
        if killed == "timeout":
            return fail("timeout", _join(err, f"TimeoutError: the program exceeded the {self.max_wall_s:g} s "
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


# --------------------------------------------------------------------------------------------------
# Starting one call: its pipes, and P from the fork server or from a fresh interpreter.

class _Call:
    """The parent's ends of one call's pipes (stdin, stdout, stderr, status, lifeline) and how its
    P was started: `server` (forked by the fork server) or `proc` (a per-call interpreter)."""

    def __init__(self, fds: list[int], proc: subprocess.Popen | None, server: "_ForkServer | None",
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
                          f"{_EXIT_GRACE_S:g} s of being stopped; left to finish on its own", RuntimeWarning)

    def close(self) -> None:
        self.drop_lifeline()
        for name in ("stdin", "stdout", "stderr", "status"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)
        if self.proc is not None and self.proc.returncode is None:
            try:
                self.proc.wait(timeout=_EXIT_GRACE_S)  # P has closed the status pipe: it is exiting
            except subprocess.TimeoutExpired:
                _hard_kill(self.proc)


def _start_call(python: str, fork_server: bool, env: dict, cwd: str) -> _Call:
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
    return _Call(mine, proc, server, generation)


class _ForkServer:
    """The parent's handle on one fork server (`_zygote` in the bootstrap) for one interpreter.

    Started lazily by the first call; restarted if it has died (a call in flight is retried, see
    `_execute`); it exits by itself when this process's end of the socket closes: at exit (atexit
    closes it and waits), or when this process dies in any way (the kernel closes it). Sending is
    serialized by a lock; a SOCK_SEQPACKET message is atomic, so threads never interleave."""

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
        boot = _boot_args(self.python)  # before self.lock: _boot_args may take _probe_lock, which a
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
                pass_fds=(theirs.fileno(),), env=dict(_CHILD_ENV_FIXED, HOME=_NS_WORKDIR, TMPDIR="/tmp"),
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


_servers: dict[str, _ForkServer] = {}
_servers_lock = threading.Lock()
_abandoned: list[subprocess.Popen] = []


def _fork_server(python: str) -> _ForkServer:
    with _servers_lock:
        srv = _servers.get(python)
        if srv is None:
            srv = _servers[python] = _ForkServer(python)
        return srv


def _close_fork_servers() -> None:
    with _servers_lock:
        servers = list(_servers.values())
        _servers.clear()
    for srv in servers:
        srv.close()


def _after_fork_in_child() -> None:
    """A fork of this process (multiprocessing, ...) starts its own fork servers if it runs code."""
    global _servers_lock
    _servers_lock = threading.Lock()  # another thread may have held it at the fork
    for srv in _servers.values():
        srv.abandon()
    _servers.clear()


atexit.register(_close_fork_servers)
os.register_at_fork(after_in_child=_after_fork_in_child)


class _Pump:
    """Feeds stdin and reads stdout/stderr/status of one call with bounded memory."""

    def __init__(self, call: _Call, payload: bytes, *, out_cap: int, err_keep: int, err_cap: int):
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


BENCH_PROGRAMS = {"print(1+1)": "print(1+1)", "math tool call": "print((8839 - 4578) * 435)"}


def _load_other(tree: str):
    """This module as committed in another checkout (e.g. a git worktree of an older commit)."""
    import importlib.util
    path = os.path.join(tree, "rtpo", "tools", "python_sandbox.py")
    spec = importlib.util.spec_from_file_location("_rtpo_python_sandbox_vs", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _bench_batch(sb, code: str, n: int, threads: int) -> tuple[list[float], float]:
    """n calls of `code` (on `threads` threads): per-call wall seconds, and the CPU seconds per call
    of everything the calls cost: this process (all threads) and the sandbox processes (reaped by
    this process, or by the fork server: its own CPU time and its children's). Not counted: the
    kernel's threads that free network namespaces (~0.3 ms per call, the same for both)."""
    srv = _servers.get(sb.python) if getattr(sb, "fork_server", False) else None

    def cpu() -> float:
        a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime + (srv.cpu() if srv else 0.0)

    walls: list[float] = []
    results: list = []
    lock = threading.Lock()

    def work(k: int) -> None:
        for _ in range(k):
            t = time.monotonic()
            r = sb.run(code)
            dt = time.monotonic() - t
            with lock:
                walls.append(dt)
                results.append(r)

    c0 = cpu()
    if threads == 1:
        work(n)
    else:
        ts = [threading.Thread(target=work, args=(n // threads + (i < n % threads),)) for i in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    c1 = cpu()
    bad = [r for r in results if not r.ok]
    if bad:
        raise SystemExit(f"bench: a call failed: {bad[0]}")
    return walls, (c1 - c0) / n


def _bench(n: int, python: str | None, vs: str | None, threads: list[int], batch: int = 10) -> None:
    """Per-call wall and CPU time of typical calls, this code against `vs` (another checkout), run
    side by side: batches of `batch` calls, alternating old/new (and which goes first)."""
    variants = [("new", PythonSandbox(wall_s=20, cpu_s=5, python=python))]
    if vs:
        variants.append(("old", _load_other(vs).PythonSandbox(wall_s=20, cpu_s=5, python=python)))
    new = variants[0][1]
    print(f"mode: {new.mode}  fork server: {new.fork_server}  interpreter: {new.python}")
    print(f"machine: {os.cpu_count()} CPUs, load average at start {os.getloadavg()[0]:.1f}")
    rounds = -(-n // batch)
    print(f"{rounds} rounds of {batch} calls per variant (>= {rounds * batch} calls each), "
          f"old/new alternating; wall: median per call; CPU: per call (batch total / calls), median over rounds")
    for label, code in BENCH_PROGRAMS.items():
        for T in threads:
            for _, sb in variants:  # warm-up (starts the fork server)
                _bench_batch(sb, code, max(2, T), T)
            walls = {name: [] for name, _ in variants}
            cpus = {name: [] for name, _ in variants}
            for r in range(rounds):
                for name, sb in (variants if r % 2 == 0 else variants[::-1]):
                    w, c = _bench_batch(sb, code, batch, T)
                    walls[name] += w
                    cpus[name].append(c)
            line = f"{label:15s} threads={T}:"
            med = {}
            for name, _ in variants:
                med[name] = (_median(walls[name]), _median(cpus[name]))
                line += f"  {name}: wall {1000 * med[name][0]:6.1f} ms, CPU {1000 * med[name][1]:5.1f} ms |"
            if "old" in med:
                (ow, oc), (nw, nc) = med["old"], med["new"]
                line += f"  old/new: wall {ow / nw:.2f}x, CPU {oc / nc:.2f}x"
            print(line.rstrip(" |"), flush=True)
    print(f"load average at end {os.getloadavg()[0]:.1f}")


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    k = len(xs)
    return (xs[(k - 1) // 2] + xs[k // 2]) / 2


_PHASES = ["sent", "Z_forked", "P_start", "P_read", "P_unshare", "C_start", "C_root", "D_ready", "C_reaped",
           "P_reaped", "returned"]


def _bench_phases(n: int, python: str | None, fork_server: bool) -> None:
    """Where one call's time goes: the bootstrap's `#@phase` marks timed (CLOCK_MONOTONIC, shared by
    all processes) over n calls of print(1+1); medians. Patches the bootstrap: run it on its own."""
    global _BOOT, _start_call
    t = "__import__('time').clock_gettime(1), __import__('time').process_time()"

    def mark(m: re.Match) -> str:
        ind, name = m.group(1), m.group(2)
        if name == "Z_forked":
            return f'{ind}os.write(fds[3], ("warn phase Z_forked %r %r\\n" % ({t})).encode())'
        return f'{ind}say("warn phase {name} %r %r" % ({t}))'

    _BOOT = re.sub(r"^( *)#@phase (\w+)$", mark, _BOOT, flags=re.M)
    _boot_cache.clear()
    sent: list[float] = []
    start_call = _start_call

    def timed_start(*a, **k):
        call = start_call(*a, **k)
        sent.append(time.monotonic())
        return call

    _start_call = timed_start
    sb = PythonSandbox(wall_s=20, cpu_s=5, python=python, fork_server=fork_server)
    print(f"mode: {sb.mode}  fork server: {sb.fork_server}  load average {os.getloadavg()[0]:.1f}")
    rows = []
    for i in range(n + 3):
        t0 = time.monotonic()
        res, notes = sb._execute("print(1+1)", sb.mode, sb.fork_server)
        t1 = time.monotonic()
        assert res.ok, res
        marks = {"t0": (t0, 0.0), "sent": (sent[-1], 0.0), "returned": (t1, 0.0)}
        for line in notes:
            if line.startswith("phase "):
                _, name, clk, cpu = line.split()
                marks[name] = (float(clk), float(cpu))
        if i >= 3:
            rows.append(marks)
    prev = "t0"
    print("phase (wall, median ms):")
    for name in _PHASES:
        if name not in rows[0]:
            continue
        print(f"  {prev:>9s} -> {name:9s} {1000 * _median([r[name][0] - r[prev][0] for r in rows]):6.2f}")
        prev = name
    print(f"  total              {1000 * _median([r['returned'][0] - r['t0'][0] for r in rows]):6.2f}")
    cpu = {k: 1000 * _median([r[k][1] for r in rows]) for k in ("P_read", "P_reaped", "C_start", "C_root",
                                                                 "C_reaped", "D_ready")}
    print(f"CPU (median ms, each process's own, up to the mark): P {cpu['P_reaped']:.2f} (to P_read "
          f"{cpu['P_read']:.2f}); C {cpu['C_reaped']:.2f} (build_root {cpu['C_root'] - cpu['C_start']:.2f}); "
          f"D before the code {cpu['D_ready']:.2f}; D's total and the exits: see --bench")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rtpo.tools.python_sandbox",
                                 description="Run Python code in the sandbox, or measure its per-call overhead.")
    ap.add_argument("code", nargs="?", help="code to run (default: read stdin)")
    ap.add_argument("--bench", type=int, metavar="N", help="time >= N calls of each typical program and exit")
    ap.add_argument("--vs", metavar="TREE", help="with --bench: also time the sandbox of this checkout "
                                                 "(e.g. a git worktree of an older commit), alternating")
    ap.add_argument("--threads", default="1", help="with --bench: comma-separated thread counts (default 1)")
    ap.add_argument("--phases", type=int, metavar="N", help="time the phases of N calls of print(1+1) and exit")
    ap.add_argument("--no-fork-server", action="store_true", help="one interpreter per call")
    ap.add_argument("--python", help="interpreter for the child (default: this one)")
    ap.add_argument("--wall-s", type=float, default=None)
    args = ap.parse_args(argv)
    if args.phases:
        _bench_phases(args.phases, args.python, not args.no_fork_server)
        return 0
    if args.bench:
        _bench(args.bench, args.python, args.vs, [int(t) for t in args.threads.split(",")])
        return 0
    code = args.code if args.code is not None else sys.stdin.read()
    r = PythonSandbox(wall_s=args.wall_s, python=args.python, fork_server=not args.no_fork_server).run(code)
    sys.stdout.write(r.output)
    print(f"\n[ok={r.ok} error={r.error} wall_s={r.wall_s:.3f}]", file=sys.stderr)
    return 0 if r.ok else 1


if __name__ == "__main__":
    sys.exit(main())
