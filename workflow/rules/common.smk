"""Shared definitions of the RTPO workflow (functions and constants only; the rules live in the
other rules/*.smk files).

What is here, in order:
  1. config validation (rtpo/config.schema.yaml, the package's schema) and the checks a schema cannot express;
  2. the effective config file every `rtpo` command reads;
  3. the `rtpo` console script of the Python environment that runs Snakemake;
  4. the grid: tasks x methods x seeds, output paths;
  5. the ablation cells (study, variant, task, method, seed) and which of them reuse a main run;
  6. parameter fingerprints: canonical JSON of exactly the config sections one job depends on, so
     that Snakemake's params rerun trigger reruns only the jobs whose settings changed.
"""

import copy
import hashlib
import json
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml
from snakemake.exceptions import WorkflowError
from snakemake.settings.types import DeploymentMethod
from snakemake.utils import validate

from rtpo.config import SCHEMA, ConfigError, method_settings, set_path


# ---------------------------------------------------------------------------------------------
# 1. Validation
# ---------------------------------------------------------------------------------------------
def _config_sources():
    files = [str(f) for f in workflow.configfiles]
    return ", ".join(files) if files else "(no config file)"


def check_config(cfg):
    """Validate `cfg` against the JSON schema (filling its defaults), then the cross-references.

    Raises WorkflowError with one line naming the offending key path and the config files.
    """
    try:
        validate(cfg, schema=str(SCHEMA))
    except WorkflowError as e:
        import jsonschema

        ve = e.__cause__ or e.__context__  # snakemake raises WorkflowError from the ValidationError
        if not isinstance(ve, jsonschema.ValidationError):
            raise
        where = ".".join(str(p) for p in ve.absolute_path) or "(top level)"
        raise WorkflowError(f"invalid config at '{where}': {ve.message} (config files: {_config_sources()})") from None

    def need(section, key, used_by):
        if key not in cfg.get(section, {}):
            raise WorkflowError(f"invalid config: '{section}.{key}' is missing, but {used_by} uses it "
                                f"(config files: {_config_sources()})")

    for m in cfg["methods"]:
        need("method", m, "'methods'")
    for t in cfg["tasks"]:
        need("env", t, "'tasks'")
        need("data", t, "'tasks'")
    abl = cfg["ablations"]
    for study in ("group_size", "sync", "continuation", "credit_assignment"):
        if study in abl:
            need("env", abl[study]["task"], f"'ablations.{study}.task'")
            need("data", abl[study]["task"], f"'ablations.{study}.task'")
    for study in ("group_size", "sync", "continuation"):
        if study in abl:
            need("method", "rtpo", f"'ablations.{study}'")
    for m in abl.get("credit_assignment", {}).get("methods", []):
        need("method", m, "'ablations.credit_assignment.methods'")


check_config(config)


def check_slurm_gpu_resources(cfg):
    """Refuse to submit GPU jobs without a GPU (issue 20).

    Snakemake turns a profile's `set-resources` into a default of the --set-resources argument, so a
    --set-resources on the command line replaces the profile's whole section (snakemake/cli.py,
    configargparse defaults; the slurm plugin only reads the result): one rule's override would send
    every training and evaluation job to the CPU partition without a GPU. Under a Slurm profile
    (default-resources name a slurm_partition or slurm_account) with the verl engine, every training
    rule of a method that trains, and the evaluation rules, must request `gpu` (or gpus / gres).
    Checked in the main Snakemake process only (jobs on the nodes get their own resources).
    """
    defaults = workflow.resource_settings.default_resources
    if not workflow.is_main_process or cfg.get("engine") != "verl" or defaults is None:
        return
    if not {"slurm_partition", "slurm_account"} & set(defaults.keys()):
        return
    rules = [f"train_{m}" for m in sorted(cfg["method"]) if int((cfg["method"][m] or {}).get("steps", cfg["train"]["steps"])) > 0]
    rules += ["evaluate_run"]
    if any(s in cfg["ablations"] for s in ("group_size", "sync", "continuation", "credit_assignment")):
        rules += ["ablation_train", "ablation_evaluate"]
    overwrite = workflow.resource_settings.overwrite_resources or {}
    lacking = [r for r in rules if not {"gpu", "gpus", "gres"} & set(overwrite.get(r, {}))]
    if lacking:
        raise WorkflowError(
            f"no GPU requested for {', '.join(lacking)} under a Slurm profile with engine: verl. A --set-resources "
            "on the command line replaces the profile's whole set-resources section (Snakemake does not merge "
            "them), which drops the GPU, partition and memory of every other rule. Change resources in the "
            "profile instead (workflow/profiles/slurm/config.yaml, or a copy of that directory: see its README)."
        )


