"""wt_jax: weight tying for language models, word2vec and NMT in JAX/Flax."""
from setuptools import find_packages, setup

setup(
    name="wt_jax",
    version="0.1.0",
    description=("JAX/Flax reimplementation of Press & Wolf (2017) and Inan et al. (2017): "
                 "tied input/output embeddings for language models."),
    python_requires=">=3.10",
    # `configs` (the paper rows) is importable once installed; `experiments` (the entry points) runs from the
    # checkout (`python -m experiments.ptb`) and is not installed as a top-level package.
    packages=find_packages(include=["wt_jax", "wt_jax.*", "configs"]),
    install_requires=[
        "jax>=0.4.30",
        "jaxlib>=0.4.30",
        "flax>=0.8",
        "optax>=0.2.5",
        "orbax-checkpoint>=0.6",
        "chex>=0.1.86",
        "absl-py>=2.0",
        "ml_collections>=0.1.1",
        "numpy>=1.24",
        "matplotlib>=3.7",  # learning-curve plots (see BUILD_NOTES.md)
        "scipy>=1.10",  # Spearman ρ for the embedding analyses (already a dependency of jax)
        "sentencepiece>=0.1.99",  # joint BPE subwords for NMT
        "sacrebleu>=2.3",  # BLEU for NMT
        "tensorboardX>=2.6",  # TensorBoard event files without TensorFlow (live metrics)
        "safetensors>=0.4",  # the interchange export (wt_jax/interchange.py): weights any framework reads
    ],
    extras_require={
        # nbclient/nbformat/ipykernel: the test suite executes experiments/notebooks/*.ipynb;
        # pytest-xdist: the suite runs on every core (`-n auto`), one test file per worker;
        # gensim: tests/test_export.py reads exported embeddings with gensim's word2vec loader (4.4: numpy 2,
        # wheels for CPython 3.10-3.13); tensorboard: the tests read the event files back with its reader;
        # filelock: the test processes share one XLA compilation cache, which jax locks with it (tests/conftest.py)
        "test": ["pytest>=7", "pytest-xdist>=3.0", "nbclient>=0.7", "nbformat>=5.7", "ipykernel>=6",
                 "gensim>=4.4", "tensorboard>=2.15", "filelock>=3"],
        # WMT14/15 for NMT through tensorflow-datasets, whose translation builders need TensorFlow
        "wmt": ["tensorflow-datasets>=4.9", "tensorflow>=2.15"],
        # Accelerators: jax's own extras (libtpu / the CUDA 12 wheels). jax[tpu] requires the libtpu (and jaxlib)
        # of the jax it resolves to, and pip keeps an installed jax that satisfies install_requires, so
        # `pip install -e '.[tpu]'` brings the libtpu of the jax you have (a mismatched libtpu fails to load).
        # After upgrading jax, install the extra again, or pin explicitly:
        # pip install "jax[tpu]==$(python -c 'import jax; print(jax.__version__)')"
        "tpu": ["jax[tpu]"],
        "cuda": ["jax[cuda12]"],
        # gs:// workdirs: etils' GCS backend (orbax writes buckets through TensorStore itself)
        "gcs": ["etils[epath-gcs]", "gcsfs"],
    },
)
