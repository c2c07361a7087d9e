"""The libsvm-ffm format of field-aware factorization machines: ``label field:feature:value ...``.

:func:`read_libffm` returns a lazy :class:`~._dataset.Dataset` of the rows
(features as columns, as :func:`~._readers.read_libsvm` reads them) whose
``fields`` attribute is the field of every feature (int32, ``n_features``
long; a feature that never occurs gets field 0), ready for
``FFMClassifier(fields=ds.fields)``.

* On the workers, the :class:`Libffm` format blanks every token's ``field:``
  prefix to spaces and parses what remains with the libsvm parser: the text
  keeps its length, so bad lines are reported at their place in the file.
* On the driver, :func:`scan_fields` reads the files once (in blocks, with
  fsspec: any URL, compressed or not) and records the field of every feature;
  a feature met in two fields, or a token without a field, is refused
  (:class:`~daskangel.errors.MalformedInputError` naming the file and line).

.. warning:: The field scan reads every file on the driver once, at
   ``read_libffm`` (about a second a GB uncompressed); the rows themselves are
   read on the workers at ``persist`` as for every reader.

Example
-------
>>> import fsspec, daskangel as angel
>>> with fsspec.open("memory://ffm/x.ffm", "wb") as f:
...     _ = f.write(b"1 0:0:1 1:2:0.5\\n0 0:1:1 2:3:1\\n")
>>> ds = angel.data.read_libffm("memory://ffm/x.ffm")
>>> ds.fields.tolist()
[0, 0, 1, 2]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import fsspec
import numpy as np
from numba import njit

from ..errors import InvalidArgumentError, MalformedInputError
from ._dataset import Dataset, FileSource
from ._formats import Libsvm, Parsed
from ._source import Split, list_files

__all__ = ["Libffm", "read_libffm", "scan_fields"]

_BLOCK = 1 << 26  # bytes of a file the driver's field scan reads at a time


@njit(nogil=True, cache=True)
def _blank(buf):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Blank (to spaces) the ``field:`` prefix of every ``f:j:v`` token after a line's label."""
    n = buf.shape[0]
    i = 0
    first = True  # the next token is the line's label
    while i < n:
        c = buf[i]
        if c == 10:
            first = True
            i += 1
            continue
        if c == 32 or c == 9 or c == 13:
            i += 1
            continue
        if c == 35:  # '#': a comment to the end of the line
            while i < n and buf[i] != 10:
                i += 1
            continue
        s = i
        colon = -1
        colons = 0
        while i < n and buf[i] != 32 and buf[i] != 9 and buf[i] != 10 and buf[i] != 13:
            if buf[i] == 58:
                colons += 1
                if colon < 0:
                    colon = i
            i += 1
        if not first and colons == 2:
            for q in range(s, colon + 1):
                buf[q] = 32
        first = False


