#!/usr/bin/env bash
# Makes the Python virtual environment the Pulsar harness runs its Python
# traffic client in (pulsar-harness/python/traffic.py): Apache Pulsar's
# Python client, pinned, from PyPI, into
#
#   ${BKSWITCH_PULSAR_PYTHON:-${XDG_CACHE_HOME:-$HOME/.cache}/bkswitch/python/pulsar-<version>}
#
#   scripts/fetch-pulsar-python.sh
#
# Idempotent: when the environment is complete (a `.complete` marker inside)
# it only says where it is. It is built in a temporary folder renamed into
# place once the client imports, so an interrupted run never looks complete.
# (A virtual environment records its own path in its scripts, but the harness
# runs `<venv>/bin/python` directly, which works from the renamed folder.)
# Needs python3 with the venv module (Debian: apt-get install -y python3-venv).
set -euo pipefail

# Keep in step with PYTHON_CLIENT_VERSION in pulsar-harness/src/install.rs.
version=3.13.0
dest="${BKSWITCH_PULSAR_PYTHON:-${XDG_CACHE_HOME:-${HOME:-.}/.cache}/bkswitch/python/pulsar-$version}"
marker="$dest/.complete"
python="${PYTHON:-python3}"

if [ -f "$marker" ] && [ -x "$dest/bin/python" ]; then
  echo "pulsar-client $version environment present: $dest"
  exit 0
fi
if ! "$python" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  echo "fetch-pulsar-python: $python cannot make virtual environments; install python3-venv" >&2
  exit 1
fi

mkdir -p "$(dirname "$dest")"
tmp="$(mktemp -d "$dest.partial.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

echo "Installing pulsar-client $version (PyPI) into a virtual environment..."
"$python" -m venv "$tmp"
"$tmp/bin/python" -m pip install --quiet --disable-pip-version-check \
  --only-binary=:all: "pulsar-client==$version"
"$tmp/bin/python" -c "import pulsar; assert pulsar.__version__ == '$version', pulsar.__version__"
printf 'pulsar-client %s\npython %s\n' "$version" "$("$tmp/bin/python" -c 'import sys; print(sys.version.split()[0])')" >"$tmp/.complete"

# A leftover folder without the marker is an older interrupted attempt.
if [ -d "$dest" ] && [ ! -f "$marker" ]; then
  rm -rf "$dest"
fi
if ! mv -T "$tmp" "$dest" 2>/dev/null; then
  # Another run finished first: keep its folder.
  if [ ! -f "$marker" ]; then
    echo "fetch-pulsar-python: cannot move the environment into $dest" >&2
    exit 1
  fi
fi
trap - EXIT
rm -rf "$tmp"
echo "pulsar-client $version environment ready: $dest"
