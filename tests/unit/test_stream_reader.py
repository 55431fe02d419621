"""The tolerant stream reader: every server's chunk shapes fold into one Completion."""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import httpx2
import openai
import pytest

from bot.models.stream import normalize_finish, read_stream, split_think, text_tool_calls
from bot.models.tokens import count_messages, count_text
from bot.types import Usage

TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
    for n in ("get_weather", "search")
]
MESSAGES = [{"role": "user", "content": "weather in Paris and Rome?"}]


class Chunks:
    """A stream of dict chunks (as the SDK would yield them, read defensively)."""

    def __init__(self, chunks: list[Any]) -> None:
        self.chunks = chunks
        self.closed = False

    def __enter__(self) -> Chunks:
        return self

    def __exit__(self, *_: object) -> None:
        self.closed = True

    def __iter__(self) -> Iterator[Any]:
        return iter(self.chunks)


def delta(finish: str | None = None, **fields: Any) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "choices": [{"index": 0, "delta": fields, "finish_reason": finish}]}


def read(chunks: list[Any], **kw: Any) -> Any:
    args: dict[str, Any] = {"limit": 10_000, "messages": MESSAGES, "tools": TOOLS}
    return read_stream(Chunks(chunks), **(args | kw))


USAGE = {"usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}, "choices": []}


# -- tool calls ----------------------------------------------------------------------------


def test_openai_style_pieces_by_index() -> None:
    done = read(
        [
            delta(role="assistant", content=None),
            delta(tool_calls=[{"index": 0, "id": "call_a", "type": "function",
                               "function": {"name": "get_weather", "arguments": ""}}]),
            delta(tool_calls=[{"index": 0, "function": {"arguments": '{"city": '}}]),
            delta(tool_calls=[{"index": 1, "id": "call_b", "type": "function",
                               "function": {"name": "get_weather", "arguments": ""}}]),
            delta(tool_calls=[{"index": 0, "function": {"arguments": '"Paris"}'}}]),
            delta(tool_calls=[{"index": 1, "function": {"arguments": '{"city": "Rome"}'}}]),
            delta("tool_calls"),
            USAGE,
        ]
    )  # fmt: skip
    assert [(c.id, c.name, json.loads(c.arguments)) for c in done.tool_calls] == [
        ("call_a", "get_weather", {"city": "Paris"}),
        ("call_b", "get_weather", {"city": "Rome"}),
    ]
    assert done.finish_reason == "tool_calls" and done.content == ""
    assert done.usage == Usage(prompt_tokens=10, completion_tokens=5)


def test_whole_calls_with_object_arguments_no_index_no_ids() -> None:
    # Ollama-like: each call whole in one chunk; here also no index and no id.
    chunks = [
        delta(tool_calls=[{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]),
        delta(tool_calls=[{"function": {"name": "get_weather", "arguments": {"city": "Rome"}}}]),
        delta("stop"),
    ]
    done = read(chunks)
    assert [json.loads(c.arguments) for c in done.tool_calls] == [
        {"city": "Paris"},
        {"city": "Rome"},
    ]
    ids = [c.id for c in done.tool_calls]
    assert len(set(ids)) == 2 and all(i.startswith("call_") for i in ids)
    assert ids == [c.id for c in read(chunks).tool_calls]  # stable
    assert done.finish_reason == "tool_calls"  # calls present ⇒ tool_calls


def test_the_same_id_on_parallel_calls_is_made_unique() -> None:
    done = read(
        [
            delta(tool_calls=[{"index": 0, "id": "call_0", "function": {"name": "search",
                               "arguments": '{"q": "a"}'}}]),
            delta(tool_calls=[{"index": 1, "id": "call_0", "function": {"name": "search",
                               "arguments": '{"q": "b"}'}}]),
        ]
    )  # fmt: skip
    assert [c.id for c in done.tool_calls] == ["call_0", "call_0_2"]


def test_same_id_without_index_whole_calls_are_two_calls() -> None:
    call = {"id": "x", "function": {"name": "search", "arguments": '{"q": "a"}'}}
    done = read([delta(tool_calls=[call]), delta(tool_calls=[call])])
    assert [c.id for c in done.tool_calls] == ["x", "x_2"]


def test_no_index_pieces_follow_their_id_and_a_new_name_starts_a_call() -> None:
    done = read(
        [
            delta(tool_calls=[{"id": "a", "function": {"name": "search", "arguments": '{"q":'}}]),
            delta(tool_calls=[{"id": "a", "function": {"arguments": ' "x"}'}}]),
            delta(tool_calls=[{"function": {"name": "get_weather"}}]),
            delta(tool_calls=[{"function": {"arguments": '{"city": "Oslo"}'}}]),
        ]
    )
    assert [(c.name, c.arguments) for c in done.tool_calls] == [
        ("search", '{"q": "x"}'),
        ("get_weather", '{"city": "Oslo"}'),
    ]


def test_a_name_repeated_in_every_piece_of_one_call_is_one_call() -> None:
    pieces = ['{"ci', 'ty": ', '"Paris"}']
    done = read(
        [
            delta(tool_calls=[{"index": 0, "id": "c", "function": {"name": "get_weather",
                               "arguments": p}}])
            for p in pieces
        ]
    )  # fmt: skip
    [call] = done.tool_calls
    assert call.name == "get_weather" and call.arguments == '{"city": "Paris"}'


def test_the_same_index_with_another_id_is_another_call() -> None:
    done = read(
        [
            delta(tool_calls=[{"index": 0, "id": "a", "function": {"name": "search",
                               "arguments": "{}"}}]),
            delta(tool_calls=[{"index": 0, "id": "b", "function": {"name": "search",
                               "arguments": "{}"}}]),
        ]
    )  # fmt: skip
    assert [c.id for c in done.tool_calls] == ["a", "b"]


def test_a_name_with_no_arguments_gets_an_empty_object_and_noise_is_dropped() -> None:
    done = read(
        [
            delta(tool_calls=[{"index": 0, "id": "a", "function": {"name": "search"}}]),
            delta(tool_calls=[{"index": 1}]),  # neither name nor arguments
        ]
    )
    [call] = done.tool_calls
    assert call.arguments == "{}"


def test_legacy_function_call_is_a_tool_call() -> None:
    done = read(
        [
            delta(function_call={"name": "search", "arguments": '{"q"'}),
            delta("function_call", function_call={"arguments": ': "z"}'}),
        ]
    )
    [call] = done.tool_calls
    assert (call.name, call.arguments) == ("search", '{"q": "z"}')
    assert done.finish_reason == "tool_calls"


# -- tool calls written into the text ------------------------------------------------------


def test_hermes_tool_call_markup_becomes_calls() -> None:
    text = (
        "Let me check.\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}</tool_call>'
    )
    done = read([delta(content=text[:30]), delta(content=text[30:]), delta("stop")])
    assert done.content == "Let me check."
    assert [json.loads(c.arguments)["city"] for c in done.tool_calls] == ["Paris", "Rome"]
    assert done.finish_reason == "tool_calls"


def test_an_unclosed_hermes_call_at_the_end_is_read() -> None:
    content, calls = text_tool_calls(
        '<tool_call>{"name": "search", "parameters": {"q": "x"}}', frozenset({"search"})
    )
    assert content == "" and calls == [("search", '{"q": "x"}')]


def test_mistral_tool_calls_both_formats() -> None:
    names = frozenset({"search"})
    assert text_tool_calls('[TOOL_CALLS][{"name": "search", "arguments": {"q": "x"}}]', names) == (
        "",
        [("search", '{"q": "x"}')],
    )
    said = '[TOOL_CALLS]search[ARGS]{"q": "a"}[TOOL_CALLS]search[CALL_ID]abc123456[ARGS]{"q": "b"}'
    assert text_tool_calls(said, names) == (
        "",
        [("search", '{"q": "a"}'), ("search", '{"q": "b"}')],
    )


def test_a_bare_json_reply_is_a_call_only_for_an_offered_tool() -> None:
    names = frozenset({"search"})
    bare = '{"name": "search", "arguments": {"q": "x"}}'
    assert text_tool_calls(bare, names) == ("", [("search", '{"q": "x"}')])
    assert text_tool_calls(f"```json\n{bare}\n```", names)[1] == [("search", '{"q": "x"}')]
    assert text_tool_calls(f"[{bare}, {bare}]", names)[1] == [("search", '{"q": "x"}')] * 2
    other = '{"name": "rm_rf", "arguments": {}}'
    assert text_tool_calls(other, names) == (other, [])
    quoted = f"Here is the JSON: {bare}"  # not the whole reply
    assert text_tool_calls(quoted, names) == (quoted, [])
    assert text_tool_calls('{"name": "search"}', frozenset()) == ('{"name": "search"}', [])


@pytest.mark.parametrize(
    "text",
    [
        "<tool_call>not json</tool_call>",
        "[TOOL_CALLS][{broken",
        "[TOOL_CALLS]",
        "[TOOL_CALLS]search[ARGS]{oops",
        '<tool_call>{"arguments": {}}</tool_call>',  # no name
        '<tool_call>["a list"]</tool_call>',
        "{}",
        "[]",
        "null",
    ],
)
def test_malformed_markup_stays_text(text: str) -> None:
    assert text_tool_calls(text, frozenset({"search"})) == (text, [])


def test_text_markup_is_not_read_when_no_tools_are_offered() -> None:
    text = '<tool_call>{"name": "search", "arguments": {}}</tool_call>'
    done = read([delta(content=text)], tools=())
    assert done.content == text and done.tool_calls == ()


# -- reasoning -----------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_fields_are_reasoning_not_content(field: str) -> None:
    done = read([delta(**{field: "Think "}), delta(**{field: "hard."}), delta(content="42")])
    assert done.reasoning == "Think hard." and done.content == "42"


def test_thinking_content_parts_are_reasoning() -> None:
    thinking = {"type": "thinking", "thinking": [{"type": "text", "text": "Tenths: 1 < 8."}]}
    done = read(
        [
            delta(content=[thinking]),
            delta(content=[{"type": "thinking", "thinking": " Sure."}, "No, ", {"text": "9.8."}]),
        ]
    )
    assert done.reasoning == "Tenths: 1 < 8. Sure." and done.content == "No, 9.8."


def test_think_tags_in_content_are_reasoning() -> None:
    done = read(
        [delta(content="<thi"), delta(content="nk>plan</th"), delta(content="ink>\n\nDone.")]
    )
    assert done.content == "Done." and done.reasoning == "plan"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("<think>a</think>b", ("b", "a")),
        ("plan only closed</think>answer", ("answer", "plan only closed")),
        ("<think>cut off mid thought", ("", "cut off mid thought")),
        ("<think></think>x", ("x", "")),
        ("no tags", ("no tags", "")),
        ("<think>a</think>b<think>c</think>d", ("bd", "a\n\nc")),
        ("  <think>a</think>b", ("b", "a")),
        (
            "Use a <think> tag like <think>this</think>.",
            ("Use a <think> tag like <think>this</think>.", ""),
        ),
    ],
)
def test_split_think(content: str, expected: tuple[str, str]) -> None:
    assert split_think(content) == expected


