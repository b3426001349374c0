"""What the rules share. The experiment's runs (rtpo.experiment) and the DAG's Python over them -- the seed
groups, the settings fingerprints, the target lists, the training shell -- are the package modules
`rtpo.experiment` and `rtpo.dag` (unit tests: tests/test_grid.py, tests/test_dag.py); this file binds them to
Snakemake:

  1. config validation (rtpo/config.schema.yaml, the package's schema) and the checks a schema cannot
     express (rtpo.dag.cross_reference_errors), then `PIPELINE = rtpo.dag.Dag(config)`;
  2. the checks of a Slurm run: a GPU on every GPU rule, the site variables ($RTPO_SLURM_*) set before
     a submission (it reads Snakemake's resource settings) and, for engine verl,
     the start-up arithmetic of every training cell (rtpo.verl_ext.startup: `rtpo check-config`);
  3. the effective config file every `rtpo` command reads;
  4. the `rtpo` console script of the Python environment that runs Snakemake, the rules' conda env;
  5. what the rules need beyond `PIPELINE` and the modules `dag` and `experiment`, which they call directly.
"""

import os
import re
import shlex
import sys

from snakemake.exceptions import WorkflowError
from snakemake.settings.types import DeploymentMethod
from snakemake.utils import validate

from rtpo import dag, experiment
from rtpo.report import table_names
from rtpo.config import SCHEMA, ConfigError, retype_command_line
from rtpo.report.landing import landing_page


# ---------------------------------------------------------------------------------------------
# 1. Validation and the DAG
# ---------------------------------------------------------------------------------------------
def _config_sources():
    files = [str(f) for f in workflow.configfiles]
    return ", ".join(files) if files else "(no config file)"


def check_config(cfg):
    """Validate `cfg` against the JSON schema (filling its defaults), then the cross-references.

    Raises WorkflowError with one line naming the offending key path and the config files.
    """
    from rtpo.config import nonfinite_keys, recursive_key

    loop = recursive_key(cfg)  # before the schema: a value containing itself would be walked for ever
    if loop is not None:
        raise WorkflowError(
            f"invalid config at '{'.'.join(loop)}': the value contains itself (a YAML alias to its "
            f"own anchor) (config files: {_config_sources()})"
        )
    try:
        validate(cfg, schema=str(SCHEMA))
    except WorkflowError as e:
        import jsonschema

        ve = e.__cause__ or e.__context__  # snakemake raises WorkflowError from the ValidationError
        if not isinstance(ve, jsonschema.ValidationError):
            raise
        where = ".".join(str(p) for p in ve.absolute_path) or "(top level)"
        raise WorkflowError(f"invalid config at '{where}': {ve.message} (config files: {_config_sources()})") from None
    bad = nonfinite_keys(cfg)  # NaN / inf pass every schema bound
    if bad:
        raise WorkflowError(
            f"invalid config at '{'.'.join(bad[0])}': not a finite number (config files: {_config_sources()})"
        )
    errors = dag.cross_reference_errors(cfg)
    if errors:
        raise WorkflowError(f"invalid config: {errors[0]} (config files: {_config_sources()})")


# `--config 'seeds=[0]'`: Snakemake leaves the scalars inside brackets as strings; read them as YAML
retype_command_line(config, workflow.config_settings.config)
check_config(config)
try:
    # not "DAG": a Snakefile's globals are snakemake.workflow's, whose DAG class the scheduler needs
    PIPELINE = dag.Dag(config)
except ConfigError as e:
    raise WorkflowError(str(e)) from None


# ---------------------------------------------------------------------------------------------
# 2. GPUs under a Slurm profile
# ---------------------------------------------------------------------------------------------
def check_slurm_gpu_resources(cfg):
    """Refuse to submit GPU jobs without a GPU.

    Snakemake turns a profile's `set-resources` into a default of the --set-resources argument, so a
    --set-resources on the command line replaces the profile's whole section (snakemake/cli.py,
    configargparse defaults; the slurm plugin only reads the result): one rule's override would send
    every training and evaluation job to the CPU partition without a GPU. Under a Slurm profile
    (default-resources name a slurm_partition or slurm_account) with the verl engine, every rule of
    `PIPELINE.gpu_rules()` must request `gpu` (or gpus / gres). Checked in the main Snakemake process only
    (jobs on the nodes get their own resources).
    """
    defaults = workflow.resource_settings.default_resources
    if not workflow.is_main_process or cfg.get("engine") != "verl" or defaults is None:
        return
    if not {"slurm_partition", "slurm_account"} & set(defaults.keys()):
        return
    overwrite = workflow.resource_settings.overwrite_resources or {}
    lacking = [r for r in PIPELINE.gpu_rules() if not {"gpu", "gpus", "gres"} & set(overwrite.get(r, {}))]
    if lacking:
        raise WorkflowError(
            f"no GPU requested for {', '.join(lacking)} under a Slurm profile with engine: verl. A --set-resources "
            "on the command line replaces the profile's whole set-resources section (Snakemake does not merge "
            "them), which drops the GPU, partition and memory of every other rule. Change resources in the "
            "workflow profile instead (workflow/profiles/default/profile.yaml, or a copy of that directory given "
            "with --workflow-profile: see slurm/README.md)."
        )


