"""Frontends: build the IR of a model family from its architecture and weights."""
