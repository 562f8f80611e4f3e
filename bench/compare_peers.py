"""tallyspan against the uninstrumented OpenAI client and every installed peer instrumentation, side by side.

One command, installs nothing. Each case runs in its own interpreter (so no two instrumentations ever
patch the same client) and alternates rounds of plain and instrumented calls of the real ``openai``
client in that process, so drift hits both sides alike. The client talks to an in-process mock
transport (``httpx.MockTransport``) that answers with a 1,000-character Japanese report: no socket and
no server thread, so the library's CPU is the whole call.

Cases: tallyspan's OpenAI instrumentor alone; ``tallyspan.instrument()`` with a contract whose checks
all run (language, lengths, regexes, claims, repetition, relevance) and the store written; each peer that
is importable (official ``opentelemetry-instrumentation-openai-v2``, OpenLLMetry
``opentelemetry-instrumentation-openai``, OpenInference ``openinference-instrumentation-openai``,
OpenLIT), content capture on. A peer that is not importable is skipped and said so; ``--python`` runs
the peers with another interpreter (a venv that has them, see bench/README.md). Peers and the
instrumentor alone export through a ``BatchSpanProcessor`` into a null exporter; the chain writes its
SQLite store. Both are flushed at the end of each round, inside the "CPU incl. deferred" figure.

Printed per case, medians over rounds (spread = lowest-highest of the rounds' added deferred CPU):
CPU of the calling thread, CPU of the whole process including the deferred work after a flush, wall, the
added CPU and ratio against plain, for non-streaming calls (sync, and async through ``AsyncOpenAI``) and
streaming (51 chunks, per chunk); then the CPU of the other threads alone (tallyspan's worker and store
writer, a peer's batch processor): the deferred work itself. "CPU + deferred" is a mean over the round
and "thread CPU" a median of calls, so their difference also holds the calling thread's outliers (a
full garbage collection, the host taking the CPU away); the "other threads" column does not (work a flush
does on the calling thread, as the SDK's batch processor exports there, counts on that thread). Two more
columns say where part of the added CPU goes, on any thread: "kernel", the system time (futex calls when
threads hand the GIL to each other, the store's file writes), and "collector", the time the garbage
collector spent collecting (spans an instrumentation keeps until it exports them outlive the young
generation and take the app's own objects along into the older ones, whose collections scan the whole
heap; the plain call keeps nothing and rarely triggers one). Then the import time
(``import X`` + instrument, openai and the SDK already imported), RSS over many chain calls and spans
per second the chain's worker writes into the store (offered at a fixed rate; drops counted).

Usage::

    python bench/compare_peers.py                          # defaults
    python bench/compare_peers.py --calls 2000 --rounds 6
    python bench/compare_peers.py --calls 20 --rounds 1 --rss-calls 200 --store-spans 200   # smoke
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

ANSWER = (
    "判定：合格\n"
    + (
        "今週は問い合わせ対応の流れを見直しました。受付担当が内容を確認し、緊急度に応じて三段階に分類します。"
        "回答内容は共有フォルダに記録し、毎週金曜日に件数と平均対応時間を集計して部内で共有します。"
        "問い合わせの内訳は、料金に関するものが四割、操作方法が三割、障害の報告が二割、その他が一割でした。"
        "障害の報告のうち二件は、同じ設定画面の表示不具合によるものでした。開発チームに共有しました。"
        "来週は新しい担当者二名の研修を行います。研修では過去の問い合わせ事例を使い、分類の基準を確認します。"
        "お客様アンケートでは、回答までの待ち時間が長いという意見が最も多く寄せられました。"
        "そこで、受付から一次回答までの目標時間を二時間に定め、超えそうな案件には自動で通知が届くように設定しました。"
        "また、よくある質問のページを整理し、検索で見つけにくかった十二の項目に見出しを付け直しました。"
        "最後に、来月の予定です。月初に前月の集計を報告し、中旬に受付システムの更新作業を行います。"
        "以上、今週の報告でした。ご質問やご意見があれば、いつでも担当までお寄せください。来週も引き続き取り組みます。"
    )
    * 2
)[:1000]
PROMPT = "今週の問い合わせ対応について週次報告を書いてください。"
MESSAGES: Any = [{"role": "user", "content": PROMPT}]
STREAM_CHUNKS = 51
CONTRACT: dict[str, Any] = {
    "language": "ja",
    "min_chars": 200,
    "max_chars": 8000,
    "required": [r"^判定[:：]\s*(合格|不合格)", {"name": "weekly", "pattern": "毎週|週次"}],
    "forbidden": [r"<\|im_end\|>", {"name": "secret", "pattern": r"sk-[A-Za-z0-9]{20,}"}],
    "claims": {"allowed": ["導入企業300社"]},
    "deadline_s": 60,
}

# case -> (module that must be importable, label)
CASES: dict[str, tuple[str, str]] = {
    "tallyspan_instrumentor": ("tallyspan_instrumentors.openai", "tallyspan instrumentor alone"),
    "tallyspan_chain": ("tallyspan", "tallyspan instrument() + contract + store"),
    "openai_v2": ("opentelemetry.instrumentation.openai_v2", "official openai-v2"),
    "openllmetry": ("opentelemetry.instrumentation.openai", "OpenLLMetry"),
    "openinference": ("openinference.instrumentation.openai", "OpenInference"),
    "openlit": ("openlit", "OpenLIT"),
}
# Distribution names, for the versions printed with the table.
DISTRIBUTIONS = {
    "openai_v2": "opentelemetry-instrumentation-openai-v2",
    "openllmetry": "opentelemetry-instrumentation-openai",
    "openinference": "openinference-instrumentation-openai",
    "openlit": "openlit",
}


# --- the mock transport -------------------------------------------------------------------------------


def _completion_body() -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 1,
            "model": "bench-model",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": ANSWER}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 30, "completion_tokens": 700, "total_tokens": 730},
        },
        ensure_ascii=False,
    ).encode()


def _stream_body() -> bytes:
    size = -(-len(ANSWER) // (STREAM_CHUNKS - 1))
    pieces = [ANSWER[i : i + size] for i in range(0, len(ANSWER), size)]
    events: list[dict[str, Any]] = []
    for index, piece in enumerate(pieces):
        delta: dict[str, Any] = {"content": piece}
        if index == 0:
            delta["role"] = "assistant"
        events.append({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
    events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    lines = []
    for event in events:
        event |= {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "bench-model",
        }
        lines.append(f"data: {json.dumps(event, ensure_ascii=False)}\n\n")
    lines.append("data: [DONE]\n\n")
    return "".join(lines).encode()


def _client(asynchronous: bool = False) -> Any:
    """An ``OpenAI`` (or ``AsyncOpenAI``) client whose transport answers in process: the report, or its
    stream when the request asks for one."""
    import openai

    # openai 3 ships its own fork of httpx (httpx2); older releases (OpenLIT's pin) use httpx itself.
    httpx: Any = importlib.import_module("httpx2" if importlib.util.find_spec("httpx2") else "httpx")
    completion, stream = _completion_body(), _stream_body()

    def handle(request: Any) -> Any:
        # The mock transport has read the body before it calls this, for async requests too.
        if b'"stream":true' in request.content.replace(b" ", b""):
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=stream)
        return httpx.Response(200, headers={"content-type": "application/json"}, content=completion)

    client_class, http_class = (
        (openai.AsyncOpenAI, httpx.AsyncClient) if asynchronous else (openai.OpenAI, httpx.Client)
    )
    return client_class(
        api_key="bench-key",
        base_url="http://bench.invalid/v1",
        max_retries=0,
        http_client=http_class(transport=httpx.MockTransport(handle)),
    )


# --- one case, in its own process ---------------------------------------------------------------------


class _NullExporter:
    """Accepts every span and does nothing: the peers' export cost without any serialisation."""

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _batch_provider() -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(_NullExporter()))  # type: ignore[arg-type]
    return provider


