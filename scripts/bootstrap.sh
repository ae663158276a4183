#!/usr/bin/env bash
# Installs every Debian 12 package that building, testing and running the
# firedrill demo need. Safe to run again: with everything present it only asks
# dpkg and exits, without touching apt (no network, no root).
#
# usage: scripts/bootstrap.sh [--dry-run] [EXTRA_PACKAGE...]
#   --dry-run      print what would be installed; change nothing
#   EXTRA_PACKAGE  also require these packages (e.g. a debugger)
set -euo pipefail

readonly SELF="scripts/bootstrap.sh"

PACKAGES=(
  # build
  cmake ninja-build g++ pkg-config git
  # agent: LibTorch, with the OpenMP OpenBLAS it should run on
  libtorch-dev libgloo-dev libopenblas0-openmp
  # RPC and formats
  libgrpc++-dev protobuf-compiler-grpc protobuf-compiler libprotobuf-dev
  libboost-dev libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libspdlog-dev
  # controller store (and the shell to inspect it)
  libsqlite3-dev sqlite3
  libssl-dev
  # tests
  libgtest-dev libgmock-dev
  # reference DDP run for the benchmarks; pgrep/ps for orphan checks;
  # ip and tc for hosts as network namespaces and shaped links
  python3-torch procps iproute2
  # promtool, which checks a scrape of the controller's /metrics (the
  # package's server is not started by the tests)
  prometheus
  # the dashboard's browser tests (tests/e2e/web_test.cc), headless
  chromium
)

usage() {
  sed -n '2,8s/^# \{0,1\}//p' "$0"
}

dry_run=0
for arg in "$@"; do
  case "$arg" in
    --dry-run) dry_run=1 ;;
    -h | --help)
      usage
      exit 0
      ;;
    -*)
      echo "$SELF: unknown option '$arg'" >&2
      usage >&2
      exit 2
      ;;
    *) PACKAGES+=("$arg") ;;
  esac
done

# A package counts as present when dpkg says it is unpacked and configured
# ("install ok installed", or "hold ok installed"); removed-but-configured
# ("deinstall ok config-files") and half-installed states do not.
is_installed() {
  local status
  status="$(dpkg-query -W -f='${Status}\n' "$1" 2>/dev/null || true)"
  [[ "$status" == *"ok installed"* ]]
}

missing=()
for pkg in "${PACKAGES[@]}"; do
  is_installed "$pkg" || missing+=("$pkg")
done

# LibTorch calls BLAS through libblas.so.3, which Debian picks with
# update-alternatives. The reference BLAS is unoptimised (matmuls several
# times slower, which wrecks every throughput ratio a drill measures), and
# the pthread OpenBLAS fights LibTorch's OpenMP threads for the cores.
check_blas() {
  local multiarch link target
  multiarch="$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null ||
    gcc -print-multiarch 2>/dev/null || echo "$(uname -m)-linux-gnu")"
  link="/usr/lib/${multiarch}/libblas.so.3"
  if [[ ! -e "$link" ]]; then
    echo "$SELF: warning: $link does not exist; LibTorch has no BLAS to load (is libopenblas0-openmp installed?)" >&2
    return 0
  fi
  target="$(readlink -f "$link")"
  case "$target" in
    */openblas-openmp/*)
      return 0
      ;;
    */openblas-pthread/*)
      echo "$SELF: warning: libblas.so.3 is the pthread OpenBLAS ($target);" \
        "its threads compete with LibTorch's OpenMP threads and skew drill timings." >&2
      ;;
    *)
      echo "$SELF: warning: libblas.so.3 is $target, not OpenBLAS (OpenMP):" \
        "LibTorch would use the slow reference BLAS and drill timings would be meaningless." >&2
      ;;
  esac
  echo "$SELF: fix with: sudo update-alternatives --set libblas.so.3-${multiarch}" \
    "/usr/lib/${multiarch}/openblas-openmp/libblas.so.3" >&2
}

if ((${#missing[@]} == 0)); then
  check_blas
  exit 0
fi

echo "$SELF: ${#missing[@]} packages to install: ${missing[*]}"
if ((dry_run)); then
  echo "$SELF: dry run; would run: apt-get update && DEBIAN_FRONTEND=noninteractive" \
    "apt-get install -y --no-install-recommends ${missing[*]}"
  check_blas
  exit 0
fi

sudo_cmd=()
if ((EUID != 0)); then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo_cmd=(sudo -n)
  else
    echo "$SELF: ${#missing[@]} packages are missing (${missing[*]}) and installing them needs root;" \
      "run: sudo $SELF" >&2
    exit 1
  fi
fi

"${sudo_cmd[@]}" apt-get update
"${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y --no-install-recommends "${missing[@]}"

# apt-get can succeed without installing a name it resolved to something
# else (a virtual package); say so instead of failing later in cmake.
still=()
for pkg in "${missing[@]}"; do
  is_installed "$pkg" || still+=("$pkg")
done
if ((${#still[@]} > 0)); then
  echo "$SELF: still missing after apt-get install: ${still[*]}" >&2
  exit 1
fi

check_blas
echo "$SELF: installed ${#missing[@]} packages"
