"""Definitions for the paper-scale data and retrieval rules (data.smk, retrieval.smk): functions
and constants only, the rules live in those files (Snakemake's lint keeps them apart).
"""

_SEARCH = (config["data"].get("search") or {}) if "search" in config["data"] else {}
SEARCH_CORPUS = _SEARCH.get("corpus") if isinstance(_SEARCH.get("corpus"), dict) else None
SEARCH_RETRIEVER = _SEARCH.get("retriever") or {}
SEARCH_INDEX = (SEARCH_RETRIEVER.get("index")
                if SEARCH_RETRIEVER.get("kind") in ("http", "bm25_index", "dense_index") else None)
# optional e5 + faiss index instead of BM25 (rtpo/retrieval/dense.py; faiss is not in the CPU install)
SEARCH_DENSE = SEARCH_RETRIEVER.get("kind") == "dense_index" or bool(SEARCH_RETRIEVER.get("dense"))
BUILD_INDEX_CMD = (f"python -m rtpo.retrieval.dense build --model {SEARCH_RETRIEVER.get('model', 'intfloat/e5-base-v2')}"
                   if SEARCH_DENSE else "python -m rtpo.retrieval.index build")
if SEARCH_INDEX and not SEARCH_CORPUS:
    raise WorkflowError(f"invalid config: 'data.search.retriever.index' needs 'data.search.corpus' "
                        f"(the corpus it is built from) (config files: {_config_sources()})")


def retrieval_inputs(task):
    """What prepare_data of `task` needs built first: {"index": dir} or {"corpus": file} or {}."""
    if task != "search" or not SEARCH_CORPUS:
        return {}
    if SEARCH_INDEX:
        return {"index": SEARCH_INDEX}
    if SEARCH_RETRIEVER.get("kind", "bm25") == "bm25":
        return {"corpus": SEARCH_CORPUS["path"]}
    return {}


def prepare_settings(task):
    """data_settings plus, at paper scale only (so CPU outputs keep their params), what else the
    job reads: data.sources, every task's benchmarks (decontamination) and whether the web-search
    key is set (its benchmarks are "not run" without it; setting it later reruns the search data)."""
    s = data_settings(task)
    d = config["data"]
    if "benchmarks" in (d.get(task) or {}):
        s["sources"] = d.get("sources")
        s["decontaminate_against"] = {t: d[t].get("benchmarks") for t in TASKS_WITH_BENCHMARKS}
        web = d[task].get("web")
        if web:
            s["web_key_set"] = bool(os.environ.get(web.get("key_env", "SERPAPI_API_KEY")))
    return s


TASKS_WITH_BENCHMARKS = sorted(t for t in ("math", "search", "airline")
                               if isinstance(config["data"].get(t), dict) and "benchmarks" in config["data"][t])
