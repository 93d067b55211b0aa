// The lmos-sidecar console. Plain JavaScript, no libraries: it polls
// /console/state for Things, counters and running invocations, reads TDs
// from the directory, and speaks lmosprotocol over /lmos for everything
// live, with the rights of the principal who opened the page.
"use strict";

const WINDOW = 300;          // seconds plotted: 5 minutes at one point a second
const LIVE_MAX = 50;         // entries kept in the live list
const SAMPLE_ABOVE = 1000;   // messages/s past which live messages are sampled
const COLORS = ["#0b5cad", "#d1495b", "#2a9d8f", "#8a4b00", "#6a4c93", "#5a6270"];

const $ = (sel) => document.querySelector(sel);
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
const el = (tag, attrs = {}, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") e.textContent = v; else if (k.startsWith("on")) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
};
// Absolute URLs: a page opened with credentials in its URL (user:pw@host)
// keeps them in its base URL, and fetch refuses relative URLs then.
const here = (path) => location.origin + path;
const uuid = () => (crypto.randomUUID ? crypto.randomUUID() : String(Date.now()) + Math.random().toString(16).slice(2));

const app = {
  state: null, history: [], since: 0, jaeger: "",
  ws: null, thing: null, td: null,
  pending: new Map(),        // correlationID -> handler(message)
  live: [], liveDirty: false, current: new Map(), wanted: null,
  received: 0, rate: 0, sampleEvery: 1, seen: 0,
};

// ---- polling /console/state -------------------------------------------
async function poll() {
  try {
    const r = await fetch(here("/console/state?since=" + app.since), { credentials: "same-origin", cache: "no-store" });
    if (!r.ok) throw new Error(r.status + " " + (await r.text()));
    const s = await r.json();
    app.state = s; app.jaeger = s.jaegerUiUrl || "";
    $("#who").textContent = "signed in as " + s.principal + " · " + wsLabel();
    record(s.history, s.counters);
    renderHealth(s.health);
    $("#connections").textContent = "connections: " + Object.entries(s.connections || {}).map(([k, v]) => k + " " + v).join(" · ") +
      " (yours: " + s.ownConnections + " over WebSocket)";
    renderThings(); renderCharts(); renderRunning();
    if (app.wanted) { const id = app.wanted; app.wanted = null; openThing(id); }
  } catch (e) {
    $("#who").textContent = "cannot reach the sidecar: " + e.message;
  }
}

function sum(o) { return Object.values(o || {}).reduce((a, b) => a + b, 0); }

// The sidecar keeps the last five minutes of rates (one point a second);
// each poll brings the points this page has not seen.
function record(points, c) {
  for (const p of points || []) { app.history.push(p); app.since = Math.max(app.since, p.t); }
  while (app.history.length && app.history[0].t < app.since - WINDOW * 1000) app.history.shift();
  renderProblems(c);
}

// /readyz in a line, and the cluster link when there is a cluster.
function renderHealth(h) {
  if (!h) return;
  const p = $("#health");
  const cluster = h.cluster ? (h.cluster.connected ? " · cluster connected" : " · cluster unreachable") + (h.cluster.reconnects ? " (" + h.cluster.reconnects + " reconnects)" : "") : "";
  p.className = h.ready ? "on" : "error";
  p.dataset.ready = h.ready ? "yes" : "no";
  p.textContent = (h.ready ? "" : "not ready: ") + h.report.join(" · ") + cluster;
}

