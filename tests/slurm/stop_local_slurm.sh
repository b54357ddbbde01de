#!/usr/bin/env bash
# Stops the one-node cluster of tests/slurm/start_local_slurm.sh: slurmd, slurmctld, slurmdbd, MariaDB
# and munged (they use CPU even when idle). Root only; refuses where the slurm.conf was not written by
# start_local_slurm.sh (a real cluster). Idempotent: daemons not running are skipped. The accounting
# database and /etc/slurm stay (the next start reuses them).
set -euo pipefail

MARK="# written by dphpo tests/slurm/start_local_slurm.sh"
[ "$(id -u)" = 0 ] || { echo "stop_local_slurm.sh: run as root" >&2; exit 1; }
if [ -f /etc/slurm/slurm.conf ] && ! grep -qF "$MARK" /etc/slurm/slurm.conf; then
    echo "stop_local_slurm.sh: /etc/slurm/slurm.conf was not written by start_local_slurm.sh; refusing to stop a real cluster" >&2
    exit 1
fi

stop() { # name pidfile: SIGTERM the pid in the file, wait up to 30 s for it to exit
    local pid
    [ -f "$2" ] || return 0
    pid=$(cat "$2")
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid"
        for _ in $(seq 30); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 1
        done
        kill -0 "$pid" 2>/dev/null && { echo "stop_local_slurm.sh: $1 (pid $pid) did not stop" >&2; return 1; }
        echo "stopped $1 (pid $pid)"
    fi
}

stop slurmd /run/slurmd.pid
stop slurmctld /run/slurmctld.pid
stop slurmdbd /run/slurmdbd.pid
if command -v mariadb-admin >/dev/null && mariadb-admin ping >/dev/null 2>&1; then
    service mariadb stop >/dev/null && echo "stopped mariadb"
fi
stop munged /run/munge/munged.pid
