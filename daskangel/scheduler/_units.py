"""Numbers as the dashboard shows them: bytes, durations, rates and counts.

Dask's own pages print sizes with :func:`dask.utils.format_bytes` and durations
with :func:`dask.utils.format_time`; the daskangel page uses the same functions so
that its figures read like the rest of the dashboard, and adds rates
(``"12.30 MiB/s"``, ``"1.2 k calls/s"``) and compact counts in the same style.
A zero stays a plain ``0`` (``"0 B"``, ``"0 s"``, ``"0 B/s"``) rather than
``"0.00 us"``, so an idle server is seen at a glance.

Example
-------
>>> fmt_bytes(12.3 * 2**20), fmt_rate_bytes(12.3 * 2**20), fmt_rate(1234, "calls")
('12.30 MiB', '12.30 MiB/s', '1.2 k calls/s')
>>> fmt_time(0.0012853794081681), fmt_time(0), fmt_count(1234567)
('1.29 ms', '0 s', '1.2 M')
"""

from __future__ import annotations

import math

from dask.utils import format_bytes, format_time

__all__ = [
    "fmt_bytes",
    "fmt_count",
    "fmt_metric",
    "fmt_metrics",
    "fmt_rate",
    "fmt_rate_bytes",
    "fmt_time",
]

_PREFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def _finite(x: float) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def fmt_bytes(n: float) -> str:
    """A size in bytes, as Dask writes it (``"1.21 kiB"``); ``"0 B"`` for nothing.

    >>> fmt_bytes(0), fmt_bytes(1234), fmt_bytes(16)
    ('0 B', '1.21 kiB', '16 B')
    """
    if not _finite(n) or n <= 0:
        return "0 B"
    return format_bytes(int(n))


def fmt_time(seconds: float) -> str:
    """A duration, as Dask writes it (``"1.29 ms"``, ``"3.20 s"``, ``"20m 34s"``).

    >>> fmt_time(3.2), fmt_time(0.00012345), fmt_time(1234.567)
    ('3.20 s', '123.45 us', '20m 34s')
    """
    if not _finite(seconds) or seconds <= 0:
        return "0 s"
    return format_time(float(seconds))


def fmt_count(n: float) -> str:
    """A count with a k / M / G / T prefix past a thousand (``"1.2 k"``).

    >>> fmt_count(7), fmt_count(1234), fmt_count(2.5e9), fmt_count(0.25)
    ('7', '1.2 k', '2.5 G', '0.25')
    """
    if not _finite(n) or n == 0:
        return "0"
    for base, prefix in _PREFIXES:
        if abs(n) >= base:
            return f"{n / base:.1f} {prefix}"
    if float(n).is_integer():
        return str(int(n))
    return f"{n:.3g}"


def fmt_rate_bytes(per_second: float) -> str:
    """Bytes per second (``"12.30 MiB/s"``).

    >>> fmt_rate_bytes(0), fmt_rate_bytes(2048)
    ('0 B/s', '2.00 kiB/s')
    """
    return f"{fmt_bytes(per_second)}/s"


def fmt_rate(per_second: float, unit: str) -> str:
    """Events per second with their unit (``"1.2 k calls/s"``).

    >>> fmt_rate(1234, "calls"), fmt_rate(3.5, "calls"), fmt_rate(0, "calls")
    ('1.2 k calls/s', '3.5 calls/s', '0 calls/s')
    """
    if _finite(per_second) and 0 < abs(per_second) < 1000:
        return f"{per_second:.3g} {unit}/s"
    return f"{fmt_count(per_second)} {unit}/s"


def fmt_metric(name: str, value: float) -> str:
    """One training metric: 4 significant digits; durations and rates with units.

    A name ending in ``_s`` is seconds, in ``_bytes`` bytes, in ``_per_s`` or
    ``/s`` a rate; counts of tokens or rows get a prefix.

    >>> fmt_metric("loss", 0.693147), fmt_metric("eval_s", 0.0123), fmt_metric("tokens", 123456)
    ('0.6931', '12.30 ms', '123.5 k')
    """
    if not _finite(value):
        return str(value)
    if name.endswith("_per_s") or name.endswith("/s"):
        return f"{fmt_count(value)}/s"
    if name.endswith("_s") or name == "time":
        return fmt_time(value)
    if name.endswith("_bytes") or name == "bytes":
        return fmt_bytes(value)
    if name in ("tokens", "rows", "n", "samples") or abs(value) >= 1e5:
        return fmt_count(value)
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.4g}"


def fmt_metrics(metrics: dict[str, float] | None) -> str:
    """Reported metrics as ``"k=v k=v"`` (each through :func:`fmt_metric`).

    >>> fmt_metrics({"epoch": 3, "loss": 0.5123456, "auc": 0.91})
    'epoch=3 loss=0.5123 auc=0.91'
    """
    return " ".join(f"{k}={fmt_metric(k, v)}" for k, v in (metrics or {}).items())
