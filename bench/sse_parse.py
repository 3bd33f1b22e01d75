"""Throughput of the SSE decoder + Chat Completions parser against ``json.loads``.

A ~20 MB synthetic body is built by repeating the real recordings W02 (one
tool call in 53 argument fragments) and W03 (a short text answer).  Each
repeated response is parsed exactly as the adapter does it: bytes in 4 KiB
network reads -> :class:`SSEDecoder` -> :class:`OpenAIStreamParser` ->
``finish()``.  The baseline, measured in the same run, is ``json.loads`` of
the same chunk payloads (the unavoidable floor of any parser).

Run: ``python -m bench.sse_parse [--mb 20] [--repeat 3]``.  Prints::

    sse parse: X MB/s, Y us/chunk; json.loads baseline: Z MB/s; ratio (ours/json.loads time): R
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from nahida_workers.providers.openai_stream import OpenAIStreamParser
from nahida_workers.providers.sse import SSEDecoder

WIRE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "wire"
T = TypeVar("T")
READ_SIZE = 4096  # bytes per network read, like httpx's iter_bytes


def _recording(wid: str) -> bytes:
    data = json.loads((WIRE / f"{wid}.json").read_text("utf-8"))
    body: str = data["sse"]
    return body.encode("utf-8")


def build_corpus(target_mb: float) -> list[list[bytes]]:
    """Responses (each a list of network reads) totalling about ``target_mb`` MB."""
    pair = [_recording("W02"), _recording("W03")]
    per_pair = sum(len(b) for b in pair)
    repeats = max(1, int(target_mb * 1_000_000 / per_pair))
    reads = [[b[i : i + READ_SIZE] for i in range(0, len(b), READ_SIZE)] for b in pair]
    return [reads[n % 2] for n in range(2 * repeats)]


def payloads(corpus: list[list[bytes]]) -> list[str]:
    """The JSON payload of every chunk event (``[DONE]`` excluded)."""
    out: list[str] = []
    for reads in corpus:
        decoder = SSEDecoder()
        for read in reads:
            out.extend(e.data for e in decoder.feed(read) if e.data != "[DONE]")
        out.extend(e.data for e in decoder.close() if e.data != "[DONE]")
    return out


def parse_all(corpus: list[list[bytes]]) -> int:
    """Parse every response like the adapter does; return the number of tool calls."""
    calls = 0
    for reads in corpus:
        decoder = SSEDecoder()
        parser = OpenAIStreamParser()
        for read in reads:
            for event in decoder.feed(read):
                parser.feed(event)
        for event in decoder.close():
            parser.feed(event)
        calls += len(parser.finish().tool_calls)
    return calls


def loads_all(texts: list[str]) -> int:
    """The baseline: ``json.loads`` of each payload."""
    n = 0
    for text in texts:
        n += len(json.loads(text))
    return n


def best_of(repeat: int, fn: Callable[[T], object], arg: T) -> float:
    """Fastest wall time of ``repeat`` runs, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn(arg)
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> None:
    """Build the corpus, time both, print one summary line."""
    args = argparse.ArgumentParser(description="SSE + chunk parser throughput vs json.loads")
    args.add_argument("--mb", type=float, default=20.0, help="corpus size in MB")
    args.add_argument("--repeat", type=int, default=3, help="runs; the fastest counts")
    opts = args.parse_args(argv)
    corpus = build_corpus(opts.mb)
    texts = payloads(corpus)
    body_bytes = sum(len(r) for reads in corpus for r in reads)
    payload_bytes = sum(len(t.encode("utf-8")) for t in texts)
    assert parse_all(corpus[:2]) == 1  # W02 has one call, W03 none: the parser is live
    ours = best_of(opts.repeat, parse_all, corpus)
    base = best_of(opts.repeat, loads_all, texts)
    print(
        f"corpus: {body_bytes / 1e6:.1f} MB of SSE, {len(corpus)} responses, "
        f"{len(texts)} chunks ({payload_bytes / 1e6:.1f} MB of JSON payload)"
    )
    print(
        f"sse parse: {body_bytes / 1e6 / ours:.1f} MB/s, {ours / len(texts) * 1e6:.2f} us/chunk; "
        f"json.loads baseline: {payload_bytes / 1e6 / base:.1f} MB/s; "
        f"ratio (ours/json.loads time): {ours / base:.2f}"
    )


if __name__ == "__main__":
    main()
