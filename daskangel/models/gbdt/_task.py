"""The boosting task: one per partition, in one group, rounds as clocks, levels as commands.

Every task of a fit runs :class:`BoostTask` under ``angel.train`` in a single
group (lockstep).  A round (one clock) grows ``K`` trees level by level, each
level one exchange of the group channel:

1. the leader (rank 0) sends the level's command (``grow``: splits of the level
   above, nodes to build; ``leaves``: the last splits and the finished trees;
   ``values``: renewed leaf values, absolute loss only);
2. every task applies the splits to its row partition, builds the histograms
   of the listed nodes over its rows and pushes them into the histogram array
   (one increment of the level's columns, only the touched bins), and
   acknowledges (with its root totals at level 0, its bytes, its metric sums
   at the end);
3. the leader finds the splits on the servers (``_grower``) and sends the next
   command.

At the end of a round the leader writes the trees into the ``trees`` array,
turns the tasks' metric sums into one ``history_`` row (``ctx.report``, and a
row of the ``metrics`` array), and decides on early stopping; the next round's
first command is then ``stop``.  The histogram array is zeroed at the start of
every round.  A task starting at a later clock (a resumed fit, a rollback to a
snapshot) first adds the finished rounds' trees to its margins, and the leader
reads their history back (``_resume``).

Example
-------
>>> angel.train(ps, BoostTask(plan), dataset, groups=1, group_size=n)  # doctest: +SKIP
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .._core._metrics import auc_from_hist, should_stop
from ._grower import Grower
from ._plan import Plan
from ._resume import history_rows, metrics_values
from ._rows import prepare
from ._trees import NF
from ._worker import RowState

__all__ = ["BoostTask", "metrics_row"]


def metrics_row(plan: Plan, acks: list[dict[str, Any]]) -> dict[str, float]:
    """One ``history_`` row from every task's sums of a round."""
    tr = np.sum([a["train"] for a in acks], axis=0)
    out: dict[str, float] = {}
    if tr[1] > 0:
        out["train_loss"] = float(tr[0] / tr[1])
    st = np.sum([a["stats"] for a in acks], axis=0)
    n = float(st[0])
    if n <= 0:
        return out
    out["val_loss"] = float(st[1] / n)
    if plan.classifier:
        out["val_accuracy"] = float(st[2] / n)
    else:
        out["val_rmse"] = float(np.sqrt(st[3] / n))
        out["val_mae"] = float(st[4] / n)
    if plan.loss == 0:
        neg = np.zeros(plan.nbins)
        pos = np.zeros(plan.nbins)
        for a in acks:
            if "auc" in a:
                idx = np.asarray(a["auc"][0], np.int64)
                neg[idx] += a["auc"][1]
                pos[idx] += a["auc"][2]
        out["val_auc"] = auc_from_hist(neg, pos)
    return out


