"""The README's results table is the results page's, not a second copy typed by hand.

``docs/results/local-pool.md`` holds the headline table between ``<!-- results:local-pool:start -->``
and ``<!-- results:local-pool:end -->``; ``python docs/gen_pages.py`` copies that block into the
README. These tests fail while the two differ, and while a figure the README's results prose
quotes is not on the results page.
"""

from __future__ import annotations

import re

import pytest

from tests.docs.test_generated import DOCS, _gen

ROOT = DOCS.parent


@pytest.mark.parametrize("name", _gen().README_RESULTS)
def test_readme_results_block_is_the_results_pages(name: str) -> None:
    gen = _gen()
    page = DOCS / "results" / f"{name}.md"
    block = gen.results_block(page.read_text(encoding="utf-8"), name, str(page))
    shown = gen.results_block((ROOT / "README.md").read_text(encoding="utf-8"), name, "README.md")
    assert "|---|" in block, f"{page}: the marked block holds no table"
    assert shown == block, (f"README.md's results:{name} block differs from {page.relative_to(ROOT)}'s; "
                            "edit the results page and run `python docs/gen_pages.py`")


def test_the_readme_results_prose_quotes_only_figures_on_the_results_pages() -> None:
    """Each figure is on local-pool.md (the headline's page) or on a page a bench wrote (--fragment)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Results", 1)[1].split("\n## ", 1)[0]
    pages = [(DOCS / "results" / "local-pool.md").read_text(encoding="utf-8")]
    pages += [text for path in sorted((DOCS / "results").glob("*.md"))
              if (text := path.read_text(encoding="utf-8")).startswith("<!-- written by bench/")]
    figures = re.findall(r"[+-]?\d+\.\d+(?: ± \d+\.\d+)?×?", section)
    assert figures, "the README's results section quotes no figure: is the section still there?"
    missing = [f for f in figures if not any(f in page for page in pages)]
    assert not missing, f"README.md's results section quotes figures no results page holds: {missing}"


def test_a_changed_results_page_is_copied_into_the_readme() -> None:
    gen = _gen()
    readme, expected = "intro\n", "intro\n"
    for name in gen.README_RESULTS:  # each block from its own page, the text around them kept
        start, end = gen.results_markers(name)
        page = (DOCS / "results" / f"{name}.md").read_text(encoding="utf-8")
        block = gen.results_block(page, name, "page")
        readme += f"{start}\n| old |\n{end}\nbetween\n"
        expected += f"{start}{block}{end}\nbetween\n"
    assert gen.readme_markdown(readme) == expected
    assert "heldout-rgym-combined" in gen.README_RESULTS  # the held-out table, written by bench/heldout_combine.py
