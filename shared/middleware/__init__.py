"""The middleware chain in front of the provider: one module per middleware (tool-argument
truncation, summarization, prompt-cache breakpoints, file tools), the call contract
(``base``), the loop's observer hooks (``observer``) and the order (``chain``).
"""
