"""`rtpo report reference`: make a reference directory from a run's tables (the tool beside comparing,
rtpo.report.compare): the compared CSV tables copied, and a README.md with the provenance a later
comparison needs (commit, date, CPU, the torch and MKL settings that change float results, the config).

    rtpo report reference --tables results/tables --out reference/cpu-default
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from rtpo.report.compare import compared_files, read_table


REFERENCE_COMMAND = "rtpo report reference --tables results/tables --figures figures --out reference/cpu-default"


def machine_info(cpuinfo: str | Path = "/proc/cpuinfo") -> dict[str, str]:
    """CPU model, the instruction-set flags that change MKL's kernels (avx2, avx512f), logical CPUs,
    and the torch version and MKL_CBWR setting ('unknown' where not readable)."""
    import os
    import platform
    from importlib import metadata

    info = {"cpu": platform.processor() or "unknown", "avx2": "unknown", "avx512f": "unknown",
            "logical_cpus": str(os.cpu_count() or "unknown"), "platform": platform.platform()}
    try:
        text = Path(cpuinfo).read_text()
        for line in text.splitlines():
            k, _, v = line.partition(":")
            if k.strip() == "model name" and info["cpu"] in ("unknown", platform.processor()):
                info["cpu"] = v.strip()
            if k.strip() == "flags":
                flags = set(v.split())
                info["avx2"], info["avx512f"] = ("yes" if "avx2" in flags else "no"), (
                    "yes" if "avx512f" in flags else "no")
                break
    except OSError:
        pass
    try:
        info["torch"] = metadata.version("torch")
    except metadata.PackageNotFoundError:
        info["torch"] = "not installed"
    info["MKL_CBWR"] = os.environ.get("MKL_CBWR", "(unset)")
    return info


def git_commit(root: str | Path) -> str:
    """HEAD of the checkout at `root`, with ' (uncommitted changes)' when tracked files differ; 'unknown'."""
    import subprocess

    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True, timeout=30).stdout.strip()
        return head + (" (uncommitted changes)" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def reference_readme(meta: Mapping[str, str], files: list[str], figures: list[str] = ()) -> str:
    """The README.md of a reference directory: what it is, where it came from, how it is used and remade."""
    prov = "\n".join(f"| {k} | {v} |" for k, v in meta.items())
    listing = ", ".join(f"`{f}`" for f in files) or "(none yet)"
    figs = ("\n\n## Figures\n\nThe same run's figures (PNG), to hold yours beside: "
            + ", ".join(f"[{Path(f).stem}](figures/{f})" for f in figures)
            + ". They are not compared (`rtpo report compare` reads the CSVs); a re-drawn run's curves differ "
            "within the tables' stated uncertainty.") if figures else ""
    return f"""# Reference tables of the CPU default

The non-timing CSV tables of one run of the CPU-default DAG (`bash scripts/pipeline.sh`,
`config/config.yaml`), kept so that a run elsewhere can tell float drift from a broken install:

```bash
rtpo report compare --reference reference/cpu-default results/tables
```

prints per table `identical`, `within` (every number that differs lies within the uncertainty the
table itself states for it: the 95 % CI half-width over seeds for a mean, t x the seed std for a
per-seed value, the larger of the reference's and the run's), `BEYOND` (naming the table, row, column,
both values and the bound; `[at chance level]` when no more numbers are out than a re-drawn run gives
by chance), `STRUCTURE` (rows or columns added or missing) or `MISSING`, and a one-line verdict; exit
status 0 for identical / within, 1 otherwise, 2 for bad input. `scripts/pipeline.sh` prints the verdict
at the end of a CPU-default run. The rules, column by column: `rtpo/report/compare.py`.

On the machine below, a rerun gives `verdict: identical`. On another CPU (AVX2 against AVX-512 MKL
kernels round differently; so does another thread count or torch version) the first differing float
changes which tokens are sampled and every number downstream is a re-draw: expect `within` and
`BEYOND [at chance level]` tables, and, for a cell whose table states no uncertainty for it (a theory
check, a run of one seed), `BEYOND` "where the table states none". Matching this machine's setting may narrow
the drift (the same `model.threads` / `sft.threads`, torch version, `MKL_CBWR=COMPATIBLE`,
`ATEN_CPU_CAPABILITY`); none of that has been tested here.

