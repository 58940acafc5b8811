#!/usr/bin/env bash
# Fetches the Java classpath of the BookKeeper test harness (bk-harness): Apache
# BookKeeper's server jar and its runtime dependencies, from Maven Central, into a
# cache folder outside the checkout:
#
#   ${BKSWITCH_JAVA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bkswitch/java}/bookkeeper-<version>/lib
#
#   scripts/fetch-java-deps.sh
#
# Idempotent: when the folder is complete it only says where it is. A download
# goes to a temporary folder that is renamed into place once complete (with a
# `.complete` marker inside), so an interrupted run never looks complete.
# Needs `mvn` (Debian: apt-get install -y maven) and a Java runtime.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pom="$here/bk-harness/java/pom.xml"

version="$(sed -n 's:.*<bookkeeper.version>\(.*\)</bookkeeper.version>.*:\1:p' "$pom" | head -n 1)"
if [ -z "$version" ]; then
  echo "fetch-java-deps: cannot read <bookkeeper.version> from $pom" >&2
  exit 1
fi

cache="${BKSWITCH_JAVA_CACHE:-${XDG_CACHE_HOME:-${HOME:-.}/.cache}/bkswitch/java}"
dest="$cache/bookkeeper-$version"
lib="$dest/lib"
marker="$lib/.complete"

if [ -f "$marker" ] && [ -f "$lib/bookkeeper-server-$version.jar" ]; then
  echo "BookKeeper $version classpath present: $lib"
  exit 0
fi

if ! command -v mvn >/dev/null 2>&1; then
  echo "fetch-java-deps: mvn not found; install Maven (apt-get install -y maven)" >&2
  exit 1
fi

mkdir -p "$dest"
tmp="$(mktemp -d "$dest/lib.partial.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

echo "Fetching BookKeeper $version and its runtime dependencies (Maven Central)..."
# (Maven 3.8 prints colour resets even with -B: strip them.)
mvn -q -B -Dstyle.color=never -f "$pom" dependency:copy-dependencies \
  -DincludeScope=runtime -DoutputDirectory="$tmp" 2>&1 | sed 's/\x1b\[[0-9;]*m//g'

if [ ! -f "$tmp/bookkeeper-server-$version.jar" ]; then
  echo "fetch-java-deps: bookkeeper-server-$version.jar missing after the download" >&2
  exit 1
fi
printf 'bookkeeper-server %s\njars %s\n' "$version" "$(ls "$tmp" | grep -c '\.jar$')" >"$tmp/.complete"

# A leftover folder without the marker is an older interrupted attempt.
if [ -d "$lib" ] && [ ! -f "$marker" ]; then
  rm -rf "$lib"
fi
if ! mv -T "$tmp" "$lib" 2>/dev/null; then
  # Another run finished first: keep its folder.
  if [ ! -f "$marker" ]; then
    echo "fetch-java-deps: cannot move the classpath into $lib" >&2
    exit 1
  fi
fi
trap - EXIT
rm -rf "$tmp"
echo "BookKeeper $version classpath ready: $lib"
