"""Corpora, vocabularies, batching and data-directory resolution."""
