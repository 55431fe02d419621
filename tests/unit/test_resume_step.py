"""Where a lost attempt's step stood, read from its recorded context (:mod:`bot.agent.resume`)."""

from __future__ import annotations

import json
from typing import Any

from bot.agent.resume import INTERRUPTED, PendingStep, pending_step, steps_taken

SAFE = frozenset({"read_file", "web_fetch"})


def call(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


def answer(*calls: dict[str, Any], content: str = "") -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = list(calls)
    return message


def result(call_id: str, content: str = "ok") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


START = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}]


def read(messages: list[dict[str, Any]]) -> PendingStep:
    return pending_step(messages, repeat_safe=SAFE.__contains__)


def test_nothing_answered_yet_means_the_model_call_is_made_again() -> None:
    assert read(START) == PendingStep()
    assert read([]) == PendingStep()


def test_after_a_tool_result_the_next_model_call_is_made() -> None:
    messages = [*START, answer(call("a", "write_file", file_path="/x")), result("a")]
    assert read(messages) == PendingStep()


def test_an_answer_without_calls_was_the_end_only_its_ending_was_lost() -> None:
    got = read([*START, answer(content="all done")])
    assert got.answer_seen and got.answered == "all done"
    assert got.calls == () and got.interrupted == ()


def test_a_steering_message_after_the_answer_means_go_on() -> None:
    messages = [*START, answer(content="done"), {"role": "user", "content": "one more"}]
    assert read(messages) == PendingStep()


def test_a_call_in_flight_not_safe_to_repeat_is_reported_interrupted_and_the_rest_run() -> None:
    first = call("a", "write_file", file_path="/x", content="1")
    second = call("b", "read_file", file_path="/x")
    got = read([*START, answer(first, second)])
    assert got.interrupted == ({"role": "tool", "tool_call_id": "a", "content": INTERRUPTED},)
    assert [c.id for c in got.calls] == ["b"]
    assert got.names == ("write_file",) and got.repeated == ""
    assert not got.answer_seen


def test_a_call_in_flight_safe_to_repeat_runs_again_with_the_rest() -> None:
    first = call("a", "read_file", file_path="/x")
    second = call("b", "write_file", file_path="/y", content="2")
    got = read([*START, answer(first, second)])
    assert got.interrupted == () and got.repeated == "read_file"
    assert [(c.id, c.name) for c in got.calls] == [("a", "read_file"), ("b", "write_file")]
    assert json.loads(got.calls[0].arguments) == {"file_path": "/x"}


def test_the_first_call_without_a_result_was_the_one_in_flight() -> None:
    calls = [call("a", "read_file"), call("b", "execute"), call("c", "web_fetch")]
    got = read([*START, answer(*calls), result("a")])
    assert [n["tool_call_id"] for n in got.interrupted] == ["b"]
    assert [c.id for c in got.calls] == ["c"]


def test_only_the_last_answer_counts() -> None:
    earlier = answer(call("a", "execute"))  # its result came: not in flight
    messages = [*START, earlier, result("a"), answer(call("b", "web_fetch", url="u"))]
    got = read(messages)
    assert got.repeated == "web_fetch" and [c.id for c in got.calls] == ["b"]


def test_malformed_recorded_calls_are_skipped() -> None:
    broken = {"role": "assistant", "content": "", "tool_calls": [{"id": "z"}, "nonsense"]}
    got = read([*START, broken])
    assert got.answer_seen  # no readable call: it is read as an answer


def test_steps_taken_counts_the_model_answers() -> None:
    messages = [*START, answer(call("a", "ls")), result("a"), answer(content="done")]
    assert steps_taken(messages) == 2
    assert steps_taken(START) == 0
