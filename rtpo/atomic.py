"""Atomic outputs: a file or directory that a job writes is, at every instant, either absent, the
previous complete version or the new complete version -- never half written.

Everything is written under a temporary name in the same directory (so on the same filesystem)
and renamed into place: `rename(2)` replaces a file atomically, and a directory atomically when
the target name is new. A directory that already exists is swapped with `renameat2(2)`'s
RENAME_EXCHANGE (Linux), else moved aside for the rename (a moment without the directory, never a
half-written one). Files are fsync'ed before the rename, and the directory after it, so a crash of
the machine keeps the old or the new version as well as a killed process does.

A killed writer leaves its temporary behind: `.{name}.tmp-{pid}-*` next to the target. The next
write of the same target removes those whose writer is gone (its pid no longer runs) or is this
process, so a rerun cleans up after a killed run without help and never deletes a live writer's
temporary. One writer per target at a time: Snakemake guarantees it for job outputs, and `rtpo
train` / `rtpo evaluate` hold `exclusive(run directory or output)`, a flock the kernel releases
when the process dies, so a killed run never blocks its rerun. The lock is the directory's own (a
run directory is locked itself; an output file through a lock file in its directory), so every path
that reaches that directory -- a symlink, a bind mount, `..` -- meets the same lock: the kernel keys
it by the directory's device and inode, not by a name.

    atomic_write_text(path, text)           summary.json, eval JSON, tables
    atomic_call(path, fig.savefig, dpi=150) a library that writes to a path itself (df.to_csv, savefig)
    with atomic_path(path) as tmp: ...      the same as a block
    with atomic_dir(path) as tmp: ...       a directory (final/, a model directory)
    with exclusive(run_dir): ...            one writer per run directory (or output file)

A write that runs out of space (ENOSPC, EDQUOT, or torch's zip writer's "unexpected pos" after a short
write) is raised as `DiskFull`, an OSError naming the file being written, the space left on its
filesystem and what to do; the temporary is removed, so the target keeps its previous version.
`disk_full(path)` turns such errors into DiskFull around other writes (an appended metrics.jsonl).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

TMP_MARK = ".tmp-"


def temp_name(path: Path, suffix: str = "") -> Path:
    """A fresh temporary sibling of `path`: .{name}.tmp-{pid}-{random}{suffix}."""
    return path.with_name(f".{path.name}{TMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}{suffix}")


def _writer_alive(name: str, prefix: str) -> bool:
    """Whether the temporary `name` (`{prefix}{pid}-{random}...`) belongs to another process still running."""
    pid = name[len(prefix):].split("-", 1)[0]
    if not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it runs, under another user
        return True
    return True


def remove_leftovers(path: str | os.PathLike) -> list[Path]:
    """Remove what killed writes of `path` left behind (`.{name}.tmp-*` next to it, from a process that
    no longer runs, or from this one); returns them. A live writer's temporary is left alone."""
    path = Path(path)
    prefix = f".{path.name}{TMP_MARK}"
    removed = []
    if not path.parent.is_dir():
        return removed
    for entry in path.parent.iterdir():
        if entry.name.startswith(prefix) and not _writer_alive(entry.name, prefix):
            _remove(entry)
            removed.append(entry)
    return removed


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


class DiskFull(OSError):
    """A write that ran out of space; the message names the file and says what to do (`rtpo` exits 2)."""


def is_disk_full(e: BaseException) -> bool:
    """ENOSPC / EDQUOT, or torch.save's zip writer reporting the short write a full disk leaves."""
    if isinstance(e, OSError):
        return e.errno in (errno.ENOSPC, errno.EDQUOT)
    return isinstance(e, RuntimeError) and ("unexpected pos" in str(e) or "file write failed" in str(e))


