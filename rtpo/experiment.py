"""The experiment a config asks for, as one list of runs: which runs exist, where each one's files live,
what it trains with and whether it is a copy of another. Torch-free and Snakemake-free: the DAG
(rtpo.dag, workflow/rules/*.smk), the start-up check (rtpo.verl_ext.startup), the report
(rtpo.report.load, rtpo.report.sweep) and the paper's table targets all iterate `Experiment(cfg).runs`;
nothing else enumerates runs or names variants.

A run is keyed by (scope, variant, task, method, seed): scope "main" for the main grid, the study's name
for an ablation arm, "sweep" for a cell of the mechanism sweep (variant "h<K>/psi-<psi>"). Each `Run`
carries its `--set` overrides, its effective settings (rtpo.config.method_settings after those sets,
computed once here), the stamp of its settings and inputs (the checkpoint guard, rtpo.checkpoints), the
seeds trained in the same job as it (its seed group) and the run it copies (`copy_of`; None: trained).
`rtpo train` writes the key, the settings and copy_of into the run's run.json, which the report reads.

Layout, under a results root (`root`, "results" for the DAG; the report takes any):

    runs/{task}/{method}/seed{S}/                                    a main run (metrics.jsonl, run.json, summary.json, final/)
    eval/{task}/{method}/seed{S}.json                                its evaluation
    ablations/{study}/{variant}/{task}/{method}/seed{S}/             an ablation arm's run
    ablations/{study}/{variant}/{task}/{method}/eval_seed{S}.json    its evaluation
    sweep/h{K}/psi-{psi}/{method}/seed{S}/, .../eval_seed{S}.json    a cell of the mechanism sweep
    data/{task}/{split}.jsonl                                        a task's data

Variant names (`study_variant`): group_size 3 -> "G3"; sync "interval:2" -> "interval-2", "kl:0.01" ->
"kl-0.01"; continuation "on_policy" -> "on_policy"; credit_assignment's psi "full" -> "psi-full"
("truncate:4" -> "psi-truncate-4").

A main cell (task, method) runs `seeds`, or 0..n-1 where `seed_counts.<task>.<method>` is n; each cell's
seeds go to jobs of `seeds_per_job` (its seed groups: a 5-seed cell at 4 per job trains seeds0-3 and seed4).
Every ablation arm runs its study's `seeds` (default `ablations.seeds`); an arm whose effective settings are
the main grid's copies the main runs of those seeds instead of training (its runs' `copy_of`), and the ledger
adds the main grid's other seeds to it. The airline study (paper G.1) is main-grid runs on airline at the
ablation seeds.

Settings fingerprints (the DAG's params rerun trigger): each job's `settings` param is the canonical JSON of
exactly the config sections that job reads, from the same functions the job calls
(`rtpo.config.data_settings`, `rtpo.config.method_settings`), so a key the job starts to read is
fingerprinted too.
"""

from __future__ import annotations

import copy
import functools
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rtpo.config import data_settings, method_settings, set_path
from rtpo.methods.cards import card
from rtpo.run_record import fingerprint, job_stamp, stamp

MAIN = "main"          # the scope of the main grid's runs (an ablation run's scope is its study)
SWEEP = "sweep"        # the scope of the mechanism sweep's runs
RESULTS = "results"    # the DAG's results root

# the ablation studies of config `ablations` (paper §4.3, F.3, G.2, G.6); the first three vary RTPO. The last
# three are this artifact's controls, not the paper's: matched_updates (flat methods with as many optimizer
# steps per training step as RTPO takes, on each of its tasks), turn_rows (GRPO trained per turn on the
# contexts it sampled: no rollout-training mismatch, GRPO's information) and mismatch (methods under psi = full
# on one task). A study with `target: sweep` runs with the mechanism sweep's target, not in `all`.
STUDIES = ("group_size", "sync", "continuation", "credit_assignment", "matched_updates", "turn_rows", "mismatch")
RTPO_STUDIES = ("group_size", "sync", "continuation")
PSI_STUDIES = ("credit_assignment", "mismatch")   # methods under one psi on one task
TASK_KINDS = ("math", "search", "airline")



# ---------------------------------------------------------------------------------------------
# Paths and names
# ---------------------------------------------------------------------------------------------
def variant_name(value: Any) -> str:
    """A path-safe name of a config value: 'interval:2' -> 'interval-2', 'kl:0.01' -> 'kl-0.01'."""
    return str(value).replace(":", "-")


def study_variant(study: str, value: Any) -> str:
    """The directory name of one variant of an ablation study: G3, interval-2, kl-0.01, on_policy, psi-full,
    mb-4 (matched_updates: 4 mini-batches), rows-turn (turn_rows: GRPO's rows one per turn)."""
    if study == "group_size":
        return f"G{int(value)}"
    if study == "turn_rows":
        return f"rows-{value}"
    if study in PSI_STUDIES:
        return f"psi-{variant_name(value)}"
    if study == "matched_updates":
        return f"mb-{int(value)}"
    return variant_name(value)


