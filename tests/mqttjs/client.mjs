// MQTT.js from Node against the sidecar's /mqtt:
//   node client.mjs ws://127.0.0.1:PORT/mqtt THING [USER PASSWORD]
// Runs scenario.js for MQTT 3.1.1 and 5, then waits for the WeatherAgent's
// userFeedbackReceived event over MQTT 5 (printing READY once subscribed,
// so that the test invokes the agent), and prints one JSON report.
import mqtt from "mqtt";
import "./scenario.js";

const [url, thing, username, password] = process.argv.slice(2);
const options = username ? { username, password } : {};
const report = {};
try {
  for (const version of [4, 5]) {
    report[`v${version}`] = await globalThis.mqttScenario(mqtt, url, version, thing, options);
  }
  const agent = await mqtt.connectAsync(url, { protocolVersion: 5, reconnectPeriod: 0, ...options });
  const feedback = new Promise((resolve) =>
    agent.on("message", (topic, payload) => resolve({ topic, event: JSON.parse(payload.toString()) })),
  );
  await agent.subscribeAsync("lmos/+/events/userFeedbackReceived", { qos: 1 });
  console.log("READY");
  report.feedback = await Promise.race([
    feedback,
    new Promise((_, reject) => setTimeout(() => reject(new Error("no userFeedbackReceived within 20 s")), 20000)),
  ]);
  await agent.endAsync();
} catch (e) {
  report.error = String(e && e.message ? e.message : e);
}
console.log(JSON.stringify(report));
process.exit(0);
