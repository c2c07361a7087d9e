"""Write-behind of scattered updates (``daskangel.server.behind-scattered``): a
server acknowledges a validated compressed-row, coordinate or packed update and
scatters it right after, on its event loop (in its thread from
``inline-scatter-bytes`` on), before any later operation but another write.

One server, no cluster (the queue's order and what a reply may precede); the
cluster paths (concurrent CSR / COO increments summing exactly, refused pushes
changing nothing, tokens after writes) run with the key's default in
``test_rowpush.py``, ``test_csrwire.py`` and ``test_versions.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import dask
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daskangel.errors import PSIndexError
from daskangel.psarray import InitSpec, PSServer
from daskangel.psarray._packed import PACK_SHIFT
from daskangel.psarray._recvpool import ReceivePool

pytestmark = pytest.mark.timeout(60)

ROWS, COLS = 4, 16  # each of the two blocks: rows [0, 4) and [4, 8) of an (8, 16) array
KEY = "daskangel.server.behind-scattered"


def _server() -> PSServer:
    s = PSServer("local", 0)
    specs = [
        {
            "block": b,
            "kind": "dense",
            "shape": (ROWS, COLS),
            "dtype": "int32",
            "init": InitSpec().to_dict(),
            "row0": b * ROWS,
            "col0": 0,
            "n_cols": COLS,
        }
        for b in range(2)
    ]
    s.dispatch("create", array="a", blocks=specs)
    return s


def _csr(block: int, rows: list[int], cols: list[list[int]], value: int = 1) -> dict[str, Any]:
    flat = [c for cs in cols for c in cs]
    return {
        "block": block,
        "csr_rows": np.array(rows, np.int32),
        "csr_len": np.array([len(cs) for cs in cols], np.int32),
        "csr_cols": np.array(flat, np.int32),
        "values": np.full(len(flat), value, np.int32),
    }


def _coo(block: int, rows: list[int], cols: list[int], value: int = 1) -> dict[str, Any]:
    return {
        "block": block,
        "coo_rows": np.array(rows, np.int64),
        "coo_cols": np.array(cols, np.int64),
        "values": np.full(len(rows), value, np.int32),
    }


def _packed(block: int, row: int, cols: list[int], value: int = 1) -> dict[str, Any]:
    bits = np.full(len(cols), value, np.int32).view(np.uint32).astype(np.uint64)
    packed = (np.array(cols, np.uint64) << np.uint64(PACK_SHIFT)) | bits
    return {"block": block, "rows": [row], "packed": packed}


PART = {
    "csr": lambda: _csr(1, [0, 3], [[1, 5], [2]], 3),
    "coo": lambda: _coo(1, [0, 0, 3], [1, 5, 2], 3),
    "packed": lambda: _packed(1, 0, [1, 5], 3),
}


def _model(kind: str) -> np.ndarray:
    want = np.zeros((2 * ROWS, COLS), np.int64)
    want[ROWS + 0, [1, 5]] += 3
    if kind != "packed":
        want[ROWS + 3, 2] += 3
    return want


async def _all(s: PSServer) -> np.ndarray:
    got = await s.run(
        "get", 0, array="a", parts=[{"block": b, "rows": None, "cols": None} for b in range(2)]
    )
    return np.concatenate(got, axis=0)


async def _warm(s: PSServer) -> None:
    """The first update of an array runs in the server's thread, undeferred (it
    may compile kernels): make it, so the next ones take the path under test."""
    await s.run("update", 0, may_defer=True, array="a", parts=[_csr(0, [0], [[0]], 0)], add=True)


def _go(fn: Callable[[PSServer], Awaitable[Any]], cfg: dict[str, Any] | None = None) -> Any:
    async def main() -> Any:
        s = _server()
        try:
            await _warm(s)
            return await fn(s)
        finally:
            s.close()

    with dask.config.set(cfg or {}):
        return asyncio.run(main())


@pytest.mark.parametrize("kind", ["csr", "coo", "packed"])
@pytest.mark.parametrize("on", [True, False])
def test_a_scattered_update_is_acknowledged_before_its_scatter(kind: str, on: bool) -> None:
    """With the key on, the reply comes back with the write queued and the block
    untouched (nothing ran on the loop in between); the next read drains the queue
    and sees it.  With the key off, the reply follows the scatter."""

    async def fn(s: PSServer) -> tuple[bool, bool, bool, np.ndarray]:
        out = await s.run("update", 64, may_defer=True, array="a", parts=[PART[kind]()], add=True)
        queued = s.behind
        untouched = not s.block("a", 1).data.any()  # type: ignore[union-attr]
        return out, queued, untouched, await _all(s)

    out, queued, untouched, got = _go(fn, {KEY: on})
    assert out is True
    assert queued is on and untouched is on
    np.testing.assert_array_equal(got, _model(kind))


@pytest.mark.parametrize("limit, in_thread", [("4MiB", False), ("0B", True)])
def test_where_the_scatter_runs_follows_the_inline_scatter_limit(
    limit: str, in_thread: bool
) -> None:
    """Under ``inline-scatter-bytes`` the scatter is queued for the event loop;
    from it on, for the server's thread (where it ran before replying, too)."""

    async def fn(s: PSServer) -> tuple[list[bool], np.ndarray]:
        await s.run("update", 64, may_defer=True, array="a", parts=[PART["csr"]()], add=True)
        where = [t for _, t, _ in s._queue]
        return where, await _all(s)

    where, got = _go(fn, {KEY: True, "daskangel.server.inline-scatter-bytes": limit})
    assert where == [in_thread]
    np.testing.assert_array_equal(got, _model("csr"))


