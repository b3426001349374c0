"""Tools the agent calls: the call parser (parse.py), the search tool (search_tool.py; its backends live
in rtpo.retrieval), the airline DB tools (airline_db.py) and, in `rtpo.tools.python_sandbox`, the
Python sandbox used by the math env.

The sandbox is not imported here so that `import rtpo.tools` stays cheap."""

from rtpo.tools.airline_db import AIRLINE_SPECS, AirlineDB
from rtpo.tools.parse import ToolCall, ToolError, ToolSpec, format_tool_call, parse_tool_call, strip_think
from rtpo.tools.search_tool import SEARCH_SPEC, format_hits, make_retriever, retriever_for

__all__ = [
    "ToolCall", "ToolError", "ToolSpec", "parse_tool_call", "format_tool_call", "strip_think",
    "SEARCH_SPEC", "format_hits", "make_retriever", "retriever_for",
    "AIRLINE_SPECS", "AirlineDB",
]
