#!/usr/bin/env python
"""Why the mechanism sweep finds K = 3 as hard as (or harder than) K = 4 under psi = qwen3 while psi = full
is monotone in K (issue 55 item 5; reference/sweep/sweep_horizon.csv). It measures, per horizon K, on the
sweep's own questions (regenerated here exactly as `rtpo data` does under `sweep:`: data.seed, sweep.n_train /
n_eval / demos_per_hops, max_turns K + extra_turns, sft.imperfection):

  1. the reference numbers the anomaly is read from: pass@1 per (K, psi, arm), the qwen3 penalty
     (full − qwen3) and hit / pass@1;
  2. the eval set: relation paths, answer types, and the pass@1 of guessing an entity of the answer type;
  3. what could be a defect of the generator, the env or the budgets: the rank of the passage every hop
     needs in the BM25 result (top_k 3), the scripted expert's success without errors, its action tokens
     per turn against env.search.max_new_tokens, and c_k's tokens under each psi against sweep.max_position;
  4. what psi = qwen3 strips from c_k = psi(S_k) at each turn of the perfect expert's trajectory: the
     tokens, whether the entity the turn must write (query or answer) is still in c_k, and whether the
     relation the turn must read ("The birthplace is ..." of the previous turn's "Find its birthplace") is
     still in c_k outside the question;
  5. how much of the stripped relation labels the cues that survive qwen3 determine. First the parity table:
     per last relation (the question's opening: "Where was ... born?", "In which country ...?"), which first
     relation (director | studio, the one next to the film) the warm starts' demonstrations use at each K (the
     CPU default's search demos, tiers 2-4 hops, plus the sweep's demos_per_hops per K), and how many eval
     questions per K start with the minority one. Then, for each cue set (turn index, type of the entity whose
     passage is read, the question's first / last relation), the share of reads (and of whole questions)
     whose relation (and answer-now decision) is the demos' majority for those cues, and the pass@1 in the KB
     of an agent that reads every passage right but chooses relations that way (the policy left when the
     notes naming the relations are gone and the question is read only through those cues);
  6. (--model DIR: a sweep base model, results/sweep/models/base) the model's own account, teacher-forced on
     the perfect expert's trajectories: per K, turn and psi, the share of actions whose every token is the
     model's argmax, the mean log-prob per action token, and at turn 2 the probability of the first
     relation's word ("The director is" / "The studio is"), split by the parity table's minority flag. This
     pins where qwen3 hurts the warm-started policy; it needs the sweep base model (not built here);
  7. (--results DIR with a sweep run's eval files) pass@1 per (K, psi, method) split by section 5's minority
     flag, from the eval JSONs' per-problem successes: the check that needs no model run.

Found at 2c8b626 (sections 1-5; 6 and 7 need a sweep run, not on the machine that ran this): no defect — every passage a hop
needs is BM25's rank 1 at every K, actions <= 34 tokens (max_new_tokens 48), c_k <= 519 tokens (max_position
2048), and qwen3 leaves every entity a turn writes in c_k; it strips only the notes that name the relations
("Find the director of X.", "The director is P. Find its employer."), at every K alike. What is K = 3's own:
it is the only odd horizon. Entity types alternate (film -> person | company -> ...), so for each last relation
but country the 3-hop path starts with the other first relation than the 2- and 4-hop paths (e.g. last
birthplace: director-birthplace, STUDIO-founder-birthplace, director-employer-founder-birthplace): 169 of the
200 K = 3 eval questions start with the demos' minority first relation for their opening, 37 at K = 4, 0 at
K = 2. A policy that, without the notes, infers the chain from the turn, the passage type and the question's
opening solves 100 / 8 / 26 % at K = 2 / 3 / 4 (full: 100 % at every K, the notes name every relation): the
qwen3 penalty is 0 at K = 2, largest at K = 3, smaller at K = 4, as in the reference (untrained 0.3 / 6.4 / 1.4
pp; RTPO 2.8 / 15.1 / 5.0; GRPO 2.4 / 13.3 / 4.7). Reading the first relation next to the film as well would
reverse the order (100 / 72 / 41 %): which cues the model uses is what sections 6-7 measure. The main grid
(psi = qwen3, another base model and question set) shows the same: 28 of its 33 3-hop eval questions start with
the minority first relation (5 of 33 at 4 hops), and its untrained 3-hop pass@1 is 5.5 % against 5.2 % at 4 hops
(reference/cpu-default/table01_main.csv).

    PYTHONPATH=. python scripts/sweep_horizon_probe.py --tokenizer results/models/tokenizer \\
        [--model results/sweep/models/base] [--n 200] [--results results]

Reads only; writes the regenerated task files under --work (a temporary directory by default).
"""