check_slurm_gpu_resources(config)


# ---------------------------------------------------------------------------------------------
# 2. The effective config file
# ---------------------------------------------------------------------------------------------
def effective_config(cfg):
    """The config exactly as Snakemake sees it (config files merged, --config applied, schema
    defaults filled): (results/config/<name>-<sha256[:12]>.yaml, its text).

    Every `rtpo` command reads this file, so jobs and DAG agree on the settings. The name is
    content-addressed: another config, or an edited one, gets a new file and never changes the one
    that running jobs read.
    """
    text = yaml.safe_dump(cfg, sort_keys=True, default_flow_style=False)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    path = Path("results") / "config" / f"{cfg['name']}-{digest}.yaml"
    return str(path), f"# written by workflow/rules/common.smk from: {_config_sources()}\n{text}"


EFFECTIVE_CONFIG, _EFFECTIVE_TEXT = effective_config(config)


def write_effective_config():
    """Write EFFECTIVE_CONFIG (atomically, once). Called by `onstart`, which Snakemake runs only
    when jobs are about to run: a dry run (`-n`), --summary, --lint or a DAG plot write nothing.
    Slurm jobs re-parse the workflow on their node with --no-hooks and read the file the main
    process wrote (a shared filesystem); so would a main process run with --no-hooks, which the
    rtpo jobs then fail on with "config file not found"."""
    if not os.path.exists(EFFECTIVE_CONFIG):
        from rtpo.atomic import atomic_write_text

        atomic_write_text(EFFECTIVE_CONFIG, _EFFECTIVE_TEXT)


onstart:
    write_effective_config()


def eval_engine(wildcards, input):
    """`--engine` of the evaluation rules (evaluate_run, ablation_evaluate): the config's engine, local or
    verl (rtpo/verl_ext/eval_servers.py). Derived (it takes `input`), so it stays out of the params
    fingerprint: the engine is already in each job's `settings` (eval_settings)."""
    return config["engine"]


def config_path(wildcards, input):
    """The `params: config=` of every rule that runs `rtpo`.

    A *derived* param (it takes `input`), so Snakemake leaves it out of the params fingerprint:
    the path changes with any config edit, while each job's own settings are fingerprinted by its
    `settings` param. Otherwise editing one method's lr would rerun every job.
    """
    return EFFECTIVE_CONFIG


# ---------------------------------------------------------------------------------------------
# 3. The software: the `rtpo` command
# ---------------------------------------------------------------------------------------------
# Rules call `rtpo ...`: the console script installed next to the Python that runs Snakemake
# (also on a Slurm node, where jobs run `<that python> -m snakemake`), whatever PATH says --
# except under `--software-deployment-method conda`, where the rule's conda env provides it.
RTPO_BIN = os.path.dirname(sys.executable)
if DeploymentMethod.CONDA not in workflow.deployment_settings.deployment_method:
    shell.prefix(f"set -euo pipefail; export PATH={shlex.quote(RTPO_BIN)}:\"$PATH\"; ")

# The `conda:` of every rule: environment.yml, the pinned GPU cluster stack (verl + vLLM + this
# package). Snakemake uses it only with `--software-deployment-method conda`; normally the jobs run
# in the environment that runs Snakemake (./.venv for the CPU default; on a cluster, the env created
# once with `conda env create -f environment.yml` on the shared filesystem and activated).
# The path is relative to the rules/*.smk files.
CONDA_ENV = "../../environment.yml"


# ---------------------------------------------------------------------------------------------
# 4. The grid and its paths
# ---------------------------------------------------------------------------------------------
TASKS = list(config["tasks"])
METHODS = list(config["methods"])
SEEDS = [int(s) for s in config["seeds"]]
THREADS = int(config["model"]["threads"])  # threads of a training / evaluation job
BASE_THREADS = int(config["sft"].get("threads", THREADS))  # the base-model job (runs alone)
ABLATIONS = config["ablations"]
ABLATION_SEEDS = [int(s) for s in ABLATIONS["seeds"]]

