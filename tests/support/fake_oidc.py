"""A fake OIDC issuer served over real HTTP on loopback, as GitHub Actions' is: its discovery document
(``/.well-known/openid-configuration``), its published keys (``/.well-known/jwks``), and the runner's
id-token endpoint (``/token?audience=…``, what ``ACTIONS_ID_TOKEN_REQUEST_URL`` names) minting tokens
for one repository. ``mint`` signs any claims, with the issuer's key or another one."""
from __future__ import annotations

import time
from typing import Any
from urllib.parse import parse_qs, urlparse

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from tests.support.fake_github import repository_id
from tests.support.json_server import JsonServer

KEY_ID = "fake-key-1"
REQUEST_TOKEN = "fake-actions-request-token"


def new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


class FakeOidcIssuer(JsonServer):
    def __init__(self, repository: str = "octo/uploads") -> None:
        super().__init__()
        self.key = new_key()
        self.repository = repository  # the repository claim of the tokens /token mints
        self.sha = "0" * 40  # ... their sha (a pull_request workflow's: the merge commit)
        self.ref = "refs/heads/main"  # ... and their ref
        self.requests: list[str] = []

    @property
    def token_request_url(self) -> str:
        return f"{self.url}/token?api-version=2.0"

    def claims(self, audience: str, **changes: Any) -> dict[str, Any]:
        """Claims as GitHub Actions writes them for a workflow of ``self.repository``."""
        now = int(time.time())
        return {"iss": self.url, "aud": audience, "sub": f"repo:{self.repository}:pull_request",
                "repository": self.repository, "repository_owner": self.repository.split("/")[0],
                "repository_id": str(repository_id(self.repository)), "sha": self.sha, "ref": self.ref,
                "event_name": "pull_request", "iat": now, "nbf": now, "exp": now + 300, **changes}

    def mint(self, claims: dict[str, Any], key: rsa.RSAPrivateKey | None = None, kid: str = KEY_ID) -> str:
        return jwt.encode(claims, key or self.key, algorithm="RS256", headers={"kid": kid})

    def answer(self, method: str, path: str, body: Any, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
        self.requests.append(path)
        parsed = urlparse(path)
        if parsed.path == "/.well-known/openid-configuration":
            return 200, {"issuer": self.url, "jwks_uri": f"{self.url}/.well-known/jwks",
                         "id_token_signing_alg_values_supported": ["RS256"]}
        if parsed.path == "/.well-known/jwks":
            return 200, {"keys": [{**RSAAlgorithm.to_jwk(self.key.public_key(), as_dict=True), "kid": KEY_ID,
                                   "use": "sig", "alg": "RS256"}]}
        if parsed.path == "/token":
            if headers.get("Authorization") != f"bearer {REQUEST_TOKEN}":
                return 401, {"message": "bad request token"}
            audience = parse_qs(parsed.query).get("audience", [""])[0]
            return 200, {"value": self.mint(self.claims(audience))}
        return 404, {"message": "Not Found"}
