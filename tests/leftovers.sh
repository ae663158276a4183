#!/bin/sh
# Nothing the integration and e2e tests make on this machine may outlive
# them. firedrill's objects are named fd-* (network namespaces),
# fdb*/fdv*/fdp* (bridges, veths) and firedrill/ (cpu cgroups).
#
#   leftovers.sh --before FILE   (ctest fixture setup) lists what is here now
#   leftovers.sh FILE            (ctest fixture cleanup) fails on anything
#                                that is here now and was not then
#   leftovers.sh                 fails on anything of firedrill's at all
#
# What an earlier run left (one killed half-way: its controller never got
# to clean up) is not this run's leak: it is named, and the check passes.
# Remove it with `ip netns del` / `ip link del`, or by starting a controller
# on the state dir whose network.ledger lists it.
# Without iproute2 nothing can be checked: say so (ctest counts it skipped).
for tool in ip tc; do
  if ! command -v "$tool" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$tool" ] && [ ! -x "/sbin/$tool" ]; then
    echo "skipped: '$tool' (iproute2) is not installed, so leftovers cannot be checked"
    exit 77
  fi
done
PATH="$PATH:/usr/sbin:/sbin"

# One line per object: "netns NAME", "link NAME", "qdisc DEV HANDLE", "cgroup DIR".
objects() {
  ip netns list 2>/dev/null | awk '$1 ~ /^fd-/ {print "netns " $1}'
  ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E '^fd(b|v|p)' | sed 's/^/link /'
  tc qdisc show 2>/dev/null | awk '{for (i = 1; i < NF; ++i) if ($i == "dev" && $(i+1) ~ /^fd(b|v|p)/) print "qdisc " $(i+1) " " $3}'
  for mount in /sys/fs/cgroup/cpu /sys/fs/cgroup; do
    if [ -d "$mount/firedrill" ]; then
      echo "cgroup $mount/firedrill"
      ls -d "$mount"/firedrill/*/ 2>/dev/null | sed 's|/$||; s/^/cgroup /'
    fi
  done
}

if [ "${1:-}" = "--before" ]; then
  [ -n "${2:-}" ] || { echo "usage: leftovers.sh --before FILE" >&2; exit 2; }
  objects | sort > "$2" || { echo "cannot write $2" >&2; exit 2; }
  if [ -s "$2" ]; then
    echo "already on this machine before the tests (an earlier run's, not theirs):"
    sed 's/^/  /' "$2"
  fi
  exit 0
fi

now=$(mktemp) || exit 2
trap 'rm -f "$now"' EXIT
objects | sort > "$now"
before=/dev/null
if [ -n "${1:-}" ]; then
  if [ -r "$1" ]; then
    before="$1"
  else
    echo "note: no list of what was here before the tests ($1 is missing): everything of firedrill's counts"
  fi
fi
left=$(comm -23 "$now" "$before")
old=$(comm -12 "$now" "$before")
if [ -n "$old" ]; then
  echo "still here from before the tests (not theirs):"
  echo "$old" | sed 's/^/  /'
fi
if [ -n "$left" ]; then
  echo "left behind by the tests:"
  echo "$left" | sed 's/^/  /'
  exit 1
fi
echo "no namespace, link, qdisc or cgroup of firedrill's was left by the tests"
