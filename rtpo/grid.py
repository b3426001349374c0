"""The experiment grid and the results layout, in one place: which runs a config asks for and where each
one's files live. Torch-free and Snakemake-free; the DAG (rtpo.dag, workflow/rules/*.smk) writes these
paths and the report (rtpo.report.load, rtpo.report.sweep) reads them, both through this module.

Layout, under a results root (`root`, "results" for the DAG; the report takes any):

    runs/{task}/{method}/seed{S}/                                    a main run (metrics.jsonl, summary.json, final/)
    eval/{task}/{method}/seed{S}.json                                its evaluation
    ablations/{study}/{variant}/{task}/{method}/seed{S}/             an ablation arm's run
    ablations/{study}/{variant}/{task}/{method}/eval_seed{S}.json    its evaluation
    sweep/h{K}/psi-{psi}/{method}/seed{S}/, .../eval_seed{S}.json    a cell of the mechanism sweep
    data/{task}/{split}.jsonl                                        a task's data

Variant names (`study_variant`): group_size 3 -> "G3"; sync "interval:2" -> "interval-2", "kl:0.01" ->
"kl-0.01"; continuation "on_policy" -> "on_policy"; credit_assignment's psi "full" -> "psi-full"
("truncate:4" -> "psi-truncate-4").

Every ablation arm runs `ablations.seeds`; an arm whose effective settings are the main grid's copies the
main runs of those seeds instead of training (rtpo.dag.Dag.reused), and the ledger adds the main grid's
other seeds to it. `expected_runs` lists exactly the runs the DAG writes (tests/test_grid.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

MAIN = "main"          # the scope of the main grid's runs (an ablation run's scope is its study)
RESULTS = "results"    # the DAG's results root

# the ablation studies of config `ablations` (paper §4.3, F.3, G.2, G.6); the first three vary RTPO
STUDIES = ("group_size", "sync", "continuation", "credit_assignment")
RTPO_STUDIES = ("group_size", "sync", "continuation")
TASK_KINDS = ("math", "search", "airline")

# the paper's tables by name (rtpo.report.tables.TABLES, in its order): each is a Snakemake target of its own
# (workflow/rules/report.smk) that writes results/tables/<name>.{csv,md,tex} (`rtpo report tables --only`)
TABLE_NAMES = (
    "table01_main", "table01_vs_vanilla", "table01_gains", "table_learning", "table_budget",
    "table02_credit_assignment", "table03_continuation", "table06_continuation_detail", "table07_airline_online",
    "table08_airline_eval", "table09_airline_tools", "table10_group_size", "table11_group_size_cost",
    "table12_trunk_failures", "table13_failure_dynamics", "table14_training_cost", "table21_budget",
    "tableG5_tool_use", "tableG6_sync",
)


# ---------------------------------------------------------------------------------------------
# Paths
# ---------------------------------------------------------------------------------------------
def variant_name(value: Any) -> str:
    """A path-safe name of a config value: 'interval:2' -> 'interval-2', 'kl:0.01' -> 'kl-0.01'."""
    return str(value).replace(":", "-")


def study_variant(study: str, value: Any) -> str:
    """The directory name of one variant of an ablation study: G3, interval-2, kl-0.01, on_policy, psi-full."""
    if study == "group_size":
        return f"G{int(value)}"
    if study == "credit_assignment":
        return f"psi-{variant_name(value)}"
    return variant_name(value)


def run_dir(task: str, method: str, seed: int, scope: str = MAIN, variant: str = "", root: str = RESULTS) -> str:
    """The run directory of one seed of a main run (scope MAIN) or of an ablation arm (scope = its study)."""
    if scope == MAIN:
        return f"{root}/runs/{task}/{method}/seed{seed}"
    return f"{root}/ablations/{scope}/{variant}/{task}/{method}/seed{seed}"


def eval_file(task: str, method: str, seed: int, scope: str = MAIN, variant: str = "", root: str = RESULTS) -> str:
    """The evaluation JSON of one seed of a main run or of an ablation arm."""
    if scope == MAIN:
        return f"{root}/eval/{task}/{method}/seed{seed}.json"
    return f"{root}/ablations/{scope}/{variant}/{task}/{method}/eval_seed{seed}.json"


def data_file(task: str, split: str, root: str = RESULTS) -> str:
    return f"{root}/data/{task}/{split}.jsonl"


# ---------------------------------------------------------------------------------------------
# Ablation arms
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AblationCell:
    """One ablation arm (study, variant) of one method, over its seeds, and its evaluation.

    `value` is the config value the variant stands for (3 for G3, "kl:0.01", the psi of credit
    assignment); `sets` are the `--set key=value` overrides that make it. Files per seed: run_dir(S),
    eval_file(S) (the module docstring's layout)."""

    study: str
    variant: str
    task: str
    method: str
    seeds: tuple[int, ...]
    sets: tuple
    value: Any = None

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
    """Every ablation arm of config `ablations`, in study order, over `seeds` (default: ablations.seeds).
    The first three studies vary RTPO; credit assignment trains its `methods` (default RTPO) under `psi`."""
    cells = []
    seeds = tuple(int(s) for s in (ablations["seeds"] if seeds is None else seeds))

    def add(study, task, methods, values, key):
        for v in values:
            for m in methods:
                cells.append(AblationCell(study, study_variant(study, v), task, m, seeds,
                                          (f"method.{m}.{key}={v}",), v))

    for study in RTPO_STUDIES:
        if study in ablations:
            a = ablations[study]
            add(study, a["task"], ["rtpo"], a["values"], study)
    if "credit_assignment" in ablations:
        a = ablations["credit_assignment"]
        add("credit_assignment", a["task"], a.get("methods") or ["rtpo"], [a["psi"]], "psi")
    return cells


@dataclass(frozen=True)
class Variant:
    """One variant of a study: its directory name and the config value it stands for."""

    name: str
    value: Any


@dataclass(frozen=True)
class Study:
    """An ablation study as the report reads it: its task, methods and variants (in config order)."""

    name: str
    task: str
    methods: tuple[str, ...]
    variants: tuple[Variant, ...]

    def variant_names(self) -> list[str]:
        return [v.name for v in self.variants]


def studies_of(cells: Iterable[AblationCell]) -> dict[str, Study]:
    """The studies of a list of ablation arms, in their order."""
    out: dict[str, Study] = {}
    for c in cells:
        st = out.get(c.study) or Study(c.study, c.task, (), ())
        methods = st.methods if c.method in st.methods else st.methods + (c.method,)
        variants = st.variants if c.variant in st.variant_names() else st.variants + (Variant(c.variant, c.value),)
        out[c.study] = Study(c.study, c.task, methods, variants)
    return out


# ---------------------------------------------------------------------------------------------
# The mechanism sweep (config `sweep`, rules/sweep.smk; issue 36.4)
# ---------------------------------------------------------------------------------------------
SWEEP_BASE = f"{RESULTS}/sweep/models/base"


def sweep_data_dir(hops: int) -> str:
    return f"{RESULTS}/sweep/data/h{hops}"


@dataclass(frozen=True)
class SweepCell:
    """One cell of the mechanism sweep: `method` under rollout context map `psi` on search questions of
    exactly `hops` hops (the horizon K), over `seeds`. Files per seed S: results/sweep/h<K>/psi-<psi>/
    <method>/seedS/ (as a main run) and .../eval_seedS.json. `sets` are its `--set` overrides."""

    hops: int
    psi: str
    method: str
    seeds: tuple[int, ...]
    sets: tuple

    @property
    def key(self) -> str:  # the {scell} wildcard
        return f"h{self.hops}/psi-{variant_name(self.psi)}/{self.method}"

    def run_dir(self, seed: int, root: str = RESULTS) -> str:
        return f"{root}/sweep/{self.key}/seed{seed}"

    def eval_file(self, seed: int, root: str = RESULTS) -> str:
        return f"{root}/sweep/{self.key}/eval_seed{seed}.json"


# ---------------------------------------------------------------------------------------------
# Every run a config asks for
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunKey:
    """One (scope, variant, task, method, seed) run of the experiment grid."""

    scope: str
    variant: str
    task: str
    method: str
    seed: int

    def run_dir(self, root: str = RESULTS) -> str:
        return run_dir(self.task, self.method, self.seed, self.scope, self.variant, root)

    def eval_file(self, root: str = RESULTS) -> str:
        return eval_file(self.task, self.method, self.seed, self.scope, self.variant, root)


def main_runs(cfg: Mapping[str, Any]) -> list[RunKey]:
    """The main grid: every task x method x seed, task-major."""
    return [RunKey(MAIN, "", t, m, int(s)) for t in cfg.get("tasks", []) for m in cfg.get("methods", [])
            for s in cfg.get("seeds", [0])]


def expected_runs(cfg: Mapping[str, Any]) -> list[RunKey]:
    """Every run the config asks for: the main grid, then every seed of every ablation arm."""
    keys = main_runs(cfg)
    keys += [RunKey(c.study, c.variant, c.task, c.method, s) for c in config_cells(cfg) for s in c.seeds]
    return keys


def config_cells(cfg: Mapping[str, Any]) -> list[AblationCell]:
    """The ablation arms of a config (`ablations.seeds` each; a config without them: its `seeds`)."""
    abl = cfg.get("ablations") or {}
    return ablation_cells(abl, abl.get("seeds", cfg.get("seeds", [0])))


__all__ = ["MAIN", "RESULTS", "STUDIES", "RTPO_STUDIES", "TASK_KINDS", "variant_name", "study_variant", "run_dir",
           "eval_file", "data_file", "AblationCell", "ablation_cells", "Variant", "Study", "studies_of", "SWEEP_BASE",
           "sweep_data_dir", "SweepCell", "RunKey", "main_runs", "expected_runs", "config_cells"]
