"""Check that a built documentation site (``mkdocs build -d DIR``) is viewed offline: no page or
stylesheet loads a font, script, stylesheet or image from another host.

Links to other sites (``<a href="https://...">``) are fine: following one is the reader's choice.
What is refused is what a browser fetches by itself: ``<script src>``, ``<link href>`` (fonts,
stylesheets, preconnects), ``<img src>``/``<iframe src>``/``<source src>``, CSS ``@import`` and
``url(...)`` with an ``http(s)://`` or protocol-relative ``//`` address. Material's JavaScript
bundle names unpkg.com twice, for a ResizeObserver polyfill (loaded only by browsers without
ResizeObserver) and for mermaid (loaded only by pages with a mermaid diagram); a page with a
mermaid diagram is therefore refused too.

Usage: python scripts/check_site_offline.py SITE_DIR   (exit status 1 and one line per finding)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

#: an address on another host: http://, https:// or protocol-relative //
REMOTE = r"""(?:https?:)?//[^"'\s)>]+"""
FETCHED_IN_HTML = re.compile(
    r"""<(?:script|img|iframe|source|embed|audio|video)\b[^>]*\bsrc\s*=\s*["']?(""" + REMOTE + ")"
    r"""|<link\b[^>]*\bhref\s*=\s*["']?(""" + REMOTE + ")", re.I)
FETCHED_IN_CSS = re.compile(r"""@import\s+(?:url\()?["']?(""" + REMOTE + r")|url\(\s*[\"']?(" + REMOTE + ")", re.I)
MERMAID = re.compile(r"""class\s*=\s*["'][^"']*\bmermaid\b""", re.I)
#: <link> relations that fetch nothing (a page's canonical address, the site's own feeds)
HARMLESS_LINK = re.compile(r"""<link\b[^>]*\brel\s*=\s*["']?(?:canonical|alternate|author|license)\b""", re.I)


def findings(site: Path) -> list[str]:
    """Every remote fetch in the HTML and CSS files under ``site``, as ``file: address`` lines."""
    bad = []
    for path in sorted(site.rglob("*")):
        if path.suffix not in {".html", ".css"}:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        where = path.relative_to(site).as_posix()
        if path.suffix == ".html":
            for m in FETCHED_IN_HTML.finditer(text):
                if m.group(2) and HARMLESS_LINK.match(m.group(0)):
                    continue
                bad.append(f"{where}: fetches {m.group(1) or m.group(2)}")
            if MERMAID.search(text):
                bad.append(f"{where}: a mermaid diagram (Material loads mermaid from unpkg.com)")
            for m in re.finditer(r"<style\b[^>]*>(.*?)</style>", text, re.S | re.I):
                bad += [f"{where}: fetches {a or b}" for a, b in FETCHED_IN_CSS.findall(m.group(1))]
        else:
            bad += [f"{where}: fetches {a or b}" for a, b in FETCHED_IN_CSS.findall(text)]
    return bad


def main() -> None:
    site = Path(sys.argv[1])
    if not (site / "index.html").is_file():
        print(f"Error: {site} holds no built site (no index.html)", file=sys.stderr)
        sys.exit(2)
    bad = findings(site)
    for line in bad:
        print(line, file=sys.stderr)
    pages = sum(1 for _ in site.rglob("*.html"))
    print(f"{pages} HTML pages checked: {'no remote fetch' if not bad else f'{len(bad)} remote fetches'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
