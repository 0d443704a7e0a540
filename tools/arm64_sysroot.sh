#!/bin/sh
# Fetches Debian's arm64 XNNPACK, pthreadpool, cpuinfo and stb (the libraries an aarch64 carve package and its
# demo link) and unpacks them into a sysroot folder, for tests/firmware/cross.py (aarch64 builds, run under
# qemu-aarch64). Nothing is installed: the host's dpkg database, architectures and sources are left alone
# (Debian's libxnnpack-dev:arm64 is not co-installable with the amd64 one: installing it would replace the host's
# XNNPACK).
#
#   tools/arm64_sysroot.sh [--cache DIR]    (default DIR: build/.cache in the repository)
#
# DIR/arm64-debs     the .deb files, fetched with `apt-get download` through a private apt state in DIR/arm64-apt
#                    (arm64 only, Debian's signed Release files checked against debian-archive-keyring, each
#                    .deb's SHA-256 against the signed index): the host's versions of the packages
# DIR/arm64-sysroot  their contents (dpkg-deb -x): usr/include, usr/lib/aarch64-linux-gnu
#
# Prints the sysroot's path as its last line. Idempotent: when the sysroot holds the host's versions it does
# nothing (no network); when the .debs are cached it only unpacks them. The sysroot is built in a temporary
# folder and renamed into place, so it is never half-written.
# Exit status: 0 ready; 3 the packages could not be downloaded (no network, mirror down): cross.py skips;
# 1 anything else (a version the mirror does not have, a tool missing).
# Mirrors: CARVE_DEBIAN_MIRROR (default http://deb.debian.org/debian), CARVE_DEBIAN_SECURITY
# (default http://deb.debian.org/debian-security). Needs apt-get, dpkg-deb and debian-archive-keyring; not root.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
cache=$here/build/.cache
if [ "${1:-}" = "--cache" ] && [ -n "${2:-}" ]; then cache=$2; elif [ $# -gt 0 ]; then
  echo "usage: tools/arm64_sysroot.sh [--cache DIR]" >&2; exit 1
fi
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
debs=$cache/arm64-debs
sysroot=$cache/arm64-sysroot
state=$cache/arm64-apt
# The runtime libraries, their -dev packages (the unversioned .so links and the headers) and stb for the demo.
pkgs="libxnnpack0 libxnnpack-dev libpthreadpool0 libpthreadpool-dev libcpuinfo0 libcpuinfo-dev libstb0 libstb-dev"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

say() { echo "arm64_sysroot: $*" >&2; }
# One at a time (two tests may ask at once): the others wait, then find the sysroot ready.
if command -v flock >/dev/null 2>&1; then exec 9>"$cache/arm64-sysroot.lock"; flock 9; fi
for tool in apt-get dpkg-deb dpkg-query; do
  command -v $tool >/dev/null 2>&1 || { say "$tool not found (a Debian host is needed)"; exit 1; }
done

# The host's version of each package (the amd64 one), so that the arm64 libraries match the headers the host
# build uses; a package the host lacks takes the mirror's candidate ("").
want=""
for p in $pkgs; do
  v=$(dpkg-query -W -f='${Version}' "$p:amd64" 2>/dev/null || dpkg-query -W -f='${Version}' "$p" 2>/dev/null || true)
  want="$want $p=$v"
done
stamp=$(echo "$want" | tr ' ' '\n' | sed '/^$/d')
if [ -f "$sysroot/.carve-stamp" ] && [ "$(cat "$sysroot/.carve-stamp")" = "$stamp" ]; then
  say "up to date: $sysroot"
  echo "$sysroot"
  exit 0
fi

# The cached .deb of p at version v (apt names it p_<v with ':' as %3a>_arm64.deb), or nothing.
cached() {
  [ -n "$2" ] || { ls "$debs/$1"_*_arm64.deb 2>/dev/null | head -n 1; return; }
  f="$debs/${1}_$(echo "$2" | sed 's/:/%3a/g')_arm64.deb"
  [ -f "$f" ] && echo "$f"
  return 0
}
missing=""
for pv in $want; do
  p=${pv%%=*} v=${pv#*=}
  [ -n "$(cached "$p" "$v")" ] || missing="$missing $pv"
done

if [ -n "$missing" ]; then
  if ! command -v gpgv >/dev/null 2>&1 || [ ! -f "$keyring" ]; then
    say "gpgv and $keyring are needed (apt, debian-archive-keyring)"; exit 1
  fi
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  [ -n "$codename" ] || { say "no VERSION_CODENAME in /etc/os-release (not Debian?)"; exit 1; }
  mirror=${CARVE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
  security=${CARVE_DEBIAN_SECURITY:-http://deb.debian.org/debian-security}
  rm -rf "$state"
  mkdir -p "$state/lists/partial" "$state/archives/partial" "$state/etc/preferences.d" "$state/etc/sources.list.d" "$debs"
  : > "$state/status"
  cat > "$state/etc/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: $codename $codename-updates
Components: main
Architectures: arm64
Signed-By: $keyring

Types: deb
URIs: $security
Suites: $codename-security
Components: main
Architectures: arm64
Signed-By: $keyring
EOF
  # A private apt: its own sources, lists, cache and (empty) dpkg status; arm64 its only architecture.
  set -- -q -o Dir::State="$state" -o Dir::State::Lists="$state/lists" -o Dir::State::status="$state/status" \
    -o Dir::Cache="$state" -o Dir::Cache::archives="$state/archives" \
    -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$state/etc/sources.list.d" \
    -o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts="$state/etc/preferences.d" \
    -o APT::Architecture=arm64 -o APT::Architectures::=arm64 -o Acquire::Languages=none \
    -o APT::Update::Error-Mode=any -o Acquire::Retries=2 -o Acquire::http::Timeout=30
  say "fetching the arm64 package indexes of $codename from $mirror and $security"
  if ! apt-get "$@" update >"$state/update.log" 2>&1; then
    sed 's/^/  /' "$state/update.log" >&2
    say "could not download the arm64 package indexes (no network?)"
    rm -rf "$state"
    exit 3
  fi
  args=""
  for pv in $missing; do
    p=${pv%%=*} v=${pv#*=}
    if [ -n "$v" ]; then
      if ! apt-cache "$@" show "$p=$v" >/dev/null 2>&1; then
        say "$p $v (the host's version) is not in $codename's arm64 index; update the host's packages (apt-get upgrade)"
        rm -rf "$state"
        exit 1
      fi
      args="$args $p:arm64=$v"
    else
      args="$args $p:arm64"
    fi
  done
  say "apt-get download$args"
  # shellcheck disable=SC2086
  if ! (cd "$debs" && apt-get "$@" download $args) >"$state/download.log" 2>&1; then
    sed 's/^/  /' "$state/download.log" >&2
    say "could not download the arm64 packages (no network?)"
    rm -rf "$state"
    exit 3
  fi
  rm -rf "$state"   # the indexes (tens of MB) are not needed once the .debs are here
fi

tmp=$(mktemp -d "$cache/arm64-sysroot.tmp.XXXXXX")
for pv in $want; do
  p=${pv%%=*} v=${pv#*=}
  f=$(cached "$p" "$v")
  [ -n "$f" ] || { say "$p: no .deb in $debs after the download"; rm -rf "$tmp"; exit 1; }
  dpkg-deb -x "$f" "$tmp" || { say "$f: dpkg-deb -x failed"; rm -rf "$tmp"; exit 1; }
done
for lib in libXNNPACK.so libpthreadpool.so libcpuinfo.so libstb.so; do
  [ -e "$tmp/usr/lib/aarch64-linux-gnu/$lib" ] || { say "$lib missing from the unpacked packages"; rm -rf "$tmp"; exit 1; }
done
echo "$stamp" > "$tmp/.carve-stamp"
rm -rf "$sysroot"
mv "$tmp" "$sysroot"
say "unpacked $(echo "$want" | wc -w) packages into $sysroot"
echo "$sysroot"
