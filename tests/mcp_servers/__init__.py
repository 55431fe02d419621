"""Small MCP servers (official SDK) that the MCP tool tests run over stdio and HTTP."""

from __future__ import annotations

import sys
from pathlib import Path

CALC = [sys.executable, str(Path(__file__).with_name("calc.py"))]