# -- finish reasons ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("said", "normal"),
    [
        ("stop", "stop"), ("STOP", "stop"), ("end_turn", "stop"), ("eos", "stop"),
        ("length", "length"), ("MAX_TOKENS", "length"), ("max_tokens", "length"),
        ("tool_calls", "tool_calls"), ("function_call", "tool_calls"), ("tool_use", "tool_calls"),
        ("content_filter", "content_filter"), ("SAFETY", "content_filter"),
        ("FINISH_REASON_STOP", "stop"), ("weird", "weird"), ("", ""),
    ],
)  # fmt: skip
def test_finish_reasons_are_normalized(said: str, normal: str) -> None:
    assert normalize_finish(said) == normal


# -- usage ---------------------------------------------------------------------------------


def test_cached_and_reasoning_tokens_openai_shape() -> None:
    usage = {
        "prompt_tokens": 2000,
        "completion_tokens": 300,
        "total_tokens": 2300,
        "prompt_tokens_details": {"cached_tokens": 1536},
        "completion_tokens_details": {"reasoning_tokens": 256},
    }
    done = read([delta(content="hi"), {"choices": [], "usage": usage}])
    assert done.usage == Usage(
        prompt_tokens=2000, completion_tokens=300, cached_tokens=1536, reasoning_tokens=256
    )


