"""Slack over HTTP, issue 31: what bolt cannot read is a 400 and one line; what fanbot does not
act on is a 200; an uninstalled workspace gets nothing more, the others go on."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from adapters.slack import SlackChannel
from bot.errors import DeliveryError
from bot.testing import slack_wire as wire
from bot.testing.fake_slack import FakeSlack
from bot.types import Inbound, Outbound, OutboundKind, Platform, ThreadRef
from tests.integration.slack_support import Served, served, slack

__all__ = ["served", "slack"]  # fixtures


def ours(caplog: pytest.LogCaptureFixture, level: int = logging.WARNING) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= level]


def no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    assert [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR] == []


@pytest.mark.parametrize(
    "body",
    [
        {"type": "interactive_message", "callback_id": "c", "user": {"id": "U1"}},
        {"type": "workflow_step_edit", "callback_id": "c", "user": {"id": "U1"}},
        {"type": "view_submission", "view": {"type": "workflow_step", "callback_id": "c"}},
        {"type": "block_actions", "user": {"id": "U1"}, "actions": []},
    ],
    ids=["no-actions", "no-workflow-step", "step-save-no-workflow-step", "empty-actions"],
)
async def test_interactivity_bolt_cannot_read_is_400_and_one_line(
    slack: FakeSlack, served: Served, caplog: pytest.LogCaptureFixture, body: dict[str, Any]
) -> None:
    caplog.set_level(logging.INFO)
    assert [await served.post(slack, body, form=True) for _ in range(3)] == [400] * 3
    assert len(ours(caplog)) == 1
    no_traceback(caplog)


async def test_app_rate_limited_is_200_with_a_warning_naming_the_minute(
    slack: FakeSlack, served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    body = {"token": "t", "type": "app_rate_limited", "team_id": "T1",
            "minute_rate_limited": 1518467820, "api_app_id": "A1"}  # fmt: skip
    assert await served.post(slack, body) == 200
    [line] = ours(caplog)
    assert "minute_rate_limited=1518467820 (2018-02-12 20:37 UTC)" in line and "T1" in line
    no_traceback(caplog)


@pytest.mark.parametrize(
    ("body", "form"),
    [
        ({"type": "shortcut", "callback_id": "other-app", "user": {"id": "U1"}}, True),
        ({"type": "view_closed", "view": {"type": "modal", "callback_id": "v"}}, True),
        ({"type": "block_actions", "actions": [{"action_id": "theirs", "type": "button"}]}, True),
        (
            wire.event_callback(
                {"type": "reaction_added", "user": "U1"}, team_id="T0FANBOT", app_id="A0FANBOT"
            ),
            False,
        ),
    ],
    ids=["shortcut", "view-closed", "someone-elses-button", "reaction"],
)
async def test_what_fanbot_does_not_act_on_is_200_without_a_warning(
    slack: FakeSlack,
    served: Served,
    caplog: pytest.LogCaptureFixture,
    body: dict[str, Any],
    form: bool,
) -> None:
    caplog.set_level(logging.INFO)
    assert await served.post(slack, body, form=form) == 200
    assert ours(caplog) == [] and served.inbox == []


def reply(team: str) -> Outbound:
    thread = ThreadRef(platform=Platform.SLACK, account=team, chat="C0GENERAL", thread="1.2")
    return Outbound(thread=thread, text="hi", kind=OutboundKind.REPLY)


def lifecycle_event(slack: FakeSlack, team: str, event: dict[str, Any]) -> dict[str, Any]:
    return wire.event_callback(event, team_id=team, app_id=slack.app_id)


@pytest.mark.parametrize(
    "event",
    [{"type": "app_uninstalled"}, {"type": "tokens_revoked", "tokens": {"bot": ["U0FANBOT"]}}],
    ids=["app_uninstalled", "tokens_revoked"],
)
async def test_a_lost_workspace_gets_nothing_more_the_others_go_on(
    slack: FakeSlack, served: Served, caplog: pytest.LogCaptureFixture, event: dict[str, Any]
) -> None:
    caplog.set_level(logging.INFO)
    body = lifecycle_event(slack, "T0OTHER", event)
    assert [await served.post(slack, body) for _ in range(2)] == [200, 200]  # and a retry
    [line] = ours(caplog)
    assert event["type"] in line and "T0OTHER" in line
    with pytest.raises(DeliveryError) as refused:
        await served.adapter.send(reply("T0OTHER"))
    assert refused.value.permanent
    mention = slack.app_mention(text="<@U0FANBOT> hi", team="T0OTHER")
    assert await served.post(slack, wire.event_callback(mention, team_id="T0OTHER",
                                                        app_id=slack.app_id)) == 200  # fmt: skip
    assert served.inbox == []  # its events are dropped
    await served.adapter.send(reply(slack.team_id))  # the bot's own workspace goes on
    assert [m.text for m in slack.messages] == ["hi"]
    good = slack.event_body(slack.app_mention(text="<@U0FANBOT> still here"))
    assert await served.post(slack, good) == 200
    assert [i.text for i in served.inbox] == ["still here"]
    no_traceback(caplog)


async def test_user_tokens_revoked_changes_nothing(slack: FakeSlack, served: Served) -> None:
    event = {"type": "tokens_revoked", "tokens": {"oauth": ["U0HUMAN01"]}}
    assert await served.post(slack, lifecycle_event(slack, slack.team_id, event)) == 200
    await served.adapter.send(reply(slack.team_id))
    assert [m.text for m in slack.messages] == ["hi"]


# -- Socket Mode: the same payloads are acked (a redelivery would fail alike), one line each --


@pytest.fixture
async def socket(slack: FakeSlack) -> AsyncIterator[list[Inbound]]:
    inbox: list[Inbound] = []

    async def sink(inbound: Inbound) -> None:
        inbox.append(inbound)

    adapter = SlackChannel(settings=slack.settings())
    await adapter.start(sink)
    await slack.wait_connected()
    try:
        yield inbox
    finally:
        await adapter.stop()


@pytest.mark.parametrize(
    "body",
    [
        {"type": "block_actions", "user": {"id": "U1"}, "team": {"id": "T1"}},  # no actions
        {"type": "workflow_step_edit", "callback_id": "c", "user": {"id": "U1"}},
        {"type": "block_actions", "team": 5, "actions": [{"action_id": "a"}]},  # bolt's request
        {"type": "shortcut", "callback_id": "someone-elses", "user": {"id": "U1"}},  # 200 anyway
    ],
    ids=["no-actions", "no-workflow-step", "team-a-number", "not-ours"],
)
async def test_socket_mode_acks_what_it_cannot_or_need_not_read(
    slack: FakeSlack,
    socket: list[Inbound],
    caplog: pytest.LogCaptureFixture,
    body: dict[str, Any],
) -> None:
    caplog.set_level(logging.INFO)
    for _ in range(2):
        await slack.wait_ack(await slack.push_interactive(body))
    assert len(ours(caplog)) == (0 if body["type"] == "shortcut" else 1)
    no_traceback(caplog)
    assert socket == []
    await slack.wait_ack(await slack.push_event(slack.app_mention(text="<@U0FANBOT> still up")))
    assert [i.text for i in socket] == ["still up"]
