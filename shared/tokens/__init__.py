"""Token budget over the whole request: estimators and the input-token figure."""
