"""Analyses of trained embeddings (word similarity, Table-4 correlations, subspace distance)."""
