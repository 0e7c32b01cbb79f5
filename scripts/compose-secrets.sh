#!/usr/bin/env bash
# The Docker secrets docker-compose.yml hands to its services, written once to ./secrets/ (never
# overwritten): a random PostgreSQL password, the URLs that carry it, and a random API token.
# The folder is 0700 and the files 0400, owned (when this runs as root) by the image's user, uid
# 10001: compose (outside swarm) mounts them as they are, the API reads them as that user, and no
# other user — a runner's uid included, were a secret ever in its view — can read them.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p secrets
chmod 0700 secrets
umask 077
write() {  # name value: only where the file is not there yet
    [ -e "secrets/$1" ] || printf '%s' "$2" > "secrets/$1"
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
write postgres_password "$(random)"
password=$(cat secrets/postgres_password)
write gradci_database_url "postgresql+psycopg://gradci:${password}@postgres:5432/gradci"
write gradci_broker_url "redis://redis:6379/0"
write gradci_api_token "$(random)"
own_secrets secrets
echo "secrets in $(pwd)/secrets: the API token is in secrets/gradci_api_token"
