"""The base layer: wire types, every exception, settings, model profiles, safe ids.

Imports nothing else of the product; everything else may import it.
"""
