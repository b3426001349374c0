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