def test_a_refused_scattered_update_queues_nothing_and_changes_nothing() -> None:
    """A column outside the block is refused at once (before any reply), while an
    accepted write is still queued: the error, nothing queued behind it, and the
    accepted write alone in the blocks."""

    async def fn(s: PSServer) -> tuple[int, int, np.ndarray]:
        await s.run("update", 64, may_defer=True, array="a", parts=[PART["csr"]()], add=True)
        before = len(s._queue)
        bad = _csr(0, [1], [[2, COLS]], 5)
        with pytest.raises(PSIndexError):
            await s.run(
                "update", 64, may_defer=True, array="a", parts=[_csr(1, [2], [[0]]), bad], add=True
            )
        return before, len(s._queue), await _all(s)

    before, after, got = _go(fn, {KEY: True})
    assert before == after == 1
    np.testing.assert_array_equal(got, _model("csr"))


def test_a_resent_tagged_scatter_is_applied_once_while_queued() -> None:
    """A tagged write resent while its first copy still waits in the queue is
    answered ``False`` (already applied) and written once."""

    async def fn(s: PSServer) -> tuple[list[Any], np.ndarray]:
        replies = []
        for _ in range(3):
            replies.append(
                await s.run(
                    "update",
                    64,
                    may_defer=True,
                    array="a",
                    parts=[PART["csr"]()],
                    add=True,
                    tag=["w", 7],
                )
            )
        return replies, await _all(s)

    replies, got = _go(fn, {KEY: True})
    assert replies == [True, False, False]
    np.testing.assert_array_equal(got, _model("csr"))


def test_queued_scatters_keep_a_snapshot_cut() -> None:
    """A cut at clock 5 is pending: a scatter of clock 3 (before the cut) and one of
    clock 7 (after it), both queued behind their replies: the cut's copy holds the
    first only, the live block both."""

    async def fn(s: PSServer) -> tuple[np.ndarray, np.ndarray]:
        await s.run("cut_begin", clock=5, cut="c")
        for clock, value in ((3, 1), (7, 10)):
            await s.run(
                "update", 64, may_defer=True, array="a", parts=[_csr(1, [2], [[4]], value)],
                add=True, clock=clock,
            )  # fmt: skip
        assert s.behind
        (cut,) = await s.run("cut_take", array="a", parts=[{"block": 1}])
        live = (await _all(s))[ROWS:]
        return cut.data, live

    cut, live = _go(fn, {KEY: True})
    assert cut[2, 4] == 1 and live[2, 4] == 11
    assert cut.sum() == 1 and live.sum() == 11