@njit(nogil=True, cache=True)
def _scan(buf, base, fmap, line0):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Fill ``fmap[feature] = field`` from whole lines; returns ``(code, line, a, b, c)``:
    0 done (``a``: the largest feature seen); 1 ``fmap`` too small (``a``: the size
    needed); 2 feature ``a`` in fields ``b`` and ``c``; 3 a token without a field."""
    n = buf.shape[0]
    i = 0
    line = line0
    first = True
    hi = -1
    while i < n:
        c = buf[i]
        if c == 10:
            first = True
            line += 1
            i += 1
            continue
        if c == 32 or c == 9 or c == 13:
            i += 1
            continue
        if c == 35:
            while i < n and buf[i] != 10:
                i += 1
            continue
        colons = 0
        f = 0
        j = 0
        nf = 0
        nj = 0
        digits = True
        while i < n and buf[i] != 32 and buf[i] != 9 and buf[i] != 10 and buf[i] != 13:
            d = buf[i]
            if d == 58:
                colons += 1
            elif colons < 2 and 48 <= d <= 57:
                if colons == 0:
                    f = f * 10 + (d - 48)
                    nf += 1
                else:
                    j = j * 10 + (d - 48)
                    nj += 1
            elif colons < 2:
                digits = False
            i += 1
        if first:
            first = False
            continue
        if colons != 2 or not digits or nf == 0 or nj == 0:
            return 3, line, 0, 0, 0
        j -= base
        if j < 0:
            return 3, line, 0, 0, 0
        if j >= fmap.shape[0]:
            return 1, line, j + 1, 0, 0
        if fmap[j] < 0:
            fmap[j] = f
        elif fmap[j] != f:
            return 2, line, j, fmap[j], f
        if j > hi:
            hi = j
    return 0, line, hi, 0, 0


def _scan_block(buf: np.ndarray, base: int, fmap: np.ndarray, line0: int, url: str) -> np.ndarray:
    while True:
        code, line, a, b, c = _scan(buf, base, fmap, line0)
        if code == 1:  # grow and scan the block again (entries already set agree)
            grown = np.full(max(int(a), 2 * fmap.shape[0]), -1, np.int64)
            grown[: fmap.shape[0]] = fmap
            fmap = grown
            continue
        if code == 2:
            raise MalformedInputError(
                f"{url}: line {line + 1}: feature {a + base} is in field {c}, but an earlier "
                f"line put it in field {b} (a field-aware model needs one field per feature)"
            )
        if code == 3:
            raise MalformedInputError(
                f"{url}: line {line + 1}: expected field:feature:value tokens after the label "
                f"(non-negative integer field and feature{' >= 1' if base else ''})"
            )
        return fmap


def scan_fields(files: list[Any], base: int, storage_options: dict[str, Any] | None) -> np.ndarray:
    """The field of every feature seen in ``files`` (``-1``: never seen), read on the driver."""
    fmap = np.full(1024, -1, np.int64)
    for info in files:
        url = info.url if hasattr(info, "url") else str(info)
        comp = getattr(info, "compression", None)
        with fsspec.open(url, "rb", compression=comp, **(storage_options or {})) as fh:
            carry = b""
            line0 = 0
            while True:
                block = fh.read(_BLOCK)
                data = carry + block
                if not block:
                    cut = len(data)
                else:
                    cut = data.rfind(b"\n") + 1
                buf = np.frombuffer(data[:cut], np.uint8)
                fmap = _scan_block(buf, base, fmap, line0, url)
                line0 += data.count(b"\n", 0, cut)
                carry = data[cut:]
                if not block:
                    break
    return fmap


@dataclass(frozen=True, slots=True)
class Libffm:
    """``label field:feature:value ...``: the fields blanked, the rest parsed as libsvm."""

    base: int = 0
    n_features: int = -1

    row_ids = False
    indexed = True

    def parse(
        self, data: np.ndarray, line0: int, split: Split, stop: bool, detail: int, max_line: int
    ) -> Parsed:
        buf = np.array(data, np.uint8)  # a copy: the block may be a read-only view
        _blank(buf)
        return Libsvm(False, self.base, self.n_features).parse(
            buf, line0, split, stop, detail, max_line
        )


def read_libffm(
    paths: Any,
    *,
    n_features: int | None = None,
    zero_based: bool = True,
    compression: str | None = "infer",
    storage_options: dict[str, Any] | None = None,
    **kwargs: Any,
) -> Dataset:
    """libsvm-ffm files (``label field:feature:value ...``, 0-based by default, as libffm).

    Returns a lazy Dataset whose ``fields`` is the field of every feature
    (see the module docstring).  ``n_features``: the feature count (default: the
    largest feature seen + 1).  Other keyword arguments are those of
    :class:`~._dataset.Dataset` (``storage``, ``errors``, ``label_transform`` ...).
    """
    from ._readers import _common, _n_features

    if not isinstance(zero_based, bool):
        raise InvalidArgumentError(f"zero_based: expected True or False, got {zero_based!r}")
    nf, base = _n_features(n_features), 0 if zero_based else 1
    files = tuple(list_files(paths, compression, storage_options))
    fmap = scan_fields(list(files), base, storage_options)
    seen = np.flatnonzero(fmap >= 0)
    n = int(seen[-1]) + 1 if seen.size else 0
    if nf > 0:
        if n > nf:
            raise MalformedInputError(f"{paths}: feature {n - 1 + base} is beyond n_features={nf}")
        n = nf
    fields = np.where(fmap[:n] >= 0, fmap[:n], 0).astype(np.int32)
    src = FileSource(files, Libffm(base, n if n > 0 else -1), 0, base, n if n > 0 else -1)
    ds = Dataset(src, **_common(kwargs))
    ds.fields = fields
    return ds
