"""Fresh-process checks: the lazy sparse.COO serialiser, config defaults that survive
``dask.config.set`` blocks."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(120)

CODE = """
import sys
import daskangel
assert "sparse" not in sys.modules and "sklearn" not in sys.modules, "imported eagerly"
import numpy as np, sparse
from distributed.protocol import deserialize, serialize
x = sparse.COO(np.array([[0, 1], [2, 3]]), np.array([1.5, 2.5], "float32"), shape=(4, 4),
               fill_value=np.float32(0.5))
h, f = serialize(x)
y = deserialize(h, f)
assert h["serializer"] == "dask", h
assert isinstance(y, sparse.COO) and y.fill_value == 0.5 and y.dtype == np.float32
np.testing.assert_array_equal(y.todense(), x.todense())
print("ok")
"""


def test_sparse_serialiser_registers_lazily_in_a_fresh_process() -> None:
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=100)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


CONFIG_CODE = """
import dask
with dask.config.set({"daskangel.models.in-place": False}):
    import daskangel  # first import inside the block: its defaults merge in here
    assert daskangel.config.get("daskangel.models.in-place") is False
# leaving the block removed every daskangel key; daskangel's getters bring the defaults back
assert daskangel.config.get("daskangel.models.in-place") is True
assert daskangel.config.get_bytes("daskangel.client.max-request-bytes") > 0
assert daskangel.config.get_seconds("daskangel.client.call-timeout") > 0
print("ok")
"""


def test_config_defaults_survive_a_set_block_around_the_first_import() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CONFIG_CODE], capture_output=True, text=True, timeout=100
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_workers_info_asks_the_scheduler_not_the_clients_cache(client: Any) -> None:
    """The client's periodic refresh caches an identity without workers; a read of
    ``scheduler_info()`` racing with it saw none (a flaky test on a healthy cluster)."""
    from daskangel._compat import workers_info

    client.sync(client._update_scheduler_info, n_workers=0)  # what the refresh stores
    assert client._scheduler_identity["workers"] == {}
    got = workers_info(client)
    assert len(got) == len(client.cluster.workers) == 2
    assert all("nthreads" in w for w in got.values())
