// What a dashboard does with MQTT.js over the sidecar's /mqtt, run the same
// way from Node (client.mjs) and from a page in headless Chromium
// (tests/interop/mqtt_websocket.rs injects the browser bundle and this
// file): subscribe, receive another client's QoS 1 event, publish a
// retained reading and get it back as retained on a later subscription.
// No imports or exports, so a page can run it as it is.
globalThis.mqttScenario = async (mqtt, url, version, thing, options = {}) => {
  const within = (promise, what) =>
    Promise.race([
      promise,
      new Promise((_, reject) => setTimeout(() => reject(new Error(`no ${what} within 10 s`)), 10000)),
    ]);
  const connect = (id) =>
    within(
      new Promise((resolve, reject) => {
        const client = mqtt.connect(url, {
          protocolVersion: version,
          clientId: `mqttjs-${id}-${version}-${Math.random().toString(16).slice(2, 8)}`,
          reconnectPeriod: 0,
          connectTimeout: 5000,
          ...options,
        });
        client.once("connect", () => resolve(client));
        client.once("error", (e) => reject(e));
        client.once("close", () => reject(new Error("closed before CONNACK")));
      }),
      "CONNACK",
    );
  const events = `lmos/${thing}/events/ping`;
  const state = `lmos/${thing}/properties/state`;
  const report = { version };
  const a = await connect("a");
  await a.subscribeAsync(events, { qos: 1 });
  const event = new Promise((resolve) =>
    a.on("message", (topic, payload, packet) => {
      if (topic === events) resolve({ topic, payload: payload.toString(), qos: packet.qos });
    }),
  );
  const b = await connect("b");
  await b.publishAsync(events, JSON.stringify({ n: version }), { qos: 1 });
  await b.publishAsync(state, JSON.stringify({ on: true, version }), { qos: 1, retain: true });
  report.event = await within(event, "event");
  const c = await connect("c");
  const retained = new Promise((resolve) =>
    c.on("message", (topic, payload, packet) =>
      resolve({ topic, payload: payload.toString(), retain: packet.retain }),
    ),
  );
  await c.subscribeAsync(state, { qos: 0 });
  report.retained = await within(retained, "retained reading");
  // Cleared, so the other version's run sees its own.
  await b.publishAsync(state, "", { qos: 1, retain: true });
  for (const client of [a, b, c]) await client.endAsync();
  return report;
};
