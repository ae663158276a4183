#!/bin/sh
# Runs after the integration and e2e suites (ctest fixture cleanup): nothing
# the tests made on this machine may outlive them. firedrill's objects are
# named fd-* (network namespaces), fdb*/fdv*/fdp* (bridges, veths) and
# firedrill/ (cpu cgroups).
# Without iproute2 nothing can be checked: say so (ctest counts it skipped).
for tool in ip tc; do
  if ! command -v "$tool" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$tool" ] && [ ! -x "/sbin/$tool" ]; then
    echo "skipped: '$tool' (iproute2) is not installed, so leftovers cannot be checked"
    exit 77
  fi
done
PATH="$PATH:/usr/sbin:/sbin"
left=""
ns=$(ip netns list 2>/dev/null | awk '{print $1}' | grep '^fd-')
[ -n "$ns" ] && left="$left namespaces: $ns;"
links=$(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E '^fd(b|v|p)')
[ -n "$links" ] && left="$left links: $links;"
qd=$(tc qdisc show 2>/dev/null | grep -E ' dev fd(b|v|p)')
[ -n "$qd" ] && left="$left qdiscs: $qd;"
for mount in /sys/fs/cgroup/cpu /sys/fs/cgroup; do
  [ -d "$mount/firedrill" ] && left="$left cgroup: $mount/firedrill $(ls -d $mount/firedrill/*/ 2>/dev/null | tr '\n' ' ');"
done
if [ -n "$left" ]; then
  echo "left behind by the tests:$left"
  exit 1
fi
echo "no namespace, link, qdisc or cgroup of firedrill's is left"
