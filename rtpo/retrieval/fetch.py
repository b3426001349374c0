"""Pinned downloads: a URL fetched over HTTPS into a file whose sha256 must match the recorded one.

Used by the data job (ARPO's evaluation and training files at a fixed commit) and by the corpus
rule (wiki-18). Plain http is accepted only from a loopback host (the tests serve fixtures from
127.0.0.1); `file:<path>` (a path relative to the working directory, or `file:///abs/path`) copies a
local file through the same checks, so a config can point the same rule at fixture files
(config/rehearsal.yaml). A file already in place with the right sha256 is not fetched again. A mismatch is an
error naming the URL and both digests, and the downloaded bytes are not kept. Every fetch is
recorded beside the file in `<dest>.source.json` (url, sha256, bytes, time).

    python -m rtpo.retrieval.fetch URL DEST [--sha256 HEX] [--gunzip]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
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


def download(url: str, dest: str | Path, sha256: str | None = None, timeout: float = 60.0,
             retries: int = 3, gunzip: bool = False, log=None) -> Path:
    """Fetch `url` to `dest` (atomically) and check its sha256 (of the downloaded bytes, before any
    --gunzip). sha256=None records the digest without checking it (a source not yet pinned)."""
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
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.part")
    last = ""
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(2.0 * attempt)
        h, size = hashlib.sha256(), 0
        try:
            req = urllib.request.Request(url, headers={"User-Agent": "rtpo-artifact"})
            src = open(u.path, "rb") if u.scheme == "file" else urllib.request.urlopen(req, timeout=timeout)
            with src as r, open(tmp, "wb") as f:
                total = int(r.headers.get("Content-Length") or 0) if u.scheme != "file" else os.path.getsize(u.path)
                next_report = 0.05
                while b := r.read(1 << 20):
                    h.update(b)
                    f.write(b)
                    size += len(b)
                    if total > 50 << 20 and size / total >= next_report:
                        log(f"fetch {dest.name}: {100 * size / total:.0f} % of {total >> 20} MiB")
                        next_report += 0.05
            break
        except urllib.error.HTTPError as e:
            tmp.unlink(missing_ok=True)
            if e.code < 500 and e.code != 429:
                raise DownloadError(f"{url}: HTTP {e.code} {e.reason}") from None
            last = f"HTTP {e.code} {e.reason}"
        except (urllib.error.URLError, OSError) as e:
            tmp.unlink(missing_ok=True)
            last = f"{type(e).__name__}: {getattr(e, 'reason', e)}"
    else:
        raise DownloadError(f"{url}: failed after {retries + 1} attempts ({last})")
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