def disk_full_error(path: str | os.PathLike, e: BaseException) -> DiskFull:
    """The DiskFull error for a failed write of `path` (the space left measured now)."""
    d = Path(path).parent
    while not d.exists() and d != d.parent:
        d = d.parent
    try:
        free = f"{shutil.disk_usage(d).free / 2**20:.1f} MiB left on the filesystem of {d}"
    except OSError:
        free = f"the filesystem of {d}"
    cause = " ".join(str(e).split())[:160]
    err = DiskFull(f"{path}: no space left on the device while writing it ({free}; {type(e).__name__}: {cause}). "
                   f"Free space there (df -h {d}) or write elsewhere, then rerun the same command: what was "
                   "written before is kept (a training run resumes from its last complete checkpoint)")
    err.path = str(path)  # (not OSError's errno / filename: they would replace the message in str())
    return err


@contextlib.contextmanager
def disk_full(path: str | os.PathLike) -> Iterator[None]:
    """Raise a write of `path` that ran out of space as DiskFull naming it (other errors pass unchanged)."""
    try:
        yield
    except (OSError, RuntimeError) as e:
        if isinstance(e, DiskFull) or not is_disk_full(e):
            raise
        raise disk_full_error(path, e) from None


def _newest(tmp: Path, target: Path) -> Path:
    """The file of a temporary directory written last (the one a failed write was writing), as it would be
    named under `target`; `target` itself when there is none."""
    files = [p for p in tmp.rglob("*") if p.is_file()]
    if not files:
        return target
    rel = max(files, key=lambda p: p.stat().st_mtime_ns).relative_to(tmp)
    return target / (rel.with_suffix("") if rel.suffix == ".tmp" else rel)  # a writer's own temporary: its target