def test_a_queued_scatter_keeps_its_receive_buffer_until_applied() -> None:
    """The parts' arrays are views of a pooled receive buffer (as the push
    handler's): while the scatter waits in the queue the pool hands out another
    buffer; once it is applied, the same buffer again."""
    pool = ReceivePool(limit=1 << 20)
    sizes = [8, 8, 16, 16]

    def received() -> dict[str, Any]:
        rows, lens, cols, vals = pool.take(sizes)
        rows.view(np.int32)[:] = [0, 3]
        lens.view(np.int32)[:] = [2, 2]
        cols.view(np.int32)[:] = [1, 5, 2, 9]
        vals.view(np.int32)[:] = [4, 4, 4, 4]
        return {
            "block": 1,
            "csr_rows": rows.view(np.int32),
            "csr_len": lens.view(np.int32),
            "csr_cols": cols.view(np.int32),
            "values": vals.view(np.int32),
        }

    def base_of() -> int:
        a = pool.take(sizes)[0]
        return int(a.__array_interface__["data"][0])

    async def fn(s: PSServer) -> tuple[int, int, int, np.ndarray]:
        first = base_of()  # a free buffer: this one is handed out next
        await s.run("update", 64, may_defer=True, array="a", parts=[received()], add=True)
        queued = base_of()  # the first buffer is held by the queued scatter
        got = await _all(s)
        return first, queued, base_of(), got

    first, queued, after, got = _go(fn, {KEY: True})
    assert queued != first and after == first
    want = np.zeros((2 * ROWS, COLS), np.int64)
    want[ROWS + 0, [1, 5]] = 4
    want[ROWS + 3, [2, 9]] = 4
    np.testing.assert_array_equal(got, want)


_ENTRY = st.tuples(st.integers(0, 2 * ROWS - 1), st.integers(0, COLS - 1), st.integers(-5, 5))
_OP = st.one_of(
    st.tuples(st.just("csr"), st.lists(_ENTRY, min_size=1, max_size=12)),
    st.tuples(st.just("coo"), st.lists(_ENTRY, min_size=1, max_size=12)),
    st.tuples(st.just("set"), st.integers(0, 2 * ROWS - 1), st.integers(-9, 9)),
    st.tuples(st.just("bad"), st.lists(_ENTRY, min_size=1, max_size=4)),
    st.tuples(st.just("get"), st.integers(0, 2 * ROWS - 1)),
)


def _scattered(kind: str, entries: list[tuple[int, int, int]]) -> list[dict[str, Any]]:
    """One part a block (rows sorted for compressed rows; duplicates kept)."""
    parts = []
    for b in range(2):
        mine = sorted((r - b * ROWS, c, v) for r, c, v in entries if r // ROWS == b)
        if not mine:
            continue
        if kind == "coo":
            rs, cs, vs = zip(*mine, strict=True)
            part = _coo(b, list(rs), list(cs))
            part["values"] = np.array(vs, np.int32)
        else:
            rows = sorted({r for r, _, _ in mine})
            part = _csr(b, rows, [[c for r2, c, _ in mine if r2 == r] for r in rows])
            part["values"] = np.array([v for _, _, v in mine], np.int32)
        parts.append(part)
    return parts


@settings(deadline=None, max_examples=40)
@given(ops=st.lists(_OP, max_size=25))
def test_any_mix_of_queued_scatters_sets_refusals_and_reads_equals_the_model(
    ops: list[Any],
) -> None:
    """Compressed-row and coordinate adds (queued behind their replies), whole-row
    overwrites by dense values, refused scatters (a column out of range) and reads
    of a row, in any order on one server: every read, and the end, equal a model
    applying the accepted writes in order."""

    async def fn(s: PSServer) -> list[tuple[np.ndarray, np.ndarray]]:
        model = np.zeros((2 * ROWS, COLS), np.int64)
        seen = []
        for op in ops:
            kind = op[0]
            if kind in ("csr", "coo"):
                parts = _scattered(kind, op[1])
                await s.run("update", 64, may_defer=True, array="a", parts=parts, add=True)
                for r, c, v in op[1]:
                    model[r, c] += v
            elif kind == "set":
                r, v = op[1], op[2]
                part = {"block": r // ROWS, "rows": np.array([r % ROWS]), "cols": None,
                        "values": np.full((1, COLS), v, np.int32)}  # fmt: skip
                await s.run("update", 64, may_defer=True, array="a", parts=[part], add=False)
                model[r] = v
            elif kind == "bad":
                parts = _scattered("csr", op[1])
                parts[-1]["csr_cols"][-1] = COLS  # outside the block: refused, nothing written
                with pytest.raises(PSIndexError):
                    await s.run("update", 64, may_defer=True, array="a", parts=parts, add=True)
            else:
                r = op[1]
                (got,) = await s.run(
                    "get",
                    0,
                    array="a",
                    parts=[{"block": r // ROWS, "rows": np.array([r % ROWS]), "cols": None}],
                )
                seen.append((got[0].astype(np.int64), model[r].copy()))
        seen.append((await _all(s), model))
        return seen

    for got, want in _go(fn, {KEY: True}):
        np.testing.assert_array_equal(got, want)
