"""``nahida shell``'s live output: bounded, binary never written raw (issue 23 item 3)."""

from __future__ import annotations

import io

from nahida_workers.cli.shell_cmd import TIMED_OUT_EXIT, LiveOutput, _exit_code


def _live(limit: int) -> tuple[LiveOutput, io.BytesIO, io.BytesIO]:
    out, err = io.BytesIO(), io.BytesIO()
    return LiveOutput(limit, out, err), out, err


def test_output_is_written_as_it_comes_up_to_the_limit() -> None:
    live, out, err = _live(12)
    live("stdout", b"hello ")
    live("stderr", b"warn\n")
    assert out.getvalue() == b"hello " and err.getvalue() == b"warn\n"
    live("stdout", b"world, and more")
    assert out.getvalue() == b"hello " + b"w"  # 12 bytes in all, both streams
    assert live.stopped and b"live output stopped after 12 bytes" in err.getvalue()
    live("stdout", b"ignored")
    assert out.getvalue() == b"hello w"
    assert err.getvalue().count(b"stopped") == 1  # one notice


def test_binary_stream_is_not_written() -> None:
    live, out, err = _live(1 << 20)
    live("stdout", b"text first\n")
    live("stdout", b"\x89PNG\r\n\x1a\n\x00\x00")
    live("stdout", b"more text\n")  # the stream stays hidden: its summary comes at the end
    assert out.getvalue() == b"text first\n"
    assert b"binary output on stdout" in err.getvalue()
    live("stderr", "caf\u00e9 \u2713\n".encode())  # the other stream is unaffected
    assert err.getvalue().endswith("caf\u00e9 \u2713\n".encode())


def test_exit_codes() -> None:
    assert _exit_code("ok", 0, False) == 0
    assert _exit_code("error", 3, False) == 3
    assert _exit_code("timed_out", None, False) == TIMED_OUT_EXIT == 124
    assert _exit_code("cancelled", None, True) == 130
    assert _exit_code("error", -9, False) == 1  # a negative (signal) code is not an exit status