# Every method with a config section gets a training rule train_<method> (`--forcerun train_rtpo`).
TRAINABLE = sorted(config["method"])


def run_dir(task, method, seed):
    return f"results/runs/{task}/{method}/seed{seed}"


def eval_file(task, method, seed):
    return f"results/eval/{task}/{method}/seed{seed}.json"


def data_file(task, split):
    return f"results/data/{task}/{split}.jsonl"


def main_cells(tasks=None, methods=None, seeds=None):
    """(task, method, seed) of the main grid: every method x task x seed."""
    tasks, methods, seeds = (TASKS if tasks is None else tasks, METHODS if methods is None else methods,
                             SEEDS if seeds is None else seeds)
    return [(t, m, s) for t in tasks for m in methods for s in seeds]


def airline_study_cells():
    """The airline stateful study (paper G.1, Tables 7-9): every method on airline, ablation seeds.

    These are main-grid cells (results/runs/airline/...), part of the `ablations` target; when the
    ablation seeds are among `seeds` (all shipped configs) they add no job. Empty when airline is
    not among `tasks`.
    """
    if "airline" not in TASKS:
        return []
    return main_cells(tasks=["airline"], seeds=ABLATION_SEEDS)


def all_main_cells():
    return sorted(set(main_cells()) | set(airline_study_cells()))


def all_tasks():
    """Every task some job needs data for."""
    tasks = set(TASKS)
    for study in ("group_size", "sync", "continuation", "credit_assignment"):
        if study in ABLATIONS:
            tasks.add(ABLATIONS[study]["task"])
    return sorted(tasks)


# ---------------------------------------------------------------------------------------------
# 5. Ablation cells
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AblationCell:
    """One ablation training run and its evaluation.

    Files: results/ablations/<study>/<variant>/<task>/<method>/seed<seed>/ (as a main run) and
    results/ablations/<study>/<variant>/<task>/<method>/eval_seed<seed>.json. `sets` are the
    `--set key=value` overrides that make the variant.
    """

    study: str
    variant: str
    task: str
    method: str
    seed: int
    sets: tuple

    @property
    def key(self):  # the {run} wildcard: results/ablations/{run}/summary.json
        return f"{self.study}/{self.variant}/{self.task}/{self.method}/seed{self.seed}"

    @property
    def eval_key(self):  # the {evalrun} wildcard: results/ablations/{evalrun}.json
        return f"{self.study}/{self.variant}/{self.task}/{self.method}/eval_seed{self.seed}"

    @property
    def run_dir(self):
        return f"results/ablations/{self.key}"

    @property
    def eval_file(self):
        return f"results/ablations/{self.eval_key}.json"


def variant_name(value):
    """A path-safe variant name: 'interval:2' -> 'interval-2', 'kl:0.01' -> 'kl-0.01'."""
    return str(value).replace(":", "-")


def ablation_cells():
    """Every ablation cell of config `ablations` (paper §4.3, F.3, G.2, G.6)."""
    cells = []

    def add(study, variant, task, methods, sets_of):
        for m in methods:
            for s in ABLATION_SEEDS:
                cells.append(AblationCell(study, variant, task, m, s, tuple(sets_of(m))))

    if "group_size" in ABLATIONS:
        a = ABLATIONS["group_size"]
        for g in a["values"]:
            add("group_size", f"G{g}", a["task"], ["rtpo"], lambda m, g=g: [f"method.rtpo.group_size={g}"])
    if "sync" in ABLATIONS:
        a = ABLATIONS["sync"]
        for v in a["values"]:
            add("sync", variant_name(v), a["task"], ["rtpo"], lambda m, v=v: [f"method.rtpo.sync={v}"])
    if "continuation" in ABLATIONS:
        a = ABLATIONS["continuation"]
        for v in a["values"]:
            add("continuation", variant_name(v), a["task"], ["rtpo"], lambda m, v=v: [f"method.rtpo.continuation={v}"])
    if "credit_assignment" in ABLATIONS:
        a = ABLATIONS["credit_assignment"]
        add("credit_assignment", f"psi-{variant_name(a['psi'])}", a["task"], a["methods"],
            lambda m, psi=a["psi"]: [f"method.{m}.psi={psi}"])
    return cells