def test_deepseek_cache_hit_tokens() -> None:
    usage = {"prompt_tokens": 100, "completion_tokens": 7, "prompt_cache_hit_tokens": 64,
             "prompt_cache_miss_tokens": 36}  # fmt: skip
    assert read([{"choices": [], "usage": usage}]).usage.cached_tokens == 64


def test_reasoning_reported_apart_from_the_completion_is_added_to_it() -> None:
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 45,
             "completion_tokens_details": {"reasoning_tokens": 30}}  # fmt: skip
    got = read([{"choices": [], "usage": usage}]).usage
    assert (got.completion_tokens, got.reasoning_tokens) == (35, 30)


def test_groq_usage_in_x_groq() -> None:
    chunk = {"choices": [], "x_groq": {"usage": {"prompt_tokens": 3, "completion_tokens": 4}}}
    assert read([chunk]).usage == Usage(prompt_tokens=3, completion_tokens=4)


def test_missing_usage_is_counted_and_marked_estimated() -> None:
    done = read([delta(reasoning_content="why"), delta(content="answer text")])
    assert done.usage.estimated
    assert done.usage.prompt_tokens == count_messages(MESSAGES, TOOLS)
    assert done.usage.completion_tokens == count_text("answer text" + "why")


def test_bad_usage_values_read_as_zero() -> None:
    usage = {"prompt_tokens": None, "completion_tokens": "x", "prompt_tokens_details": None}
    assert read([{"choices": [], "usage": usage}]).usage == Usage()


