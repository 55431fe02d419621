"""Slack files end to end: the gateway, forked workers, the Slack adapter and FakeSlack.

A person shares a text file in a thread with a mention; the turn's text names
``inbox/<file>`` and the session workspace holds its bytes. A subagent whose model writes
``out/result.txt`` gets that file uploaded into the same thread after its announce.
"""

from __future__ import annotations

import pytest

from bot.testing.scripted import ChatRequest, Reply, ScriptedModel, Text
from bot.testing.scripted import is_subagent as _is_subagent
from tests.e2e.test_files_e2e import workspace_file, writer
from tests.e2e.test_slack_e2e import CHANNEL, MENTION, announces, main_agent, running

pytestmark = pytest.mark.e2e


def main(request: ChatRequest) -> Reply:
    if "[attached:" in request.last_user_message:
        return Text("I see the file.")
    return main_agent(request)


def model() -> ScriptedModel:
    return ScriptedModel().on(lambda r: r.has_tool("sessions_spawn"), main).on(_is_subagent, writer)


async def test_a_shared_file_reaches_the_turn_and_a_written_file_the_thread(
    redis_url: str,
) -> None:
    async with running(redis_url, model()) as env:
        slack = env.slack
        opener = slack.message(text="looking at some numbers today")  # no mention: ignored
        await slack.wait_ack(await slack.push_event(opener))
        root = str(opener["ts"])
        notes = slack.files.host("notes.txt", b"alpha beta", mimetype="text/plain")
        shared = slack.app_mention(
            text=f"{MENTION} summarize the attached file", thread_ts=root,
            subtype="file_share", files=[notes],
        )  # fmt: skip
        await slack.wait_ack(await slack.push_event(shared))
        await env.stack.wait_for(
            lambda: any(m.text == "I see the file." for m in slack.messages), timeout=30
        )
        [turn] = [r for r in env.main_requests() if "[attached:" in r.last_user_message]
        assert "summarize the attached file" in turn.last_user_message
        assert "[attached: inbox/notes.txt (text/plain, 10 B)]" in turn.last_user_message
        assert workspace_file(redis_url, "/inbox/notes.txt") == b"alpha beta"
        [seen] = [m for m in slack.messages if m.text == "I see the file."]
        assert seen.thread_ts == root

        await slack.push_event(slack.message(text=f"{MENTION} spawn report", thread_ts=root))
        await env.stack.wait_for(lambda: len(slack.files.uploads) == 1, timeout=40)
        await env.stack.wait_for(env.drained)
    [announce] = announces(slack.messages)
    assert "wrote out/result.txt" in announce.text and announce.thread_ts == root
    [upload] = slack.files.uploads
    assert (upload.filename, upload.data) == ("result.txt", b"42\n")
    assert (upload.channel, upload.thread_ts) == (CHANNEL, root)
