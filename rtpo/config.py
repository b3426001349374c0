"""Configuration: load a YAML file, validate it against the package's config.schema.yaml (beside this
file), apply `--set key.path=value` overrides, and derive what each job reads: the effective settings
of one (method, task) run (`method_settings`) and of one task's data (`data_settings`). The jobs and
the workflow's rerun fingerprints (rtpo.dag) both call these, so a key has one list.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = Path(__file__).resolve().parent / "config.schema.yaml"  # package data (pyproject.toml)

# env.<task> keys that are options of the env itself (rtpo.envs.make_env); the others (psi,
# max_new_tokens, max_prompt_tokens, ...) are read by the Roller and the engine
ENV_OPTION_KEYS = ("max_turns", "max_obs_chars", "top_k")

class ConfigError(ValueError):
    pass


def load_config(path: str | Path, overrides: list[str] | None = None, validate: bool = True) -> dict[str, Any]:
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"config file not found: {p}")
    try:
        cfg = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML: {e}") from e
    if not isinstance(cfg, dict):
        raise ConfigError(f"{p}: the top level must be a mapping")
    base = copy.deepcopy(cfg) if validate and overrides else None
    for ov in overrides or []:
        set_path(cfg, ov, source=f"--set {ov}")
    if validate:
        try:
            validate_config(cfg, source=str(p))
        except ConfigError as e:
            if base is None:
                raise
            validate_config(base, source=str(p))  # an error of the file itself names the file
            # the file alone is valid: name the --set arguments that touch the invalid key
            raise ConfigError(f"{_blame(overrides, e.where)}: {e.detail} ({p} itself is valid)") from None
    return cfg


def _blame(overrides: list[str], where: list[str]) -> str:
    """The `--set` arguments whose key path is a prefix of the invalid key `where`, or under it."""
    def related(ov: str) -> bool:
        key = ov.split("=", 1)[0].strip().split(".")
        n = min(len(key), len(where))
        return key[:n] == where[:n]

    hits = [ov for ov in overrides if related(ov)] or overrides
    return ", ".join(f"--set {ov}" for ov in hits)


def set_path(cfg: dict[str, Any], assignment: str, source: str = "--set") -> None:
    """Apply `a.b.c=value` (value parsed as YAML) to cfg in place."""
    if "=" not in assignment:
        raise ConfigError(f"{source}: override {assignment!r} is not of the form key.path=value")
    key, val = assignment.split("=", 1)
    parts = key.strip().split(".")
    node = cfg
    for part in parts[:-1]:
        if not isinstance(node.get(part, {}), dict):
            raise ConfigError(f"{source}: override {key!r}: {part!r} is not a mapping")
        node = node.setdefault(part, {})
    try:
        node[parts[-1]] = yaml.safe_load(val)
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: the value {val!r} is not valid YAML ({' '.join(str(e).split())})") from None


def retype_command_line(cfg: dict[str, Any], given: Mapping[str, Any] | None) -> list[str]:
    """Re-read as YAML the strings `snakemake --config KEY=VALUE` put into `cfg` (in place).

    Snakemake types a whole VALUE (int, float, bool) but reads one with brackets through YAML's
    BaseLoader, which keeps every scalar inside a string: ``--config 'seeds=[0, 1]'`` gives
    ``['0', '1']`` and the schema then says "'0' is not of type 'integer'". `given` is that
    --config mapping (workflow.config_settings.config); each of its string scalars is parsed as
    `--set` parses a value (YAML 1.1, plus exponent floats such as 1e-6). Returns the key paths changed."""
    import re

    number = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")

    def typed(s: str) -> Any:
        if number.match(s):
            return float(s)
        try:
            v = yaml.safe_load(s)
        except yaml.YAMLError:
            return s
        return v if isinstance(v, (str, int, float, bool, list, dict)) or v is None else s  # not a date

    changed: list[str] = []

    def walk(node: Any, where: str) -> Any:
        if isinstance(node, dict):
            return {k: walk(v, f"{where}.{k}" if where else str(k)) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v, f"{where}[{i}]") for i, v in enumerate(node)]
        if isinstance(node, str):
            v = typed(node)
            if not isinstance(v, str):
                changed.append(where)
            return v
        return node

    def merge(dst: dict[str, Any], src: Mapping[str, Any]) -> None:  # as snakemake.utils.update_config
        for k, v in src.items():
            if isinstance(v, dict) and isinstance(dst.get(k), dict):
                merge(dst[k], v)
            else:
                dst[k] = v

    merge(cfg, walk(dict(given or {}), ""))
    return changed


def nonfinite_keys(cfg: dict[str, Any]) -> list[list[str]]:
    """The key path of the first NaN / +-inf number in a config ([] when none). YAML reads `.nan` and
    `.inf` as floats, and the schema's bounds cannot refuse them: NaN <= 0 and NaN > 0 are both false."""
    from rtpo.inputs import nonfinite

    hit = nonfinite(cfg)
    return [] if hit is None else [hit[0].replace("[", ".").replace("]", "").split(".")]


