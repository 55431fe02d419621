"""Channel adapters: native events to Inbound, Outbound to native calls."""
