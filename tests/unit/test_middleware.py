import pytest

from bot.config import PlatformAccess, Settings
from bot.gateway.admission import Verdict, decide, session_counts
from bot.types import Inbound, Sender, ThreadRef


def inbound(**kw: object) -> Inbound:
    base: dict[str, object] = dict(
        thread=ThreadRef(platform="slack", account="T", chat="C1", thread="1.0"),
        sender=Sender(user_id="U1"),
        text="hello",
        message_id="m1",
        mentioned=True,
    )
    base.update(kw)
    return Inbound(**base)  # type: ignore[arg-type]


CASES = [
    ({}, {}, False, Verdict.ACCEPT),
    ({"sender": Sender(user_id="B", is_self=True)}, {}, False, Verdict.SELF),
    ({"sender": Sender(user_id="B", is_bot=True)}, {}, False, Verdict.BOT),
    ({"is_edit": True}, {}, False, Verdict.EDIT),
    ({"text": "   "}, {}, False, Verdict.EMPTY),
    ({}, {"allow_users": ["U2"]}, False, Verdict.DENIED),
    ({}, {"allow_chats": ["C9"]}, False, Verdict.DENIED),
    ({}, {"allow_users": ["U1"], "allow_chats": ["C1"]}, False, Verdict.ACCEPT),
    ({"mentioned": False}, {}, False, Verdict.UNADDRESSED),
    ({"mentioned": False}, {}, True, Verdict.ACCEPT),  # a thread the bot is part of
    ({"mentioned": False}, {"continue_threads": False}, True, Verdict.UNADDRESSED),
    (
        {"mentioned": False, "thread": ThreadRef(platform="slack", account="T", chat="C1")},
        {},
        True,
        Verdict.UNADDRESSED,
    ),
    ({"mentioned": False, "is_dm": True}, {}, False, Verdict.ACCEPT),
    ({"text": "x" * 200_000}, {}, False, Verdict.ACCEPT),  # ingress cuts it first
]


@pytest.mark.parametrize(("fields", "access", "session_exists", "verdict"), CASES)
def test_middleware_rules(
    fields: dict[str, object], access: dict[str, object], session_exists: bool, verdict: Verdict
) -> None:
    result = decide(
        inbound(**fields),
        settings=Settings(),
        access=PlatformAccess(**access),  # type: ignore[arg-type]
        session_exists=session_exists,
    )
    assert result is verdict


@pytest.mark.parametrize(("fields", "access", "session_exists", "verdict"), CASES)
def test_the_session_is_asked_about_only_where_it_changes_the_verdict(
    fields: dict[str, object], access: dict[str, object], session_exists: bool, verdict: Verdict
) -> None:
    message, settings = inbound(**fields), Settings()
    rules = PlatformAccess(**access)  # type: ignore[arg-type]
    both = {
        decide(message, settings=settings, access=rules, session_exists=e) for e in (False, True)
    }
    assert session_counts(message, settings=settings, access=rules) or len(both) == 1
