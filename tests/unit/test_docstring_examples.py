"""Every example in trainguard's docstrings runs and holds (or says ``+SKIP``: a sketch that
needs a server, a cluster or a running job).

Without this the examples are never run: pytest collects doctests only with
``--doctest-modules``, and a wrong one misleads the reader who copies it.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from pathlib import Path

import pytest

import trainguard

MODULES = sorted(m.name for m in pkgutil.walk_packages(trainguard.__path__, "trainguard."))


def test_every_module_is_found() -> None:
    assert len(MODULES) > 300 and "trainguard.detect.sparse" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # an example that writes a relative path writes it here
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS, verbose=False)
    report: list[str] = []
    for test in finder.find(module, name):
        runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
