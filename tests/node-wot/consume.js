// node-wot, unchanged, consuming the WeatherAgent through a running sidecar.
// Run by tests/interop/node_wot.rs: node consume.js <TD URL>
//
// It follows only the forms of the TD the sidecar serves: MQTT forms (value
// topics) for the event and the property observation, HTTP forms for reading
// and writing the property and invoking the action. node-wot validates every
// value against the affordance's data schema, so a form that delivered the
// LMOS envelope instead of the value would fail here. It prints one JSON
// report line for the Rust test to compare with what the agent sent.
"use strict";

const { Servient } = require("@node-wot/core");
const { HttpClientFactory } = require("@node-wot/binding-http");
const { MqttClientFactory } = require("@node-wot/binding-mqtt");

const WAIT_MS = 10000;

function formIndex(affordance, op, scheme, hrefPart) {
    const i = affordance.forms.findIndex((f) => {
        const ops = Array.isArray(f.op) ? f.op : [f.op];
        return ops.includes(op) && f.href.startsWith(scheme + ":") && f.href.includes(hrefPart);
    });
    if (i < 0) {
        throw new Error(`no ${scheme} form for ${op} with ${hrefPart}: ${JSON.stringify(affordance.forms)}`);
    }
    return i;
}

function until(what, predicate) {
    return new Promise((resolve, reject) => {
        const started = Date.now();
        const check = () => {
            const found = predicate();
            if (found !== undefined) {
                resolve(found);
            } else if (Date.now() - started > WAIT_MS) {
                reject(new Error(`timed out waiting for ${what}`));
            } else {
                setTimeout(check, 20);
            }
        };
        check();
    });
}

async function main() {
    const tdUrl = process.argv[2];
    const city = process.argv[3] || "Lisbon";
    const response = await fetch(tdUrl);
    if (!response.ok) {
        throw new Error(`GET ${tdUrl}: ${response.status}`);
    }
    const td = await response.json();

    const servient = new Servient();
    servient.addClientFactory(new HttpClientFactory());
    servient.addClientFactory(new MqttClientFactory());
    const WoT = await servient.start();
    const thing = await WoT.consume(td);

    const event = td.events.userFeedbackReceived;
    const property = td.properties.modelConfiguration;
    const action = td.actions.getWeather;

    const events = [];
    const observed = [];
    const errors = [];
    await thing.subscribeEvent(
        "userFeedbackReceived",
        async (output) => events.push(await output.value()),
        (e) => errors.push(String(e)),
        { formIndex: formIndex(event, "subscribeevent", "mqtt", "/values/events/") },
    );
    await thing.observeProperty(
        "modelConfiguration",
        async (output) => observed.push(await output.value()),
        (e) => errors.push(String(e)),
        { formIndex: formIndex(property, "observeproperty", "mqtt", "/values/properties/") },
    );

    const httpRead = { formIndex: formIndex(property, "readproperty", "http", "/properties/") };
    const httpWrite = { formIndex: formIndex(property, "writeproperty", "http", "/properties/") };
    const httpInvoke = { formIndex: formIndex(action, "invokeaction", "http", "/actions/") };

    const initial = await (await thing.readProperty("modelConfiguration", httpRead)).value();
    const written = { modelName: "node-wot", temperature: 0.25, maxTokens: 42 };
    await thing.writeProperty("modelConfiguration", written, httpWrite);
    const afterWrite = await (await thing.readProperty("modelConfiguration", httpRead)).value();
    const observedWrite = await until("the written value over MQTT", () =>
        observed.find((v) => v && v.modelName === written.modelName),
    );
    const input = { question: `What is the weather in ${city}?`, interactionMode: "text" };
    const output = await (await thing.invokeAction("getWeather", input, httpInvoke)).value();
    const feedback = await until("the event over MQTT", () =>
        events.find((e) => e && typeof e.comment === "string" && e.comment.includes(city)),
    );

    console.log(JSON.stringify({ initial, afterWrite, observedWrite, observed, output, feedback, errors }));
    await servient.shutdown();
}

main().then(
    () => process.exit(0),
    (e) => {
        console.error(e && e.stack ? e.stack : String(e));
        process.exit(1);
    },
);