# -- malformed chunks ----------------------------------------------------------------------


def test_malformed_chunks_are_tolerated() -> None:
    done = read(
        [
            {},
            {"choices": None},
            {"choices": [{}]},
            {"choices": [{"delta": None, "finish_reason": None}]},
            {"choices": [{"delta": {"content": None, "tool_calls": None}}]},
            {"choices": [{"delta": {"tool_calls": [{"index": [1], "function": None}]}}]},
            {"choices": [{"delta": {"content": [{"type": "text", "text": "parts "}]}}]},
            {"choices": [{"message": {"content": "and message"}, "finish_reason": "STOP"}]},
            SimpleNamespace(choices=[SimpleNamespace(delta=SimpleNamespace(content="!"))]),
        ]
    )
    assert done.content == "parts and message!" and done.finish_reason == "stop"
    assert done.tool_calls == ()


def test_the_limit_cuts_text_reasoning_and_arguments_and_closes_the_stream() -> None:
    call = {"index": 0, "id": "a", "function": {"name": "search", "arguments": "y" * 30}}
    stream = Chunks([delta(content="x" * 30), delta(reasoning="r" * 30), delta(tool_calls=[call])])
    seen: list[int] = []
    done = read_stream(stream, seen.append, limit=10)
    assert done.content.startswith("x" * 10 + "\n[… 20 characters cut]")
    assert done.reasoning == "r" * 10
    assert done.tool_calls[0].cut_chars == 20 and done.cut_chars == 40
    assert seen == [30] and stream.closed


# -- through the real SDK ------------------------------------------------------------------


def sdk_stream(chunks: list[dict[str, Any]]) -> Any:
    """The SDK's own stream over these SSE chunks (its pydantic objects, built unvalidated)."""
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, text=body)

    http = httpx2.Client(transport=httpx2.MockTransport(answer))
    client = openai.OpenAI(base_url="http://sdk.invalid/v1", api_key="-", http_client=http)
    return client.chat.completions.create(model="m", messages=[], stream=True)


def test_sdk_chunks_with_extra_fields_and_odd_shapes() -> None:
    base = {"id": "chatcmpl-9", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    chunks = [
        base | {"choices": [{"index": 0, "delta": {"role": "assistant",
                                                   "reasoning_content": "hmm"}}]},
        base | {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}}]},
        base | {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_use"}]},
        base | {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2,
                                         "prompt_cache_hit_tokens": 4}},
    ]  # fmt: skip
    done = read_stream(sdk_stream(chunks), limit=1000, tools=TOOLS)
    [call] = done.tool_calls
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    assert call.id.startswith("call_")
    assert done.reasoning == "hmm" and done.finish_reason == "tool_calls"
    assert done.usage == Usage(prompt_tokens=9, completion_tokens=2, cached_tokens=4)