def study_tasks(ablations: Mapping[str, Any], study: str) -> list[str]:
    """The tasks of one study of config `ablations`: its `task`, matched_updates' tasks (the keys of its
    per-task `mini_batches`) or turn_rows' `tasks`."""
    a = ablations[study]
    if study == "matched_updates":
        return list(a["mini_batches"])
    if study == "turn_rows":
        return list(a["tasks"])
    return [a["task"]]


def study_methods(ablations: Mapping[str, Any], study: str) -> list[str]:
    """The methods a study trains: RTPO for the RTPO studies, its `methods` (matched_updates: or `method`)."""
    a = ablations[study]
    if study in RTPO_STUDIES:
        return ["rtpo"]
    if study in ("matched_updates", "turn_rows"):
        return list(a.get("methods") or [a.get("method", "grpo")])
    return list(a.get("methods") or ["rtpo"])


def study_target(ablations: Mapping[str, Any], study: str) -> str:
    """The Snakemake target a study's arms run with: "all" (the default) or "sweep" (the mechanism sweep's
    target, outside `all`: e.g. Control B, whose contrast is the sweep's)."""
    return str((ablations.get(study) or {}).get("target", "all"))


def run_dir(task: str, method: str, seed: int, scope: str = MAIN, variant: str = "", root: str = RESULTS) -> str:
    """The run directory of one seed of a main run, an ablation arm (scope = its study) or a sweep cell."""
    if scope == MAIN:
        return f"{root}/runs/{task}/{method}/seed{seed}"
    if scope == SWEEP:
        return f"{root}/sweep/{variant}/{method}/seed{seed}"
    return f"{root}/ablations/{scope}/{variant}/{task}/{method}/seed{seed}"


def eval_file(task: str, method: str, seed: int, scope: str = MAIN, variant: str = "", root: str = RESULTS) -> str:
    """The evaluation JSON of one seed of a main run, an ablation arm or a sweep cell."""
    if scope == MAIN:
        return f"{root}/eval/{task}/{method}/seed{seed}.json"
    if scope == SWEEP:
        return f"{root}/sweep/{variant}/{method}/eval_seed{seed}.json"
    return f"{root}/ablations/{scope}/{variant}/{task}/{method}/eval_seed{seed}.json"


def data_file(task: str, split: str, root: str = RESULTS) -> str:
    return f"{root}/data/{task}/{split}.jsonl"


BASE_MODEL = f"{RESULTS}/models/base"   # rtpo base-model's: every run's but the sweep's
SWEEP_BASE = f"{RESULTS}/sweep/models/base"   # rtpo sweep-base's: the sweep's runs'


@dataclass(frozen=True)
class RunInputs:
    """What a run trains from and is evaluated on, under the DAG's results root: its data directory (a task's
    train / eval / experts files, made by `rtpo data` with `data_sets` as its `--set` overrides) and its base
    model (`rtpo base-model`'s, or the sweep base model of `rtpo sweep-base`)."""

    data_dir: str
    base_model: str = BASE_MODEL
    data_sets: tuple[str, ...] = ()

    @property
    def train_file(self) -> str:
        return f"{self.data_dir}/train.jsonl"

    @property
    def eval_data(self) -> str:
        return f"{self.data_dir}/eval.jsonl"


def task_inputs(task: str) -> RunInputs:
    """The inputs of a main-grid run or an ablation arm on `task`: its data, the base model."""
    return RunInputs(f"{RESULTS}/data/{task}")


def sweep_data_dir(hops: int) -> str:
    return f"{RESULTS}/sweep/data/h{hops}"


# ---------------------------------------------------------------------------------------------
# Ablation arms and sweep cells: a run's setting, over its seeds
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AblationCell:
    """One ablation arm (study, variant) of one method, over its seeds.

    `value` is the config value the variant stands for (3 for G3, "kl:0.01", the psi of credit
    assignment); `sets` are the `--set key=value` overrides that make it."""

    study: str
    variant: str
    task: str
    method: str
    seeds: tuple[int, ...]
    sets: tuple
    value: Any = None

    @property
    def scope(self) -> str:  # its runs' scope: the study
        return self.study

    @property
    def key(self) -> str:  # the {cell} wildcard: results/ablations/{cell}/seed<S>/
        return f"{self.study}/{self.variant}/{self.task}/{self.method}"

    def run_key(self, seed: int) -> str:  # the {run} wildcard of the copy rules: results/ablations/{run}/
        return f"{self.key}/seed{seed}"

    def eval_key(self, seed: int) -> str:  # the {evalrun} wildcard: results/ablations/{evalrun}.json
        return f"{self.key}/eval_seed{seed}"

    def run_dir(self, seed: int, root: str = RESULTS) -> str:
        return run_dir(self.task, self.method, seed, self.study, self.variant, root)

    def eval_file(self, seed: int, root: str = RESULTS) -> str:
        return eval_file(self.task, self.method, seed, self.study, self.variant, root)


