// The official MCP TypeScript SDK's client against a running sidecar, for
// tests/interop/mcp.rs. Usage: node client.mjs <scenario> <url> [header=value ...]
// Prints progress lines ("step: ...") and, last, one JSON report line.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import readline from "node:readline";

const [scenario, url, ...headerArgs] = process.argv.slice(2);
const headers = Object.fromEntries(headerArgs.map((h) => h.split(/=(.*)/s).slice(0, 2)));
const report = { scenario, errors: [] };
const lines = readline.createInterface({ input: process.stdin });

const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
const client = new Client({ name: "lmos-sidecar-test", version: "1.0.0" });
let listChanged = 0;
let changed;
const changedOnce = new Promise((resolve) => (changed = resolve));
client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
  listChanged += 1;
  changed();
});

const names = async () => (await client.listTools()).tools.map((t) => t.name);

async function weather() {
  const listed = await client.listTools();
  report.tools = listed.tools;
  const progress = [];
  const result = await client.callTool(
    { name: "getWeather", arguments: { question: "What is the weather in Oslo?", interactionMode: "text" } },
    undefined,
    { onprogress: (p) => progress.push(p), timeout: 20000 },
  );
  report.progress = progress;
  report.result = result;
  report.missing = await client.callTool({ name: "getWeather", arguments: { interactionMode: "text" } });
  try {
    await client.callTool({ name: "noSuchTool", arguments: {} });
  } catch (e) {
    report.unknown = { code: e.code, message: e.message };
  }
  // Cancelled after its first progress: the agent gets a cancelAction.
  const abort = new AbortController();
  const cancelled = client.callTool(
    { name: "getWeather", arguments: { question: "What is the weather in Bergen?", interactionMode: "text" } },
    undefined,
    { signal: abort.signal, onprogress: () => abort.abort("changed my mind") },
  );
  try {
    await cancelled;
    report.cancel = "completed";
  } catch (e) {
    report.cancel = String(e.message || e);
  }
}

async function vanish() {
  report.before = await names();
  // The SDK opens its GET stream in the background after `initialized`;
  // give it time to be up before the agent goes.
  await new Promise((r) => setTimeout(r, 500));
  console.log("step: listed");
  await Promise.race([changedOnce, new Promise((r) => setTimeout(r, 10000))]);
  report.listChanged = listChanged;
  report.after = await names();
}

async function denied() {
  report.tools = await names();
  try {
    await client.callTool({ name: "getWeather", arguments: { question: "in Oslo", interactionMode: "text" } });
    report.call = "answered";
  } catch (e) {
    report.call = { code: e.code, message: e.message };
  }
}

// The WeatherAgent speaks its answer: audio content beside the text.
async function voice() {
  report.result = await client.callTool({ name: "getWeather", arguments: { question: "What is the weather in Oslo?", interactionMode: "voice" } });
}

async function trace() {
  report.result = await client.callTool({ name: "getWeather", arguments: { question: "in Oslo", interactionMode: "text" } });
}

try {
  await client.connect(transport);
  report.protocolVersion = transport.protocolVersion;
  report.sessionId = transport.sessionId;
  await { weather, vanish, denied, trace, voice }[scenario]();
  await transport.terminateSession();
} catch (e) {
  report.errors.push(String(e && e.stack ? e.stack : e));
}
console.log(JSON.stringify(report));
lines.close();
await client.close().catch(() => {});
process.exit(0);
