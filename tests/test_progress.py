"""Progress lines in logs (rtpo.progress): no carriage returns, one line per step of `every` percent."""

import io
from rtpo.progress import LogProgress, progress

def test_lines():
    f = io.StringIO()
    out = list(LogProgress(range(100), desc="x", file=f, every=25))
    assert out == list(range(100))
    lines = f.getvalue().splitlines()
    assert [l.split(" ")[1] for l in lines] == ["25%", "50%", "75%", "100%"], lines
    f = io.StringIO()
    with progress(total=10, desc="y", file=f, every=50) as b:
        for _ in range(10):
            b.update(1); b.set_postfix(loss="0.5")
        b.set_postfix_str("stage=done"); b.set_description("y2")
    assert f.getvalue().count("\n") == 2 and "\r" not in f.getvalue() and "loss=0.5" in f.getvalue()
    f = io.StringIO()
    b = LogProgress(range(3), total=10, initial=2, desc="z", file=f, every=50); list(b)
    assert "50% (5/10)" in f.getvalue() and f.getvalue().splitlines()[-1].startswith("z: 50%")


def test_rule_logs_get_no_library_bars(tmp_path):
    """Without a terminal, transformers' own tqdm bar ("Writing model shards", carriage returns) stays
    out of the log; with RTPO_PROGRESS=bar (as on a terminal) it is there: the check can fail."""
    import os
    import subprocess
    import sys

    code = (
        "from rtpo.progress import quiet_library_bars; quiet_library_bars()\n"
        "from rtpo.engine.local import build_tiny_qwen3\n"
        "from rtpo.tokenizer import train_tokenizer\n"
        "tok = train_tokenizer(['a b c 1 2 3'] * 5, vocab_size=300)\n"
        "build_tiny_qwen3(tok, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,\n"
        "                 intermediate_size=64, max_position=64).save_pretrained(%r)\n"
    )
    logs = {}
    for mode in ("lines", "bar"):
        env = dict(os.environ, RTPO_PROGRESS=mode)
        env.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
        r = subprocess.run([sys.executable, "-c", code % str(tmp_path / mode)], env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        logs[mode] = r.stderr
    assert "Writing model shards" in logs["bar"]
    assert "Writing model shards" not in logs["lines"] and "\r" not in logs["lines"]
