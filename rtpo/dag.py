"""The pipeline's DAG as plain Python: the seed groups, the ablation arms' reuse of main runs, the settings
fingerprints, the target lists and the training shell, as functions of the validated config. The grid's
cells and the results layout are rtpo.grid's (the report reads the same).

workflow/rules/common.smk builds one `Dag(config)` (its PIPELINE) and the rules read it; tests/test_dag.py tests it
without Snakemake. Nothing here knows Snakemake: errors are `rtpo.config.ConfigError`, which
common.smk turns into a WorkflowError naming the config files.

Fingerprints (the params rerun trigger): each job's `settings` param is the canonical JSON of exactly
the config sections that job reads, so that Snakemake reruns only the jobs whose settings changed.
What a job reads comes from the same functions the job itself calls (`rtpo.config.data_settings`,
`rtpo.config.method_settings`), so a key the job starts to read is fingerprinted too.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rtpo.config import ConfigError, data_settings, method_settings, set_path
from rtpo.grid import (RTPO_STUDIES, STUDIES, SWEEP_BASE, TASK_KINDS, AblationCell, SweepCell, ablation_cells,
                       data_file, eval_file, run_dir, sweep_data_dir, variant_name)
from rtpo.methods.cards import card

# The grid's names, its cells and the results layout live in rtpo.grid (shared with the report); they are
# re-exported here for workflow/rules/common.smk.


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------
def fingerprint(obj: Any) -> str:
    """Canonical JSON: the same settings give the same string whatever the key order."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def stamp(settings_json: str) -> str:
    """The checkpoint stamp of a training job (16 hex digits of the sha256 of its settings JSON)."""
    return hashlib.sha256(settings_json.encode()).hexdigest()[:16]


def keys_regex(keys: Iterable[str]) -> str:
    """A wildcard constraint matching exactly these keys (never matching when empty)."""
    return "|".join(re.escape(k) for k in sorted(keys)) or "(?!)"


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
            need("env", abl[study]["task"], f"'ablations.{study}.task'")
            need("data", abl[study]["task"], f"'ablations.{study}.task'")
    for study in RTPO_STUDIES:
        if study in abl:
            need("method", "rtpo", f"'ablations.{study}'")
    for m in abl.get("credit_assignment", {}).get("methods", []):
        need("method", m, "'ablations.credit_assignment.methods'")
    per_job = int(cfg.get("seeds_per_job", 1))
    if per_job > 1 and cfg["engine"] == "verl":
        errors.append(f"'seeds_per_job' is {per_job}, but the verl engine trains one seed per job (set it to 1)")
    if per_job > 1 and "airline" in cfg["tasks"] and not set(abl["seeds"]) <= set(cfg["seeds"]):
        errors.append(f"'ablations.seeds' {abl['seeds']} must be among 'seeds' {cfg['seeds']} when seeds_per_job > 1 "
                      "(the airline study's runs are main-grid runs, trained in the main grid's seed groups)")
    if cfg.get("sweep"):
        need("env", "search", "'sweep'")
        need("data", "search", "'sweep'")
        need("method", "rtpo", "'sweep' (its budget)")
        for m in cfg["sweep"]["methods"]:
            need("method", m, "'sweep.methods'")
    search = SearchData.of(cfg)
    if search.index and not search.corpus:
        errors.append("'data.search.retriever.index' needs 'data.search.corpus' (the corpus it is built from)")
    return errors


# ---------------------------------------------------------------------------------------------
# Jobs of several seeds, and the training shell
# ---------------------------------------------------------------------------------------------
def seed_groups(seeds: Iterable[int], per_job: int) -> list[tuple[int, ...]]:
    """`seeds` in jobs of at most `per_job`, in order."""
    seeds = [int(s) for s in seeds]
    return [tuple(seeds[i:i + per_job]) for i in range(0, len(seeds), per_job)]


def group_label(seeds: tuple[int, ...]) -> str:
    """A file-name label of a seed group: seed3, seeds0-9 (consecutive), seeds0_2_7."""
    if len(seeds) == 1:
        return f"seed{seeds[0]}"
    if list(seeds) == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"seeds{seeds[0]}-{seeds[-1]}"
    return "seeds" + "_".join(str(s) for s in seeds)


