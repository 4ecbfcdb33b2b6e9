"""The composition root: builds the agent, the history backend and the queued ports from
one ``Settings``. The only place that knows every concrete class.
"""
