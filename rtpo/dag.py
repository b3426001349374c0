"""The pipeline's DAG as plain Python: the rules' jobs, their seed groups, settings params, stamps and target
lists, as functions of the validated config. Every run, its settings, stamp and the run it copies come from
rtpo.experiment (`Experiment(cfg).runs`), which the start-up check and the report read too; this module adds
what only the workflow needs (jobs of several seeds, the training shell, paper-scale search data, targets).

workflow/rules/common.smk builds one `Dag(config)` (its PIPELINE) and the rules read it; tests/test_dag.py tests it
without Snakemake. Nothing here knows Snakemake: errors are `rtpo.config.ConfigError`, which
common.smk turns into a WorkflowError naming the config files.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rtpo.config import ConfigError
from rtpo.experiment import (MAIN, RTPO_STUDIES, STUDIES, SWEEP, TASK_KINDS, UNTRAINED, AblationCell, Experiment, Run,
                             RunKey, SweepCell, data_file, group_label, seed_groups, study_methods, study_tasks,
                             sweep_errors)
from rtpo.report.table_names import table_runs


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------
def keys_regex(keys: Iterable[str]) -> str:
    """A wildcard constraint matching exactly these keys (never matching when empty)."""
    return "|".join(re.escape(k) for k in sorted(keys)) or "(?!)"


def key_args(scope: str, variant: str = "") -> str:
    """`--scope S --variant V` of `rtpo train`: the run's key in the experiment, which it writes to run.json."""
    return f"--scope {shlex.quote(scope)}" + (f" --variant {shlex.quote(variant)}" if variant else "")


def set_args(sets: Iterable[str]) -> str:
    """`--set key=value` arguments of a shell command, each quoted."""
    return " ".join(f"--set {shlex.quote(s)}" for s in sets)


def effective_config(cfg: Mapping[str, Any], sources: str) -> tuple[str, str]:
    """The config exactly as Snakemake sees it (config files merged, --config applied, schema
    defaults filled): (results/config/<name>-<sha256[:12]>.yaml, its text).

    Every `rtpo` command reads this file, so jobs and DAG agree on the settings. The name is
    content-addressed: another config, or an edited one, gets a new file and never changes the one
    that running jobs read.
    """
    text = yaml.safe_dump(dict(cfg), sort_keys=True, default_flow_style=False)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    path = Path("results") / "config" / f"{cfg['name']}-{digest}.yaml"
    return str(path), f"# written by workflow/rules/common.smk from: {sources}\n{text}"


