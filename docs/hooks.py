"""MkDocs hooks of the site (``hooks:`` in ``mkdocs.yml``; not a page).

The pages link files kept outside ``docs/`` (the figures of ``plots/``, the
notebooks of ``notebooks/``, a script of ``scenarios/``) as they are found from
the page's own folder on GitHub: ``../plots/x.png`` from ``docs/``,
``../../plots/x.png`` from ``docs/guide/``.  These hooks put every such file
into the site, at its place in the repository (``plots/x.png``), and every
notebook (the navigation lists them), and rewrite those links to match, so the
same Markdown works in both places and ``mkdocs build --strict`` checks them.
They also drop the backslash GitHub needs before a ``|`` in a table's code, and
show the Sphinx roles of the docstrings (``:class:`~a.B```) in the API
reference as the code they name (``B``).
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
#: A Markdown link's target (up to an anchor or a title).
LINK = re.compile(r"\]\(([^)\s#]+)")
#: A Sphinx role as a docstring's Markdown renders it: ``:func:<code>~a.b</code>``.
ROLE = re.compile(r":(?:class|func|mod|meth|data|attr|exc|obj):\s*<code>(~?)([^<]*)</code>")


def _outside(page_uri, url):
    """The repository path (``plots/x.png``) that ``url`` on the page ``page_uri``
    names, if it is a file of the repository outside ``docs/``; else None."""
    if "://" in url or url.startswith(("/", "mailto:")):
        return None
    target = posixpath.normpath(posixpath.join("docs", posixpath.dirname(page_uri), url))
    if target.startswith(("../", "docs/")) or target in (".", "docs"):
        return None
    # a Markdown file out there would become a page: leave it to fail the build
    return target if (ROOT / target).is_file() and not target.endswith(".md") else None


@event_priority(100)  # before mkdocs-jupyter turns the notebooks into pages
def on_files(files, config):
    """Add every notebook, and every repository file a page links, to the site."""
    wanted = {f"notebooks/{p.name}" for p in (ROOT / "notebooks").glob("*.ipynb")}
    for page in files.documentation_pages():
        for url in LINK.findall(Path(page.abs_src_path).read_text(encoding="utf-8")):
            target = _outside(page.src_uri, url)
            if target:
                wanted.add(target)
    for path in sorted(wanted):
        if files.get_file_from_path(path) is None:
            files.append(File(path, str(ROOT), config["site_dir"], config["use_directory_urls"]))
    return files


def on_page_markdown(markdown, page, config, files):
    """Links that leave ``docs/`` point into the site's copy; ``\\|`` in a table
    row's code (GitHub's way to keep a ``|`` there) becomes ``|``
    (Python-Markdown's tables leave code alone and would show the backslash)."""
    up = "../" * page.file.src_uri.count("/")
    markdown = markdown.replace(f"]({up}../", f"]({up}")
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
