#!/usr/bin/env bash
# The Docker secrets docker-compose.yml hands to its services, written once to ./secrets/ (never
# overwritten): a random PostgreSQL password, the URLs that carry it, and a random API token.
# The folder is 0700, so no other user of this machine reaches them; the files are 0644, because
# compose (outside swarm) mounts them as they are and the API container runs as an unprivileged user.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p secrets
chmod 0700 secrets
umask 022
write() {  # name value: only where the file is not there yet
    [ -e "secrets/$1" ] || printf '%s' "$2" > "secrets/$1"
}
random() { python3 -c 'import secrets; print(secrets.token_urlsafe(32))'; }
write postgres_password "$(random)"
password=$(cat secrets/postgres_password)
write gradci_database_url "postgresql+psycopg://gradci:${password}@postgres:5432/gradci"
write gradci_broker_url "redis://redis:6379/0"
write gradci_api_token "$(random)"
echo "secrets in $(pwd)/secrets: the API token is in secrets/gradci_api_token"
