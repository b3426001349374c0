"""The report reads what each run says it is (run.json, rtpo.run_record) and refuses what it cannot trust:
evaluation values out of range, a run with fewer records than its run.json says, a run.json of another run.
On the synthetic results tree of tests/report_fixture.py (real files, the report's own readers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rtpo.experiment import Experiment
from rtpo.report.load import load_results
from rtpo.report.read import read_eval_json
from tests.report_fixture import fixture_config, make_results_tree, recompute_pass1


@pytest.fixture()
def tree(tmp_path):
    cfg = fixture_config(seeds=[0, 1], **{"ablations.seeds": [0], "train.steps": 3})
    return make_results_tree(tmp_path, cfg, theory=False), cfg


def _eval_path(res: Path, cfg) -> Path:
    return Path(Experiment(cfg).select("main", task="math", method="rtpo")[0].eval_file(str(res)))


@pytest.mark.parametrize("where,key,value", [("overall", "pass@1", 1.7), ("overall", "pass@1", -0.5),
                                             ("benchmarks", "pass@1", 1.0001), ("overall", "n", -3),
                                             ("overall", "truncation_rate", 2.0)])
def test_out_of_range_evaluation_values_are_refused_naming_file_and_key(tree, where, key, value):
    res, cfg = tree
    path = _eval_path(res, cfg)
    doc = json.loads(path.read_text())
    if where == "overall":
        doc["overall"][key] = value
        name = f"overall.{key}"
    else:
        bench = sorted(doc["benchmarks"])[0]
        doc["benchmarks"][bench][key] = value
        name = f"benchmarks.{bench}.{key}"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=rf"{path}: {name} is {value:g}, outside \[0, "):
        read_eval_json(path)
    with pytest.raises(ValueError, match=str(path)):
        load_results(res, cfg)


def test_in_range_values_and_a_signed_reward_are_read(tree):
    res, cfg = tree
    path = _eval_path(res, cfg)
    doc = json.loads(path.read_text())
    for p in doc["per_problem"]:
        p["successes"] = p["samples"]   # every sample solved: pass@1 = 1.0, the upper end of its range
    recompute_pass1(doc)
    doc["overall"]["reward"] = -0.5
    path.write_text(json.dumps(doc))
    rows = read_eval_json(path)
    assert next(r for r in rows if r["benchmark"] == "overall")["reward"] == -0.5


def test_a_run_with_fewer_records_than_its_run_json_says_is_named(tree):
    """A metrics.jsonl cut short under a run.json that says every step was completed: the report refused
    nothing before (it took the remaining steps as the whole run)."""
    res, cfg = tree
    run = Path(Experiment(cfg).select("main", task="search", method="grpo")[1].run_dir(str(res)))
    lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    (run / "metrics.jsonl").write_text("".join(lines[:-1]))
    with pytest.raises(ValueError, match=rf"{run / 'metrics.jsonl'}: holds {len(lines) - 1} step records, but "
                                         rf"{run / 'run.json'} says {len(lines)} steps were completed"):
        load_results(res, cfg)
    (run / "metrics.jsonl").write_text("".join(lines[:-1]))
    rec = json.loads((run / "run.json").read_text())
    rec["steps"] = {"planned": len(lines), "completed": len(lines) - 1}   # a run cut short says so itself
    (run / "run.json").write_text(json.dumps(rec))
    with pytest.raises(ValueError, match=rf"{run / 'run.json'}: the run completed {len(lines) - 1} of its "
                                         rf"{len(lines)} steps \(a short run\)"):
        load_results(res, cfg)


def test_a_run_json_of_another_run_is_refused(tree):
    res, cfg = tree
    runs = Experiment(cfg).select("main", task="math")
    a, b = Path(runs[0].run_dir(str(res))), Path(runs[-1].run_dir(str(res)))
    (a / "run.json").write_text((b / "run.json").read_text())
    with pytest.raises(ValueError, match=rf"{a / 'run.json'}: field 'key' is .* but the path says"):
        load_results(res, cfg)


def test_the_report_reads_copies_and_settings_from_the_runs(tree):
    """Whether an arm is the main grid's configuration, and the G the main runs trained with, come from the
    runs' run.json: editing the config the report is given changes neither."""
    res, cfg = tree
    loaded = load_results(res, cfg)
    exp = Experiment(cfg)
    copied = {(r.scope, r.variant, r.task, r.method) for r in exp.report_runs() if r.copy_of is not None}
    assert copied   # the fixture's config has an arm equal to the main grid
    for scope, variant, task, method in copied:
        assert loaded.copies_main(scope, variant, task, method)
    st = loaded.studies["group_size"]
    g = loaded.main_setting("rtpo", st.task, "group_size")
    assert g == exp.select("main", task=st.task, method="rtpo")[0].settings["method"]["group_size"]
    edited = json.loads(json.dumps(cfg))
    edited["method"]["rtpo"]["group_size"] = 99
    assert load_results(res, edited).main_setting("rtpo", st.task, "group_size") == g
    # a run without run.json is not guessed: its records are refused (nothing says they are the whole run), and
    # an untrained run's (no records) is listed as missing
    run = Path(exp.select("main", task="math", method="rtpo")[0].run_dir(str(res)))
    kept = (run / "run.json").read_text()
    (run / "run.json").unlink()
    with pytest.raises(ValueError, match=rf"{run / 'metrics.jsonl'}: 3 step records without the run's record "
                                         rf"{run / 'run.json'}"):
        load_results(res, cfg)
    (run / "run.json").write_text(kept)
    vanilla = Path(exp.select("main", task="math", method="vanilla")[0].run_dir(str(res)))
    (vanilla / "run.json").unlink()
    assert str(vanilla / "run.json") in load_results(res, cfg).missing


