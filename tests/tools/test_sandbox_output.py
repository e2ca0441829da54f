"""The sandbox's random work directory never shows in what a program prints."""

from __future__ import annotations

from orchestrion.tools.python_exec import SHOWN_WORKDIR, run_sandboxed


async def test_tracebacks_and_paths_name_the_work_dir_the_same_every_time() -> None:
    code = "import os\nprint(os.getcwd())\nraise ValueError('boom')"
    first = await run_sandboxed(code, timeout_s=20)
    second = await run_sandboxed(code, timeout_s=20)
    assert first.workdir != second.workdir  # two throw-away folders...
    assert first.stdout == second.stdout == SHOWN_WORKDIR + "\n"  # ...printed the same
    assert f'File "{SHOWN_WORKDIR}/main.py"' in first.stderr and first.stderr == second.stderr
    assert "orchestrion-sbx" not in first.stderr + first.stdout
