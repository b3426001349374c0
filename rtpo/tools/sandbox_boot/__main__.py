# rtpo-python-sandbox-boot
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