_OPENLIT_PROVIDER: Any = None


class _Toggle:
    """Instrument and uninstrument one case; ``flush`` waits for its deferred work."""

    def __init__(self, case: str, store_dir: str) -> None:
        self.case = case
        self.store_dir = store_dir
        self.provider: Any = None
        self.instrumentor: Any = None

    def on(self) -> None:
        if self.case == "tallyspan_chain":
            from opentelemetry.sdk.trace import TracerProvider

            import tallyspan

            self.provider = TracerProvider()
            tallyspan.instrument(
                {"default": CONTRACT},
                tracer_provider=self.provider,
                store=os.path.join(self.store_dir, "bench.db"),
                instrumentors=["tallyspan_openai"],
                capture_content=True,
            )
            return
        if self.case == "openlit":
            # OpenLIT's instrumentor traces through the global provider: one for the whole process.
            from opentelemetry import trace

            global _OPENLIT_PROVIDER
            if _OPENLIT_PROVIDER is None:
                _OPENLIT_PROVIDER = _batch_provider()
                trace.set_tracer_provider(_OPENLIT_PROVIDER)
            self.provider = _OPENLIT_PROVIDER
            config: Any = importlib.import_module("openlit._config")
            config.OpenlitConfig.update_config(  # what openlit.init() sets, without its exporters
                "bench", "bench", None, None, False, True, None, True, {}, True
            )
            module: Any = importlib.import_module("openlit.instrumentation.openai")
            self.instrumentor = module.OpenAIInstrumentor()
            self.instrumentor.instrument(
                environment="bench",
                application_name="bench",
                pricing_info={},
                capture_message_content=True,
                disable_metrics=True,
                disable_events=True,
            )
            return
        self.provider = _batch_provider()
        module = importlib.import_module(CASES[self.case][0])
        name = "OpenAIInstrumentor"
        self.instrumentor = getattr(module, name)()
        self.instrumentor.instrument(tracer_provider=self.provider)

    def flush(self) -> None:
        if self.provider is not None:
            self.provider.force_flush()

    def off(self) -> None:
        self.flush()
        if self.case == "tallyspan_chain":
            import tallyspan

            tallyspan.uninstrument()
        elif self.instrumentor is not None:
            self.instrumentor.uninstrument()
        if self.provider is not None and self.provider is not _OPENLIT_PROVIDER:
            self.provider.shutdown()
        self.provider = self.instrumentor = None


