#!/usr/bin/env bash
# A one-node SLURM cluster with accounting on localhost, for tests/test_slurm.py (opt-in: see
# profiles/README.md). Debian/Ubuntu packages, root only, idempotent: daemons already running are
# left alone. It writes /etc/slurm/slurm.conf and slurmdbd.conf, so it refuses to run where a
# slurm.conf it did not write exists (a real cluster).
#
#   apt-get update && apt-get install -y --no-install-recommends slurmctld slurmd slurm-client slurmdbd munge mariadb-server
#   sudo tests/slurm/start_local_slurm.sh            # prints the account and partition to use
#
# Cluster "dphpo" with two partitions on this one node (all its CPUs and memory, no GPU): "cpu" (the
# default) and "gpu" (what profiles/slurm calls the GPU partition; a job sent there by mistake shows
# in `sacct -o Partition`), account "dphpo" for root and the invoking user. Logs: /var/log/slurm/.
# Stop everything: tests/slurm/stop_local_slurm.sh.
set -euo pipefail

MARK="# written by dphpo tests/slurm/start_local_slurm.sh"
CLUSTER=dphpo
CPU_PARTITION=cpu
GPU_PARTITION=gpu
ACCOUNT=dphpo
DB_PASS=dphpo-local-test # a local database reachable from this host only

[ "$(id -u)" = 0 ] || { echo "start_local_slurm.sh: run as root (it starts system daemons)" >&2; exit 1; }
for bin in munged mariadbd slurmdbd slurmctld slurmd sbatch sacct sacctmgr; do
    command -v "$bin" >/dev/null || [ -x "/usr/sbin/$bin" ] || {
        echo "start_local_slurm.sh: $bin not found; install: apt-get update && apt-get install -y --no-install-recommends slurmctld slurmd slurm-client slurmdbd munge mariadb-server" >&2
        exit 1
    }
done
if [ -f /etc/slurm/slurm.conf ] && ! grep -qF "$MARK" /etc/slurm/slurm.conf; then
    echo "start_local_slurm.sh: /etc/slurm/slurm.conf exists and was not written by this script; refusing to touch a real cluster" >&2
    exit 1
fi

running() { # pidfile -> 0 when its process is alive
    [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}
wait_for() { # seconds command... -> 0 once the command succeeds
    local n=$1
    shift
    for _ in $(seq "$n"); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 1
    done
    return 1
}

HOST=$(hostname -s)
CPUS=$(nproc)
# slurmd drains a node that claims more memory than it has: 95 % of what the kernel reports.
MEM_MB=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.95}' /proc/meminfo)

mkdir -p /etc/slurm /var/log/slurm /var/spool/slurmctld /var/spool/slurmd /run/munge
chown slurm:slurm /var/log/slurm /var/spool/slurmctld
chown munge:munge /run/munge

old_conf=$(cat /etc/slurm/slurm.conf 2>/dev/null || true)
cat >/etc/slurm/slurm.conf <<EOF
$MARK
ClusterName=$CLUSTER
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=slurm
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
# no cgroups in a container: Linux process tracking, no task containment
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
SelectType=select/cons_tres
# cores are consumed, memory is a limit only (other processes share this host)
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
# finished jobs stay visible to squeue/scontrol for a while; sacct (slurmdbd) keeps them
MinJobAge=300
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=$CPU_PARTITION Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
PartitionName=$GPU_PARTITION Nodes=$HOST Default=NO MaxTime=INFINITE State=UP
EOF
cat >/etc/slurm/slurmdbd.conf <<EOF
$MARK
AuthType=auth/munge
DbdHost=localhost
SlurmUser=slurm
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
LogFile=/var/log/slurm/slurmdbd.log
PidFile=/run/slurmdbd.pid
EOF
chown slurm:slurm /etc/slurm/slurmdbd.conf
chmod 600 /etc/slurm/slurmdbd.conf

# munge: authentication between the daemons and the client commands
if ! running /run/munge/munged.pid; then
    runuser -u munge -- /usr/sbin/munged
fi
wait_for 10 munge -n

# MariaDB: the accounting database of slurmdbd (sacct, which the Snakemake plugin polls)
if ! wait_for 1 mariadb-admin ping; then
    service mariadb start
fi
wait_for 30 mariadb-admin ping
mariadb -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"

if ! running /run/slurmdbd.pid; then
    /usr/sbin/slurmdbd
fi
wait_for 30 sacctmgr -n show cluster
sacctmgr -i add cluster "$CLUSTER" >/dev/null 2>&1 || true
sacctmgr -i add account "$ACCOUNT" cluster="$CLUSTER" description="dphpo tests" organization=dphpo >/dev/null 2>&1 || true
for user in root ${SUDO_USER:-}; do
    sacctmgr -i add user "$user" account="$ACCOUNT" cluster="$CLUSTER" >/dev/null 2>&1 || true
done

if ! running /run/slurmctld.pid; then
    /usr/sbin/slurmctld
elif [ "$old_conf" != "$(cat /etc/slurm/slurm.conf)" ]; then
    scontrol reconfigure # running daemons read the new slurm.conf (e.g. the partitions)
fi
wait_for 30 scontrol ping
if ! running /run/slurmd.pid; then
    /usr/sbin/slurmd
fi
# a node that was down (e.g. restarted daemons) comes back to service
wait_for 30 sh -c "sinfo -h -n $HOST -o %T | grep -qv -E 'unk|down|drain'" ||
    scontrol update nodename="$HOST" state=resume
wait_for 30 sh -c "sinfo -h -n $HOST -o %T | grep -q -E 'idle|mix|alloc'" || {
    echo "start_local_slurm.sh: node $HOST did not become idle:" >&2
    sinfo -N -l >&2
    tail -20 /var/log/slurm/slurmd.log /var/log/slurm/slurmctld.log >&2
    exit 1
}
echo "SLURM cluster $CLUSTER up: partitions $CPU_PARTITION (default) and $GPU_PARTITION (node $HOST, $CPUS CPUs, $MEM_MB MB, no GPU), account $ACCOUNT"
