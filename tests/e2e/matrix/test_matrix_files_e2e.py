"""Files in and out of a Matrix room through forked workers and the real Synapse.

A person posts a file with "summarize this": the turn names ``inbox/notes.txt`` and the
workspace holds it; the main agent spawns a subagent that writes ``out/result.txt``, which
arrives in the room as an ``m.file`` after the announce.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from nio import MemoryDownloadResponse, RoomMessageFile

from adapters.matrix import build
from bot.config import Settings
from bot.testing import Call, FakeOpenAI, ScriptedModel, Stack, Text, ToolCalls
from bot.testing.synapse import MatrixUser, Synapse
from tests.e2e.matrix.test_matrix_e2e import matrix_values
from tests.e2e.test_files_e2e import workspace_file, writer
from tests.integration.matrix.test_matrix_files import send_file
from tests.matrix_support import Human

pytestmark = pytest.mark.e2e


def model() -> ScriptedModel:
    spawn = ToolCalls([Call("sessions_spawn", {"task": "write the result", "label": "Result"})])
    return (
        ScriptedModel(default=Text("Started."))
        .on(
            lambda r: (
                r.has_tool("sessions_spawn")
                and "[attached:" in r.last_user_message
                and r.last_role == "user"
            ),
            spawn,
            times=1,
        )
        .on(lambda r: not r.has_tool("sessions_spawn"), writer)
    )


# Under a loaded CI (four test processes on two cores) the download after the stack has
# stopped can leave nio's transport to the garbage collector, and the run can take longer
# than the default 120 s: neither is what this test is about.
@pytest.mark.filterwarnings("ignore:unclosed transport:ResourceWarning")
@pytest.mark.timeout(300)
async def test_a_file_in_reaches_the_turn_and_a_written_file_goes_out(
    redis_url: str,
    synapse: Synapse,
    bot_user: MatrixUser,
    make_human: Callable[[str], Human],
    tmp_path: Path,
) -> None:
    human = make_human("gus")
    room = await human.create_room(invite=[bot_user.user_id], direct=True)
    async with FakeOpenAI(model(), models=["fake-model"]) as fake:
        values = matrix_values(
            redis_url,
            fake.base_url,
            synapse,
            bot_user,
            tmp_path / "bot",
            allow_users=[human.user.user_id],
        )
        adapter = build(Settings(**values))
        async with Stack(values=values, adapters=[adapter], workers=1) as stack:
            await human.wait_joined(room, bot_user.user_id)
            await send_file(human, room, "notes.txt", b"alpha beta", caption="summarize this")

            def file_out() -> RoomMessageFile | None:
                return next(
                    (
                        e
                        for e in human.timeline
                        if isinstance(e, RoomMessageFile) and e.sender == bot_user.user_id
                    ),
                    None,
                )

            async def poll() -> RoomMessageFile:
                while (found := file_out()) is None:
                    await human.sync(timeout=1000)
                return found

            out = await asyncio.wait_for(poll(), 60)
            turns = [r.chat.last_user_message for r in fake.requests if r.chat.tools]
            inbox = workspace_file(redis_url, "/inbox/notes.txt")  # stored with a leading /
            assert stack is not None
    assert any("[attached: inbox/notes.txt (text/plain" in t for t in turns), turns
    assert inbox == b"alpha beta"
    assert out.body == "result.txt"
    downloaded = await human.client.download(mxc=out.url)
    assert isinstance(downloaded, MemoryDownloadResponse) and downloaded.body == b"42\n"