def cross_reference_errors(cfg: Mapping[str, Any]) -> list[str]:
    """What the JSON schema cannot express: every listed method, task and ablation task has its
    section. One message per missing key ("'env.math' is missing, but 'tasks' uses it")."""
    errors = []

    def need(section: str, key: str, used_by: str) -> None:
        if key not in cfg.get(section, {}):
            errors.append(f"'{section}.{key}' is missing, but {used_by} uses it")

    for m in cfg["methods"]:
        need("method", m, "'methods'")
    for t in cfg["tasks"]:
        need("env", t, "'tasks'")
        need("data", t, "'tasks'")
    abl = cfg["ablations"]
    for study in STUDIES:
        if study in abl:
            where = f"'ablations.{study}.mini_batches'" if study == "matched_updates" else f"'ablations.{study}.task'"
            for task in study_tasks(abl, study):
                need("env", task, where)
                need("data", task, where)
    for study in RTPO_STUDIES:
        if study in abl:
            need("method", "rtpo", f"'ablations.{study}'")
    for study in ("credit_assignment", "mismatch", "matched_updates", "turn_rows"):
        if study in abl:
            for m in study_methods(abl, study):
                need("method", m, f"'ablations.{study}.methods'")
    counts = cfg.get("seed_counts") or {}
    for t, by_method in counts.items():
        if t not in cfg["tasks"]:
            errors.append(f"'seed_counts.{t}' names a task that 'tasks' {cfg['tasks']} does not run")
        for m in by_method or {}:
            if m not in cfg["methods"]:
                errors.append(f"'seed_counts.{t}.{m}' names a method that 'methods' {cfg['methods']} does not run")
    if counts and [int(s) for s in cfg["seeds"]] != list(range(len(cfg["seeds"]))):
        # a cell of seed_counts runs 0..n-1: a `seeds` list that is not 0..n-1 would share fewer seeds with it
        errors.append(f"'seeds' {cfg['seeds']} must be 0..n-1 when 'seed_counts' is set (every cell's seeds "
                      "start at 0, so that comparisons pair by seed)")
    per_job = int(cfg.get("seeds_per_job", 1))
    if per_job > 1 and cfg["engine"] == "verl":
        errors.append(f"'seeds_per_job' is {per_job}, but the verl engine trains one seed per job (set it to 1)")
    if per_job > 1 and "airline" in cfg["tasks"] and not set(abl["seeds"]) <= set(cfg["seeds"]):
        errors.append(f"'ablations.seeds' {abl['seeds']} must be among 'seeds' {cfg['seeds']} when seeds_per_job > 1 "
                      "(the airline study's runs are main-grid runs, trained in the main grid's seed groups)")
    airline_counts = (counts.get("airline") or {}) if "airline" in cfg["tasks"] else {}
    for m, n in airline_counts.items():
        if per_job > 1 and int(n) > 0 and not set(abl["seeds"]) <= set(range(int(n))):
            errors.append(f"'ablations.seeds' {abl['seeds']} must be among the {n} seeds of 'seed_counts.airline.{m}' "
                          "when seeds_per_job > 1 (the airline study's runs are main-grid runs, trained in that "
                          "cell's seed groups)")
    if cfg.get("sweep"):
        need("env", "search", "'sweep'")
        need("data", "search", "'sweep'")
        need("method", "rtpo", "'sweep' (its budget)")
        for m in cfg["sweep"]["methods"]:
            need("method", m, "'sweep.methods'")
        for m in (cfg["sweep"].get("optional") or {}).get("methods") or []:
            need("method", m, "'sweep.optional.methods'")
        if cfg["sweep"].get("no_rl", True):
            need("method", UNTRAINED, "'sweep.no_rl' (the sweep base model evaluated untrained)")
        errors += sweep_errors(cfg)
    search = SearchData.of(cfg)
    if search.index and not search.corpus:
        errors.append("'data.search.retriever.index' needs 'data.search.corpus' (the corpus it is built from)")
    return errors


# ---------------------------------------------------------------------------------------------
# Jobs of several seeds, and the training shell
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SeedJob:
    """One rule of a per-seed family (training or evaluation of a cell): `seeds` None = one job per
    seed through the rule's {seed} wildcard (seeds_per_job 1; the verl path); otherwise these seeds
    in one job, one process (`rtpo train --seed ...`), with a rule of their own."""

    rule: str
    seeds: tuple[int, ...] | None
    constraints: tuple[tuple[str, str], ...] = ()  # (wildcard, regex): the cells this group's rule makes

    @property
    def wildcard_constraints(self) -> dict[str, str]:
        """The rule's `wildcard_constraints` ({} = the workflow's global ones)."""
        return dict(self.constraints)

    def paths(self, pattern: str) -> list[str]:
        """`pattern` (with "{seed}") for each seed of the job; the pattern itself for the wildcard job."""
        if self.seeds is None:
            return [pattern]
        return [pattern.replace("{seed}", str(s)) for s in self.seeds]

    @property
    def label(self) -> str:
        return "seed{seed}" if self.seeds is None else group_label(self.seeds)

    @property
    def priority(self) -> int:
        """Snakemake's `priority` of a training rule: the number of seeds the job trains, so that among the
        jobs ready to run the longest start first and the DAG does not end on one long job running alone
        (the CPU default at 1b549fd, in the DAG's order: search SeeUPO seeds 0-3, 8.2 min, started last and
        ran alone for its last 7 min). Evaluations keep 0: short jobs that fill the end."""
        return 1 if self.seeds is None else len(self.seeds)

    def seed_arg(self, wildcards: Any = None) -> str:
        """The `--seed` argument: the job's seeds, or the {seed} wildcard's value."""
        return str(wildcards.seed) if self.seeds is None else " ".join(str(s) for s in self.seeds)


