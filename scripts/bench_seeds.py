"""Seeds per process: what running S seeds of one cell in one process buys (not a test; prints figures).

    .venv/bin/python scripts/bench_seeds.py [--methods rtpo grpo] [--tasks math search airline]
        [--seeds 1 2 5 10] [--steps 3] [--model results/models/base] [--config config/config.yaml]
    .venv/bin/python scripts/bench_seeds.py --stack-probe [--rows 6 24] [--seeds 1 2 5 10]

Whole commands (the default), at the CPU default's budgets (its config; `--steps` steps per seed):
for every (task, method) and S, `rtpo train --seed 0 .. S-1` in one process and the same S seeds as
S separate `rtpo train --seed s` processes, one after the other, alternating which goes first. Per
row: wall seconds per training step (the whole command's wall over S x steps, start-up included, as
a DAG job pays it), aggregate generated and trained tokens per second (the step records' counts over
the command's wall), and separate / one-process wall (the speed-up of grouping). Both modes run the
same seeds, so their tokens are identical (checked).

`--stack-probe`: the measurement behind not batching the S runs' engine calls through one stacked
model (docs/performance.md "Seeds per process"). A decode step of the base model's
architecture with S distinct weight sets stacked on a leading axis (torch.bmm for every projection and
the output head, the element-wise work, norms, rotary and sampling batched over all S x R rows; attention
either per run over its own cache or as one call over the S caches stacked) against one run's
`rtpo.engine.decoder.Decoder.step` on R rows (what S seeds trained one after the other pay, S times) and
S separate steps back to back: ms per decode step for all S runs and the ratios; then, for the largest
S, where the stacked step's time goes (torch.profiler, self CPU time per op). The decode is most of an
RL step (docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENV = dict(os.environ, PYTHONHASHSEED="0", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", WANDB_MODE="disabled")


# ------------------------------------------------------------------------------------------------ whole commands
def train_cmd(a: argparse.Namespace, method: str, task: str, seeds: list[int], out: str) -> list[str]:
    return [str(ROOT / ".venv" / "bin" / "rtpo"), "train", "--config", a.config, "--method", method, "--task", task,
            "--seed", *map(str, seeds), "--model", a.model, "--train-file", f"results/data/{task}/train.jsonl",
            "--set", f"train.steps={a.steps}", "--set", f"train.checkpoint_every={a.steps}", "--out", out]


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
    return time.perf_counter() - t0


def tokens(run: Path) -> tuple[int, int]:
    """(generated, trained) tokens of a run's step records."""
    gen = trained = 0
    for line in (run / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        gen += sum(rec.get("tokens", {}).values())
        trained += int(rec.get("trained_tokens") or 0)
    return gen, trained


def whole_commands(a: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench_seeds-"))
    rows = []
    try:
        for task in a.tasks:
            for method in a.methods:
                for i, S in enumerate(a.seeds):
                    seeds = list(range(S))
                    one_dir, sep_dir = tmp / f"{task}-{method}-{S}-one", tmp / f"{task}-{method}-{S}-sep"
                    one_cmd = train_cmd(a, method, task, seeds, str(one_dir / "seed{seed}"))
                    sep_cmds = [train_cmd(a, method, task, [s], str(sep_dir / f"seed{s}")) for s in seeds]
                    if i % 2 == 0:  # alternate which mode goes first: drift on the machine falls on both
                        w_one = timed(one_cmd)
                        w_sep = sum(timed(c) for c in sep_cmds)
                    else:
                        w_sep = sum(timed(c) for c in sep_cmds)
                        w_one = timed(one_cmd)
                    tok_one = [tokens(one_dir / f"seed{s}") for s in seeds]
                    tok_sep = [tokens(sep_dir / f"seed{s}") for s in seeds]
                    if tok_one != tok_sep:
                        raise SystemExit(f"{task}/{method} S={S}: one process and separate processes differ: "
                                         f"{tok_one} vs {tok_sep}")
                    gen, trained = sum(t[0] for t in tok_one), sum(t[1] for t in tok_one)
                    n = S * a.steps
                    rows.append((task, method, S, w_one / n, w_sep / n, gen / w_one, trained / w_one,
                                 gen / w_sep, w_sep / w_one))
                    print(f"  {task:8s} {method:5s} S={S:<3d} one process {w_one:7.1f} s, separate {w_sep:7.1f} s",
                          file=sys.stderr, flush=True)
                    shutil.rmtree(one_dir), shutil.rmtree(sep_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nS seeds x {a.steps} steps ({a.config}, model {a.model}); wall per step includes start-up "
          "(as a DAG job pays it)\n")
    print("| task | method | S | s/step, one process | s/step, S processes | gen tok/s (one) | trained tok/s (one) "
          "| gen tok/s (S proc.) | S processes / one |")
    print("|---|---|---|---|---|---|---|---|---|")
    for task, method, S, one, sep, g, t, gs, ratio in rows:
        print(f"| {task} | {method} | {S} | {one:.2f} | {sep:.2f} | {g:,.0f} | {t:,.0f} | {gs:,.0f} | {ratio:.2f}x |")
    for task in a.tasks:
        for method in a.methods:
            base = next(r for r in rows if r[:3] == (task, method, a.seeds[0]))
            for r in rows:
                if r[:2] == (task, method) and r[2] != a.seeds[0]:
                    print(f"{task}/{method}: aggregate generated tok/s at S={r[2]} over S={a.seeds[0]}: "
                          f"{r[5] / base[5]:.2f}x")


# ------------------------------------------------------------------------------------------------ stack probe
def stack_probe(a: argparse.Namespace) -> None:
    import torch
    import torch.nn.functional as F

    from rtpo.engine import decoder as D
    from rtpo.engine.local import load_hf_model

    torch.set_num_threads(1)
    base, _ = load_hf_model(ROOT / a.model)
    base.eval()

    def copies(S: int) -> list[torch.nn.Module]:
        """S models of the base architecture with distinct weights (each perturbed), as S seeds' are."""
        import copy

        out = []
        for s in range(S):
            m = copy.deepcopy(base)
            g = torch.Generator().manual_seed(s)
            with torch.no_grad():
                for p in m.parameters():
                    p.add_(torch.randn(p.shape, generator=g) * 1e-3)
            out.append(m)
        return out

    def median_ms(fn, n: int) -> float:
        for _ in range(5):
            fn()
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return 1e3 * statistics.median(times)

    print(f"\nstack probe: {a.model} ({sum(p.numel() for p in base.parameters()):,} parameters), context {a.context} "
          f"tokens, one decode step; median of {a.reps}\n")
    print("| S runs | rows per run | one run's step (ms) | S steps back to back (ms) | stacked, attention per run "
          "(ms) | stacked, attention batched (ms) | S x one run / stacked (best) |")
    print("|---|---|---|---|---|---|---|")
    last = None
    for R in a.rows:
        for S in a.seeds:
            models = copies(S)
            decs = [D.Decoder(m) for m in models]
            caches = []
            for d in decs:
                c = d.new_cache(R, a.context + 8)
                c.lens = torch.full((R,), a.context, dtype=torch.long)
                for li in range(len(c.k)):
                    c.k[li].normal_()
                    c.v[li].normal_()
                caches.append(c)
            tok = torch.randint(0, base.config.vocab_size, (R,))

            def one_step(d, c):
                c.lens = torch.full((R,), a.context, dtype=torch.long)
                logp = torch.log_softmax(d.step(c, tok), -1)
                D.sample_from_logp(logp, torch.rand(R, dtype=torch.float64))

            def separate():
                for d, c in zip(decs, caches):
                    one_step(d, c)

            one = median_ms(lambda: one_step(decs[0], caches[0]), a.reps)
            sep = median_ms(separate, a.reps)
            per_run = median_ms(lambda st=StackedStep(decs, caches, a.context): st.step(tok.repeat(S)), a.reps)
            batched = StackedStep(decs, caches, a.context, attention="batched")
            stk = median_ms(lambda: batched.step(tok.repeat(S)), a.reps)
            print(f"| {S} | {R} | {one:.2f} | {sep:.2f} | {per_run:.2f} | {stk:.2f} | "
                  f"{S * one / min(per_run, stk):.2f}x |", flush=True)
            last = (S, R, batched, tok)
    if last is not None:
        from torch.profiler import profile

        S, R, st, tok = last
        with profile() as prof:
            for _ in range(50):
                st.step(tok.repeat(S))
        ops = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
        total = sum(e.self_cpu_time_total for e in ops)
        print(f"\nwhere the stacked step goes (S = {S}, {R} rows per run, attention batched; self CPU time):")
        for e in ops[:6]:
            print(f"  {e.key:50s} {100 * e.self_cpu_time_total / total:5.1f} %  ({e.count // 50} calls per step)")


class StackedStep:
    """Decoder.step's arithmetic for S runs at once: every projection and the head as one torch.bmm over
    the S weight sets (S, in, out), norms, rotary, SiLU and sampling over all S x R rows; attention
    "per-run" over each run's own KV cache (a run's attention length is its own), or "batched": one call
    over the S caches concatenated (every run at the same length here). Timing only."""

    def __init__(self, decs, caches, context: int, attention: str = "per-run") -> None:
        import torch

        d0 = decs[0]
        self.S, self.R = len(decs), caches[0].lens.shape[0]
        self.decs, self.caches, self.context = decs, caches, context
        self.nh, self.nkv, self.D, self.eps, self.inter = d0.n_heads, d0.n_kv, d0.head_dim, d0.eps, d0.inter
        st = lambda xs: torch.stack(list(xs)).contiguous()   # noqa: E731
        self.layers = []
        for li in range(len(d0.layers)):
            ls = [d.layers[li] for d in decs]
            self.layers.append({"qkv": st(l.qkv_t for l in ls), "o": st(l.o_t for l in ls),
                                "gu": st(l.gate_up_t for l in ls), "down": st(l.down_t for l in ls),
                                "ln1": st(l.ln1 for l in ls)[:, None], "ln2": st(l.ln2 for l in ls)[:, None],
                                "qk": st(l.qk_norm_col for l in ls) if ls[0].qk_norm is not None else None})
        self.embed = st(d.embed for d in decs).reshape(-1, d0.embed.shape[1])
        self.norm = st(d.norm for d in decs)[:, None]
        self.head = st(d.head_t for d in decs)
        self.cos, self.sin = d0._rope_table(context + 8)
        self.batched = attention == "batched"
        if self.batched:   # the S caches as one (S x R, kv_heads, capacity, head_dim) tensor per layer
            self.k = [torch.cat([c.k[li] for c in caches]).contiguous() for li in range(len(self.layers))]
            self.v = [torch.cat([c.v[li] for c in caches]).contiguous() for li in range(len(self.layers))]

    def step(self, tok):
        import torch
        import torch.nn.functional as F

        S, R, nh, nkv, D = self.S, self.R, self.nh, self.nkv, self.D
        V = self.embed.shape[0] // S
        pos = torch.full((S * R,), self.context, dtype=torch.long)
        cos, sin = self.cos[pos][:, None, None], self.sin[pos][:, None, None]
        x = self.embed[tok + torch.arange(S).repeat_interleave(R) * V].view(S, R, -1)
        L = self.context + 1
        for li, ly in enumerate(self.layers):
            h = F.rms_norm(x, (x.shape[-1],), None, self.eps) * ly["ln1"]
            qkv = torch.bmm(h, ly["qkv"]).view(S * R, -1)
            qk = qkv[:, :(nh + nkv) * D].view(S * R, nh + nkv, 1, D)
            if ly["qk"] is not None:
                qk = F.rms_norm(qk, (D,), None, self.eps) * ly["qk"].repeat_interleave(R, 0)
            h2 = D // 2
            qk = qk * cos + torch.cat((qk[..., h2:], qk[..., :h2]), -1) * sin
            if self.batched:
                self.k[li][:, :, self.context] = qk[:, nh:, 0]
                self.v[li][:, :, self.context] = qkv[:, (nh + nkv) * D:].view(S * R, nkv, D)
                att = F.scaled_dot_product_attention(qk[:, :nh].reshape(S * R, nkv, nh // nkv, D),
                                                     self.k[li][:, :, :L], self.v[li][:, :, :L])
            else:
                outs = []
                for s, c in enumerate(self.caches):   # attention: each run over its own cache
                    rows = slice(s * R, (s + 1) * R)
                    c.k[li][:, :, self.context] = qk[rows, nh:, 0]
                    c.v[li][:, :, self.context] = qkv[rows, (nh + nkv) * D:].view(R, nkv, D)
                    outs.append(F.scaled_dot_product_attention(qk[rows, :nh].reshape(R, nkv, nh // nkv, D),
                                                               c.k[li][:, :, :L], c.v[li][:, :, :L]))
                att = torch.cat(outs)
            att = att.reshape(S, R, nh * D)
            x = x + torch.bmm(att, ly["o"])
            h = F.rms_norm(x, (x.shape[-1],), None, self.eps) * ly["ln2"]
            gu = torch.bmm(h, ly["gu"])
            x = x + torch.bmm(F.silu(gu[..., :self.inter]) * gu[..., self.inter:], ly["down"])
        h = F.rms_norm(x, (x.shape[-1],), None, self.eps) * self.norm
        logp = torch.log_softmax(torch.bmm(h, self.head).view(S * R, -1), -1)
        from rtpo.engine.decoder import sample_from_logp

        return sample_from_logp(logp, torch.rand(S * R, dtype=torch.float64))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", nargs="+", default=["rtpo", "grpo"])
    ap.add_argument("--tasks", nargs="+", default=["math", "search", "airline"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 5, 10], help="values of S")
    ap.add_argument("--steps", type=int, default=3, help="training steps per seed")
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--model", default="results/models/base")
    ap.add_argument("--stack-probe", action="store_true", help="time one stacked decode step instead")
    ap.add_argument("--rows", nargs="+", type=int, default=[6, 24], help="stack probe: rows per run")
    ap.add_argument("--context", type=int, default=300, help="stack probe: context tokens of every row")
    ap.add_argument("--reps", type=int, default=200, help="stack probe: timed steps")
    a = ap.parse_args()
    if not (ROOT / a.model / "config.json").exists():
        raise SystemExit(f"{a.model}: no model (build it first: bash scripts/pipeline.sh results/models/base)")
    stack_probe(a) if a.stack_probe else whole_commands(a)


if __name__ == "__main__":
    main()
