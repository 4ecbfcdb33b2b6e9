"""Model providers: the protocol, the Anthropic SDK adapter and a scripted fake."""

from shared.providers.base import Capabilities, Provider, TokenCounter

__all__ = ["Capabilities", "Provider", "TokenCounter"]
