"""The run lists and dry-run job lists of every shipped config, as small text files that a test keeps
(tests/test_snapshots.py): a refactor of the experiment model, the DAG or the rules must leave them
byte-identical; a config or rule changed on purpose rewrites them with `--write` (and the diff is the
change, to read in review).

    python scripts/snapshot_runs.py            compare with tests/snapshots/ (exit 1 naming what differs)
    python scripts/snapshot_runs.py --write    rewrite tests/snapshots/ from config/*.yaml (and the overlays)
    python scripts/snapshot_runs.py --only smoke --no-jobs   one config, run list only (seconds)

Per config NAME (config/NAME.yaml; config+LAYER: config/config.yaml with config/overlays/LAYER.yaml over it, as
`--configfile config/config.yaml config/overlays/LAYER.yaml` merges them):
  NAME.runs.txt   one line per run of `Experiment(cfg).runs`, in order: its key, `--set` overrides, seed
                  group, the run it copies, the sha256 (16 hex) of its effective settings and of its
                  evaluation settings, and its checkpoint stamp;
  NAME.jobs.txt   one block per job of `snakemake -n` (the default target `all`, and `sweep` where the
                  config has a sweep), sorted: rule, input, output, wildcards, threads (a list of more
                  than 8 files as its count and sha256; job ids, reasons, logs and resources left out).
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOTS = ROOT / "tests" / "snapshots"
JOB_FIELDS = ("input", "output", "wildcards", "threads")
ENV = {"PYTHONHASHSEED": "0", "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1"}


def configs() -> list[str]:
    return (sorted(p.stem for p in (ROOT / "config").glob("*.yaml"))
            + sorted(f"config+{p.stem}" for p in (ROOT / "config" / "overlays").glob("*.yaml")))


def config_files(name: str) -> list[str]:
    """The --configfile arguments of a snapshot name, relative to the repository: config/NAME.yaml, or for
    BASE+LAYER config/BASE.yaml and config/overlays/LAYER.yaml."""
    base, _, layer = name.partition("+")
    return [f"config/{base}.yaml"] + ([f"config/overlays/{layer}.yaml"] if layer else [])


def merged_config(name: str) -> dict:
    """The config of a snapshot name as Snakemake sees it: its files merged in order (snakemake.utils.update_config:
    mappings merged key by key, anything else replaced)."""
    import yaml
    from snakemake.utils import update_config

    cfg: dict = {}
    for f in config_files(name):
        update_config(cfg, yaml.safe_load((ROOT / f).read_text()) or {})
    return cfg


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_list(name: str, sets: list[str] | None = None) -> str:
    """NAME.runs.txt: every run of config/NAME.yaml (schema defaults filled; `sets`: --set overrides), one line
    each."""
    from rtpo.config import load_config
    from rtpo.experiment import Experiment, fingerprint

    with tempfile.TemporaryDirectory(prefix="rtpo-snapshot-") as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(__import__("yaml").safe_dump(merged_config(name), sort_keys=False))
        exp = Experiment(load_config(path, sets))
    lines = []
    for r in exp.runs:
        group = ",".join(str(s) for s in r.seed_group)
        copy = str(r.copy_of) if r.copy_of is not None else "-"
        lines.append(f"{r.key} | sets {' '.join(r.sets) or '-'} | group {group} | copy_of {copy} | "
                     f"settings {_sha(fingerprint(r.settings))} | eval {_sha(fingerprint(r.eval_settings))} | "
                     f"stamp {r.stamp}")
    return "\n".join(lines) + "\n"


def _workflow_copy(dest: Path) -> Path:
    for d in ("workflow", "config", "slurm"):
        shutil.copytree(ROOT / d, dest / d, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "environment.yml", dest / "environment.yml")
    return dest


def _short_list(value: str, most: int = 8) -> str:
    """A field's value as printed, or for a long list of files (a report rule's inputs) its count and hash."""
    items = value.split(", ")
    return value if len(items) <= most else f"{len(items)} files, sha256 {_sha(value)}"


def dry_run_jobs(output: str) -> list[str]:
    """The jobs of a `snakemake -n` output, one text block each (the fields of JOB_FIELDS), sorted."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:\n)", output):
        m = re.match(r"(?:local)?rule (\w+):\n", block)
        if not m:
            continue
        fields = [f"rule {m.group(1)}"]
        for key in JOB_FIELDS:
            km = re.search(rf"^    {key}: (.*)$", block, re.M)
            if km:
                fields.append(f"    {key}: {_short_list(km.group(1))}")
        jobs.append("\n".join(fields))
    return sorted(jobs)


def job_list(name: str) -> str:
    """NAME.jobs.txt: `snakemake -n` of config/NAME.yaml (target all, and sweep where there is one)."""
    snakemake = Path(sys.executable).parent / "snakemake"
    has_sweep = bool(merged_config(name).get("sweep"))
    files = config_files(name)
    out = []
    with tempfile.TemporaryDirectory(prefix="rtpo-snapshot-") as tmp:
        work = _workflow_copy(Path(tmp))
        for target in ["all"] + (["sweep"] if has_sweep else []):
            r = subprocess.run([str(snakemake), "-n", target, "--configfile", *files], cwd=work,
                               env={**os.environ, **ENV}, capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                raise SystemExit(f"snakemake -n {target} --configfile {' '.join(files)} failed:\n"
                                 f"{(r.stdout + r.stderr)[-3000:]}")
            jobs = dry_run_jobs(r.stdout)
            out.append(f"# target {target}: {len(jobs)} jobs\n" + "\n".join(jobs))
    return "\n".join(out) + "\n"


def snapshots(names: list[str], jobs: bool = True) -> dict[str, str]:
    """{file name: text} of the snapshots of these configs."""
    files = {}
    for name in names:
        files[f"{name}.runs.txt"] = run_list(name)
        if jobs:
            files[f"{name}.jobs.txt"] = job_list(name)
    return files


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--write", action="store_true", help="rewrite tests/snapshots/ instead of comparing")
    p.add_argument("--only", nargs="+", default=None, metavar="NAME", help="these configs (default: config/*.yaml)")
    p.add_argument("--no-jobs", action="store_true", help="run lists only (no snakemake -n)")
    args = p.parse_args(argv)
    files = snapshots(args.only or configs(), jobs=not args.no_jobs)
    if args.write:
        SNAPSHOTS.mkdir(parents=True, exist_ok=True)
        for fname, text in files.items():
            (SNAPSHOTS / fname).write_text(text)
            print(f"wrote {SNAPSHOTS.relative_to(ROOT) / fname} ({text.count(chr(10))} lines)")
        return 0
    bad = 0
    for fname, text in files.items():
        path = SNAPSHOTS / fname
        old = path.read_text() if path.exists() else ""
        if old != text:
            bad += 1
            diff = difflib.unified_diff(old.splitlines(), text.splitlines(), str(path), "now", lineterm="", n=1)
            print("\n".join(list(diff)[:60]))
    print(f"{len(files) - bad} of {len(files)} snapshots identical" + ("" if not bad else
          "; if the change is on purpose: python scripts/snapshot_runs.py --write"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
