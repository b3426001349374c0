"""The search tool's backends: the in-process BM25 index and, at paper scale, a saved BM25 index,
the Search-R1 `/retrieve` server, its HTTP client, a web-search backend, a persistent result cache
and pinned HTTPS downloads.

The CPU default needs only `bm25`: its search env keeps the in-process `rtpo.retrieval.bm25.
BM25Index` over the embedded knowledge base. A config selects these parts with a `retriever`
section (`rtpo.tools.search_tool.make_retriever`).

Modules
  bm25     BM25Index: the in-process index over a passage list (the CPU default), the corpus reader
  core     passages, the ranking rule every backend shares, RetrievalError, the result cache
  index    DiskBM25Index: bm25s index built from a corpus.jsonl, saved, loaded memory-mapped
  server   the `/retrieve` HTTP server (Search-R1's protocol) over an index or a web backend
  client   HttpRetriever: timeouts, retries, a per-node server started on demand (`url: auto`)
  web      SerpAPI (Google) behind the same passage interface; key from an environment variable
  fetch    HTTPS downloads checked against a recorded sha256
  dense    optional e5 + faiss index (faiss and the encoder are not part of the CPU install)

Protocol (Search-R1, search_r1/search/retrieval_server.py):
  POST /retrieve {"queries": [str], "topk": int, "return_scores": bool}
    -> {"result": [[{"document": {"id": str, "contents": "\\"Title\\"\\ntext"}, "score": float}, ...], ...]}
"""
