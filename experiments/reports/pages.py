"""The study page results/<name>/README.md: its generated parts between the report's markers, the hand-written
prose around them kept (the marker rules: experiments/report.py's docstring)."""
from __future__ import annotations

import logging
import os
from pathlib import Path

from experiments.reports.records import import_runs, runs_folder

log = logging.getLogger(__name__)

def splice_readme(readme: Path, name: str, body: str) -> bool:
  """Replace the text between the markers `<!-- report:NAME:begin -->` and `<!-- report:NAME:end -->` in
  `readme` (a study page or a README) with `body`, keeping the rest; False if the markers are absent."""
  begin, end = f"<!-- report:{name}:begin -->", f"<!-- report:{name}:end -->"
  text = readme.read_text() if readme.exists() else ""
  if begin not in text or end not in text:
    return False
  head, rest = text.split(begin, 1)
  _, tail = rest.split(end, 1)
  readme.write_text(f"{head}{begin}\n{body}\n{end}{tail}")
  return True


def write_page(page: Path, name: str, title: str, body: str, runs: str = "") -> None:
  """The study page results/<name>/README.md: `body` (the table part) between the report's markers and
  `runs` (the run records) between its runs markers, the hand-written prose around them kept. On a page
  without the runs markers `runs` follows `body` inside the report's markers; a page without the report's
  markers (or no page yet) is written whole: `title`, then each part in its markers."""
  text = page.read_text() if page.exists() else ""
  has = lambda key: f"<!-- report:{key}:begin -->" in text and f"<!-- report:{key}:end -->" in text
  if has(name):
    if runs and has(f"{name}:runs"):
      splice_readme(page, f"{name}:runs", runs)
    elif runs:
      body = f"{body}\n\n{runs}"
    splice_readme(page, name, body)
    return
  if text:
    log.info("%s has no <!-- report:%s:begin/end --> markers; writing the whole page", page, name)
  block = lambda key, part: f"<!-- report:{key}:begin -->\n{part}\n<!-- report:{key}:end -->\n"
  page.write_text(f"# {title}\n\n{block(name, body)}" + (f"\n{block(name + ':runs', runs)}" if runs else ""))


def _report_dir(name: str, out_root: Path, runs_dir: Path | None) -> Path:
  """results/<name>/, after importing the finished runs of `runs_dir` into it (if given)."""
  report_dir = out_root / name
  report_dir.mkdir(parents=True, exist_ok=True)
  if runs_dir is not None:
    log.info("imported %s", import_runs(runs_folder(runs_dir), report_dir))
  return report_dir


def _write(name: str, report_dir: Path, readme: Path | None, title: str, lead: str, tab: str, png: Path | None,
           figure_label: str, prov: str, readme_runs: str) -> None:
  """The study page results/<name>/README.md (its generated parts: `lead`, the table, the figure, the
  rebuild command; the run records) and, if `readme` is given, its section there."""
  local_fig = f"\n\n![{figure_label}]({png.name})" if png else ""
  write_page(report_dir / "README.md", name, title,
             f"{lead}\n\n{tab}{local_fig}\n\nRebuild: `python -m experiments.report {name}`", f"## Runs\n\n{prov}")
  if readme is not None:
    rel = lambda p: Path(os.path.relpath(p.resolve(), readme.resolve().parent)).as_posix()
    fig = f"\n\n![{figure_label}]({rel(png)})" if png else ""
    body = f"{tab}{fig}\n\n{readme_runs}: `{rel(report_dir / 'README.md')}`."
    if not splice_readme(readme, name, body):
      log.warning("%s has no <!-- report:%s:begin/end --> markers; README not updated", readme, name)
