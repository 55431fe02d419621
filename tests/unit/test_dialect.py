"""Each server kind's dialect, how ``auto`` guesses it, and what a client learns from 400s."""

from __future__ import annotations

import threading
import typing

import pytest

from bot.config import ServerKind
from bot.models.dialect import DIALECTS, Learned, dialect_for, guess_kind, refused_parameter


@pytest.mark.parametrize(
    ("base_url", "kind"),
    [
        ("https://api.openai.com/v1", "openai"),
        ("https://myres.openai.azure.com/openai/v1/", "azure"),
        ("https://myres.cognitiveservices.azure.com/openai/v1", "azure"),
        ("https://openrouter.ai/api/v1", "openrouter"),
        ("https://generativelanguage.googleapis.com/v1beta/openai/", "gemini"),
        ("https://api.anthropic.com/v1/", "anthropic"),
        ("https://api.deepseek.com", "deepseek"),
        ("https://api.deepseek.com/v1", "deepseek"),
        ("https://api.mistral.ai/v1", "mistral"),
        ("https://api.groq.com/openai/v1", "groq"),
        ("http://localhost:11434/v1", "ollama"),
        ("http://gpu-box:1234/v1", "lmstudio"),
        ("http://vllm.internal:8000/v1", "generic"),
        ("http://127.0.0.1:8080/v1", "generic"),
        # Look-alikes are not the provider.
        ("https://api.openai.com.evil.example/v1", "generic"),
        ("https://notopenrouter.ai/v1", "generic"),
        ("https://openai.azure.com.example/v1", "generic"),
        ("", "generic"),
        (None, "generic"),
        ("not a url", "generic"),
        ("http://[::1", "generic"),  # unparsable
        ("http://host:notaport/v1", "generic"),
    ],
)
def test_auto_guesses_the_kind_from_the_base_url(base_url: str | None, kind: str) -> None:
    assert guess_kind(base_url) == kind
    assert dialect_for("auto", base_url).kind == kind


def test_every_server_kind_has_a_dialect_and_an_explicit_kind_wins() -> None:
    kinds = set(typing.get_args(ServerKind)) - {"auto"}
    assert kinds == set(DIALECTS)
    for kind in kinds:
        assert dialect_for(kind, "https://api.openai.com/v1").kind == kind


def shape(kind: str, **kw: typing.Any) -> dict[str, typing.Any]:
    args: dict[str, typing.Any] = {
        "model": "m",
        "max_output_tokens": 500,
        "thinking": "low",
        "has_tools": True,
    }
    return dialect_for(kind, None).shape(**(args | kw))


def test_openai_sends_usage_completion_tokens_effort_and_parallel_calls() -> None:
    assert shape("openai") == {
        "stream_options": {"include_usage": True},
        "max_completion_tokens": 500,
        "reasoning_effort": "low",
        "parallel_tool_calls": True,
    }
    assert dialect_for("azure", None).key_header == "api-key"
    assert shape("azure") == shape("openai")


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("vllm", {"stream_options": {"include_usage": True}, "max_tokens": 500,
                  "reasoning_effort": "low"}),
        ("ollama", {"stream_options": {"include_usage": True}, "max_tokens": 500,
                    "reasoning_effort": "low"}),
        ("llamacpp", {"stream_options": {"include_usage": True}, "max_tokens": 500}),
        ("lmstudio", {"stream_options": {"include_usage": True}, "max_tokens": 500}),
        ("gemini", {"stream_options": {"include_usage": True}, "max_tokens": 500,
                    "reasoning_effort": "low"}),
        ("anthropic", {"stream_options": {"include_usage": True}, "max_tokens": 500,
                       "parallel_tool_calls": True}),
        ("deepseek", {"stream_options": {"include_usage": True}, "max_tokens": 500}),
        ("mistral", {"max_tokens": 500, "parallel_tool_calls": True}),
        ("openrouter", {"stream_options": {"include_usage": True}, "max_tokens": 500,
                        "reasoning": {"effort": "low"}, "parallel_tool_calls": True}),
        ("litellm", {"stream_options": {"include_usage": True}, "max_tokens": 500,
                     "reasoning_effort": "low", "parallel_tool_calls": True}),
        ("groq", {"stream_options": {"include_usage": True}, "max_completion_tokens": 500,
                  "reasoning_effort": "low", "parallel_tool_calls": True}),
        ("generic", {"stream_options": {"include_usage": True}, "max_completion_tokens": 500,
                     "reasoning_effort": "low"}),
    ],
)  # fmt: skip
def test_each_kind_shapes_the_request_its_way(kind: str, expected: dict[str, object]) -> None:
    assert shape(kind) == expected


def test_nothing_optional_is_sent_when_nothing_is_asked() -> None:
    bare = shape("openai", max_output_tokens=None, thinking="off", has_tools=False)
    assert bare == {"stream_options": {"include_usage": True}}
    assert "reasoning_effort" not in shape("openai", thinking="")
    assert shape("mistral", max_output_tokens=None, thinking="", has_tools=False) == {}


