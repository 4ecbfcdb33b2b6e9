"""The agent loop: turns, tool execution, the overflow ladder and the middleware chain."""