# ------------------------------------------------------------------------------ each file kind against its schema
def _main_run(res: Path, cfg, task: str = "search", method: str = "grpo", i: int = 1) -> Path:
    return Path(Experiment(cfg).select("main", task=task, method=method)[i].run_dir(str(res)))


def test_a_negative_token_count_in_metrics_is_refused(tree):
    """`tokens_trunk = -1940571.0` reached a table at exit 0: metrics.jsonl had finiteness checks, no ranges.
    Each record is checked against the metrics schema now (counts >= 0, fractions in [0, 1])."""
    res, cfg = tree
    run = _main_run(res, cfg, method="rtpo")
    m = run / "metrics.jsonl"
    recs = [json.loads(x) for x in m.read_text().splitlines()]
    recs[1]["tokens"]["trunk"] = -1940571.0
    m.write_text("".join(json.dumps(r) + "\n" for r in recs))
    with pytest.raises(ValueError, match=rf"{m}:2: tokens\.trunk is -1\.94057e\+06, outside \[0, inf\) \(a count\)"):
        load_results(res, cfg)
    recs[1]["tokens"]["trunk"], recs[1]["success_rate"] = 10, 1.5
    m.write_text("".join(json.dumps(r) + "\n" for r in recs))
    with pytest.raises(ValueError, match=rf"{m}:2: success_rate is 1\.5, outside \[0, 1\] \(a fraction\)"):
        load_results(res, cfg)


def test_more_records_than_run_json_says_are_refused(tree):
    """Five records under a run.json that says "3 of 3" changed a table value at exit 0 (the report read them
    all). The records must be exactly the steps run.json says were completed."""
    res, cfg = tree
    run = _main_run(res, cfg)
    m = run / "metrics.jsonl"
    recs = [json.loads(x) for x in m.read_text().splitlines()]
    extra = [{**recs[-1], "step": s} for s in (3, 4)]
    m.write_text("".join(json.dumps(r) + "\n" for r in recs + extra))
    with pytest.raises(ValueError, match=rf"{m}: holds 5 step records .* but {run / 'run.json'} says steps 0\.\.2 "
                                         r"were completed \(3\)"):
        load_results(res, cfg)


def test_a_short_metrics_file_without_run_json_or_summary_is_refused(tree):
    """A metrics.jsonl cut short, with neither run.json nor summary.json beside it (a run killed in its first
    steps, or files copied by hand), was read silently as the whole run."""
    res, cfg = tree
    run = _main_run(res, cfg)
    m = run / "metrics.jsonl"
    m.write_text(m.read_text().splitlines(keepends=True)[0])
    (run / "run.json").unlink()
    (run / "summary.json").unlink()
    with pytest.raises(ValueError, match=rf"{m}: 1 step records without the run's record {run / 'run.json'}"):
        load_results(res, cfg)


def _eval_doc(res: Path, cfg) -> tuple[Path, dict]:
    path = _eval_path(res, cfg)
    return path, json.loads(path.read_text())


@pytest.mark.parametrize("contradiction", ["pass@1 against its problems", "pass@1 above pass@k", "a key twice",
                                           "n against its problems"])
def test_an_eval_json_that_contradicts_itself_is_refused(tree, contradiction):
    """Eval values that contradict each other passed: a benchmark's pass@1 of 0.99 while its own per-problem
    values give far less; pass@1 above pass@2; a key given twice (json keeps the last). Each is named now."""
    res, cfg = tree
    path, doc = _eval_doc(res, cfg)
    bench = sorted(doc["benchmarks"])[0]
    b, k = doc["benchmarks"][bench], doc["k"]
    if contradiction == "pass@1 against its problems":
        b["pass@1"] = 0.99
        want = rf"{path}: benchmarks\.{bench}\.pass@1 is 0\.99, but its \d+ per-problem values \(.*\) give "
    elif contradiction == "pass@1 above pass@k":
        for p in doc["per_problem"]:
            p["successes"] = p["samples"] - 1 if p["benchmark"] == bench else p["successes"]
        recompute_pass1(doc)
        b[f"pass@{k}"] = 0.0
        want = rf"{path}: benchmarks\.{bench}\.pass@1 is [0-9.]+, above benchmarks\.{bench}\.pass@{k} = 0: pass@k"
    elif contradiction == "n against its problems":
        b["n"] += 1
        want = rf"{path}: benchmarks\.{bench}\.n is \d+, but per_problem lists \d+ problems of it"
    else:
        text = json.dumps(doc).replace('"overall": {', '"overall": {"pass@1": 0.0, ', 1)
        path.write_text(text)
        with pytest.raises(ValueError, match=rf"{path}: key 'pass@1' is given twice"):
            load_results(res, cfg)
        return
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=want):
        load_results(res, cfg)


def test_a_benchmark_missing_from_an_eval_json_is_named(tree):
    """A benchmark missing from one eval JSON left an empty table cell without a word."""
    res, cfg = tree
    path, doc = _eval_doc(res, cfg)
    bench = sorted(doc["benchmarks"])[-1]
    del doc["benchmarks"][bench]
    doc["per_problem"] = [p for p in doc["per_problem"] if p["benchmark"] != bench]
    doc["overall"]["n"] = len(doc["per_problem"])
    recompute_pass1(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=rf"{path}: no benchmark '{bench}', which \d+ other eval JSON\(s\) of task "
                                         rf"'{doc['task']}' report"):
        load_results(res, cfg)
