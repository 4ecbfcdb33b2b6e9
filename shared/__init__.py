"""hango-context: keeps long agent sessions inside the context window without rewriting history."""