# The training job: `rtpo train` over the job's seeds, each the experiment's run of its key (`--scope`,
# `--variant`, task, method, seed), which brings its own `--set` overrides and settings (rtpo.experiment).
# `--job-guard` is the checkpoint guard (rtpo.checkpoints.job_guard, with the run's stamp): a run
# directory resumes only from a checkpoint this very job left behind (Slurm timeout, preemption, Ctrl-C +
# --rerun-incomplete, a failed seed); a rerun because settings changed, an input was rebuilt, --forcerun or
# a deleted output starts from scratch. `exec`: the job's process is `rtpo train` itself, which on SIGTERM /
# SIGINT finishes its step, saves a checkpoint and exits 143 (Slurm signals every process of the job; no
# shell in between to die first).
TRAIN_SHELL = ("exec rtpo train --config {params.config} --method {params.method} --task {params.task} "
               "--seed {params.seeds} --model {input.model} --train-file {input.train} {params.key} "
               "--out {params.out} --job-guard {params.logs} > {log.job} 2>&1")


# ---------------------------------------------------------------------------------------------
# Paper-scale search data (rules/data.smk, rules/retrieval.smk)
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SearchData:
    """What `data.search` asks the retrieval rules for: a corpus to fetch ({path, url, sha256?}), an
    index to build from it (a retriever of kind http / bm25_index / dense_index with an `index`), and
    whether that index is the optional e5 + faiss one (rtpo/retrieval/dense.py)."""

    corpus: dict | None
    retriever: dict
    index: str | None
    dense: bool

    @classmethod
    def of(cls, cfg: Mapping[str, Any]) -> "SearchData":
        search = (cfg["data"].get("search") or {}) if "search" in cfg["data"] else {}
        corpus = search.get("corpus") if isinstance(search.get("corpus"), dict) else None
        retriever = search.get("retriever") or {}
        index = retriever.get("index") if retriever.get("kind") in ("http", "bm25_index", "dense_index") else None
        dense = retriever.get("kind") == "dense_index" or bool(retriever.get("dense"))
        return cls(corpus, retriever, index, dense)

    @property
    def build_index_command(self) -> str:
        if self.dense:
            return f"python -m rtpo.retrieval.dense build --model {self.retriever.get('model', 'intfloat/e5-base-v2')}"
        return "python -m rtpo.retrieval.index build"

    def inputs(self, task: str) -> dict[str, str]:
        """What prepare_data of `task` needs built first: {"index": dir} or {"corpus": file} or {}."""
        if task != "search" or not self.corpus:
            return {}
        if self.index:
            return {"index": self.index}
        if self.retriever.get("kind", "bm25") == "bm25":
            return {"corpus": self.corpus["path"]}
        return {}


