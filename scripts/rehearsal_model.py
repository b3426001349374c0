"""The rehearsal's stand-in for Qwen3-8B (scripts/rehearse.sh, docs/rehearsal.md), made offline.

config/paper.yaml's base_model rule downloads Qwen3-8B, an instruct model that already calls tools. The
rehearsal's config points the same rule at the directory this script writes: a tiny Qwen3
(config/smoke.yaml's shape, positions raised to verl.max_model_len) with this repo's byte-level BPE
tokenizer, warm-started on the embedded tasks' scripted-expert demonstrations exactly as the CPU default
builds its base model (rtpo.sft.build_base_model), so that it emits <tool_call> blocks and episodes run
past their first turn -- a random model would end every episode at turn 1 and leave RTPO's reverse
turns, the tool servers and the multi-turn rows untouched. The tokenizer also sees the rehearsal's
fixture questions, so paper-format prompts stay short.

    .venv-vllm/bin/python scripts/rehearsal_model.py --out results/models/rehearsal-qwen3
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def fixture_texts() -> list[str]:
    """Questions and system prompts of the rehearsal's ARPO-format fixtures."""
    texts = []
    for row in json.loads((ROOT / "tests/fixtures/arpo/train_10k.json").read_text()):
        texts += [m["content"] for m in row["prompt"]]
    for f in sorted((ROOT / "tests/fixtures/arpo/evaluation/data").glob("*/*")):
        for line in f.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                texts += [str(rec.get(k, "")) for k in ("question", "Question", "answer")]
    return texts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="the model directory (the rehearsal config's model.path)")
    ap.add_argument("--config", default=str(ROOT / "config/smoke.yaml"), help="the tiny model's shape and warm start")
    ap.add_argument("--max-position", type=int, default=8192, help="positions (config/rehearsal.yaml verl.max_model_len)")
    ap.add_argument("--sft-epochs", type=int, default=2)
    args = ap.parse_args(argv)

    from rtpo.config import data_settings, load_config, task_file_options
    from rtpo.data import write_task_files
    from rtpo.sft import build_base_model, demo_texts, read_demos
    from rtpo.tokenizer import save_tokenizer, train_tokenizer

    cfg = load_config(args.config, [f"model.tiny.max_position={args.max_position}", f"sft.epochs={args.sft_epochs}"])
    with tempfile.TemporaryDirectory(prefix="rehearsal-model-") as tmp:
        data, tok_dir = Path(tmp) / "data", Path(tmp) / "tokenizer"
        for task in cfg["tasks"]:
            write_task_files(task, task_file_options(data_settings(cfg, task)), data / task)
        texts = demo_texts(read_demos(data, cfg["tasks"])) + fixture_texts()
        save_tokenizer(train_tokenizer(texts, int(cfg["model"]["vocab_size"])), tok_dir)
        summary = build_base_model(cfg, data, tok_dir, args.out)
    print(json.dumps({k: v for k, v in summary.items() if k not in ("sft_loss", "model_settings")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
