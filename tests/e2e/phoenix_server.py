"""Start a real Arize Phoenix server on 127.0.0.1, offline, and talk to its REST and GraphQL APIs.

Phoenix lives in its own virtual environment (scripts/install-phoenix.sh; it pins its own
dependencies), found through ``TALLYSPAN_PHOENIX_VENV``. Its telemetry and external resources (web
fonts, analytics) are turned off, its database is a fresh SQLite file in a temporary working
directory, and startup and shutdown are bounded by timeouts.

Used by tests/e2e/conftest.py and scripts/take_screenshots.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PHOENIX_VENV_ENV = "TALLYSPAN_PHOENIX_VENV"
DEFAULT_PHOENIX_VENV = Path.home() / ".cache" / "tallyspan" / "phoenix-venv"
#: Phoenix migrates a new SQLite database and imports a large app: tens of seconds on a busy machine.
STARTUP_TIMEOUT_S = 240.0
SHUTDOWN_TIMEOUT_S = 20.0
#: The resource attribute Phoenix (OpenInference) reads the project name from.
PROJECT_RESOURCE_ATTRIBUTE = "openinference.project.name"


def phoenix_executable() -> Path | None:
    """The ``phoenix`` command of the Phoenix venv, or None when it is not installed."""
    venv = Path(os.environ.get(PHOENIX_VENV_ENV) or DEFAULT_PHOENIX_VENV)
    executable = venv / "bin" / "phoenix"
    return executable if executable.is_file() else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Phoenix:
    """A running Phoenix: its base URL, OTLP/HTTP traces endpoint and a small API client."""

    base_url: str
    log_path: Path

    @property
    def traces_endpoint(self) -> str:
        """Where an OTLPSpanExporter sends spans (OTLP/HTTP protobuf)."""
        return f"{self.base_url}/v1/traces"

    def get(self, path: str, **query: Any) -> Any:
        """GET a REST path (``/v1/...``) and decode its JSON; list values repeat the parameter."""
        url = f"{self.base_url}{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query, doseq=True)
        with urllib.request.urlopen(url, timeout=30) as response:
            return json.load(response)

    def graphql(self, query: str, **variables: Any) -> Any:
        """POST a GraphQL query; raise AssertionError with Phoenix's message on errors."""
        body = json.dumps({"query": query, "variables": variables}).encode()
        request = urllib.request.Request(
            f"{self.base_url}/graphql", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = json.load(response)
        if answer.get("errors"):
            raise AssertionError(f"Phoenix GraphQL error: {answer['errors']}")
        return answer["data"]

    def spans(self, project: str, **filters: Any) -> list[dict[str, Any]]:
        """Every span of a project through REST (``GET /v1/projects/{project}/spans``), newest first."""
        spans: list[dict[str, Any]] = []
        cursor = None
        while True:
            page = self.get(
                f"/v1/projects/{project}/spans",
                limit=1000,
                **filters,
                **({"cursor": cursor} if cursor else {}),
            )
            spans.extend(page["data"])
            cursor = page.get("next_cursor")
            if not cursor:
                return spans

    def wait_for_spans(self, project: str, count: int, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        """Poll until the project holds ``count`` spans (Phoenix ingests asynchronously)."""
        deadline = time.monotonic() + timeout_s
        while True:
            with contextlib.suppress(urllib.error.HTTPError):  # 404 until the project exists
                spans = self.spans(project)
                if len(spans) >= count:
                    return spans
            if time.monotonic() > deadline:
                raise AssertionError(f"Phoenix held fewer than {count} spans of {project} after {timeout_s}s")
            time.sleep(0.2)


@contextlib.contextmanager
def running_phoenix(executable: Path, working_dir: Path) -> Iterator[Phoenix]:
    """Run ``phoenix serve`` on free loopback ports until the block ends."""
    port, grpc_port = _free_port(), _free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PHOENIX_", "OTEL_"))}
    env.update(
        PHOENIX_HOST="127.0.0.1",
        PHOENIX_PORT=str(port),
        PHOENIX_GRPC_PORT=str(grpc_port),
        PHOENIX_WORKING_DIR=str(working_dir),
        # Offline: no usage telemetry, no fonts or scripts fetched by the UI, no assistant agent.
        PHOENIX_TELEMETRY_ENABLED="false",
        PHOENIX_ALLOW_EXTERNAL_RESOURCES="false",
        PHOENIX_DISABLE_AGENT_ASSISTANT="true",
        PHOENIX_AGENTS_DISABLE_BASH="true",
        PHOENIX_AGENTS_DISABLE_WEB_ACCESS="true",
    )
    working_dir.mkdir(parents=True, exist_ok=True)
    log_path = working_dir / "phoenix.log"
    log = log_path.open("wb")
    # Its own session, so a stop signal reaches uvicorn's workers too.
    process = subprocess.Popen(
        [str(executable), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    phoenix = Phoenix(base_url=f"http://127.0.0.1:{port}", log_path=log_path)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"Phoenix exited with {process.returncode}; see {log_path}")
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{phoenix.base_url}/healthz", timeout=2) as response,
            ):
                if response.status == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"Phoenix did not answer within {STARTUP_TIMEOUT_S}s; see {log_path}")
            time.sleep(0.25)
        yield phoenix
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=SHUTDOWN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=SHUTDOWN_TIMEOUT_S)
        log.close()


def filter_path(name: str) -> str:
    """A dotted attribute name as Phoenix's span filter reads it: ``attributes['a']['b']``.

    Phoenix stores attributes as nested objects, so ``tallyspan.violation_types`` is
    ``attributes['tallyspan']['violation_types']`` in the UI's filter box and in GraphQL.
    """
    return "attributes" + "".join(f"['{part}']" for part in name.split("."))
