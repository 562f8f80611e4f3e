"""Every attribute, event, span and log name tallyspan emits, in one place.

Nothing else in the code base spells one of these names as a string literal: collector configs,
dashboards and tests are checked against this module, so a rename here is a rename everywhere.

The ``gen_ai.*`` names are taken from the OpenTelemetry semantic-conventions package (the latest
GenAI conventions); the ``tallyspan.*`` names are our own namespace (ARCHITECTURE.md, "Names we emit").

Usage::

    from tallyspan import semconv
    span.attributes[semconv.VIOLATION_TYPES]
"""

from __future__ import annotations

from typing import Final

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as _gen_ai
from opentelemetry.semconv._incubating.attributes import jsonrpc_attributes as _jsonrpc
from opentelemetry.semconv._incubating.attributes import mcp_attributes as _mcp
from opentelemetry.semconv._incubating.attributes import openai_attributes as _openai
from opentelemetry.semconv.attributes import error_attributes as _error
from opentelemetry.semconv.attributes import exception_attributes as _exception
from opentelemetry.semconv.attributes import server_attributes as _server

# --- GenAI semantic conventions ------------------------------------------------------------------

GEN_AI_OPERATION_NAME: Final = _gen_ai.GEN_AI_OPERATION_NAME
GEN_AI_PROVIDER_NAME: Final = _gen_ai.GEN_AI_PROVIDER_NAME
GEN_AI_REQUEST_MODEL: Final = _gen_ai.GEN_AI_REQUEST_MODEL
GEN_AI_REQUEST_MAX_TOKENS: Final = _gen_ai.GEN_AI_REQUEST_MAX_TOKENS
GEN_AI_REQUEST_TEMPERATURE: Final = _gen_ai.GEN_AI_REQUEST_TEMPERATURE
GEN_AI_REQUEST_TOP_P: Final = _gen_ai.GEN_AI_REQUEST_TOP_P
GEN_AI_REQUEST_TOP_K: Final = _gen_ai.GEN_AI_REQUEST_TOP_K
GEN_AI_REQUEST_FREQUENCY_PENALTY: Final = _gen_ai.GEN_AI_REQUEST_FREQUENCY_PENALTY
GEN_AI_REQUEST_PRESENCE_PENALTY: Final = _gen_ai.GEN_AI_REQUEST_PRESENCE_PENALTY
GEN_AI_REQUEST_STOP_SEQUENCES: Final = _gen_ai.GEN_AI_REQUEST_STOP_SEQUENCES
GEN_AI_REQUEST_SEED: Final = _gen_ai.GEN_AI_REQUEST_SEED
GEN_AI_REQUEST_CHOICE_COUNT: Final = _gen_ai.GEN_AI_REQUEST_CHOICE_COUNT
GEN_AI_REQUEST_STREAM: Final = _gen_ai.GEN_AI_REQUEST_STREAM
GEN_AI_REQUEST_ENCODING_FORMATS: Final = _gen_ai.GEN_AI_REQUEST_ENCODING_FORMATS
GEN_AI_OUTPUT_TYPE: Final = _gen_ai.GEN_AI_OUTPUT_TYPE
GEN_AI_RESPONSE_ID: Final = _gen_ai.GEN_AI_RESPONSE_ID
GEN_AI_RESPONSE_MODEL: Final = _gen_ai.GEN_AI_RESPONSE_MODEL
GEN_AI_RESPONSE_FINISH_REASONS: Final = _gen_ai.GEN_AI_RESPONSE_FINISH_REASONS
GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: Final = _gen_ai.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK
GEN_AI_USAGE_INPUT_TOKENS: Final = _gen_ai.GEN_AI_USAGE_INPUT_TOKENS
GEN_AI_USAGE_OUTPUT_TOKENS: Final = _gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: Final = _gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: Final = _gen_ai.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: Final = _gen_ai.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS
GEN_AI_EMBEDDINGS_DIMENSION_COUNT: Final = _gen_ai.GEN_AI_EMBEDDINGS_DIMENSION_COUNT
GEN_AI_CONVERSATION_ID: Final = _gen_ai.GEN_AI_CONVERSATION_ID
GEN_AI_TOOL_NAME: Final = _gen_ai.GEN_AI_TOOL_NAME
GEN_AI_TOOL_CALL_ID: Final = _gen_ai.GEN_AI_TOOL_CALL_ID
GEN_AI_TOOL_TYPE: Final = _gen_ai.GEN_AI_TOOL_TYPE
GEN_AI_TOOL_DESCRIPTION: Final = _gen_ai.GEN_AI_TOOL_DESCRIPTION
GEN_AI_AGENT_NAME: Final = _gen_ai.GEN_AI_AGENT_NAME
GEN_AI_AGENT_ID: Final = _gen_ai.GEN_AI_AGENT_ID
GEN_AI_WORKFLOW_NAME: Final = _gen_ai.GEN_AI_WORKFLOW_NAME
# Content: exported only when the user opts in (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT).
GEN_AI_INPUT_MESSAGES: Final = _gen_ai.GEN_AI_INPUT_MESSAGES
GEN_AI_OUTPUT_MESSAGES: Final = _gen_ai.GEN_AI_OUTPUT_MESSAGES
GEN_AI_SYSTEM_INSTRUCTIONS: Final = _gen_ai.GEN_AI_SYSTEM_INSTRUCTIONS
GEN_AI_TOOL_CALL_ARGUMENTS: Final = _gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS
GEN_AI_TOOL_CALL_RESULT: Final = _gen_ai.GEN_AI_TOOL_CALL_RESULT
GEN_AI_EVALUATION_NAME: Final = _gen_ai.GEN_AI_EVALUATION_NAME
GEN_AI_EVALUATION_SCORE_LABEL: Final = _gen_ai.GEN_AI_EVALUATION_SCORE_LABEL
GEN_AI_EVALUATION_SCORE_VALUE: Final = _gen_ai.GEN_AI_EVALUATION_SCORE_VALUE
GEN_AI_EVALUATION_EXPLANATION: Final = _gen_ai.GEN_AI_EVALUATION_EXPLANATION

