#!/usr/bin/env bash
# Fetches the Java classpaths the tests use, from Maven Central, into a cache
# folder outside the checkout:
#
#   - Apache BookKeeper's server jar and its runtime dependencies (real bookies,
#     the shell, the Java client), from bk-harness/java/pom.xml, into
#     $cache/bookkeeper-<version>/lib;
#   - Apache Pulsar's managed-ledger and broker jars (their metadata classes
#     judge bkswitch's metadata bytes), from bk-harness/java/pulsar/pom.xml,
#     into $cache/pulsar-<version>/lib;
#   - Apache Pulsar's metadata store (`pulsar-metadata`: `EtcdMetadataStore`,
#     with jetcd, gRPC and its own Netty) and its runtime dependencies, from
#     bk-harness/java/pulsar-metadata/pom.xml, into
#     $cache/pulsar-metadata-<version>/lib (a classpath of its own: its Netty,
#     gRPC and ZooKeeper are not BookKeeper's);
#   - Apache Pulsar's broker and its whole runtime classpath (real standalone
#     brokers and the Java Pulsar client of pulsar-harness), from
#     pulsar-harness/java/pom.xml (Pulsar's bill of materials imported), into
#     $cache/pulsar-broker-<version>/lib;
#   - Apache Pulsar's proxy (`pulsar-proxy`, the anchor of the lookup proxy
#     bench) and its runtime dependencies, from pulsar-harness/java/proxy/pom.xml,
#     into $cache/pulsar-proxy-<version>/lib (a classpath of its own: Maven
#     Central has no proxy of the brokers' version, and the one it has is built
#     on another Jetty);
#
#   with $cache = ${BKSWITCH_JAVA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bkswitch/java}
#
#   scripts/fetch-java-deps.sh
#
# Idempotent: when a folder is complete it only says where it is. A download
# goes to a temporary folder that is renamed into place once complete (with a
# `.complete` marker inside), so an interrupted run never looks complete.
# Needs `mvn` (Debian: apt-get install -y maven) and a Java runtime.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${BKSWITCH_JAVA_CACHE:-${XDG_CACHE_HOME:-${HOME:-.}/.cache}/bkswitch/java}"

# fetch <pom> <version property> <folder prefix> <jar that must be there>
fetch() {
  local pom="$1" property="$2" prefix="$3" jar="$4"
  local version
  version="$(sed -n "s:.*<$property>\(.*\)</$property>.*:\1:p" "$pom" | head -n 1)"
  if [ -z "$version" ]; then
    echo "fetch-java-deps: cannot read <$property> from $pom" >&2
    exit 1
  fi
  local dest="$cache/$prefix-$version"
  local lib="$dest/lib"
  local marker="$lib/.complete"
  local want="$lib/$jar-$version.jar"

  if [ -f "$marker" ] && [ -f "$want" ]; then
    echo "$prefix $version classpath present: $lib"
    return 0
  fi
  if ! command -v mvn >/dev/null 2>&1; then
    echo "fetch-java-deps: mvn not found; install Maven (apt-get install -y maven)" >&2
    exit 1
  fi

  mkdir -p "$dest"
  local tmp
  tmp="$(mktemp -d "$dest/lib.partial.XXXXXX")"
  # shellcheck disable=SC2064 # expand now: the folder of this call
  trap "rm -rf '$tmp'" EXIT

  echo "Fetching $prefix $version and its runtime dependencies (Maven Central)..."
  # (Maven 3.8 prints colour resets even with -B: strip them.)
  mvn -q -B -Dstyle.color=never -f "$pom" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$tmp" 2>&1 | sed 's/\x1b\[[0-9;]*m//g'

  if [ ! -f "$tmp/$jar-$version.jar" ]; then
    echo "fetch-java-deps: $jar-$version.jar missing after the download" >&2
    exit 1
  fi
  printf '%s %s\njars %s\n' "$prefix" "$version" "$(ls "$tmp" | grep -c '\.jar$')" >"$tmp/.complete"

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
  echo "$prefix $version classpath ready: $lib"
}

fetch "$here/bk-harness/java/pom.xml" bookkeeper.version bookkeeper bookkeeper-server
fetch "$here/bk-harness/java/pulsar/pom.xml" pulsar.version pulsar managed-ledger
fetch "$here/bk-harness/java/pulsar-metadata/pom.xml" pulsar.version pulsar-metadata pulsar-metadata
fetch "$here/pulsar-harness/java/pom.xml" pulsar.version pulsar-broker pulsar-broker
fetch "$here/pulsar-harness/java/proxy/pom.xml" pulsar.proxy.version pulsar-proxy pulsar-proxy
