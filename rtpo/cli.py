"""`rtpo <verb>`: the commands the Snakemake rules call (docs/ARCHITECTURE.md lists their files)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _cfg(args):
    from rtpo.config import load_config

    return load_config(args.config, getattr(args, "set", None))


def cmd_data(args) -> int:
    from rtpo.config import data_settings, task_file_options
    from rtpo.data import write_task_files

    cfg = _cfg(args)
    d = cfg["data"]
    if "benchmarks" in d[args.task]:  # paper scale: real benchmarks through the adapters
        from rtpo.data.paper import prepare

        print(json.dumps(prepare(args.task, d[args.task], args.out, data=d)))
        return 0
    opts = task_file_options(data_settings(cfg, args.task))  # what the workflow fingerprints (rtpo.dag)
    paths = write_task_files(args.task, opts, args.out, progress=True)
    print(json.dumps({k: str(v) for k, v in paths.items()}))
    return 0


def cmd_tokenizer(args) -> int:
    from rtpo.sft import demo_texts, read_demos
    from rtpo.tokenizer import save_tokenizer, train_tokenizer

    cfg = _cfg(args)
    tok = train_tokenizer(demo_texts(read_demos(args.data, cfg["tasks"])), int(cfg["model"]["vocab_size"]))
    save_tokenizer(tok, args.out)
    print(f"tokenizer: {len(tok)} tokens -> {args.out}")
    return 0


def cmd_base_model(args) -> int:
    from rtpo.sft import build_base_model

    summary = build_base_model(_cfg(args), args.data, args.tokenizer, args.out, seed=args.seed)
    print(json.dumps({k: v for k, v in summary.items() if k != "sft_loss"}))
    return 0


def cmd_sweep_base(args) -> int:
    from rtpo.config import ConfigError
    from rtpo.sft import build_sweep_base_model

    cfg = _cfg(args)
    if not cfg.get("sweep"):
        raise ConfigError(f"{args.config}: no 'sweep' section (the mechanism sweep's settings)")
    summary = build_sweep_base_model(cfg, args.init, args.demos, args.out, seed=args.seed)
    print(json.dumps({k: v for k, v in summary.items() if k != "sft_loss"}))
    return 0


def cmd_train(args) -> int:
    """The run (scope, variant, task, method, seed) of the config's experiment, on the config's engine (or
    --engine's): rtpo/train.py (local) or rtpo/verl_ext/train.py (verl), which mirror each other."""
    cfg = _cfg(args)
    if args.engine is not None:
        cfg["engine"] = args.engine   # the run's settings record the engine it trains on
    kw = dict(job_guard=args.job_guard, scope=args.scope, variant=args.variant)
    if cfg.get("engine", "local") == "verl":
        from rtpo.verl_ext.train import train_seeds as verl_seeds

        return verl_seeds(args.method, args.task, cfg, args.seed, args.out, args.model, args.train_file, **kw)
    from rtpo.train import train_seeds

    summaries = train_seeds(args.method, args.task, cfg, args.seed, args.out, args.model, args.train_file,
                            log=args.log, **kw)
    for summary in summaries.values():
        print(json.dumps(summary))
    return 0


def cmd_evaluate(args) -> int:
    from rtpo.evaluate import evaluate_seeds

    results = evaluate_seeds(args.model, args.method, args.task, _cfg(args), args.seed, args.eval_file, args.out,
                             engine=args.engine, trajectories=args.trajectories, log=args.log)
    for res in results.values():
        print(json.dumps(res["overall"]))
    return 0


def cmd_theory(args) -> int:
    from rtpo.theory import cli_main

    return cli_main(["--out", args.out] + (["--quick"] if args.quick else []))


def cmd_check_config(args) -> int:
    """The start-up arithmetic of every verl cell (rtpo.verl_ext.startup): a table; exit 2 on a failed rule."""
    from rtpo.config import ROOT
    from rtpo.verl_ext.startup import check_config, first_error, format_report, load_profile

    def profile_file(given: str, default: str) -> Path | None:
        """The YAML file of a profile directory (profile.yaml, or the legacy config.yaml) or the file given;
        None for the default when it is absent (an installed package without the repository)."""
        p = Path(given)
        p = p if p.is_absolute() or p.exists() else ROOT / p
        for f in ([p] if p.is_file() else [p / "profile.yaml", p / "config.yaml"]):
            if f.is_file():
                return f
        if given == default:
            return None
        raise FileNotFoundError(f"{given}: no profile.yaml (or config.yaml) there")

    cfg = _cfg(args)
    resources, where = None, None
    if args.profile != "none" and cfg.get("engine") == "verl":
        # as Snakemake reads them: the site profile, then the workflow profile over it per top-level key
        files = [f for f in (profile_file(args.profile, CHECK_PROFILE),
                             profile_file(args.workflow_profile, CHECK_WORKFLOW_PROFILE)) if f is not None]
        if files:
            resources, where = load_profile(*files), files[-1]
            where = str(where.relative_to(ROOT) if where.is_relative_to(ROOT) else where)
    rep = check_config(cfg, resources, profile_name=where or CHECK_WORKFLOW_PROFILE)
    print(format_report(rep))
    err = first_error(rep)
    if err:
        print(f"rtpo check-config: {args.config}: {err}", file=sys.stderr)
        return 2
    return 0


CHECK_PROFILE = "slurm"  # the site profile: account, partitions, retries
CHECK_WORKFLOW_PROFILE = "workflow/profiles/default"  # per-rule resources (set-resources)


def cmd_report(args) -> int:
    from rtpo.report.cli import report_main

    return report_main(args)


def cmd_tensorboard(args) -> int:
    from rtpo.tracking import main_convert

    return main_convert(args.paths, args.out)


SEED_MAX = 2**32 - 1  # numpy's seed range; the config schema's $defs.seed has the same bound


def seed_arg(text: str) -> int:
    """--seed's type: an integer in 0..SEED_MAX, or a usage error naming the value (argparse adds `--seed`)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= v <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"{text} is out of range: a seed is an integer in 0..{SEED_MAX} (2**32 - 1)")
    return v


class _Help(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown where there is one to show (not None, [] or a flag's False); descriptions kept as written."""

    def _get_help_string(self, action):
        if action.default in (None, False) or action.default == [] or action.required:
            return action.help or ""
        return super()._get_help_string(action)


# the tools with an argument parser of their own: `rtpo retrieval <tool> ...` runs `python -m <module> ...`
RETRIEVAL_TOOLS = {
    "server": ("rtpo.retrieval.server", "serve Search-R1's POST /retrieve over a BM25 or dense index, or a web API"),
    "index": ("rtpo.retrieval.index", "build or query a saved BM25 index over a corpus.jsonl (wiki-18 at paper scale)"),
    "dense": ("rtpo.retrieval.dense", "build an e5 + faiss dense index (optional: needs faiss and an e5 model)"),
    "fetch": ("rtpo.retrieval.fetch", "download a URL to a file checked against its sha256"),
}
REPORT_TOOLS = {
    "compare": "compare results/tables with a reference run's (the stated bounds; exit 1 outside them)",
    "reference": "write a reference directory from a finished run's tables",
    "summary": "the end-of-run summary scripts/pipeline.sh prints",
    "claims-map": "docs/claims.md's map of the paper's claims to the tables",
}

EPILOG = """workflow (measured times: README.md's table; the rules call the verbs above):
  bash scripts/pipeline.sh --configfile config/smoke.yaml   the whole DAG shrunk: every rule once
  bash scripts/pipeline.sh                                  the CPU default (config/config.yaml)

more tools (each with -h):
""" + "\n".join(f"  rtpo retrieval {k:<8} {v[1]}" for k, v in RETRIEVAL_TOOLS.items()) + "\n" + \
    "\n".join(f"  rtpo report {k:<11} {v}" for k, v in REPORT_TOOLS.items()) + """
  python -m rtpo.theory   the same checks as `rtpo theory` (also --seed)

docs: README.md, docs/ARCHITECTURE.md (every verb's files), config/README.md (configs and overrides)"""


def build_parser() -> argparse.ArgumentParser:
    from rtpo.experiment import TASK_KINDS
    from rtpo.methods.cards import CARDS

    methods, tasks = list(CARDS), list(TASK_KINDS)
    p = argparse.ArgumentParser(prog="rtpo", description=__doc__, epilog=EPILOG, formatter_class=_Help)
    sub = p.add_subparsers(dest="verb", required=True, metavar="VERB")

    def add(name, fn, help, config=True):
        sp = sub.add_parser(name, help=help, description=help[:1].upper() + help[1:] + ".", formatter_class=_Help)
        sp.set_defaults(fn=fn)
        if config:
            sp.add_argument("--config", default="config/config.yaml",
                            help="pipeline config (YAML, checked against rtpo/config.schema.yaml; config/README.md)")
            sp.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                            help="override a config key (value read as YAML; repeatable), e.g. --set method.rtpo.group_size=4")
        return sp

    sp = add("data", cmd_data, "generate a task's train/eval splits and expert demonstrations (paper scale: "
             "prepare the real benchmarks)")
    sp.add_argument("--task", required=True, choices=tasks, help="the task")
    sp.add_argument("--out", required=True, help="output directory, e.g. results/data/math")

    sp = add("tokenizer", cmd_tokenizer, "train the embedded model's BPE tokenizer on the expert demonstrations")
    sp.add_argument("--data", default="results/data", help="directory with each task's experts.jsonl")
    sp.add_argument("--out", required=True, help="output directory of the tokenizer")

    sp = add("base-model", cmd_base_model, "build the base model (tiny + SFT warm start, or a converted LM)")
    sp.add_argument("--data", default="results/data", help="directory with each task's experts.jsonl")
    sp.add_argument("--tokenizer", default="results/models/tokenizer", help="tokenizer directory")
    sp.add_argument("--seed", type=seed_arg, default=0, help="initialisation and SFT seed")
    sp.add_argument("--out", required=True, help="output model directory")

    sp = add("sweep-base", cmd_sweep_base, "the mechanism sweep's base model: the base model's warm start "
             "continued on the sweep's experts of every horizon K (config `sweep`)")
    sp.add_argument("--init", default="results/models/base", help="the model to continue from")
    sp.add_argument("--demos", nargs="+", required=True, help="experts.jsonl of each K")
    sp.add_argument("--seed", type=seed_arg, default=0, help="SFT seed")
    sp.add_argument("--out", required=True, help="output model directory")

    sp = add("train", cmd_train, "train one (method, task) cell for one or several seeds (metrics.jsonl, "
             "TensorBoard events, checkpoint/, final/, summary.json in each run directory)")
    sp.add_argument("--method", required=True, choices=methods, help="the method (rtpo/methods/cards.py)")
    sp.add_argument("--task", required=True, choices=tasks, help="the task")
    sp.add_argument("--seed", type=seed_arg, nargs="+", default=[0],
                    help="one or several seeds, trained one after the other in this process")
    sp.add_argument("--model", default=None, help="the base model directory (default: the run's, e.g. "
                    "results/models/base)")
    sp.add_argument("--train-file", default=None, help="default: the run's, e.g. results/data/<task>/train.jsonl")
    sp.add_argument("--engine", default=None, choices=["local", "verl"],
                    help="default: the config's engine (local: torch on this machine; verl: verl's trainer)")
    sp.add_argument("--out", required=True,
                    help="run directory; with several seeds a pattern with {seed}, e.g. results/runs/math/rtpo/seed{seed}")
    sp.add_argument("--log", default=None, help="each seed's output also to this file (a pattern with {seed})")
    sp.add_argument("--job-guard", action="store_true",
                    help="the DAG's job guard: resume only run directories this job (the run's stamp, in its "
                         "run.json) left running (rtpo.checkpoints.job_guard)")
    sp.add_argument("--scope", default="main",
                    help="the run's scope in the experiment, written to its run.json: main, or an ablation study")
    sp.add_argument("--variant", default="", help="the ablation variant (G3, kl-0.01, ...) or sweep cell (h4/psi-full)")

    sp = add("evaluate", cmd_evaluate, "evaluate a model directory on a task's eval split")
    sp.add_argument("--model", required=True, help="model directory; with several seeds a pattern with {seed}")
    sp.add_argument("--method", required=True, choices=methods, help="selects the context map psi used at evaluation")
    sp.add_argument("--task", required=True, choices=tasks, help="the task")
    sp.add_argument("--seed", type=seed_arg, nargs="+", default=[0],
                    help="one or several seeds (their models evaluated one after the other in this process)")
    sp.add_argument("--eval-file", default=None, help="default: results/data/<task>/eval.jsonl")
    sp.add_argument("--engine", default=None, choices=["local", "verl"],
                    help="default: the config's engine (verl: rollout servers, vLLM on GPUs)")
    sp.add_argument("--trajectories", default=None,
                    help="also write every trajectory's sampled tokens (JSONL; with several seeds a pattern with {seed})")
    sp.add_argument("--out", required=True, help="eval JSON; with several seeds a pattern with {seed}")
    sp.add_argument("--log", default=None, help="each seed's output also to this file (a pattern with {seed})")

    sp = add("theory", cmd_theory, "numerical checks of the paper's theorems on tabular MDPs", config=False)
    sp.add_argument("--out", required=True, help="output directory (tables and figures)")
    sp.add_argument("--quick", action="store_true", help="fewer samples (seconds; the tests use it)")

    sp = add("check-config", cmd_check_config,
             "start-up arithmetic of a verl config: every cell's row lengths, token budget, memory, attention "
             "and the Slurm profile's resources (exit 2 naming the cell and key on a failure)")
    sp.add_argument("--profile", default=CHECK_PROFILE,
                    help="the Slurm site profile (directory or YAML file: default-resources, retries; none: "
                         "check no profile)")
    sp.add_argument("--workflow-profile", default=CHECK_WORKFLOW_PROFILE,
                    help="the workflow profile whose per-rule set-resources to check (read over --profile, "
                         "as Snakemake does)")

    sp = add("report", cmd_report, "tables, figures and the claim ledger from results/ (also: rtpo report "
             "compare|reference|summary|claims-map -h)")
    sp.add_argument("what", choices=["tables", "figures", "ledger", "status", "all", "sweep"], help="what to write")
    sp.add_argument("--results", default="results", help="the results directory (runs/, eval/, ...)")
    sp.add_argument("--tables", default="results/tables", help="tables directory")
    sp.add_argument("--figures", default="figures", help="figures directory")
    sp.add_argument("--only", nargs="+", default=None, metavar="TABLE",
                    help="with `tables`: just these tables (e.g. table01_main; the named Snakemake targets)")

    sp = add("tensorboard", cmd_tensorboard, "write TensorBoard events for finished runs' metrics.jsonl, under "
             "the tags live runs use (reward/..., consistency/...); then: tensorboard --logdir DIR", config=False)
    sp.add_argument("paths", nargs="+", metavar="PATH",
                    help="a metrics.jsonl, or a directory searched for them (e.g. results/runs)")
    sp.add_argument("--out", default=None,
                    help="write the events under this directory, mirroring each run's path (default: beside "
                         "each metrics.jsonl, replacing the rtpo events file there; verl's own events are kept)")

    sp = add("retrieval", None, "retrieval tools: " + ", ".join(RETRIEVAL_TOOLS) + " (rtpo retrieval TOOL -h)",
             config=False)
    sp.add_argument("tool", choices=list(RETRIEVAL_TOOLS),
                    help="; ".join(f"{k}: {v[1]}" for k, v in RETRIEVAL_TOOLS.items()))
    sp.add_argument("args", nargs=argparse.REMAINDER, help="the tool's own arguments")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["retrieval"] and argv[1:2] and argv[1] in RETRIEVAL_TOOLS:
        import importlib

        return int(importlib.import_module(RETRIEVAL_TOOLS[argv[1]][0]).main(argv[2:]) or 0)
    if argv[:1] == ["report"] and argv[1:2] and argv[1] in REPORT_TOOLS:
        from rtpo.report.cli import tools_main  # checks of a finished run: their own arguments

        return tools_main(argv[1:])
    args = build_parser().parse_args(argv)
    from rtpo.progress import quiet_library_bars

    quiet_library_bars()
    if getattr(args, "eval_file", "") is None:   # rtpo train takes its files from its run (rtpo.experiment)
        args.eval_file = str(Path("results/data") / args.task / "eval.jsonl")
    from rtpo.signals import Stopped

    try:
        return int(args.fn(args) or 0)
    except Stopped as e:  # SIGTERM (Slurm time limit, preemption): checkpoint saved, non-zero exit
        print(f"rtpo {args.verb}: {e}", file=sys.stderr)
        return e.exit_code
    except (OSError, ValueError) as e:  # bad or unreadable input: the message names the file
        print(f"rtpo {args.verb}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
