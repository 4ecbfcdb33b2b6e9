"""The in-process implementations of the ``Summarizer`` and ``HistoryOffloader`` ports."""
