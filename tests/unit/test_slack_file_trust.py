"""The bot token goes to Slack's file URLs over https only (issue 27)."""

from __future__ import annotations

import pytest

from adapters.slack.files import trusted

SLACK_API = "https://slack.com/api/"
FAKE_API = "http://127.0.0.1:8123/api/"  # a test server, configured as FANBOT_SLACK__API_URL


@pytest.mark.parametrize(
    ("url", "api_url", "ok"),
    [
        ("https://files.slack.com/files-pri/T1-F1/download/a.txt", SLACK_API, True),
        ("https://slack.com/files/a.txt", SLACK_API, True),
        ("http://files.slack.com/files-pri/T1-F1/download/a.txt", SLACK_API, False),
        ("ftp://files.slack.com/a.txt", SLACK_API, False),
        ("ws://files.slack.com/a.txt", SLACK_API, False),
        ("https://files.slack.com.evil.example/a.txt", SLACK_API, False),
        ("https://evil.example/files.slack.com/a.txt", SLACK_API, False),
        ("http://127.0.0.1:8123/files/a.txt", FAKE_API, True),  # the configured host, its scheme
        ("ftp://127.0.0.1:8123/files/a.txt", FAKE_API, False),
        ("https://127.0.0.1:8123/files/a.txt", SLACK_API, False),
        ("file:///etc/passwd", SLACK_API, False),
    ],
)
def test_token_only_to_slack_over_https(url: str, api_url: str, ok: bool) -> None:
    assert trusted(url, api_url) is ok
