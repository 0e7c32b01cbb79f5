"""A fake GitHub REST API served over real HTTP on loopback: it records every call and can be told to
fail the next N requests (to test retries and outages).

As an App's GitHub (``as_app``), it checks credentials as GitHub does: ``POST
/app/installations/{id}/access_tokens`` wants a JWT signed RS256 with the App's private key (verified
with its public key: issuer the App id, not expired, at most ten minutes long) and issues an
installation token; every repository call then wants a live token of an installation that holds the
repository (401 otherwise, 403 for another installation's repository). It serves check runs too.

Comments record their author as GitHub does (``user.login``: the login of the token that wrote
it, ``<slug>[bot]`` for an App's installation token), and ``GET /user`` says whose a token is (403
for an installation token, as GitHub answers). Like the statuses, a token the fake never issued is
taken as the service's personal access token, of ``SERVICE_LOGIN``."""
from __future__ import annotations

import secrets
import threading
import time
import zlib
from collections.abc import Callable
from datetime import UTC, datetime
from urllib.parse import urlparse

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.support.fake_github_oauth import GitHubAccounts
from tests.support.json_server import JsonServer

TOKEN_LIFETIME_S = 3600


def repository_id(full_name: str) -> int:
    """The id GitHub gives a repository the fake knows by name only (as OIDC tokens' repository_id)."""
    return zlib.crc32(full_name.lower().encode())
SERVICE_LOGIN = "gradci-bot"  # whose token a token the fake never issued is