// The free-form panel: whatever the principal may send, and what answers.
const ANSWERS_MAX = 50;
function sendFree(ev) {
  ev.preventDefault();
  const text = ev.target.elements.message.value;
  const list = $("#answers");
  const note = (cls, t) => { list.prepend(el("li", { class: cls, text: t })); while (list.children.length > ANSWERS_MAX) list.lastChild.remove(); };
  let msg;
  try { msg = JSON.parse(text); } catch (e) { note("error", "Not valid JSON: " + e.message); return; }
  if (!msg || typeof msg !== "object" || Array.isArray(msg)) { note("error", "An LMOS message is a JSON object."); return; }
  msg.messageID = msg.messageID || uuid();
  const c = msg.correlationID || msg.correlationId || msg.messageID;
  app.pending.set(c, (m) => note(m.messageType === "error" ? "error" : "", new Date().toLocaleTimeString() + " ← " + JSON.stringify(m)));
  if (send(msg)) note("off", "→ " + JSON.stringify(msg)); else note("error", "Not connected.");
}

// Totals since the start, by kind: which errors, which drops, which refusals.
function renderProblems(c) {
  const kinds = (o) => Object.entries(o || {}).sort((a, b) => b[1] - a[1]);
  const row = (title, o) => {
    const li = el("li", { "data-problem": title }, el("strong", { text: title + " " + sum(o) }));
    const parts = kinds(o);
    if (parts.length) li.append(" (" + parts.map(([k, v]) => k + " " + v).join(", ") + ")");
    return li;
  };
  $("#problems").replaceChildren(el("span", { text: "Totals since the start: " }),
    el("ul", { class: "inline" }, row("errors", c.errors), row("dropped", c.dropped), row("denied", c.denied),
      row("spans dropped", c.spans_dropped)));
}

