"""Write tests/data/fresh_rule_answers.jsonl: what the rules answered before each corpus existed.

    python scripts/fresh_rule_answers.py

Every held-out corpus (``tests/data/realworld_heldout*/``) was collected after the rules of its
day and measured once; later rounds of rules were written with it in view. To replay what a
*fresh* route sees, this script checks out, for each corpus, the parent of the commit that added
its ``labels.jsonl`` (a detached ``git worktree`` under a temporary folder), copies the corpus in,
and records the first incident's category, action, root signature and confidence as that
commit's code read them (as ``scripts/corpus_accuracy.py`` does; the oldest commits predate the
scan's ``suspicious_lines`` option and scan without it). At commits that have the text model
(``textread.py``), its layer is left out: the replay is what adds it.
``scripts/fit_text_model.py`` replays the text model over these answers to choose its thresholds.
Needs the repository's history (a full clone); takes about a minute.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "fresh_rule_answers.jsonl"

_DUMP = r'''
import json, sys
from pathlib import Path
from trainguard.evidence import ScanOptions, correlate, load_rules, scan_paths
import trainguard.evidence.incidents as incidents
if hasattr(incidents, "read_text"):  # the text model is what the replay adds: leave it out
    incidents.read_text = lambda found, *args, **kwargs: found
rules = load_rules()
try:
    options = ScanOptions(suspicious_lines=True)
except TypeError:  # older than the suspicious-lines scan
    options = ScanOptions()
for name in sys.argv[1:]:
    d = Path("tests/data") / name
    for line in (d / "labels.jsonl").read_text().splitlines():
        if line.strip():
            lab = json.loads(line)
            events, _ = scan_paths([str(d / lab["file"])], rules, options)
            incidents = correlate(events, rules)
            first = incidents[0] if incidents else None
            print(json.dumps({"corpus": name, "file": lab["file"],
                              "category": first.category.value if first else "unknown",
                              "action": first.action.value if first else "none",
                              "signature": first.root_cause.signature if first else None,
                              "confidence": first.root_cause.confidence if first else None}))
'''


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout.strip()


def fork_points() -> dict[str, list[str]]:
    """Commit -> the held-out corpora first added by one of its children."""
    out: dict[str, list[str]] = {}
    for labels in sorted(ROOT.glob("tests/data/realworld_heldout*/labels.jsonl")):
        rel = str(labels.relative_to(ROOT))
        added = git("log", "--diff-filter=A", "--format=%H", "--", rel).splitlines()
        if not added:
            raise SystemExit(f"error: {rel} is not committed")
        out.setdefault(git("rev-parse", f"{added[-1]}^"), []).append(labels.parent.name)
    return out


def answers_at(commit: str, corpora: list[str], tmp: Path) -> list[dict[str, str]]:
    wt = tmp / commit[:12]
    git("worktree", "add", "--detach", str(wt), commit)
    try:
        for name in corpora:
            shutil.copytree(ROOT / "tests" / "data" / name, wt / "tests" / "data" / name,
                            dirs_exist_ok=True)
        run = subprocess.run([sys.executable, "-c", _DUMP, *corpora], cwd=wt, check=True,
                             capture_output=True, text=True, env={"PYTHONPATH": "src"})
        rows = [json.loads(line) for line in run.stdout.splitlines() if line.strip()]
        return [{**r, "commit": commit[:12]} for r in rows]
    finally:
        git("worktree", "remove", "--force", str(wt))


def main() -> int:
    rows: list[dict[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="tg-fresh-") as tmp:
        points = fork_points()
        for i, (commit, corpora) in enumerate(sorted(points.items()), start=1):
            print(f"[{i}/{len(points)}] {commit[:12]}: {', '.join(corpora)}", file=sys.stderr)
            rows += answers_at(commit, corpora, Path(tmp))
    rows.sort(key=lambda r: (r["corpus"], r["file"]))
    OUT.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    print(f"{len(rows)} answers -> {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
