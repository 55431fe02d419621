"""Terminal chat channel."""
