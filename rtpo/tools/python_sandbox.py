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

Process layout (the program is sandbox_boot/__main__.py; the parent's plumbing, which starts P and
moves the bytes, is rtpo.tools.sandbox_process). Per call there is a chain
P -> C -> D: `P` enters the new namespaces and forks `C`, the init of the new PID namespace and the
supervisor; `C` builds the filesystem view and forks `D`, which drops privileges, sets the limits and
executes the model's code as `__main__`. The parent kills a run by closing a "lifeline" pipe that `C`
watches (C then exits and the kernel kills the rest of the namespace; P kills C if it has not gone
2 s later), so the parent never signals a pid it does not own. P holds the call's status pipe until
C is reaped: its EOF means the call is over.

Where P comes from: by default from a fork server (`_zygote` in the bootstrap), one per parent process
and interpreter, started lazily with `python -s -S -B <compiled bootstrap> zygote`, a scrubbed
environment and nothing imported beyond the bootstrap's C modules. For each call the parent sends it
the call's five pipe ends over a socketpair (SCM_RIGHTS) and it forks P; the code, its parameters and
its output travel on those pipes between the parent and P, never through the server, which runs no
model code and holds nothing of any call. Each call therefore starts from the same state: a copy of
the server just after its start-up. The fallback (`fork_server=False`, or where the server cannot
run) starts P as a new interpreter per call, as before (~2x the CPU time per call).

Per-call cost: `python scripts/bench_sandbox.py --bench 50 [--vs OLD_CHECKOUT] [--threads 1,4]`,
by phase `--phases 50` (numbers in docs/security.md).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

from . import sandbox_process as _proc
from .sandbox_process import SandboxError

__all__ = ["SandboxResult", "PythonSandbox", "SandboxError"]

# Throw-away uids for root mode: uid = _UID_BASE + random 20 bits, drawn per call. Far above normal
# users (< 65536) and subuid ranges (100000 + 65536*k for the first few thousand users).
_UID_BASE = 1_700_000_000
_UID_SPAN = 1 << 20



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
# What a call may do and what its outcome means (how its processes start: sandbox_process).

_probe_cache: dict[tuple[str, str, bool], tuple] = {}
_probe_lock = _proc.setup_lock  # re-entered: the probe run compiles the bootstrap

# Which limit stops what (a program's outcome must not depend on the machine's load).
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
        self.import_paths: tuple[str, ...] = _proc.site_packages(python) if site_packages else ()
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
            workdir = _proc.NS_WORKDIR
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
        env = dict(_proc.CHILD_ENV_FIXED, HOME=home, TMPDIR=tmpdir)
        try:
            for attempt in range(2):
                t0 = time.monotonic()
                call = _proc.start_call(self.python, fork_server, env, "/" if ns else workdir)
                try:
                    io = _proc.Pump(call, payload, out_cap=4 * self.max_output + 1024,
                               err_keep=max(4 * self.max_output, 8192), err_cap=max(1 << 20, 64 * self.max_output))
                    killed = io.pump(deadline=t0 + self.max_wall_s)
                    call.drop_lifeline()  # C exits on its EOF (a no-op if the call is over)
                    gone = io.finish(0.2)
                    if not gone and (call.server is None or "start" in io.status_lines()):
                        gone = io.finish(_proc.EXIT_GRACE_S)  # P exists: wait for it (not if never forked)
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

    def _classify(self, io: "_proc.Pump", killed: str | None, exit_line: str | None, stopped: str | None,
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
