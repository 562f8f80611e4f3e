"""Embeddings: request and response attributes (no content: inputs are not messages)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.util.types import AttributeValue

from tallyspan import semconv
from tallyspan_instrumentors._calls import Extraction, GenAICall
from tallyspan_instrumentors._parts import given
from tallyspan_instrumentors.openai._extract_shared import Request, number, request_start, set_if

__all__ = ["embeddings_request", "extract_embeddings"]


def embeddings_request(resource: Any, kwargs: Mapping[str, Any], *, capture_content: bool) -> Request:
    """Read the request attributes of an ``embeddings.create`` call."""
    model, attributes = request_start(resource, kwargs, semconv.OPERATION_EMBEDDINGS)
    encoding_format = kwargs.get("encoding_format")
    if given(encoding_format) and isinstance(encoding_format, str):
        attributes[semconv.GEN_AI_REQUEST_ENCODING_FORMATS] = [encoding_format]
    dimensions = kwargs.get("dimensions")
    if given(dimensions):
        set_if(attributes, semconv.GEN_AI_EMBEDDINGS_DIMENSION_COUNT, dimensions)
    return Request(model, attributes, None, {})


def extract_embeddings(response: Any, call: GenAICall) -> Extraction:
    """Read a ``CreateEmbeddingResponse`` into span attributes."""
    attributes: dict[str, AttributeValue] = {}
    set_if(attributes, semconv.GEN_AI_RESPONSE_MODEL, getattr(response, "model", None))
    data = getattr(response, "data", None) or ()
    if data:
        vector = getattr(data[0], "embedding", None)
        if isinstance(vector, list):
            attributes[semconv.GEN_AI_EMBEDDINGS_DIMENSION_COUNT] = len(vector)
    input_tokens = number(getattr(getattr(response, "usage", None), "prompt_tokens", None))
    if isinstance(input_tokens, int):
        attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS] = input_tokens
    return Extraction(attributes)