class _CollectorClock:
    """Time the garbage collector spends collecting, on any thread, while it is registered."""

    def __init__(self) -> None:
        self.total_ns = 0
        self._started = 0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter_ns()
        else:
            self.total_ns += time.perf_counter_ns() - self._started

    def __enter__(self) -> _CollectorClock:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


def _block(call: Callable[[], object], count: int, flush: Callable[[], None]) -> dict[str, float]:
    """Medians per call of wall and calling-thread CPU; process CPU per call including the flush, the
    part of it that ran on other threads, the part the kernel ran (system time) and the time the garbage
    collector spent collecting."""
    walls, cpus = [], []
    usage_start = resource.getrusage(resource.RUSAGE_SELF)
    process_start, thread_start = time.process_time_ns(), time.thread_time_ns()
    with _CollectorClock() as collector:
        for _ in range(count):
            wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
            call()
            walls.append(time.perf_counter_ns() - wall)
            cpus.append(time.thread_time_ns() - cpu)
        flush()
    process, thread = time.process_time_ns() - process_start, time.thread_time_ns() - thread_start
    kernel_s = resource.getrusage(resource.RUSAGE_SELF).ru_stime - usage_start.ru_stime
    return {
        "wall": statistics.median(walls) / 1e6,
        "cpu": statistics.median(cpus) / 1e6,
        "deferred": process / count / 1e6,
        "other_threads": max(0, process - thread) / count / 1e6,
        "kernel": kernel_s / count * 1e3,
        "collector": collector.total_ns / count / 1e6,
    }


