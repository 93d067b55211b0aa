// The official MCP TypeScript SDK's client against a sidecar's /mcp that
// serves an imported MCP server (MCP -> sidecar -> MCP), for
// tests/interop/imports/faces.rs. Usage: node imports_client.mjs <url>
// Calls the fixture's tools (tests/imports/mcp_server.py) through the
// sidecar, adds a tool and waits for the list change; prints one JSON
// report line.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const [url] = process.argv.slice(2);
const report = { errors: [] };
const transport = new StreamableHTTPClientTransport(new URL(url));
const client = new Client({ name: "lmos-sidecar-imports-test", version: "1.0.0" });
let listChanged = 0;
let changed;
const changedOnce = new Promise((resolve) => (changed = resolve));
client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
  listChanged += 1;
  changed();
});

const names = async () => (await client.listTools()).tools.map((t) => t.name).sort();
const call = (name, args, options) => client.callTool({ name, arguments: args }, undefined, options);

async function calc() {
  report.tools = (await client.listTools()).tools;
  report.add = await call("add", { a: 2, b: 3 });
  const progress = [];
  report.count = await call("count", { to: 3, delay_ms: 50 }, { onprogress: (p) => progress.push(p), timeout: 20000 });
  report.progress = progress;
  report.fail = await call("fail", {});
  report.greeting = await call("read_greeting", {});
  // The SDK opens its GET stream in the background after `initialized`;
  // give it time to be up before the list changes.
  await new Promise((r) => setTimeout(r, 500));
  report.added = await call("add_tool", { name: "tripled" });
  await Promise.race([changedOnce, new Promise((r) => setTimeout(r, 10000))]);
  report.listChanged = listChanged;
  report.after = await names();
  report.tripled = await call("tripled", {});
}

try {
  await client.connect(transport);
  report.protocolVersion = transport.protocolVersion;
  await calc();
  await transport.terminateSession();
} catch (e) {
  report.errors.push(String(e && e.stack ? e.stack : e));
}
console.log(JSON.stringify(report));
await client.close().catch(() => {});
process.exit(0);
