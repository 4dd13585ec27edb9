"""One table of data-file formats for every reader: the generator, the file ingress, the
monitoring streamlets' datasets and `streamflow score`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from streamflow.score import inputs
from streamflow.streamlets import datasets
from streamflow.streamlets.io import reading


@pytest.mark.parametrize(
    ("name", "fmt"),
    [("a.jsonl", "jsonl"), ("a.NDJSON", "jsonl"), ("a.json", "jsonl"), ("a.csv", "csv"),
     ("a.parquet", "parquet"), ("a.pq", "parquet")],
)  # fmt: skip
def test_every_reader_reads_an_extension_the_same_way(name: str, fmt: str) -> None:
    assert inputs.data_format(Path(name)) == fmt
    assert datasets.dataset_format(f"https://example.org/data/{name}?v=2") == fmt
    if fmt != "parquet":
        assert reading.file_format(name) == fmt


def test_a_reader_names_only_the_extensions_it_reads() -> None:
    with pytest.raises(ValueError, match=r"\(\.csv, \.json, \.jsonl, \.ndjson\): set the format"):
        reading.file_format("rows.parquet")
    with pytest.raises(inputs.InputError, match=r"\.pq\): pass --format"):
        inputs.data_format(Path("rows.xlsx"))
    with pytest.raises(datasets.DatasetError, match="set the reference format"):
        datasets.dataset_format("file:///data/reference")


def test_a_declared_format_wins_and_an_unknown_one_is_refused() -> None:
    assert inputs.data_format(Path("rows.txt"), "csv") == "csv"
    assert datasets.dataset_format("https://example.org/ref", "parquet") == "parquet"
    with pytest.raises(ValueError, match=r"cannot tell the format of 'rows\.txt'"):
        reading.file_format("rows.txt", "auto")  # auto: by its extension, which says nothing
    with pytest.raises(datasets.DatasetError, match="unknown format 'xls'"):
        datasets.dataset_format("ref.csv", "xls")


@pytest.mark.parametrize(
    ("fmt", "data", "problem"),
    [
        ("csv", b"a,b\n1,2\n3\n", "reference line 3: the row has 1 cells, the header names 2"),
        ("csv", b"a,b\n1,2\n3,4,5\n", "reference line 3: the row has 3 cells, the header names 2"),
        ("jsonl", b'{"a": 1}\n{"a": 2\n', "reference line 2: "),
        ("jsonl", b'{"a": 1}\n{"a": "\xff"}\n', "reference line 2: not UTF-8"),
        ("jsonl", b'{"a": 1}\n[1, 2]\n', "reference line 2 is not a JSON object"),
        ("csv", b"a\xff,b\n1,2\n", "reference line 1: not UTF-8: byte 0xff in the header"),
    ],
)
def test_a_reference_row_that_cannot_be_read_is_refused_by_its_line(
    fmt: str, data: bytes, problem: str
) -> None:
    """The reference datasets read JSON lines and CSV as every other reader does: a ragged
    CSV row or a byte that is not UTF-8 was taken as it came (a missing cell, a U+FFFD),
    and the window was compared with a reference that was not the file's."""
    with pytest.raises(datasets.DatasetError, match=re.escape(problem)):
        datasets.read_columns(data, fmt=fmt, numeric=["a"])


def test_a_reference_read_as_every_reader_reads_it_keeps_its_columns() -> None:
    csv_columns = datasets.read_columns(
        b"a,b,c\n1,x,2.5\n,y,3\n", fmt="csv", numeric=["a", "c"], categorical=["b"]
    )
    assert csv_columns["b"] == ["x", "y"]
    assert list(csv_columns["c"]) == [2.5, 3.0]
    assert csv_columns["a"][0] == 1.0 and str(csv_columns["a"][1]) == "nan"  # empty: missing
    jsonl_columns = datasets.read_columns(
        b'\xef\xbb\xbf{"a": 1, "b": "x"}\n\n{"a": 2.5, "b": "y"}\n',
        fmt="jsonl",
        numeric=["a"],
        categorical=["b"],
    )
    assert list(jsonl_columns["a"]) == [1.0, 2.5] and jsonl_columns["b"] == ["x", "y"]
