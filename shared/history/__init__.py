"""History backends: a tiny shared file system for offloaded history (see ``base``).

Import the backends from their modules (``hango.history.local``, ``.postgres``,
``.factory``); this package init stays empty of imports so that the store, which needs
``hango.history.paths``, and the database backend, which needs the store's tables, do
not import each other in a circle.
"""
