import pytest

from bot.commands.parse import parse_command
from bot.sessions import is_child_session_key, new_child_session_key, requester_session_key
from bot.types import ThreadRef


@pytest.mark.parametrize(
    ("thread", "is_dm", "key"),
    [
        (
            ThreadRef(platform="slack", account="T", chat="C1", thread="1.2"),
            False,
            "agent:main:slack:C1:thread:1.2",
        ),
        (
            ThreadRef(platform="telegram", account="7", chat="-100", thread="5"),
            False,
            "agent:main:telegram:-100:topic:5",
        ),
        (
            ThreadRef(platform="telegram", account="7", chat="-100"),
            False,
            "agent:main:telegram:-100",
        ),
        (
            ThreadRef(platform="matrix", account="@b:x", chat="!r:x", thread="$e"),
            False,
            "agent:main:matrix:!r:x:thread:$e",
        ),
        (ThreadRef(platform="slack", account="T", chat="D1"), True, "agent:main:slack:dm:U1"),
        (
            ThreadRef(platform="slack", account="T", chat="D1", thread="9.9"),
            True,
            "agent:main:slack:dm:U1:thread:9.9",
        ),
    ],
)
def test_requester_session_keys(thread: ThreadRef, is_dm: bool, key: str) -> None:
    assert requester_session_key(agent_id="main", thread=thread, is_dm=is_dm, user_id="U1") == key


def test_child_keys() -> None:
    key = new_child_session_key("main")
    assert key.startswith("agent:main:subagent:") and is_child_session_key(key)
    assert not is_child_session_key("agent:main:slack:C1")


@pytest.mark.parametrize(
    ("text", "name", "args"),
    [
        ("/help", "help", ()),
        ("  /subagents list", "subagents", ("list",)),
        ("/SUBAGENTS info #1", "subagents", ("info", "#1")),
        ("/subagents send 1 hello  world", "subagents", ("send", "1", "hello", "world")),
        ("/stop\nplease", "stop", ("please",)),
    ],
)
def test_parse_command(text: str, name: str, args: tuple[str, ...]) -> None:
    command = parse_command(text)
    assert command is not None and command.name == name and command.args == args


@pytest.mark.parametrize("text", ["hello", "", "/", "/ list", "a /help", "//x", "/123"])
def test_not_commands(text: str) -> None:
    assert parse_command(text) is None
