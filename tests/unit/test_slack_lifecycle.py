"""The Slack rules of issue 31, pure: which signed bodies bolt cannot read, and Slack's notices."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.slack import http, lifecycle

ACTION = {"type": "button", "action_id": "a", "block_id": "b", "value": "v"}
VIEW = {"type": "modal", "callback_id": "v1"}
STEP = {"workflow_step_edit_id": "e", "inputs": {}, "outputs": []}


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"type": "block_actions", "user": {"id": "U1"}}, "block_actions without 'actions'"),
        ({"type": "block_actions", "actions": []}, "block_actions without 'actions'"),
        ({"type": "block_actions", "actions": ["a"]}, "block_actions 'actions' are not objects"),
        (
            {"type": "block_actions", "actions": [{"type": "button"}]},
            "without a string 'action_id'",
        ),
        ({"type": "interactive_message", "callback_id": "c"}, "interactive_message without"),
        ({"type": "interactive_message", "actions": [ACTION]}, "without a string 'callback_id'"),
        ({"type": "workflow_step_edit", "callback_id": "c"}, "without 'workflow_step'"),
        ({"type": "view_submission"}, "view_submission without a 'view' object"),
        ({"type": "view_closed", "view": "v"}, "view_closed without a 'view' object"),
        ({"type": "view_closed", "view": {"callback_id": "v"}}, "'view' without a string 'type'"),
        (
            {"type": "view_submission", "view": {"type": "workflow_step", "callback_id": "c"}},
            "of a workflow step without 'workflow_step'",
        ),
        ({"type": "shortcut", "callback_id": 7}, "'callback_id' is not a string"),
        ({"type": "message_action"}, "message_action without a string 'callback_id'"),
        ({"type": "dialog_submission"}, "dialog_submission without"),
        ({"type": "block_suggestion", "value": "x"}, "block_suggestion without"),
    ],
)
def test_interactivity_bolt_cannot_read_is_named(body: dict[str, Any], problem: str) -> None:
    found = http.shape_problem(body)
    assert found is not None and problem in found


@pytest.mark.parametrize(
    "body",
    [
        {"type": "block_actions", "actions": [ACTION]},
        {"type": "interactive_message", "callback_id": "c", "actions": [{"name": "n"}]},
        {"type": "workflow_step_edit", "callback_id": "c", "workflow_step": STEP},
        {"type": "view_submission", "view": VIEW},
        {"type": "view_closed", "view": VIEW},
        {
            "type": "view_submission",
            "view": {"type": "workflow_step", "callback_id": "c"},
            "workflow_step": STEP,
        },
        {"type": "shortcut", "callback_id": "c"},
        {"type": "block_suggestion", "action_id": "a"},
        {"type": "app_rate_limited", "minute_rate_limited": 1518467820},
        {"type": "event_callback", "event": {"type": "workflow_step_execute"}},
        {"type": "something_new"},
    ],
)
def test_interactivity_bolt_can_read_passes(body: dict[str, Any]) -> None:
    assert http.shape_problem(body) is None


def test_bolts_own_readers_are_the_safety_net() -> None:
    # to_action reads actions[0]: a shape interactivity_problem would let through if it
    # checked less is still refused, by bolt's reader itself.
    assert http.reader_problem({"type": "interactive_message", "callback_id": "c"}) is not None
    assert http.reader_problem({"type": "block_actions", "actions": [ACTION]}) is None


@pytest.mark.parametrize(
    ("body", "text"),
    [
        ({"type": "app_rate_limited", "minute_rate_limited": 1518467820}, "2018-02-12 20:37 UTC"),
        ({"type": "app_rate_limited", "minute_rate_limited": "soon"}, "minute_rate_limited='soon'"),
        ({"type": "app_rate_limited", "minute_rate_limited": 10**30}, "minute_rate_limited="),
        ({"type": "app_rate_limited"}, "minute_rate_limited=None"),
    ],
)
def test_rate_limited_names_the_minute(body: dict[str, Any], text: str) -> None:
    minute = lifecycle.rate_limited(body)
    assert minute is not None and text in minute and "minute_rate_limited" in minute


def test_rate_limited_is_only_that_notice() -> None:
    assert lifecycle.rate_limited({"type": "event_callback"}) is None


def wrapped(event: dict[str, Any], **outer: Any) -> dict[str, Any]:
    return {"type": "event_callback", "team_id": "T1", "event": event, **outer}


@pytest.mark.parametrize(
    ("body", "lost"),
    [
        (wrapped({"type": "app_uninstalled"}), ("T1", "app_uninstalled")),
        (wrapped({"type": "tokens_revoked", "tokens": {"bot": ["U1"]}}), ("T1", "tokens_revoked")),
        (wrapped({"type": "tokens_revoked", "tokens": {"oauth": ["U1"]}}), None),
        (wrapped({"type": "tokens_revoked", "tokens": "x"}), None),
        (wrapped({"type": "reaction_added"}), None),
        (
            {
                "type": "event_callback",
                "event": {"type": "app_uninstalled"},
                "authorizations": [{"team_id": "T2"}],
            },
            ("T2", "app_uninstalled"),
        ),
        ({"type": "event_callback", "event": {"type": "app_uninstalled"}}, None),  # no team
        ({"type": "app_uninstalled"}, None),
    ],
)
def test_lost_workspace(body: dict[str, Any], lost: tuple[str, str] | None) -> None:
    found = lifecycle.lost_workspace(body)
    assert (found.team_id, found.event) == lost if found else lost is None


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (wrapped({"type": "reaction_added"}), "event reaction_added"),
        ({"command": "/hello"}, "command /hello"),
        ({"type": "shortcut"}, "shortcut"),
        ({}, "payload"),
    ],
)
def test_kind_of(body: dict[str, Any], kind: str) -> None:
    assert lifecycle.kind_of(body) == kind