from __future__ import annotations

import argparse
import collections
import random
import statistics
import sys
import tempfile
from pathlib import Path

import pandas as pd

from rtpo.config import data_settings, load_config, task_file_options
from rtpo.context import THINK_RE, apply_psi
from rtpo.data import generate_tasks, read_tasks, write_task_files
from rtpo.data.search_tasks import RELATIONS, run_expert
from rtpo.envs import make_env
from rtpo.envs.search_kb import build_kb
from rtpo.experiment import sweep_data_sets

SUBJECT = {r: s for r, (s, _) in RELATIONS.items()}
OBJECT = {r: o for r, (_, o) in RELATIONS.items()}


def sweep_data(cfg0: dict, config: str, k: int, work: Path) -> tuple[dict, Path]:
    """The sweep's data at horizon K, as `rtpo data --config C --task search <sweep_data_sets>` writes it."""
    cfg = load_config(config, sweep_data_sets(cfg0, k))
    opts = task_file_options(data_settings(cfg, "search"))
    out = work / f"h{k}"
    if not (out / "eval.jsonl").exists():
        write_task_files("search", opts, out)
    return opts, out


def reference(path: Path) -> None:
    df = pd.read_csv(path)
    print(f"== 1. reference ({path}): pass@1 % and hit / pass@1")
    for k, g in df.groupby("K"):
        cells = {(r["psi"], r["method"]): r for _, r in g.iterrows()}
        parts = []
        for m in ("vanilla", "rtpo", "grpo"):
            q, f = cells.get(("qwen3", m)), cells.get(("full", m))
            if q is None or f is None:
                continue
            parts.append(f"{'untrained' if m == 'vanilla' else m}: qwen3 {q['pass@1']:4.1f} full {f['pass@1']:4.1f} "
                         f"penalty {f['pass@1'] - q['pass@1']:+5.1f} (hit/pass {q['hit'] / q['pass@1']:.2f} / "
                         f"{f['hit'] / f['pass@1']:.2f})")
        print(f"  K={k}  " + " | ".join(parts))


def eval_set(k: int, tasks: list) -> None:
    kb = build_kb(int(tasks[0].meta["corpus_seed"]))
    paths = collections.Counter("-".join(t.meta["path"]) for t in tasks)
    types = collections.Counter(OBJECT[t.meta["path"][-1]] for t in tasks)
    n_type = {t: len(kb.of_type(t)) for t in types}
    guess = sum(c / n_type[t] for t, c in types.items()) / len(tasks)
    print(f"  K={k}  paths {dict(sorted(paths.items()))}")
    print(f"        answer types {dict(types)}; guessing an entity of the answer type: pass@1 {100 * guess:.1f} %")


def tokens(tok, text: str) -> int:
    return len(tok.encode(text, add_special_tokens=False))


def expert_turns(task, max_turns: int) -> list[tuple[list[dict], dict]]:
    """The perfect expert's (S_k, action message) per turn k (imperfection 0: no mistakes)."""
    msgs, reward = run_expert(task, make_env(task, max_turns=max_turns), 0.0, random.Random(0))
    if reward < 1:
        raise RuntimeError(f"{task.id}: the scripted expert without errors failed (reward {reward})")
    return [(msgs[:i], m) for i, m in enumerate(msgs) if m["role"] == "assistant"]