class BoostTask:
    """``fn(ctx, partition)`` of a GBDT fit (see the module docstring)."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    def __call__(self, ctx: Any, part: Any) -> dict[str, Any]:
        p = self.plan
        tm = dict.fromkeys(("prep", "grad", "hist", "push", "split", "finish", "wait", "find"), 0.0)
        t0 = time.perf_counter()
        rows = prepare(
            part, p.spec, p.val_fraction, p.seed, p.zero_is_value, p.dense_fraction, p.classes
        )
        st = RowState(p, rows)
        tm["prep"] = time.perf_counter() - t0
        leader = ctx.is_leader
        size = ctx.group_size
        hist = ctx.array(p.hist)
        trees = ctx.array(p.trees)
        metrics = ctx.array(p.metrics)
        grower = Grower(p, hist) if leader else None
        history: list[dict[str, float]] = []
        built = min(int(ctx.iteration), p.n_estimators)  # > 0: resumed, or rolled back
        if built:
            t0 = time.perf_counter()
            flat = np.asarray(trees.plain.get(rows=np.arange(built * p.K)), np.float64)
            st.replay(flat.reshape(built * p.K, p.max_nodes, NF))
            if leader:
                history = history_rows(metrics.plain.get(rows=np.arange(built)), 0)
            tm["prep"] += time.perf_counter() - t0
        stop = self._stop(history) if history else False
        seconds: list[float] = []  # wall time of each round
        for it in ctx.epochs(p.n_estimators):
            t_round = time.perf_counter()
            if grower is not None:
                if stop:
                    ctx.send([{"op": "stop"}] * size)
                else:
                    hist.fill(0.0)
                    ctx.send([grower.start(it)] * size)
            t0 = time.perf_counter()
            cmd = ctx.receive()
            tm["wait"] += time.perf_counter() - t0
            if cmd["op"] == "stop":
                ctx.ack(None)
                break
            t0 = time.perf_counter()
            totals = st.start_round(it, part.index)
            tm["grad"] += time.perf_counter() - t0
            while True:
                op = cmd["op"]
                t0 = time.perf_counter()
                st.split(cmd.get("splits", []))
                t1 = time.perf_counter()
                tm["split"] += t1 - t0
                payload: Any
                if op == "grow":
                    payload = {"pushed": self._push(hist, st, cmd["build"], tm)}
                    if cmd["level"] == 0:
                        payload["totals"] = totals
                elif op == "leaves" and p.loss == 3:
                    payload = {"renew": st.residuals(cmd["trees"])}
                else:
                    payload = st.finish(cmd["trees"])
                    tm["finish"] += time.perf_counter() - t1
                ctx.ack(payload)
                final = op == "values" or (op == "leaves" and p.loss != 3)
                if grower is not None:
                    t0 = time.perf_counter()
                    acks = ctx.wait_acks()
                    if final:
                        trees.set(grower.tree_rows(), rows=np.arange(it * p.K, (it + 1) * p.K))
                        row = {"iteration": it + 1, **metrics_row(p, acks)}
                        metrics.set(metrics_values(row)[None, :], rows=np.arange(it, it + 1))
                        history.append(row)
                        ctx.report(**row)  # live: the progress bar, ps.status(), the dashboard
                        stop = self._stop(history)
                    else:
                        if op == "grow" and cmd["level"] == 0:
                            grower.set_roots(np.sum([a["totals"] for a in acks], axis=0))
                        if op == "grow":
                            nxt = grower.after_level(sum(int(a["pushed"]) for a in acks))
                        else:
                            grower.renew([a["renew"] for a in acks])
                            nxt = {"op": "values", "trees": grower.tree_lists()}
                        ctx.send([nxt] * size)
                    tm["find"] += time.perf_counter() - t0
                if final:
                    break
                t0 = time.perf_counter()
                cmd = ctx.receive()
                tm["wait"] += time.perf_counter() - t0
            built = it + 1
            ctx.clock()
            seconds.append(time.perf_counter() - t_round)
        out: dict[str, Any] = {
            "trees": built, "timings": tm, "rows": rows.n, "round_seconds": seconds,
        }  # fmt: skip
        if grower is not None:
            out["history"] = history
            out["levels"] = grower.levels
        return out

    def _push(self, hist: Any, st: RowState, build: list[list[int]], tm: dict[str, float]) -> int:
        """Build and push the listed nodes' histograms; bytes sent."""
        if not build:
            return 0
        t0 = time.perf_counter()
        vals, rows = st.histograms(build)
        t1 = time.perf_counter()
        c0 = int(build[0][2])
        cols = slice(c0, c0 + vals.shape[1])
        if rows is None or rows.shape[0]:
            hist.increment_async(vals, rows=rows, cols=cols).result()
        tm["hist"] += t1 - t0
        tm["push"] += time.perf_counter() - t1
        return int(vals.nbytes + (0 if rows is None else rows.nbytes))

    def _stop(self, history: list[dict[str, float]]) -> bool:
        p = self.plan
        if p.patience <= 0:
            return False
        key = "val_loss" if "val_loss" in history[-1] else "train_loss"
        return should_stop(history, key, p.tol, p.patience)