OPENAI_REQUEST_SERVICE_TIER: Final = _openai.OPENAI_REQUEST_SERVICE_TIER
OPENAI_RESPONSE_SERVICE_TIER: Final = _openai.OPENAI_RESPONSE_SERVICE_TIER
OPENAI_RESPONSE_SYSTEM_FINGERPRINT: Final = _openai.OPENAI_RESPONSE_SYSTEM_FINGERPRINT
MCP_METHOD_NAME: Final = _mcp.MCP_METHOD_NAME
MCP_SESSION_ID: Final = _mcp.MCP_SESSION_ID
MCP_PROTOCOL_VERSION: Final = _mcp.MCP_PROTOCOL_VERSION
JSONRPC_REQUEST_ID: Final = _jsonrpc.JSONRPC_REQUEST_ID
#: The MCP method of a tool call (``mcp.method.name`` value).
MCP_METHOD_TOOLS_CALL: Final = "tools/call"
#: ``error.type`` of a tool call that returned an error result (MCP ``isError``), per the MCP conventions.
ERROR_TYPE_TOOL_ERROR: Final = "tool_error"
ERROR_TYPE: Final = _error.ERROR_TYPE
EXCEPTION_TYPE: Final = _exception.EXCEPTION_TYPE
EXCEPTION_MESSAGE: Final = _exception.EXCEPTION_MESSAGE
#: The span event the SDK records for an exception (``span.record_exception``).
EVENT_EXCEPTION: Final = "exception"
SERVER_ADDRESS: Final = _server.SERVER_ADDRESS
SERVER_PORT: Final = _server.SERVER_PORT

# gen_ai.operation.name values
OPERATION_CHAT: Final = "chat"
OPERATION_TEXT_COMPLETION: Final = "text_completion"
OPERATION_GENERATE_CONTENT: Final = "generate_content"
OPERATION_EMBEDDINGS: Final = "embeddings"
OPERATION_EXECUTE_TOOL: Final = "execute_tool"
OPERATION_INVOKE_AGENT: Final = "invoke_agent"
OPERATION_INVOKE_WORKFLOW: Final = "invoke_workflow"
OPERATION_CREATE_AGENT: Final = "create_agent"
#: Operations whose spans carry model output, so the checks apply to them.
MODEL_OPERATIONS: Final = frozenset({OPERATION_CHAT, OPERATION_TEXT_COMPLETION, OPERATION_GENERATE_CONTENT})
#: Operations whose spans delimit an agent run, so the ledger reconciles at their end.
RUN_OPERATIONS: Final = frozenset({OPERATION_INVOKE_AGENT, OPERATION_INVOKE_WORKFLOW})

# gen_ai.provider.name values
PROVIDER_OPENAI: Final = "openai"
PROVIDER_ANTHROPIC: Final = "anthropic"
PROVIDER_OLLAMA: Final = "ollama"


#: Span names are "{operation} {target}"; these build them.
def span_name(operation: str, target: str | None) -> str:
    """Return the span name the GenAI conventions give an operation on a model, tool or agent."""
    return f"{operation} {target}" if target else operation


# --- Other instrumentations' content attributes, read by the checks ---------------------------------