check_slurm_gpu_resources(config)


_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


def unset_profile_variables():
    """{variable: [where, ...]} for each $VARIABLE in the profiles' resources that the environment
    leaves unset or empty. Snakemake expands them only when it evaluates a job's resources and keeps
    an unset one as it is, so sbatch would get `-A $RTPO_SLURM_ACCOUNT` literally."""
    rs = workflow.resource_settings
    sections = [("default-resources", rs.default_resources.items() if rs.default_resources is not None else [])]
    sections += [(f"set-resources.{rule}", res.items()) for rule, res in (rs.overwrite_resources or {}).items()]
    found = {}
    for section, items in sections:
        for name, res in items:
            raw = getattr(res, "raw", res)
            for m in _VARIABLE.finditer(raw) if isinstance(raw, str) else ():
                var = m.group(1) or m.group(2)
                if not os.environ.get(var):
                    found.setdefault(var, []).append(f"{section}.{name}")
    return found


def unset_variables_message(found):
    named = ", ".join(
        f"{var} ({where[0]}" + (f" and {len(where) - 1} more" if len(where) > 1 else "") + ")"
        for var, where in found.items()
    )
    return (
        f"{named} not set. Export {'it' if len(found) == 1 else 'them'} before `snakemake --profile slurm` "
        "(slurm/README.md: the account and the partitions of CPU and GPU jobs), or write the values in place "
        "of the $VARIABLES: default-resources in the site profile (slurm/profile.yaml), set-resources in the "
        "workflow profile (workflow/profiles/default/profile.yaml)"
    )


def refuse_unset_profile_variables():
    """Called by `onstart`, which Snakemake runs only when jobs are about to run, after the Slurm
    executor starts and before its first sbatch: a submission with an unset site variable stops
    here, having submitted nothing. Local runs are left alone (the workflow profile's resources name
    $RTPO_SLURM_GPU_PARTITION there too, and mean nothing)."""
    found = unset_profile_variables()
    if found and not workflow.local_exec:
        raise WorkflowError(f"refusing to submit: {unset_variables_message(found)}.")


# A dry run never calls onstart: warn while parsing instead, under a Slurm site profile (its
# default-resources name the account or partition), main process only.
_defaults = workflow.resource_settings.default_resources
if (
    workflow.is_main_process
    and _defaults is not None
    and {"slurm_partition", "slurm_account"} & set(_defaults.keys())
    and unset_profile_variables()
):
    from snakemake.logging import logger

    logger.warning(
        f"WARNING: {unset_variables_message(unset_profile_variables())}; a submission "
        "(without -n) stops before submitting anything."
    )


def check_verl_startup(cfg):
    """The start-up arithmetic of every verl training cell (rtpo.verl_ext.startup, `rtpo check-config`):
    row lengths against verl's per-GPU token budget and the model's positions, the parallel layout,
    the attention implementation against the GPU environment spec, the memory estimate and, under a
    Slurm profile, its resources per rule. A failure stops the workflow before anything is submitted,
    dry runs included, naming the cell and the key. Main process only; engine verl only."""
    if not workflow.is_main_process or cfg.get("engine") != "verl":
        return
    from rtpo.verl_ext.startup import PROFILE_SETTINGS, check_config, first_error

    def plain(v):
        return getattr(v, "raw", v)

    resources = None
    defaults = workflow.resource_settings.default_resources
    if defaults is not None and {"slurm_partition", "slurm_account"} & set(defaults.keys()):
        resources = {"*": {k: plain(v) for k, v in defaults.items()}}
        for rule, res in (workflow.resource_settings.overwrite_resources or {}).items():
            resources[rule] = {k: plain(v) for k, v in res.items()}
        # the jobs a training run may take (a job stopped at its time limit resumes in the next); the
        # execution settings exist once Snakemake executes, not while it parses (then: not checked)
        ex = getattr(workflow, "execution_settings", None)
        if ex is not None:
            resources[PROFILE_SETTINGS] = {"retries": ex.retries}
    try:
        err = first_error(check_config(cfg, resources, profile_name="the Slurm profile"))
    except ValueError as e:
        err = f"start-up check: {e}"
    if err:
        raise WorkflowError(f"{err} (config files: {_config_sources()})")


check_verl_startup(config)


