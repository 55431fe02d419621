"""The offline demo model of ``fanbot console``: a scripted chat-completions server.

Production code (the console) runs it when no model endpoint is configured;
:mod:`bot.testing` builds its ``FakeOpenAI`` on the same server. Nothing here imports
:mod:`bot.testing`.
"""

from bot.demo.chat_server import ChatServer
from bot.demo.model import demo_model
from bot.demo.replies import (
    Call,
    ChatRequest,
    Fail,
    Hang,
    Reply,
    Script,
    Text,
    ToolCalls,
    ToolResult,
    message_text,
)

__all__ = [
    "Call",
    "ChatRequest",
    "ChatServer",
    "Fail",
    "Hang",
    "Reply",
    "Script",
    "Text",
    "ToolCalls",
    "ToolResult",
    "demo_model",
    "message_text",
]
