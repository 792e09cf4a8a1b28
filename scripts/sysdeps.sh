#!/usr/bin/env bash
# Install the Debian packages trainguard's test suite needs (real servers for integration tests).
#
# Idempotent and fast: packages already installed are detected with `dpkg -s` and nothing touches
# apt unless something is missing. If packages cannot be installed (no apt, not root and no sudo,
# no network) this prints a warning and exits 0: the integration tests then skip with a reason,
# except under CI=true where their fixtures fail instead.
#
# Usage: scripts/sysdeps.sh            # install what is missing
#        scripts/sysdeps.sh --check    # only report; exit 1 if something is missing
set -euo pipefail

# One package per line; append here (e.g. prometheus) when a test needs another server.
PACKAGES=(
  postgresql   # tests/integration/conftest.py: postgres_url fixture (initdb, pg_ctl)
  prometheus   # tests/integration/prometheus_server.py: prometheus_factory fixture (prometheus, promtool)
  prometheus-alertmanager # tests/integration/test_alertmanager_real.py: real Alertmanager
  slurmctld    # tests/integration/slurm_cluster.py: slurm_cluster fixture (controller)
  slurmd       # tests/integration/slurm_cluster.py: slurm_cluster fixture (one slurmd per node)
  slurm-client # tests/integration/slurm_cluster.py: slurm_cluster fixture (sbatch, scontrol, ...)
  munge        # tests/integration/slurm_cluster.py: slurm_cluster fixture (munged, auth)
  chromium     # tests/integration/test_report_render.py: renders the HTML report headless
  iproute2     # src/trainguard/devcluster: ip netns / veth / bridge for the multi-host test cluster
  util-linux   # src/trainguard/devcluster: nsenter, unshare, mount for the virtual hosts
)

warn() { printf 'sysdeps: warning: %s\n' "$*" >&2; }
info() { printf 'sysdeps: %s\n' "$*"; }

installed() {
  # dpkg-query prints one short line: no early-exit grep + SIGPIPE under pipefail.
  [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" == "install ok installed" ]]
}

if ! command -v dpkg >/dev/null 2>&1; then
  warn "dpkg not found (not a Debian-based system); install manually: ${PACKAGES[*]}"
  [[ "${1:-}" == "--check" ]] && exit 1
  exit 0
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  installed "$pkg" || missing+=("$pkg")
done

if ((${#missing[@]} == 0)); then
  info "all present: ${PACKAGES[*]}"
  exit 0
fi

if [[ "${1:-}" == "--check" ]]; then
  info "missing: ${missing[*]}"
  exit 1
fi

if [[ "$(id -u)" -eq 0 ]]; then
  SUDO=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  SUDO=(sudo -n)
else
  warn "missing ${missing[*]} and cannot install (not root, no passwordless sudo);" \
    "integration tests that need them will be skipped"
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  warn "missing ${missing[*]} and apt-get is not available; integration tests will be skipped"
  exit 0
fi

info "installing: ${missing[*]}"
if ! "${SUDO[@]}" apt-get update -q ||
  ! "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${missing[@]}"; then
  warn "apt-get failed to install ${missing[*]}; integration tests that need them will be skipped"
  exit 0
fi

for pkg in "${missing[@]}"; do
  installed "$pkg" || warn "$pkg still not installed after apt-get"
done
info "done"
