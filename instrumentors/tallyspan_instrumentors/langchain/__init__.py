"""Instrumentation for LangChain and LangGraph: one callback handler that every callback manager receives.

Usage (``tallyspan.instrument()`` does this for you)::

    from tallyspan_instrumentors.langchain import LangChainInstrumentor
    LangChainInstrumentor().instrument(tracer_provider=provider, capture_content=False)

**Spans.** Chat model calls are ``chat {model}`` (CLIENT; ``text_completion {model}`` for plain LLMs),
with ``gen_ai.provider.name`` from the model's ``ls_provider`` metadata (else its class), usage from the
message's ``usage_metadata`` (else ``llm_output``), requested tool calls from ``AIMessage.tool_calls``.
Tools are ``execute_tool {tool}`` with ``gen_ai.tool.call.id`` (the ToolCall id LangChain passes) and
``tallyspan.tool.outcome``: failed when the tool raised (``ToolException`` or anything else) or returned
a ToolMessage with ``status="error"`` (an error LangChain or ToolNode handled), else succeeded.

**Which chains are runs.** A chain whose metadata carries an ``lc_agent_name`` that differs from its
parent run's (``langchain.agents.create_agent`` sets it; so can any ``config={"metadata": ...}``) opens
``invoke_agent {lc_agent_name}``, so sub-agents nest under their caller. Otherwise the root run of a
LangGraph graph (metadata ``ls_integration="langgraph"`` and no parent run) opens
``invoke_workflow {graph name}`` (``create_react_agent(name=...)`` names it). Every other chain (graph
nodes, sequences, prompts) opens no span; its children hang under the nearest run that did.

**Parents.** From LangChain's ``run_id`` / ``parent_run_id`` (see ``_handler``), never from a context
attached in a callback. A root run's parent is whatever span is current when it starts.

**One span per model call.** When a LangChain chat model wraps a client that a tallyspan provider
instrumentor also wraps (``ChatOpenAI`` over ``openai``, ``ChatAnthropic``, ``ChatOllama``), LangChain's
``chat`` span is kept and the provider span is skipped: around the provider call the wrappers in
``_wrappers`` attach a context carrying ``_calls.framework_model_call_context`` (and, on the invoke
path, the chat span as the current span), which the provider wrappers (``_calls.model_call_wrapper``)
honour. LangChain's span is the one that knows the graph around the call; it carries the provider, model,
response id, finish reason, usage and tool calls, and hands output and tool calls to the checks. When the
handler has no span for the run (suppressed, or our start failed), the key is not set and the provider
span appears.
"""

from typing import TYPE_CHECKING, Any

from tallyspan_instrumentors.langchain._instrumentor import LangChainInstrumentor

if TYPE_CHECKING:
    from tallyspan_instrumentors.langchain._handler import TallyspanCallbackHandler

__all__ = ["LangChainInstrumentor", "TallyspanCallbackHandler"]


def __getattr__(name: str) -> Any:
    # The handler subclasses langchain_core's; import it only when asked for, so that loading the
    # instrumentor (as instrument() does for every entry point) works without LangChain installed.
    if name == "TallyspanCallbackHandler":
        from tallyspan_instrumentors.langchain._handler import TallyspanCallbackHandler

        return TallyspanCallbackHandler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
