#!/usr/bin/env python3
"""Opens every page of the built book in a real browser (headless Chromium) and fails on what
`mdbook build` cannot see: raw TeX left unrendered, a file the page asks for that is missing
(an image, a stylesheet, a script), or a message on the browser's console. Takes screenshots
of key pages.

    python3 book/browser/check.py [BOOK_HTML_DIR] [SCREENSHOT_DIR]

defaults: book/book (what `mdbook build book` writes) and target/book-screenshots. Needs
Chromium (Debian's `chromium` package; CHROMIUM=path to use another binary). The pages are
served from a local HTTP server on 127.0.0.1, so the browser loads them as a reader's would;
nothing is fetched from the network.
"""

import html.parser
import http.server
import os
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

KEY_PAGES = ["introduction.html", "03_tiled_forward.html", "10_fast_gpu.html", "11_decoding.html"]
BROWSER_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                 "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000"]
# TeX that KaTeX should have turned into MathML: a $...$ or $$...$$ span, or a command.
RAW_TEX = re.compile(r"\$\$|\$[^$\s][^$]*?\$|\\(frac|mathrm|sum|sqrt|le|ge|cdot|infty|exp|ln|max|"
                     r"ast|top|mathrel|left|right|alpha|beta|lambda|qquad|quad|big|textstyle)\b")


class Server(http.server.ThreadingHTTPServer):
    """Serves the book and remembers every request that found no file."""

    def __init__(self, root):
        self.missing = []
        handler = lambda *a, **k: Handler(*a, directory=str(root), **k)
        super().__init__(("127.0.0.1", 0), handler)


class Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def send_error(self, code, *args, **kwargs):
        if code == 404:
            self.server.missing.append(self.path)
        super().send_error(code, *args, **kwargs)


class Text(html.parser.HTMLParser):
    """The text a reader sees: everything outside code, math, scripts and styles."""

    SKIP = {"code", "pre", "math", "script", "style", "title", "textarea"}

    def __init__(self):
        super().__init__()
        self.depth = 0
        self.parts = []

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIP:
            self.depth += 1

    def handle_endtag(self, tag):
        if tag in self.SKIP and self.depth > 0:
            self.depth -= 1

    def handle_data(self, data):
        if self.depth == 0:
            self.parts.append(data)


def browser():
    for name in [os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"]:
        if name and subprocess.run(["sh", "-c", f"command -v {name}"], capture_output=True).returncode == 0:
            return name
    sys.exit("no Chromium found: install Debian's `chromium` package, or set CHROMIUM")


def open_page(chromium, url, extra):
    """The page's DOM after its scripts ran (with --dump-dom), and its console messages."""
    with tempfile.TemporaryDirectory() as profile:
        try:
            run = subprocess.run([chromium, *BROWSER_FLAGS, f"--user-data-dir={profile}", *extra, url],
                                 capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            return "", [f"{url}: the browser did not finish within 120 s"]
    console = [line for line in run.stderr.splitlines() if ":CONSOLE" in line]
    return run.stdout, console


def console_is_captured(chromium):
    """Whether this Chromium reports console messages where open_page looks for them: a page
    that logs one must show it, or the check would pass whatever the book's pages log."""
    with tempfile.TemporaryDirectory() as folder:
        page = Path(folder) / "control.html"
        page.write_text("<html><body><script>console.error('control')</script></body></html>")
        _, console = open_page(chromium, page.as_uri(), ["--dump-dom"])
    return any("control" in line for line in console)


def main():
    book = Path(sys.argv[1] if len(sys.argv) > 1 else "book/book")
    shots = Path(sys.argv[2] if len(sys.argv) > 2 else "target/book-screenshots")
    pages = sorted(str(p.relative_to(book)) for p in book.rglob("*.html")
                   if p.name not in {"print.html", "toc.html", "404.html"})
    if "introduction.html" not in pages:
        sys.exit(f"{book}: no built book here (run `mdbook build book` first)")
    chromium = browser()
    if not console_is_captured(chromium):
        sys.exit(f"{chromium} reported no console message for a page that logs one: this check "
                 "cannot see console errors with it")
    missing_key_pages = [page for page in KEY_PAGES if page not in pages]
    if missing_key_pages:
        sys.exit(f"{book}: no {', '.join(missing_key_pages)} to take screenshots of")
    shots.mkdir(parents=True, exist_ok=True)
    server = Server(book)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    problems = []
    for page in pages:
        server.missing.clear()
        dom, console = open_page(chromium, base + page, ["--dump-dom"])
        if "</html>" not in dom:
            problems.append(f"{page}: the browser returned no page")
        text = Text()
        text.feed(dom)
        visible = " ".join(text.parts)
        for match in RAW_TEX.finditer(visible):
            context = visible[max(0, match.start() - 40):match.end() + 40].replace("\n", " ")
            problems.append(f"{page}: raw TeX `{match.group(0)}` in: ...{context}...")
        problems += [f"{page}: missing file {path}" for path in server.missing]
        problems += [f"{page}: console: {line}" for line in console]
        images = len(re.findall(r"<img\b", dom))
        print(f"{page}: {images} images, {len(dom)} bytes of page")
    for page in KEY_PAGES:
        out = shots / page.replace(".html", ".png")
        out.unlink(missing_ok=True)
        open_page(chromium, base + page, [f"--screenshot={out.resolve()}", "--window-size=1280,2400"])
        if not out.exists() or out.stat().st_size == 0:
            problems.append(f"{page}: no screenshot")
    server.shutdown()
    print(f"screenshots of {', '.join(KEY_PAGES)} in {shots}")
    if problems:
        print("\n".join(["", "Problems:"] + problems), file=sys.stderr)
        return 1
    print(f"{len(pages)} pages opened in {chromium}: no raw TeX, no missing file, no console message")
    return 0


if __name__ == "__main__":
    sys.exit(main())