// ---- charts: hand-drawn SVG polylines, with axes ------------------------
const AXIS = { left: 34, bottom: 16, top: 16, right: 18 };
const clock = (t) => new Date(t * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", hour12: false });

// A round step for about three y ticks: 1, 2 or 5 times a power of ten.
function niceStep(max) {
  const raw = max / 3, p = Math.pow(10, Math.floor(Math.log10(raw)));
  return [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw);
}

function chart(title, key, limit) {
  // The sidecar's clock, so a page on another machine plots the same.
  const h = app.history, W = 320, H = 110, now = (app.since || Date.now()) / 1000;
  const totals = {};
  for (const p of h) for (const [k, v] of Object.entries(p[key])) totals[k] = (totals[k] || 0) + v;
  const names = Object.keys(totals).filter((k) => totals[k] > 0).sort((a, b) => totals[b] - totals[a]).slice(0, limit);
  let peak = 0;
  for (const p of h) for (const n of names) peak = Math.max(peak, p[key][n] || 0);
  const step = niceStep(Math.max(peak, 1)), max = step * Math.ceil(Math.max(peak, 1) / step);
  const x0 = AXIS.left, x1 = W - AXIS.right, y0 = H - AXIS.bottom, y1 = AXIS.top;
  const x = (t) => (x0 + (x1 - x0) * (t - (now - WINDOW)) / WINDOW).toFixed(1), y = (v) => (y0 - (y0 - y1) * v / max).toFixed(1);
  let axes = '<line x1="' + x0 + '" y1="' + y0 + '" x2="' + x1 + '" y2="' + y0 + '" stroke="#8a919c"/><line x1="' + x0 + '" y1="' + y0 + '" x2="' + x0 + '" y2="' + y1 + '" stroke="#8a919c"/>';
  for (let v = 0; v <= max + 1e-9; v += step) {
    axes += '<line x1="' + x0 + '" y1="' + y(v) + '" x2="' + x1 + '" y2="' + y(v) + '" stroke="#eceef2"/><text class="axis-y" x="' + (x0 - 3) + '" y="' + (Number(y(v)) + 3) + '" text-anchor="end">' + (+v.toFixed(2)) + "</text>";
  }
  axes += '<text class="axis-unit" x="2" y="9">msg/s</text>';
  // A tick every minute, labelled with the sidecar's clock time.
  for (let t = Math.ceil((now - WINDOW) / 60) * 60; t <= now; t += 60) {
    axes += '<line x1="' + x(t) + '" y1="' + y0 + '" x2="' + x(t) + '" y2="' + (y0 + 3) + '" stroke="#8a919c"/><text class="axis-x" x="' + x(t) + '" y="' + (H - 3) + '" text-anchor="middle">' + clock(t) + "</text>";
  }
  const lines = names.map((n, i) => '<polyline fill="none" stroke-width="1.5" stroke="' + COLORS[i % COLORS.length] + '" points="' +
    h.map((p) => x(p.t / 1000) + "," + y(p[key][n] || 0)).join(" ") + '"/>').join("");
  const last = h.length ? h[h.length - 1][key] : {};
  const legend = names.map((n, i) => '<span class="c' + (i % COLORS.length) + '">■ ' + esc(n) + " " + (last[n] || 0).toFixed(1) + "/s</span>").join("") || "<span>none so far</span>";
  return '<figure><figcaption>' + esc(title) + " · peak " + peak.toFixed(1) + ' messages/s</figcaption><svg viewBox="0 0 ' + W + " " + H +
    '" role="img" aria-label="' + esc(title) + ', messages per second over the last 5 minutes">' + axes + lines +
    '</svg><div class="legend">' + legend + "</div></figure>";
}

function renderCharts() {
  $("#charts").innerHTML = chart("By transport", "transport", 6) + chart("By message type", "type", 6) + chart("Errors, drops, denials", "problems", 3);
}

// ---- the Things table ----------------------------------------------------
function renderThings() {
  const body = $("#things tbody");
  const rows = app.state.things.map((t) => {
    const agent = t.agent ? el("span", { class: "on", text: "connected · " + t.agent }) : el("span", { class: "off", text: "not connected" });
    const open = el("button", { type: "button", "data-open": t.id, onclick: () => openThing(t.id) }, t.title || t.id);
    const name = el("td", {}, open, el("div", { class: "off", text: t.registered ? t.id : t.id + " (no TD)" }));
    return el("tr", { "data-thing": t.id, "data-agent": t.agent || "" }, name, el("td", {}, agent),
      el("td", { text: t.subscriptions }), el("td", { text: t.consumers }), el("td", { text: t.running.length }));
  });
  // Keep the focused button across refreshes so keyboard users stay put.
  const focused = document.activeElement && document.activeElement.getAttribute("data-open");
  body.replaceChildren(...rows);
  if (!rows.length) body.append(el("tr", {}, el("td", { colspan: 5, text: "No Thing you may see is registered or connected." })));
  if (focused) { const b = body.querySelector('[data-open="' + CSS.escape(focused) + '"]'); if (b) b.focus(); }
}

function renderRunning() {
  if (!app.thing || !app.state) return;
  const t = app.state.things.find((x) => x.id === app.thing);
  const list = $("#running");
  if (!t || !list) return;
  list.replaceChildren(...t.running.map((r) => el("li", { text: r.action + " · " + (r.status || "sent") + " · " + (r.ageMs / 1000).toFixed(1) + " s" })));
  if (!t.running.length) list.append(el("li", { class: "off", text: "none running" }));
}

// ---- WebSocket ------------------------------------------------------------
function wsLabel() { return app.ws && app.ws.readyState === 1 ? "live" : "not live"; }

function connect() {
  const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/lmos";
  const ws = new WebSocket(url, "lmosprotocol");
  app.ws = ws;
  ws.onopen = () => { if (app.thing) subscribe(app.thing); };
  ws.onmessage = (m) => onMessage(m.data);
  ws.onclose = () => { app.ws = null; setTimeout(connect, 1000); };
}

function send(msg) {
  msg.messageID = msg.messageID || uuid();
  if (app.ws && app.ws.readyState === 1) { app.ws.send(JSON.stringify(msg)); return true; }
  return false;
}

// Cheap before parsing: at more than SAMPLE_ABOVE messages a second only
// one event or reading in sampleEvery is parsed and shown; replies to this
// page's own requests always are.
function onMessage(text) {
  app.received++;
  const stream = text.includes('"messageType":"event"') || text.includes('"messageType":"propertyReading"');
  if (stream && app.sampleEvery > 1 && (app.seen++ % app.sampleEvery) !== 0) return;
  let m; try { m = JSON.parse(text); } catch { return; }
  const c = m.correlationID || m.correlationId;
  const handler = c && app.pending.get(c);
  // An answer to this page's own request goes to its form, not the list.
  if (handler) { handler(m); return; }
  if (m.messageType === "event" || m.messageType === "propertyReading" || m.messageType === "propertyReadings") addLive(m);
}

setInterval(() => {
  app.rate = app.received; app.received = 0;
  app.sampleEvery = app.rate > SAMPLE_ABOVE ? Math.ceil(app.rate / SAMPLE_ABOVE) : 1;
  const s = $("#sampling");
  s.hidden = app.sampleEvery === 1;
  s.textContent = "Sampling: " + app.rate + " messages/s arrive, showing 1 in " + app.sampleEvery;
}, 1000);

// The trace a message belongs to: this console's waterfall, and Jaeger
// when one is configured (traces.js).
function traceLink(m) {
  const id = typeof m.traceparent === "string" ? m.traceparent.split("-")[1] : null;
  if (!id || !/^[0-9a-f]{32}$/.test(id)) return null;
  return el("span", { class: "trace-links" }, ...traceLinks(id));
}

// A new trace for a message this page starts: the page is the consumer,
// and the sidecar's spans (and the agent's) join its trace.
function newTraceparent() {
  const hex = (n) => Array.from(crypto.getRandomValues(new Uint8Array(n)), (b) => b.toString(16).padStart(2, "0")).join("");
  return "00-" + hex(16) + "-" + hex(8) + "-01";
}

function showCurrent(name, value) { const f = app.current.get(name); if (f) f(value); }

function addLive(m) {
  if (m.thingID !== app.thing && m.thingId !== app.thing) return;
  if (m.messageType === "propertyReading") showCurrent(m.name, m.value);
  app.live.unshift({ m, at: Date.now() });
  if (app.live.length > LIVE_MAX) app.live.length = LIVE_MAX;
  if (!app.liveDirty) { app.liveDirty = true; requestAnimationFrame(renderLive); }
}

// Batched to one DOM update per frame, so a flood never blocks the page.
function renderLive() {
  app.liveDirty = false;
  const items = app.live.map(({ m, at }) => {
    const kind = m.messageType === "event" ? "event" : "reading";
    const name = m.event || m.name || "readings";
    const value = m.messageType === "event" ? m.data : (m.value !== undefined ? m.value : m.data);
    const stamp = Date.parse(m.timestamp);
    const li = el("li", { "data-kind": kind, "data-name": name, "data-latency": isNaN(stamp) ? "" : String(at - stamp) },
      new Date(at).toLocaleTimeString() + " " + kind + " " + name + " " + JSON.stringify(value));
    const link = traceLink(m); if (link) li.append(" ", link);
    return li;
  });
  $("#live").replaceChildren(...items);
}

// ---- a Thing: affordances and forms ---------------------------------------
async function openThing(id) {
  if (app.thing && app.thing !== id) unsubscribe(app.thing);
  app.thing = id; app.live = []; renderLive();
  // A link to this view: /console#thing=<id> opens it.
  if (location.hash !== "#thing=" + encodeURIComponent(id)) history.replaceState(null, "", "#thing=" + encodeURIComponent(id));
  $("#detail").hidden = false;
  $("#h-detail").textContent = "Thing";
  $("#detail-id").replaceChildren(el("code", { text: id }), " · ",
    el("a", { href: "/things/" + encodeURIComponent(id), target: "_blank", rel: "noopener", "data-link": "td" }, "Thing Description"), " · ",
    el("a", { href: "#thing=" + encodeURIComponent(id), "data-link": "view" }, "link to this view"));
  $("#properties").replaceChildren(); $("#actions").replaceChildren(); $("#events").replaceChildren(); $("#invocations").replaceChildren();
  const r = await fetch(here("/things/" + encodeURIComponent(id)), { credentials: "same-origin" });
  if (!r.ok) { $("#detail-id").append(el("div", { class: "error", text: "Cannot read the TD: " + r.status })); return; }
  const td = await r.json(); app.td = td; app.current = new Map();
  $("#h-detail").textContent = td.title || id;
  renderAffordances(td);
  subscribe(id);
  $("#detail").scrollIntoView({ block: "start" });
  const first = $("#detail button"); if (first) first.focus();
}

function subscribe(id) {
  send({ thingID: id, messageType: "subscribeAllEvents", correlationID: "console-events" });
  for (const [name, p] of Object.entries((app.td && app.td.properties) || {})) {
    if (p.observable) send({ thingID: id, messageType: "observeProperty", name, correlationID: "console-observe-" + name });
  }
}

function unsubscribe(id) {
  send({ thingID: id, messageType: "unsubscribeAllEvents", correlationID: "console-events" });
  for (const name of Object.keys((app.td && app.td.properties) || {})) send({ thingID: id, messageType: "unobserveProperty", name });
}

// A form field per data schema: objects nest, enums become selects,
// numbers and booleans get their inputs, anything else is JSON text.
function field(schema, name, label, required) {
  schema = schema || {};
  const caption = el("span", { text: label + (schema.type ? " (" + schema.type + ")" : "") + (required ? " *" : "") + (schema.description ? " — " + schema.description : "") });
  if (schema.type === "object" && schema.properties) {
    const set = el("fieldset", {}, el("legend", { text: label }));
    const req = new Set(schema.required || []);
    const parts = Object.entries(schema.properties).map(([k, s]) => { const f = field(s, name ? name + "." + k : k, k, req.has(k)); set.append(f.node); return [k, f]; });
    return { node: set, get: () => { const o = {}; for (const [k, f] of parts) { const v = f.get(); if (v !== undefined) o[k] = v; } return o; },
      set: (v) => { for (const [k, f] of parts) if (v && typeof v === "object" && k in v) f.set(v[k]); } };
  }
  let input;
  if (Array.isArray(schema.enum)) {
    input = el("select", { name }); for (const v of schema.enum) input.append(el("option", { value: JSON.stringify(v), text: String(v) }));
  } else if (schema.type === "number" || schema.type === "integer") {
    input = el("input", { type: "number", name, step: schema.type === "integer" ? "1" : "any" });
    if (schema.minimum !== undefined) input.min = schema.minimum;
    if (schema.maximum !== undefined) input.max = schema.maximum;
  } else if (schema.type === "boolean") {
    input = el("input", { type: "checkbox", name });
  } else if (schema.type === "string") {
    input = el("input", { type: "text", name });
  } else {
    input = el("textarea", { name, rows: "3", placeholder: "JSON" });
  }
  if (required && input.type !== "checkbox") input.required = true;
  const get = () => {
    if (input.tagName === "SELECT") return JSON.parse(input.value);
    if (input.type === "checkbox") return input.checked;
    if (input.value === "") return undefined;
    if (input.type === "number") return Number(input.value);
    if (input.tagName === "TEXTAREA") return JSON.parse(input.value);
    return input.value;
  };
  const set = (v) => {
    if (input.tagName === "SELECT") input.value = JSON.stringify(v);
    else if (input.type === "checkbox") input.checked = !!v;
    else if (input.tagName === "TEXTAREA") input.value = JSON.stringify(v);
    else input.value = v === undefined || v === null ? "" : String(v);
  };
  return { node: el("label", {}, caption, input), get, set };
}

function problemText(m) {
  return "Refused: " + (m.status || "") + " " + (m.title || "error") + (m.detail ? " — " + m.detail : "");
}

function renderAffordances(td) {
  const id = td.id;
  for (const [name, p] of Object.entries(td.properties || {})) {
    const result = el("div", { class: "result", id: "result-prop-" + name, "aria-live": "polite" });
    const show = (m, cls) => { result.className = "result " + cls; result.textContent = m; };
    const read = el("button", { type: "button", onclick: () => {
      const c = uuid();
      app.pending.set(c, (m) => { app.pending.delete(c); if (m.messageType === "error") { show(problemText(m), "error"); return; } const v = m.value !== undefined ? m.value : m.data; show(JSON.stringify(v, null, 1), ""); showCurrent(name, v); });
      if (!send({ thingID: id, messageType: "readProperty", name, correlationID: c })) show("Not connected.", "error");
    } }, "Read");
    const current = el("div", { class: "current", "data-current": name, text: "current value: …" });
    const box = el("div", { class: "affordance", "data-property": name }, el("strong", { text: name }), " ", read, current);
    if (p.description) box.append(el("div", { class: "off", text: p.description }));
    let f = null;
    if (!p.readOnly) {
      f = field(p, "", "value", false);
      const form = el("form", { "data-write": name }, f.node, el("button", { type: "submit" }, "Write"));
      form.addEventListener("submit", (ev) => {
        ev.preventDefault();
        let data; try { data = f.get(); } catch (e) { show("Not valid JSON: " + e.message, "error"); return; }
        const c = uuid();
        app.pending.set(c, (m) => { app.pending.delete(c); if (m.messageType === "error") show(problemText(m), "error"); else show("Written.", "ok"); });
        show("writing…", "");
        if (!send({ thingID: id, messageType: "writeProperty", name, data, correlationID: c })) show("Not connected.", "error");
      });
      box.append(form);
    }
    box.append(result);
    $("#properties").append(box);
    // The current value, shown and put into the write form (untouched
    // fields only), now and whenever a reading arrives.
    let edited = false;
    if (f) f.node.addEventListener("input", () => { edited = true; });
    app.current.set(name, (v) => {
      current.textContent = "current value: " + JSON.stringify(v);
      current.dataset.value = JSON.stringify(v);
      if (f && !edited && f.set) f.set(v);
    });
    const c = uuid();
    app.pending.set(c, (m) => { app.pending.delete(c); if (m.messageType !== "error") showCurrent(name, m.value !== undefined ? m.value : m.data); else current.textContent = "current value: " + problemText(m); });
    send({ thingID: id, messageType: "readProperty", name, correlationID: c });
  }
  for (const [name, a] of Object.entries(td.actions || {})) {
    const f = a.input ? field(a.input, "", "input", true) : null;
    const form = el("form", { "data-invoke": name }, el("strong", { text: name }));
    if (a.description) form.append(el("div", { class: "off", text: a.description }));
    if (f) form.append(f.node);
    form.append(el("button", { type: "submit" }, "Invoke " + name));
    form.addEventListener("submit", (ev) => { ev.preventDefault(); invoke(id, name, f); });
    $("#actions").append(form);
  }
  renderTopics(td);
  for (const [name, e] of Object.entries(td.events || {})) $("#events").append(el("li", { text: name + (e.description ? " — " + e.description : "") }));
  $("#actions").append(el("h3", { text: "Running on the sidecar" }), el("ul", { id: "running" }));
  renderRunning();
}

// The Thing's MQTT topics, all of them (the TD's forms name only some):
// what to give mosquitto_sub or any MQTT client. The sidecar computes them
// from its own topic layout, so escaped IDs are exactly what it uses.
async function renderTopics(td) {
  const body = $("#topics tbody");
  const r = await fetch(here("/console/topics?thing=" + encodeURIComponent(td.id)), { credentials: "same-origin", cache: "no-store" });
  if (!r.ok) { body.replaceChildren(el("tr", {}, el("td", { colspan: 3, class: "error", text: "Cannot list the topics: " + r.status }))); return; }
  const ops = formOps(td);
  const rows = (await r.json()).map((t) => el("tr", { "data-topic": t.topic, "data-retained": t.retained ? "yes" : "no" },
    el("td", {}, topicName(t.topic)), el("td", { text: t.purpose + (t.retained ? " (retained)" : "") + (ops.has(t.topic) ? " — TD ops: " + ops.get(t.topic) : "") }), el("td", { text: t.carries })));
  body.replaceChildren(...rows);
}

// The operations the TD's MQTT forms give each topic (`observeproperty`, …).
function formOps(td) {
  const ops = new Map();
  const add = (forms) => {
    for (const f of forms || []) {
      if (typeof f.href !== "string" || !f.href.startsWith("mqtt")) continue;
      const topic = f["mqv:filter"] || f["mqv:topic"] || decodeURIComponent(f.href.replace(/^mqtts?:\/\/[^/]*\//, ""));
      ops.set(topic, [ops.get(topic), ...[].concat(f.op || [])].filter(Boolean).join(", "));
    }
  };
  for (const k of ["properties", "actions", "events"]) for (const a of Object.values(td[k] || {})) add(a.forms);
  add(td.forms);
  return ops;
}

// A topic that wraps only after a `/` (a <wbr> there), never inside a level.
function topicName(topic) {
  const code = el("code", { class: "topic" });
  topic.split("/").forEach((level, i) => { if (i) code.append("/", el("wbr")); code.append(level); });
  return code;
}

function invoke(id, action, f) {
  const c = uuid();
  const statuses = el("span", { class: "statuses" });
  const li = el("li", { "data-correlation": c, "data-status": "sent", "data-statuses": "" }, action + ": ", statuses);
  $("#invocations").prepend(li);
  const add = (status, detail, cls, m) => {
    li.setAttribute("data-status", status);
    li.setAttribute("data-statuses", (li.getAttribute("data-statuses") ? li.getAttribute("data-statuses") + " " : "") + status);
    statuses.append(el("span", { class: "status-" + status, text: (statuses.childNodes.length ? " → " : "") + status + (detail ? " " + detail : "") }));
  };
  let input;
  try { input = f ? f.get() : undefined; } catch (e) { add("invalid", e.message, "error"); return; }
  // Streamed audio (a voice agent's answer) is put together and played.
  const audio = { parts: [], type: "" };
  app.pending.set(c, (m) => {
    if (m.messageType === "error") { add("error", problemText(m), "error", m); app.pending.delete(c); return; }
    if (m.messageType !== "actionStatus") return;
    const s = m.stream;
    if (s && s.contentEncoding === "base64" && /^audio\//.test(s.contentType || "")) {
      audio.parts.push(Uint8Array.from(atob(s.data), (ch) => ch.charCodeAt(0)));
      audio.type = s.contentType;
      return;
    }
    const out = m.output === undefined ? "" : JSON.stringify(m.output);
    add(m.status, out, "", m);
    if (m.status === "completed" && audio.parts.length) {
      li.append(" ", el("audio", { controls: "", "data-audio": audio.type, src: URL.createObjectURL(new Blob(audio.parts, { type: audio.type })) }));
    }
    if (["completed", "failed", "cancelled", "canceled"].includes(m.status)) app.pending.delete(c);
  });
  const msg = { thingID: id, messageType: "invokeAction", action, correlationID: c, traceparent: newTraceparent() };
  if (input !== undefined) msg.input = input;
  li.append(" ", traceLink(msg));
  if (!send(msg)) add("error", "not connected", "error");
}

// /console#thing=<id>: open that Thing once the first state is in.
if (location.hash.startsWith("#thing=")) app.wanted = decodeURIComponent(location.hash.slice(7));
window.addEventListener("hashchange", () => {
  if (location.hash.startsWith("#thing=")) { const id = decodeURIComponent(location.hash.slice(7)); if (id !== app.thing) openThing(id); }
});
$("#send").addEventListener("submit", sendFree);
connect();
poll();
setInterval(poll, 1000);