class FakeGitHub(GitHubAccounts, JsonServer):
    """Sign-in, users and who may read which repository: ``GitHubAccounts`` (fake_github_oauth)."""

    def __init__(self) -> None:
        JsonServer.__init__(self)
        GitHubAccounts.__init__(self)
        self.calls: list[dict] = []
        self.statuses: list[dict] = []
        self.comments: dict[int, dict] = {}          # id -> comment
        self.pulls: dict[tuple[str, int], dict] = {}  # (owner/name, number) -> pull request, see add_pull_request
        self.repository_ids: dict[str, int] = {}      # owner/name -> id, where not repository_id(owner/name)
        self.fail_next: list[int] = []               # status codes to answer before succeeding
        self.check_runs: dict[int, dict] = {}        # id -> check run (with its appended "annotations")
        # App mode (as_app): the App's id and public key, installations' repositories, issued tokens.
        self.app_id: int | None = None
        self.app_slug = "gradci-test"
        self._app_public_key: rsa.RSAPublicKey | None = None
        self.installations: dict[int, set[str]] = {}
        self.tokens: dict[str, tuple[int, float]] = {}  # token -> (installation id, expiry)
        self._next_id = 1000
        self._lock = threading.Lock()
        # Called with each call as it arrives (under the fake's lock): a test records what was true then.
        self.observers: list[Callable[[dict], None]] = []

    def comments_on(self, full_name: str, pr_number: int) -> list[dict]:
        return [c for c in self.comments.values() if c["repo"] == full_name and c["pr"] == pr_number]

    def statuses_for(self, sha: str, context: str | None = None) -> list[dict]:
        return [s for s in self.statuses if s["sha"] == sha and (context is None or s["context"] == context)]

    def add_pull_request(self, full_name: str, number: int, *, fork: bool = False, labels: tuple[str, ...] = (),
                         head_sha: str | None = None, state: str = "open") -> dict:
        """A pull request GET /repos/{full_name}/pulls/{number} answers, from a fork's branch or the
        repository's own; GET /repos/{full_name}/commits/{head_sha}/pulls lists it."""
        head_repo = f"{'someone-else' if fork else full_name.split('/')[0]}/{full_name.split('/')[1]}"
        self.pulls[full_name, number] = {"number": number, "state": state,
                                         "labels": [{"name": label} for label in labels],
                                         "head": {"repo": {"full_name": head_repo}, "sha": head_sha},
                                         "base": {"repo": {"full_name": full_name}}}
        return self.pulls[full_name, number]

    def as_app(self, app_id: int, installations: dict[int, set[str]]) -> str:
        """Be the GitHub of App ``app_id`` installed as ``installations`` (id → repositories); the
        App's private key, in PEM as GitHub issues it."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.app_id, self._app_public_key, self.installations = app_id, key.public_key(), installations
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                 serialization.NoEncryption()).decode()

    def login_of(self, credential: str) -> str | None:
        """Whose token ``credential`` is (None: no token): a user's, an installation's (the App's bot
        account) or, never issued here, the service's."""
        if not credential:
            return None
        if credential in self.tokens:
            return f"{self.app_slug}[bot]"
        return self.user_tokens.get(credential, SERVICE_LOGIN)

    def check_runs_for(self, sha: str) -> list[dict]:
        return [run for run in self.check_runs.values() if run["head_sha"] == sha]

    def _refused(self, parts: list[str], headers: dict) -> tuple[int, object] | None:
        """In App mode, why a call's credentials are refused (None: they are good)."""
        if self.app_id is None:
            return None
        credential = (headers.get("Authorization") or "").removeprefix("Bearer ").strip()
        if parts[0] == "app" or (len(parts) == 4 and parts[0] == "repos"
                                                     and parts[3] == "installation"):
            try:
                claims = jwt.decode(credential, self._app_public_key, algorithms=["RS256"],
                                    options={"require": ["iat", "exp", "iss"]})
            except jwt.PyJWTError as exc:
                return 401, {"message": f"A JSON web token could not be decoded: {exc}"}
            if claims["iss"] != str(self.app_id) or claims["exp"] - claims["iat"] > 600:
                return 401, {"message": "'Issuer' claim ('iss') must be the App's id; exp at most 10 minutes"}
            return None
        if self.login_of(credential) in self.users:  # a person's own token: theirs to comment with
            return None
        installation, expires = self.tokens.get(credential, (None, 0.0))
        if installation is None or expires < time.time():
            return 401, {"message": "Bad credentials"}
        if parts[0] == "repos" and f"{parts[1]}/{parts[2]}" not in self.installations.get(installation, set()):
            return 403, {"message": "Resource not accessible by integration"}
        return None

    def _check_run(self, method: str, parts: list[str], body: dict) -> tuple[int, object] | None:
        repo = f"{parts[1]}/{parts[2]}"
        if method == "POST" and len(parts) == 4:
            self._next_id += 1
            output = body.get("output") or {}
            self.check_runs[self._next_id] = {"id": self._next_id, "repo": repo, **body,
                                              "annotations": list(output.get("annotations", []))}
            return 201, self.check_runs[self._next_id]
        if method == "PATCH" and len(parts) == 5:
            run = self.check_runs.get(int(parts[4]))
            if run is None or run["repo"] != repo:
                return 404, {"message": "Not Found"}
            output = body.get("output") or {}
            annotations = output.get("annotations", [])
            if len(annotations) > 50:
                return 422, {"message": "at most 50 annotations per request"}
            if output and not (output.get("title") and output.get("summary")):
                return 422, {"message": "output needs a title and a summary"}
            run["annotations"] += annotations
            run.update({key: value for key, value in body.items() if key != "output"})
            if output:
                run["output"] = {key: value for key, value in output.items() if key != "annotations"}
            return 200, run
        return None

    def answer(self, method: str, path: str, body: dict | None, headers: dict) -> tuple[int, object]:
        with self._lock:
            call = {"method": method, "path": path, "body": body, "headers": headers}
            self.calls.append(call)
            for observe in self.observers:
                observe(call)
            if self.fail_next:
                call["answered"] = self.fail_next.pop(0)
                return call["answered"], {"message": "planned failure"}
            parts = urlparse(path).path.strip("/").split("/")
            account = self.answer_account(method, path, body, headers)
            if account is not None:
                call["answered"] = account[0]
                return account
            refused = self._refused(parts, headers)
            if refused is not None:
                call["answered"] = refused[0]
                return refused
            call["answered"] = "ok"
            who = self._identity(method, parts, headers)
            if who is not None:
                return who
            if method == "POST" and len(parts) == 4 and parts[:2] == ["app", "installations"] and \
                    parts[3] == "access_tokens":
                if int(parts[2]) not in self.installations:
                    return 404, {"message": "Not Found"}
                token = f"ghs_{secrets.token_urlsafe(24)}"
                expires = time.time() + TOKEN_LIFETIME_S
                self.tokens[token] = (int(parts[2]), expires)
                return 201, {"token": token, "expires_at": datetime.fromtimestamp(expires, UTC).isoformat()
                             .replace("+00:00", "Z")}
            if method == "GET" and len(parts) == 4 and parts[0] == "repos" and parts[3] == "installation":
                repo = f"{parts[1]}/{parts[2]}"
                found = [number for number, repos in self.installations.items() if repo in repos]
                return (200, {"id": found[0]}) if found else (404, {"message": "Not Found"})
            if len(parts) >= 4 and parts[0] == "repos" and parts[3] == "check-runs":
                answered = self._check_run(method, parts, body or {})
                if answered is not None:
                    return answered
            if method == "GET" and len(parts) == 3 and parts[0] == "repos":  # one the accounts do not know
                repo = f"{parts[1]}/{parts[2]}"
                return 200, {"id": self.repository_ids.get(repo, repository_id(repo)), "full_name": repo}
            if method == "GET" and len(parts) == 6 and parts[0] == "repos" and parts[3] == "commits" and \
                    parts[5] == "pulls":  # the pull requests of a commit: here, those whose head it is
                repo = f"{parts[1]}/{parts[2]}"
                return 200, [pull for (name, _), pull in self.pulls.items()
                             if name == repo and pull["head"].get("sha") == parts[4]]
            if method == "GET" and len(parts) == 5 and parts[0] == "repos" and parts[3] == "pulls":
                pull = self.pulls.get((f"{parts[1]}/{parts[2]}", int(parts[4])))
                return (200, pull) if pull is not None else (404, {"message": "Not Found"})
            if method == "POST" and len(parts) == 5 and parts[0] == "repos" and parts[3] == "statuses":
                if len(body.get("description", "")) > 140:
                    return 422, {"message": "description is too long (maximum is 140 characters)"}
                record = {"repo": f"{parts[1]}/{parts[2]}", "sha": parts[4], **body}
                self.statuses.append(record)
                return 201, record
            if len(parts) == 6 and parts[3] == "issues" and parts[5] == "comments":
                repo, pr = f"{parts[1]}/{parts[2]}", int(parts[4])
                if method == "GET":
                    return 200, [{"id": c["id"], "body": c["body"], "user": c["user"]} for c in self.comments_on(repo, pr)]
                if method == "POST":
                    if len(body.get("body", "")) > 65536:
                        return 422, {"message": "body is too long"}
                    author = self.login_of(_bearer(headers))
                    if author is None:
                        return 401, {"message": "Requires authentication"}
                    self._next_id += 1
                    self.comments[self._next_id] = {"id": self._next_id, "repo": repo, "pr": pr, "body": body["body"],
                                                    "user": _user(author)}
                    return 201, self.comments[self._next_id]
            if method == "PATCH" and len(parts) == 6 and parts[3] == "issues" and parts[4] == "comments":
                comment = self.comments.get(int(parts[5]))
                if comment is None:
                    return 404, {"message": "Not Found"}
                comment["body"] = body["body"]
                return 200, comment
            return 404, {"message": "Not Found"}

    def _identity(self, method: str, parts: list[str], headers: dict) -> tuple[int, object] | None:
        """``GET /user`` for the service's and installations' tokens (users' are fake_github_oauth's),
        and ``GET /app`` for the App's JWT."""
        if method == "GET" and parts == ["user"]:
            credential = _bearer(headers)
            if not credential:
                return 401, {"message": "Requires authentication"}
            if credential in self.tokens:
                return 403, {"message": "Resource not accessible by integration"}
            return 200, _user(self.login_of(credential) or "")
        if method == "GET" and parts == ["app"] and self.app_id is not None:
            return 200, {"id": self.app_id, "slug": self.app_slug, "name": self.app_slug}
        return None


def _bearer(headers: dict) -> str:
    return (headers.get("Authorization") or "").removeprefix("Bearer ").removeprefix("token ").strip()


def _user(login: str) -> dict[str, object]:
    """A user as GitHub describes the author of a comment."""
    return {"login": login, "type": "Bot" if login.endswith("[bot]") else "User"}
