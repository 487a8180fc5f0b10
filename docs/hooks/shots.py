"""``make docs-shots``: screenshots of the built docs site as a reader sees it, for review (not a test).

Serves ``site/`` (``mkdocs build``) on 127.0.0.1 only, and has headless Chromium (``/usr/bin/chromium``,
Debian's package, which the make target installs when missing) take each main page's first screen at a
desktop width (1280 px) and a phone width (390 px), and a taller view of it at 1280 px, into
``runs/docs-shots/``. Chromium's background networking is off: it reaches nothing but the local server.

    python docs/hooks/shots.py [--site site] [--out runs/docs-shots]
"""

from __future__ import annotations

import argparse
import functools
import http.server
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

#: The pages a newcomer reads first, as their paths in the built site.
PAGES = {
    "home": "",
    "getting-started": "getting-started/",
    "environments": "environments/",
    "learning": "learning/",
    "benchmarks": "benchmarks/",
    "examples": "examples/",
    "api": "api/",
}
#: (name, width, height): a desktop's and a phone's first screen, and a taller desktop view.
VIEWS = (("1280", 1280, 800), ("390", 390, 844), ("1280-tall", 1280, 2400))
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--hide-scrollbars",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # no line per request
        pass


def _serve(site: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def shoot(site: Path, out: Path, chromium: str) -> list[Path]:
    """Every page of :data:`PAGES` in every view of :data:`VIEWS`; returns the files written."""
    if not (site / "index.html").is_file():
        raise SystemExit(f"{site}/index.html: no built site (run: mkdocs build)")
    out.mkdir(parents=True, exist_ok=True)
    server, base = _serve(site)
    written = []
    try:
        for page, path in PAGES.items():
            for view, width, height in VIEWS:
                target = out / f"{page}-{view}.png"
                with tempfile.TemporaryDirectory() as profile:
                    subprocess.run(
                        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
                         f"--screenshot={target}", base + path],
                        check=True, capture_output=True, timeout=120,
                    )  # fmt: skip
                written.append(target)
                print(target, flush=True)
    finally:
        server.shutdown()
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", default="site", help="the built site (mkdocs build)")
    parser.add_argument("--out", default="runs/docs-shots", help="where the screenshots go")
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("no chromium on PATH: make docs-shots installs Debian's (apt-get install chromium)")
    shoot(Path(args.site), Path(args.out), chromium)


if __name__ == "__main__":
    main()
