"""Checks of input files before a job uses them, so that a truncated or corrupt file fails with a
message naming the file and what is wrong (`rtpo` exits 2) instead of a traceback from deep inside
a library.

check_model_dir(path): a Hugging Face model directory as `rtpo train --model` / `rtpo evaluate
--model` read it: every *.json parses, every *.safetensors file has a valid header whose tensors
exactly cover the file (a truncated download or copy fails here), the shards named by
model.safetensors.index.json exist, and a torch *.bin weights file is a readable zip archive.
Reading a safetensors header costs a few hundred kB whatever the model size. The format carries no
checksum, so a flipped bit inside a tensor is found only through a manifest (below).

Manifests: every directory rtpo writes whole -- a checkpoint (checkpoint/step-N/), a
run's final/, the base model -- gets MANIFEST, written last, with the size and sha256 of each of
its files. `verify_manifest` checks them before the directory is used: a bit flipped on disk or in
a copy, a truncated or a swapped file fails with exit 2 naming the file, rather than a run resuming
from (or evaluating) weights that are not the ones written. check_model_dir verifies the manifest of
a model directory that has one (a hub download or a model saved by other tools has none).

RowError: a line of a JSON Lines input that cannot be used (`path:LINE: field 'x': ...`).

Reading JSON Lines and JSON inputs: `jsonl_lines(path)` yields the numbered non-blank
lines of a task / eval / experts / metrics file, decoded as strict UTF-8 (a byte that is not UTF-8
is a RowError naming the file, the line and the byte offset, not a UnicodeDecodeError naming
neither) and at most MAX_ROW_BYTES long (a longer line is refused before it is read whole).
`read_jsonl(path)` parses those lines, refusing a NaN / infinite number naming its field
(`nonfinite`) and a string holding an unpaired UTF-16 surrogate (`unpaired_surrogate`: a JSON escape
such as \\ud800 without its partner, which no tokenizer can encode); `read_json(path)` reads a whole
JSON document (an eval JSON) by the same rules.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import struct
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MANIFEST = "rtpo-manifest.json"
# a model directory's tokenizer: the fast one every rtpo model has, or a slow one transformers converts
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "spiece.model", "vocab.json", "vocab.txt")


class CorruptFileError(ValueError):
    """An input file that cannot be used; the message names it."""

    def __init__(self, path: str | Path, message: str):
        self.path = str(path)
        super().__init__(f"{path}: {message}")


class RowError(CorruptFileError):
    """A line of a JSON Lines file that cannot be used: `path:LINE: field 'answers': expected ...`."""

    def __init__(self, path: str | Path, line: int, message: str, field: str | None = None):
        self.line, self.field = line, field
        super().__init__(f"{path}:{line}", f"field {field!r}: {message}" if field else message)
        self.path = str(path)


# ------------------------------------------------------------------------------------------------
# JSON Lines and JSON inputs: strict UTF-8, bounded rows, errors naming file and line
# ------------------------------------------------------------------------------------------------

# The longest line a JSON Lines input may have. The rows rtpo writes are a few kB (the largest, an
# airline task carrying its database, ~4 kB; a metrics record well under that), so 1 MiB is ~250x
# headroom. A longer line is not a row rtpo wrote, and json would parse it whole: a 50 MB row once
# ran 5.5 minutes at 9.3 GB of memory and exited 0. It is refused after reading MAX_ROW_BYTES + 1
# bytes of it, naming file:line.
MAX_ROW_BYTES = 1 << 20


def jsonl_lines(path: str | Path, max_row_bytes: int = MAX_ROW_BYTES) -> Iterator[tuple[int, str]]:
    """(line number, text) of every non-blank line of a JSON Lines file, 1-based, split at b"\\n" only.
    Raises RowError naming `path:LINE` for a line that is not UTF-8 (with the byte offset) or longer
    than `max_row_bytes` bytes (without its newline)."""
    offset = 0  # of the line in the file, for the byte offset of a bad byte
    with open(path, "rb") as f:
        n = 0
        while raw := f.readline(max_row_bytes + 1):
            n += 1
            body = raw[:-1] if raw.endswith(b"\n") else raw
            if len(body) > max_row_bytes:
                raise RowError(path, n, f"line longer than {max_row_bytes} bytes (rtpo.inputs.MAX_ROW_BYTES): "
                                        "not a row rtpo wrote (a corrupt or concatenated file?)")
            try:
                text = body.decode("utf-8")
            except UnicodeDecodeError as e:
                raise RowError(path, n, f"not UTF-8: byte 0x{body[e.start]:02x} at byte {e.start} of the line "
                                        f"(byte {offset + e.start} of the file) ({e.reason})") from None
            offset += len(raw)
            if text.strip():
                yield n, text


def nonfinite(obj: Any) -> tuple[str, float] | None:
    """(field, value) of the first non-finite number (NaN, +-Infinity: Python's json parses the bare
    tokens, and a number beyond a float's range such as 1e999 as inf) in a parsed JSON value, the
    field written as `a.b[2].c`; None when every number is finite. Iterative: any depth."""
    stack: list[tuple[str, Any]] = [("", obj)]
    while stack:
        name, v = stack.pop()
        if isinstance(v, float):
            if not math.isfinite(v):
                return name or "(top level)", v
        elif isinstance(v, dict):
            stack.extend((f"{name}.{k}" if name else str(k), x) for k, x in reversed(list(v.items())))
        elif isinstance(v, list):
            stack.extend((f"{name}[{i}]", x) for i, x in reversed(list(enumerate(v))))
    return None


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # \\ud800-\\udfff: the only way JSON text holds a surrogate


def unpaired_surrogate(obj: Any, text: str | None = None) -> tuple[str, str] | None:
    """(field, message) for the first string (or key) of a parsed JSON value that holds an unpaired UTF-16
    surrogate, which json.loads accepts from an escape like \\ud800 and no tokenizer can encode; None when
    there is none. With the JSON `text` it came from, a text without such an escape is passed at once."""
    if text is not None and not _SURROGATE_ESCAPE.search(text):
        return None
    stack: list[tuple[str, Any]] = [("", obj)]
    while stack:
        name, v = stack.pop()
        for s in ([v] if isinstance(v, str) else list(v) if isinstance(v, dict) else []):
            try:
                s.encode("utf-8")
            except UnicodeEncodeError as e:
                what = "key" if s is not v else "string"
                return (name or "(top level)", f"an unpaired UTF-16 surrogate \\u{ord(s[e.start]):04x} at character "
                        f"{e.start} of its {what} (a JSON escape of half a pair, which is no character: no tokenizer "
                        "can encode it); remove it, or write the character it was meant to be")
        if isinstance(v, dict):
            stack.extend((f"{name}.{k}" if name else str(k), x) for k, x in reversed(list(v.items())))
        elif isinstance(v, list):
            stack.extend((f"{name}[{i}]", x) for i, x in reversed(list(enumerate(v))))
    return None


def _check_text(obj: Any, text: str) -> None:
    bad = unpaired_surrogate(obj, text)
    if bad:
        raise ValueError(f"field {bad[0]!r}: {bad[1]}")


def loads(text: str | bytes) -> Any:
    """json.loads with a document nested too deeply for the parser as ValueError (RecursionError
    otherwise), so that every failure is a ValueError (json.JSONDecodeError for bad JSON; a number
    with more digits than int() allows is one too). No location: callers add it."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _parse(text: str) -> Any:
    try:
        return loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not valid JSON ({e.msg}, line {e.lineno} column {e.colno})") from None
    except ValueError as e:
        raise ValueError(f"not valid JSON ({e})") from None


def _check_finite(obj: Any) -> None:
    bad = nonfinite(obj)
    if bad:
        raise ValueError(f"field {bad[0]!r} is not finite: {bad[1]!r} (NaN / Infinity is never a valid value)")


def read_jsonl(path: str | Path, max_row_bytes: int = MAX_ROW_BYTES, finite: bool = True) -> list[tuple[int, Any]]:
    """(line number, parsed JSON value) of every non-blank line (jsonl_lines); a line that is not
    JSON, or (with `finite`) holds a NaN / infinite number, raises RowError naming `path:LINE`."""
    out = []
    for n, text in jsonl_lines(path, max_row_bytes):
        try:
            obj = _parse(text)
            if finite:
                _check_finite(obj)
            _check_text(obj, text)
        except ValueError as e:
            raise RowError(path, n, str(e)) from None
        out.append((n, obj))
    return out


def read_json(path: str | Path, finite: bool = True) -> Any:
    """The JSON document of a file, decoded as strict UTF-8; with `finite`, a NaN / infinite number
    anywhere is an error naming its field. Raises CorruptFileError naming the file (and the byte
    offset of a byte that is not UTF-8, or the line and column of a JSON error)."""
    raw = Path(path).read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise CorruptFileError(path, f"not UTF-8: byte 0x{raw[e.start]:02x} at byte offset {e.start} "
                                     f"(line {line}) ({e.reason})") from None
    try:
        doc = _parse(text)
        if finite:
            _check_finite(doc)
        _check_text(doc, text)
    except ValueError as e:
        raise CorruptFileError(path, str(e)) from None
    return doc


# bytes per element of each safetensors dtype (safetensors/src/tensor.rs)
_DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "I16": 2, "U16": 2,
                "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8, "C64": 8}
_MAX_HEADER = 100_000_000  # the safetensors library's own limit


def check_safetensors(path: str | Path) -> dict[str, dict]:
    """Validate a .safetensors file's structure; returns its tensor table. Raises CorruptFileError."""
    p = Path(path)
    size = p.stat().st_size
    with p.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise CorruptFileError(p, f"truncated safetensors file: {size} bytes, shorter than its 8-byte header length")
        (n,) = struct.unpack("<Q", head)
        if n > _MAX_HEADER:
            raise CorruptFileError(p, f"corrupt safetensors file: header length {n} bytes is impossible")
        if 8 + n > size:
            raise CorruptFileError(p, f"truncated safetensors file: {size} bytes, but its header alone "
                                      f"should take {8 + n}")
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorruptFileError(p, f"corrupt safetensors file: its header is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise CorruptFileError(p, "corrupt safetensors file: its header is not a JSON object")
    end = 0
    tensors = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (lo, hi) = t["dtype"], t["shape"], t["data_offsets"]
            need = math.prod(shape) * _DTYPE_BYTES[dtype]
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptFileError(p, f"corrupt safetensors file: tensor {name!r} has a bad entry {t!r} "
                                      f"({type(e).__name__}: {e})") from None
        if not (isinstance(lo, int) and isinstance(hi, int) and 0 <= lo <= hi) or hi - lo != need:
            raise CorruptFileError(p, f"corrupt safetensors file: tensor {name!r} ({dtype} {shape}) has data "
                                      f"offsets {[lo, hi]}, which do not span its {need} bytes")
        end = max(end, hi)
        tensors[name] = t
    expected = 8 + n + end
    if size < expected:
        raise CorruptFileError(p, f"truncated safetensors file: {size} bytes, but its header describes {expected}")
    if size > expected:
        raise CorruptFileError(p, f"corrupt safetensors file: {size} bytes, but its header describes {expected} "
                                  f"({size - expected} bytes too many)")
    return tensors


def check_model_dir(path: str | Path) -> None:
    """Validate the files of a local model directory (see the module docstring). A path that does
    not exist is left to the loader (which names it), as is a hub id."""
    d = Path(path)
    if not d.is_dir():
        return
    for f in sorted(d.glob("*.json")):
        try:
            json.loads(f.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise CorruptFileError(f, f"corrupt JSON ({e}); the model directory {d} is damaged") from None
    index = d / "model.safetensors.index.json"
    if index.exists():
        shards = sorted(set(json.loads(index.read_text(encoding="utf-8")).get("weight_map", {}).values()))
        missing = [s for s in shards if not (d / s).is_file()]
        if missing:
            raise CorruptFileError(index, f"names weight shards that are missing: {', '.join(missing)}")
    for f in sorted(d.glob("*.safetensors")):
        check_safetensors(f)
    for f in sorted(d.glob("*.bin")):  # torch.save's zip format (the legacy pickle format starts with 0x80)
        with f.open("rb") as fh:
            magic = fh.read(2)
        if f.name.startswith(("pytorch_model", "model")) and magic[:1] != b"\x80" and not zipfile.is_zipfile(f):
            raise CorruptFileError(f, "truncated or corrupt torch weights file (not a readable zip archive)")
    # last: the structural checks above name a truncated file more precisely than a size mismatch
    verify_manifest(d)
    # what a manifest would have named if the directory had one (a copy made by hand, a damaged final/)
    if not (d / "config.json").is_file():
        raise CorruptFileError(d / "config.json", f"missing: {d} is not a model directory (a run's final/, the "
                                                  "base model); give the directory that holds config.json")
    if not any((d / f).is_file() for f in TOKENIZER_FILES) and not any(d.glob("*.tiktoken")):
        raise CorruptFileError(d / "tokenizer.json", f"missing: {d} has no tokenizer file ({', '.join(TOKENIZER_FILES)}), "
                                                     "and transformers would try to rebuild one from another format; "
                                                     "copy tokenizer.json (and tokenizer_config.json) from the model it "
                                                     "was trained from (the base model), or rerun the job that wrote it")


# ------------------------------------------------------------------------------------------------
# manifests: the size and sha256 of every file of a directory, written last, verified before use
# ------------------------------------------------------------------------------------------------

def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _listed(d: Path) -> list[Path]:
    """The files a manifest covers: every regular file under `d` but the manifest itself and hidden
    files (an NFS .nfsXXXX placeholder is not part of what was written)."""
    return sorted(p for p in d.rglob("*") if p.is_file() and p.name != MANIFEST
                  and not any(part.startswith(".") for part in p.relative_to(d).parts))


def write_manifest(directory: str | Path) -> Path:
    """Write MANIFEST into `directory`, once every other file of it is written. Its bytes depend only
    on the files' contents (sorted keys, no times), so identical outputs get identical manifests."""
    d = Path(directory)
    files = {p.relative_to(d).as_posix(): {"bytes": p.stat().st_size, "sha256": file_sha256(p)} for p in _listed(d)}
    path = d / MANIFEST
    path.write_text(json.dumps({"algorithm": "sha256", "files": files}, indent=1, sort_keys=True) + "\n")
    return path


def verify_manifest(directory: str | Path, required: bool = False) -> bool:
    """Check every file of `directory` against its MANIFEST: present, of the recorded size and
    sha256, and no file the manifest does not list. Raises CorruptFileError naming the file. Without
    a manifest: False, or with `required` a CorruptFileError naming the missing manifest."""
    d = Path(directory)
    path = d / MANIFEST
    if not path.is_file():
        if required:
            raise CorruptFileError(path, "missing: the directory carries no checksums (written before "
                                         "manifests existed, or damaged), so it cannot be verified")
        return False
    try:
        files = json.loads(path.read_text(encoding="utf-8"))["files"]
        entries = {str(rel): (int(w["bytes"]), str(w["sha256"])) for rel, w in files.items()}
        if any(Path(rel).is_absolute() or ".." in Path(rel).parts for rel in entries):
            raise ValueError("a listed path leaves the directory")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise CorruptFileError(path, f"corrupt manifest ({type(e).__name__}: {e})") from None
    for rel, (size, sha) in sorted(entries.items()):
        f = d / rel
        if not f.is_file():
            raise CorruptFileError(f, f"missing, but listed in {path}")
        have = f.stat().st_size
        if have != size:
            raise CorruptFileError(f, f"{have} bytes, but {MANIFEST} records {size}: truncated or changed "
                                      "after it was written")
        got = file_sha256(f)
        if got != sha:
            raise CorruptFileError(f, f"sha256 {got[:12]}... differs from the {sha[:12]}... that {MANIFEST} "
                                      "records: the file changed after it was written (a disk or copy fault)")
    for f in _listed(d):
        if f.relative_to(d).as_posix() not in entries:
            raise CorruptFileError(f, f"not listed in {path}: the directory changed after it was written")
    return True