# ---------------------------------------------------------------------------------------------
# The DAG of one config
# ---------------------------------------------------------------------------------------------
class Dag:
    """The jobs of one validated config (schema defaults filled in): the runs of its `Experiment`, the rules'
    seed groups, each job's settings and the target lists."""

    def __init__(self, cfg: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> None:
        self.cfg = cfg
        self.environ = os.environ if environ is None else environ  # the web-search key (prepare_settings)
        self.experiment = exp = Experiment(cfg)
        self.tasks, self.methods, self.seeds = exp.tasks, exp.methods, exp.seeds
        self.seeds_per_job = exp.seeds_per_job
        self.threads = int(cfg["model"]["threads"])  # threads of a training / evaluation job
        self.base_threads = int(cfg["sft"].get("threads", self.threads))  # the base-model job (runs alone)
        self.ablations = cfg["ablations"]
        self.ablation_seeds = exp.ablation_seeds
        # Every method with a config section gets a training rule train_<method> (`--forcerun train_rtpo`).
        self.trainable = sorted(cfg["method"])
        self.search = SearchData.of(cfg)
        self.cells: list[AblationCell] = exp.arms
        self.reused: dict[str, tuple[str, str] | None] = exp.copies  # arm key -> (task, method) it copies, or None
        self.cell_by_key = {c.key: c for c in self.cells}
        self.sweep = exp.sweep
        self.sweep_seeds = exp.sweep_seeds
        self.sweep_by_key = exp.sweep_by_key
        # the settings of the jobs upstream of the runs and of the main grid's (rtpo.experiment computes each once)
        self.run_settings, self.eval_settings = exp.run_settings, exp.eval_settings
        self.data_settings, self.base_model_settings = exp.data_settings, exp.base_model_settings
        self.sweep_hops, self.sweep_data_settings, self.sweep_base_settings = (exp.sweep_hops, exp.sweep_data_settings,
                                                                               exp.sweep_base_settings)

    # ------------------------------------------------------------------ the runs
    def all_main_cells(self) -> list[tuple[str, str, int]]:
        """(task, method, seed) of every main-grid run (the airline study's included), sorted."""
        return sorted(r.key.task_method_seed() for r in self.experiment.select(MAIN))

    def all_tasks(self) -> list[str]:
        """Every task some job needs data for."""
        tasks = set(self.tasks)
        for study in STUDIES:
            if study in self.ablations:
                tasks.update(study_tasks(self.ablations, study))
        return sorted(tasks)

    def trained_cells(self) -> list[AblationCell]:
        return [c for c in self.cells if self.reused[c.key] is None]

    def reused_cells(self) -> list[AblationCell]:
        return [c for c in self.cells if self.reused[c.key] is not None]

    @functools.cached_property
    def copied_runs(self) -> dict[str, Run]:
        """{the {run} wildcard of a copied arm's seed (its key + /seedS): its Run, whose copy_of is the main run}."""
        return {f"{r.scope}/{r.variant}/{r.task}/{r.method}/seed{r.seed}": r for r in self._copied()}

    @functools.cached_property
    def copied_evals(self) -> dict[str, Run]:
        """{the {evalrun} wildcard of a copied arm's evaluation (its key + /eval_seedS): its Run}."""
        return {f"{r.scope}/{r.variant}/{r.task}/{r.method}/eval_seed{r.seed}": r for r in self._copied()}

    def _copied(self) -> list[Run]:
        return [r for r in self.experiment.runs if r.scope not in (MAIN, SWEEP) and r.copy_of is not None]

    def cell(self, key: str) -> AblationCell:
        """The arm of a {cell} wildcard value."""
        return self.cell_by_key[key]

    def job_run(self, cell: AblationCell | SweepCell) -> Run:
        """The run of the first seed of an arm's or a sweep cell's job: its method, task, `--set` overrides,
        settings and inputs are every seed's."""
        return self.experiment.run(RunKey(cell.scope, cell.variant, cell.task, cell.method, cell.seeds[0]))

    # ------------------------------------------------------------------ jobs of several seeds
    def seed_jobs(self, rule: str, seeds: Iterable[int]) -> list[SeedJob]:
        """The jobs of a per-seed rule family over `seeds` (`seeds_per_job` at a time): one wildcard
        rule `rule` when seeds_per_job is 1; else one rule per seed group, named `rule` when one group
        holds every seed, `rule`_seeds0to4 ... otherwise (its files: seeds0-4)."""
        if self.seeds_per_job == 1:
            return [SeedJob(rule, None)]
        groups = seed_groups(seeds, self.seeds_per_job)
        if len(groups) == 1:
            return [SeedJob(rule, groups[0])]
        return [SeedJob(f"{rule}_{group_label(g).replace('-', 'to')}", g) for g in groups]  # a rule name is a word

    def main_seed_jobs(self, rule: str, method: str | None = None) -> list[SeedJob]:
        """The jobs of a main-grid per-seed rule family: train_<method> (`method`: its cells, one per task)
        or evaluate_run (every cell). When every cell has the same seed groups, seed_jobs' rules (no
        constraint); when seed_counts gives cells different groups (a 5-seed cell at 4 per job: seeds0-3 and
        seed4; a 3-seed cell: seeds0-2), one rule per group, its {task} (and {method}) wildcards constrained
        to the cells that have that group, so that no two rules make the same file."""
        groups: dict[tuple[str, str], set[tuple[int, ...]]] = {}
        for r in self.experiment.select(MAIN):
            if method is None or r.method == method:
                groups.setdefault((r.task, r.method), set()).add(r.seed_group)
        if self.seeds_per_job == 1 or len({frozenset(g) for g in groups.values()}) <= 1:
            # one set of groups for every cell (or no main cell: a method only the ablations train)
            seeds = [s for g in sorted(next(iter(groups.values()), ())) for s in g] or self.seeds
            return self.seed_jobs(rule, seeds)
        jobs = []
        for g in sorted(set().union(*groups.values())):
            by_method: dict[str, set[str]] = {}
            for (t, m), gs in groups.items():
                if g in gs:
                    by_method.setdefault(m, set()).add(t)
            # methods whose cells with this group are on the same tasks share a rule: {task} x {method}
            parts: dict[frozenset, list[str]] = {}
            for m, ts in by_method.items():
                parts.setdefault(frozenset(ts), []).append(m)
            label = group_label(g).replace("-", "to")  # a rule name is a word
            for tasks, methods in sorted(parts.items(), key=lambda kv: sorted(kv[1])):
                name = f"{rule}_{label}" if len(parts) == 1 else f"{rule}_{label}_{'_'.join(sorted(methods))}"
                cons = (("task", keys_regex(tasks)),) + ((("method", keys_regex(methods)),) if method is None else ())
                jobs.append(SeedJob(name, g, cons))
        return jobs

    def ablation_seed_jobs(self, rule: str) -> list[SeedJob]:
        """The jobs of a trained arm's per-seed rule family (ablation_train, ablation_evaluate), the {cell}
        wildcard constrained to the trained arms: seed_jobs over ablations.seeds when every trained arm
        runs the same seeds; one rule per seed group when a study's own `seeds` differ (its {cell}
        constrained to the arms that have that group)."""
        trained = self.trained_cells()
        groups = {c.key: frozenset(seed_groups(c.seeds, self.seeds_per_job)) for c in trained}
        if self.seeds_per_job == 1 or len(set(groups.values())) <= 1:
            seeds = list(trained[0].seeds) if trained else self.ablation_seeds
            cons = (("cell", keys_regex(groups)),)
            return [SeedJob(j.rule, j.seeds, cons) for j in self.seed_jobs(rule, seeds)]
        jobs = []
        for g in sorted(set().union(*groups.values())):
            keys = [k for k, gs in groups.items() if g in gs]
            jobs.append(SeedJob(f"{rule}_{group_label(g).replace('-', 'to')}", g, (("cell", keys_regex(keys)),)))
        return jobs

    # ------------------------------------------------------------------ settings of the upstream jobs
    def prepare_settings(self, task: str) -> dict[str, Any]:
        """data_settings plus, at paper scale only (so CPU outputs keep their params), what else the
        job reads: data.sources, every task's benchmarks (decontamination) and whether the web-search
        key is set (its benchmarks are "not run" without it; setting it later reruns the search data)."""
        s = self.data_settings(task)
        d = self.cfg["data"]
        if "benchmarks" in (d.get(task) or {}):
            s["sources"] = d.get("sources")
            s["decontaminate_against"] = {t: d[t].get("benchmarks") for t in self.tasks_with_benchmarks()}
            web = d[task].get("web")
            if web:
                s["web_key_set"] = bool(self.environ.get(web.get("key_env", "SERPAPI_API_KEY")))
        return s

    def tasks_with_benchmarks(self) -> list[str]:
        d = self.cfg["data"]
        return sorted(t for t in TASK_KINDS if isinstance(d.get(t), dict) and "benchmarks" in d[t])

    def needs_tokenizer(self) -> bool:
        return self.cfg["model"]["source"] == "tiny"

    def needs_sft(self) -> bool:
        return self.cfg["sft"]["epochs"] > 0 and self.cfg["sft"]["demos_per_task"] > 0

    def tokenizer_settings(self) -> dict[str, Any]:
        return {"tasks": self.tasks, "vocab_size": self.cfg["model"]["vocab_size"],
                "data": [self.data_settings(t) for t in self.tasks]}

    def gpu_rules(self) -> list[str]:
        """The rules that must request a GPU under a Slurm profile with the verl engine: training of
        every method that trains (steps > 0), evaluation, and the ablation rules when ablations run."""
        m, steps = self.cfg["method"], self.cfg["train"]["steps"]
        rules = [f"train_{name}" for name in sorted(m) if int((m[name] or {}).get("steps", steps)) > 0]
        rules += ["evaluate_run"]
        if any(s in self.ablations for s in STUDIES):
            rules += ["ablation_train", "ablation_evaluate"]
        return rules

    # ------------------------------------------------------------------ target lists
    def data_targets(self) -> list[str]:
        return [data_file(t, split) for t in self.all_tasks() for split in ("train", "eval", "experts")]

    @staticmethod
    def run_targets(runs: Iterable[Run], with_final: bool = False, evals: bool = True) -> list[str]:
        """summary.json of each run, its eval JSON, and (with_final) the final/ of each run that trains
        or is a main run (a copied arm has no final/)."""
        files = []
        for r in runs:
            files.append(f"{r.run_dir()}/summary.json")
            if evals:
                files.append(r.eval_file())
            if with_final and r.copy_of is None:
                files.append(f"{r.run_dir()}/final")
        return files

    def train_targets(self, with_final: bool = False) -> list[str]:
        """summary.json of each main run (and its final/ model directory with `with_final`)."""
        return sorted(self.run_targets(self.experiment.select(MAIN), with_final, evals=False))

    def eval_targets(self) -> list[str]:
        return sorted(r.eval_file() for r in self.experiment.select(MAIN))

    def ablation_targets(self, with_final: bool = False) -> list[str]:
        """Every arm's files, the airline study's main runs, and the theory checks."""
        files = self.run_targets([r for r in self.experiment.runs
                                  if r.scope != MAIN and not self.experiment.in_sweep_target(r)], with_final)
        if "airline" in self.tasks and self.cfg["ablations"]:
            airline = [r for r in self.experiment.select(MAIN, task="airline") if r.seed in self.ablation_seeds]
            files += self.run_targets(airline, with_final)
        files.append("results/theory")
        return sorted(set(files))

    def table_targets(self, name: str) -> list[str]:
        """What table `name` reads (rtpo.report.table_names.TABLE_RUNS): its runs' summary.json and eval JSON."""
        return sorted(set(self.run_targets(table_runs(self.experiment, name))))

    def sweep_targets(self, with_final: bool = False) -> list[str]:
        """Every run's summary.json (and final/) and eval JSON of the sweep's target: the sweep's cells, the
        arms of studies with `target: sweep` and the main-grid runs those arms pair with."""
        runs = [r for r in self.experiment.runs if r.scope != MAIN and self.experiment.in_sweep_target(r)]
        runs += [r for r in self.experiment.sweep_study_runs() if r.scope == MAIN]
        return sorted(set(self.run_targets(runs, with_final)))

    def all_results(self) -> list[str]:
        """Everything the report rules read."""
        return sorted(set(self.train_targets() + self.eval_targets() + self.ablation_targets()))

    def every_run_output(self) -> list[str]:
        """Every declared output of the training, evaluation and ablation jobs: the input of the
        aggregate rules `all`, `train`, `ablations`. Snakemake (>= 8) reruns a job whose output was
        deleted only when a job that needs the file runs or the file is a target; listing them in
        the default target makes deleting one seed's summary.json or final/ rerun that cell (and what
        depends on it). Data and base model stay intermediate: deleting them reruns nothing."""
        return sorted(set(self.train_targets(with_final=True) + self.eval_targets()
                          + self.ablation_targets(with_final=True)))


__all__ = ["Dag", "SeedJob", "SearchData", "cross_reference_errors", "effective_config", "keys_regex", "key_args", "set_args",
           "TRAIN_SHELL", "ConfigError"]
