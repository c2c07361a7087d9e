"""Make docs/images/dashboard.png: the daskangel dashboard page after two real fits.

Starts a LocalCluster (2 workers, 1 thread each) with its dashboard, fits a
LogisticRegression and a Ridge on synthetic data through one PSContext (so the
page has two jobs' metrics, rates over time and the arrays table), then drives a
headless Chromium at ``/daskangel`` and saves a screenshot.

Browsers, in this order:

1. playwright (``pip install playwright``), with its own Chromium
   (``playwright install chromium``) or the system's (``apt-get install chromium``,
   found on the PATH, or ``--chromium PATH``);
2. selenium (``pip install selenium``) with a chromedriver on the PATH.

Without either it says what it needs and exits with status 2.  ``--route cli``
uses Chromium's own ``--headless --screenshot`` instead; it shoots before the
page's websocket has delivered the document (only the navigation bar shows), so
it is never picked by itself.  Not run by
the test suite (it takes about a minute); run it from the repository root::

    python docs/screenshots/make_dashboard_screenshot.py [--out docs/images/dashboard.png]
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
WIDTH, HEIGHT = 1400, 2300
SETTLE_S = 4.0  # the page draws from its websocket; give it a few refreshes


def find_chromium(given: str | None) -> str | None:
    if given:
        return given
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


def what_is_available() -> list[str]:
    routes = []
    if importlib.util.find_spec("playwright") is not None:
        routes.append("playwright")
    if importlib.util.find_spec("selenium") is not None and shutil.which("chromedriver"):
        routes.append("selenium")
    return routes


def shoot_playwright(url: str, out: pathlib.Path, chromium: str | None) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        try:
            browser = p.chromium.launch(headless=True)
        except Exception:
            if not chromium:
                raise
            browser = p.chromium.launch(headless=True, executable_path=chromium)
        page = browser.new_page(viewport={"width": WIDTH, "height": 1000})
        page.goto(url, wait_until="load")
        page.wait_for_selector(".slick-row", timeout=60_000)  # the tables have rows
        page.wait_for_timeout(int(SETTLE_S * 1000))
        page.screenshot(path=str(out), full_page=True)
        browser.close()


def shoot_selenium(url: str, out: pathlib.Path, chromium: str | None) -> None:
    from selenium import webdriver

    opts = webdriver.ChromeOptions()
    opts.add_argument("--headless=new")
    opts.add_argument(f"--window-size={WIDTH},{HEIGHT}")
    opts.add_argument("--no-sandbox")
    if chromium:
        opts.binary_location = chromium
    driver = webdriver.Chrome(options=opts)
    try:
        driver.get(url)
        time.sleep(SETTLE_S)
        driver.save_screenshot(str(out))
    finally:
        driver.quit()


def shoot_cli(url: str, out: pathlib.Path, chromium: str | None) -> None:
    assert chromium is not None
    with tempfile.TemporaryDirectory() as profile:
        cmd = [
            chromium,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            f"--window-size={WIDTH},{HEIGHT}",
            f"--virtual-time-budget={int(SETTLE_S * 1000)}",
            f"--screenshot={out}",
            url,
        ]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)


SHOOTERS = {"playwright": shoot_playwright, "selenium": shoot_selenium, "cli": shoot_cli}


def fit_two_models(client: Any) -> tuple[Any, Any, Any]:
    """A classifier and a regressor through one context: two jobs on the page."""
    import numpy as np

    import daskangel as angel
    from daskangel.models import LogisticRegression, Ridge

    rng = np.random.default_rng(0)
    X = rng.normal(size=(20_000, 40))
    coef = rng.normal(size=40)
    y_cls = (X @ coef + rng.normal(size=20_000) > 0).astype(int)
    y_reg = X @ coef + 0.5 * rng.normal(size=20_000)
    ps = angel.PSContext(client)
    ps.zeros("embedding", shape=(4096, 16), dtype="float32")  # a second kind of array
    clf = LogisticRegression(ps=ps, max_iter=12, random_state=0, progress=False)
    clf.fit(X, y_cls)
    reg = Ridge(ps=ps, max_iter=12, random_state=0, progress=False)
    reg.fit(X, y_reg)
    ps.status(max_age=0)
    return ps, clf, reg


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "images" / "dashboard.png"))
    ap.add_argument("--chromium", default=None, help="path of a Chromium / Chrome binary")
    ap.add_argument("--route", choices=sorted(SHOOTERS), default=None)
    args = ap.parse_args(argv)
    chromium = find_chromium(args.chromium)
    routes = [args.route] if args.route else what_is_available()
    if not routes:
        print(
            "make_dashboard_screenshot: no way to drive a headless browser.  It needs one of:\n"
            "  * pip install playwright, and a Chromium: `playwright install chromium`, or the\n"
            "    system's (apt-get install chromium) on the PATH or given with --chromium PATH\n"
            "  * pip install selenium, a Chromium and its chromedriver on the PATH\n"
            f"  (Chromium found: {chromium or 'none'})",
            file=sys.stderr,
        )
        return 2
    import dask
    from distributed import Client, LocalCluster

    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    dask.config.set({"daskangel.dashboard.rate-interval": "250ms"})
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):
        ps, *_models = fit_two_models(client)  # the models keep their arrays on the page
        url = client.dashboard_link.replace("/status", "/daskangel")
        errors = []
        for route in routes:
            try:
                SHOOTERS[route](url, out, chromium)
            except Exception as e:  # noqa: BLE001 - try the next route, report them all
                errors.append(f"{route}: {e!r}")
                continue
            print(f"wrote {out} ({out.stat().st_size} bytes) with {route} from {url}")
            ps.close()  # type: ignore[attr-defined]
            return 0
        print("make_dashboard_screenshot: every route failed:\n  " + "\n  ".join(errors))
        return 1


if __name__ == "__main__":
    sys.exit(main())
