"""Multi30k task 1 (Elliott et al. 2016, 2017): parallel image captions in English, German and French.

Files live in `<data root>/multi30k/` as `<split>.<lang>.gz` (raw, untokenised text, one sentence a line;
line i of every language of a split is one parallel tuple), the layout of the `multi30k/dataset` repository's
`data/task1/raw/`. Splits: `train` (29,000), `val` (1,014) and `test_2016_flickr` (1,000), which `load_pair`
returns as 'train', 'valid' and 'test' (the split names every translation corpus here uses). When missing,
files are downloaded from that repository (raw.githubusercontent.com).
"""
from __future__ import annotations

from pathlib import Path

from wt_jax.data import paths
from wt_jax.errors import InputError

URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"
FILES = {"train": "train", "valid": "val", "test": "test_2016_flickr"}  # split → file stem
SPLITS = tuple(FILES)
LANGS = ("en", "de", "fr")


def split_file(folder: Path, split: str, lang: str) -> Path | None:
  return paths.find_file(folder, [f"{split}.{lang}.gz", f"{split}.{lang}"])


def ensure(langs: tuple[str, ...], data_dir: str | None = None, download: bool = True,
           url: str = URL) -> Path:
  """The folder holding every split of `langs`, downloading the missing files first if allowed."""
  for lang in langs:
    if lang not in LANGS:
      raise InputError(f"Unknown Multi30k language {lang!r}; expected one of {', '.join(LANGS)}.")
  folder = paths.data_root(data_dir) / "multi30k"
  missing = [(s, l) for s in FILES.values() for l in langs if not split_file(folder, s, l)]
  if missing and not download:
    raise paths.DataUnavailableError(
        f"Multi30k files missing in {folder}: {', '.join(f'{s}.{l}.gz' for s, l in missing)}. Set the "
        f"environment variable {paths.ENV_VAR} (or --config.data_dir) to the folder that holds multi30k/.")
  for s, l in missing:
    paths.download_file(f"{url}/{s}.{l}.gz", folder / f"{s}.{l}.gz")
  return folder


def read_lines(path: Path) -> list[str]:
  return [line.rstrip("\n") for line in paths.read_lines(path)]


def load_pair(src: str, tgt: str, data_dir: str | None = None, download: bool = True,
              url: str = URL) -> dict[str, tuple[list[str], list[str]]]:
  """{'train'|'valid'|'test': (source sentences, target sentences)}, each list aligned line by line."""
  if src == tgt:
    raise InputError(f"Source and target language are both {src!r}.")
  folder = ensure((src, tgt), data_dir, download, url)
  out = {}
  for split, stem in FILES.items():
    a, b = read_lines(split_file(folder, stem, src)), read_lines(split_file(folder, stem, tgt))
    if len(a) != len(b):
      raise InputError(f"Multi30k {stem}: {len(a)} {src} lines but {len(b)} {tgt} lines in {folder}.")
    if not a:
      raise InputError(f"Multi30k {stem} split in {folder} is empty.")
    out[split] = (a, b)
  return out