def pipeline_checks(k: int, tasks: list, opts: dict, cfg: dict, tok) -> list:
    """Section 3 and 4 for one K; returns the per-task expert turns for section 6."""
    max_new, max_pos = int(cfg["env"]["search"]["max_new_tokens"]), int(cfg["sweep"]["max_position"])
    ranks = collections.defaultdict(collections.Counter)
    act = collections.defaultdict(list)
    ctx = {p: collections.defaultdict(list) for p in ("full", "qwen3")}
    stripped = collections.defaultdict(list)
    entity_seen = collections.Counter()
    label_seen = {p: collections.Counter() for p in ("full", "qwen3")}
    reads = collections.Counter()
    out = []
    for t in tasks:
        turns = expert_turns(t, opts["env"]["max_turns"])
        out.append(turns)
        path, chain = t.meta["path"], t.meta["chain"]
        for j, (hist, a) in enumerate(turns):
            turn = j + 1
            act[turn].append(tokens(tok, a["content"]))
            views = {p: apply_psi(hist, p) for p in ("full", "qwen3")}
            for p, v in views.items():
                ctx[p][turn].append(tokens(tok, tok.apply_chat_template(v, add_generation_prompt=True, tokenize=False)))
            stripped[turn].append(sum(tokens(tok, m["content"]) - tokens(tok, THINK_RE.sub("", m["content"]))
                                      for m in hist if m["role"] == "assistant"))
            if hist and hist[-1]["role"] == "tool":  # the rank of the passage this turn reads (hop turn-2)
                subj = chain[turn - 2]
                lines = [x.split("] ", 1)[-1] for x in hist[-1]["content"].splitlines()]
                ranks[turn - 2][next((i + 1 for i, x in enumerate(lines) if x.startswith(subj + " is ")), 0)] += 1
            if turn >= 2:  # this turn writes chain[turn-1] after reading relation path[turn-2]
                reads[turn] += 1
                rel_word = {"hq": "home city"}.get(path[turn - 2], path[turn - 2])
                for p, v in views.items():
                    body = [m["content"] for m in v if m["role"] in ("assistant", "tool")]
                    entity_seen[p, turn] += any(chain[turn - 1] in b for b in body)
                    label_seen[p][turn] += any(f"Find its {rel_word}." in b or f"Find the {rel_word} of" in b
                                               for b in body if "<think>" in b)
    worst = lambda c: max(c) if c else 0  # noqa: E731
    print(f"  K={k}  passage rank per hop (count of questions): {{hop: {{rank: n}}}} "
          f"{ {h: dict(c) for h, c in sorted(ranks.items())} }")
    print(f"        action tokens per turn (mean / max; max_new_tokens {max_new}): "
          + ", ".join(f"t{i} {statistics.mean(v):.1f}/{max(v)}" for i, v in sorted(act.items())))
    print(f"        c_k tokens per turn (mean, max; max_position {max_pos}): full "
          + ", ".join(f"t{i} {statistics.mean(v):.0f}" for i, v in sorted(ctx['full'].items()))
          + f" (max {worst([max(v) for v in ctx['full'].values()])}); qwen3 "
          + ", ".join(f"t{i} {statistics.mean(v):.0f}" for i, v in sorted(ctx['qwen3'].items()))
          + f" (max {worst([max(v) for v in ctx['qwen3'].values()])})")
    print("        qwen3 strips (tokens of earlier <think> blocks, mean): "
          + ", ".join(f"t{i} {statistics.mean(v):.1f}" for i, v in sorted(stripped.items())))
    print("        the entity turn t writes is in c_t (full / qwen3): "
          + ", ".join(f"t{i} {entity_seen['full', i]}/{entity_seen['qwen3', i]} of {n}" for i, n in sorted(reads.items())))
    print("        the relation turn t reads is named in an earlier note of c_t (full / qwen3): "
          + ", ".join(f"t{i} {label_seen['full'][i]}/{label_seen['qwen3'][i]} of {n}" for i, n in sorted(reads.items())))
    return out


