// The MCP fixture server of the imports tests on the TypeScript SDK 1.32.2
// (McpServer + StreamableHTTPServerTransport, stateful sessions).
//
//   node tests/imports/mcp_server.mjs
//
// Binds 127.0.0.1 on a free port, prints `LISTENING <port>` and serves
// Streamable HTTP at /mcp until killed (or its parent is gone). Tools add,
// echo, count, fail, add_tool, whoami and the resource memo://greeting, as
// tests/imports/mcp_server.py has them.
//
// The SDK is installed in tests/mcp (npm ci --prefix tests/mcp): it is
// loaded from there.
import { createRequire } from "node:module";
import { randomUUID } from "node:crypto";
import http from "node:http";

const require = createRequire(new URL("../mcp/package.json", import.meta.url));
const { McpServer } = require("@modelcontextprotocol/sdk/server/mcp.js");
const { StreamableHTTPServerTransport } = require("@modelcontextprotocol/sdk/server/streamableHttp.js");
const { isInitializeRequest } = require("@modelcontextprotocol/sdk/types.js");
const z = require("zod/v4");

const text = (t) => ({ content: [{ type: "text", text: t }] });

const sleep = (ms, signal) =>
  new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(timer);
      reject(new Error("cancelled"));
    });
  });

function makeServer() {
  const server = new McpServer(
    { name: "mcp-fixture-ts", version: "1.0.0" },
    { instructions: "A fixture for the sidecar's imports tests (TypeScript SDK)." },
  );
  server.registerTool(
    "add",
    {
      description: "Adds two numbers.",
      inputSchema: { a: z.number(), b: z.number() },
      outputSchema: { sum: z.number() },
      annotations: { readOnlyHint: true, idempotentHint: true },
    },
    async ({ a, b }) => ({ ...text(JSON.stringify({ sum: a + b })), structuredContent: { sum: a + b } }),
  );
  server.registerTool(
    "echo",
    { description: "Echoes the text.", inputSchema: { text: z.string() } },
    async ({ text: t }) => text(t),
  );
  server.registerTool(
    "count",
    {
      description: "Counts to `to`, one progress step every `delay_ms`.",
      inputSchema: { to: z.number().int(), delay_ms: z.number().int() },
    },
    async ({ to, delay_ms }, extra) => {
      const token = extra._meta?.progressToken;
      for (let i = 1; i <= to; i++) {
        await sleep(delay_ms, extra.signal);
        if (token !== undefined) {
          await extra.sendNotification({
            method: "notifications/progress",
            params: { progressToken: token, progress: i, total: to, message: `step ${i}` },
          });
        }
      }
      return text(`counted to ${to}`);
    },
  );
  server.registerTool("fail", { description: "Fails, on purpose." }, async () => ({
    ...text("the tool failed on purpose"),
    isError: true,
  }));
  server.registerTool(
    "add_tool",
    { description: "Adds a tool named `name` (the tool list changes).", inputSchema: { name: z.string() } },
    async ({ name }) => {
      // Registering on a connected server sends notifications/tools/list_changed.
      server.registerTool(name, { description: `The tool ${name}.` }, async () => text(`I am ${name}`));
      return text(`added ${name}`);
    },
  );
  server.registerTool(
    "whoami",
    { description: "Answers the traceparent of its request's _meta." },
    async (extra) => text(extra._meta?.traceparent ?? "none"),
  );
  server.registerResource("greeting", "memo://greeting", { mimeType: "text/plain" }, async (uri) => ({
    contents: [{ uri: uri.href, mimeType: "text/plain", text: "hello from the fixture" }],
  }));
  return server;
}

const sessions = new Map();

function reply(res, status, code, message) {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify({ jsonrpc: "2.0", error: { code, message }, id: null }));
}

async function readBody(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const raw = Buffer.concat(chunks).toString("utf8");
  return raw ? JSON.parse(raw) : undefined;
}

async function handle(req, res) {
  if (new URL(req.url, "http://x").pathname !== "/mcp") return reply(res, 404, -32000, "Not found");
  const body = req.method === "POST" ? await readBody(req) : undefined;
  const sessionId = req.headers["mcp-session-id"];
  const known = sessionId ? sessions.get(sessionId) : undefined;
  if (known) return known.handleRequest(req, res, body);
  if (sessionId) return reply(res, 404, -32001, "Session not found");
  if (req.method !== "POST" || !isInitializeRequest(body)) {
    return reply(res, 400, -32000, "Bad Request: No valid session ID provided");
  }
  const transport = new StreamableHTTPServerTransport({
    sessionIdGenerator: () => randomUUID(),
    onsessioninitialized: (id) => sessions.set(id, transport),
  });
  transport.onclose = () => transport.sessionId && sessions.delete(transport.sessionId);
  await makeServer().connect(transport);
  await transport.handleRequest(req, res, body);
}

const httpServer = http.createServer((req, res) => {
  handle(req, res).catch((error) => {
    console.error("mcp_server.mjs:", error);
    if (!res.headersSent) reply(res, 500, -32603, "Internal error");
  });
});

httpServer.listen(0, "127.0.0.1", () => {
  process.stdout.write(`LISTENING ${httpServer.address().port}\n`);
});

// Gone with the process that started it.
const parent = process.ppid;
setInterval(() => {
  if (process.ppid !== parent) process.exit(0);
}, 500).unref();
