"""The dask.config keys: byte sizes parse, and a bad one names its key."""

from __future__ import annotations

import dask
import pytest

from daskangel import config, errors

pytestmark = pytest.mark.timeout(30)


def test_byte_sizes_parse_and_bad_ones_name_their_key() -> None:
    key = "daskangel.models.prepared-cache"
    with dask.config.set({key: "3MiB"}):
        assert config.get_bytes(key) == 3 * 2**20
    with dask.config.set({key: 1234}):
        assert config.get_bytes(key) == 1234
    with (
        dask.config.set({key: "lots"}),
        pytest.raises(
            errors.InvalidArgumentError, match=r"prepared-cache: expected a byte size .* got 'lots'"
        ),
    ):
        config.get_bytes(key)
    with dask.config.set({key: "lots"}), pytest.raises(ValueError):  # the builtin too
        config.get_bytes(key)


def test_keys_read_as_dask_config_reads_them() -> None:
    """The direct read agrees with ``dask.config.get``: a key set with
    underscores, one set inside a ``with``, and one restored after it."""
    key = "daskangel.client.batched-reply-bytes"
    before = config.get_bytes(key)
    with dask.config.set({"daskangel.client.batched_reply_bytes": "3KiB"}):
        assert (
            config.get_bytes(key) == 3 * 1024 == int(dask.utils.parse_bytes(dask.config.get(key)))
        )
        with dask.config.set({key: 5}):
            assert config.get(key) == 5 == dask.config.get(key)
        assert config.get_bytes(key) == 3 * 1024
    assert config.get_bytes(key) == before
    with pytest.raises(KeyError):
        config.get("daskangel.client.no-such-key")
