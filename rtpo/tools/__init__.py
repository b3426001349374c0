"""Tools the agent calls: the call parser, BM25 search, airline DB tools (and, in
`rtpo.tools.python_sandbox`, the Python sandbox used by the math env).

The sandbox is not imported here so that `import rtpo.tools` stays cheap."""

from rtpo.tools.airline_db import AIRLINE_SPECS, AirlineDB
from rtpo.tools.parse import ToolCall, ToolError, ToolSpec, format_tool_call, parse_tool_call, strip_think
from rtpo.tools.search_tool import SEARCH_SPEC, BM25Index, format_hits, get_index, load_corpus

__all__ = [
    "ToolCall", "ToolError", "ToolSpec", "parse_tool_call", "format_tool_call", "strip_think",
    "SEARCH_SPEC", "BM25Index", "format_hits", "get_index", "load_corpus",
    "AIRLINE_SPECS", "AirlineDB",
]
