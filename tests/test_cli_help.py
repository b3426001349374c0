"""`rtpo --help` and every verb's -h: descriptions, defaults, choices; every tool reachable from rtpo."""

from __future__ import annotations

import pytest

from rtpo.cli import RETRIEVAL_TOOLS, build_parser, main


def _help(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as e:
        main([*argv, "-h"])
    assert e.value.code == 0
    return capsys.readouterr().out


def test_top_level_help_lists_every_verb_and_tool(capsys):
    out = _help(capsys)
    verbs = build_parser()._subparsers._group_actions[0].choices
    for verb in verbs:
        assert f"\n    {verb}" in out, verb
    for tool in RETRIEVAL_TOOLS:
        assert f"rtpo retrieval {tool}" in out
    for tool in ("compare", "reference", "summary", "claims-map"):
        assert f"rtpo report {tool}" in out
    assert "config/smoke.yaml" in out and "python -m rtpo.theory" in out


def test_every_verb_has_a_description_and_shows_its_defaults(capsys):
    parser = build_parser()
    verbs = parser._subparsers._group_actions[0].choices
    for verb, sub in verbs.items():
        assert sub.description and len(sub.description) > 20, verb
        text = " ".join(_help(capsys, verb).split())  # argparse wraps lines at the terminal width
        assert sub.description.split()[0] in text
        if any(a.dest == "config" for a in sub._actions):
            assert "(default: config/config.yaml)" in text, verb
        for a in sub._actions:  # every option says what it is
            assert a.help, (verb, a.dest)


def test_train_and_evaluate_show_choices_from_the_cards_and_the_schema(capsys):
    from rtpo.methods.cards import CARDS

    out = " ".join(_help(capsys, "train").split())
    assert "--method {" + ",".join(CARDS) + "}" in out
    assert "--task {math,search,airline}" in out
    assert "--engine {local,verl}" in out and "None" not in out
    assert "(default: the run's, e.g. results/models/base)" in out   # the run's inputs (rtpo.experiment)
    out = " ".join(_help(capsys, "evaluate").split())
    assert "--engine {local,verl}" in out and "{" + ",".join(CARDS) + "}" in out


def test_retrieval_verbs_delegate_to_the_modules(capsys):
    """`rtpo retrieval TOOL ...` runs the module's own main: its help, and its exit-2 errors."""
    for tool, (module, _) in RETRIEVAL_TOOLS.items():
        out = _help(capsys, "retrieval", tool)
        assert module in out or tool in out
    assert "--index" in _help(capsys, "retrieval", "server")
    assert main(["retrieval", "server", "--index", "/nonexistent/index"]) == 2
    assert "error" in capsys.readouterr().err


def test_a_bad_choice_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "--method", "ppo", "--task", "math", "--out", "x"])
    assert e.value.code == 2
    assert "invalid choice: 'ppo'" in capsys.readouterr().err


def test_help_states_no_measured_time_and_names_the_results_layout(capsys):
    """Measured times live in README.md's table alone: `rtpo --help` points there (at f1aae5b it said
    "about 72 min" while the README said 1 h 30); `rtpo report --help` names the directories the DAG
    writes (it said evals/ for eval/)."""
    import re

    from rtpo.experiment import eval_file, run_dir

    verbs = build_parser()._subparsers._group_actions[0].choices
    texts = {"rtpo": _help(capsys)} | {v: _help(capsys, v) for v in verbs}
    for name, text in texts.items():
        assert not re.search(r"\b\d+(\.\d+)?\s*(min|minutes|hours?)\b", text), name
    assert "README.md's table" in " ".join(texts["rtpo"].split())
    layout = re.search(r"\(runs/, (\w+)/, \.\.\.\)", " ".join(texts["report"].split()))
    assert layout and run_dir("math", "rtpo", 0).split("/")[1] == "runs"
    assert eval_file("math", "rtpo", 0).split("/")[1] == layout.group(1) == "eval"