CUES = {  # what a policy may condition a read on without the stripped notes (all visible under qwen3)
    "turn + type of the passage read": lambda p, h, typ: (h, typ),
    "turn + type + last relation": lambda p, h, typ: (h, typ, p[-1]),
    "turn + type + first relation": lambda p, h, typ: (h, typ, p[0]),
    "turn + type + first + last relation": lambda p, h, typ: (h, typ, p[0], p[-1]),
    "type + first + last relation (no turn)": lambda p, h, typ: (typ, p[0], p[-1]),
    "the whole question (K, all relations)": lambda p, h, typ: (h, typ, tuple(p)),
}


def pointer_free_agent(kb, path: list[str], film: str, tab: dict, cue, max_turns: int) -> str | None:
    """The answer of an agent that reads every passage right but picks each relation (and when to answer) as the
    majority of the demonstrations for its cues: the policy left when the notes naming the relations are gone.
    It follows the KB (every needed passage is BM25's rank 1, section 3); an unseen cue ends the episode."""
    current = film
    for h in range(max_turns - 1):
        key = cue(path, h, kb.entities[current]["type"])
        if key not in tab:
            return None
        rel, answer = tab[key].most_common(1)[0][0]
        if SUBJECT[rel] != kb.entities[current]["type"]:
            return None
        current = kb.entities[current][rel]
        if answer:
            return current
    return None


def reads_right(tab: dict, cue, p: list[str]) -> list[bool]:
    """Per read of path p: is the demos' majority (relation, answer now) for its cues the right one?"""
    return [tab[cue(p, h, SUBJECT[p[h]])].most_common(1)[0][0] == (p[h], h == len(p) - 1) for h in range(len(p))]


def cue_tables(cfg: dict, sweep_tasks: dict[int, list], demos_per_k: int) -> dict[int, set]:
    """Section 5: majority relation per cue over the warm starts' demonstrated questions."""
    seed = int(cfg["data"]["seed"])
    n_base = int(cfg["sft"]["demos_per_task"])
    base = generate_tasks("search", int(cfg["data"]["search"]["n_train"]), seed, "train")[:n_base]
    demo_paths = [t.meta["path"] for t in base]
    for k, ts in sweep_tasks.items():
        demo_paths += [t.meta["path"] for t in ts["train"][:demos_per_k]]
    print(f"  demonstrated questions: {len(demo_paths)} (CPU-default base {len(base)} + sweep {demos_per_k} per K)")
    # the first relation (director | studio, named next to the film) per last relation (the question's opening)
    first = collections.defaultdict(collections.Counter)
    for p in demo_paths:
        first[p[-1]][(p[0], len(p))] += 1
    print("  demos' first relation per last relation, by K: " + "; ".join(
        f"{last}: " + ", ".join(f"{f[:3]}@K{n} {c}" for (f, n), c in sorted(cnt.items(), key=lambda x: x[0][1]))
        for last, cnt in sorted(first.items())))
    row, minority_ids = [], {}
    for k, ts in sweep_tasks.items():
        minority, minority_ids[k] = 0, set()
        for t in ts["eval"]:
            p = t.meta["path"]
            by_first = collections.Counter()
            for (f, _n), c in first[p[-1]].items():
                by_first[f] += c
            if by_first[p[0]] < max(by_first.values()):
                minority += 1
                minority_ids[k].add(t.id)
        row.append(f"K={k} {minority} of {len(ts['eval'])}")
    print("  eval questions whose first relation is the demos' minority for their last relation: " + ", ".join(row))
    main_eval = generate_tasks("search", int(cfg["data"]["search"]["n_eval"]), seed, "eval")
    by_tier = collections.Counter()
    for t in main_eval:
        p = t.meta["path"]
        by_first = collections.Counter()
        for (f, _n), c in first[p[-1]].items():
            by_first[f] += c
        by_tier[len(p), "n"] += 1
        by_tier[len(p), "minority"] += by_first[p[0]] < max(by_first.values())
    print("  the same on the main grid's search eval set (data.search, psi = qwen3; reference/cpu-default table01_main "
          "per tier): " + ", ".join(f"{k} hops {by_tier[k, 'minority']} of {by_tier[k, 'n']}" for k in (2, 3, 4)))
    for name, cue in CUES.items():
        tab = collections.defaultdict(collections.Counter)
        for p in demo_paths:
            for h in range(len(p)):
                tab[cue(p, h, SUBJECT[p[h]])][(p[h], h == len(p) - 1)] += 1  # the relation read; does the turn answer
        row = []
        for k, ts in sweep_tasks.items():
            n_read = ok_read = ok_q = 0
            for t in ts["eval"]:
                good = reads_right(tab, cue, t.meta["path"])
                n_read += len(good)
                ok_read += sum(good)
                ok_q += all(good)
            row.append(f"K={k} reads {100 * ok_read / n_read:3.0f} % questions {100 * ok_q / len(ts['eval']):3.0f} %")
        print(f"  {name:40s} " + " | ".join(row))
        agent = []
        for k, ts in sweep_tasks.items():
            kb = build_kb(int(ts["eval"][0].meta["corpus_seed"]))
            wins = coincide = 0
            for t in ts["eval"]:
                ans = pointer_free_agent(kb, t.meta["path"], t.meta["chain"][0], tab, cue, k + 2)
                wins += ans == t.answers[0]
                coincide += ans == t.answers[0] and not all(reads_right(tab, cue, t.meta["path"]))
            agent.append(f"K={k} pass@1 {100 * wins / len(ts['eval']):3.0f} % ({coincide} by a wrong path)")
        print(f"  {'  ... the agent that follows them':40s} " + " | ".join(agent))
    return minority_ids


