#!/bin/sh
# carve_cpu_count() under a real cgroup CPU quota (issue 17): test_runtime_pool run inside a child cgroup with
# 0.5 CPU (expects 1) and with 1.5 CPUs (expects 2, or 1 when the affinity mask has one CPU), for cgroup v1's cpu
# controller (cpu.cfs_quota_us / cpu.cfs_period_us) or v2's (cpu.max).
#   pool_cgroup.sh TEST_RUNTIME_POOL WORK_DIR
# Needs root and a writable cgroup hierarchy with the cpu controller: exit 77 (skipped by ctest) otherwise.
set -u
exe=$1
work=$2
name=carve_pool_test_$$
if [ -w /sys/fs/cgroup/cpu ] && [ -e /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
  g=/sys/fs/cgroup/cpu/$name
  mkdir "$g" 2>/dev/null || { echo "pool_cgroup: cannot create $g: skipped"; exit 77; }
  set_quota() { echo 100000 > "$g/cpu.cfs_period_us" && echo "$1" > "$g/cpu.cfs_quota_us"; }
elif [ -w /sys/fs/cgroup/cgroup.subtree_control ] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
  echo +cpu > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null
  g=/sys/fs/cgroup/$name
  mkdir "$g" 2>/dev/null || { echo "pool_cgroup: cannot create $g: skipped"; exit 77; }
  set_quota() { echo "$1 100000" > "$g/cpu.max"; }
else
  echo "pool_cgroup: no writable cgroup cpu controller (not root, or a read-only /sys/fs/cgroup): skipped"
  exit 77
fi
cleanup() { rmdir "$g" 2>/dev/null; }
trap cleanup EXIT
cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # GNU nproc obeys these (the tests set OMP_NUM_THREADS=1)
two=2
[ "$cpus" -lt 2 ] && two=$cpus
status=0
for case in "50000 1" "150000 $two"; do
  set -- $case
  if ! set_quota "$1"; then echo "pool_cgroup: cannot set the quota in $g: skipped"; exit 77; fi
  # A child shell moves itself into the cgroup, then runs the test (which also checks the 0 default and clamping).
  sh -c "echo \$\$ > '$g/cgroup.procs' && exec '$exe' '$work' --expect-cpus $2" || status=1
  echo "pool_cgroup: quota $1/100000 -> expected $2 CPU(s): $([ $status = 0 ] && echo ok || echo FAIL)"
done
exit $status
