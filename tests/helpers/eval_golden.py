"""The CPU default's evaluation on a fixed input, as text to compare byte for byte across code versions.

`local_eval_text(d)` runs `rtpo.evaluate.evaluate` with the local engine (`--engine local`, the CPU
default's path: CHUNK trajectories per batched call) on 150 generated math tasks x 2 samples with
math-verify on, the engine a deterministic stand-in (its tokens a function of the context and seed, so
any change in what is sampled, in which batches, or in how the JSON is written shows), and returns the
eval JSON and the trajectory dump as written, with only what differs between two runs of the same code
replaced: the run's directory, timings, the code version. tests/fixtures/eval/local_f1aae5b.txt is this
text from commit f1aae5b (before evaluations resumed): `python tests/helpers/eval_golden.py OUT` with that
commit's rtpo first on PYTHONPATH.
"""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VOLATILE = ("wall_s", "startup_s", "rollout_s", "trajectories_per_s", "generated_tokens_per_s")


class StandIn:
    """A sampler whose completion is "The answer is \\boxed{n}." + EOS, n the task's answer or not, drawn
    from the context and seed; records each call's batch size."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers
        import importlib.util  # by path: ROOT on sys.path would shadow the rtpo under test

        spec = importlib.util.spec_from_file_location("tiny_helper", ROOT / "tests" / "helpers" / "tiny.py")
        tiny = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tiny)
        self.tokenizer = tiny.tokenizer()
        self.max_context = 4096
        self.weight_version = 0
        self.eos = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.batches: list[int] = []

    def sample(self, contexts, params, seeds=None):
        from rtpo.engine.base import Completion

        self.batches.append(len(contexts))
        out = []
        for c, s in zip(contexts, seeds):
            rng = random.Random(f"{s}:{len(c)}:{sum(c)}:{c[-8:]}")
            text = self.tokenizer.decode(c)
            right = next((a for q, a in self.answers.items() if q in text), "0")
            n = right if rng.random() < 0.5 else rng.randrange(60)
            ids = self.tokenizer.encode(f"The answer is \\boxed{{{n}}}.", add_special_tokens=False) + [self.eos]
            out.append(Completion(ids=ids, logprobs=[-0.5] * len(ids), stop_reason="eos"))
        return out


def local_eval_text(d: Path) -> str:
    import rtpo.evaluate as E
    from rtpo.config import load_config
    from rtpo.data import generate_tasks

    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    cfg = load_config(ROOT / "config" / "smoke.yaml", validate=False)
    cfg["eval"] = {"samples": 2, "temperature": 1.0, "math_verify": True}
    model = d / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps({"model_type": "qwen3", "max_position_embeddings": 4096}))
    ev = d / "eval.jsonl"
    tasks = generate_tasks("math", 150, 0, "eval")
    ev.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in tasks))
    eng = StandIn({t.question: t.answers[0] for t in tasks})
    saved = E.build_engine
    E.build_engine = lambda *a, **k: eng
    try:
        E.evaluate(model, "vanilla", "math", cfg, 3, ev, d / "eval.json", engine="local",
                   trajectories=d / "traj.jsonl")
    finally:
        E.build_engine = saved
    text = (d / "eval.json").read_text()
    text = re.sub(rf'"({"|".join(VOLATILE)})": [-0-9.e+]+', r'"\1": 0', text)
    text = re.sub(r'"code": \{[^}]*\}', '"code": {}', text)
    text = text.replace(str(d), "<dir>")
    return f"{text}\n=== batches {eng.batches}\n=== trajectories\n{(d / 'traj.jsonl').read_text()}"


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        Path(sys.argv[1]).write_text(local_eval_text(Path(tmp) / "run"))
