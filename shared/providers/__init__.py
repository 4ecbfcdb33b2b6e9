"""Model providers: the protocol, the Anthropic SDK adapter and a scripted fake."""

from hango.providers.base import Capabilities, Provider

__all__ = ["Capabilities", "Provider"]
