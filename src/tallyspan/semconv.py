"""Every attribute, event, span and log name tallyspan emits, in one place.

Nothing else in the code base spells one of these names as a string literal: collector configs,
dashboards and tests are checked against this module, so a rename here is a rename everywhere.

The ``gen_ai.*`` names (and the ``error``, ``exception``, ``server``, ``openai``, ``mcp`` and ``jsonrpc``
ones) are those of the OpenTelemetry semantic-conventions package (the latest GenAI conventions),
spelled out here because importing its modules costs every app about 3 ms at start;
``tests/core/test_semconv.py`` holds each one to the package's constant of the same name. The
``tallyspan.*`` names are our own namespace (ARCHITECTURE.md, "Names we emit").

Usage::

    from tallyspan import semconv
    span.attributes[semconv.VIOLATION_TYPES]
"""

from __future__ import annotations

from typing import Final

# --- GenAI semantic conventions ------------------------------------------------------------------

GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
GEN_AI_REQUEST_TEMPERATURE: Final = "gen_ai.request.temperature"
GEN_AI_REQUEST_TOP_P: Final = "gen_ai.request.top_p"
GEN_AI_REQUEST_TOP_K: Final = "gen_ai.request.top_k"
GEN_AI_REQUEST_FREQUENCY_PENALTY: Final = "gen_ai.request.frequency_penalty"
GEN_AI_REQUEST_PRESENCE_PENALTY: Final = "gen_ai.request.presence_penalty"
GEN_AI_REQUEST_STOP_SEQUENCES: Final = "gen_ai.request.stop_sequences"
GEN_AI_REQUEST_SEED: Final = "gen_ai.request.seed"
GEN_AI_REQUEST_CHOICE_COUNT: Final = "gen_ai.request.choice.count"
GEN_AI_REQUEST_STREAM: Final = "gen_ai.request.stream"
GEN_AI_REQUEST_ENCODING_FORMATS: Final = "gen_ai.request.encoding_formats"
GEN_AI_OUTPUT_TYPE: Final = "gen_ai.output.type"
GEN_AI_RESPONSE_ID: Final = "gen_ai.response.id"
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: Final = "gen_ai.response.time_to_first_chunk"
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: Final = "gen_ai.usage.cache_creation.input_tokens"
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: Final = "gen_ai.usage.reasoning.output_tokens"
GEN_AI_EMBEDDINGS_DIMENSION_COUNT: Final = "gen_ai.embeddings.dimension.count"
GEN_AI_CONVERSATION_ID: Final = "gen_ai.conversation.id"
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
GEN_AI_TOOL_TYPE: Final = "gen_ai.tool.type"
GEN_AI_TOOL_DESCRIPTION: Final = "gen_ai.tool.description"
GEN_AI_AGENT_NAME: Final = "gen_ai.agent.name"
GEN_AI_AGENT_ID: Final = "gen_ai.agent.id"
GEN_AI_WORKFLOW_NAME: Final = "gen_ai.workflow.name"
# Content: exported only when the user opts in (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT).
GEN_AI_INPUT_MESSAGES: Final = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
GEN_AI_SYSTEM_INSTRUCTIONS: Final = "gen_ai.system_instructions"
GEN_AI_TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"
GEN_AI_EVALUATION_NAME: Final = "gen_ai.evaluation.name"
GEN_AI_EVALUATION_SCORE_LABEL: Final = "gen_ai.evaluation.score.label"
GEN_AI_EVALUATION_SCORE_VALUE: Final = "gen_ai.evaluation.score.value"
GEN_AI_EVALUATION_EXPLANATION: Final = "gen_ai.evaluation.explanation"

OPENAI_REQUEST_SERVICE_TIER: Final = "openai.request.service_tier"
OPENAI_RESPONSE_SERVICE_TIER: Final = "openai.response.service_tier"
OPENAI_RESPONSE_SYSTEM_FINGERPRINT: Final = "openai.response.system_fingerprint"
MCP_METHOD_NAME: Final = "mcp.method.name"
MCP_SESSION_ID: Final = "mcp.session.id"
MCP_PROTOCOL_VERSION: Final = "mcp.protocol.version"
JSONRPC_REQUEST_ID: Final = "jsonrpc.request.id"
#: The MCP method of a tool call (``mcp.method.name`` value).
MCP_METHOD_TOOLS_CALL: Final = "tools/call"
#: ``error.type`` of a tool call that returned an error result (MCP ``isError``), per the MCP conventions.
ERROR_TYPE_TOOL_ERROR: Final = "tool_error"
ERROR_TYPE: Final = "error.type"
EXCEPTION_TYPE: Final = "exception.type"
EXCEPTION_MESSAGE: Final = "exception.message"
#: The span event the SDK records for an exception (``span.record_exception``).
EVENT_EXCEPTION: Final = "exception"
SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"

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
