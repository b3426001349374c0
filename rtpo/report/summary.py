"""`rtpo report summary`: the one-screen summary `scripts/pipeline.sh` prints after Snakemake ends.

    rtpo report summary --start EPOCH --rc STATUS -- <the arguments Snakemake got>

It reads the Snakemake log of the run (the newest .snakemake/log/*.snakemake.log written since
--start) and prints: Snakemake's exit status, the config, the jobs (run / planned, per rule, failed
ones with their rule logs), the wall time, where status.md, the tables, the figures and the logs are,
and, for a CPU-default run (config/config.yaml, no --config overrides) that succeeded with a reference
directory holding tables, the verdict of `rtpo report compare --reference reference/cpu-default
results/tables`. It never changes the pipeline's exit status: pipeline.sh ignores its own.
"""

from __future__ import annotations

import ast
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_CONFIG = "config/config.yaml"
REFERENCE = "reference/cpu-default"
# arguments after which Snakemake only reports (no jobs): no summary for them
INFO_FLAGS = {"-n", "--dry-run", "--dryrun", "-h", "--help", "--version", "-v", "-l", "--list", "--list-rules",
              "--lr", "--list-target-rules", "--lt", "--lint", "--summary", "-S", "--detailed-summary", "-D",
              "--dag", "--rulegraph", "--filegraph", "-d3dag", "--d3dag", "--report", "--archive", "--unlock",
              "--cleanup-metadata", "--cm", "--list-changes", "--lc", "--print-compilation", "--containerize",
              "--export-cwl", "--delete-all-output", "--delete-temp-output"}


@dataclass
class LogInfo:
    """What a Snakemake (9.x) log says about its run."""

    path: Path | None = None
    planned: Counter = field(default_factory=Counter)      # "Job stats:" table, rule -> count
    finished: Counter = field(default_factory=Counter)     # "Finished jobid: N (Rule: x)"
    failed: list[tuple[str, str]] = field(default_factory=list)   # (rule, its log line)
    config_files: list[str] | None = None
    nothing_to_do: bool = False


def parse_snakemake_log(text: str, path: Path | None = None) -> LogInfo:
    info = LogInfo(path=path)
    lines = text.splitlines()
    in_stats = False
    for i, line in enumerate(lines):
        s = line.strip()
        if s == "Job stats:":
            in_stats, info.planned = True, Counter()
            continue
        if in_stats:
            m = re.fullmatch(r"(\S+)\s+(\d+)", s)
            if m and m.group(1) != "total":
                info.planned[m.group(1)] = int(m.group(2))
            elif s and not s.startswith(("job", "---")):
                in_stats = False
        m = re.match(r"Finished job(?:id)?:? (\d+)(?: \(Rule: (\S+)\))?", s)
        if m:
            info.finished[m.group(2) or "?"] += 1
        m = re.match(r"Error in rule (\S+):", s)
        if m:
            log = ""
            for nxt in lines[i + 1:i + 12]:
                n = nxt.strip()
                if n.startswith("log:"):
                    log = n[4:].split(" (check log")[0].strip()
                    break
            info.failed.append((m.group(1), log))
        m = re.match(r"Config file\(s\): (\[.*\])", s)
        if m:
            try:
                info.config_files = [str(x) for x in ast.literal_eval(m.group(1))]
            except (ValueError, SyntaxError):
                pass
        if s.startswith("Nothing to be done"):
            info.nothing_to_do = True
    return info


def find_snakemake_log(workdir: str | Path, since: float) -> Path | None:
    """The newest .snakemake/log/*.snakemake.log of `workdir` modified at or after `since` (epoch s)."""
    logs = [p for p in (Path(workdir) / ".snakemake" / "log").glob("*.snakemake.log")
            if p.stat().st_mtime >= since - 1]
    return max(logs, key=lambda p: p.stat().st_mtime) if logs else None


def _option_values(args: list[str], names: tuple[str, ...]) -> list[str] | None:
    """The values given to any of the options `names` (None when none is given)."""
    vals: list[str] | None = None
    i = 0
    while i < len(args):
        a = args[i]
        name, eq, val = a.partition("=")
        if name in names:
            vals = vals or []
            if eq:
                vals.append(val)
            else:
                j = i + 1
                while j < len(args) and not args[j].startswith("-"):
                    vals.append(args[j])
                    j += 1
                i = j - 1
        i += 1
    return vals


def config_of(args: list[str], log: LogInfo | None) -> tuple[str, bool]:
    """(a description of the run's config, whether it is the CPU default: config/config.yaml only, no
    --config overrides, no profile)."""
    given = _option_values(args, ("--configfile", "--configfiles")) or [DEFAULT_CONFIG]
    files = log.config_files if log and log.config_files is not None else given
    overrides = _option_values(args, ("--config", "-C"))
    profile = _option_values(args, ("--profile",))

    def is_default(fs: list[str]) -> bool:
        return len(fs) == 1 and (str(Path(fs[0])) == DEFAULT_CONFIG or
                                 Path(fs[0]).resolve() == (Path.cwd() / DEFAULT_CONFIG).resolve())

    # both what Snakemake was given and what its log says it read
    default = is_default(given) and is_default(files) and not overrides and not profile
    desc = ", ".join(files) + (f" with --config {' '.join(overrides)}" if overrides else "") + \
        (f", --profile {' '.join(profile)}" if profile else "")
    return desc + (" (the CPU default)" if default else ""), default


