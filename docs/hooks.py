"""MkDocs hooks of the site (``hooks:`` in ``mkdocs.yml``; not a page).

The figures of ``plots/`` and the notebooks of ``notebooks/`` live at the top
of the repository, not under ``docs/``.  The pages link them as they are found
from the page's own folder on GitHub (``../plots/x.png`` from ``docs/``,
``../../plots/x.png`` from ``docs/guide/``); these hooks put the two folders
into the site beside the pages and rewrite those links to match, so the same
Markdown works in both places and ``mkdocs build --strict`` checks them.  They
also drop the backslash GitHub needs before a ``|`` in a table's code, and
show the Sphinx roles of the docstrings (``:class:`~a.B```) in the API
reference as the code they name (``B``).
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
#: Top-level folders shown in the site, with the files of each that it takes.
SHARED = {"plots": (".png", ".gif", ".svg"), "notebooks": (".ipynb",)}
#: A Sphinx role as a docstring's Markdown renders it: ``:func:<code>~a.b</code>``.
ROLE = re.compile(r":(?:class|func|mod|meth|data|attr|exc|obj):\s*<code>(~?)([^<]*)</code>")


@event_priority(100)  # before mkdocs-jupyter turns the notebooks into pages
def on_files(files, config):
    """Add ``plots/*`` and ``notebooks/*.ipynb`` to the site's files."""
    for folder, endings in SHARED.items():
        for path in sorted((ROOT / folder).iterdir()):
            if path.suffix in endings and not path.name.startswith("."):
                files.append(File(f"{folder}/{path.name}", str(ROOT), config["site_dir"],
                                  config["use_directory_urls"]))
    return files


def on_page_markdown(markdown, page, config, files):
    """Links that leave ``docs/`` for a shared folder point into the site's copy;
    ``\\|`` in a table row's code (GitHub's way to keep a ``|`` there) becomes ``|``
    (Python-Markdown's tables leave code alone and would show the backslash)."""
    up = "../" * page.file.src_uri.count("/")
    for folder in SHARED:
        markdown = markdown.replace(f"]({up}../{folder}/", f"]({up}{folder}/")
    return "\n".join(_unescape_code(line) if line.startswith("|") else line
                     for line in markdown.split("\n"))


def _unescape_code(row):
    """``row`` with ``\\|`` made ``|`` inside its backtick spans."""
    parts = row.split("`")
    return "`".join(part.replace("\\|", "|") if i % 2 else part
                    for i, part in enumerate(parts))


def on_page_content(html, page, config, files):
    """The API reference's Sphinx roles as plain code (``~`` keeps the last name)."""
    if not page.file.src_uri.startswith("api/"):
        return html
    return ROLE.sub(lambda m: "<code>%s</code>" % (m.group(2).rsplit(".", 1)[-1]
                                                   if m.group(1) else m.group(2)), html)
