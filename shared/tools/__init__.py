"""The model's built-in tools (file tools over the history backend, ``compact_conversation``)
and the registry that runs them.
"""
