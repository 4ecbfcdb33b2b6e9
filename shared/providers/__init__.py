"""Model providers: the protocol, the Anthropic SDK adapter and a scripted fake."""