Not kept (never compared): `timing_*` (wall-clock), `report_inputs.csv` (absolute paths), the `.md` /
`.tex` renderings of the same CSVs, `status.md` (markdown; its numbers come from the CSVs here) and
`report_missing.txt` (paths).

## Provenance

| | |
|---|---|
{prov}

Files: {listing}{figs}

## Regenerate

After a complete CPU-default run (`bash scripts/pipeline.sh` on a clean checkout of the commit to
record), from the repository root:

```bash
.venv/bin/{REFERENCE_COMMAND}
```

It copies exactly the compared files (removing other CSVs here) and rewrites this README with the
commit, date, CPU model and its avx2 / avx512f flags.
"""


REFERENCE_PNG_WIDTH = 1000  # px: a figure to hold one's own beside, not to print (the run's are 150 dpi, ~2,000 px)


def small_png(src: str | Path, dst: str | Path, width: int = REFERENCE_PNG_WIDTH) -> None:
    """A reference copy of a figure: at most `width` pixels wide, 256 colours (plots use a handful), so that
    the committed figures stay small (~6x smaller than the run's)."""
    from PIL import Image

    with Image.open(src) as im:
        im = im.convert("RGB")  # matplotlib draws on an opaque white face
        if im.width > width:
            im = im.resize((width, round(im.height * width / im.width)), Image.Resampling.LANCZOS)
        im.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(dst, optimize=True)


def _in_repo(path: str | Path, root: str | Path) -> str:
    """`path` relative to the repository root, so the README names no directory of the machine that made it;
    outside the repository, its last two parts (e.g. results/tables)."""
    p = Path(path).resolve()
    try:
        return p.relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        return Path(*p.parts[-2:]).as_posix()


def make_reference(tables: str | Path, out: str | Path, config: str | Path | None = None,
                   commit: str | None = None, root: str | Path | None = None,
                   figures: str | Path | None = None) -> list[Path]:
    """Copy the compared CSV tables of `tables` into `out` (other CSVs there removed), the PNG figures of
    `figures` (if given; the sweep's aside) into `out/figures` (other PNGs there removed, all of them
    without `figures`: an earlier run's figures are not this run's), and write its README.md
    (reference_readme) with commit, date, CPU and config provenance; returns the paths written."""
    import datetime
    import hashlib
    import shutil

    from rtpo.atomic import atomic_write_text

    tables, out = Path(tables), Path(out)
    if not tables.is_dir():
        raise FileNotFoundError(f"tables directory {tables} does not exist")
    files = compared_files(tables)
    if not files:
        raise ValueError(f"tables directory {tables} holds no tables to keep (run the DAG first)")
    for f in files:
        read_table(tables / f)  # a truncated table fails here, before anything is replaced
    pngs: list[str] = []
    if figures is not None:  # checked before anything is replaced, too
        figures = Path(figures)
        # the CPU default's figures; the mechanism sweep's (sweep_*) belong to its own reference (reference/sweep)
        pngs = sorted(p.name for p in figures.glob("*.png") if not p.name.startswith("sweep_")) if figures.is_dir() else []
        if not pngs:
            raise ValueError(f"figures directory {figures} holds no PNG figures (run the DAG's figures first)")
    if root is None:
        from rtpo.config import ROOT as root
    commit = commit or git_commit(root)  # before anything is written here: the reference itself is tracked
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.csv"):
        if old.name not in files:
            old.unlink()
    written = []
    for f in files:
        shutil.copyfile(tables / f, out / f)
        written.append(out / f)
    for old in (out / "figures").glob("*.png"):  # figures of an earlier run: not this run's, so not kept
        if old.name not in pngs:
            old.unlink()
    if pngs:
        (out / "figures").mkdir(exist_ok=True)
        for f in pngs:
            small_png(figures / f, out / "figures" / f)
            written.append(out / "figures" / f)
    meta = {"commit": commit,
            "made": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "from": _in_repo(tables, root)}
    if config is not None and Path(config).is_file():
        meta["config"] = f"{_in_repo(config, root)} (sha256 {hashlib.sha256(Path(config).read_bytes()).hexdigest()[:16]})"
    meta.update(machine_info())
    atomic_write_text(out / "README.md", reference_readme(meta, files, pngs))
    return [*written, out / "README.md"]
