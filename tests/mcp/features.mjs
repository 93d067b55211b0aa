// The official MCP TypeScript SDK's client on /mcp's resources, logging,
// completion and media content, for tests/interop/mcp_features.rs.
// Usage: node features.mjs <scenario> <url> [header=value ...]
// Prints one JSON report line.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  LoggingMessageNotificationSchema,
  ResourceUpdatedNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";

const [scenario, url, ...headerArgs] = process.argv.slice(2);
const headers = Object.fromEntries(headerArgs.map((h) => h.split(/=(.*)/s).slice(0, 2)));
const report = { scenario, errors: [] };
const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
const client = new Client({ name: "lmos-sidecar-test", version: "1.0.0" });
const logs = [];
client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => logs.push(n.params));
const updates = [];
let updated;
const updatedOnce = new Promise((resolve) => (updated = resolve));
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
  updates.push(n.params.uri);
  updated();
});
const within = (promise, ms) => Promise.race([promise, new Promise((r) => setTimeout(r, ms))]);
const failure = async (request) => {
  try {
    return { answered: await request() };
  } catch (e) {
    return { code: e.code, message: e.message };
  }
};

async function features() {
  report.capabilities = client.getServerCapabilities();
  report.resources = (await client.listResources()).resources;
  report.templates = (await client.listResourceTemplates()).resourceTemplates;
  const forecast = report.resources.find((r) => r.name === "forecast").uri;
  const template = report.templates.find((t) => t.name === "cityReport").uriTemplate;
  report.read = await client.readResource({ uri: forecast });
  report.readTemplate = await client.readResource({ uri: template.replace("{?city}", "?city=Bonn") });
  report.unknown = await failure(() => client.readResource({ uri: "lmos://nothing/here" }));
  report.completion = await client.complete({
    ref: { type: "ref/resource", uri: template },
    argument: { name: "city", value: "Bo" },
  });
  report.image = await client.callTool({ name: "snapshot", arguments: {} });
  report.audio = await client.callTool({ name: "speak", arguments: {} });
  await client.setLoggingLevel("info");
  report.slow = await client.callTool({ name: "slow", arguments: {} });
  report.broken = await client.callTool({ name: "broken", arguments: {} });
  report.logs = logs;
  await client.subscribeResource({ uri: forecast });
  await within(updatedOnce, 10000);
  report.updates = updates;
  await client.unsubscribeResource({ uri: forecast });
}

async function blind() {
  report.resources = (await client.listResources()).resources;
  report.templates = (await client.listResourceTemplates()).resourceTemplates;
  const uri = "lmos://urn%3Atest%3Amedia/properties/forecast";
  report.read = await failure(() => client.readResource({ uri }));
  report.subscribe = await failure(() => client.subscribeResource({ uri }));
  report.tools = (await client.listTools()).tools.map((t) => t.name);
}

try {
  await client.connect(transport);
  await { features, blind }[scenario]();
  await transport.terminateSession();
} catch (e) {
  report.errors.push(String(e && e.stack ? e.stack : e));
}
console.log(JSON.stringify(report));
await client.close().catch(() => {});
process.exit(0);
