"""trainguard: keep large multi-node training runs alive."""

from __future__ import annotations

from trainguard.errors import TrainguardError
from trainguard.taxonomy import Action, Category, Severity

__version__ = "0.1.0"

__all__ = ["Action", "Category", "Severity", "TrainguardError", "__version__"]
