"""``python -m trainguard.agent``: what backends start on each host, per attempt. The same
options as ``trainguard agent``, parsed with argparse: the agent is on the restart's critical
path, and this entry point does not load the CLI's libraries (typer, rich)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from trainguard.agent.secret import SecretError, take_secret
from trainguard.agent.start import AgentUsageError, controller_address, start_agent


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m trainguard.agent",
                                 description="Run this host's part of one attempt for a "
                                 "trainguard controller (see `trainguard agent --help`).")
    ap.add_argument("--controller-addr", help="HOST:PORT the controller listens on (required)")
    ap.add_argument("--controller", dest="controller_alias", help=argparse.SUPPRESS)
    ap.add_argument("--session", required=True)
    ap.add_argument("--attempt", type=int, default=0)
    ap.add_argument("--node")
    ap.add_argument("--work-dir", type=Path)
    ap.add_argument("--secret-file", type=Path)
    ap.add_argument("--secret-stdin", action="store_true",
                    help="read the secret from the first line of standard input")
    ap.add_argument("--poll-interval", type=float, default=0.05)
    args = ap.parse_args(argv)
    try:
        # First: out of the environment (a re-exec; see trainguard.agent.secret).
        secret = take_secret(reexec=argv is None, stdin=args.secret_stdin)
        controller = controller_address(args.controller_addr, args.controller_alias)
        return start_agent(controller, args.session, args.attempt, args.node,
                           args.work_dir, args.secret_file, args.poll_interval, secret)
    except (AgentUsageError, SecretError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