def _duration(s: float) -> str:
    s = int(round(s))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    if not h and not m:
        return f"{sec} s"
    return (f"{h} h {m:02d} min {sec:02d} s" if h else f"{m} min {sec:02d} s") + f" ({s} s)"


def _rules(c: Counter, width: int = 88) -> list[str]:
    items = [f"{r} {n}" for r, n in sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))]
    lines, cur = [], ""
    for it in items:
        if cur and len(cur) + 2 + len(it) > width:
            lines.append(cur + ",")
            cur = it
        else:
            cur = f"{cur}, {it}" if cur else it
    return lines + ([cur] if cur else [])


def summary_lines(rc: int, start: float, args: list[str], workdir: str | Path = ".", end: float | None = None,
                  tables: str = "results/tables", figures: str = "figures", reference: str = REFERENCE,
                  log_path: str | Path | None = None) -> list[str]:
    """The summary, as lines (no trailing newlines). `args`: what Snakemake was given."""
    from rtpo.report.compare import compare_dirs, compared_files, report_lines

    wd = Path(workdir)
    end = time.time() if end is None else end
    lp = Path(log_path) if log_path else find_snakemake_log(wd, start)
    log = parse_snakemake_log(lp.read_text(errors="replace"), lp) if lp and lp.is_file() else None
    cfg, default = config_of(args, log)
    W = 18
    out = ["=" * 30 + " rtpo pipeline summary " + "=" * 30]

    def row(k: str, v: str) -> None:
        out.append(f"{k:<{W}}{v}")

    row("snakemake", f"exit status {rc}" + (" (success)" if rc == 0 else " (FAILED)"))
    row("config", cfg)
    if log is None:
        row("jobs", "unknown: no Snakemake log written since the start")
    elif log.nothing_to_do and not log.finished:
        row("jobs", "none: every output was up to date")
    else:
        done, planned = sum(log.finished.values()), sum(log.planned.values())
        row("jobs", f"{done} of {planned} run" + (f", {len(log.failed)} FAILED" if log.failed else ""))
        for ln in _rules(log.finished):
            row("", ln)
        for rule, rlog in log.failed[:5]:
            row("  failed", f"{rule}: {rlog or '(no log)'}")
        if len(log.failed) > 5:
            row("", f"... and {len(log.failed) - 5} more failed jobs (see the Snakemake log)")
    row("wall time", _duration(end - start))
    if log and log.path:
        row("snakemake log", str(log.path.relative_to(wd) if log.path.is_relative_to(wd) else log.path))
    row("rule logs", "results/logs/")
    st = wd / tables / "status.md"
    fresh = st.is_file() and st.stat().st_mtime >= start - 1
    row("status", f"{tables}/status.md" + ("" if st.is_file() else " (not written)")
        + ("" if fresh or not st.is_file() else " (from an earlier run)")
        + f"; timings: {tables}/timing_status.md")
    n_tables = len(list((wd / tables).glob("table*.csv"))) if (wd / tables).is_dir() else 0
    n_figs = len(list((wd / figures).glob("*.png"))) if (wd / figures).is_dir() else 0
    row("tables", f"{tables}/ ({n_tables} tables as CSV / Markdown / LaTeX, the claim ledger claims.*)"
        if n_tables else f"{tables}/ (no tables yet)")
    row("figures", f"{figures}/ ({n_figs} figures as PNG / PDF)" if n_figs else f"{figures}/ (no figures yet)")
    ref = wd / reference
    cmd = f"rtpo report compare --reference {reference} {tables}"
    if not default:
        row("reference check", "not run: not the CPU default config")
    elif rc != 0:
        row("reference check", f"not run: snakemake exited {rc}")
    elif not ref.is_dir() or not compared_files(ref):
        row("reference check", f"not run: {reference} holds no reference tables yet")
    elif not (wd / tables).is_dir():
        row("reference check", f"not run: no {tables}")
    else:
        try:
            lines = report_lines(compare_dirs(ref, wd / tables), details=0, only_different=True)
        except (OSError, ValueError) as e:
            row("reference check", f"failed: {e}")
        else:
            shown = [ln for ln in lines[:-1] if not ln.startswith("    ")]
            for ln in shown[:8]:
                ln = ln.split("; worst:")[0].split("; closest")[0]
                out.append("  " + (ln if len(ln) <= 118 else ln[:115] + "..."))
            if len(shown) > 8:
                out.append(f"  ... and {len(shown) - 8} more tables")
            row("reference check", lines[-1])
            row("", f"(details: {cmd}; the exit status above is Snakemake's)")
    out.append("=" * 83)
    return out


def wants_summary(args: list[str]) -> bool:
    """False for Snakemake invocations that only report (dry run, --help, --dag, ...)."""
    return not any(a.split("=", 1)[0] in INFO_FLAGS or (re.fullmatch(r"-[A-Za-z]{2,}", a) and "n" in a)
                   for a in args)
