"""The pure core of compaction: tool groups, keep boundaries, tool-argument truncation,
mechanical truncation, validation, repair of the sent copy, the compaction record, the
head message, the summary prompt and the extractive summary, and the jobs the slow part
receives (``jobs``).

Pure functions over the wire types: no I/O, no clocks, no store, queue or provider.
"""
