"""The one file reader (``gpucluster.inputfile``): limits hold for any nesting, any alias fan-out, any bytes."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.inputfile import (
    MAX_NESTING,
    InputFileError,
    load_json,
    open_text,
    parse_json,
    parse_yaml,
    parse_yaml_lines,
    read_text,
)


@settings(max_examples=60, deadline=None)
@given(depth=st.integers(1, 3 * MAX_NESTING), flow=st.booleans())
def test_yaml_nesting_is_read_up_to_the_limit_and_refused_beyond(depth: int, flow: bool) -> None:
    text = ("[" * depth + "]" * depth) if flow else "".join("  " * i + "- \n" for i in range(depth - 1)) + \
        "  " * (depth - 1) + "- x\n"
    if depth <= MAX_NESTING:
        assert parse_yaml(text, "f.yaml") == yaml.safe_load(text)
    else:
        with pytest.raises(InputFileError, match=r"^f\.yaml: line \d+: .*nested deeper than 64 levels"):
            parse_yaml(text, "f.yaml")


@settings(max_examples=40, deadline=None)
@given(width=st.integers(1, 12), levels=st.integers(1, 12))
def test_aliases_are_followed_up_to_the_expansion_limit(width: int, levels: int) -> None:
    lines = [f"a0: &a0 [{', '.join(['x'] * width)}]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    text = "\n".join(lines) + "\n"
    expanded = sum(width ** (k + 1) + sum(width ** j for j in range(1, k + 1)) for k in range(levels))
    if expanded + 2 * levels + 1 <= 5_000_000:
        assert parse_yaml(text, "a.yaml") == yaml.safe_load(text)
    elif expanded > 6_000_000:
        with pytest.raises(InputFileError, match="alias bomb"):
            parse_yaml(text, "a.yaml")


@settings(max_examples=40, deadline=None)
@given(depth=st.integers(1, 3 * MAX_NESTING))
def test_json_nesting(depth: int) -> None:
    text = "[" * depth + "]" * depth
    if depth <= MAX_NESTING:
        assert parse_json(text, "j.json") == json.loads(text)
    else:
        with pytest.raises(InputFileError, match="nested deeper than 64 levels"):
            parse_json(text, "j.json")


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=64))
def test_any_bytes_are_text_or_refused_naming_the_file(tmp_path_factory: pytest.TempPathFactory,
                                                       data: bytes) -> None:
    f = tmp_path_factory.mktemp("bytes") / "b.yaml"
    f.write_bytes(data)
    try:
        want = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError:
        want = None
    if want is None or "\0" in want:
        with pytest.raises(InputFileError, match=rf"^{re.escape(str(f))}: byte \d+: "):
            read_text(f)
    else:
        assert read_text(f) == want


def test_non_regular_files_are_refused_before_reading(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(InputFileError, match="is a FIFO"):
        read_text(fifo)  # opening a FIFO without a writer would block: it is never opened
    with pytest.raises(InputFileError, match="is a device"):
        read_text("/dev/zero")
    with pytest.raises(InputFileError, match="is a directory"):
        load_json(tmp_path)
    with pytest.raises(InputFileError, match="no such file"):
        read_text(tmp_path / "missing")
    big = tmp_path / "big.yaml"
    with big.open("wb") as fh:
        fh.truncate(33 * 2**20)
    with pytest.raises(InputFileError, match=r"34,603,008 bytes; at most 33,554,432 are read"):
        read_text(big)


def test_a_stream_names_a_bad_byte_after_the_first_block(tmp_path: Path) -> None:
    f = tmp_path / "t.csv"
    f.write_bytes(b"a,b\n" + b"1,2\n" * 5000 + b"\xff\n")
    with pytest.raises(InputFileError, match=r"t\.csv: not UTF-8 text"), open_text(f) as fh:
        for _ in fh:
            pass


def test_a_yaml_key_given_twice_is_an_error_a_merged_key_given_again_is_not() -> None:
    """YAML wants a mapping's keys unique; PyYAML kept the last of two silently (on main before this test), so a
    spec, a job file or a quota file written with one key twice lost a value without a word."""
    with pytest.raises(InputFileError, match=r"f\.yaml: line 3: .*key 'gpus' is given twice .*line 2"):
        parse_yaml("id: a\ngpus: 1\ngpus: 8\n", "f.yaml")
    with pytest.raises(InputFileError, match="key '1' is given twice"):
        parse_yaml("{1: a, 0x1: b}", "f.yaml")  # the same key, however it is written
    doc = parse_yaml("base: &b {x: 1, y: 2}\nm:\n  <<: *b\n  x: 3\nn: {1: a, '1': b}\n", "f.yaml")
    assert doc == {"base": {"x": 1, "y": 2}, "m": {"x": 3, "y": 2}, "n": {1: "a", "1": "b"}}


def test_yaml_lines_name_where_each_part_was_written() -> None:
    """``parse_yaml_lines``: a pydantic-style path -> its line; a part the document lacks -> the line of what
    would hold it (a required field left out is reported on its item's line)."""
    text = "a: 1\nitems:\n  - {x: 1}\n  -\n    x: 2\n    y:\n      - 3\n"
    doc, lines = parse_yaml_lines(text, "f.yaml")
    assert doc == {"a": 1, "items": [{"x": 1}, {"x": 2, "y": [3]}]}
    assert [lines.line(loc) for loc in (("a",), ("items", 0), ("items", 0, "x"), ("items", 1), ("items", 1, "x"),
                                        ("items", 1, "y", 0), ("items", 1, "z"), ("items", 9), ())] == \
        [1, 3, 3, 5, 5, 7, 5, 2, 1]
    assert parse_yaml_lines("", "f.yaml")[0] is None
    with pytest.raises(InputFileError, match=r"f\.yaml: line 2: .*given twice"):
        parse_yaml_lines("a: 1\na: 2\n", "f.yaml")
