"""Search env: one `search` tool (BM25 over a local corpus), final answer in ``<answer>...</answer>``
(paper §4: knowledge reasoning with a web-search tool; K = 6, §E.3).

Reward: token F1 of the answer against the gold answers (SQuAD normalisation, max over aliases).
Metrics: {"em", "f1", "hit"}; "hit" is the paper's output-hit over all assistant turns (§F.3).

Corpus: `corpus=` given to the constructor, else from the task's meta: "corpus_path" (a
corpus.jsonl) or "corpus_seed" (the embedded KB, `rtpo.envs.search_kb.build_corpus(seed)`). The
BM25 index is shared between envs through `rtpo.retrieval.bm25.get_index`. Paper scale: a task's
meta "retriever" (a backend spec, `rtpo.tools.search_tool.make_retriever`) takes precedence; a search
that backend cannot answer is the fixed observation SEARCH_FAILED and a tool error (what failed goes
to stderr: the first failure of the process and every 100th).
"""

from __future__ import annotations

import itertools
import os
import re
import sys
from collections.abc import Sequence

from rtpo.envs.base import Task
from rtpo.envs.search_kb import build_corpus
from rtpo.envs.tool_env import ToolEnv
from rtpo.metrics import qa_scores
from rtpo.retrieval.bm25 import BM25Index, get_index, load_corpus
from rtpo.retrieval.core import RetrievalError
from rtpo.tools.parse import ToolCall, strip_think
from rtpo.tools.search_tool import SEARCH_FAILED, SEARCH_SPEC, format_hits, retriever_for

__all__ = ["SearchEnv", "extract_answer", "index_for_task"]

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_FAILED = itertools.count(1)  # failed searches of this process (next() is atomic under the GIL)


def extract_answer(text: str) -> str | None:
    """Content of the last ``<answer>...</answer>`` outside ``<think>`` blocks, stripped; else None."""
    found = _ANSWER.findall(strip_think(text))
    return found[-1].strip() if found else None


def index_for_task(task: Task) -> BM25Index:
    """The shared BM25 index of the corpus named in task.meta (see the module docstring)."""
    meta = task.meta or {}
    if "retriever" in meta:
        return retriever_for(meta["retriever"])
    if "corpus_path" in meta:
        path = os.path.abspath(meta["corpus_path"])
        if not os.path.exists(path):
            raise FileNotFoundError(f"task {task.id}: meta.corpus_path {path} does not exist")
        return get_index(("file", path, os.path.getmtime(path)), lambda: load_corpus(path))
    if "corpus_seed" in meta:
        seed = int(meta["corpus_seed"])
        return get_index(("embedded-search", seed), lambda: build_corpus(seed))
    raise ValueError(f"task {task.id}: meta needs 'corpus_path' or 'corpus_seed' to find its corpus "
                     f"(got keys {sorted(meta)})")


class SearchEnv(ToolEnv):
    """top_k: passages per search result. corpus: optional passage list used for every task."""

    kind = "search"
    default_max_turns = 6
    tools = {"search": SEARCH_SPEC}
    instructions = "Answer the question. Search as needed, then give <answer>...</answer>."

    def __init__(self, max_turns: int | None = None, max_obs_chars: int = 1500, top_k: int = 3,
                 corpus: Sequence[dict] | None = None):
        super().__init__(max_turns, max_obs_chars)
        self.top_k = int(top_k)
        self._fixed_index = BM25Index(corpus) if corpus is not None else None
        self._index: BM25Index | None = None

    def _start(self, task: Task) -> None:
        self._index = self._fixed_index or index_for_task(task)

    def _restored(self) -> None:
        self._start(self.task)

    def _execute(self, call: ToolCall) -> tuple[str, bool]:
        query = call.arguments["query"].strip()
        if not query:
            return "Error: empty query.", False
        try:
            return format_hits(self._index.search(query, self.top_k)), True
        except RetrievalError as e:
            n = next(_FAILED)
            if n == 1 or n % 100 == 0:
                print(f"rtpo search: {n} failed search{'es' * (n > 1)} in this process; the latest: {e}",
                      file=sys.stderr, flush=True)
            return SEARCH_FAILED, False

    def _finish(self, text: str, truncated: bool) -> tuple[float, str | None, dict[str, float]]:
        answer = None if truncated else extract_answer(text)
        m = qa_scores(answer, list(self.task.answers), self.full_output)
        return m["f1"], answer, m
