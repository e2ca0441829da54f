"""The `orchestrion` command line.

Commands: run | trace | tool | pool | strategies | serve | view | eval | report | datasets | train.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Annotated

import orjson
import typer
from rich.markup import escape
from rich.table import Table

from .._version import UNKNOWN, __version__
from ..models.pool import load_pool
from ..status import ToolStatus
from ..strategies.registry import strategies
from ..tools.defaults import default_tools
from ..trace import check_output_file
from ..trace.export import export_jsonl
from ..trace.store import TraceStore, default_db_path, open_for_reading
from . import _auto, _datasets, _eval, _models, _report, _run, _train_data, _train_rl, _train_sft
from ._common import (
    DbOpt,
    PoolOpt,
    at_most,
    err,
    fail,
    friendly,
    note_opened,
    out,
    out_folder,
    show_flags_as_switches,
    utf8_text,
)
from ._otel import OtlpOpt, export_otlp
from ._otel import episode_id as _episode_id
from ._render import episode_tree, list_episodes, task_prompt

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Learned agentic orchestration: run, trace and compare orchestration strategies.")
trace_app = typer.Typer(no_args_is_help=True, help="Inspect recorded episodes.")
app.add_typer(trace_app, name="trace")
show_flags_as_switches()
_run.register(app)  # first in --help, as the command most people start with


def open_store(db: Path | None) -> TraceStore:
    """The trace store at ``db`` (or the default) for a reading command, which never creates one."""
    path = Path(db) if db is not None else default_db_path()
    note_opened(path)  # a damaged file is then named in the one-line error
    return open_for_reading(path)


def _print_version(value: bool) -> None:
    if value:
        hint = " (not installed: `pip install -e .` records the version)" if __version__ == UNKNOWN else ""
        out.print(f"orchestrion {__version__}{hint}", highlight=False)
        raise typer.Exit()


@app.callback()
def _options(
    show_version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                               help="print the version and exit")] = False,
) -> None:
    pass

@trace_app.command("show")
@friendly
def trace_show(trace_id: Annotated[str, typer.Argument(callback=utf8_text("trace id"))], db: DbOpt = None) -> None:
    """Print an episode as a tree of decisions, calls and sub-agent steps."""
    out.print(episode_tree(open_store(db), trace_id), highlight=False)


@trace_app.command("list")
@friendly
def trace_list(db: DbOpt = None,
               limit: Annotated[int, typer.Option("--limit", min=1, max=1_000_000,
                                                  help="most episodes listed, newest first")] = 20) -> None:
    """List recent episodes."""
    table = Table("trace id", "strategy", "status", "tokens", "cost", "task")
    for ep in list_episodes(open_store(db), limit):
        cost = "unknown" if ep.cost_usd is None else f"${ep.cost_usd:.6f}"
        status = ep.status if ep.finished else f"{ep.status} (unfinished)"
        table.add_row(ep.id, ep.strategy, status, str(ep.input_tokens + ep.output_tokens), cost, task_prompt(ep)[:60])
    out.print(table)


@trace_app.command("export")
@friendly
def trace_export(
    ids: Annotated[list[str], typer.Argument(help="trace ids; none = every episode",
                                             callback=utf8_text("trace id"))] = [],  # noqa: B006
    out_path: Annotated[Path, typer.Option("--out", help="JSONL file to write")] = Path("traces.jsonl"),
    db: DbOpt = None,
    fmt: Annotated[str, typer.Option(
        "--format", help="jsonl (a file) or otlp (OpenTelemetry spans sent to --otlp-endpoint)")] = "jsonl",
    otlp_endpoint: OtlpOpt = None,
) -> None:
    """Export episodes (spans, events, decisions) as JSON lines, or as OpenTelemetry spans over OTLP/HTTP."""
    if fmt == "jsonl":
        check_output_file(out_path)  # before anything is read: a directory or a missing folder is one line
    store = open_store(db)
    if fmt == "otlp":
        chosen_ids = [_episode_id(store, i) for i in ids] if ids else store.episode_ids()
        n_sent = export_otlp(store, chosen_ids, otlp_endpoint)
        err.print(f"sent {n_sent} episodes as OpenTelemetry traces")
        if n_sent < len(chosen_ids):
            raise typer.Exit(1)
        return
    if fmt != "jsonl":
        fail(f"--format {fmt}: choose jsonl or otlp")
    chosen = ids or store.episode_ids()
    n = export_jsonl(store, chosen, out_path)
    err.print(f"wrote {n} episodes to {out_path}")


@app.command()
@friendly
def tool(
    name: Annotated[str, typer.Argument(help="tool name, e.g. python or calculator")],
    args: Annotated[str, typer.Argument(help="JSON arguments, e.g. '{\"code\": \"print(1)\"}'")] = "{}",
    corpus: Annotated[Path | None, typer.Option("--corpus", help="folder or JSONL for the retrieve tool")] = None,
) -> None:
    """Run one tool directly and print its result envelope as JSON."""
    try:
        parsed = orjson.loads(args)
    except orjson.JSONDecodeError as exc:
        fail(f"ARGS: not valid JSON ({exc}); give a JSON object, e.g. '{{\"code\": \"print(1)\"}}'")
    if not isinstance(parsed, dict):
        kind = {list: "array", str: "string", bool: "boolean", type(None): "null"}.get(type(parsed), "number")
        fail(f"ARGS: expected a JSON object of named arguments, got a JSON {kind}; "
             "e.g. '{\"code\": \"print(1)\"}' for the python tool")
    registry = default_tools(corpus)
    if name not in registry:
        registry.get(name)  # raises ToolNotFoundError with the list of tools
    if registry.get(name).kind == "agent":
        err.print(f"'{name}' is an agent tool; it needs a model: try `orchestrion run` instead")
        raise typer.Exit(2)
    result = asyncio.run(registry.call(name, parsed))
    sys.stdout.write(result.model_dump_json(indent=2) + "\n")
    if result.status is not ToolStatus.OK:  # the envelope is printed either way; the exit code says it failed
        first = (result.error or "").strip().splitlines()
        fail(f"tool {name}: {result.status.value}" + (f": {first[-1][:300]}" if first else ""),
             code=2 if result.status is ToolStatus.INVALID_ARGS else 1)


@app.command("pool")
@friendly
def pool_cmd(pool: PoolOpt = None) -> None:
    """Print the model pool: names, tiers, prices, limits."""
    the_pool = load_pool(pool)
    table = Table("name", "backend", "tier", "units/1k tok", "context", "$/Mtok in", "$/Mtok out", "concurrency",
                  "description",
                  title=f"pool: {the_pool.source}")
    for row in the_pool.describe():
        price_in = "unknown" if row["price_in"] is None else f"{row['price_in']:g}"
        price_out = "unknown" if row["price_out"] is None else f"{row['price_out']:g}"
        table.add_row(row["name"], row["backend"], str(row["tier"]), f"{row['units_per_1k']:g}", str(row["context"]),
                      price_in, price_out,
                      str(row["concurrency"]), row["description"])
    out.print(table)
    out.print(
        f"orchestrator: {the_pool.orchestrator}   synthesizer: {the_pool.synthesizer}   executor: {the_pool.executor}"
    )


@app.command("strategies")
@friendly
def strategies_cmd(
    name: Annotated[str | None,
                    typer.Argument(help="a strategy: print its options (name, type, default, description)")] = None,
    names: Annotated[bool, typer.Option("--names",
                                        help="names only, one per line (with NAME: its option names)")] = False,
) -> None:
    """List the orchestration strategies, or the options of one (`orchestrion strategies para`)."""
    from ..runtime.options import options_table
    from ..strategies.registry import get_strategy

    found = strategies()
    if name is not None:
        chosen = type(get_strategy(name))  # an unknown name: one-line error naming the known ones, exit 2
        rows = options_table(chosen.Options)
        if names:
            sys.stdout.write("\n".join(row[0] for row in rows) + "\n")
            return
        table = Table("option", "type", "default", "description",
                      title=f"{name}: {chosen.summary}",
                      caption="set with --set KEY=VALUE, or in pool.yaml under strategies:")
        for row in rows:
            table.add_row(*row)
        out.print(table, highlight=False, markup=False)
        return
    if names:
        sys.stdout.write("\n".join(sorted(found)) + "\n")
        return
    table = Table("name", "follows", "what it does")
    for name in sorted(found):
        cls = found[name]
        table.add_row(name, cls.paper, cls.summary)
    out.print(table)


@app.command()
@friendly
def serve(
    pool: PoolOpt = None,
    db: DbOpt = None,
    host: Annotated[str, typer.Option("--host", help="bind address; loopback by default")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535)] = 8000,
    api_key_env: Annotated[str | None, typer.Option("--api-key-env",
                                                    help="env var holding the API key clients must send")] = None,
    max_concurrent: Annotated[int, typer.Option("--max-concurrent", min=1, help="episodes at once; more get 429")] = 16,
    max_body_kb: Annotated[int, typer.Option("--max-body-kb", min=1,
                                             help="largest request body; larger get 413")] = 256,
    max_tokens_cap: Annotated[int | None, typer.Option(
        "--max-tokens-cap", min=1, help="per-request cap on the episode token budget and on max_tokens")] = None,
    insecure_no_auth: Annotated[bool, typer.Option(
        "--insecure-no-auth", help="allow a non-loopback --host without --api-key-env (anyone can use it)")] = False,
    errors_as_200: Annotated[bool, typer.Option(
        "--errors-as-200", help="an episode that ends in error answers 200 (status in the body), not 502")] = False,
    client_tool_timeout_s: Annotated[float, typer.Option(
        "--client-tool-timeout-s", min=0.001, help="how long an episode that called client tools waits for "
        "their results (the client's next request); then it ends interrupted")] = 600.0,
) -> None:
    """Serve every strategy as a model over an OpenAI-compatible API (/v1/chat/completions), with
    /health and Prometheus /metrics. A non-loopback --host needs --api-key-env (or --insecure-no-auth)."""
    from ..serve.server import ServeSettings, run_server

    at_most("--max-concurrent", max_concurrent, 100_000)
    at_most("--max-body-kb", max_body_kb, 1024 * 1024)
    at_most("--max-tokens-cap", max_tokens_cap, 2**31)
    run_server(ServeSettings(pool=pool, db=db, host=host, port=port, api_key_env=api_key_env,
                             max_concurrent=max_concurrent, max_body_bytes=max_body_kb * 1024,
                             max_tokens_cap=max_tokens_cap, insecure_no_auth=insecure_no_auth,
                             errors_as_200=errors_as_200, client_tool_timeout_s=client_tool_timeout_s))


@app.command()
@friendly
def view(
    db: DbOpt = None,
    host: Annotated[str, typer.Option("--host")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535)] = 8765,
    export: Annotated[Path | None, typer.Option("--export", callback=out_folder("--export"),
                                                help="write a static bundle to DIR instead of serving")] = None,
    api_key_env: Annotated[str | None, typer.Option(
        "--api-key-env", help="env var holding the key the browser must give (login prompt password)")] = None,
    insecure_no_auth: Annotated[bool, typer.Option(
        "--insecure-no-auth", help="allow a non-loopback --host without --api-key-env (anyone can read)")] = False,
) -> None:
    """Browse runs and episodes in a web page: search, pages, plan DAG, timeline, decisions, costs,
    two episodes of one task side by side; running episodes update live. A non-loopback --host
    needs --api-key-env (or --insecure-no-auth); an exported bundle is owner-only."""
    from ..serve.viewer import export_static, run_viewer

    if export is not None:
        index = export_static(open_store(db), export)
        err.print(f"wrote {index}; open it in a browser")
    else:
        run_viewer(open_store(db), host=host, port=port, api_key_env=api_key_env, insecure_no_auth=insecure_no_auth)


# Evaluation and training commands live beside their code; each module adds its own.
train_app = typer.Typer(no_args_is_help=True, help="Train the orchestrator from traces: export, sft, grpo, opod.")
app.add_typer(train_app, name="train")
for _register in (_auto.register, _datasets.register, _eval.register, _report.register):
    _register(app)
_models.register(app)
for _register in (_train_data.register, _train_sft.register, _train_rl.register):
    _register(train_app)


# Typer's own copy of click's error base class (not exported under a public name)
_CLICK_ERROR: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


def main() -> None:
    """The `orchestrion` command. Usage errors (a bad option value, a missing argument) are one
    line on stderr and exit 2, like every other error, instead of Typer's framed panel."""
    try:
        code = app(standalone_mode=False)
    except _CLICK_ERROR as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # `orchestrion` or a group alone: its help
            exc.show()  # type: ignore[attr-defined]
            raise SystemExit(2) from None
        ctx = getattr(exc, "ctx", None)
        where = ctx.command_path if ctx is not None else "orchestrion"
        err.print(f"[red]error:[/red] {escape(exc.format_message())} (see `{escape(where)} --help`)",  # type: ignore[attr-defined]
                  highlight=False)
        raise SystemExit(getattr(exc, "exit_code", 2)) from None
    except typer.Abort:
        err.print("[red]error:[/red] aborted", highlight=False)
        raise SystemExit(1) from None
    raise SystemExit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
