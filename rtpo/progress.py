"""Progress of long steps: a tqdm bar on a terminal, plain lines in logs.

Snakemake rule logs and Slurm output files are not terminals: tqdm's carriage-return redraws turn
into one unreadable line of thousands of updates. `progress(...)` takes tqdm's arguments and
returns a real tqdm when stderr is a terminal, else a `LogProgress` that prints one plain line
each time another `every` percent is done (and at the end):

    copy pre-training: 25% (250/1000) 61.2 s, loss=0.724

Set RTPO_PROGRESS=bar or RTPO_PROGRESS=lines to force either.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, TextIO


class LogProgress:
    """The part of tqdm's interface the package uses: iteration, update, set_postfix(_str),
    set_description, close, `with`."""

    def __init__(self, iterable: Iterable | None = None, total: int | None = None, desc: str = "",
                 unit: str = "it", every: float = 5.0, file: TextIO | None = None, initial: int = 0,
                 disable: bool = False, **_: Any) -> None:
        self.iterable = iterable
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable) + initial  # type: ignore[arg-type]
        self.total, self.desc, self.unit, self.every = total, desc, unit, float(every)
        self.file = file or sys.stderr
        self.n = initial
        self.disable = disable
        self.postfix = ""
        self.t0 = time.perf_counter()
        self._next = self._step_after(initial)
        self._closed = False

    def _step_after(self, n: int) -> float:
        if not self.total:
            return float("inf")
        done = 100.0 * n / self.total
        return (int(done // self.every) + 1) * self.every

    def _line(self) -> None:
        if self.disable:
            return
        pct = f"{100.0 * self.n / self.total:.0f}% ({self.n}/{self.total})" if self.total else f"{self.n} {self.unit}"
        post = f", {self.postfix}" if self.postfix else ""
        print(f"{self.desc}: {pct} {time.perf_counter() - self.t0:.1f} s{post}", file=self.file, flush=True)

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.total and 100.0 * self.n / self.total >= self._next - 1e-9:
            self._line()
            self._next = self._step_after(self.n)

    def set_postfix(self, ordered_dict: dict | None = None, refresh: bool = True, **kw: Any) -> None:
        items = dict(ordered_dict or {}, **kw)
        self.postfix = ", ".join(f"{k}={v}" for k, v in items.items())

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        self.postfix = str(s)

    def set_description(self, desc: str | None = None, refresh: bool = True) -> None:
        self.desc = desc or ""

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if not self.total or self.n < self.total or (self.total and self._next <= 100.0):
                self._line()

    def __iter__(self) -> Iterator:
        if self.iterable is None:
            raise TypeError("LogProgress without an iterable is not iterable")
        try:
            for x in self.iterable:
                yield x
                self.update(1)
        finally:
            self.close()

    def __enter__(self) -> "LogProgress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _terminal(stream: Any) -> bool:
    mode = os.environ.get("RTPO_PROGRESS", "")
    return mode == "bar" or (mode != "lines" and hasattr(stream, "isatty") and stream.isatty())


def quiet_library_bars() -> None:
    """No terminal (a rule log): turn off the Hugging Face libraries' own tqdm bars too ("Writing model
    shards" on every save_pretrained), which would write carriage-return spam into the log. Must run
    before transformers / huggingface_hub are imported: they read the variable at import."""
    if not _terminal(sys.stderr):
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def progress(iterable: Iterable | None = None, **kw: Any):
    """tqdm on a terminal, LogProgress otherwise (same arguments)."""
    if _terminal(kw.get("file") or sys.stderr):
        from tqdm import tqdm

        kw.pop("every", None)
        return tqdm(iterable, **kw)
    return LogProgress(iterable, **kw)


class _Tee:
    """A text stream that writes to `stream` and to the file `copy` (isatty and the rest: `stream`'s)."""

    def __init__(self, stream: TextIO, copy: TextIO) -> None:
        self._stream, self._copy = stream, copy

    def write(self, s: str) -> int:
        self._copy.write(s)
        return self._stream.write(s)

    def flush(self) -> None:
        self._copy.flush()
        self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class copy_output:
    """`with copy_output(path):` what this process writes to stdout and stderr while the block runs is
    also written to `path` (created with its directory; replaced): one seed's own log in a job that
    trains or evaluates several seeds. `path` None copies nothing."""

    def __init__(self, path: str | os.PathLike | None) -> None:
        self.path = path
        self._file: TextIO | None = None
        self._saved: tuple[TextIO, TextIO] | None = None

    def __enter__(self) -> "copy_output":
        if self.path is not None:
            from pathlib import Path

            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "w", encoding="utf-8")
            self._saved = (sys.stdout, sys.stderr)
            sys.stdout, sys.stderr = _Tee(sys.stdout, self._file), _Tee(sys.stderr, self._file)  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._saved is not None:
            sys.stdout.flush()
            sys.stderr.flush()
            sys.stdout, sys.stderr = self._saved
            self._saved = None
        if self._file is not None:
            self._file.close()
            self._file = None