@dataclass(frozen=True)
class SeedJob:
    """One rule of a per-seed family (training or evaluation of a cell): `seeds` None = one job per
    seed through the rule's {seed} wildcard (seeds_per_job 1; the verl path); otherwise these seeds
    in one job, one process (`rtpo train --seed ...`), with a rule of their own."""

    rule: str
    seeds: tuple[int, ...] | None

    def paths(self, pattern: str) -> list[str]:
        """`pattern` (with "{seed}") for each seed of the job; the pattern itself for the wildcard job."""
        if self.seeds is None:
            return [pattern]
        return [pattern.replace("{seed}", str(s)) for s in self.seeds]

    @property
    def label(self) -> str:
        return "seed{seed}" if self.seeds is None else group_label(self.seeds)

    def seed_arg(self, wildcards: Any = None) -> str:
        """The `--seed` argument: the job's seeds, or the {seed} wildcard's value."""
        return str(wildcards.seed) if self.seeds is None else " ".join(str(s) for s in self.seeds)


# The training job: `rtpo train` over the job's seeds. `--stamp` is the checkpoint guard
# (rtpo.checkpoints.job_guard): a run directory resumes only from a checkpoint this very job left behind
# (Slurm timeout, preemption, Ctrl-C + --rerun-incomplete, a failed seed); a rerun because settings
# changed, an input was rebuilt, --forcerun or a deleted output starts from scratch. `exec`: the job's
# process is `rtpo train` itself, which on SIGTERM / SIGINT finishes its step, saves a checkpoint and
# exits 143 (Slurm signals every process of the job; no shell in between to die first).
TRAIN_SHELL = ("exec rtpo train --config {params.config} --method {params.method} --task {params.task} "
               "--seed {params.seeds} --model {input.model} --train-file {input.train} {params.sets} "
               "--out {params.out} --stamp {params.stamp} {params.logs} > {log.job} 2>&1")


# ---------------------------------------------------------------------------------------------
# Ablation cells
# ---------------------------------------------------------------------------------------------
# ---------------------------------------------------------------------------------------------
# The mechanism sweep (config `sweep`, rules/sweep.smk; issue 36.4)
# ---------------------------------------------------------------------------------------------
FLAT_BUDGET_KEYS = {"grpo": "chains", "grpo_tis": "chains", "seeupo": "chains"}  # one flat chain = one trajectory


def sweep_data_sets(cfg: Mapping[str, Any], hops: int) -> list[str]:
    """The `--set` overrides of the sweep's data at horizon K = hops: K-hop search questions, the
    sweep's split sizes and demonstrations, max_turns = K + extra_turns."""
    sw = cfg["sweep"]
    n_train = int(sw.get("n_train", 400))
    return [f"data.search.hops={hops}", f"data.search.n_train={n_train}",
            f"data.search.n_eval={int(sw.get('n_eval', 60))}",
            f"sft.demos_per_task={min(int(sw.get('demos_per_hops', 300)), n_train)}",
            f"env.search.max_turns={hops + int(sw.get('extra_turns', 2))}"]


def sweep_model_sets(cfg: Mapping[str, Any]) -> list[str]:
    """The `--set` override of every sweep job's model section: the sweep base model's position limit
    (sweep.max_position), so that the model settings it records match the runs' config
    (rtpo.assembly.check_model_fits). Only the embedded model has one."""
    if cfg["model"]["source"] != "tiny":
        return []
    return [f"model.tiny.max_position={int(cfg['sweep'].get('max_position', 2048))}"]


def sweep_budget(cfg: Mapping[str, Any], hops: int) -> int:
    """Complete trajectories per prompt of RTPO at horizon K in E.3's count, T (1 + (G - 1) L), with
    L = K + 1 trunk turns (K searches and the answer): the chains of a flat method in the same cell,
    so budgets stay matched as K grows (one fixed chain count would favour RTPO more, the longer K)."""
    s = card("rtpo").options(method_settings(dict(cfg), "rtpo", "search")["method"])
    return int(s["trunks"]) * (1 + (int(s["group_size"]) - 1) * (hops + 1))


