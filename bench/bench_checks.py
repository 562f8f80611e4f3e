"""Cost of the checks: the engine on a 1,000-character Japanese output, and the checks processor per span.

1. ``tallyspan.check`` on a 1,000-character Japanese report with a full contract (language, lengths,
   two required and two forbidden regexes, claims, prompt and two other in-flight prompts): median
   and p95 over many runs, every check on (degenerate_repetition and off_topic included). Target: median
   under 0.1 ms (the performance issue); the report's paragraphs all differ, since a repeated one loops.
2. The per-span cost of the ``ChecksProcessor``: the same span (a ``chat`` span carrying the report in
   the ContentBuffer) ended on a provider whose processor chain is ``exporter`` alone, against
   ``ChecksProcessor -> exporter``, both synchronous, alternating blocks in one run so drift hits both
   alike. Reported as medians per span, the added time and the ratio. Also the same with the worker
   (``OffThreadProcessor``) in front, as ``instrument()`` builds it: what the app's thread pays (the
   worker is drained between blocks, outside the timing; drops are reported).

Usage::

    python bench/bench_checks.py                  # defaults
    python bench/bench_checks.py --runs 5000 --spans 2000 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

import tallyspan
from tallyspan import Contract, semconv
from tallyspan._content import ModelContent, content_buffer
from tallyspan_processors import ChecksProcessor, OffThreadProcessor

# Six different paragraphs: a report that repeats one paragraph back to back is degenerate_repetition.
_PARAGRAPHS = (
    "今週は問い合わせ対応の流れを見直しました。受付担当が内容を確認し、緊急度に応じて三段階に分類します。"
    "緊急度が高いものは当日中に担当者へ引き継ぎ、それ以外は翌営業日までに回答します。\n",
    "回答内容は共有フォルダに記録し、毎週金曜日に件数と平均対応時間を集計して部内で共有します。"
    "先週の平均対応時間は四時間十五分で、前週より三十分短くなりました。\n",
    "OpenTelemetryのSpanProcessorで各LLM呼び出しの出力を検証し、結果をGrafanaのダッシュボードに表示しました。"
    "違反が見つかった呼び出しは、担当者がその日のうちに原因を調べます。\n",
    "問い合わせの内訳は、料金に関するものが四割、操作方法が三割、障害の報告が二割、その他が一割でした。"
    "料金の問い合わせは月末に集中するため、来月から月末の受付人数を一名増やします。\n",
    "障害の報告のうち二件は、同じ設定画面の表示不具合によるものでした。開発チームに共有し、"
    "次回のリリースで修正される予定です。修正までの間は、回避手順をよくある質問に掲載します。\n",
    "来週は新しい担当者二名の研修を行います。研修では過去の問い合わせ事例を使い、分類の基準と"
    "引き継ぎの手順を確認します。研修資料は共有フォルダの教育用ディレクトリに置きました。\n",
    "お客様アンケートには先月と同じくらいの方が回答し、満足と答えた方の割合もほぼ変わりませんでした。"
    "自由記述では、回答までの待ち時間が長いという意見が最も多く寄せられました。\n",
    "そこで、受付から一次回答までの目標時間を二時間に定め、超えそうな案件には自動で通知が届くように"
    "設定しました。通知はチャットの専用チャンネルに投稿され、手の空いた担当者が引き受けます。\n",
    "また、よくある質問のページを整理し、検索で見つけにくかった十二の項目に見出しを付け直しました。"
    "ページの閲覧数は一週間で一・五倍に増え、同じ内容の問い合わせは目に見えて減っています。\n",
    "最後に、来月の予定です。月初に前月の集計を報告し、中旬に受付システムの更新作業を行います。"
    "更新作業の日は受付時間を短縮するため、事前にお知らせを掲載し、関係部署にも連絡します。\n",
    "以上、今週の報告でした。ご質問やご意見があれば、いつでも担当までお寄せください。来週も引き続き、"
    "対応時間の短縮と回答の質の向上に取り組みます。どうぞよろしくお願いいたします。次回の報告は来週金曜日です。\n",
)
REPORT = ("判定：合格\n" + "".join(_PARAGRAPHS))[:1000]
CONTRACT = Contract(
    language="ja",
    min_chars=200,
    max_chars=8000,
    required=[r"^判定[:：]\s*(合格|不合格)", {"name": "weekly", "pattern": "毎週|週次"}],
    forbidden=[r"<\|im_end\|>", {"name": "secret", "pattern": r"sk-[A-Za-z0-9]{20,}"}],
    claims={"allowed": ["導入企業300社"]},
    deadline_s=60,
    max_wait_s=300,
)
PROMPT = "今週の問い合わせ対応について週次報告を書いてください。"
OTHERS = (
    "光合成の二つの段階と葉緑体の役割を説明してください。",
    "東京の人口動態と経済への影響を説明してください。",
)


class _NullExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def bench_engine(runs: int) -> tuple[float, float]:
    """Median and p95 of one check, in milliseconds."""
    assert len(REPORT) == 1000
    result = tallyspan.check(REPORT, CONTRACT, prompt=PROMPT, other_prompts=OTHERS)
    assert result.ok, result.violations
    for _ in range(50):
        tallyspan.check(REPORT, CONTRACT, prompt=PROMPT, other_prompts=OTHERS)
    timings = []
    for _ in range(runs):
        start = time.perf_counter()
        tallyspan.check(REPORT, CONTRACT, prompt=PROMPT, other_prompts=OTHERS)
        timings.append((time.perf_counter() - start) * 1000)
    timings.sort()
    return statistics.median(timings), timings[int(len(timings) * 0.95)]


def _span_loop(provider: TracerProvider, spans: int) -> float:
    """Seconds per span: start a chat span, hand its content over, end it."""
    tracer = provider.get_tracer("bench")
    buffer = content_buffer()
    content = ModelContent(output_text=REPORT, prompt=PROMPT)
    attributes = {
        semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_CHAT,
        semconv.GEN_AI_REQUEST_MODEL: "bench-model",
        semconv.STAGE: "weekly_report",
    }
    start = time.perf_counter()
    for _ in range(spans):
        span = tracer.start_span("chat bench-model", attributes=attributes)
        buffer.put(span.get_span_context().span_id, content)
        span.end()
    return (time.perf_counter() - start) / spans


def _provider(processor: SpanProcessor) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(processor)
    return provider


def bench_processor(spans: int, rounds: int) -> dict[str, float]:
    """Median seconds per span for each pipeline, alternating blocks in one run."""
    contracts = tallyspan.load_contracts({"weekly_report": CONTRACT.model_dump(exclude_none=True)})
    buffer = content_buffer()
    buffer.add_consumer()  # the baseline's puts cost the same as with the checks (they would pop them)
    baseline = _provider(SimpleSpanProcessor(_NullExporter()))
    checks_processor = ChecksProcessor([SimpleSpanProcessor(_NullExporter())], contracts)
    checked = _provider(checks_processor)
    worker = OffThreadProcessor([ChecksProcessor([SimpleSpanProcessor(_NullExporter())], contracts)])
    offloaded = _provider(worker)
    cases: dict[str, tuple[TracerProvider, Callable[[], object]]] = {
        "baseline": (baseline, lambda: buffer.__len__() and _drain(buffer)),
        "checks": (checked, lambda: None),
        "checks_on_worker": (offloaded, lambda: worker.force_flush()),
    }
    timings: dict[str, list[float]] = {name: [] for name in cases}
    for provider, after in cases.values():  # warm-up
        _span_loop(provider, 100)
        after()
    for _ in range(rounds):
        for name, (provider, after) in cases.items():
            timings[name].append(_span_loop(provider, spans))
            after()
    for provider, _ in cases.values():
        provider.shutdown()
    buffer.remove_consumer()
    return {name: statistics.median(values) for name, values in timings.items()}


def _drain(buffer: object) -> None:
    content_buffer()._entries.clear()  # the baseline has no processor popping entries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3000, help="engine runs")
    parser.add_argument("--spans", type=int, default=1000, help="spans per block")
    parser.add_argument("--rounds", type=int, default=5, help="alternating blocks per pipeline")
    args = parser.parse_args()

    median_ms, p95_ms = bench_engine(args.runs)
    print(f"engine: check() on {len(REPORT)} Japanese chars, full contract, {args.runs} runs")
    print(f"  median {median_ms:.3f} ms, p95 {p95_ms:.3f} ms (target: median < 0.1 ms)")

    per_span = bench_processor(args.spans, args.rounds)
    base = per_span["baseline"]
    print(f"processor: {args.spans} spans x {args.rounds} alternating rounds, medians per span")
    print(f"  baseline (span + content put + exporter): {base * 1e6:.1f} us")
    for name in ("checks", "checks_on_worker"):
        value = per_span[name]
        print(f"  {name}: {value * 1e6:.1f} us  (+{(value - base) * 1e6:.1f} us, ratio {value / base:.2f}x)")
    print("  checks_on_worker: the app thread's cost; the worker runs the checks meanwhile and is drained")
    print("  (force_flush, untimed) after each block")
    print(f"  spans dropped by the worker queue: {tallyspan.stats().get('dropped.spans', 0)}")


if __name__ == "__main__":
    main()