def fsync_file(path: str | os.PathLike) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str | os.PathLike) -> None:
    """Persist a rename in `path` (best effort: some filesystems refuse fsync on directories)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_tree(root: str | os.PathLike) -> None:
    """fsync every file and directory under `root` (before it is renamed into place)."""
    for d, _, files in os.walk(root):
        for f in files:
            fsync_file(os.path.join(d, f))
        fsync_dir(d)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(path)
    tmp = temp_name(path)
    try:
        with disk_full(path):
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        _remove(tmp)
        raise
    fsync_dir(path.parent)


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> None:
    """Write `text` to `path` atomically (temporary sibling, fsync, rename)."""
    atomic_write_bytes(path, text.encode(encoding))


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary file name with the target's suffix, renamed onto `path` when the block succeeds.

    For writers that take a path (`fig.savefig(tmp)` picks its format from the suffix). If the
    block raises, the temporary is removed and `path` keeps its previous contents.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(path)
    tmp = temp_name(path, suffix=path.suffix)
    try:
        with disk_full(path):
            yield tmp
            fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        _remove(tmp)
        raise
    fsync_dir(path.parent)


def atomic_call(path: str | os.PathLike, write: Callable[..., Any], *args: Any, **kw: Any) -> None:
    """`write(tmp, *args, **kw)` to a temporary name with the target's suffix, then renamed onto
    `path`: `atomic_call(p, df.to_csv, index=False)`, `atomic_call(p, fig.savefig, dpi=150)`."""
    with atomic_path(path) as tmp:
        write(tmp, *args, **kw)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary directory, put in place of `path` (replacing an old one) when the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(path)
    tmp = temp_name(path)
    tmp.mkdir()
    try:
        yield tmp
        fsync_tree(tmp)
        replace_dir(tmp, path)
    except BaseException as e:
        named = _newest(tmp, path) if is_disk_full(e) and not isinstance(e, DiskFull) else None
        _remove(tmp)
        if named is not None:
            raise disk_full_error(named, e) from None
        raise


def replace_dir(src: Path, dst: Path) -> None:
    """Put directory `src` at `dst`; an existing `dst` is removed once `src` is in its place."""
    if not dst.exists() and not dst.is_symlink():
        os.rename(src, dst)  # atomic: a new name
    elif _exchange(src, dst):
        _remove(src)  # now the old directory
    else:  # no RENAME_EXCHANGE here: move the old one aside first (a moment without dst)
        old = temp_name(dst)
        os.rename(dst, old)
        os.rename(src, dst)
        _remove(old)
    fsync_dir(dst.parent)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically with renameat2(RENAME_EXCHANGE); False where unsupported."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):  # not glibc >= 2.28 / not Linux
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
        return False  # the filesystem (NFS, some FUSE) does not support it
    raise OSError(err, f"renameat2({a}, {b}, RENAME_EXCHANGE): {os.strerror(err)}")


# ------------------------------------------------------------------------------ one writer per run
class Busy(ValueError):
    """Another live process holds the lock of a run directory or output (exit 2 names both)."""


_held: dict[tuple[int, int], tuple[int, int]] = {}   # (device, inode) locked -> (fd, depth): re-entrant in a process


def lock_file(target: str | os.PathLike) -> Path:
    """The lock file of an output file `target` (an eval JSON): `.{name}.lock` in its directory, so that
    every path to that directory reaches the same file. (A run directory is locked itself, with no file.)"""
    target = Path(target)
    return target.with_name(f".{target.name}.lock")


def lock_holder(path: str | os.PathLike) -> int | None:
    """The pid holding a flock on `path` (a locked run directory or lock file; /proc/locks, Linux), None when
    nobody does or it cannot be told."""
    try:
        st = os.stat(path)
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in lines:
        parts = line.split()
        if len(parts) > 5 and parts[1] == "FLOCK" and parts[5] == inode and parts[4].isdigit():
            return int(parts[4])
    return None


@contextlib.contextmanager
def exclusive(target: str | os.PathLike, what: str = "writing", directory: bool | None = None) -> Iterator[Path]:
    """Hold an exclusive `flock` on `target` for the block (re-entrant in one process): on the directory
    itself when `target` is a directory (`directory`; by default: it is one, or its name has no suffix; made
    if absent), else on its lock file (`lock_file`). Yields what is locked.

    A second process asking for it gets `Busy` at once, naming the target and the holder's pid. The kernel
    drops the lock when the holder exits or is killed, so a dead run never blocks its rerun; a lock file
    stays (removing it would let a third process lock a new file while the second still holds the old
    one). The lock is keyed by the locked inode, so a symlink, a bind mount or any other path to the same
    directory meets it. A directory made here to be locked is removed again when the block leaves it empty
    (a run refused on its inputs leaves nothing)."""
    target = Path(target)
    if directory is None:
        directory = target.is_dir() or not target.suffix
    created = False
    if directory:
        created = not target.exists()
        target.mkdir(parents=True, exist_ok=True)
        locked = target
        fd = os.open(locked, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        locked = lock_file(target)
        fd = os.open(locked, os.O_RDWR | os.O_CREAT, 0o644)
    st = os.fstat(fd)
    key = (st.st_dev, st.st_ino)
    if key in _held:  # this process holds it already (train_seeds, then train of one seed)
        os.close(fd)
        held_fd, depth = _held[key]
        _held[key] = (held_fd, depth + 1)
        try:
            yield locked
        finally:
            held_fd, depth = _held[key]
            _held[key] = (held_fd, depth - 1)
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = lock_holder(locked)
        if holder is None and not directory:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or None
        os.close(fd)
        raise Busy(f"{target}: another process (pid {holder or 'unknown'}) is {what} it; wait for it to end or stop "
                   f"it (its lock: {locked}, device {st.st_dev} inode {st.st_ino}; the kernel releases it when that "
                   "process exits)") from None
    if not directory:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _held[key] = (fd, 1)
    try:
        yield locked
    finally:
        fd, depth = _held[key]
        if depth <= 1:
            del _held[key]
            if created:   # made only to be locked and still empty (its inputs were refused): leave nothing behind
                with contextlib.suppress(OSError):
                    os.rmdir(target)
            os.close(fd)  # closing the descriptor releases the flock
        else:
            _held[key] = (fd, depth - 1)
