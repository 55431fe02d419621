"""Redis-backed stores. Sync by design: workers are sync, the gateway calls them in a thread."""
