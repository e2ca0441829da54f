"""The test log says which sandbox ran: the isolation each backend's probe found on this host, how
the whole-call limits were enforced, and how many sandbox tests were skipped, and why."""

from __future__ import annotations

from collections import Counter
from typing import Any

SANDBOX_TESTS = ("tests/tools/test_sandbox_attacks.py", "tests/tools/test_python_exec.py")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    from orchestrion.tools import _limits, _sandbox

    ran = [r for r in terminalreporter.stats.get("passed", []) + terminalreporter.stats.get("failed", [])
           if r.nodeid.startswith(SANDBOX_TESTS)]
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if r.nodeid.startswith(SANDBOX_TESTS)]
    if not ran and not skipped:
        return
    works = ", ".join(f"{b} {'works' if ok else 'unavailable'}" for b, ok in sorted(_sandbox.works.items()))
    made = _limits.create(64, 8, 8)
    _limits.release(made)
    reasons = Counter(str(r.longrepr[-1]) if isinstance(r.longrepr, tuple) else str(r.longrepr) for r in skipped)
    terminalreporter.write_sep("-", "python sandbox")
    terminalreporter.write_line(f"isolation probed: {works or 'none probed'}; whole-call limits: {made.mode}; "
                                f"{len(ran)} sandbox tests ran, {len(skipped)} skipped")
    for reason, n in reasons.most_common():
        terminalreporter.write_line(f"  skipped {n}: {reason.removeprefix('Skipped: ')}")
