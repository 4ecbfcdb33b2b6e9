"""The Anthropic Messages API gateway (``hango serve``): hango's context management for any
client that speaks the API, with no code change. See docs/gateway.md."""
