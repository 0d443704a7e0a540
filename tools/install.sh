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
# toolchains of the firmware tests (tests/firmware/cross.py): Cortex-M (newlib) and aarch64 Linux, and
# qemu-user, which runs the aarch64 builds (qemu-aarch64, with libc6-arm64-cross as the guest's libc) and the
# host build of tests/firmware/qemu_m7.py on a CPU without AVX2 (qemu-x86_64), and qemu-system-arm, whose
# mps2-an500 machine runs that test's bare-metal Cortex-M7 image.
# Debian's libxnnpack-dev:arm64 is not co-installable with the amd64 one (not Multi-Arch: same; installing it
# replaces the host's XNNPACK), so it is never installed: see the arm64 sysroot below.
if [ $want_test = 1 ]; then
  debs="$debs clang valgrind gcc-arm-none-eabi libnewlib-arm-none-eabi gcc-aarch64-linux-gnu libc6-dev-arm64-cross"
  debs="$debs qemu-user qemu-system-arm"
  # ccache: the test suite's compiler cache for the packages it builds (tests/test_env.cmake; build/.cache/ccache)
  debs="$debs ccache"
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
  check="$check, pytest, torch, torchvision, ultralytics, cv2, atheris, pycocotools"
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

# ---- arm64 sysroot (--test) -------------------------------------------------
# Debian's arm64 XNNPACK, pthreadpool, cpuinfo and stb, the host's versions, downloaded with a private apt
# state (signed indexes) and unpacked, not installed, into build/.cache/arm64-sysroot, for the aarch64 builds
# of tests/firmware/cross.py; cached (a second run downloads nothing). A failed download does not stop the
# install: cross.py runs the script again and, if the download is still impossible, reports its aarch64 tests
# skipped (exit 77).
if [ $want_test = 1 ]; then
  if ! log=$(sh "$here/tools/arm64_sysroot.sh" 2>&1); then
    echo "$log" >&2
    echo "install: tools/arm64_sysroot.sh failed; tests/firmware/cross.py tries again (and skips without network)" >&2
  fi
fi
