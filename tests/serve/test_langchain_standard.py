"""LangChain's standard chat-model suite (``langchain-tests``' ``ChatModelIntegrationTests``) against
``orchestrion serve`` on the tiny pool, through ``ChatOpenAI`` (issue 38 item 3).

The suite LangChain's partner packages run in their CI, pointed at one server (real SmolLM2-135M,
the ``tiny`` fixture of test_langchain_client.py, one per module) with model ``orchestrion/direct``
and ``temperature=0``. Its flags say what serve really does: tool calling with ``tool_choice``,
structured output and JSON mode, usage on invoke and stream, another ``orchestrion/<strategy>``
per call; no image, audio, PDF or video input.

Both variants, chat completions and the Responses API (``use_responses_api=True``), run the whole
suite but one test cut for time (:data:`SLOW`, its path passes in other tests); the Responses
variant also skips the tests whose request another Responses test sends (:data:`RESPONSES_REPEATS`).
What the tiny
model cannot do is marked ``xfail(strict=True)`` with the reason and the error it raises.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from orchestrion import TraceStore

from .test_langchain_client import tiny

pytest.importorskip("langchain_openai")  # in the dev extra: `make test` installs both
pytest.importorskip("langchain_tests")

import openai  # noqa: E402
from langchain_core.exceptions import OutputParserException  # noqa: E402
from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402
from langchain_tests.integration_tests import ChatModelIntegrationTests  # noqa: E402

__all__ = ["tiny"]

# ChatOpenAI caches its async HTTP client per base URL for the whole process, keep-alive connections
# and all: on pytest-asyncio's fresh event loop per test, an async test reuses a connection opened on
# a closed loop and fails with "Event loop is closed" (whether one is left depends on timing). The
# client's, not the server's: one loop for the module's async tests, as an application has one loop.
pytestmark = [pytest.mark.asyncio(loop_scope="module"),
              pytest.mark.filterwarnings("ignore:The test <Function .* is marked with '@pytest.mark.asyncio' but it")]

# the answer's token limit: every answer the suite checks fits (a decision over client tools keeps its own floor)
MAX_TOKENS = 64

# The same episode in both variants (only the wire differs). Traced: direct's answer, asked in prose
# first, is "The answer to this question is:" over and over to max_tokens; the JSON synthesis given it
# as the result copies the loop into a "punchline" nested in "setup", to max_tokens again. Not a
# prompting or constraint fault of serve's that a change fixes: asked for JSON in one constrained call
# (direct's prompt, the {"type": "object"} grammar), the model writes "setup" and then loops inside the
# punchline ("and a cat was a cat, ..."); the JSON synthesis with no result repeats its keys; a system
# line "Answer with one JSON object and nothing else." ends it, "... one JSON value ..." does not; a
# string-length bound in the grammar ends it at 80 or 100 characters, not at 40, 60 or 120 (it opens
# another key). Each is greedy luck on one prompt, not a fix.
JSON_MODE = pytest.mark.xfail(strict=True, raises=(openai.LengthFinishReasonError, OutputParserException), reason=(
    "SmolLM2-135M, greedy, with response_format json_object and the keys only asked for in the prompt: its "
    "answer repeats one phrase inside the JSON until max_tokens (chat: the client raises "
    "LengthFinishReasonError; Responses: the object the client closes lacks 'punchline')"))

# cut for time (skipped, not overridden: the suite's own test_no_overrides_DO_NOT_OVERRIDE allows
# only xfails): pydantic v1 structured output goes by function calling, where the model loops inside
# the joke string to the client tool decision's 512-token floor before a repair answers, in the two
# episodes on the pydantic v1 class (about 15 s each; the test takes 34 s, the module's others 1 to 10 s);
# the same path passes in test_structured_few_shot_examples and test_tool_calling
SLOW = {"test_structured_output_pydantic_2_v1": "test_structured_few_shot_examples and test_tool_calling"}


class _Serve(ChatModelIntegrationTests):
    """The flags and the server's URL shared by both variants."""

    url = ""

    @pytest.fixture(autouse=True)
    def _server(self, tiny: tuple[str, TraceStore], request: pytest.FixtureRequest) -> Iterator[None]:
        type(self).url = tiny[0]
        self.cut(request.node)
        yield

    def cut(self, test: pytest.Item) -> None:
        """Skip a test cut for time (:data:`SLOW`)."""
        if test.name in SLOW:
            pytest.skip(f"cut for time (make test): its path passes in {SLOW[test.name]}")

    @property
    def chat_model_class(self) -> type[ChatOpenAI]:
        return ChatOpenAI

    @property
    def chat_model_params(self) -> dict[str, Any]:
        # stream_usage: ChatOpenAI sends stream_options.include_usage by default only to OpenAI's own
        # URL; serve, as vLLM, puts usage on a stream when asked for it (LangChain's advice for
        # OpenAI-compatible servers: set stream_usage)
        return {"model": "orchestrion/direct", "base_url": self.url, "api_key": "x", "temperature": 0,
                "stream_usage": True, "max_tokens": MAX_TOKENS}

    @property
    def has_tool_choice(self) -> bool:
        return True

    @property
    def supports_json_mode(self) -> bool:
        return True

    @property
    def supports_model_override(self) -> bool:
        return True

    @property
    def model_override_value(self) -> str:
        return "orchestrion/cot"

    @property
    def supports_image_inputs(self) -> bool:
        return False

    @property
    def supports_image_urls(self) -> bool:
        return False

    @property
    def supports_pdf_inputs(self) -> bool:
        return False

    @property
    def supports_audio_inputs(self) -> bool:
        return False

    @property
    def supports_video_inputs(self) -> bool:
        return False

    @property
    def supports_image_tool_message(self) -> bool:
        return False

    @property
    def supports_pdf_tool_message(self) -> bool:
        return False

    @property
    def supports_anthropic_inputs(self) -> bool:
        return False

    @JSON_MODE
    def test_json_mode(self, model: BaseChatModel) -> None:
        super().test_json_mode(model)


@pytest.mark.integration
class TestChatCompletions(_Serve):
    """``ChatOpenAI`` on /v1/chat/completions."""


@pytest.mark.integration
class TestResponses(_Serve):
    """``ChatOpenAI(use_responses_api=True)`` on /v1/responses."""

    def cut(self, test: pytest.Item) -> None:
        """Also skip the Responses tests whose request another Responses test sends, and whose chat
        variant runs the same server-side episode (:data:`RESPONSES_REPEATS`): about 42 s of make test."""
        super().cut(test)
        if test.name in RESPONSES_REPEATS:
            pytest.skip(f"cut for time (make test): {RESPONSES_REPEATS[test.name]}")

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {**super().chat_model_params, "use_responses_api": True}


# on /v1/responses, the tests whose request is one another Responses test sends (only the client's
# handling differs, and their chat completions variants run in TestChatCompletions)
RESPONSES_REPEATS = {
    **{f"test_structured_output_async[{kind}]": "the same request as test_structured_output[pydantic], sent "
       "by the async client" for kind in ("pydantic", "typeddict", "json_schema")},
    **{f"test_structured_output[{kind}]": "the same request as test_structured_output[pydantic], with the "
       "schema given as a " + kind for kind in ("typeddict", "json_schema")},
    "test_structured_output_optional_param": "the structured-output request of test_structured_output[pydantic] "
                                             "with an optional field; its chat variant runs",
}
