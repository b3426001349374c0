"""Config: per-task method overrides (E.3 sets budgets per task) are applied and validated."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtpo.config import ConfigError, load_config, method_settings

ROOT = Path(__file__).resolve().parent.parent


def test_per_task_overrides_apply_to_their_task_only():
    shipped = load_config(ROOT / "config/config.yaml", [])
    cfg = load_config(ROOT / "config/config.yaml", ["method.grpo.per_task.search.chains=14",
                                                    "method.rtpo.per_task.math.trunks=3"])
    assert method_settings(cfg, "grpo", "search")["method"]["chains"] == 14
    assert method_settings(cfg, "rtpo", "math")["method"]["trunks"] == 3
    assert "per_task" not in method_settings(cfg, "rtpo", "math")["method"]
    # every other (method, task) cell keeps exactly the shipped settings
    for method, task in [("grpo", "math"), ("grpo", "airline"), ("rtpo", "search"), ("rtpo", "airline")]:
        assert method_settings(cfg, method, task) == method_settings(shipped, method, task), (method, task)


@pytest.mark.parametrize("override, where", [
    ("method.grpo.per_task.search.chainz=14", "method.grpo.per_task.search"),
    ("method.grpo.per_task.chess.chains=14", "method.grpo.per_task"),
    ("method.rtpo.per_task.math.group_size=1", "method.rtpo.per_task.math.group_size"),
])
def test_per_task_overrides_are_validated_like_the_section(override, where):
    with pytest.raises(ConfigError, match=f"--set {override}.*'{where}'"):
        load_config(ROOT / "config/config.yaml", [override])


def test_the_package_owns_its_schema():
    """The schema is package data (pyproject's `rtpo = ["**/*.yaml", ...]`), read from beside config.py
    by `rtpo` and by the workflow (common.smk validates with rtpo.config.SCHEMA); a config that breaks it
    is refused, whatever directory the command runs in."""
    import tomllib

    from rtpo.config import SCHEMA

    assert SCHEMA.is_file() and SCHEMA.parent == ROOT / "rtpo"
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["rtpo"]
    assert any(SCHEMA in (ROOT / "rtpo").glob(pattern) for pattern in data)
    assert "validate(cfg, schema=str(SCHEMA))" in (ROOT / "workflow" / "rules" / "common.smk").read_text()
    with pytest.raises(ConfigError, match="invalid config at 'train.lr'"):
        load_config(ROOT / "config/smoke.yaml", ["train.lr=fast"])

