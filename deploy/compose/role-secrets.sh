#!/usr/bin/env bash
# The Docker secrets of docker-compose.api.yml and docker-compose.worker.yml, written once (never
# overwritten) on the servers' host, beside this script: secrets/api/ for this host, and
# secrets/worker/ to copy to every worker host. ADDRESS is this host's address on the workers'
# network: the worker URLs name it, the API's name the compose services. Random PostgreSQL and
# Redis passwords (Redis is reached from other hosts: it needs one) and a random API token.
# The folders are 0700 and the files 0400, owned (when this runs as root) by the image's user, uid
# 10001: compose (outside swarm) mounts them as they are, and no other user can read them.
set -euo pipefail
address=${1:?usage: role-secrets.sh ADDRESS  (this host's address on the workers' network)}
cd "$(dirname "$0")"
mkdir -p secrets/api secrets/worker
chmod 0700 secrets secrets/api secrets/worker
umask 077
write() {  # file value: only where the file is not there yet
    [ -e "$1" ] || printf '%s' "$2" > "$1"
}
own_secrets() {  # folder: 0400, the image's user's (uid 10001) where we may say so
    find "$1" -type f -exec chmod 0400 {} +
    if [ "$(id -u)" -eq 0 ]; then
        find "$1" -type f -exec chown 10001:10001 {} +
    else
        echo "note: run 'sudo chown -R 10001:10001 $(pwd)/$1' so that the containers' user reads them" >&2
    fi
}
random() { python3 -c 'import secrets; print(secrets.token_urlsafe(32))'; }
write secrets/api/postgres_password "$(random)"
write secrets/api/redis_password "$(random)"
postgres=$(cat secrets/api/postgres_password)
redis=$(cat secrets/api/redis_password)
write secrets/api/gradci_database_url "postgresql+psycopg://gradci:${postgres}@postgres:5432/gradci"
write secrets/api/gradci_broker_url "redis://:${redis}@redis:6379/0"
write secrets/api/gradci_api_token "$(random)"
write secrets/worker/gradci_database_url "postgresql+psycopg://gradci:${postgres}@${address}:5432/gradci"
write secrets/worker/gradci_broker_url "redis://:${redis}@${address}:6379/0"
own_secrets secrets
echo "secrets in $(pwd)/secrets: copy secrets/worker/ to each worker host's $(pwd)/secrets/worker/"