def sweep_cells(cfg: Mapping[str, Any]) -> list[SweepCell]:
    """Every cell of config `sweep`, K-major, then psi, then method ([] without a sweep section)."""
    sw = cfg.get("sweep")
    if not sw:
        return []
    seeds = tuple(int(s) for s in sw["seeds"])
    train = [f"train.{k}={json.dumps(v)}" for k, v in sorted((sw.get("train") or {}).items())]
    cells = []
    for k in sw["hops"]:
        turns = sweep_data_sets(cfg, k)[-1]
        for psi in sw["psi"]:
            for m in sw["methods"]:
                sets = [*sweep_model_sets(cfg), turns, f"method.{m}.psi={psi}", *train]
                if m in FLAT_BUDGET_KEYS:
                    sets.append(f"method.{m}.per_task.search.{FLAT_BUDGET_KEYS[m]}={sweep_budget(cfg, k)}")
                cells.append(SweepCell(int(k), str(psi), m, seeds, tuple(sets)))
    return cells


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
    """The grid (tasks x methods x seeds), the ablation cells, the settings of every job and the
    target lists of one validated config (schema defaults filled in)."""

    def __init__(self, cfg: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> None:
        self.cfg = cfg
        self.environ = os.environ if environ is None else environ  # the web-search key (prepare_settings)
        self.tasks = list(cfg["tasks"])
        self.methods = list(cfg["methods"])
        self.seeds = [int(s) for s in cfg["seeds"]]
        self.seeds_per_job = int(cfg.get("seeds_per_job", 1))
        self.threads = int(cfg["model"]["threads"])  # threads of a training / evaluation job
        self.base_threads = int(cfg["sft"].get("threads", self.threads))  # the base-model job (runs alone)
        self.ablations = cfg["ablations"]
        self.ablation_seeds = [int(s) for s in self.ablations["seeds"]]
        # Every method with a config section gets a training rule train_<method> (`--forcerun train_rtpo`).
        self.trainable = sorted(cfg["method"])
        self.search = SearchData.of(cfg)
        main = set(self.all_main_cells())
        # every arm runs the ablation seeds (rtpo.grid.ablation_cells, as the report reads them); cell key ->
        # (task, method) of the main runs an arm copies (the same seeds), or None (trained)
        self.cells: list[AblationCell] = ablation_cells(self.ablations)
        self.reused: dict[str, tuple[str, str] | None] = {c.key: self.reused_main_run(c, main) for c in self.cells}
        self.cell_by_key = {c.key: c for c in self.cells}
        self.sweep = sweep_cells(cfg)
        self.sweep_seeds = [int(s) for s in (cfg.get("sweep") or {}).get("seeds", [])]
        self.sweep_by_key = {c.key: c for c in self.sweep}

    # ------------------------------------------------------------------ the grid
    def main_cells(self, tasks=None, methods=None, seeds=None) -> list[tuple[str, str, int]]:
        """(task, method, seed) of the main grid: every method x task x seed."""
        tasks = self.tasks if tasks is None else tasks
        methods = self.methods if methods is None else methods
        seeds = self.seeds if seeds is None else seeds
        return [(t, m, s) for t in tasks for m in methods for s in seeds]

    def airline_study_cells(self) -> list[tuple[str, str, int]]:
        """The airline stateful study (paper G.1, Tables 7-9): every method on airline, ablation seeds.

        These are main-grid cells (results/runs/airline/...), part of the `ablations` target; when the
        ablation seeds are among `seeds` (all shipped configs) they add no job. Empty when airline is
        not among `tasks`.
        """
        if "airline" not in self.tasks:
            return []
        return self.main_cells(tasks=["airline"], seeds=self.ablation_seeds)

    def all_main_cells(self) -> list[tuple[str, str, int]]:
        return sorted(set(self.main_cells()) | set(self.airline_study_cells()))

    def all_tasks(self) -> list[str]:
        """Every task some job needs data for."""
        tasks = set(self.tasks)
        for study in STUDIES:
            if study in self.ablations:
                tasks.add(self.ablations[study]["task"])
        return sorted(tasks)

    # ------------------------------------------------------------------ ablation cells
    def reused_main_run(self, cell: AblationCell, main: set | None = None) -> tuple[str, str] | None:
        """(task, method) of the main runs this ablation arm is identical to, or None.

        An arm reuses the main runs when `ablations.reuse_main_runs` is true (the default), the main grid
        has that (task, method) at every ablation seed, and the arm's overrides change none of its
        effective settings, e.g. G3 when method.rtpo.group_size is 3. The arm is then the main grid's
        configuration: its files of the ablation seeds are copies of the main runs' (rules
        ablation_reuse_run / ablation_reuse_eval, with a reused_from.txt) instead of a retrain, and the
        ledger adds the main grid's other seeds (rtpo.report.ledger.with_main_seeds).
        """
        if not self.ablations.get("reuse_main_runs", True):
            return None
        main = set(self.all_main_cells()) if main is None else main
        if not all((cell.task, cell.method, s) in main for s in cell.seeds):
            return None
        if self.run_settings(cell.method, cell.task, cell.sets) != self.run_settings(cell.method, cell.task):
            return None
        return cell.task, cell.method

    def trained_cells(self) -> list[AblationCell]:
        return [c for c in self.cells if self.reused[c.key] is None]

    def reused_cells(self) -> list[AblationCell]:
        return [c for c in self.cells if self.reused[c.key] is not None]

    def reused_runs(self) -> dict[str, tuple[str, str, int]]:
        """{run key of a copied arm's seed: the main run (task, method, seed) it copies}."""
        return {c.run_key(s): (c.task, c.method, s) for c in self.reused_cells() for s in c.seeds}

    def reused_evals(self) -> dict[str, tuple[str, str, int]]:
        """{eval key of a copied arm's seed: the main run (task, method, seed) whose eval JSON it copies}."""
        return {c.eval_key(s): (c.task, c.method, s) for c in self.reused_cells() for s in c.seeds}

    def cell(self, key: str) -> AblationCell:
        """The arm of a {cell} wildcard value, or of a {run} / {evalrun} value (cell key + /seedS, /eval_seedS)."""
        return self.cell_by_key[key] if key in self.cell_by_key else self.cell_by_key[key.rsplit("/", 1)[0]]

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

    # ------------------------------------------------------------------ settings (fingerprints)
    def run_settings(self, method: str, task: str, sets: Iterable[str] = ()) -> dict[str, Any]:
        """The effective settings of one training run (rtpo.config.method_settings after `sets`)."""
        cfg = copy.deepcopy(dict(self.cfg))
        for s in sets:
            set_path(cfg, s, source="ablation override")
        s = method_settings(cfg, method, task)
        return {"engine": cfg["engine"], "verl": cfg.get("verl"), **s}

    def data_settings(self, task: str) -> dict[str, Any]:
        """What `rtpo data --task T` reads of the config (`rtpo.config.data_settings`, which it calls)."""
        return data_settings(self.cfg, task)

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

    def base_model_settings(self) -> dict[str, Any]:
        """What `rtpo base-model` reads (rtpo.sft.build_base_model); threads only change speed."""
        model = {k: v for k, v in self.cfg["model"].items() if k != "threads"}
        sft = {k: v for k, v in self.cfg["sft"].items() if k != "threads"}
        psis = sorted({self.cfg["env"][t]["psi"] for t in self.tasks} | {"full"})
        out = {"model": model, "sft": sft, "tasks": self.tasks, "psis": psis}
        if self.needs_sft():
            out["data"] = [self.data_settings(t) for t in self.tasks]
        return out

    def train_settings(self, method: str, task: str, sets: Iterable[str] = ()) -> dict[str, Any]:
        """A training job's settings plus those of everything upstream (data, base model): the input of
        its checkpoint stamp, which so changes whenever its inputs are rebuilt from other settings.
        (The job's `settings` param is run_settings alone, which keeps the rerun reasons readable.)"""
        return {"run": self.run_settings(method, task, sets), "data": self.data_settings(task),
                "base": self.base_model_settings()}

    def eval_settings(self, method: str, task: str, sets: Iterable[str] = ()) -> dict[str, Any]:
        s = self.run_settings(method, task, sets)
        return {"eval": self.cfg["eval"], "env": s["env"], "psi": s["psi"], "engine": s["engine"], "verl": s["verl"]}

    def train_stamp(self, method: str, task: str, sets: Iterable[str] = ()) -> str:
        return stamp(fingerprint(self.train_settings(method, task, sets)))

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

    def train_targets(self, cells=None, with_final: bool = False) -> list[str]:
        """summary.json of each main run (and its final/ model directory with `with_final`)."""
        cells = self.all_main_cells() if cells is None else cells
        files = [f"{run_dir(t, m, s)}/summary.json" for t, m, s in cells]
        if with_final:
            files += [f"{run_dir(t, m, s)}/final" for t, m, s in cells]
        return files

    def eval_targets(self, cells=None) -> list[str]:
        cells = self.all_main_cells() if cells is None else cells
        return [eval_file(t, m, s) for t, m, s in cells]

    def ablation_targets(self, with_final: bool = False) -> list[str]:
        files = [f"{c.run_dir(s)}/summary.json" for c in self.cells for s in c.seeds]
        if with_final:
            files += [f"{c.run_dir(s)}/final" for c in self.trained_cells() for s in c.seeds]
        files += [c.eval_file(s) for c in self.cells for s in c.seeds]
        airline = self.airline_study_cells()
        files += self.train_targets(airline, with_final) + self.eval_targets(airline)
        files.append("results/theory")
        return sorted(set(files))

    # ------------------------------------------------------------------ the mechanism sweep
    def sweep_hops(self) -> list[int]:
        return [int(k) for k in self.cfg["sweep"]["hops"]] if self.sweep else []

    def sweep_config(self, sets: Iterable[str]) -> dict[str, Any]:
        cfg = copy.deepcopy(dict(self.cfg))
        for s in sets:
            set_path(cfg, s, source="sweep override")
        return cfg

    def sweep_data_settings(self, hops: int) -> dict[str, Any]:
        """What `rtpo data --task search` reads under the sweep's overrides at horizon K."""
        return data_settings(self.sweep_config(sweep_data_sets(self.cfg, hops)), "search")

    def sweep_base_settings(self) -> dict[str, Any]:
        """What `rtpo sweep-base` reads: the base model's settings (its input), the sweep's warm start."""
        sw = self.cfg["sweep"]
        keys = ("psi", "demos_per_hops", "sft_epochs", "max_position")
        return {"base": self.base_model_settings(), "sweep": {k: sw.get(k) for k in keys},
                "model": self.sweep_config(sweep_model_sets(self.cfg))["model"],
                "sft": {k: v for k, v in self.cfg["sft"].items() if k != "threads"},
                "data": [self.sweep_data_settings(k) for k in self.sweep_hops()]}

    def sweep_run_settings(self, cell: "SweepCell") -> dict[str, Any]:
        cfg = self.sweep_config(cell.sets)
        return {"engine": cfg["engine"], "verl": cfg.get("verl"), **method_settings(cfg, cell.method, "search")}

    def sweep_train_stamp(self, cell: "SweepCell") -> str:
        return stamp(fingerprint({"run": self.sweep_run_settings(cell), "data": self.sweep_data_settings(cell.hops),
                                  "base": self.sweep_base_settings()}))

    def sweep_eval_settings(self, cell: "SweepCell") -> dict[str, Any]:
        s = self.sweep_run_settings(cell)
        return {"eval": self.cfg["eval"], "env": s["env"], "psi": s["psi"], "engine": s["engine"], "verl": s["verl"]}

    def sweep_targets(self, with_final: bool = False) -> list[str]:
        """Every run's summary.json (and final/) and eval JSON of the sweep."""
        files = [f"{c.run_dir(s)}/summary.json" for c in self.sweep for s in c.seeds]
        files += [c.eval_file(s) for c in self.sweep for s in c.seeds]
        if with_final:
            files += [f"{c.run_dir(s)}/final" for c in self.sweep for s in c.seeds]
        return sorted(files)

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


__all__ = ["Dag", "AblationCell", "TASK_KINDS", "SweepCell", "sweep_cells", "sweep_data_sets", "sweep_data_dir", "sweep_budget",
           "sweep_model_sets", "SWEEP_BASE", "SeedJob", "SearchData", "ablation_cells", "seed_groups", "group_label", "cross_reference_errors", "effective_config",
           "fingerprint", "stamp", "variant_name", "keys_regex", "set_args", "run_dir", "eval_file", "data_file",
           "TRAIN_SHELL", "STUDIES", "RTPO_STUDIES", "ConfigError"]