def capture_content_by_default() -> None:
    """Content capture on for the instrumentations that read it from the environment (unless set)."""
    os.environ.setdefault("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    os.environ.setdefault("TRACELOOP_TRACE_CONTENT", "true")


def run_case(case: str, calls: int, rounds: int) -> dict[str, Any]:
    """Alternating plain/instrumented rounds for non-streaming and streaming calls, in this process."""
    capture_content_by_default()
    from opentelemetry.sdk.trace import TracerProvider  # noqa: F401  (the SDK is imported on both sides)

    client = _client()
    async_client = _client(asynchronous=True)
    # One loop for every async call: its set-up is then no part of any call, on either side.
    loop = asyncio.new_event_loop()

    def chat() -> object:
        return client.chat.completions.create(model="bench-model", messages=MESSAGES)

    def chat_async() -> object:
        return loop.run_until_complete(
            async_client.chat.completions.create(model="bench-model", messages=MESSAGES)
        )

    def chat_stream() -> object:
        return list(client.chat.completions.create(model="bench-model", messages=MESSAGES, stream=True))

    result: dict[str, Any] = {}
    kinds = (
        ("chat", chat, calls),
        ("async", chat_async, max(1, calls // 2)),
        ("stream", chat_stream, max(1, calls // 5)),
    )
    with tempfile.TemporaryDirectory() as store_dir:
        toggle = _Toggle(case, store_dir)
        for kind, call, per_call in kinds:
            for _ in range(20):  # warm-up of the SDK's lazy imports, on both sides
                call()
            toggle.on()
            for _ in range(20):
                call()
            toggle.off()
            plain: list[dict[str, float]] = []
            traced: list[dict[str, float]] = []
            for index in range(rounds):
                gc.collect()
                sides = [("plain", plain), ("traced", traced)]
                if index % 2:
                    sides.reverse()
                for side, samples in sides:
                    if side == "traced":
                        toggle.on()
                        samples.append(_block(call, per_call, toggle.flush))
                        toggle.off()
                    else:
                        samples.append(_block(call, per_call, lambda: None))
            result[kind] = {"plain": plain, "traced": traced}
    loop.close()
    return result


# --- startup, memory, store throughput ----------------------------------------------------------------

_IMPORT_CODE = """
import json, os, sys, time
os.environ["TALLYSPAN_DB"] = {db!r}
import openai
import opentelemetry.sdk.trace, opentelemetry.sdk.trace.export
from opentelemetry.sdk.trace import TracerProvider
sys.path.insert(0, {bench!r})
import compare_peers
start = time.perf_counter()
compare_peers._Toggle({case!r}, {store!r}).on() if {case!r} != "tallyspan_import" else __import__("tallyspan")
print(json.dumps(time.perf_counter() - start))
"""


def startup_ms(case: str, python: str, repeats: int) -> float:
    """Median ms of ``import X`` + instrument in a fresh interpreter with openai and the SDK imported.

    Bytecode is written (to a cache of its own) and one untimed run fills it: an installed package has
    its ``.pyc`` files, and compiling sources on every start would measure the compiler.
    """
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        code = _IMPORT_CODE.format(
            db=os.path.join(tmp, "bench.db"),
            bench=os.path.dirname(os.path.abspath(__file__)),
            case=case,
            store=tmp,
        )
        env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "tallyspan-bench-pycache")
        for index in range(repeats + 1):
            out = subprocess.run(
                [python, "-c", code], capture_output=True, text=True, check=True, env=env
            ).stdout
            if index:
                results.append(float(json.loads(out.strip().splitlines()[-1])))
    return statistics.median(results) * 1000


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _pymalloc_arenas_mb() -> float:
    """Python's small-object arenas, in MB: one goes back to the OS only once every object in it is
    gone, so a few long-lived objects made during a backlog keep its arenas (no trim can)."""
    with tempfile.TemporaryFile() as stats:
        saved = os.dup(2)
        sys.stderr.flush()
        os.dup2(stats.fileno(), 2)  # _debugmallocstats writes to the C stderr
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        stats.seek(0)
        text = stats.read().decode(errors="replace")
    found = re.search(r"(\d+) arenas \* (\d+) bytes/arena", text)
    return int(found[1]) * int(found[2]) / 2**20 if found else 0.0


def run_rss(calls: int) -> dict[str, float]:
    """RSS of the whole chain over ``calls`` non-streaming calls: after warm-up, peak seen, at the end."""
    with tempfile.TemporaryDirectory() as store_dir:
        client = _client()
        toggle = _Toggle("tallyspan_chain", store_dir)
        toggle.on()
        for _ in range(200):
            client.chat.completions.create(model="bench-model", messages=MESSAGES)
        toggle.flush()
        gc.collect()
        import tallyspan

        before = tallyspan.stats()
        start = peak = _rss_mb()
        for index in range(calls):
            client.chat.completions.create(model="bench-model", messages=MESSAGES)
            if index % 1000 == 0:
                peak = max(peak, _rss_mb())
        toggle.flush()
        gc.collect()
        end = _rss_mb()
        after = tallyspan.stats()
        # What stays once the threads of ours have had the pause they give memory back in.
        from tallyspan_exporters._writer import DEFAULT_RELEASE_IDLE_MILLIS

        time.sleep(DEFAULT_RELEASE_IDLE_MILLIS / 1000 + 0.5)
        settled = _rss_mb()
        toggle.off()
    # A thread of ours that falls behind a busy app shows here: losses (the worker's queue, the store's),
    # and the turns the app gave the worker (and the worker gave the store's writer).
    losses = {
        key: after[key] - before.get(key, 0)
        for key in sorted(after)
        if key.startswith("dropped.") and after[key] != before.get(key, 0)
    }
    dropped = sum(losses.values())
    turns = sum(after[key] - before.get(key, 0) for key in after if key.startswith("backpressure."))
    return {
        "start": start,
        "peak": max(peak, end),
        "end": end,
        "settled": settled,
        "dropped": dropped,
        "losses": losses,
        "turns": turns,
    }


def run_store(spans: int, rate: float) -> dict[str, float]:
    """Spans per second the chain's worker checks and writes into the store, offered at ``rate`` per second.

    Each span is a chat span whose content (the 1,000-character report and its prompt) is handed over as
    the instrumentors do, so every one carries verdicts. Also the RSS before, at the peak and after the
    backlog is written, each "after" once the store's writer has had the pause it gives memory back in,
    and how much of what stays is Python's small-object arenas, which no trim can give back.
    """
    from opentelemetry.sdk.trace import TracerProvider

    import tallyspan
    from tallyspan import semconv
    from tallyspan._content import ModelContent, content_buffer
    from tallyspan_exporters._writer import DEFAULT_RELEASE_IDLE_MILLIS, RELEASE_AFTER_ITEMS

    with tempfile.TemporaryDirectory() as store_dir:
        provider = TracerProvider()
        tallyspan.instrument(
            {"default": CONTRACT},
            tracer_provider=provider,
            store=os.path.join(store_dir, "bench.db"),
            instrumentors=[],
            capture_content=True,
        )
        tracer = provider.get_tracer("bench")
        buffer = content_buffer()
        content = ModelContent(output_text=ANSWER, prompt=PROMPT)
        attributes = {
            semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_CHAT,
            semconv.GEN_AI_REQUEST_MODEL: "bench-model",
        }

        def emit(count: int, pace: float) -> None:
            start = time.perf_counter()
            for index in range(count):
                span = tracer.start_span("chat bench-model", attributes=attributes)
                buffer.put(span.get_span_context().span_id, content)
                span.end()
                if pace:
                    delay = start + (index + 1) / pace - time.perf_counter()
                    if delay > 0:
                        time.sleep(delay)

        emit(200, 0)
        provider.force_flush()
        gc.collect()
        resting = _rss_mb()

        def losses() -> int:  # the worker's queue and the store's writer alike
            return sum(value for key, value in tallyspan.stats().items() if key.startswith("dropped."))

        dropped_before = losses()
        start, cpu_start = time.perf_counter(), time.process_time()
        resting_arenas = _pymalloc_arenas_mb()

        def settle() -> None:
            # The store's writer gives memory back once it has been idle a moment after a busy spell
            # (the worker's own trim comes before the writer has let go of the last batches).
            if spans >= RELEASE_AFTER_ITEMS:
                time.sleep(DEFAULT_RELEASE_IDLE_MILLIS / 1000 + 0.5)

        emit(spans, rate)
        provider.force_flush()
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        settle()
        after_paced = _rss_mb()
        # A backlog as fast as the app can end spans: the queue fills, then must give its memory back.
        emit(min(spans, 8000), 0)
        peak = _rss_mb()
        provider.force_flush()
        gc.collect()
        settle()
        after_backlog = _rss_mb()
        arenas_kept = _pymalloc_arenas_mb() - resting_arenas
        dropped = losses() - dropped_before
        tallyspan.uninstrument()
        provider.shutdown()
    return {
        "spans_per_s": spans / elapsed,
        # CPU of the whole process per span (the app's loop included): on a machine shared with other
        # work the wall-clock rate says more about the neighbours than about the chain.
        "cpu_ms_per_span": cpu / spans * 1000,
        "offered_per_s": rate,
        "dropped": float(dropped),
        "rss_resting": resting,
        "rss_after_paced": after_paced,
        "rss_backlog_peak": peak,
        "rss_after_backlog": after_backlog,
        "pymalloc_arenas_kept": arenas_kept,
    }


# --- the driver ---------------------------------------------------------------------------------------


def _importable(python: str, module: str) -> bool:
    if python == sys.executable:
        try:
            return importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            return False
    code = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    return subprocess.run([python, "-c", code], capture_output=True).returncode == 0


def interpreter_for(case: str, peers_python: str) -> str | None:
    """The interpreter to run ``case`` with: this one if it has the case's module, else ``peers_python``
    (a venv that has the peers); None, and a line saying so, when neither has it."""
    module, label = CASES[case]
    python = sys.executable if _importable(sys.executable, module) else peers_python
    if not _importable(python, module):
        print(f"skipped {label}: {module} is not importable by {python} (see bench/README.md)")
        return None
    return python


def _version(python: str, case: str) -> str:
    """The case's version; for the chain, also whether its checks scan in C (``tallyspan._engine._scan``)."""
    distribution = DISTRIBUTIONS.get(case, "tallyspan")
    code = f"from importlib.metadata import version; print(version({distribution!r}))"
    if case == "tallyspan_chain":
        code += (
            "; from tallyspan._engine import _scripts"
            "; print('(C scans)' if _scripts.ACCELERATED else '(Python scans)')"
        )
    done = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return " ".join(done.stdout.split()) or "?"


def _child(python: str, *args: str) -> Any:
    done = subprocess.run([python, os.path.abspath(__file__), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{args[:2]} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _median(samples: list[dict[str, float]], key: str) -> float:
    return statistics.median(sample[key] for sample in samples)


def _row(label: str, data: dict[str, list[dict[str, float]]], per: int = 1) -> str:
    plain, traced = data["plain"], data["traced"]
    added = [(t["deferred"] - p["deferred"]) / per * 1000 for p, t in zip(plain, traced, strict=True)]
    cells = []
    for key in ("cpu", "deferred", "wall"):
        p, t = _median(plain, key), _median(traced, key)
        cells.append(f"{(t - p) / per * 1000:+8.1f} {t / p:5.2f}")
    spread = f"{min(added):+.0f}..{max(added):+.0f}"
    parts = [
        (_median(traced, key) - _median(plain, key)) / per * 1000
        for key in ("other_threads", "kernel", "collector")
    ]
    return (
        f"{label:<44} {cells[0]}  {cells[1]}  {cells[2]}  {spread:>13}"
        f"  {parts[0]:+13.1f}  {parts[1]:+8.1f}  {parts[2]:+9.1f}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run every case in its own process and print the tables."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--calls", type=int, default=1000, help="non-streaming calls per side and round (streaming: a fifth)"
    )
    parser.add_argument("--rounds", type=int, default=6, help="alternating plain/instrumented rounds")
    parser.add_argument(
        "--startup-repeats", type=int, default=3, help="fresh interpreters per import figure (0: none)"
    )
    parser.add_argument(
        "--rss-calls",
        type=int,
        default=20000,
        help="chain calls for the RSS figure (100000 takes minutes; 0: none)",
    )
    parser.add_argument("--store-spans", type=int, default=10000, help="spans offered to the store (0: none)")
    parser.add_argument(
        "--store-rate", type=float, default=5000.0, help="spans per second offered to the store"
    )
    parser.add_argument(
        "--python", default=sys.executable, help="interpreter for the peers (a venv that has them)"
    )
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated cases to run")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:  # one measurement, in this fresh process; prints JSON
        if args.child == "rss":
            print(json.dumps(run_rss(args.rss_calls)))
        elif args.child == "store":
            print(json.dumps(run_store(args.store_spans, args.store_rate)))
        else:
            print(json.dumps(run_case(args.child, args.calls, args.rounds)))
        return 0

    results: dict[str, Any] = {}
    startup: dict[str, float] = {}
    for case in args.cases.split(","):
        python = interpreter_for(case, args.python)
        if python is None:
            continue
        label = CASES[case][1]
        version = _version(python, case)
        print(f"running {label} {version} ...", flush=True)
        results[f"{label} {version}"] = _child(
            python, "--child", case, "--calls", str(args.calls), "--rounds", str(args.rounds)
        )
        if args.startup_repeats > 0:
            startup[f"{label} {version}"] = startup_ms(case, python, args.startup_repeats)
    if "tallyspan_chain" in args.cases and args.startup_repeats > 0:
        startup["import tallyspan alone"] = startup_ms(
            "tallyspan_import", sys.executable, args.startup_repeats
        )

    head = (
        f"{'':<44} {'thread CPU':>14}  {'CPU + deferred':>14}  {'wall':>14}  {'spread':>13}"
        f"  {'other threads':>13}  {'kernel':>8}  {'collector':>9}"
    )
    unit = (
        f"{'':<44} {'added us ratio':>14}  {'added us ratio':>14}  {'added us ratio':>14}  {'added us':>13}"
        f"  {'added us':>13}  {'added us':>8}  {'added us':>9}"
    )
    print(f"\nPer non-streaming call, medians of {args.rounds} alternating rounds x {args.calls} calls")
    print(head + "\n" + unit)
    for label, data in results.items():
        print(_row(label, data["chat"]))
    print(
        f"\nPer async non-streaming call (AsyncOpenAI), {args.rounds} rounds x {max(1, args.calls // 2)} calls"
    )
    print(head + "\n" + unit)
    for label, data in results.items():
        print(_row(label, data["async"]))
    print(
        f"\nStreaming, per chunk ({STREAM_CHUNKS} chunks a call), "
        f"{args.rounds} rounds x {max(1, args.calls // 5)} calls"
    )
    print(head + "\n" + unit)
    for label, data in results.items():
        print(_row(label, data["stream"], per=STREAM_CHUNKS))
    if startup:
        print(f"\nImport + instrument, openai and the SDK already imported, median of {args.startup_repeats}")
    for label, ms in startup.items():
        print(f"  {label:<44} {ms:7.1f} ms")

    if "tallyspan_chain" in args.cases and args.rss_calls > 0:
        rss = _child(sys.executable, "--child", "rss", "--rss-calls", str(args.rss_calls))
        print(
            f"\nRSS over {args.rss_calls} chain calls: {rss['start']:.1f} MB after warm-up, "
            f"peak {rss['peak']:.1f} MB, {rss['end']:.1f} MB at the end, {rss['settled']:.1f} MB after a pause; "
            f"{rss['dropped']:.0f} spans or rows dropped (any dropped.*), {rss['turns']:.0f} turns given"
        )
        for key, lost in rss["losses"].items():
            print(f"  {key}: {lost:.0f}")
    if "tallyspan_chain" in args.cases and args.store_spans > 0:
        store = _child(
            sys.executable,
            "--child",
            "store",
            "--store-spans",
            str(args.store_spans),
            "--store-rate",
            str(args.store_rate),
        )
        print(
            f"\nStore: {args.store_spans} checked chat spans offered at {store['offered_per_s']:.0f}/s: "
            f"{store['spans_per_s']:.0f} spans/s written, {store['dropped']:.0f} dropped, "
            f"{store['cpu_ms_per_span']:.3f} ms CPU per span "
            f"(at most {1000 / store['cpu_ms_per_span']:.0f}/s on one core)"
        )
        print(
            f"  RSS resting {store['rss_resting']:.1f} MB, after the paced run {store['rss_after_paced']:.1f} MB, "
            f"backlog peak {store['rss_backlog_peak']:.1f} MB, after the backlog {store['rss_after_backlog']:.1f} MB "
            f"(of which {store['pymalloc_arenas_kept']:+.1f} MB Python small-object arenas kept since resting)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
