"""Downloads where the internet is: the rules that fetch (fetch_model, fetch_corpus, prepare_data) are
Snakemake local rules (the login node; compute nodes often have no internet), `snakemake download`
fetches them alone, the hub model is pinned to a revision, a broken corpus download resumes where it
stopped (HTTP Range), and on an offline node the error names what to fetch and the command."""

from __future__ import annotations

import hashlib
import os
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from rtpo.config import ROOT, load_config
from rtpo.retrieval.fetch import DownloadError, download
from tests.conftest import run_snakemake, workflow_copy

FAKE_SLURM = ROOT / "tests" / "fake_slurm"
PAYLOAD = bytes(range(256)) * 4096  # 1 MiB


@pytest.fixture
def flaky_server():
    """An HTTP server of PAYLOAD that honours Range requests and breaks its first whole-file answer
    half-way (Content-Length says 1 MiB, the connection closes after 300 KiB)."""
    seen: list[str | None] = []

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            rng = self.headers.get("Range")
            seen.append(rng)
            if rng:
                start = int(re.fullmatch(r"bytes=(\d+)-", rng).group(1))
                body = PAYLOAD[start:]
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(PAYLOAD) - 1}/{len(PAYLOAD)}")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(PAYLOAD)))
            self.end_headers()
            if len(seen) == 1:
                self.wfile.write(PAYLOAD[:300 * 1024])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(PAYLOAD)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/corpus.bin", seen
    srv.shutdown()


def test_a_broken_download_resumes_where_it_stopped(flaky_server, tmp_path, monkeypatch):
    url, seen = flaky_server
    want = hashlib.sha256(PAYLOAD).hexdigest()
    dest = tmp_path / "corpus.bin"
    logs: list[str] = []
    # one attempt only: the transfer breaks, the part stays, the error says a rerun resumes
    with pytest.raises(DownloadError, match=r"307200 bytes kept in .*a rerun resumes.*snakemake --profile slurm download"):
        download(url, dest, want, retries=0, log=logs.append)
    assert (tmp_path / ".corpus.bin.part").stat().st_size == 300 * 1024 and not dest.exists()
    # the rerun asks for the rest only, and the digest covers the whole file
    download(url, dest, want, retries=0, log=logs.append)
    assert dest.read_bytes() == PAYLOAD and seen == [None, "bytes=307200-"]
    assert any("resuming after 307200 bytes" in m for m in logs)
    assert not (tmp_path / ".corpus.bin.part").exists()
    # fetched: not again, even unpinned (its .source.json names the URL)
    download(url, dest, None, retries=0, log=logs.append)
    assert seen == [None, "bytes=307200-"]


def test_offline_node_names_what_to_fetch_and_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    url = "https://huggingface.co/datasets/PeterJinGo/wiki-18-corpus/resolve/main/wiki-18.jsonl.gz"
    with pytest.raises(DownloadError) as e:
        download(url, tmp_path / "corpus.jsonl", gunzip=True)
    msg = str(e.value)
    assert "HF_HUB_OFFLINE=1" in msg and "snakemake --profile slurm download" in msg
    assert f"python -m rtpo.retrieval.fetch {url} {tmp_path / 'corpus.jsonl'}" in msg
    from rtpo.sft import build_base_model, fetch_hub_model

    with pytest.raises(FileNotFoundError) as e:
        fetch_hub_model("Qwen/Qwen3-8B", tmp_path / "Qwen3-8B", "b968826d9c46dd6066d109eabc6255188de91218")
    msg = str(e.value)
    assert "model.path" in msg and "HF_HUB_OFFLINE=1" in msg and "snakemake --profile slurm download" in msg
    assert (f"python -m rtpo.sft fetch-model Qwen/Qwen3-8B {tmp_path / 'Qwen3-8B'} "
            "--revision b968826d9c46dd6066d109eabc6255188de91218") in msg
    cfg = load_config(ROOT / "config" / "paper.yaml")
    cfg["model"]["path"] = str(tmp_path / "Qwen3-8B")
    with pytest.raises(FileNotFoundError, match="python -m rtpo.sft fetch-model Qwen/Qwen3-8B"):
        build_base_model(cfg, tmp_path, tmp_path, tmp_path / "base")
    # the CLI: exit 2 and the message
    import subprocess

    r = subprocess.run([sys.executable, "-m", "rtpo.sft", "fetch-model", "Qwen/Qwen3-8B", str(tmp_path / "m")],
                       capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 2 and "snakemake --profile slurm download" in r.stderr


def test_paper_pins_the_hub_revision():
    m = load_config(ROOT / "config" / "paper.yaml")["model"]
    assert m["hub_id"] == "Qwen/Qwen3-8B" and re.fullmatch(r"[0-9a-f]{40}", m["revision"])


def test_downloading_rules_run_on_the_login_node(tmp_path):
    """`snakemake --profile slurm download` (paper, the fake Slurm on PATH, HF_HUB_OFFLINE=1 standing in
    for a node without internet): fetch_model and fetch_corpus run where Snakemake runs (local rules:
    no sbatch call at all) and fail naming the command to run where the internet is; the dry run of the
    whole DAG fetches the hub model at its pinned revision."""
    wf = workflow_copy(tmp_path / "wf")
    slurm = tmp_path / "slurm"
    slurm.mkdir()
    env = {"PATH": f"{FAKE_SLURM}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "FAKE_SLURM_DIR": str(slurm), "RTPO_SLURM_ACCOUNT": "acct", "RTPO_SLURM_PARTITION": "cpu",
           "RTPO_SLURM_GPU_PARTITION": "gpu", "HF_HUB_OFFLINE": "1"}
    r = run_snakemake(wf, "--profile", "slurm", "-n", env=env)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert re.search(r"python -m rtpo.sft fetch-model Qwen/Qwen3-8B results/models/Qwen3-8B "
                     r"--revision [0-9a-f]{40}", r.stdout)
    r = run_snakemake(wf, "download", "--profile", "slurm", "--retries", "0", env=env)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out[-3000:]
    calls = (slurm / "calls.jsonl").read_text() if (slurm / "calls.jsonl").exists() else ""
    assert '"sbatch"' not in calls  # nothing was submitted
    model_log = (wf / "results" / "logs" / "models" / "fetch_model.log").read_text()
    assert "HF_HUB_OFFLINE=1" in model_log and "snakemake --profile slurm download" in model_log
    corpus_log = (wf / "results" / "logs" / "retrieval" / "fetch_corpus.log").read_text()
    assert "HF_HUB_OFFLINE=1" in corpus_log and "python -m rtpo.retrieval.fetch https://huggingface.co/" in corpus_log
    for rule in ("fetch_model", "fetch_corpus"):
        assert re.search(rf"^localrule {rule}:", out, re.M), out[-3000:]  # run here, not submitted