def run_settings(method, task, sets=()):
    """The effective settings of one training run (rtpo.config.method_settings after `sets`)."""
    cfg = copy.deepcopy(config)
    try:
        for s in sets:
            set_path(cfg, s, source="ablation override")
        s = method_settings(cfg, method, task)
    except ConfigError as e:
        raise WorkflowError(str(e)) from None
    return {"engine": cfg["engine"], "verl": cfg.get("verl"), **s}


def reused_main_run(cell):
    """(task, method, seed) of the main run this ablation cell is identical to, or None.

    A cell reuses a main run when `ablations.reuse_main_runs` is true (the default), the main grid
    has that (task, method, seed), and the cell's overrides change none of its effective settings,
    e.g. G3 when method.rtpo.group_size is 3. The cell's files are then copies of the main run's
    (rules ablation_reuse_run / ablation_reuse_eval, with a reused_from.txt) instead of a retrain.
    """
    if not ABLATIONS.get("reuse_main_runs", True):
        return None
    main = (cell.task, cell.method, cell.seed)
    if main not in set(all_main_cells()):
        return None
    if run_settings(cell.method, cell.task, cell.sets) != run_settings(cell.method, cell.task):
        return None
    return main


ABLATION_CELLS = ablation_cells()
CELL_BY_KEY = {c.key: c for c in ABLATION_CELLS}
CELL_BY_EVAL_KEY = {c.eval_key: c for c in ABLATION_CELLS}
REUSED = {c.key: reused_main_run(c) for c in ABLATION_CELLS}


def keys_regex(keys):
    """A wildcard constraint matching exactly these keys (never matching when empty)."""
    return "|".join(re.escape(k) for k in sorted(keys)) or "(?!)"


TRAINED_RUNS = keys_regex(c.key for c in ABLATION_CELLS if REUSED[c.key] is None)
REUSED_RUNS = keys_regex(c.key for c in ABLATION_CELLS if REUSED[c.key] is not None)
TRAINED_EVALS = keys_regex(c.eval_key for c in ABLATION_CELLS if REUSED[c.key] is None)
REUSED_EVALS = keys_regex(c.eval_key for c in ABLATION_CELLS if REUSED[c.key] is not None)


def cell_of(wildcards):
    """The AblationCell of a job with a {run} or {evalrun} wildcard."""
    if "run" in wildcards.keys():
        return CELL_BY_KEY[wildcards.run]
    return CELL_BY_EVAL_KEY[wildcards.evalrun]


def set_args(sets):
    return " ".join(f"--set {shlex.quote(s)}" for s in sets)