def model_probe(model_dir: str, per_k: dict[int, list], tasks: dict[int, list], minority: dict[int, set], n: int) -> None:
    """Section 6: teacher-forced per-turn argmax match and log-prob of the expert's action under each psi, and at
    turn 2 the probability of the first relation's word ("The director is" / "The studio is"), split by whether
    that relation is the demos' minority for the question's last relation (section 5)."""
    import torch

    from rtpo.engine.local import load_hf_model

    torch.set_num_threads(1)
    model, tok = load_hf_model(model_dir)
    model.eval()
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    print(f"== 6. the model {model_dir}: teacher-forced on the perfect expert, {n} eval questions per K: "
          "exact = every action token is the argmax; lp = mean log-prob per action token")
    for k, trajs in per_k.items():
        stats = {p: collections.defaultdict(lambda: [0, 0, 0.0]) for p in ("full", "qwen3")}
        first = {p: {True: [0, 0, 0.0], False: [0, 0, 0.0]} for p in ("full", "qwen3")}
        for task, turns in zip(tasks[k][:n], trajs[:n]):
            for j, (hist, a) in enumerate(turns):
                tgt = tok.encode(a["content"], add_special_tokens=False) + [im_end]
                for p in ("full", "qwen3"):
                    c = tok.encode(tok.apply_chat_template(apply_psi(hist, p), add_generation_prompt=True,
                                                           tokenize=False), add_special_tokens=False)
                    with torch.no_grad():
                        logits = model(torch.tensor([c + tgt])).logits[0, len(c) - 1:-1].float()
                    lp = torch.log_softmax(logits, -1)
                    y = torch.tensor(tgt)
                    s = stats[p][j + 1]
                    s[0] += 1
                    s[1] += bool((lp.argmax(-1) == y).all())
                    s[2] += lp[torch.arange(len(tgt)), y].mean().item()
                    if j == 1:  # turn 2: "<think>The <first relation> is ..."
                        i = len(tok.encode("<think>The", add_special_tokens=False))
                        f = first[p][task.id in minority[k]]
                        f[0] += 1
                        f[1] += int(lp[i].argmax()) == tgt[i]
                        f[2] += float(lp[i, tgt[i]].exp())
        for p in ("full", "qwen3"):
            cells = ", ".join(f"t{t} exact {100 * s[1] / s[0]:3.0f} % lp {s[2] / s[0]:6.3f}" for t, s in sorted(stats[p].items()))
            print(f"  K={k} {p:5s} {cells}")
            print(f"         turn 2, first relation word: " + "; ".join(
                f"{'minority' if m else 'majority'} n={f[0]} argmax {100 * f[1] / max(f[0], 1):3.0f} % "
                f"p {f[2] / max(f[0], 1):.2f}" for m, f in first[p].items()))