def ablation_cells(ablations: Mapping[str, Any], seeds: Iterable[int] | None = None) -> list[AblationCell]:
    """Every ablation arm of config `ablations`, in study order, each study over its own `seeds` (ablations.<study>.seeds)
    or else `seeds` (default: ablations.seeds).
    The first three studies vary RTPO; credit assignment trains its `methods` (default RTPO) under `psi`."""
    cells = []
    seeds = tuple(int(s) for s in (ablations["seeds"] if seeds is None else seeds))

    def add(study, task, methods, values, key):
        # a study's own `seeds` (ablations.<study>.seeds) replace ablations.seeds for its arms, and its
        # `seed_counts.<method>` = n gives one method's arms seeds 0..n-1
        study_seeds = tuple(int(s) for s in ablations[study].get("seeds", seeds))
        counts = ablations[study].get("seed_counts") or {}
        for v in values:
            for m in methods:
                arm_seeds = tuple(range(int(counts[m]))) if m in counts else study_seeds
                cells.append(AblationCell(study, study_variant(study, v), task, m, arm_seeds,
                                          (f"method.{m}.{key}={v}",), v))

    for study in RTPO_STUDIES:
        if study in ablations:
            a = ablations[study]
            add(study, a["task"], ["rtpo"], a["values"], study)
    for study in PSI_STUDIES:
        if study in ablations:
            a = ablations[study]
            add(study, a["task"], study_methods(ablations, study), [a["psi"]], "psi")
    if "matched_updates" in ablations:   # one arm per task and method: K = RTPO's realised stage count there
        a = ablations["matched_updates"]
        for task, k in a["mini_batches"].items():
            add("matched_updates", task, study_methods(ablations, "matched_updates"), [int(k)], "mini_batches")
    if "turn_rows" in ablations:         # GRPO's rows one per turn, (c_k, turn k): no rollout-training mismatch
        a = ablations["turn_rows"]
        for task in a["tasks"]:
            add("turn_rows", task, study_methods(ablations, "turn_rows"), ["turn"], "train_rows")
    cells.sort(key=lambda c: STUDIES.index(c.study))
    return cells


UNTRAINED = "vanilla"   # the sweep's no-RL arm: the sweep base model evaluated as is (method.vanilla, steps 0)
ARM_CONTRAST, ARM_OPTIONAL, ARM_NO_RL = "contrast", "optional", "no-RL"   # SweepCell.arm


@dataclass(frozen=True)
class SweepCell:
    """One cell of the mechanism sweep: `method` under rollout context map `psi` on search questions of
    exactly `hops` hops (the horizon K), over `seeds`. Files per seed S: results/sweep/h<K>/psi-<psi>/
    <method>/seedS/ (as a main run) and .../eval_seedS.json. `sets` are its `--set` overrides. `arm`: the
    2 x 2 contrast (sweep.psi x sweep.methods), an optional arm (sweep.optional: reported per cell, never in
    the interaction) or the no-RL arm (the sweep base model evaluated untrained). `inputs`: its horizon's
    data (made with sweep_data_sets) and the sweep base model."""

    hops: int
    psi: str
    method: str
    seeds: tuple[int, ...]
    sets: tuple
    arm: str = ARM_CONTRAST
    inputs: RunInputs | None = None

    scope = SWEEP    # its runs' scope and task
    task = "search"

    @property
    def variant(self) -> str:  # a sweep run's variant: h<K>/psi-<psi>
        return f"h{self.hops}/psi-{variant_name(self.psi)}"

    @property
    def key(self) -> str:  # the {scell} wildcard
        return f"{self.variant}/{self.method}"

    def run_dir(self, seed: int, root: str = RESULTS) -> str:
        return run_dir("search", self.method, seed, SWEEP, self.variant, root)

    def eval_file(self, seed: int, root: str = RESULTS) -> str:
        return eval_file("search", self.method, seed, SWEEP, self.variant, root)


def sweep_data_sets(cfg: Mapping[str, Any], hops: int) -> list[str]:
    """The `--set` overrides of the sweep's data at horizon K = hops: K-hop search questions, the
    sweep's split sizes and demonstrations, max_turns = K + extra_turns."""
    sw = cfg["sweep"]
    n_train = int(sw.get("n_train", 400))
    return [f"data.search.hops={hops}", f"data.search.n_train={n_train}",
            f"data.search.n_eval={int(sw.get('n_eval', 200))}",
            f"sft.demos_per_task={min(int(sw.get('demos_per_hops', 300)), n_train)}",
            f"env.search.max_turns={hops + int(sw.get('extra_turns', 2))}"]


def sweep_model_sets(cfg: Mapping[str, Any]) -> list[str]:
    """The `--set` override of every sweep job's model section: the sweep base model's position limit
    (sweep.max_position), so that the model settings it records match the runs' config
    (rtpo.assembly.check_model_fits). Only the embedded model has one."""
    if cfg["model"]["source"] != "tiny":
        return []
    return [f"model.tiny.max_position={int(cfg['sweep'].get('max_position', 2048))}"]


