"""Readers: ``read_libsvm``, ``read_dummy``, ``read_dense``, ``read_docword``,
``read_text`` and ``read_ratings`` over any fsspec URL.

Each returns a lazy :class:`~._dataset.Dataset`; nothing is read but file sizes
(and a few header bytes) until ``.persist()``.  Paths may be a URL, a glob, a
directory or a list of them; ``.gz`` / ``.bz2`` / ``.zst`` / ``.xz`` files are
decompressed by extension (a compressed file cannot be entered in the middle, so it
is one split, or line shares of it when there are more tasks than splits).

Example
-------
>>> import fsspec, daskangel as angel
>>> with fsspec.open("memory://readers/x.svm", "wb") as f:
...     _ = f.write(b"1 1:0.5 3:1\\n0 2:1\\n")
>>> angel.data.read_libsvm("memory://readers/x.svm", label_transform="posneg")
Dataset<lazy, FileSource, storage=memory>
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidArgumentError, MalformedInputError, UnknownNameError
from ._dataset import Dataset, FileSource
from ._formats import LABEL_TRANSFORMS, Dense, Docword, Libsvm, Ratings, Tokens
from ._source import list_files, read_head

__all__ = [
    "read_csv",
    "read_dense",
    "read_docword",
    "read_dummy",
    "read_libsvm",
    "read_ratings",
    "read_text",
]


def _common(kw: dict[str, Any]) -> dict[str, Any]:
    lt = kw.get("label_transform")
    if lt not in LABEL_TRANSFORMS:
        raise InvalidArgumentError(
            f"label_transform: expected one of {LABEL_TRANSFORMS}, got {lt!r}"
        )
    return kw


def _base(zero_based: Any) -> int:
    if zero_based == "auto":
        return -1
    if isinstance(zero_based, bool):
        return 0 if zero_based else 1
    raise InvalidArgumentError(f"zero_based: expected True, False or 'auto', got {zero_based!r}")


def _n_features(n: Any) -> int:
    if n is None:
        return -1
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise InvalidArgumentError(f"n_features: expected a positive integer or None, got {n!r}")
    return n


def read_libsvm(
    paths: Any,
    *,
    n_features: int | None = None,
    zero_based: bool | str = "auto",
    compression: str | None = "infer",
    storage_options: dict[str, Any] | None = None,
    **kwargs: Any,
) -> Dataset:
    """libsvm / svmlight files: ``label idx:val idx:val ...`` (``qid:`` ignored, ``#`` comments).

    ``zero_based='auto'`` (as sklearn) treats the data as 1-based unless some
    index 0 appears.  With ``n_features`` given, an index beyond it is a malformed
    line.  Other keyword arguments (``storage``, ``memory_budget``, ``errors``,
    ``max_errors``, ``label_transform``) are those of :class:`Dataset`.
    """
    return _libsvm(paths, False, n_features, zero_based, compression, storage_options, kwargs)


def read_dummy(
    paths: Any,
    *,
    n_features: int | None = None,
    zero_based: bool | str = "auto",
    compression: str | None = "infer",
    storage_options: dict[str, Any] | None = None,
    **kwargs: Any,
) -> Dataset:
    """Angel's ``dummy`` format: ``label idx idx ...`` (every listed feature is 1)."""
    return _libsvm(paths, True, n_features, zero_based, compression, storage_options, kwargs)


def _libsvm(
    paths: Any,
    dummy: bool,
    n_features: Any,
    zero_based: Any,
    compression: Any,
    storage_options: Any,
    kw: dict[str, Any],
) -> Dataset:
    nf, base = _n_features(n_features), _base(zero_based)
    files = tuple(list_files(paths, compression, storage_options))
    src = FileSource(files, Libsvm(dummy, base, nf), 0, base, nf)
    return Dataset(src, **_common(kw))


def _first_line(head: bytes, what: str, url: str) -> list[bytes]:
    for line in head.splitlines():
        toks = line.split(b"#", 1)[0].split()
        if toks:
            return toks
    raise MalformedInputError(f"{url}: no data line in the first {len(head)} bytes ({what})")


def read_dense(
    paths: Any,
    *,
    n_features: int | None = None,
    has_label: bool = True,
    compression: str | None = "infer",
    storage_options: dict[str, Any] | None = None,
    **kwargs: Any,
) -> Dataset:
    """Dense text: ``label v1 v2 ... vn`` (``has_label=False``: values only).

    ``n_features`` defaults to the count of values on the first data line; a
    line with another count is malformed (``field_count``).
    """
    files = tuple(list_files(paths, compression, storage_options))
    nf = _n_features(n_features)
    if nf < 0:
        toks = _first_line(read_head(files[0]), "dense", files[0].url)
        nf = len(toks) - int(has_label)
    src = FileSource(files, Dense(nf, has_label), 0, 0, nf)
    return Dataset(src, **_common(kwargs))


def read_docword(
    paths: Any,
    *,
    compression: str | None = "infer",
    storage_options: dict[str, Any] | None = None,
    **kwargs: Any,
) -> Dataset:
    """UCI bag-of-words ``docword.*.txt``: header ``D``, ``W``, ``NNZ``, then
    ``docID wordID count`` (1-based).  One row per document (``row_ids`` = docID-1),
    features = the W words, values = counts.

    A document is never cut: byte ranges move to document boundaries and line
    shares of a compressed file are taken by document.

    .. warning::
       That holds for files grouped by document (as UCI's are); a document whose
       lines are scattered over the file becomes several rows with the same row id.
    """
    files = tuple(list_files(paths, compression, storage_options))
    head = read_head(files[0], 256).split(b"\n")
    try:
        w = int(head[1])
    except (IndexError, ValueError):
        raise MalformedInputError(
            f"{files[0].url}: expected the docword header (D, W, NNZ on 3 lines), got {head[:3]!r}"
        ) from None
    src = FileSource(files, Docword(n_features=w), 3, 0, w)
    return Dataset(src, header_lines=3, **_common(kwargs))


def read_text(
    paths: Any,
    *,
    lowercase: bool = True,
    seed: int = 0,
    compression: str | None = "infer",
    storage_options: dict[str, Any] | None = None,
    **kwargs: Any,
) -> Dataset:
    """Tokenised text, one document per line, split on whitespace.

    Each row is a bag of words: features are 63-bit hashes of the tokens (seeded
    with ``seed``), values their counts.  The dataset is not *indexed*: give its
    tokens dense indices with :class:`~daskangel.data.FeatureIndexer` (Angel's
    distributed counter), optionally dropping rare ones.
    """
    files = tuple(list_files(paths, compression, storage_options))
    src = FileSource(files, Tokens(bool(lowercase), int(seed)), 0, 0, -1)
    return Dataset(src, **_common(kwargs))


def read_ratings(
    paths: Any,
    *,
    sep: str | None = None,
    header: bool | str = "infer",
    n_items: int | None = None,
    compression: str | None = "infer",
    storage_options: dict[str, Any] | None = None,
    **kwargs: Any,
) -> Dataset:
    """Rating triples ``user item rating [time]`` (MovieLens ``u.data``, ``ratings.csv``,
    ``ratings.dat`` with ``::``).

    ``sep`` (default any of space, tab, ``,``, ``;``, ``:``, ``|``) separates fields;
    ``header='infer'`` skips a first line whose first field is not a number.  Ids
    are kept as given.  Rows are users (``row_ids``), features items, values
    ratings; the time, when present, is validated and dropped.

    A run of consecutive lines of one user is never cut between partitions
    (byte ranges move to user boundaries; shares of a compressed file go by user).

    .. warning::
       A user whose ratings are not consecutive in the file (``u.data`` is in time
       order) appears as several rows with the same ``row_id``, in one or several
       partitions.
    """
    files = tuple(list_files(paths, compression, storage_options))
    if header == "infer":
        toks = _first_line(read_head(files[0], 4096), "ratings", files[0].url)
        first = toks[0].split(b",")[0].split(b"::")[0]
        try:
            float(first)
            header = False
        except ValueError:
            header = True
    seps = sep if sep is not None else " \t,;:|"
    nf = _n_features(n_items)
    src = FileSource(files, Ratings(separators=seps, n_features=nf), int(bool(header)), 0, nf)
    return Dataset(src, header_lines=int(bool(header)), **_common(kwargs))


def read_csv(
    paths: Any,
    *,
    label: Any = None,
    numeric: Any = None,
    categorical: Any = (),
    cross: Any = (),
    sep: str = ",",
    header: bool = True,
    names: Any = None,
    seed: int = 0,
    compression: str | None = "infer",
    storage_options: dict[str, Any] | None = None,
    **kwargs: Any,
) -> Dataset:
    """CSV via pandas, one record per line (quoted fields may hold ``sep``, not newlines).

    ``header=True`` takes column names from each file's first line (``names=``
    overrides them); ``label`` names the label column; ``numeric`` (default: every
    other column that is not ``categorical``) and ``categorical`` columns and
    ``cross`` pairs become features as in :mod:`._tabular`: with categorical
    columns or crosses the rows hold raw keys for
    :class:`~daskangel.data.FeatureIndexer`.  Lines with the wrong number of fields
    are ``field_count`` errors; empty or non-numeric numeric cells ``non_numeric``.
    """
    from ._tabular import Csv, Table

    files = tuple(list_files(paths, compression, storage_options))
    if names is None:
        if not header:
            raise InvalidArgumentError("names: pass the column names when header=False")
        first = read_head(files[0], 1 << 16).split(b"\n", 1)[0].rstrip(b"\r")
        names = [n.strip().strip('"') for n in first.decode("utf-8", "replace").split(sep)]
    names = [str(n) for n in names]
    cat = tuple(str(c) for c in categorical)
    crs = tuple((str(a), str(b)) for a, b in cross)
    lab = None if label is None else str(label)
    num = (
        tuple(c for c in names if c != lab and c not in cat)
        if numeric is None
        else tuple(str(c) for c in numeric)
    )
    for c in (lab, *num, *cat, *[c for p in crs for c in p]):
        if c is not None and c not in names:
            raise UnknownNameError(f"column {c!r} is not among the CSV columns {names}")
    table = Table(lab, num, cat, crs, int(seed))
    fmt = Csv(tuple(names), table, sep)
    h = int(bool(header))
    src = FileSource(files, fmt, h, 0, table.n_features if table.indexed else -1)
    return Dataset(src, header_lines=h, **_common(kwargs))
