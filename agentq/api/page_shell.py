"""The web page's HTML: each page file in `static/` holds only what is its own — a first line naming its title,
its scripts and styles and which menu entry it is, what it adds to the top bar, and its `<main>` — and the shell
around it (the head, the top bar, the menu) is written once here, so the pages cannot drift apart.

A page file begins with ``<!-- page {"title": ..., "scripts": [...], "styles": [...], "current": "/path"} -->``;
`render_page` returns the whole document.
"""

from __future__ import annotations

import json
import re
from html import escape

MENU = (("/", "Jobs"), ("/schedules", "Schedules"), ("/rollouts", "Rollouts"), ("/docs", "API docs"))
FRONT = re.compile(r"<!-- page (\{.*\}) -->\n")

SHELL = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <meta name="color-scheme" content="light dark">
  <title>agentq · {title}</title>
  <link rel="icon" href="/static/favicon.svg" type="image/svg+xml">
  <link rel="stylesheet" href="/static/agentq.css">
{head}</head>
<body>
  <a class="skip-link" href="#main">Skip to content</a>
  <header class="topbar">
    <a class="brand" href="/"><img src="/static/favicon.svg" alt="" width="22" height="22"> agentq</a>
    <nav aria-label="Main">
{menu}    </nav>
{topbar}  </header>

{main}</body>
</html>
"""


def render_page(source: str) -> str:
    """The document of a page file (see the module's docstring); a ValueError names what the file lacks."""
    front = FRONT.match(source)
    if front is None:
        raise ValueError("a page file begins with <!-- page {...} -->")
    page = json.loads(front.group(1))
    body = source[front.end():]
    start = body.find("  <main")
    if start < 0:
        raise ValueError("a page file holds its <main>")
    head = "".join(f'  <link rel="stylesheet" href="/static/{escape(name)}">\n' for name in page.get("styles", ())) \
        + "".join(f'  <script type="module" src="/static/{escape(name)}"></script>\n'
                  for name in page.get("scripts", ()))
    current = ' aria-current="page"'
    menu = "".join(f'      <a href="{path}"{current if path == page.get("current") else ""}>{label}</a>\n'
                   for path, label in MENU)
    return SHELL.format(title=escape(page["title"]), head=head, menu=menu, topbar=body[:start], main=body[start:])