def sweep_errors(cfg: Mapping[str, Any]) -> list[str]:
    """What the schema cannot say about config `sweep` (rtpo.dag.cross_reference_errors reports them with
    the rest; sweep_cells refuses a config that has any): the contrast is psi = full against at least one
    lossy psi, and RTPO against at least one flat method whose chains can be matched (its card's
    budget_key); every horizon K has RTPO's expected trajectories per prompt (sweep.rtpo_trajectories.h<K>)."""
    sw = cfg.get("sweep")
    if not sw:
        return []
    errors = []
    psi, methods = [str(p) for p in sw["psi"]], list(sw["methods"])
    if "full" not in psi or len(psi) < 2:
        errors.append(f"'sweep.psi' is {psi}: the contrast needs psi 'full' and at least one lossy psi (e.g. "
                      "[qwen3, full]); other maps go to 'sweep.optional.psi'")
    if "rtpo" not in methods or not any(card(m).budget_key for m in methods if m != "rtpo"):
        errors.append(f"'sweep.methods' is {methods}: the contrast needs rtpo and a flat method whose chains can "
                      "be matched to RTPO's budget (e.g. [rtpo, grpo]); others go to 'sweep.optional.methods'")
    opt = sw.get("optional") or {}
    for what, main in (("psi", psi), ("methods", methods)):
        both = sorted(set(map(str, opt.get(what) or [])) & set(main))
        if both:
            errors.append(f"'sweep.optional.{what}' repeats {both} of 'sweep.{what}' (an arm is in the contrast or "
                          "optional, not both)")
    if UNTRAINED in methods or UNTRAINED in (opt.get("methods") or []):
        errors.append(f"'sweep.methods' lists {UNTRAINED}: the no-RL arm is 'sweep.no_rl' (true by default)")
    table = sw.get("rtpo_trajectories") or {}
    if any(card(m).budget_key for m in [*methods, *(opt.get("methods") or [])]):
        missing = [f"h{int(k)}" for k in sw["hops"] if f"h{int(k)}" not in table]
        if missing:
            errors.append(f"'sweep.rtpo_trajectories' has no entry {', '.join(missing)}: a flat method's chains at "
                          "horizon K are round(sweep.rtpo_trajectories.h<K>), RTPO's expected trajectories per prompt")
    return errors


def sweep_budget(cfg: Mapping[str, Any], hops: int) -> int:
    """The chains per prompt of a flat method at horizon K: sweep.rtpo_trajectories.h<K> rounded, RTPO's
    expected complete trajectories per prompt at that K in E.3's count (trunks plus the siblings forked at
    every realised boundary, as the main grid's table_budget counts them). A stated table rather than
    RTPO's runs: a budget read from RTPO's metrics would make the flat runs' settings, stamps and run.json
    depend on result files (rtpo.experiment computes them from the config alone) and make every flat run
    wait for every RTPO seed; the sweep's report sets RTPO's realised count beside each cell and flags a
    ratio outside 1.0 +- 10 % (rtpo.report.sweep)."""
    table = cfg["sweep"].get("rtpo_trajectories") or {}
    key = f"h{int(hops)}"
    if key not in table:
        from rtpo.config import ConfigError

        raise ConfigError(f"'sweep.rtpo_trajectories.{key}' is missing: the flat methods' chains at K = {hops} "
                          "are round(RTPO's expected trajectories per prompt)")
    return max(1, math.floor(float(table[key]) + 0.5))   # half up (Python's round() takes 8.5 to 8)


def sweep_cells(cfg: Mapping[str, Any]) -> list[SweepCell]:
    """Every cell of config `sweep`, K-major, then psi (the contrast's, then the optional ones), then the
    no-RL arm (sweep.no_rl: vanilla, steps 0, under that psi), the contrast's methods and the optional
    ones ([] without a sweep section). A flat method whose card names its chain option (`budget_key`) gets
    sweep_budget at that K."""
    sw = cfg.get("sweep")
    if not sw:
        return []
    errors = sweep_errors(cfg)
    if errors:
        from rtpo.config import ConfigError

        raise ConfigError("; ".join(errors))
    seeds = tuple(int(s) for s in sw["seeds"])
    train = [f"train.{k}={json.dumps(v)}" for k, v in sorted((sw.get("train") or {}).items())]
    opt = sw.get("optional") or {}
    psis = [(str(p), ARM_CONTRAST) for p in sw["psi"]] + [(str(p), ARM_OPTIONAL) for p in opt.get("psi") or []]
    methods = [(m, ARM_CONTRAST) for m in sw["methods"]] + [(m, ARM_OPTIONAL) for m in opt.get("methods") or []]
    cells = []
    for k in sw["hops"]:
        inputs = RunInputs(sweep_data_dir(int(k)), SWEEP_BASE, tuple(sweep_data_sets(cfg, k)))
        turns = inputs.data_sets[-1]
        for psi, psi_arm in psis:
            if sw.get("no_rl", True):
                # untrained whatever train.* says (steps 0 is what makes a run evaluate its base model as is);
                # no sweep.train override, which it never reads: a changed training budget reruns no evaluation
                cells.append(SweepCell(int(k), psi, UNTRAINED, seeds,
                                       (*sweep_model_sets(cfg), turns, f"method.{UNTRAINED}.psi={psi}",
                                        f"method.{UNTRAINED}.steps=0"), ARM_NO_RL, inputs))
            for m, m_arm in methods:
                sets = [*sweep_model_sets(cfg), turns, f"method.{m}.psi={psi}", *train]
                if card(m).budget_key:
                    sets.append(f"method.{m}.per_task.search.{card(m).budget_key}={sweep_budget(cfg, k)}")
                arm = ARM_CONTRAST if psi_arm == m_arm == ARM_CONTRAST else ARM_OPTIONAL
                cells.append(SweepCell(int(k), psi, m, seeds, tuple(sets), arm, inputs))
    return cells