# ---------------------------------------------------------------------------------------------
# 3. The effective config file
# ---------------------------------------------------------------------------------------------
EFFECTIVE_CONFIG, _EFFECTIVE_TEXT = dag.effective_config(config, _config_sources())


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
    refuse_unset_profile_variables()
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
# 4. The software: the `rtpo` command
# ---------------------------------------------------------------------------------------------
# Rules call `rtpo ...`: the console script installed next to the Python that runs Snakemake
# (also on a Slurm node, where jobs run `<that python> -m snakemake`), whatever PATH says --
# except under `--software-deployment-method conda`, where the rule's conda env provides it.
RTPO_BIN = os.path.dirname(sys.executable)
if DeploymentMethod.CONDA not in workflow.deployment_settings.deployment_method:
    shell.prefix(f'set -euo pipefail; export PATH={shlex.quote(RTPO_BIN)}:"$PATH"; ')

# The `conda:` of every rule: environment.yml, the pinned GPU cluster stack (verl + vLLM + this
# package). Snakemake uses it only with `--software-deployment-method conda`; normally the jobs run
# in the environment that runs Snakemake (./.venv for the CPU default; on a cluster, the env created
# once with `conda env create -f environment.yml` on the shared filesystem and activated).
# The path is relative to the rules/*.smk files.
CONDA_ENV = "../../environment.yml"


# ---------------------------------------------------------------------------------------------
# 5. What the rules need beyond PIPELINE (rtpo.dag.Dag) and the modules `dag` and `experiment`, which they
#    call directly: a job's run, arm or sweep cell from its wildcards, and the params of a job of seeds
# ---------------------------------------------------------------------------------------------
def sweep_of(wildcards):
    """The SweepCell of a job with a {scell} wildcard."""
    return PIPELINE.sweep_by_key[wildcards.scell]


def cell_of(wildcards):
    """The AblationCell of a job with a {cell} wildcard."""
    return PIPELINE.cell(wildcards.cell)


def run_of(wildcards):
    """The Run (rtpo.experiment) of the first seed of a job with a {cell} or {scell} wildcard: its method, task,
    `--set` overrides, settings and inputs are every seed's of the job."""
    return PIPELINE.job_run(cell_of(wildcards) if "cell" in wildcards.keys() else sweep_of(wildcards))


def pilot_run(wildcards):
    """The Run (rtpo.experiment) a pilot_train job (rules/pilot.smk) starts: the seed-0 main run of its {task} and
    {method}; its inputs, settings and stamp are those of the training job that resumes it."""
    return PIPELINE.experiment.run(experiment.RunKey(experiment.MAIN, "", wildcards.task, wildcards.method, 0))


def copied_run(wildcards):
    """The Run (rtpo.experiment) of a copied arm's job: its {run} (arm key/seedS) or {evalrun} (/eval_seedS)."""
    if "run" in wildcards.keys():
        return PIPELINE.copied_runs[wildcards.run]
    return PIPELINE.copied_evals[wildcards.evalrun]


def copy_reused_run(run, src_summary, out_summary, log):
    """Rule ablation_reuse_run: the main run's files into the copied arm's seed directory, its run.json under
    the arm's key with copy_of the main run's (rtpo.run_record.copy_run)."""
    from rtpo.run_record import copy_run

    src, out = os.path.dirname(src_summary), os.path.dirname(out_summary)
    copy_run(src, out, run.key.as_dict())
    with open(log, "w") as f:
        f.write(f"copied {src} (identical settings) to {out}\n")


def main_train_settings(method):
    """The `settings` param of train_<method> (its rerun fingerprint: the runs' effective settings); a
    factory, so each rule of the loop in train.smk gets its own closure."""
    return lambda wildcards: experiment.fingerprint(PIPELINE.run_settings(method, wildcards.task))


def seed_params(job, out_pattern, log_pattern=None):
    """The params of a job of seeds (rtpo.dag.SeedJob): --seed, the --out pattern (with {seed} for a
    group of seeds; one directory for the one-seed wildcard job), and --log for a group's per-seed logs.
    out_pattern / log_pattern: paths with {seed} and the job's other wildcards in braces."""

    def fill(pattern, wildcards):
        values = {k: v for k, v in wildcards.items() if k != "seed" or job.seeds is None}
        for k, v in values.items():
            pattern = pattern.replace(f"{{{k}}}", str(v))
        return shlex.quote(pattern)

    def logs(wildcards):
        return "" if job.seeds is None or log_pattern is None else f"--log {fill(log_pattern, wildcards)}"

    return {"seeds": job.seed_arg, "out": lambda wildcards: fill(out_pattern, wildcards), "logs": logs}


def seed_logs(job, log_pattern, job_log_pattern):
    """The `log:` of a job of seeds: `job` (the process's output) and, for a group, each seed's log."""
    if job.seeds is None:
        return {"job": log_pattern}
    return {"job": job_log_pattern.replace("{label}", job.label), "seeds": job.paths(log_pattern)}
