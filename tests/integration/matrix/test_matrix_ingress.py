"""Matrix ingress against a real Synapse: nothing is confirmed before the sink took it.

"Confirmed" on Matrix is the saved sync token: an event the sink refused (Redis down) must
come back in a later sync of this process, and after a restart, until the sink takes it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from adapters.matrix import MatrixChannel
from bot.testing import until
from bot.testing.synapse import MatrixUser, Synapse
from bot.types import Inbound
from tests.matrix_support import Human, matrix_settings


class Refusing:
    """A sink that refuses every message while ``down`` (the gateway with Redis down)."""

    def __init__(self) -> None:
        self.down = True
        self.refused: list[str] = []
        self.taken: list[Inbound] = []

    async def __call__(self, inbound: Inbound) -> None:
        if self.down:
            self.refused.append(inbound.message_id)
            raise RuntimeError("redis is down")
        self.taken.append(inbound)

    def taken_ids(self) -> list[str]:
        return [i.message_id for i in self.taken]


async def test_refused_events_are_synced_again_and_survive_a_restart(
    synapse: Synapse,
    bot_user: MatrixUser,
    make_human: Callable[[str], Human],
    adapters: list[MatrixChannel],
    tmp_path: Path,
) -> None:
    human = make_human("bob")
    settings = matrix_settings(synapse, bot_user, allow=[human.user.user_id])
    sink = Refusing()
    first = MatrixChannel(settings=settings, store_path=tmp_path / "bot")
    await first.start(sink)
    adapters.append(first)
    room = await human.create_room(invite=[bot_user.user_id])
    await human.wait_joined(room, bot_user.user_id)

    sent = [await human.send(room, f"message {i}") for i in range(3)]
    # The same first event comes back: the batch is synced again, not skipped.
    await until(lambda: sink.refused.count(sent[0]) >= 2, timeout=30)
    await first.stop()
    assert sink.taken == []

    sink.down = False
    second = MatrixChannel(settings=settings, store_path=tmp_path / "bot")
    await second.start(sink)
    adapters.append(second)
    await until(lambda: set(sent) <= set(sink.taken_ids()), timeout=30)
    firsts = list(dict.fromkeys(i for i in sink.taken_ids() if i in sent))
    assert firsts == sent  # in order, none lost