def recursive_key(node: Any, where: tuple[str, ...] = (), above: frozenset[int] = frozenset()) -> list[str] | None:
    """The key path of a value that contains itself (a YAML alias to its own anchor, `&a [*a]`), which
    every walk over the config would follow for ever; None when there is none."""
    if not isinstance(node, (dict, list)):
        return None
    if id(node) in above:
        return list(where)
    above = above | {id(node)}
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for k, v in items:
        hit = recursive_key(v, (*where, str(k)), above)
        if hit is not None:
            return hit
    return None


def validate_config(cfg: dict[str, Any], source: str = "config") -> None:
    """Validate against the JSON schema, numbers finite; the error names the offending key path."""
    import jsonschema

    loop = recursive_key(cfg)
    if loop is not None:
        detail = f"invalid config at '{'.'.join(loop)}': the value contains itself (a YAML alias to its own anchor)"
        err = ConfigError(f"{source}: {detail}")
        err.where, err.detail = loop, detail
        raise err
    bad = nonfinite_keys(cfg)
    if bad:
        where = ".".join(bad[0])
        detail = f"invalid config at '{where}': {_get(cfg, bad[0])!r} is not a finite number"
        err = ConfigError(f"{source}: {detail}")
        err.where, err.detail = bad[0], detail
        raise err

    schema = yaml.safe_load(SCHEMA.read_text())
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(cfg), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        where = ".".join(str(x) for x in e.absolute_path) or "(top level)"
        err = ConfigError(f"{source}: invalid config at '{where}': {e.message}")
        err.where, err.detail = [str(x) for x in e.absolute_path], f"invalid config at '{where}': {e.message}"
        raise err


def _get(cfg: Any, path: list[str]) -> Any:
    for k in path:
        cfg = cfg[int(k)] if isinstance(cfg, list) else cfg[k]
    return cfg


# train.* keys with no schema default: absent, they keep a config's settings (and its runs' stamps) as they
# were before the key existed; a method section that sets one still overrides train.*
OPTIONAL_TRAIN_KEYS = ("mini_batches",)


def method_settings(cfg: dict[str, Any], method: str, task: str) -> dict[str, Any]:
    """The effective settings of one run: train.* overlaid by method.<name>.* (itself overlaid by
    method.<name>.per_task.<task>.*), plus env.<task>.*.

    Returns {"train": {...}, "method": {...}, "env": {...}, "psi": str}.
    """
    if method not in cfg.get("method", {}):
        raise ConfigError(f"method {method!r} has no section under 'method' (have: {sorted(cfg.get('method', {}))})")
    if task not in cfg.get("env", {}):
        raise ConfigError(f"task {task!r} has no section under 'env' (have: {sorted(cfg.get('env', {}))})")
    train = copy.deepcopy(cfg["train"])
    m = copy.deepcopy(cfg["method"][method] or {})
    per_task = m.pop("per_task", None) or {}
    m.update({k: v for k, v in (per_task.get(task) or {}).items() if k != "per_task"})  # E.3: per-task budgets
    for k in list(m):
        if k in train or k in OPTIONAL_TRAIN_KEYS:
            train[k] = m.pop(k)
    env = copy.deepcopy(cfg["env"][task])
    psi = m.pop("psi", env.get("psi", "full"))
    return {"train": train, "method": m, "env": env, "psi": psi}


def env_options(env: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword options of `rtpo.envs.make_env` in an env.<task> section."""
    return {k: v for k, v in env.items() if k in ENV_OPTION_KEYS}


def data_settings(cfg: Mapping[str, Any], task: str) -> dict[str, Any]:
    """What `rtpo data --task T` reads of the config (embedded generators): data.seed, data.<task>,
    the scripted experts' number and error rate (sft.demos_per_task, sft.imperfection) and the env
    options their envs are built with. `rtpo data` builds its options from exactly this dict
    (`task_file_options`), and the workflow fingerprints it (rtpo.dag): one list of keys."""
    return {"seed": cfg["data"]["seed"], "data": cfg["data"].get(task),
            "n_expert": cfg["sft"]["demos_per_task"], "imperfection": cfg["sft"]["imperfection"],
            "env": env_options(cfg["env"].get(task, {}))}


def task_file_options(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The options of `rtpo.data.write_task_files` from `data_settings(cfg, task)`."""
    return {"seed": settings["seed"], **(settings["data"] or {}), "n_expert": settings["n_expert"],
            "imperfection": settings["imperfection"], "env": settings["env"]}