#: OpenLLMetry (traceloop) flattens completions as gen_ai.completion.{i}.content.
OPENLLMETRY_COMPLETION_PREFIX: Final = "gen_ai.completion."
#: ... and prompts as gen_ai.prompt.{i}.content (stripped by collector-config/otelcol-strip-content.yaml).
OPENLLMETRY_PROMPT_PREFIX: Final = "gen_ai.prompt."
#: OpenInference flattens output messages as llm.output_messages.{i}.message.content.
OPENINFERENCE_OUTPUT_MESSAGES_PREFIX: Final = "llm.output_messages."
OPENINFERENCE_OUTPUT_VALUE: Final = "output.value"
"""OpenInference's output of a span. Empty on our model spans while content capture is off: Arize
Phoenix fills a missing one in from ``gen_ai.response.id`` / ``.model``, and its Output panel shows that
JSON as if it were the model's answer."""
#: ... and input messages as llm.input_messages.{i}.message.role / .content.
OPENINFERENCE_INPUT_MESSAGES_PREFIX: Final = "llm.input_messages."
OPENINFERENCE_SPAN_KIND: Final = "openinference.span.kind"

# --- tallyspan.* ---------------------------------------------------------------------------------

STAGE: Final = "tallyspan.stage"
"""The stage (kind of work) whose contract applies to a model span."""
RUN_NAME: Final = "tallyspan.run.name"
"""The name given to ``tallyspan.run(name)`` on the span that delimits an agent run."""
ENQUEUED_AT: Final = "tallyspan.enqueued_at"
"""Epoch seconds at which the stage's work was queued (``tallyspan.stage(..., enqueued_at=)``)."""

VIOLATION_TYPES: Final = "tallyspan.violation_types"
"""string[]: sorted, unique violation types; absent when the span is clean."""
VIOLATION_COUNT: Final = "tallyspan.violation_count"
"""int: the number of violations."""
FAILURE_CLASS: Final = "tallyspan.failure_class"
"""string: the most severe failure class among the violations."""
VIOLATED: Final = "tallyspan.violated"
"""bool: true when the span has violations (Jaeger cannot search inside arrays)."""
STREAM_ABANDONED: Final = "tallyspan.stream.abandoned"
"""bool, on model spans: the app stopped reading the stream before the model finished (no finish reason);
the text checks do not judge the partial answer."""
RUN_VIOLATION_COUNT: Final = "tallyspan.run.violation_count"
"""int, on run spans (``invoke_agent``, else the local root): violations on the spans below it."""
RUN_VIOLATION_TYPES: Final = "tallyspan.run.violation_types"
"""string[], on run spans: sorted, unique types of the violations below it."""
RUN_CONTAINER: Final = "tallyspan.run.container"
"""bool, true on a workflow span or local root that only encloses agent runs (the Agents SDK's trace
around its agent, a server span around ``tallyspan.run``): not a run of its own, so it has no books and
no ledger record; it still carries the roll-up of the violations below it."""
CONTRACT: Final = "tallyspan.contract"
"""string: the name of the contract the span was checked against."""
CHECK_ERRORS: Final = "tallyspan.check_errors"
"""string[]: sorted, unique names of the check rules that failed to run on the span's output (their
verdict is missing; the other rules still ran): length, required, json_schema, forbidden, refusal,
reasoning, claims, relevance, repetition, language, strip_reasoning; ``pattern_budget`` when the
contract's patterns ran out of time together; ``checks`` when the engine as a whole failed. Absent when
every rule ran."""

TOOL_OUTCOME: Final = "tallyspan.tool.outcome"
"""string: succeeded, failed or rejected, on execute_tool spans."""
TOOL_RISK: Final = "tallyspan.tool.risk"
"""string: the risk the user declared with ``@tallyspan.tool(risk=...)``."""

LEDGER_BALANCED: Final = "tallyspan.ledger.balanced"
"""bool, on run spans: every observed call has exactly one matching claim."""
LEDGER_PROTOCOL_OK: Final = "tallyspan.ledger.protocol_ok"
"""bool, on run spans: the logging protocol was followed."""
LEDGER_DISCREPANCY_TYPES: Final = "tallyspan.ledger.discrepancy_types"
"""string[], on run spans: sorted, unique ledger discrepancy types."""
LEDGER_OBSERVED_COUNT: Final = "tallyspan.ledger.observed_count"
LEDGER_CLAIMED_COUNT: Final = "tallyspan.ledger.claimed_count"

