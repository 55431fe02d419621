"""Test doubles shipped with fanbot, so you can test your own bot the way fanbot tests itself.

Protocol-level fakes of the platforms and the model (real SDKs talk to them over loopback
HTTP), a scripted model, an in-process model for unit tests of the agent loop
(``FunctionModel``), an in-memory channel, a private Redis and Synapse, the end-to-end
harness (gateway + forked workers), and waits on a condition. Importing this package
starts nothing; every server starts when you enter it (``async with`` / ``with``).

Example::

    model = ScriptedModel(default=Text("hi"))
    async with FakeOpenAI(model) as llm:
        client = AsyncOpenAI(base_url=llm.base_url, api_key="x")
"""

from bot.redis.server import RedisServer
from bot.testing.channel import MemoryChannel
from bot.testing.fake_matrix import FakeMatrix
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.fake_slack import FakeSlack
from bot.testing.fake_telegram import FakeTelegram
from bot.testing.function_model import FunctionModel
from bot.testing.otlp import FakeCollector
from bot.testing.replay_openai import Fixture, ReplayOpenAI, load_fixtures
from bot.testing.scripted import (
    Call,
    ChatRequest,
    Fail,
    Hang,
    ScriptedModel,
    Text,
    ToolCalls,
    is_subagent,
)
from bot.testing.stack import Stack
from bot.testing.synapse import Synapse
from bot.testing.wait import until, wait_until

__all__ = [
    "Call",
    "ChatRequest",
    "Fail",
    "FakeCollector",
    "FakeMatrix",
    "FakeOpenAI",
    "FakeSlack",
    "FakeTelegram",
    "Fixture",
    "FunctionModel",
    "Hang",
    "MemoryChannel",
    "RedisServer",
    "ReplayOpenAI",
    "ScriptedModel",
    "Stack",
    "Synapse",
    "Text",
    "ToolCalls",
    "is_subagent",
    "load_fixtures",
    "until",
    "wait_until",
]
