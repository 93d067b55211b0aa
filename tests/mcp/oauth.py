"""The official MCP Python SDK (PyPI `mcp`) signing in by itself, for
tests/interop/mcp_oauth_clients.rs: its `OAuthClientProvider` meets the
sidecar's 401, reads the protected-resource metadata, registers with the
provider it names and authorizes with PKCE; the redirect handler follows the
authorization URL hop by hop (the test provider's interactions complete by
themselves) to the redirect URI with a code, which the callback handler
returns. Then it lists and calls. Usage: python3 oauth.py <mcp url>.
Prints one JSON report line."""

import asyncio
import json
import sys
from urllib.parse import parse_qs, urljoin, urlparse

import httpx2
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata

REDIRECT = "http://127.0.0.1:9/callback"  # never contacted


class Memory:
    def __init__(self):
        self.tokens = None
        self.client = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client

    async def set_client_info(self, info):
        self.client = info


async def main(url: str) -> dict:
    report = {"errors": [], "steps": []}
    code = {}

    async def redirect_handler(authorization: str) -> None:
        report["steps"].append("authorize")
        query = parse_qs(urlparse(authorization).query)
        report["authorization"] = {k: v[0] for k, v in query.items()}
        at = authorization
        async with httpx2.AsyncClient(follow_redirects=False) as http:
            for _ in range(10):
                response = await http.get(at)
                location = response.headers.get("location")
                if not location:
                    raise RuntimeError(f"{response.status_code} without a Location")
                at = urljoin(at, location)
                if at.startswith(REDIRECT):
                    got = parse_qs(urlparse(at).query)
                    code["code"] = got["code"][0]
                    code["state"] = got.get("state", [None])[0]
                    code["iss"] = got.get("iss", [None])[0]
                    return
        raise RuntimeError("no redirect back after 10 hops")

    async def callback_handler() -> AuthorizationCodeResult:
        report["steps"].append("callback")
        return AuthorizationCodeResult(**code)

    storage = Memory()
    auth = OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(
            client_name="lmos-sidecar-test (Python SDK)",
            redirect_uris=[REDIRECT],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
    )
    try:
        async with httpx2.AsyncClient(auth=auth, timeout=30) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                report["protocolVersion"] = client.protocol_version
                listed = await client.list_tools()
                report["tools"] = [t.name for t in listed.tools]
                result = await client.call_tool(
                    "getWeather",
                    {"question": "What is the weather in Oslo?", "interactionMode": "text"},
                )
                report["result"] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        report["registered"] = storage.client is not None
        report["scope"] = storage.tokens.scope if storage.tokens else None
    except BaseException as e:  # noqa: BLE001 - the report says what failed
        report["errors"].append(repr(e))
    return report


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1]))), flush=True)
