"""What happens to every field of a chat-completions request: honoured, refused with a 400 that
says why, or accepted and ignored with a stated reason and listed back to the client. Bad types
are 400s in OpenAI's error shape. ``stop`` cuts the answer as vLLM does (streamed: never a
character past a stop string); ``logprobs`` is refused with its reason."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import completion_create_params

from orchestrion import GenerateConfig, Message, Pool, ScriptedModel, TraceStore
from orchestrion.serve._fields import CHAT_FIELDS
from orchestrion.serve._stop import StopCut, cut
from tests.serve.test_openai_features import Capped, para_pool
from tests.serve.test_server import ASK, client, direct_pool, episodes, ext, post, serving

# every field of OpenAI's chat-completions request (the SDK's own schema), plus the extension
OPENAI_FIELDS = (completion_create_params.CompletionCreateParamsStreaming.__required_keys__
                 | completion_create_params.CompletionCreateParamsStreaming.__optional_keys__)
TOOL = {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}

# field -> (what happens to it, a value sent, a value refused with a 400 or None)
FIELD_CASES: dict[str, tuple[str, Any, Any]] = {
    "model": ("honoured", "orchestrion/direct", "orchestrion/nosuch"),  # another model: a 404
    "messages": ("honoured", ASK, [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]),
    "stream": ("honoured", True, None),
    "stream_options": ("honoured", {"include_usage": True}, None),
    "max_tokens": ("honoured", 50, 0),
    "max_completion_tokens": ("honoured", 50, 0),
    "n": ("honoured", 1, 2),
    "stop": ("honoured", ["\n"], [""]),
    "seed": ("honoured", 7, None),
    "response_format": ("honoured", {"type": "text"}, {"type": "json_schema"}),
    "modalities": ("honoured", ["text"], ["text", "audio"]),
    "tool_choice": ("honoured", "none", "required"),
    "function_call": ("honoured", "auto", {"name": "add"}),
    "metadata": ("honoured", {"team": "qa"}, None),
    "user": ("honoured", "someone", None),
    "safety_identifier": ("honoured", "hash-1", None),
    "orchestrion": ("honoured", {"options": {"max_tokens": 64}}, {"nonsense": 1}),
    "tools": ("honoured", [TOOL], [{"type": "function", "function": {"name": "add", "parameters": {"type": "array"}}}]),
    "functions": ("refused", [], [{"name": "add", "parameters": {"type": "object"}}]),
    "logprobs": ("refused", False, True),
    "top_logprobs": ("refused", 0, 2),
    "logit_bias": ("refused", {}, {"50256": -100}),
    "frequency_penalty": ("refused", 0, 0.5),
    "presence_penalty": ("refused", 0, 0.5),
    "audio": ("refused", None, {"voice": "alloy", "format": "wav"}),
    "web_search_options": ("refused", None, {}),
    "moderation": ("refused", None, {"model": "omni-moderation-latest"}),
    "temperature": ("ignored", 0.3, None),
    "top_p": ("ignored", 0.9, None),
    "parallel_tool_calls": ("honoured", False, None),
    "reasoning_effort": ("ignored", "low", None),
    "verbosity": ("ignored", "low", None),
    "prediction": ("ignored", {"type": "content", "content": "5"}, None),
    "store": ("ignored", True, None),
    "service_tier": ("ignored", "auto", None),
    "prompt_cache_key": ("ignored", "k1", None),
    "prompt_cache_retention": ("ignored", "24h", None),
    "prompt_cache_options": ("ignored", {"mode": "implicit"}, None),
}


def test_every_openai_chat_field_has_a_stated_fate() -> None:
    assert set(FIELD_CASES) == OPENAI_FIELDS | {"orchestrion"}, "a field of the SDK's schema has no case here"
    assert set(CHAT_FIELDS) == set(FIELD_CASES), "the server's table and this test disagree on the fields"
    for name, (fate, _, _) in FIELD_CASES.items():
        assert CHAT_FIELDS[name].fate == fate, name
        assert len(CHAT_FIELDS[name].note) > 10, f"{name}: no reason stated"


def test_the_readme_states_each_fields_fate() -> None:
    # the fields table lives on the handbook's serving page (it was the README's serving section)
    root = Path(__file__).resolve().parents[2]
    page = root / "docs" / "serving.md"
    if page.is_file():
        section = page.read_text()
    else:
        readme = (root / "README.md").read_text()
        section = readme.split("## Serving strategies to any OpenAI client")[1].split("\n## ")[0]
    rows = [line.split("|")[1:3] for line in section.splitlines() if line.strip().startswith("| ") and "`" in line]
    for name, rule in CHAT_FIELDS.items():
        [fields] = [fields for fate, fields in rows if rule.fate in fate]
        assert f"`{name}`" in fields, f"{page.name}: {name} is not in the '{rule.fate}' row"


def test_each_field_does_what_its_fate_says(store: TraceStore) -> None:
    base = {"model": "orchestrion/direct", "messages": ASK}
    with serving(direct_pool("5"), store) as url:
        for name, (fate, good, bad) in FIELD_CASES.items():
            body = {**base, name: good}
            if name == "stream_options":
                body["stream"] = True
            r = post(url, body)
            assert r.status_code == 200, f"{name}={good!r}: {r.text}"
            listed = r.headers.get("x-orchestrion-ignored-fields", "")
            if fate == "ignored":
                assert name in listed.split(", "), f"{name} was ignored without saying so"
                assert name in r.json()["orchestrion"]["ignored"]
            else:
                assert name not in listed, f"{name} is listed as ignored"
            if bad is None:
                continue
            refused = post(url, {**base, name: bad})
            assert refused.status_code in (400, 404), f"{name}={bad!r} was accepted"
            error = refused.json()["error"]
            assert error["type"] == "invalid_request_error" and len(error["message"]) > 20, error
            assert error["param"] is not None and error["param"].split(".")[0] == name, error
    # honoured, as recorded by the episodes: the seed and what the client said about itself
    assert 7 in [json.loads(e["meta"])["options"].get("seed") for e in episodes(store)]
    metas = [json.loads(e["task"])["metadata"] for e in episodes(store)]
    assert {"team": "qa"} in [m.get("metadata") for m in metas]
    assert "someone" in [m.get("user") for m in metas] and "hash-1" in [m.get("safety_identifier") for m in metas]


def test_unknown_fields_are_accepted_and_listed_back(store: TraceStore) -> None:
    with serving(direct_pool("5"), store) as url:
        r = post(url, {"model": "orchestrion/direct", "messages": ASK, "top_k": 5, "temperature": 0.1})
        plain = post(url, {"model": "orchestrion/direct", "messages": ASK, "temperature": None})
    assert r.status_code == 200 and r.headers["x-orchestrion-ignored-fields"] == "temperature, top_k"
    assert r.json()["orchestrion"]["ignored"] == ["temperature", "top_k"]
    assert "x-orchestrion-ignored-fields" not in plain.headers and "ignored" not in plain.json()["orchestrion"]


@pytest.mark.parametrize(("field", "value"), [
    ("temperature", "hot"), ("top_p", 3), ("max_tokens", "many"), ("stop", 5), ("seed", "x"), ("n", "two"),
    ("stream", "sometimes"), ("metadata", {"k": 1}), ("logprobs", "perhaps"), ("presence_penalty", "high"),
    ("response_format", {"type": "yaml"}), ("tool_choice", 3), ("verbosity", "loud"), ("store", "please"),
])
def test_bad_field_types_are_400_in_openai_shape(store: TraceStore, field: str, value: Any) -> None:
    with serving(direct_pool(), store) as url:
        with pytest.raises(openai.BadRequestError) as refused:
            client(url).chat.completions.create(model="orchestrion/direct", messages=ASK,
                                                extra_body={field: value})
    error = refused.value.body
    assert isinstance(error, dict) and set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and str(error["param"]).split(".")[0] == field
    assert error["message"].startswith(f"'{field}")
    assert episodes(store) == []


# -- logprobs ---------------------------------------------------------------------------------
def test_logprobs_are_refused_with_the_reason(store: TraceStore) -> None:
    with serving(para_pool(), store) as url:
        with pytest.raises(openai.BadRequestError) as refused:
            client(url).chat.completions.create(model="orchestrion/para", messages=ASK, logprobs=True)
        with pytest.raises(openai.BadRequestError) as top:
            client(url).chat.completions.create(model="orchestrion/direct", messages=ASK, top_logprobs=3)
        fine = client(url).chat.completions.create(model="orchestrion/direct", messages=ASK, logprobs=False)
    assert refused.value.param == "logprobs" and "log-probs" in refused.value.message
    assert "decisions" in refused.value.message  # where log-probs are recorded instead
    assert top.value.param == "top_logprobs"
    assert fine.choices[0].logprobs is None and len(episodes(store)) == 1


# -- stop -------------------------------------------------------------------------------------
def stop_reason(choice: Any) -> Any:
    """vLLM's ``stop_reason`` of a choice (an extra field to the openai client)."""
    return (choice.model_extra or {})["stop_reason"]


