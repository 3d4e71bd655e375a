"""The one way gpucluster reads a file a user names (spec, pods, trace, device config, prices, quota, job, ...).

Every check happens before the content is trusted, and every failure is an :class:`InputFileError` whose text is
``PATH: why`` (the CLI prints it and exits 2):

- the path must be a regular file (a directory, a FIFO, ``/dev/zero`` or another device is refused without
  reading a byte; a FIFO is opened non-blocking so that opening it never hangs);
- its size is checked before reading: at most :data:`MAX_DOCUMENT_BYTES` for a file read whole (YAML, JSON),
  :data:`MAX_STREAM_BYTES` for a trace read line by line;
- text is UTF-8 without NUL bytes: a binary or latin-1 file is refused naming the byte;
- YAML and JSON are nested at most :data:`MAX_NESTING` levels (no ``RecursionError``), and a YAML document may
  expand to at most :data:`MAX_YAML_NODES` nodes once its aliases are followed (an "anchors bomb" is refused
  before it is built); a number too long to convert is refused.

Standard library and PyYAML only, so that every layer may use it.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any, Final

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.error import Mark
from yaml.events import MappingStartEvent, SequenceStartEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.scanner import ScannerError

MAX_DOCUMENT_BYTES: Final = 32 * 2**20
"""Largest YAML or JSON file read whole (32 MiB: a cluster spec of thousands of Node manifests fits)."""
MAX_STREAM_BYTES: Final = 4 * 2**30
"""Largest trace read line by line (4 GiB); it is never held in memory whole."""
MAX_NESTING: Final = 64
"""Deepest nesting of YAML or JSON collections; real configs nest under 15 levels."""
MAX_YAML_NODES: Final = 5_000_000
"""Most nodes a YAML stream may hold once its aliases are expanded (what a consumer walking it visits)."""
_SNIFF_BYTES: Final = 8192


class InputFileError(ValueError):
    """A file that cannot be read as the text asked for; ``str(err)`` is ``PATH: why``."""


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


@contextlib.contextmanager
def _open_regular(path: Path, max_bytes: int) -> Iterator[tuple[int, int]]:
    """(fd, size) of ``path`` once it is known to be a regular file within ``max_bytes``; closed on exit."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputFileError(f"{path}: no such file") from None
    except OSError as exc:
        raise InputFileError(f"{path}: {_why(exc)}") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputFileError(f"{path}: is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode)
                or stat.S_ISBLK(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
        raise InputFileError(f"{path}: is {kind}, not a regular file" if kind.startswith("a ")
                             else f"{path}: {kind}")
    if st.st_size > max_bytes:
        raise InputFileError(f"{path}: {st.st_size:,} bytes; at most {max_bytes:,} are read")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise InputFileError(f"{path}: {_why(exc)}") from None
    try:
        st = os.fstat(fd)  # what was opened, not what the name pointed at a moment earlier
        if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:
            raise InputFileError(f"{path}: changed while opened; not a regular file of at most {max_bytes:,} bytes")
        yield fd, st.st_size
    finally:
        os.close(fd)


def _decode(data: bytes, path: Path, offset: int = 0) -> str:
    nul = data.find(b"\0")
    if nul >= 0:
        raise InputFileError(f"{path}: byte {offset + nul}: a NUL byte; a binary file, not text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFileError(f"{path}: byte {offset + exc.start}: not UTF-8 text") from None


def read_bytes(path: str | Path, max_bytes: int = MAX_DOCUMENT_BYTES) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``."""
    p = Path(path)
    with _open_regular(p, max_bytes) as (fd, _size):
        chunks: list[bytes] = []
        total = 0
        while True:
            try:
                chunk = os.read(fd, 1 << 20)
            except OSError as exc:
                raise InputFileError(f"{p}: {_why(exc)}") from None
            if not chunk:
                break
            total += len(chunk)
            if total > max_bytes:  # it grew while being read
                raise InputFileError(f"{p}: more than {max_bytes:,} bytes")
            chunks.append(chunk)
    return b"".join(chunks)


def read_text(path: str | Path, max_bytes: int = MAX_DOCUMENT_BYTES) -> str:
    """The UTF-8 text of a regular file of at most ``max_bytes`` (no NUL bytes)."""
    p = Path(path)
    text = _decode(read_bytes(p, max_bytes), p)
    return text[1:] if text.startswith("\ufeff") else text


@contextlib.contextmanager
def open_text(path: str | Path, max_bytes: int = MAX_STREAM_BYTES, newline: str | None = None) -> Iterator[IO[str]]:
    """A text handle on a regular file of at most ``max_bytes`` whose first bytes are UTF-8 text, for reading
    line by line (a trace); a later byte that is not UTF-8 raises :class:`InputFileError` naming it."""
    p = Path(path)
    with _open_regular(p, max_bytes) as (fd, _size):
        try:
            head = os.pread(fd, _SNIFF_BYTES, 0)
        except OSError as exc:
            raise InputFileError(f"{p}: {_why(exc)}") from None
        # a multi-byte character cut at the sniff boundary is not an error
        try:
            _decode(head, p)
        except InputFileError:
            if b"\0" in head or len(head) < _SNIFF_BYTES:
                raise
            _decode(head[:-3], p)
        with os.fdopen(os.dup(fd), "rb") as raw:
            handle = io.TextIOWrapper(raw, encoding="utf-8-sig", newline=newline)
            try:
                yield handle
            except UnicodeDecodeError as exc:
                raise InputFileError(f"{p}: not UTF-8 text ({exc.reason} at a byte after {raw.tell():,})") from None
            finally:
                handle.detach()


# ------------------------------------------------------------------------------------------------ YAML
class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with a nesting limit while composing and an expansion limit before constructing."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._visited = 0

    def fetch_flow_collection_start(self, token_class: Any) -> None:
        # the scanner reads ahead about 1,000 characters per flow collection it opens, each step costing as many
        # as are open: stop it at the limit, or 5,000 brackets take seconds before the composer sees one
        if self.flow_level >= MAX_NESTING:
            raise ScannerError(None, None, f"nested deeper than {MAX_NESTING} levels",
                               self.get_mark())
        super().fetch_flow_collection_start(token_class)

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if not self.check_event(SequenceStartEvent, MappingStartEvent):
            return super().compose_node(parent, index)
        self._depth += 1
        try:
            if self._depth > MAX_NESTING:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise ComposerError(None, None, f"nested deeper than {MAX_NESTING} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        """A mapping whose keys are each given once: YAML wants them unique, and PyYAML would keep the last of
        two silently (a ``count`` written twice, say after a merge, would drop one without a word). A key a
        merge (``<<: *base``) brings in may be given again: that is what a merge is for."""
        if isinstance(node, MappingNode):
            first: dict[Any, Mark] = {}
            for key_node, _value in node.value:
                if not isinstance(key_node, ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node)
                try:
                    seen = first.setdefault(key, key_node.start_mark)
                except TypeError:  # not hashable: the constructor below says so
                    continue
                if seen is not key_node.start_mark:
                    raise ConstructorError(None, None, f"key {str(key)[:64]!r} is given twice in one mapping (first "
                                                       f"on line {seen.line + 1}): keep one", key_node.start_mark)
        return super().construct_mapping(node, deep)

    def construct_document(self, node: Node) -> Any:
        size, _depth = _expanded(node, {}, 1)
        self._visited += size
        if self._visited > MAX_YAML_NODES:
            raise ComposerError(None, None, f"expands to more than {MAX_YAML_NODES:,} nodes through its aliases "
                                            "(an alias bomb?)", node.start_mark)
        return super().construct_document(node)


def _expanded(node: Node, memo: dict[int, tuple[int, int]], at: int) -> tuple[int, int]:
    """(nodes visited, depth) walking ``node`` (at depth ``at``) with every alias followed. Aliases can nest a
    document deeper than its text does, so the nesting limit is checked here too; the walk never goes deeper."""
    key = id(node)
    if key in memo:
        size, depth = memo[key]
        if size == 0:
            raise ComposerError(None, None, "an alias inside its own anchor (a structure holding itself)",
                                node.start_mark)
    else:
        memo[key] = (0, 0)  # in progress: reaching it again means it holds itself
        size, depth = 1, int(isinstance(node, SequenceNode | MappingNode))  # collections count as levels
        children: list[Node] = []
        if isinstance(node, SequenceNode):
            children = list(node.value)
        elif isinstance(node, MappingNode):
            children = [n for pair in node.value for n in pair]
        for child in children:
            if at >= MAX_NESTING and isinstance(child, SequenceNode | MappingNode):
                raise _too_deep(child)
            s, d = _expanded(child, memo, at + 1)
            size = min(size + s, MAX_YAML_NODES + 1)
            depth = max(depth, d + 1)
        memo[key] = (size, depth)
    if at - 1 + depth > MAX_NESTING:
        raise _too_deep(node)
    return size, depth


def _too_deep(node: Node) -> ComposerError:
    return ComposerError(None, None, f"nested deeper than {MAX_NESTING} levels once its aliases are followed",
                         node.start_mark)


def _yaml_error(source: str | Path, exc: yaml.YAMLError) -> InputFileError:
    mark = getattr(exc, "problem_mark", None)
    at = f"line {mark.line + 1}" if mark is not None else "?"
    problem = getattr(exc, "problem", None) or str(exc)
    return InputFileError(f"{source}: {at}: not valid YAML: {problem}")


@contextlib.contextmanager
def _loading(text: str, source: str | Path) -> Iterator[_BoundedLoader]:
    """A bounded loader over ``text``, disposed of after; a YAML, number or nesting error while it loads is an
    :class:`InputFileError` naming ``source``."""
    try:
        loader = _BoundedLoader(text)
    except yaml.YAMLError as exc:
        raise _yaml_error(source, exc) from None
    try:
        yield loader
    except yaml.YAMLError as exc:
        raise _yaml_error(source, exc) from None
    except (ValueError, OverflowError) as exc:  # an integer of more digits than Python converts
        raise InputFileError(f"{source}: {exc}") from None
    except RecursionError:  # a guard: the nesting limit stops this first
        raise InputFileError(f"{source}: nested too deeply") from None
    finally:
        loader.dispose()


def parse_yaml_all(text: str, source: str | Path) -> list[Any]:
    """Every document of a YAML stream (``None`` for an empty one), within the nesting and expansion limits."""
    with _loading(text, source) as loader:
        docs = []
        while loader.check_data():  # type: ignore[no-untyped-call]
            docs.append(loader.get_data())
        return docs


def parse_yaml(text: str, source: str | Path) -> Any:
    """The one document of a YAML text (``None`` when empty); more than one is an error."""
    docs = parse_yaml_all(text, source)
    if len(docs) > 1:
        raise InputFileError(f"{source}: {len(docs)} YAML documents; expected one")
    return docs[0] if docs else None


class YamlLines:
    """Where the parts of a parsed YAML document were written: :meth:`line` maps a path into the document (mapping
    keys and list indices, as pydantic's ``loc`` gives them) to the 1-based line it starts on."""

    def __init__(self, root: Node | None) -> None:
        self._root = root

    def line(self, loc: Sequence[str | int]) -> int:
        """The line of the deepest part of ``loc`` the document holds: a mapping entry's key line, a list item's
        first line; a part it lacks (a required field left out) is reported at the line of what would hold it."""
        node = self._root
        if node is None:
            return 1
        at = node.start_mark
        for part in loc:
            if isinstance(node, MappingNode):
                for key_node, value in node.value:
                    if isinstance(key_node, ScalarNode) and key_node.value == str(part):
                        at, node = key_node.start_mark, value
                        break
                else:
                    break
            elif isinstance(node, SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
                node = node.value[part]
                at = node.start_mark
            else:
                break
        return at.line + 1


def parse_yaml_lines(text: str, source: str | Path) -> tuple[Any, YamlLines]:
    """The one document of a YAML text (``None`` when empty), and where each of its parts was written, for
    errors that name a line (``FILE:LINE: field: why``) rather than a path into the document."""
    with _loading(text, source) as loader:
        node = loader.get_single_node()
        doc = None if node is None else loader.construct_document(node)
        return doc, YamlLines(node)


def load_yaml_lines(path: str | Path, max_bytes: int = MAX_DOCUMENT_BYTES) -> tuple[Any, YamlLines]:
    """The one YAML document of a file (``None`` when empty) and where each of its parts was written."""
    return parse_yaml_lines(read_text(path, max_bytes), path)


def load_yaml(path: str | Path, max_bytes: int = MAX_DOCUMENT_BYTES) -> Any:
    """The one YAML document of a file (``None`` when empty)."""
    return parse_yaml(read_text(path, max_bytes), path)


def load_yaml_all(path: str | Path, max_bytes: int = MAX_DOCUMENT_BYTES) -> list[Any]:
    """Every YAML document of a file."""
    return parse_yaml_all(read_text(path, max_bytes), path)


# ------------------------------------------------------------------------------------------------ JSON
def _check_depth(doc: Any, source: str | Path) -> None:
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > MAX_NESTING:
                raise InputFileError(f"{source}: nested deeper than {MAX_NESTING} levels")
            children = value.values() if isinstance(value, dict) else value
            stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))


def parse_json(text: str, source: str | Path) -> Any:
    """A JSON text within the nesting limit."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputFileError(f"{source}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    except RecursionError:
        raise InputFileError(f"{source}: nested deeper than {MAX_NESTING} levels") from None
    except ValueError as exc:  # an integer of more digits than Python converts
        raise InputFileError(f"{source}: {exc}") from None
    _check_depth(doc, source)
    return doc


def load_json(path: str | Path, max_bytes: int = MAX_DOCUMENT_BYTES) -> Any:
    """The JSON document of a file."""
    return parse_json(read_text(path, max_bytes), path)


__all__ = [
    "MAX_DOCUMENT_BYTES", "MAX_NESTING", "MAX_STREAM_BYTES", "MAX_YAML_NODES", "InputFileError", "YamlLines",
    "load_json", "load_yaml", "load_yaml_all", "load_yaml_lines", "open_text", "parse_json", "parse_yaml",
    "parse_yaml_all", "parse_yaml_lines", "read_bytes", "read_text",
]