# Event names and their attributes
EVENT_VIOLATION: Final = "tallyspan.violation"
EVENT_LEDGER_ENTRY: Final = "tallyspan.ledger.entry"
EVENT_LEDGER_DISCREPANCY: Final = "tallyspan.ledger.discrepancy"
EVENT_LEDGER_RECONCILIATION: Final = "tallyspan.ledger.reconciliation"
EVENT_LEDGER_CLAIM: Final = "tallyspan.ledger.claim"
"""Added by ``tallyspan.ledger.claim()`` on the current span: one claim of the agent's column."""
EVENT_GEN_AI_EVALUATION_RESULT: Final = "gen_ai.evaluation.result"
EVENT_AGENT_HANDOFF: Final = "tallyspan.agent.handoff"
"""On an ``invoke_agent`` span: the agent handed the conversation to another agent (no GenAI span exists)."""
HANDOFF_FROM_AGENT: Final = "tallyspan.handoff.from_agent"
HANDOFF_TO_AGENT: Final = "tallyspan.handoff.to_agent"

VIOLATION_TYPE: Final = "tallyspan.violation.type"
VIOLATION_FAILURE_CLASS: Final = "tallyspan.violation.failure_class"
VIOLATION_DETAIL: Final = "tallyspan.violation.detail"

LEDGER_SIDE: Final = "tallyspan.ledger.side"
"""string: "observed" (what the instrumentation saw) or "claimed" (what the agent logged)."""
LEDGER_CALL_ID: Final = "tallyspan.ledger.call_id"
LEDGER_TOOL_NAME: Final = "tallyspan.ledger.tool_name"
LEDGER_OUTCOME: Final = "tallyspan.ledger.outcome"
LEDGER_SEQ: Final = "tallyspan.ledger.seq"
LEDGER_SUMMARY: Final = "tallyspan.ledger.summary"
LEDGER_DISCREPANCY_TYPE: Final = "tallyspan.ledger.discrepancy_type"
LEDGER_DETAIL: Final = "tallyspan.ledger.detail"
LEDGER_RUN_SPAN_ID: Final = "tallyspan.ledger.run_span_id"
LEDGER_MALFORMED: Final = "tallyspan.ledger.malformed"
"""string, on claimed entries: why the log call's arguments did not parse."""
LEDGER_DISCREPANCY_COUNT: Final = "tallyspan.ledger.discrepancy_count"
LEDGER_DROPPED_ENTRIES: Final = "tallyspan.ledger.dropped_entries"
"""int, on run spans: entries the bounded ledger buffer dropped (the balance is then unreliable)."""
LEDGER_RECORD_ID: Final = "tallyspan.ledger.record_id"
"""string, on ledger log records: the record's stable id (``<trace id>/<run span id>/entry/<seq>`` or
``.../reconciliation``), the same on every delivery, so a receiver can tell a repeat from a new record."""
LEDGER_UNOBSERVED: Final = "unobserved"
"""Stands, with content capture off, for a tool name or call id the agent claimed that matches nothing
observed in its run: the agent's own words never leave the process unless they name an observed call."""

LEDGER_SIDE_OBSERVED: Final = "observed"
LEDGER_SIDE_CLAIMED: Final = "claimed"

# Outcome values
OUTCOME_SUCCEEDED: Final = "succeeded"
OUTCOME_FAILED: Final = "failed"
OUTCOME_REJECTED: Final = "rejected"

# --- Metric names (collector-config/: the count connector derives them from our spans) -----------

METRIC_VIOLATIONS: Final = "tallyspan.violations"
"""Counter of ``tallyspan.violation`` span events by type, failure class and stage.

Prometheus shows it as ``tallyspan_violations_total``."""
METRIC_LEDGER_RUNS: Final = "tallyspan.ledger.runs"
"""Counter of agent-run spans whose ledger was reconciled (``tallyspan_ledger_runs_total``)."""
METRIC_LEDGER_UNBALANCED_RUNS: Final = "tallyspan.ledger.unbalanced_runs"
"""Counter of agent-run spans whose books did not balance (``tallyspan_ledger_unbalanced_runs_total``)."""

METRIC_DROPPED: Final = "tallyspan.dropped"
"""Observable counter of what tallyspan dropped, by ``tallyspan.cause`` (``tallyspan_dropped_total``)."""
METRIC_ATTRIBUTE_CAUSE: Final = "tallyspan.cause"
"""The ``dropped.*`` key of ``tallyspan.stats()`` a ``tallyspan.dropped`` data point counts."""

#: The instrumentation scope name of our tracers.
INSTRUMENTATION_SCOPE: Final = "tallyspan"

#: The entry point group through which ``instrument()`` finds the links of its processor chain
#: (worker, checks, ledger, store, ledger sinks); a plugin may register its own.
ENTRY_POINT_GROUP_COMPONENTS: Final = "tallyspan.components"