# ---------------------------------------------------------------------------------------------
# Seed groups
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


# ---------------------------------------------------------------------------------------------
# Runs
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunKey:
    """One (scope, variant, task, method, seed) run of the experiment."""

    scope: str
    variant: str
    task: str
    method: str
    seed: int

    def run_dir(self, root: str = RESULTS) -> str:
        return run_dir(self.task, self.method, self.seed, self.scope, self.variant, root)

    def eval_file(self, root: str = RESULTS) -> str:
        return eval_file(self.task, self.method, self.seed, self.scope, self.variant, root)

    def task_method_seed(self) -> tuple[str, str, int]:
        return self.task, self.method, self.seed

    def as_dict(self) -> dict[str, Any]:
        return {"scope": self.scope, "variant": self.variant, "task": self.task, "method": self.method,
                "seed": self.seed}

    @classmethod
    def of(cls, d: Mapping[str, Any]) -> "RunKey":
        return cls(str(d["scope"]), str(d["variant"]), str(d["task"]), str(d["method"]), int(d["seed"]))

    def __str__(self) -> str:
        return "/".join(str(v) for v in (self.scope, self.variant or "-", self.task, self.method, f"seed{self.seed}"))


@dataclass(frozen=True, eq=False)
class Run:
    """One run of the experiment: its key, `--set` overrides, the seeds of its training job, its inputs, and
    the run it copies (None: it trains); `value` is its variant's config value (an ablation arm's, a sweep
    cell's psi). Every run is the same kind of thing whatever its scope: its effective settings (what
    `rtpo train` trains with), the settings its inputs were built with and the identity run.json records of
    it are computed on first use, once per setting (`Experiment.run_settings`, `Experiment.input_settings`),
    so that listing runs needs only the grid's keys."""

    key: RunKey
    sets: tuple[str, ...]
    seed_group: tuple[int, ...]
    inputs: RunInputs
    value: Any = None
    experiment: "Experiment | None" = field(default=None, repr=False)

    @property
    def copy_of(self) -> RunKey | None:
        """The main run this ablation arm's run copies (same settings, same seed), None when it trains."""
        src = self.experiment.copies.get(f"{self.scope}/{self.variant}/{self.task}/{self.method}")
        return None if src is None else RunKey(MAIN, "", src[0], src[1], self.seed)

    @property
    def settings(self) -> dict[str, Any]:
        """The effective settings: rtpo.config.method_settings after `sets`, plus engine and verl."""
        return self.experiment.run_settings(self.method, self.task, self.sets)

    @property
    def config(self) -> dict[str, Any]:
        """The config this run trains with: the experiment's, after the run's `sets`."""
        return self.experiment.config_with(self.sets, f"the --set of run {self.key}")

    @property
    def identity(self) -> dict[str, Any]:
        """What run.json says of this run before it trains (rtpo.run_record.make_record adds the inputs'
        sha256, the code and the steps): key, copy_of, settings, and its inputs' paths and settings."""
        data, base = self.experiment.input_settings(self.inputs, self.task)
        return {"key": self.key.as_dict(), "copy_of": None if self.copy_of is None else self.copy_of.as_dict(),
                "settings": self.settings,
                "inputs": {"train_file": {"path": self.inputs.train_file, "settings": data},
                           "base_model": {"path": self.inputs.base_model, "settings": base}}}

    @property
    def stamp(self) -> str:
        """The job stamp (rtpo.run_record.job_stamp of its identity): its settings and its inputs' settings."""
        return self.experiment.run_stamp(self)

    @property
    def eval_settings(self) -> dict[str, Any]:
        return self.experiment.eval_settings(self.method, self.task, self.sets)

    scope = property(lambda self: self.key.scope)
    variant = property(lambda self: self.key.variant)
    task = property(lambda self: self.key.task)
    method = property(lambda self: self.key.method)
    seed = property(lambda self: self.key.seed)

    def run_dir(self, root: str = RESULTS) -> str:
        return self.key.run_dir(root)

    def eval_file(self, root: str = RESULTS) -> str:
        return self.key.eval_file(root)

    @property
    def steps(self) -> int:
        """The training steps the run takes (0: evaluated as is, e.g. vanilla)."""
        return int(self.settings["train"]["steps"])

    @property
    def trains(self) -> bool:
        """Whether the run trains (its card's `trains` and steps > 0) rather than copying its base model."""
        return card(self.method).trains and self.steps > 0


@dataclass(frozen=True)
class Variant:
    """One variant of a study: its directory name and the config value it stands for."""

    name: str
    value: Any


