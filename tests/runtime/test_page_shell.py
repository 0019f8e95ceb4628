"""The web page's files are each page's own part; `page_shell.render_page` writes the shell around them once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agentq.api.page_shell import MENU, render_page

STATIC = Path(__file__).resolve().parents[2] / "agentq" / "api" / "static"
PAGES = sorted(STATIC.glob("*.html"))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_page_renders_whole_with_the_menu_and_only_files_that_ship(page: Path):
    html = render_page(page.read_text(encoding="utf-8"))
    assert html.startswith("<!doctype html>") and html.endswith("</body>\n</html>\n")
    assert html.count('<main id="main"') == 1 and html.count("</header>") == 1
    menu = html[html.index('<nav aria-label="Main">'):html.index("</nav>")]
    assert [label for _, label in MENU] == re.findall(r'<a href="[^"]+"(?: aria-current="page")?>([^<]+)</a>', menu)
    assert len(re.findall(r'aria-current="page"', html)) <= 1
    for name in re.findall(r'(?:src|href)="/static/([\w.-]+)"', html):
        assert (STATIC / name).is_file(), f"{page.name} names /static/{name}, which does not ship"


def test_the_menu_marks_the_page_it_is_on():
    html = render_page('<!-- page {"title": "schedules", "scripts": ["s.js"], "current": "/schedules"} -->\n'
                       '  <main id="main"></main>\n')
    assert '<a href="/schedules" aria-current="page">Schedules</a>' in html
    assert "<title>agentq · schedules</title>" in html and '<script type="module" src="/static/s.js">' in html


def test_a_page_file_without_its_first_line_or_its_main_is_refused():
    with pytest.raises(ValueError, match="begins with"):
        render_page("<main></main>\n")
    with pytest.raises(ValueError, match="<main>"):
        render_page('<!-- page {"title": "x"} -->\n<p>no main</p>\n')
