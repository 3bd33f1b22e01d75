"""YAML from people: bounded in size and in what aliases may expand to.

``yaml.safe_load`` builds an alias as a shared reference, so a "billion
laughs" document (nine levels of ten aliases each) loads in a moment -- and
then everything that walks it (pydantic validation, ``model_dump``, JSON
encoding of the session snapshot) expands it to 10^9 nodes: gigabytes of RSS
and no answer.  :func:`load_yaml` composes the node graph first, counts the
nodes it stands for with every alias expanded, and refuses a document over
:data:`MAX_NODES` before anything is constructed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from nahida_workers.errors import ConfigError

__all__ = ["MAX_BYTES", "MAX_NODES", "load_yaml", "read_yaml_file"]

#: Largest YAML text accepted, in bytes (a job file with an inline script is a few KiB).
MAX_BYTES = 4 * 1024 * 1024
#: Most nodes a document may stand for once every alias is expanded.
MAX_NODES = 200_000


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _expanded_size(root: yaml.Node, limit: int) -> int:
    """Nodes ``root`` stands for with aliases expanded; stops counting past ``limit``.

    Raises:
        ConfigError: over ``limit``, or an alias that refers to its own ancestor.
    """
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise ConfigError("recursive YAML alias")
        open_nodes.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            for child in node.value:
                total += size(child)
                if total > limit:
                    break
        elif isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                total += size(k) + size(v)
                if total > limit:
                    break
        open_nodes.discard(key)
        sizes[key] = total
        if total > limit:
            raise ConfigError(
                f"YAML document expands to more than {limit} nodes (aliases); refused"
            )
        return total

    return size(root)


def load_yaml(text: str, *, source: str, max_nodes: int = MAX_NODES) -> Any:
    """Parse one YAML document safely (``SafeLoader`` types only).

    Args:
        text: the document.
        source: what to call it in an error message (a path).
        max_nodes: most nodes after alias expansion.

    Raises:
        ConfigError: larger than :data:`MAX_BYTES`, invalid YAML, or expanding
            past ``max_nodes``; the message is one line and names ``source``.
    """
    if len(text) > MAX_BYTES:
        raise ConfigError(f"{source}: larger than {MAX_BYTES} bytes; refused")
    try:
        # The reader checks every character when the loader is built: a NUL
        # byte raises here, before the first node.
        loader = yaml.SafeLoader(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: invalid YAML: {_one_line(str(exc))}") from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node, max_nodes)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: invalid YAML: {_one_line(str(exc))}") from None
    except RecursionError:
        raise ConfigError(f"{source}: YAML nested too deeply; refused") from None
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    finally:
        loader.dispose()


def read_yaml_file(path: Path, *, what: str = "file") -> Any:
    """Read ``path`` as UTF-8 and parse it with :func:`load_yaml`.

    Raises:
        ConfigError: unreadable, larger than :data:`MAX_BYTES`, not UTF-8,
            invalid YAML or an alias bomb (one line, names the path).
    """
    try:
        if path.stat().st_size > MAX_BYTES:
            raise ConfigError(f"{what} {path}: larger than {MAX_BYTES} bytes; refused")
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = raw[exc.start : exc.start + 1]
        raise ConfigError(f"{what} {path} is not UTF-8 text (byte {exc.start}: {bad!r})") from None
    return load_yaml(text, source=f"{what} {path}")
