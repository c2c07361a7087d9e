"""The libsvm-ffm reader: fields blanked in place for the libsvm parser, the field scan, bad files.

No cluster here: the format's ``parse`` and the driver's field scan run in this
process (reading a file into a Dataset and fitting ``FFMClassifier`` on it is in
``tests/models/fm/test_estimators.py``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from daskangel import data
from daskangel.data._ffm import Libffm
from daskangel.data._source import FileInfo, Split
from daskangel.errors import InvalidArgumentError, MalformedInputError

pytestmark = pytest.mark.timeout(60)


def test_parse_drops_the_fields_and_keeps_the_text_in_place() -> None:
    text = b"1 0:0:1 1:2:0.5 # c:1:2\n-1 0:1:1 2:3:2.5\n"
    split = Split(FileInfo("f", len(text), None, 0), 0, len(text))
    raw = np.frombuffer(text, np.uint8)  # read-only, as a block of a file
    p = Libffm(0, 4).parse(raw, 0, split, False, 10, 1024)
    assert p.batch is not None
    assert p.batch.indptr.tolist() == [0, 2, 4]
    assert p.batch.indices.tolist() == [0, 2, 1, 3]
    assert p.batch.data.tolist() == [1.0, 0.5, 1.0, 2.5]
    assert p.batch.labels.tolist() == [1.0, -1.0]
    assert bytes(raw) == text  # the block itself is untouched


def test_read_libffm_finds_the_field_of_every_feature(tmp_path: Path) -> None:
    path = tmp_path / "x.ffm"
    path.write_text("1 0:0:1 2:5:1\n0 1:3:1 0:0:1\n1 2:5:0.5\n")
    ds = data.read_libffm(str(path))
    assert ds.fields is not None
    assert ds.fields.tolist() == [0, 0, 0, 1, 0, 2]  # features 1, 2, 4 never occur: field 0
    one = tmp_path / "one.ffm"
    one.write_text("1 1:1:1 3:2:1\n")
    fields = data.read_libffm(str(one), zero_based=False, n_features=3).fields
    assert fields is not None and fields.tolist() == [1, 3, 0]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (
            "1 0:0:1\n0 1:0:1\n",
            r"line 2: feature 0 is in field 1, but an earlier line put it in field 0",
        ),
        ("1 0:0:1\n0 3:1\n", r"line 2: expected field:feature:value"),
        ("1 a:0:1\n", r"line 1: expected field:feature:value"),
    ],
)
def test_a_bad_ffm_file_is_refused_naming_the_line(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "bad.ffm"
    path.write_text(text)
    with pytest.raises(MalformedInputError, match=match):
        data.read_libffm(str(path))


def test_bad_arguments(tmp_path: Path) -> None:
    path = tmp_path / "x.ffm"
    path.write_text("1 0:4:1\n")
    with pytest.raises(MalformedInputError, match="beyond n_features=3"):
        data.read_libffm(str(path), n_features=3)
    with pytest.raises(InvalidArgumentError, match="zero_based"):
        data.read_libffm(str(path), zero_based="auto")  # type: ignore[arg-type]
