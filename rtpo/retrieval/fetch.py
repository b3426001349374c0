"""Pinned downloads: a URL fetched over HTTPS into a file whose sha256 must match the recorded one.

Used by the data job (ARPO's evaluation and training files at a fixed commit) and by the corpus
rule (wiki-18). Plain http is accepted only from a loopback host (the tests serve fixtures from
127.0.0.1); `file:<path>` (relative to the working directory, or `file:///abs/path`) copies a local
file through the same checks, so a config can point the same rule at fixture files (config/rehearsal.yaml). A file already in place with the right sha256 is not fetched again. A mismatch is an
error naming the URL and both digests, and the downloaded bytes are not kept. Every fetch is
recorded beside the file in `<dest>.source.json` (url, sha256, bytes, time).

    python -m rtpo.retrieval.fetch URL DEST [--sha256 HEX] [--gunzip]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import http.client
import json
import os
import shutil
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["DownloadError", "download", "sha256_of"]

LOOPBACK = ("127.0.0.1", "localhost", "::1")


class DownloadError(RuntimeError):
    pass


def sha256_of(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while b := f.read(chunk):
            h.update(b)
    return h.hexdigest()


def _record(dest: Path, url: str, digest: str, size: int) -> None:
    rec = {"url": url, "sha256": digest, "bytes": size, "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    manifest = dest.with_name(dest.name + ".source.json")
    tmp = manifest.with_name(f".{manifest.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(rec, indent=1, sort_keys=True))
    os.replace(tmp, manifest)


def _recorded(dest: Path, url: str, want: str | None) -> bool:
    """`dest` exists and its .source.json says it came from `url` with the wanted digest (any, unpinned)."""
    manifest = dest.with_name(dest.name + ".source.json")
    if not (dest.exists() and manifest.exists()):
        return False
    try:
        rec = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return False
    return rec.get("url") == url and (want is None or rec.get("sha256") == want)


OFFLINE_HINT = ("on a compute node without internet, fetch where the internet is (the login node): "
                "`snakemake --profile slurm download`, or `python -m rtpo.retrieval.fetch {url} {dest}`")


def download(url: str, dest: str | Path, sha256: str | None = None, timeout: float = 60.0,
             retries: int = 3, gunzip: bool = False, log=None) -> Path:
    """Fetch `url` to `dest` (atomically) and check its sha256 (of the downloaded bytes, before any
    --gunzip). sha256=None records the digest without checking it (a source not yet pinned).

    Resumable: the bytes go to `.<dest>.part` beside it, kept when a transfer breaks; the next attempt
    (or the next run) asks for the rest with an HTTP Range request and appends it (a server that answers
    with the whole file starts it again). A file already fetched from the same URL (its .source.json)
    with the wanted digest is not fetched again."""
    log = log or (lambda s: print(s, file=sys.stderr, flush=True))
    dest = Path(dest)
    u = urlsplit(url)
    if u.scheme not in ("https", "file") and not (u.scheme == "http" and u.hostname in LOOPBACK):
        raise DownloadError(f"{url}: only https:// sources are fetched (http only from a loopback host, or file:)")
    if u.scheme == "file" and not Path(u.path).is_file():
        raise DownloadError(f"{url}: no such file {u.path} (relative to {os.getcwd()})")
    want = sha256.lower() if sha256 else None
    if dest.exists() and not gunzip and want and sha256_of(dest) == want:
        return dest
    if _recorded(dest, url, want):
        return dest
    hint = OFFLINE_HINT.format(url=url, dest=dest)
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on") and \
            (u.hostname or "").endswith("huggingface.co"):
        raise DownloadError(f"{url}: {dest} is missing and HF_HUB_OFFLINE=1 here; {hint}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.part")
    last = ""
    if u.scheme == "file":  # a local source: copied, then checked as a download is
        h, size = hashlib.sha256(), 0
        with open(u.path, "rb") as src, open(tmp, "wb") as f:
            while b := src.read(1 << 20):
                h.update(b)
                f.write(b)
                size += len(b)
    else:
        for attempt in range(retries + 1):
            if attempt:
                time.sleep(2.0 * attempt)
            h, size = hashlib.sha256(), 0
            if tmp.exists():  # a broken transfer: hash what is there, ask for the rest
                with open(tmp, "rb") as f:
                    while b := f.read(1 << 20):
                        h.update(b)
                        size += len(b)
            try:
                headers = {"User-Agent": "rtpo-artifact"}
                if size:
                    headers["Range"] = f"bytes={size}-"
                req = urllib.request.Request(url, headers=headers)
                with urllib.request.urlopen(req, timeout=timeout) as r:
                    if size and r.status != 206:  # the server sends the whole file: start again
                        log(f"fetch {dest.name}: the server ignored the range request; starting again")
                        h, size = hashlib.sha256(), 0
                    elif size:
                        log(f"fetch {dest.name}: resuming after {size} bytes")
                    total = size + int(r.headers.get("Content-Length") or 0)
                    next_report = (size / total if total else 0) + 0.05
                    with open(tmp, "ab" if size else "wb") as f:
                        while b := r.read(1 << 20):
                            h.update(b)
                            f.write(b)
                            size += len(b)
                            if total > 50 << 20 and size / total >= next_report:
                                log(f"fetch {dest.name}: {100 * size / total:.0f} % of {total >> 20} MiB")
                                next_report += 0.05
                    if total and size < total:
                        raise OSError(f"connection closed after {size} of {total} bytes")
                break
            except urllib.error.HTTPError as e:
                if e.code == 416:  # the range is past the end: the part is stale; start again
                    tmp.unlink(missing_ok=True)
                    last = "HTTP 416 (stale partial download, removed)"
                    continue
                if e.code < 500 and e.code != 429:
                    raise DownloadError(f"{url}: HTTP {e.code} {e.reason}") from None
                last = f"HTTP {e.code} {e.reason}"
            except (urllib.error.URLError, OSError, http.client.HTTPException) as e:  # the part stays: resumed next
                last = f"{type(e).__name__}: {getattr(e, 'reason', e)}"
        else:
            kept = f"; {tmp.stat().st_size} bytes kept in {tmp} (a rerun resumes)" if tmp.exists() else ""
            raise DownloadError(f"{url}: failed after {retries + 1} attempts ({last}){kept}; {hint}")
    digest = h.hexdigest()
    if want and digest != want:
        tmp.unlink(missing_ok=True)
        raise DownloadError(f"{url}: sha256 mismatch: expected {want}, got {digest} ({size} bytes); "
                            f"the file was not kept (the source changed, or the config pins the wrong digest)")
    if gunzip:
        out_tmp = dest.with_name(f".{dest.name}.{os.getpid()}.gunzip")
        with gzip.open(tmp, "rb") as src, open(out_tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(out_tmp, dest)
        tmp.unlink()
    else:
        os.replace(tmp, dest)
    _record(dest, url, digest, size)
    log(f"fetch {dest.name}: {size} bytes, sha256 {digest}" + ("" if want else " (not pinned: recorded only)"))
    return dest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rtpo.retrieval.fetch", description=__doc__.split("\n")[0])
    ap.add_argument("url")
    ap.add_argument("dest")
    ap.add_argument("--sha256", default=None)
    ap.add_argument("--gunzip", action="store_true", help="the URL is a .gz: store it decompressed")
    args = ap.parse_args(argv)
    try:
        download(args.url, args.dest, args.sha256, gunzip=args.gunzip)
    except DownloadError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
