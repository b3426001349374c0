"""scripts/test.sh, the README's test command: pytest's 25 slowest tests in every run's output
(--durations=25) unless the caller passes its own --durations. Run in a copy of the script with
stand-ins for the two programs it starts (the venv set-up and the venv's python), which record their
arguments: the whole suite is not run here."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from rtpo.config import ROOT


@pytest.mark.parametrize("args, expected", [
    ([], ["-m", "pytest", "-q", "--durations=25"]),
    (["tests/test_x.py", "-k", "y"], ["-m", "pytest", "-q", "--durations=25", "tests/test_x.py", "-k", "y"]),
    (["--durations=5", "-x"], ["-m", "pytest", "-q", "--durations=5", "-x"]),
    (["--durations", "0"], ["-m", "pytest", "-q", "--durations", "0"]),
    (["--durations-min=2"], ["-m", "pytest", "-q", "--durations=25", "--durations-min=2"]),
])
def test_test_sh_prints_the_slowest_tests_unless_told_otherwise(tmp_path, args, expected):
    (tmp_path / "scripts").mkdir()
    shutil.copy2(ROOT / "scripts" / "test.sh", tmp_path / "scripts" / "test.sh")
    (tmp_path / "scripts" / "setup_venv.sh").write_text("echo venv-ready > venv.log\n")
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    py = tmp_path / ".venv" / "bin" / "python"
    py.write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@" > "$(dirname "$0")/../../argv.txt"\n')
    py.chmod(0o755)
    r = subprocess.run(["bash", "scripts/test.sh", *args], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "venv.log").read_text() == "venv-ready\n"
    assert (tmp_path / "argv.txt").read_text().splitlines() == expected
