"""Failure evidence: logs and XIDs -> typed events -> incidents."""

from __future__ import annotations

from trainguard.evidence.events import EvidenceLine, FailureEvent, TimeKind
from trainguard.evidence.incidents import Incident, correlate
from trainguard.evidence.rules import Rule, RuleSet, load_rules
from trainguard.evidence.scanner import ScanOptions, ScanStats, ScanWarning, scan_bytes, scan_paths
from trainguard.evidence.xid import XidInfo, parse_xid_line, xid_catalog, xid_info

__all__ = [
    "EvidenceLine",
    "FailureEvent",
    "Incident",
    "Rule",
    "RuleSet",
    "ScanOptions",
    "ScanStats",
    "ScanWarning",
    "TimeKind",
    "XidInfo",
    "correlate",
    "load_rules",
    "parse_xid_line",
    "scan_bytes",
    "scan_paths",
    "xid_catalog",
    "xid_info",
]
