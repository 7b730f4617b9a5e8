"""wt_jax: weight tying (Press & Wolf 2017; Inan, Khosravi & Socher 2017) in JAX/Flax."""

__version__ = "0.1.0"
