// The official MCP TypeScript SDK signing in by itself, for
// tests/interop/mcp_oauth_clients.rs: it meets the sidecar's 401, reads the
// protected-resource metadata, registers with the provider it names,
// authorizes with PKCE (the test provider's interactions complete by
// themselves, so following the authorization URL hop by hop reaches the
// redirect URI with a code, as a browser would), then lists and calls.
// Usage: node oauth.mjs <mcp url> [stepup]. Prints one JSON report line.
// With `stepup` the call is refused 403 insufficient_scope first (the
// sidecar offered too few scopes); the SDK asks the provider for the scope
// the challenge names, and the call is made again with the new token.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";

const [url, scenario] = process.argv.slice(2);
// Never contacted: the code is read from the redirect's Location.
const redirect = "http://127.0.0.1:9/callback";
const report = { errors: [], steps: [] };

class HeadlessProvider {
  constructor() {
    this.client = undefined;
    this.saved = undefined;
    this.verifier = undefined;
    this.code = undefined;
  }
  get redirectUrl() {
    return redirect;
  }
  get clientMetadata() {
    return {
      client_name: "lmos-sidecar-test (TypeScript SDK)",
      redirect_uris: [redirect],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
    };
  }
  clientInformation() {
    return this.client;
  }
  saveClientInformation(info) {
    report.steps.push("registered");
    this.client = info;
  }
  tokens() {
    return this.saved;
  }
  saveTokens(tokens) {
    report.steps.push("tokens");
    this.saved = tokens;
  }
  saveCodeVerifier(verifier) {
    this.verifier = verifier;
  }
  codeVerifier() {
    return this.verifier;
  }
  async redirectToAuthorization(authorization) {
    report.steps.push("authorize");
    report.authorization = Object.fromEntries(authorization.searchParams);
    let at = authorization;
    for (let hop = 0; hop < 10; hop++) {
      const response = await fetch(at, { redirect: "manual" });
      const location = response.headers.get("location");
      if (!location) throw new Error(`hop ${hop}: ${response.status} without a Location`);
      const next = new URL(location, at);
      if (next.href.startsWith(redirect)) {
        this.code = next.searchParams.get("code");
        report.callback = Object.fromEntries(next.searchParams);
        return;
      }
      at = next;
    }
    throw new Error("no redirect back after 10 hops");
  }
}

const provider = new HeadlessProvider();
const connect = async () => {
  const client = new Client({ name: "lmos-sidecar-test", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
  return { client, transport };
};

try {
  let { client, transport } = await connect();
  try {
    await client.connect(transport);
  } catch (e) {
    if (!(e instanceof UnauthorizedError)) throw e;
    report.steps.push("unauthorized");
    await transport.finishAuth(provider.code);
    ({ client, transport } = await connect());
    await client.connect(transport);
  }
  report.protocolVersion = transport.protocolVersion;
  report.tools = (await client.listTools()).tools.map((t) => t.name);
  const call = () =>
    client.callTool(
      { name: "getWeather", arguments: { question: "What is the weather in Oslo?", interactionMode: "text" } },
      undefined,
      { timeout: 20000 },
    );
  if (scenario === "stepup") {
    report.firstScope = provider.saved?.scope;
    try {
      report.result = await call();
    } catch (e) {
      if (!(e instanceof UnauthorizedError)) throw e;
      // The SDK met 403 insufficient_scope and went to the provider for
      // the scope it names; its code comes back here.
      report.steps.push("upscoped");
      // A provider may refuse a scope the client did not register with
      // (the SDK registers with the first challenge's scope): then there is
      // no code, and the report says what the provider answered.
      if (provider.code) {
        await transport.finishAuth(provider.code);
        report.result = await call();
      }
    }
  } else {
    report.result = await call();
  }
  report.scope = provider.saved?.scope;
  await client.close();
} catch (e) {
  report.errors.push(String(e?.stack || e));
}
console.log(JSON.stringify(report));
process.exit(0);
