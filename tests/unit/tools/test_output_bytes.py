"""Binary command output becomes a byte summary, never decoded garbage (issue 23 item 3).

One row per rule: NUL -> binary; invalid UTF-8 -> binary; a character cut
at the sample's edge is still text; many control characters -> binary;
colour codes and tabs are text; the summary holds size, sha256, type and a
hex/printable preview; the Bash tool (content, evidence) and the capture
render use it, for stdout and stderr, and for text that turns binary later.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from nahida_workers.tools.base import ToolContext
from nahida_workers.tools.bash import Bash
from nahida_workers.tools.output_bytes import (
    byte_summary,
    detect_type,
    hex_preview,
    looks_binary_output,
)
from nahida_workers.tools.runner import run_tool
from nahida_workers.tools.workspace import BoundedCapture

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256))


@pytest.mark.parametrize(
    ("sample", "binary"),
    [
        (b"plain text\n", False),
        ("héllo wörld ✓\n".encode(), False),
        (b"\x1b[31mred\x1b[0m\tand\r\n", False),  # colour codes, tab, CRLF
        (b"a\x00b", True),  # a NUL byte
        (b"caf\xe9 latin-1\n", True),  # not UTF-8
        ("ok ✓".encode()[:-1], False),  # a character cut at the end of the sample
        (b"\x01\x02\x03\x04 mostly controls", True),
        (b"", False),
    ],
)
def test_binary_test(sample: bytes, binary: bool) -> None:
    assert looks_binary_output(sample) is binary


def test_a_tail_may_start_inside_a_character() -> None:
    tail = "✓ done\n".encode()[1:]
    assert looks_binary_output(tail, cut_start=True) is False
    assert looks_binary_output(tail) is True


@pytest.mark.parametrize(
    ("head", "kind"),
    [
        (PNG, "PNG image"),
        (b"\x1f\x8b\x08\x00", "gzip data"),
        (b"\x7fELF\x02\x01", "ELF executable"),
        (b"%PDF-1.7", "PDF document"),
        (b"\x00" * 257 + b"ustar\x0000", "tar archive"),
        (b"\x00\x01\x02", None),
    ],
)
def test_detect_type(head: bytes, kind: str | None) -> None:
    assert detect_type(head) == kind


def test_summary_has_size_hash_type_and_preview() -> None:
    digest = hashlib.sha256(PNG).hexdigest()
    text = byte_summary(len(PNG), digest, PNG)
    assert text.splitlines()[0] == f"[binary output: {len(PNG)} bytes, sha256 {digest}, PNG image]"
    assert text.splitlines()[1].startswith("preview: 89 50 4e 47 0d 0a 1a 0a")
    assert "|.PNG....." in text and text.endswith("|")
    assert "\ufffd" not in text
    assert hex_preview(b"ab") == "61 62  |ab|"


def test_capture_renders_binary_as_a_summary_even_after_text() -> None:
    cap = BoundedCapture(64)
    cap.feed(b"header line\n" * 20)  # the head is text ...
    cap.feed(b"\x00\xff\xfe" * 100)  # ... the tail is not
    assert cap.binary
    shown = cap.render(4096)
    assert shown.startswith(f"[binary output: {cap.total} bytes, sha256 {cap.hexdigest()}")
    assert "\ufffd" not in shown


def test_bash_binary_stdout_is_summarised(ws: Path, ctx: ToolContext) -> None:
    (ws / "img.png").write_bytes(PNG)
    outcome = run_tool(Bash(), {"command": "cat img.png; echo fine >&2"}, ctx)
    digest = hashlib.sha256(PNG).hexdigest()
    assert outcome.content.startswith(
        f"exit code: 0\nstdout:\n[binary output: {len(PNG)} bytes, sha256 {digest}, PNG image]\n"
        "preview: 89 50 4e 47"
    )
    assert outcome.content.endswith("stderr:\nfine")  # the text stream stays text
    assert "\ufffd" not in outcome.content
    ev = outcome.evidence
    assert ev["stdout_binary"] is True and ev["stderr_binary"] is False
    assert ev["stdout_sha256"] == digest and ev["stdout_bytes"] == len(PNG)
    assert ev["stdout_head"].startswith(".PNG") and "\ufffd" not in ev["stdout_head"]


def test_bash_binary_stderr_is_summarised(ctx: ToolContext) -> None:
    outcome = run_tool(Bash(), {"command": "printf 'ok\\n'; head -c 3000 /dev/zero >&2"}, ctx)
    assert "stdout:\nok\nstderr:\n[binary output: 3000 bytes, sha256 " in outcome.content
    assert outcome.evidence["stderr_binary"] is True


def test_bash_text_output_is_unchanged(ctx: ToolContext) -> None:
    outcome = run_tool(Bash(), {"command": "printf 'caf\\xc3\\xa9 \\033[1mbold\\033[0m\\n'"}, ctx)
    assert outcome.content == "exit code: 0\nstdout:\ncafé \x1b[1mbold\x1b[0m"
    assert outcome.evidence["stdout_binary"] is False
