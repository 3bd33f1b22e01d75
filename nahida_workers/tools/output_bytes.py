"""Command output as text or, when it is not text, a byte summary.

A command's output reaches the model (the Bash tool) and the user (``nahida
shell``) as text.  Bytes that are not text -- an image ``cat``-ed by mistake,
a gzip stream, an executable -- decoded with ``errors="replace"`` become a
page of U+FFFD and control characters that costs tokens and says nothing.
Such output is shown instead as a summary: its size, its sha256, what it
looks like (a PNG image, a gzip stream, ...) when the first bytes say so, and
a short preview in hex and printable ASCII.

The test (:func:`looks_binary_output`) is made on a sample (the captured
head, and the tail of a long stream): a NUL byte, bytes that are not UTF-8
(a multi-byte character cut at the sample's edge does not count), or more
than one control character in ten (tab, newline, carriage return, form
feed, backspace and escape -- colour codes -- are text).
"""

from __future__ import annotations

__all__ = [
    "PREVIEW_BYTES",
    "byte_summary",
    "detect_type",
    "hex_preview",
    "looks_binary_output",
    "printable",
]

#: Bytes of the preview a summary shows.
PREVIEW_BYTES = 32

#: Control bytes that plain text carries (tab, LF, CR, FF, backspace, ESC).
_TEXT_CONTROLS = frozenset(b"\t\n\r\f\b\x1b")

#: Leading bytes -> what the data is (the common formats a command prints by mistake).
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "PNG image"),
    (b"\xff\xd8\xff", "JPEG image"),
    (b"GIF87a", "GIF image"),
    (b"GIF89a", "GIF image"),
    (b"%PDF-", "PDF document"),
    (b"PK\x03\x04", "ZIP archive"),
    (b"\x1f\x8b", "gzip data"),
    (b"BZh", "bzip2 data"),
    (b"\xfd7zXZ\x00", "xz data"),
    (b"(\xb5/\xfd", "zstd data"),
    (b"7z\xbc\xaf'\x1c", "7-zip archive"),
    (b"\x7fELF", "ELF executable"),
    (b"MZ", "DOS/Windows executable"),
    (b"\xcf\xfa\xed\xfe", "Mach-O executable"),
    (b"\xca\xfe\xba\xbe", "Java class or Mach-O universal binary"),
    (b"\x00asm", "WebAssembly module"),
    (b"SQLite format 3\x00", "SQLite database"),
    (b"RIFF", "RIFF data (WAV/AVI/WebP)"),
    (b"OggS", "Ogg media"),
    (b"fLaC", "FLAC audio"),
    (b"ID3", "MP3 audio"),
    (b"\x00\x00\x01\x00", "ICO image"),
)


def detect_type(head: bytes) -> str | None:
    """What ``head`` (the first bytes of the data) says the data is, or None.

    Recognises the signatures in :data:`_MAGIC` and a POSIX tar header
    (``ustar`` at offset 257).
    """
    for magic, name in _MAGIC:
        if head.startswith(magic):
            return name
    if head[257:262] == b"ustar":
        return "tar archive"
    return None


def looks_binary_output(sample: bytes, *, cut_start: bool = False, cut_end: bool = True) -> bool:
    """True when ``sample`` is not text (see the module docstring for the test).

    Args:
        sample: some bytes of a stream.
        cut_start: the sample may start inside a multi-byte character (a tail).
        cut_end: the sample may end inside one (a head, or a capture still growing).
    """
    if not sample:
        return False
    if b"\x00" in sample:
        return True
    data = sample
    if cut_start:
        skip = 0
        while skip < min(3, len(data)) and 0x80 <= data[skip] <= 0xBF:
            skip += 1
        data = data[skip:]
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        at_edge = exc.reason == "unexpected end of data" and exc.start >= len(data) - 3
        if not (cut_end and at_edge):
            return True
    controls = sum(1 for b in data if (b < 32 and b not in _TEXT_CONTROLS) or b == 127)
    return controls * 10 > len(data)


def printable(data: bytes) -> str:
    """``data`` as printable ASCII, every other byte shown as ``.``."""
    return "".join(chr(b) if 32 <= b < 127 else "." for b in data)


def hex_preview(data: bytes, limit: int = PREVIEW_BYTES) -> str:
    """The first ``limit`` bytes as hex pairs, then ``|printable|`` (``...`` when cut)."""
    shown = data[:limit]
    more = " ..." if len(data) > limit else ""
    return f"{shown.hex(' ')}{more}  |{printable(shown)}|"


def byte_summary(size: int, sha256: str, head: bytes, *, label: str = "binary output") -> str:
    """One or two lines that stand for ``size`` bytes of non-text output.

    Args:
        size: bytes in the whole stream.
        sha256: hex digest of the whole stream.
        head: its first bytes (for the type and the preview).
        label: what the bytes are (``binary output``, ``stdout`` ...).

    Returns:
        ``[binary output: N bytes, sha256 HEX, TYPE]`` and a
        ``preview: hex |ascii|`` line (``TYPE`` only when detected).
    """
    kind = detect_type(head)
    typed = f", {kind}" if kind else ""
    return f"[{label}: {size} bytes, sha256 {sha256}{typed}]\npreview: {hex_preview(head)}"