@dataclass(frozen=True)
class Study:
    """An ablation study as the report reads it: its task, methods and variants (in config order). A study
    over several tasks (matched_updates) has them in `tasks`, `task` is its first; `cells` are its arms'
    (variant, task, method), for the report of such a study."""

    name: str
    task: str
    methods: tuple[str, ...]
    variants: tuple[Variant, ...]
    tasks: tuple[str, ...] = ()
    cells: tuple[tuple[str, str, str], ...] = ()

    def variant_names(self) -> list[str]:
        return [v.name for v in self.variants]

    def variant_of(self, value: Any) -> str | None:
        """The name of the variant that stands for config value `value` (None if it is not one)."""
        for v in self.variants:
            if v.value == value or (self.name == "group_size" and value is not None and float(v.value) == float(value)):
                return v.name
        return None


def studies_of(cells: Iterable[AblationCell]) -> dict[str, Study]:
    """The studies of a list of ablation arms, in their order."""
    out: dict[str, Study] = {}
    for c in cells:
        st = out.get(c.study) or Study(c.study, c.task, (), ())
        methods = st.methods if c.method in st.methods else st.methods + (c.method,)
        variants = st.variants if c.variant in st.variant_names() else st.variants + (Variant(c.variant, c.value),)
        tasks = st.tasks if c.task in st.tasks else st.tasks + (c.task,)
        out[c.study] = Study(c.study, st.task, methods, variants, tasks, st.cells + ((c.variant, c.task, c.method),))
    return out


