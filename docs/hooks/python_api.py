"""MkDocs hook: the Python API reference, one mkdocstrings block per module of ``dpcalc``'s
public surface.

``docs/reference/python-api.md`` holds the marker ``<!-- dpcalc-python-api -->``; this hook
replaces it with a ``::: module`` block (members: the names ``dpcalc`` re-exports from that
module, read from ``dpcalc._MODULES``) for every module, so a new export is documented at the
next build and nothing is listed by hand. mkdocstrings then renders the docstrings.
"""

from __future__ import annotations

MARKER = "<!-- dpcalc-python-api -->"


def api_blocks() -> str:
    """The Markdown of the API reference: a heading and a mkdocstrings block per module."""
    import dpcalc

    parts = []
    for module, names in dpcalc._MODULES.items():
        members = "\n".join(f"        - {n}" for n in names)
        parts.append(f"## `{module}`\n\n::: {module}\n    options:\n      show_root_heading: false\n"
                     f"      members:\n{members}\n")
    return "\n".join(parts)


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 - MkDocs hook signature
    """Replace the marker in the API page with the generated blocks."""
    if MARKER in markdown:
        return markdown.replace(MARKER, api_blocks())
    return markdown
