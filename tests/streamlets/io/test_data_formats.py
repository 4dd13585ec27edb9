"""One table of data-file formats for every reader: the generator, the file ingress, the
monitoring streamlets' datasets and `streamflow score`."""

from __future__ import annotations

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
