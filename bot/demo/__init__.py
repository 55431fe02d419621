"""The offline demo model of ``fanbot console``: a scripted chat-completions server.

Production code (the console) runs it when no model endpoint is configured;
:mod:`bot.testing` builds its ``FakeOpenAI`` on the same server. The replies a script
gives and the request it answers are in :mod:`bot.demo.replies`. Nothing here imports
:mod:`bot.testing`.
"""

from bot.demo.chat_server import ChatServer
from bot.demo.model import demo_model

__all__ = ["ChatServer", "demo_model"]