# ---------------------------------------------------------------------------------------------
# 6. Parameter fingerprints (the params rerun trigger)
# ---------------------------------------------------------------------------------------------
def fingerprint(obj):
    """Canonical JSON: the same settings give the same string whatever the key order."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def data_settings(task):
    """What `rtpo data --task T` reads (rtpo.cli.cmd_data)."""
    env = config["env"].get(task, {})
    return {"seed": config["data"]["seed"], "data": config["data"].get(task),
            "n_expert": config["sft"]["demos_per_task"], "imperfection": config["sft"]["imperfection"],
            "env": {k: v for k, v in env.items() if k in ("max_turns", "max_obs_chars", "top_k")}}


def needs_tokenizer():
    return config["model"]["source"] == "tiny"


def needs_sft():
    return config["sft"]["epochs"] > 0 and config["sft"]["demos_per_task"] > 0


def tokenizer_settings():
    return {"tasks": TASKS, "vocab_size": config["model"]["vocab_size"], "data": [data_settings(t) for t in TASKS]}


def base_model_settings():
    """What `rtpo base-model` reads (rtpo.sft.build_base_model); threads only change speed."""
    model = {k: v for k, v in config["model"].items() if k != "threads"}
    sft = {k: v for k, v in config["sft"].items() if k != "threads"}
    psis = sorted({config["env"][t]["psi"] for t in TASKS} | {"full"})
    out = {"model": model, "sft": sft, "tasks": TASKS, "psis": psis}
    if needs_sft():
        out["data"] = [data_settings(t) for t in TASKS]
    return out


def train_settings(method, task, sets=()):
    """A training job's settings plus those of everything upstream (data, base model): the input of
    its checkpoint stamp, which so changes whenever its inputs are rebuilt from other settings.
    (The job's `settings` param is run_settings alone, which keeps the rerun reasons readable.)"""
    return {"run": run_settings(method, task, sets), "data": data_settings(task), "base": base_model_settings()}


def eval_settings(method, task, sets=()):
    s = run_settings(method, task, sets)
    return {"eval": config["eval"], "env": s["env"], "psi": s["psi"], "engine": s["engine"], "verl": s["verl"]}


def stamp(settings_json):
    return hashlib.sha256(settings_json.encode()).hexdigest()[:16]


def main_train_params(method):
    """The settings and stamp params of train_<method>; a factory, so each rule of the loop in
    train.smk gets its own closures."""

    def settings(wildcards):
        return fingerprint(run_settings(method, wildcards.task))

    def job_stamp(wildcards):
        return stamp(fingerprint(train_settings(method, wildcards.task)))

    return settings, job_stamp


# The shell command of all training jobs, main and ablation. The checkpoint guard -- a run
# directory's .rtpo-job file holds "<stamp> running|complete". `rtpo train` resumes from
# checkpoint/ only when the previous attempt was this very job (same stamp) and did not finish
# (Slurm timeout, preemption, Ctrl-C + --rerun-incomplete). A rerun because settings changed, an
# input was rebuilt, --forcerun or a deleted output starts from scratch.
# On SIGTERM (Slurm's time limit or preemption; SIGINT: Ctrl-C) `rtpo train` finishes its step, saves
# a checkpoint and exits 143 (rtpo/train.py). It runs in the background and is waited for, with the
# signal passed on, because Slurm signals every process of the job and ends the job step when this
# shell exits: a shell killed by the signal (bash runs no trap while a foreground command runs)
# would take `rtpo train` with it before it saved.
TRAIN_SHELL = """
out=$(dirname {output.summary})
mkdir -p "$out"
if [ "$(cat "$out/.rtpo-job" 2>/dev/null || true)" != "{params.stamp} running" ]; then
    rm -rf "$out/checkpoint" "$out/metrics.jsonl"
fi
echo "{params.stamp} running" > "$out/.rtpo-job"
rtpo train --config {params.config} --method {params.method} --task {params.task} --seed {params.seed} \
    --model {input.model} --train-file {input.train} {params.sets} --out "$out" > {log} 2>&1 &
pid=$!
trap 'kill -TERM "$pid" 2>/dev/null || true' TERM INT
rc=0; wait "$pid" || rc=$?
while kill -0 "$pid" 2>/dev/null; do rc=0; wait "$pid" || rc=$?; done
[ "$rc" -eq 0 ] || exit "$rc"
echo "{params.stamp} complete" > "$out/.rtpo-job"
"""


# ---------------------------------------------------------------------------------------------
# Target lists (inputs of the aggregate rules and of the report rules)
# ---------------------------------------------------------------------------------------------
def data_targets():
    return [data_file(t, split) for t in all_tasks() for split in ("train", "eval", "experts")]


def train_targets(cells=None, with_final=False):
    """summary.json of each main run (and its final/ model directory with `with_final`)."""
    cells = all_main_cells() if cells is None else cells
    files = [f"{run_dir(t, m, s)}/summary.json" for t, m, s in cells]
    if with_final:
        files += [f"{run_dir(t, m, s)}/final" for t, m, s in cells]
    return files


def eval_targets(cells=None):
    cells = all_main_cells() if cells is None else cells
    return [eval_file(t, m, s) for t, m, s in cells]


def ablation_targets(with_final=False):
    files = [f"{c.run_dir}/summary.json" for c in ABLATION_CELLS]
    if with_final:
        files += [f"{c.run_dir}/final" for c in ABLATION_CELLS if REUSED[c.key] is None]
    files += [c.eval_file for c in ABLATION_CELLS]
    files += train_targets(airline_study_cells(), with_final) + eval_targets(airline_study_cells())
    files.append("results/theory")
    return sorted(set(files))


def all_results():
    """Everything the report rules read."""
    return sorted(set(train_targets() + eval_targets() + ablation_targets()))


def every_run_output():
    """Every declared output of the training, evaluation and ablation jobs: the input of the
    aggregate rules `all`, `train`, `ablations`. Snakemake (>= 8) reruns a job whose output was
    deleted only when a job that needs the file runs or the file is a target; listing them in
    the default target makes deleting one seed's summary.json or final/ rerun that cell (and what
    depends on it). Data and base model stay intermediate: deleting them reruns nothing."""
    return sorted(set(train_targets(with_final=True) + eval_targets() + ablation_targets(with_final=True)))