def stratified(results: Path, tasks: dict[int, list], minority: dict[int, set]) -> None:
    """Section 7: a sweep run's pass@1 per (K, psi, method) on the questions whose first relation is the demos'
    minority for their opening (section 5) and on the rest, from the eval files' per-problem successes."""
    import json

    files = sorted(results.glob("sweep/h*/psi-*/*/eval_seed*.json"))
    if not files:
        print(f"== 7. no sweep eval files under {results}/sweep (run the sweep: bash scripts/pipeline.sh sweep)")
        return
    print(f"== 7. {results}/sweep: pass@1 % on the minority-first questions | the rest (all seeds' samples)")
    acc = collections.defaultdict(lambda: [0, 0, 0, 0])
    for f in files:
        k, psi, method = int(f.parts[-4][1:]), f.parts[-3].removeprefix("psi-"), f.parts[-2]
        if k not in minority:
            continue
        for row in json.loads(f.read_text()).get("per_problem", []):
            a = acc[k, psi, method]
            i = 0 if row["id"] in minority[k] else 2
            a[i] += row["successes"]
            a[i + 1] += row["samples"]
    for (k, psi, method), a in sorted(acc.items()):
        pct = lambda s, n: f"{100 * s / n:5.1f}" if n else "  n/a"  # noqa: E731
        print(f"  K={k} {psi:5s} {method:8s} {pct(a[0], a[1])} (n {a[1]}) | {pct(a[2], a[3])} (n {a[3]})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--tokenizer", default="results/models/tokenizer", help="the pipeline's trained tokenizer")
    ap.add_argument("--reference", default="reference/sweep/sweep_horizon.csv")
    ap.add_argument("--model", default=None, help="a sweep base model directory (section 6)")
    ap.add_argument("--n", type=int, default=200, help="eval questions per K for section 6")
    ap.add_argument("--results", default="results", help="a sweep run's results directory (section 7)")
    ap.add_argument("--work", default=None, help="where the regenerated sweep data goes (default: a temp dir)")
    args = ap.parse_args(argv)

    from rtpo.tokenizer import load_tokenizer

    cfg = load_config(args.config)
    if not Path(args.tokenizer).is_dir():
        print(f"error: tokenizer directory {args.tokenizer} not found (build it: snakemake results/models/tokenizer)",
              file=sys.stderr)
        return 2
    tok = load_tokenizer(args.tokenizer)
    work = Path(args.work or tempfile.mkdtemp(prefix="sweep-probe-"))
    hops = [int(k) for k in cfg["sweep"]["hops"]]
    if Path(args.reference).exists():
        reference(Path(args.reference))
    data = {}
    for k in hops:
        opts, d = sweep_data(cfg, args.config, k, work)
        data[k] = {"opts": opts, "train": read_tasks(d / "train.jsonl"), "eval": read_tasks(d / "eval.jsonl")}
    print(f"== 2. the eval sets ({work})")
    for k in hops:
        eval_set(k, data[k]["eval"])
    print("== 3-4. retrieval, budgets and what psi = qwen3 strips, on the perfect expert's trajectories (eval sets)")
    trajs = {k: pipeline_checks(k, data[k]["eval"], data[k]["opts"], cfg, tok) for k in hops}
    print("== 5. the relation each turn reads, from cues that survive qwen3: majority over the warm starts' demos")
    minority = cue_tables(cfg, {k: data[k] for k in hops}, int(cfg["sweep"]["demos_per_hops"]))
    if args.model:
        model_probe(args.model, trajs, {k: data[k]["eval"] for k in hops}, minority, args.n)
    stratified(Path(args.results), {k: data[k]["eval"] for k in hops}, minority)
    return 0


if __name__ == "__main__":
    sys.exit(main())
