"""The viewer draws the newest hash: a slower, older view never lands over it.

A user who clicks before a list has loaded (or a test that opens the page and then sets a
hash) starts two views; the first one's answers may arrive last. Here the first view's
requests are held back in the page's own ``fetch`` so that they do.
"""

from __future__ import annotations

from tests.serve.test_viewer import Chromium, Pair, _open, _row_ids, _rows, _serving, browser, pair

__all__ = ["browser", "pair"]  # the fixtures, used by name below

# Requests made while window.__hold is true answer 400 ms late; __pending counts unanswered ones.
HOLD_FIRST_VIEW = """
(() => {
  const real = window.fetch.bind(window);
  window.__hold = true; window.__pending = 0;
  window.fetch = async (...args) => {
    const late = window.__hold;
    window.__pending++;
    try {
      const r = await real(...args);
      const body = await r.text();
      if (late) await new Promise((ok) => setTimeout(ok, 400));
      return new Response(body, { status: r.status, headers: r.headers });
    } finally { window.__pending--; }
  };
})();
"""


def test_a_hash_set_while_the_first_list_loads_is_what_stays_drawn(browser: Chromium, pair: Pair) -> None:
    with _serving(pair.store) as base:
        page, errors, _ = _open(browser, "about:blank")
        try:
            page.add_init_script(HOLD_FIRST_VIEW)
            page.goto(base)  # the whole list (4 episodes), answered late
            page.evaluate("window.__hold = false; location.hash = '#/?limit=2'")
            _rows(page, 2)
            page.wait_for_function("window.__pending === 0")
            page.evaluate("new Promise((ok) => setTimeout(ok, 100))")  # what the late answers would draw
            assert page.evaluate("document.body.dataset.ready") == "list"
            assert len(_row_ids(page)) == 2, "the first, older view was drawn over the newer one"
            assert "limit=2" in page.evaluate("location.hash")
        finally:
            page.close()
    assert not errors, errors
