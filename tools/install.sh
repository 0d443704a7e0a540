#!/bin/sh
# Installs what carve needs on a fresh Debian machine (run as root); fast when all is there.
#   tools/install.sh          generator + C toolchain + XNNPACK (what `make demo` needs)
#   tools/install.sh --test   also the test oracle (torch, ultralytics, pytest) and the security tests'
#                             tools (clang, valgrind, atheris)
# pip downloads are cached in build/.cache/pip (not in git).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
want_test=0
[ "${1:-}" = "--test" ] && want_test=1

# ---- Debian packages --------------------------------------------------------
debs="build-essential cmake libxnnpack-dev libpthreadpool-dev libcpuinfo-dev libstb-dev"
# --test: clang too (the portable backend's packages are also compiled with it, tests/portable; libFuzzer
# and the sanitizers of tests/security), valgrind (tests/security: memcheck of the demo), and the cross
# toolchains of the firmware tests (tests/firmware/cross.py): Cortex-M (newlib) and aarch64 Linux. Debian's
# libxnnpack-dev:arm64 is not co-installable with the amd64 one (not Multi-Arch: same), so the aarch64 xnnpack
# build is compiled, not linked.
if [ $want_test = 1 ]; then
  debs="$debs clang valgrind gcc-arm-none-eabi libnewlib-arm-none-eabi gcc-aarch64-linux-gnu libc6-dev-arm64-cross"
fi
missing=""
command -v python3 >/dev/null 2>&1 || missing=" python3 python3-pip"
for p in $debs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "install: apt-get install$missing"
  if [ "$(id -u)" != 0 ]; then echo "install: run as root to install Debian packages:$missing" >&2; exit 1; fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# ---- Python packages --------------------------------------------------------
py=${PYTHON:-python3}
check='import jinja2, yaml, numpy'
req="$here/requirements.txt"
if [ $want_test = 1 ]; then
  check="$check, pytest, torch, torchvision, ultralytics, cv2, atheris"
  req="$here/requirements-test.txt"
fi
if ! $py -c "$check" >/dev/null 2>&1; then
  echo "install: pip install -r $(basename "$req") (first time: a few minutes)"
  mkdir -p "$here/build/.cache/pip"
  extra=""
  # Debian's own python3 is "externally managed" (PEP 668): allow pip to install beside it.
  [ -f "$($py -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')/EXTERNALLY-MANAGED" ] && extra="--break-system-packages"
  PIP_CACHE_DIR="$here/build/.cache/pip" $py -m pip install -q --disable-pip-version-check \
    --root-user-action=ignore $extra -r "$req"
fi