class Experiment:
    """Every run of one validated config (schema defaults filled in): `runs`, in order main grid
    (task-major), the airline study's runs the main grid lacks, every seed of every ablation arm, every
    seed of every sweep cell; plus the settings of every job upstream of them (data, base model)."""

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        self.cfg = cfg
        self.tasks = list(cfg.get("tasks", []))
        self.methods = list(cfg.get("methods", []))
        self.seeds = [int(s) for s in cfg.get("seeds", [0])]
        self.seed_counts = {t: {m: int(n) for m, n in (c or {}).items()}
                            for t, c in (cfg.get("seed_counts") or {}).items()}
        self.seeds_per_job = int(cfg.get("seeds_per_job", 1))
        self.ablations = cfg.get("ablations") or {}
        self.ablation_seeds = [int(s) for s in self.ablations.get("seeds", self.seeds)]
        self.sweep_seeds = [int(s) for s in (cfg.get("sweep") or {}).get("seeds", [])]
        self._settings: dict[tuple, dict[str, Any]] = {}
        self._stamps: dict[tuple, str] = {}
        self.arms: list[AblationCell] = ablation_cells(self.ablations, self.ablation_seeds)
        self.sweep: list[SweepCell] = sweep_cells(cfg)
        self.sweep_by_key = {c.key: c for c in self.sweep}
        # the studies the paper's report reads (`all`); a study with `target: sweep` is read by the sweep's report
        self.studies: dict[str, Study] = studies_of(c for c in self.arms if study_target(self.ablations, c.study) != "sweep")
        self.sweep_studies: dict[str, Study] = studies_of(c for c in self.arms
                                                          if study_target(self.ablations, c.study) == "sweep")
        self.runs: list[Run] = self._runs()
        self.by_key: dict[RunKey, Run] = {r.key: r for r in self.runs}

    # ------------------------------------------------------------------ the main grid
    def cell_seeds(self, task: str, method: str) -> list[int]:
        """The main-grid seeds of one (task, method) cell: 0..n-1 where `seed_counts.<task>.<method>` is
        n, else `seeds`. Every cell's seeds start at 0 (rtpo.dag.cross_reference_errors holds `seeds` to
        0..n-1 when seed_counts is set), so two cells share their first min(n_a, n_b) seeds and a paired
        comparison pairs those (rtpo.report.stats.paired)."""
        n = self.seed_counts.get(task, {}).get(method)
        return list(range(n)) if n is not None else list(self.seeds)

    def main_cells(self) -> list[tuple[str, str, int]]:
        """(task, method, seed) of every main-grid run: each (task, method) cell at its seeds (cell_seeds),
        then the airline study's (every method on airline at the ablation seeds, paper G.1) where the main
        grid lacks them."""
        cells = [(t, m, s) for t in self.tasks for m in self.methods for s in self.cell_seeds(t, m)]
        if "airline" in self.tasks and self.ablations:
            have = set(cells)
            left_out = {m for m, n in self.seed_counts.get("airline", {}).items() if n == 0}   # seed_counts 0
            cells += [c for c in (("airline", m, s) for m in self.methods if m not in left_out
                                  for s in self.ablation_seeds) if c not in have]
        return cells

    @functools.cached_property
    def copies(self) -> dict[str, tuple[str, str] | None]:
        """{arm key: (task, method) of the main runs it copies, or None} (computed on first use: it needs
        every arm's effective settings)."""
        main = set(self.main_cells())
        return {c.key: self._copies(c, main) for c in self.arms}

    def _copies(self, cell: AblationCell, main: set) -> tuple[str, str] | None:
        """(task, method) of the main runs this ablation arm copies, or None (it trains).

        An arm copies the main runs when `ablations.reuse_main_runs` is true (the default), the main grid
        has that (task, method) at every ablation seed, and the arm's overrides change none of its
        effective settings, e.g. G3 when method.rtpo.group_size is 3: its files of the ablation seeds are
        then copies of the main runs' (rules ablation_reuse_run / ablation_reuse_eval) instead of a
        retrain, and the ledger adds the main grid's other seeds (rtpo.report.claims.claim.with_main_seeds)."""
        if not self.ablations.get("reuse_main_runs", True):
            return None
        if not all((cell.task, cell.method, s) in main for s in cell.seeds):
            return None
        if self.run_settings(cell.method, cell.task, cell.sets) != self.run_settings(cell.method, cell.task):
            return None
        return cell.task, cell.method

    def _groups(self, seeds: list[int]) -> dict[int, tuple[int, ...]]:
        per = self.seeds_per_job if self.seeds_per_job > 1 else 1
        return {s: g for g in seed_groups(seeds, per) for s in g}

    def _runs(self) -> list[Run]:
        # A run's seed group is the job that trains it: a main cell's own seeds in groups of seeds_per_job
        # (a 5-seed cell at 4 per job: seeds0-3 and seed4), the airline study's extra seeds in groups of the
        # ablation seeds, an arm's study seeds in groups of seeds_per_job.
        runs = []
        arm_groups = self._groups(self.ablation_seeds)
        cell_groups = {(t, m): self._groups(self.cell_seeds(t, m)) for t in self.tasks for m in self.methods}
        for t, m, s in self.main_cells():
            group = cell_groups.get((t, m), {}).get(s) or arm_groups[s]
            runs.append(Run(RunKey(MAIN, "", t, m, s), (), group, task_inputs(t), experiment=self))
        for c in self.arms:
            groups = self._groups(list(c.seeds))
            for s in c.seeds:
                runs.append(Run(RunKey(c.study, c.variant, c.task, c.method, s), tuple(c.sets), groups[s],
                                task_inputs(c.task), c.value, self))
        sweep_groups = self._groups(self.sweep_seeds)
        for c in self.sweep:
            for s in c.seeds:
                runs.append(Run(RunKey(SWEEP, c.variant, "search", c.method, s), tuple(c.sets), sweep_groups[s],
                                c.inputs, c.psi, self))
        return runs

    # ------------------------------------------------------------------ selections
    def select(self, scope: str | None = None, task: str | None = None, method: str | None = None) -> list[Run]:
        return [r for r in self.runs if (scope is None or r.scope == scope) and (task is None or r.task == task)
                and (method is None or r.method == method)]

    def in_sweep_target(self, run: Run) -> bool:
        """Whether a run belongs to the mechanism sweep's target: a sweep cell, or an arm of a study with
        `target: sweep` (outside `all`; the sweep's report reads it)."""
        return run.scope == SWEEP or (run.scope in self.ablations and study_target(self.ablations, run.scope) == "sweep")

    def sweep_study_runs(self) -> list[Run]:
        """The runs the sweep's report reads for the studies of its target: their arms and the main-grid runs of
        the same task, method and seed, which they pair with (Control B: (RTPO − GRPO)[main psi] − [full])."""
        arms = [r for r in self.runs if r.scope in self.sweep_studies]
        twins = {(r.task, r.method, r.seed) for r in arms}
        return arms + [r for r in self.runs if r.scope == MAIN and (r.task, r.method, r.seed) in twins]

    def report_runs(self) -> list[Run]:
        """The runs the paper's report reads: the main grid and every ablation arm of `all` (the sweep's target
        has its own report)."""
        return [r for r in self.runs if not self.in_sweep_target(r)]

    def run(self, key: RunKey) -> Run:
        try:
            return self.by_key[key]
        except KeyError:
            raise KeyError(f"no run {key} in this config") from None

    def run_for(self, key: RunKey) -> Run:
        """The run `rtpo train` trains for `key`: the experiment's run of that key, or, for a main-grid key the
        grid does not list (another seed, a task or method the config's lists leave out), a run with the main
        grid's settings of that (task, method), trained alone. An ablation or sweep key must be one of the
        config's (ValueError naming the known variants)."""
        if key in self.by_key:
            return self.by_key[key]
        if key.scope == MAIN:
            if key.variant:
                raise ValueError(f"run {key}: a main-grid run has no variant (got --variant {key.variant!r})")
            return Run(key, (), (key.seed,), task_inputs(key.task), experiment=self)
        known = sorted({f"{r.variant} ({r.task}, {r.method}, seeds {list(r.seed_group)})"
                        for r in self.runs if r.scope == key.scope})
        scopes = sorted({r.scope for r in self.runs if r.scope != MAIN})
        if not known:
            raise ValueError(f"run {key}: this config has no runs of scope {key.scope!r} (its scopes: main"
                             f"{', ' + ', '.join(scopes) if scopes else ''})")
        raise ValueError(f"run {key} is not one of this config's {key.scope} runs: {'; '.join(known)}")

    # ------------------------------------------------------------------ settings
    def run_settings(self, method: str, task: str, sets: Iterable[str] = ()) -> dict[str, Any]:
        """The effective settings of one training run (rtpo.config.method_settings after `sets`), computed
        once per (method, task, sets); callers get a copy."""
        key = ("run", method, task, tuple(sets))
        if key not in self._settings:
            cfg = self.config_with(sets, "a run's override")
            self._settings[key] = {"engine": cfg["engine"], "verl": cfg.get("verl"), **method_settings(cfg, method, task)}
        return copy.deepcopy(self._settings[key])

    def config_with(self, sets: Iterable[str], source: str) -> dict[str, Any]:
        cfg = copy.deepcopy(dict(self.cfg))
        for s in sets:
            set_path(cfg, s, source=source)
        return cfg

    def data_settings(self, task: str) -> dict[str, Any]:
        """What `rtpo data --task T` reads of the config (`rtpo.config.data_settings`, which it calls)."""
        return data_settings(self.cfg, task)

    def base_model_settings(self) -> dict[str, Any]:
        """What `rtpo base-model` reads (rtpo.sft.build_base_model); threads only change speed."""
        model = {k: v for k, v in self.cfg["model"].items() if k != "threads"}
        sft = {k: v for k, v in self.cfg["sft"].items() if k != "threads"}
        psis = sorted({self.cfg["env"][t]["psi"] for t in self.tasks} | {"full"})
        out = {"model": model, "sft": sft, "tasks": self.tasks, "psis": psis}
        if self.cfg["sft"]["epochs"] > 0 and self.cfg["sft"]["demos_per_task"] > 0:
            out["data"] = [self.data_settings(t) for t in self.tasks]
        return out

    def eval_settings(self, method: str, task: str, sets: Iterable[str] = ()) -> dict[str, Any]:
        s = self.run_settings(method, task, sets)
        return {"eval": self.cfg["eval"], "env": s["env"], "psi": s["psi"], "engine": s["engine"], "verl": s["verl"]}

    def input_settings(self, inputs: RunInputs, task: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """(data, base model) settings of a run's inputs: what `rtpo data --task T` reads under the inputs'
        `data_sets`, and what the job that writes its base model reads (`rtpo base-model`, `rtpo sweep-base`);
        computed once per input."""
        key = ("inputs", inputs, task)
        if key not in self._settings:
            data = data_settings(self.config_with(inputs.data_sets, "a data override"), task)
            base = {BASE_MODEL: self.base_model_settings, SWEEP_BASE: self.sweep_base_settings}[inputs.base_model]()
            self._settings[key] = (data, base)
        return self._settings[key]

    def run_stamp(self, run: Run) -> str:
        """rtpo.run_record.job_stamp of the run's identity, once per (method, task, sets, inputs)."""
        key = ("stamp", run.method, run.task, run.sets, run.inputs)
        if key not in self._stamps:
            self._stamps[key] = job_stamp(run.identity)
        return self._stamps[key]

    # ------------------------------------------------------------------ the sweep's grid and inputs
    def sweep_cell(self, key: RunKey) -> SweepCell:
        return self.sweep_by_key[f"{key.variant}/{key.method}"]

    def sweep_hops(self) -> list[int]:
        return [int(k) for k in self.cfg["sweep"]["hops"]] if self.sweep else []

    def sweep_data_settings(self, hops: int) -> dict[str, Any]:
        """What `rtpo data --task search` reads under the sweep's overrides at horizon K."""
        return data_settings(self.config_with(sweep_data_sets(self.cfg, hops), "sweep override"), "search")

    def sweep_base_settings(self) -> dict[str, Any]:
        """What `rtpo sweep-base` reads: the base model's settings (its input), the sweep's warm start."""
        sw = self.cfg["sweep"]
        keys = ("psi", "demos_per_hops", "sft_epochs", "max_position")
        return {"base": self.base_model_settings(), "sweep": {k: sw.get(k) for k in keys},
                "model": self.config_with(sweep_model_sets(self.cfg), "sweep override")["model"],
                "sft": {k: v for k, v in self.cfg["sft"].items() if k != "threads"},
                "data": [self.sweep_data_settings(k) for k in self.sweep_hops()]}


__all__ = ["MAIN", "SWEEP", "RESULTS", "STUDIES", "RTPO_STUDIES", "PSI_STUDIES", "TASK_KINDS",
           "variant_name", "study_variant", "study_tasks", "study_methods", "study_target", "run_dir", "eval_file", "data_file", "fingerprint", "stamp",
           "AblationCell", "ablation_cells", "SWEEP_BASE", "UNTRAINED", "ARM_CONTRAST", "ARM_OPTIONAL", "ARM_NO_RL",
           "sweep_data_dir", "SweepCell", "sweep_data_sets", "sweep_model_sets", "sweep_errors", "sweep_budget",
           "sweep_cells", "seed_groups", "group_label", "RunKey", "BASE_MODEL", "RunInputs", "task_inputs", "Run", "Variant",
           "Study", "studies_of", "Experiment"]
