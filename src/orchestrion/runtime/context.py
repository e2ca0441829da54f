"""The run context: the one door through which strategies reach models and tools.

Every model call, orchestrator decision and tool call goes through here, so
tracing, budgets, cost roll-up and concurrency limits are applied once, in
one place, for every strategy.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel

from .._errors import ModelError
from ..models.cost import Price, cost_parts
from ..models.pool import Pool
from ..models.structured import parse_as, repair_messages, schema_prompt
from ..models.types import Completion, GenerateConfig, Message, Usage
from ..tools import nearest
from ..tools.envelope import ToolResult, ToolStatus
from ..tools.registry import ToolRegistry
from ..trace.tracer import Tracer
from .answer import AnswerChannel
from .budget import BudgetTracker
from .client_tools import ClientToolCall, ClientTools
from .fit import AnswerFormat
from .options import LooseOptions, StrategyOptions, validate_options
from .parts import answer_text
from .types import EpisodeStatus

T = TypeVar("T", bound=BaseModel)
R = TypeVar("R")
OptionsT = TypeVar("OptionsT", bound=StrategyOptions)

ORCHESTRATOR_CONFIG = GenerateConfig(max_tokens=384, temperature=0.0, logprobs=True)
Role = Literal["decision", "synthesis", "agent"]
MAX_RESULTS_KEPT = 64
LIBRARY_SIZE = 400  # latest worked programs the coder's library ranks
# a worked program is shown only for a task at least this similar (TF-IDF cosine): another kind
# of task's program is a template that does not fit
WORKED_SIMILARITY = 0.3
# Completion.extra entries copied onto the call's span
CALL_EXTRAS = ("prompt_reused", "prompt_evaluated", "threads")


REPAIR_TEMPERATURE = 0.7


def _exploring(cfg: GenerateConfig, index: int) -> GenerateConfig:
    """A repair of a greedy decision samples (seeded by the call's index): greedy decoding would
    repeat the very output that failed, e.g. a small model's loop that ran into max_tokens."""
    if cfg.temperature > 0:
        return cfg
    seed = cfg.seed if cfg.seed is not None else decision_seed(0, index)
    return replace(cfg, temperature=REPAIR_TEMPERATURE, seed=seed)


def decision_seed(base: int, index: int) -> int:
    """The sampling seed of the ``index``-th decision call of an episode run with option ``seed=base``."""
    return (base * 1_000_003 + index) % 2_147_483_647


@dataclass
class Decision(Generic[T]):
    """One orchestrator decision: the parsed action (or ``None``) and every attempt made."""

    action: T | None
    attempts: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    @property
    def valid(self) -> bool:
        return self.action is not None

    @property
    def invalid_attempts(self) -> int:
        return sum(1 for a in self.attempts if not a["valid"])


class RunContext:
    """Pool, tools, tracer and budget for one episode, plus strategy options."""

    def __init__(
        self,
        pool: Pool,
        tools: ToolRegistry,
        tracer: Tracer,
        budget: BudgetTracker,
        options: Mapping[str, Any] | StrategyOptions | None = None,
        *,
        answer: AnswerChannel | None = None,
        task: str | None = None,
        answer_format: AnswerFormat | None = None,
        client_tools: ClientTools | None = None,
        multipart: bool = False,
        as_written: bool = False,
    ) -> None:
        self.pool = pool
        # functions the episode's caller runs itself (serve's client tools); None = there are none
        self.client_tools = client_tools
        # what the task's answer must look like (its options, a number); None = the task states nothing
        self.answer_format = answer_format
        # a multi-part task (metadata scoring "multipart"): its answer is its labelled lines (.parts)
        self.multipart = multipart
        # the task says in its own words how to answer (a code task, a multi-part task): the direct
        # answer asks it as written, without direct's "final answer on the last line" wrapper
        self.as_written = as_written
        # the task as the user wrote it: agent tools get it verbatim beside their subtask
        self.task = task
        self.tools = tools
        self.tracer = tracer
        self.budget = budget
        # what the episode's caller wants of the final answer (streaming, JSON format); None = nothing
        self.answer = answer
        # validated options: the strategy's own Options (from solve), or a plain dict typed loosely
        self.strategy_options: StrategyOptions = (
            options if isinstance(options, StrategyOptions)
            else validate_options(LooseOptions, options or {}, where="options"))
        self._typed: dict[type[StrategyOptions], StrategyOptions] = {}
        # tree and counterfactual rollouts: the first N decision calls reuse these raw outputs
        self._replay: list[str] = list(self.strategy_options.replay_decisions or [])
        self._decision_calls = 0  # model calls made by decide so far, replayed ones included
        # outputs of successful tool and agent calls, in order: the grounding rate scores them
        self.results: list[str] = []
        # (model, text) of every answer the direct baseline's call gave in this episode
        self.direct_answers: set[tuple[str, str]] = set()

    @property
    def options(self) -> dict[str, Any]:
        """The options set for this episode (CLI/API over the pool's strategy YAML), as a dict."""
        return self.strategy_options.model_dump(exclude_unset=True)

    @property
    def original_task(self) -> str | None:
        """The episode's task text as given (None for a context built without one)."""
        return self.task

    def answer_misfit(self, text: str) -> str | None:
        """Why ``text`` would not fit the task's answer format; None when it fits or there is none."""
        return None if self.answer_format is None else self.answer_format.misfit(text)

    def parts_answer(self, text: str) -> str | None:
        """A multi-part task's answer in ``text`` (:func:`.parts.answer_text`); None for any other task."""
        return answer_text(text, multipart=True) if self.multipart else None

    def options_as(self, cls: type[OptionsT]) -> OptionsT:
        """The episode's options as ``cls`` (a strategy's ``Options``): typed, defaults filled in.
        A key ``cls`` does not declare, or a value of the wrong type, is a one-line ConfigError."""
        if isinstance(self.strategy_options, cls):
            return self.strategy_options
        found = self._typed.get(cls)
        if found is None:
            found = self._typed[cls] = validate_options(cls, self.options, where=f"options of {cls.__qualname__}")
        assert isinstance(found, cls)
        return found

    def option(self, name: str, default: Any) -> Any:
        """One option by name, for code outside strategies: its validated value when it was set
        (CLI/API value first, then the pool's strategy YAML) and is not None, else ``default``."""
        if name not in self.strategy_options.model_fields_set:
            return default
        value = getattr(self.strategy_options, name, None)
        return default if value is None else value

    def _child(self, tools: ToolRegistry, options: StrategyOptions) -> RunContext:
        child = RunContext(self.pool, tools, self.tracer, self.budget, options, answer=self.answer,
                           task=self.task, answer_format=self.answer_format, client_tools=self.client_tools,
                           multipart=self.multipart, as_written=self.as_written)
        child.results = self.results  # one list: the grounding rate sees every call of the episode
        child.direct_answers = self.direct_answers
        return child

    def with_tools(self, tools: ToolRegistry) -> RunContext:
        """The same episode (pool, tracer, budget, options, answer channel, recorded results) with other tools."""
        return self._child(tools, self.strategy_options)

    def with_options(self, options: StrategyOptions) -> RunContext:
        """The same episode with another strategy's options: what a strategy that runs another
        inside its episode (``auto``) hands it. Decisions replayed so far stay counted."""
        child = self._child(self.tools, options)
        child._decision_calls = self._decision_calls
        return child

    def temperature(self, role: Role) -> float:
        """The sampling temperature of ``role``: option ``ROLE_temperature``, else the pool's
        ``temperature:`` block, else 0 (greedy)."""
        value: float | None = getattr(self.strategy_options, f"{role}_temperature")
        if value is None:
            return float(getattr(self.pool.config.temperature, role))
        return value

    def config(self, role: Role, max_tokens: int = 256) -> GenerateConfig:
        """Generation settings for one call in ``role``, at that role's temperature."""
        return GenerateConfig(max_tokens=max_tokens, temperature=self.temperature(role))

    async def parallel(self, work: Iterable[Awaitable[R]]) -> list[R]:
        """Run awaitables concurrently, at most ``max_parallel`` at once (option; default unbounded).

        ``--max-parallel 1`` turns any parallel strategy into its serial variant.
        """
        limit = self.strategy_options.max_parallel
        items = list(work)
        if not limit or limit >= len(items):
            return list(await asyncio.gather(*items))
        gate = asyncio.Semaphore(limit)

        async def gated(item: Awaitable[R]) -> R:
            async with gate:
                return await item

        return list(await asyncio.gather(*(gated(i) for i in items)))

    # -- model calls ---------------------------------------------------------------
    async def generate(
        self,
        messages: list[Message],
        *,
        model: str | None = None,
        config: GenerateConfig | None = None,
        name: str = "generate",
    ) -> Completion:
        """One traced, budgeted model call."""
        model_name = model or self.pool.orchestrator
        cfg = config or GenerateConfig()
        self.budget.step()
        remaining = self.budget.remaining_tokens()
        if remaining is not None and remaining < cfg.max_tokens:
            cfg = replace(cfg, max_tokens=max(1, remaining))
        with self.tracer.span("call", model_name, purpose=name, messages=messages) as span:
            completion = await self.pool.complete(model_name, messages, cfg)
            span.set(
                output=completion.text,
                latency_s=completion.latency_s,
                finish_reason=completion.finish_reason,
                structured_mode=completion.structured_mode,
                # prefix reuse and threads, where the backend reports them (models/_prefix.py, _threads.py)
                **{k: completion.extra[k] for k in CALL_EXTRAS if k in completion.extra},
            )
            span.set(**self._cost_parts(model_name, completion.usage))
            span.charge(completion.usage)
            self.budget.charge(completion.usage)
        return completion

    def _cost_parts(self, model_name: str, usage: Usage) -> dict[str, float]:
        """The call's dollars split into prompt and completion (OpenTelemetry's ``llm.cost.*``),
        where its cost is known; nothing otherwise, never 0 for unknown."""
        price = getattr(self.pool.get(model_name), "price", None)
        parts = cost_parts(price, usage.input_tokens, usage.output_tokens) if isinstance(price, Price) else None
        if usage.cost_usd is None or parts is None:
            return {}
        return {"cost_prompt_usd": parts[0], "cost_completion_usd": parts[1]}

    async def decide(
        self,
        schema: type[T],
        messages: list[Message],
        *,
        model: str | None = None,
        config: GenerateConfig | None = None,
        max_repairs: int = 2,
        name: str = "decision",
        json_schema: dict[str, Any] | None = None,
        role: Role = "decision",
    ) -> Decision[T]:
        """An orchestrator action validated against ``schema``; invalid outputs are recorded and repaired.

        Option ``replay_decisions`` (a list of raw outputs) replaces the episode's first N decision
        model calls, repair attempts included: each is parsed, validated and recorded as if sampled,
        with no model call and no tokens, and its decision span lists it in ``replayed_attempts``
        (``replayed: true`` when every attempt of the decision was replayed). Option ``seed`` gives
        each sampled decision call the seed :func:`decision_seed` derives from it. The temperature
        is ``role``'s (:meth:`temperature`), whatever ``config`` says.
        """
        model_name = model or self.pool.orchestrator
        json_schema = json_schema or schema.model_json_schema()
        base = config or ORCHESTRATOR_CONFIG
        cfg = replace(base, json_schema=json_schema, temperature=self.temperature(role))
        convo = list(messages)
        if not self.pool.get(model_name).constrains_json and self.pool.spec(model_name).structured != "none":
            convo = [*convo[:-1], {**convo[-1], "content": convo[-1]["content"] + "\n\n" + schema_prompt(json_schema)}]
        decision: Decision[T] = Decision(action=None)
        replayed: list[int] = []
        with self.tracer.span("decision", name, model=model_name, schema=schema.__name__) as span:
            for attempt in range(max_repairs + 1):
                index, self._decision_calls = self._decision_calls, self._decision_calls + 1
                try:
                    if index < len(self._replay):
                        completion = self._replayed(index, model_name)
                        replayed.append(attempt)
                    else:
                        attempt_cfg = self._seeded(_exploring(cfg, index) if attempt else cfg, index)
                        completion = await self.generate(convo, model=model_name, config=attempt_cfg, name=name)
                except ModelError as exc:
                    if attempt == 0:
                        raise
                    # a repair prompt can outgrow a small context: stop repairing, keep the record
                    decision.error = f"{decision.error}; repair abandoned: {exc}"
                    break
                record: dict[str, Any] = {
                    "attempt": attempt,
                    "model": model_name,
                    "schema_name": schema.__name__,
                    "messages": convo,
                    "prompt_token_ids": completion.prompt_token_ids,
                    "output": completion.text,
                    "token_ids": completion.token_ids,
                    "logprobs": completion.logprobs,
                    "replayed": attempt in replayed,
                }
                try:
                    action = parse_as(schema, completion.text)
                except ValueError as exc:
                    record.update(valid=False, error=str(exc), action=None)
                    decision.error = str(exc)
                    convo = repair_messages(convo, completion.text, str(exc),
                                            truncated=completion.finish_reason == "length")
                else:
                    record.update(valid=True, error=None, action=action.model_dump(mode="json"))
                    decision.action = action
                    decision.error = None
                decision.attempts.append(record)
                self.tracer.decision(span, record)
                if decision.valid:
                    break
            span.set(valid=decision.valid, attempts=len(decision.attempts), error=decision.error)
            if replayed:  # replayed attempts: no model call, no tokens; sampled ones have a call span
                span.set(replayed=len(replayed) == len(decision.attempts), replayed_attempts=replayed)
            if not decision.valid:
                span.status = EpisodeStatus.INVALID
        return decision

    def _replayed(self, index: int, model_name: str) -> Completion:
        """A decision output taken from option ``replay_decisions``: counted as a step, never billed."""
        self.budget.step()
        return Completion(text=self._replay[index], model=model_name, usage=Usage(), latency_s=0.0,
                          finish_reason="replayed")

    def _seeded(self, cfg: GenerateConfig, index: int) -> GenerateConfig:
        """With option ``seed``, each decision call gets its own derived seed (distinct, reproducible)."""
        seed = self.strategy_options.seed
        if cfg.seed is not None or seed is None:
            return cfg
        return replace(cfg, seed=decision_seed(seed, index))

    async def worked_programs(self, task: str) -> list[tuple[str, str]]:
        """Up to option ``worked_programs`` (task, program) pairs from the trace store's program
        library (:meth:`~orchestrion.trace.store.TraceStore.worked_programs`: programs whose printed
        answer was correct on an ``@train`` task), the most similar to ``task`` first; only those at
        least :data:`WORKED_SIMILARITY` similar (words at least two library tasks share), never
        ``task`` itself. Empty until this kind of task has history."""
        k = self.strategy_options.worked_programs
        if not k:
            return []
        rows = await asyncio.to_thread(self.tracer.store.worked_programs, LIBRARY_SIZE)
        rows = [(p, c) for p, c in rows if p.strip() != task.strip()]
        found = nearest(task, [p for p, _ in rows], k, min_df=2)
        return [rows[i] for i, sim in found if sim >= WORKED_SIMILARITY]

    def record_result(self, text: str) -> None:
        """Keep one result of a tool, agent tool or sub-agent (what grounding and the
        no-evidence rule of :mod:`~orchestrion.runtime.synthesis` read); blank text is not one."""
        if text.strip() and len(self.results) < MAX_RESULTS_KEPT:
            self.results.append(text.strip()[:2000])

    # -- tool calls ----------------------------------------------------------------
    async def call_tool(
        self, name: str, args: dict[str, Any] | None, *, model: str | None = None, label: str | None = None
    ) -> ToolResult:
        """One traced tool or agent-tool call; always returns an envelope."""
        self.budget.step()
        kind = "agent" if name in self.tools and self.tools.get(name).kind == "agent" else "tool"
        with self.tracer.span(kind, label or name, tool=name, args=args, model=model) as span:
            result = await self.tools.call(name, args, self, model=model)
            units = Usage(cost_units=result.cost_units)
            span.charge(units)
            self.budget.charge(units)
            span.set(status=result.status.value, output=result.output[:4000], error=result.error)
            span.status = result.status
        if result.status is ToolStatus.OK:
            if not result.data.get("empty"):
                self.record_result(result.output)
            result.input_tokens = result.input_tokens or span.usage.input_tokens
            result.output_tokens = result.output_tokens or span.usage.output_tokens
            result.cost_usd = span.usage.cost_usd
        return result

    async def call_client_tools(self, calls: list[ClientToolCall]) -> list[ToolResult]:
        """Have the episode's caller run ``calls`` (its client tools) and wait for the results, as
        :mod:`.client_tools` says; an OK result is kept as a tool's is."""
        if self.client_tools is None:
            raise ValueError("this episode has no client tools")
        results = await self.client_tools.call(calls, self.tracer, self.budget)
        for result in results:
            if result.ok:
                self.record_result(result.output)
        return results
