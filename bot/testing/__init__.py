"""Test doubles shipped with fanbot: fake platform and model servers, a private Redis."""