@pytest.mark.parametrize("model", ["o1", "o3-mini", "o4-mini", "gpt-5", "openai/gpt-5-mini"])
def test_reasoning_models_get_no_temperature(model: str) -> None:
    assert "temperature" not in shape("openai", model=model, temperature=0.2)
    assert "temperature" not in shape("azure", model=model, temperature=0.2)
    assert shape("openai", model="gpt-4o", temperature=0.2)["temperature"] == 0.2
    assert shape("vllm", model=model, temperature=0.2)["temperature"] == 0.2


# -- learning from 400s -------------------------------------------------------------------

SENT = {"stream_options", "max_tokens", "reasoning_effort", "parallel_tool_calls", "temperature"}


@pytest.mark.parametrize(
    ("status", "body", "refused"),
    [
        # OpenAI: o-series and max_tokens, with the param named.
        (400, {"message": "Unsupported parameter: 'max_tokens' is not supported with this "
               "model. Use 'max_completion_tokens' instead.", "type": "invalid_request_error",
               "param": "max_tokens", "code": "unsupported_parameter"}, "max_tokens"),
        # The same words without the param field.
        (400, {"error": {"message": "Unsupported parameter: 'max_tokens' is not supported "
               "with this model. Use 'max_completion_tokens' instead."}}, "max_tokens"),
        # Azure (older API versions).
        (400, {"error": {"message": "Unrecognized request argument supplied: stream_options",
               "code": None}}, "stream_options"),
        # OpenAI: a reasoning model and a temperature.
        (400, {"message": "Unsupported value: 'temperature' does not support 0.2 with this "
               "model. Only the default (1) value is supported.", "param": "temperature",
               "code": "unsupported_value"}, "temperature"),
        # Mistral: pydantic's extra_forbidden, 422.
        (422, {"object": "error", "message": {"detail": [{"type": "extra_forbidden",
               "loc": ["body", "stream_options", "include_usage"],
               "msg": "Extra inputs are not permitted", "input": True}]},
               "type": "invalid_request_error", "param": None, "code": None}, "stream_options"),
        # Gemini: an unknown field.
        (400, [{"error": {"code": 400, "message": 'Invalid JSON payload received. Unknown name '
                '"parallel_tool_calls": Cannot find field.', "status": "INVALID_ARGUMENT"}}],
         "parallel_tool_calls"),
        # Groq: a property unsupported by the model.
        (400, {"error": {"message": "`reasoning_effort` is not supported with this model",
               "type": "invalid_request_error"}}, "reasoning_effort"),
    ],
)  # fmt: skip
def test_a_400_naming_a_refused_parameter_is_understood(
    status: int, body: object, refused: str
) -> None:
    assert refused_parameter(status, body, "", SENT) == refused


@pytest.mark.parametrize(
    ("status", "body", "sent"),
    [
        (400, {"message": "This model's maximum context length is 8192 tokens."}, SENT),
        (500, {"message": "Unsupported parameter: 'max_tokens'"}, SENT),  # not a 400
        (400, {"message": "Unsupported parameter: 'logprobs'"}, SENT),  # not one we sent
        (400, {"message": "Unsupported parameter: 'max_tokens'"}, set()),
        (400, {"message": "max_tokens must be at least 1"}, SENT),  # not a refusal
        (400, "garbage", SENT),
        (400, None, SENT),
        # a name inside a longer word is not that name
        (400, {"message": "Unsupported parameter: 'max_tokens_per_day'"}, {"max_tokens"}),
    ],
)
def test_other_400s_are_not_taken_for_a_refused_parameter(
    status: int, body: object, sent: set[str]
) -> None:
    assert refused_parameter(status, body, "", sent) is None


def test_the_sdk_message_is_read_too() -> None:
    said = "Error code: 400 - Unrecognized request argument supplied: parallel_tool_calls"
    assert refused_parameter(400, None, said, SENT) == "parallel_tool_calls"


def test_learning_switches_the_token_parameter_then_drops_both() -> None:
    dialect = dialect_for("vllm", None)
    learned = Learned()

    def sent() -> dict[str, typing.Any]:
        return dialect.shape(
            model="m", max_output_tokens=9, thinking="high", has_tools=True, learned=learned
        )

    assert sent()["max_tokens"] == 9
    assert learned.learn("max_tokens") is True
    assert sent()["max_completion_tokens"] == 9 and "max_tokens" not in sent()
    assert learned.learn("max_tokens") is False  # known: a retry would change nothing
    assert learned.learn("max_completion_tokens") is True
    assert "max_tokens" not in sent() and "max_completion_tokens" not in sent()
    assert learned.learn("stream_options") is True
    assert learned.learn("stream_options") is False
    assert sent() == {"reasoning_effort": "high"}


def test_learning_is_per_instance_and_thread_safe() -> None:
    one, other = Learned(), Learned()
    results: list[bool] = []
    lock = threading.Lock()

    def learn() -> None:
        said = one.learn("parallel_tool_calls")
        with lock:
            results.append(said)

    threads = [threading.Thread(target=learn) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert results.count(True) == 1 and len(results) == 16
    assert one.dropped() == {"parallel_tool_calls"} and other.dropped() == frozenset()