def test_stop_cuts_the_answer_and_says_so(store: TraceStore) -> None:
    with serving(direct_pool("The sum is 5.\nIt is odd."), store) as url:
        cut_one = client(url).chat.completions.create(model="orchestrion/direct", messages=ASK, stop="\n")
        earliest = client(url).chat.completions.create(model="orchestrion/direct", messages=ASK,
                                                       stop=["odd", "sum"])
        missing = client(url).chat.completions.create(model="orchestrion/direct", messages=ASK, stop=["zebra"])
    assert cut_one.choices[0].message.content == "The sum is 5."
    assert cut_one.choices[0].finish_reason == "stop" and stop_reason(cut_one.choices[0]) == "\n"
    assert earliest.choices[0].message.content == "The " and stop_reason(earliest.choices[0]) == "sum"
    assert missing.choices[0].message.content == "The sum is 5.\nIt is odd."
    assert stop_reason(missing.choices[0]) is None
    assert {e["answer"] for e in episodes(store)} == {"The sum is 5.\nIt is odd."}  # the record keeps it whole


@pytest.mark.parametrize("stop", ["in total", "\n", "5 in", "Answer: 5", "zzz"])
def test_stop_on_a_grounded_synthesis_streamed_and_not(store: TraceStore, stop: str) -> None:
    full = "Adding 2 and 3 gives 5 in total.\nAnswer: 5"  # the synthesis wrote "[R1]": grounded to 5
    with serving(para_pool(), store) as url:
        chunks = list(client(url).chat.completions.create(model="orchestrion/para", messages=ASK, stream=True,
                                                          stop=[stop]))
        whole = client(url).chat.completions.create(model="orchestrion/para", messages=ASK, stop=[stop])
    expected = full.split(stop)[0]
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert "".join(pieces) == whole.choices[0].message.content == expected
    assert not any(stop in p for p in pieces)
    final = [c.choices[0] for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [f.finish_reason for f in final] == ["stop"] and whole.choices[0].finish_reason == "stop"
    matched = None if stop == "zzz" else stop
    assert stop_reason(final[0]) == stop_reason(whole.choices[0]) == matched
    assert "answer" not in ext(chunks[-1] if chunks[-1].choices else chunks[-2])


def test_stop_beats_the_token_limit_and_length_stays_without_one(store: TraceStore) -> None:
    with serving(Pool.from_models([Capped()]), store) as url:
        stopped = client(url).chat.completions.create(model="orchestrion/direct", messages=ASK, stop="three",
                                                      max_tokens=4)
        cut_short = client(url).chat.completions.create(model="orchestrion/direct", messages=ASK, stop="six",
                                                        max_tokens=2)
    assert stopped.choices[0].message.content == "one two " and stopped.choices[0].finish_reason == "stop"
    assert cut_short.choices[0].message.content == "one two" and cut_short.choices[0].finish_reason == "length"


def test_a_stream_never_sends_text_past_a_stop_string(store: TraceStore) -> None:
    def reply(messages: Sequence[Message], config: GenerateConfig) -> str:
        return "alpha beta gam ma STOP delta epsilon"

    sent: list[str] = []
    with serving(Pool.from_models([ScriptedModel(reply)]), store) as url:
        with httpx.stream("POST", url + "/chat/completions", timeout=30, json={
                "model": "orchestrion/direct", "messages": ASK, "stream": True, "stop": ["gamma", "STOP"]}) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    for choice in json.loads(line[6:]).get("choices", []):
                        sent.append(choice["delta"].get("content") or "")
    assert "".join(sent) == "alpha beta gam ma "  # "gam" was held until " ma" ruled out "gamma"
    assert not any(piece.endswith("gam") for piece in sent)


# -- the stop cutter on its own -----------------------------------------------------------------
def test_stop_cut_releases_only_what_no_later_text_can_stop() -> None:
    c = StopCut(["STOP", "\n\n"])
    assert c.feed("Hello S") == "Hello " and c.feed("T") == "" and c.feed("ART\n") == "START"
    assert c.feed("\nmore") == "" and c.matched == "\n\n" and c.flush() == "" and c.released == "Hello START"


def test_streamed_stop_cut_always_equals_the_whole_cut() -> None:
    rng = random.Random(11)
    atoms = ["a", "b", "ab", "ba", "\n", " ", "END", "EN", "D", "x"]
    for _ in range(3000):
        text = "".join(rng.choice(atoms) for _ in range(rng.randint(0, 14)))
        stops = rng.sample(["END", "ab", "\n\n", "bab", "x"], k=rng.randint(1, 3))
        cuts = sorted(rng.sample(range(len(text) + 1), k=min(len(text), rng.randint(0, 6))))
        cutter, out, start = StopCut(stops), "", 0
        whole, matched = cut(text, stops)
        for end in [*cuts, len(text)]:
            out += cutter.feed(text[start:end])
            start = end
            assert whole.startswith(out), (text, stops)
        out += cutter.flush()
        assert (out, cutter.matched) == (whole, matched), (text, stops)
