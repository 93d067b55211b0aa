// The console's MQTT view (after console.js, whose helpers it uses): a
// topic tree of the latest message per topic (retained ones marked), the
// selected topic's message, publishing, and the recent messages, searchable.
// The sidecar filters every list to what the signed-in principal may read.
"use strict";

const bus = { open: new Set(), selected: null, byTopic: new Map() };

// Topics into levels: node = { name, path, children: Map, msg, count }.
function topicTree(messages) {
  const root = { name: "", path: "", children: new Map(), msg: null, count: 0 };
  for (const m of messages) {
    let node = root; node.count++;
    const levels = m.topic.split("/");
    levels.forEach((level, i) => {
      if (!node.children.has(level)) node.children.set(level, { name: level, path: levels.slice(0, i + 1).join("/"), children: new Map(), msg: null, count: 0 });
      node = node.children.get(level); node.count++;
    });
    node.msg = m;
  }
  return root;
}

function preview(payload) { return payload.length > 60 ? payload.slice(0, 60) + "…" : payload; }

function renderNode(node) {
  const li = el("li", { "data-path": node.path });
  const label = el("button", { type: "button", class: "topic-level", "data-topic": node.msg ? node.msg.topic : "" }, node.name);
  if (node.msg) {
    label.addEventListener("click", () => selectTopic(node.msg.topic));
    if (node.msg.topic === bus.selected) label.classList.add("selected");
  }
  const line = el("span", { class: "topic-line" }, label);
  if (node.msg) line.append(" ", el("span", { class: "off", text: "= " + preview(node.msg.payload) }), node.msg.retained ? el("span", { class: "tag", text: "retained" }) : "");
  if (!node.children.size) { li.append(line); return li; }
  const box = el("details", { "data-path": node.path });
  if (bus.open.has(node.path)) box.open = true;
  box.addEventListener("toggle", () => { if (box.open) bus.open.add(node.path); else bus.open.delete(node.path); });
  const summary = el("summary", {}, line, " ", el("span", { class: "count", text: "(" + node.count + " topic" + (node.count === 1 ? "" : "s") + ")" }));
  box.append(summary, el("ul", {}, ...[...node.children.values()].sort((a, b) => a.name.localeCompare(b.name)).map(renderNode)));
  li.append(box);
  return li;
}

async function pollTree() {
  try {
    const r = await fetch(here("/console/tree"), { credentials: "same-origin", cache: "no-store" });
    if (!r.ok) throw new Error(r.status);
    const all = await r.json();
    bus.byTopic = new Map(all.map((m) => [m.topic, m]));
    const root = topicTree(all);
    // The first levels open by default: the prefix and its Things.
    if (!bus.open.size) for (const n of root.children.values()) bus.open.add(n.path);
    $("#tree").replaceChildren(...[...root.children.values()].map(renderNode));
    if (!all.length) $("#tree").append(el("li", { class: "off", text: "No message you may read has arrived yet." }));
    $("#tree-count").textContent = all.length + " topics";
    if (bus.selected) showTopic(bus.byTopic.get(bus.selected));
  } catch (e) {
    $("#tree-count").textContent = "cannot read the topics: " + e.message;
  }
}

function selectTopic(topic) {
  bus.selected = topic;
  for (const b of document.querySelectorAll("#tree .selected")) b.classList.remove("selected");
  const b = document.querySelector('#tree button[data-topic="' + CSS.escape(topic) + '"]'); if (b) b.classList.add("selected");
  showTopic(bus.byTopic.get(topic));
  $("#publish").elements.topic.value = topic;
}

function pretty(payload) { try { return JSON.stringify(JSON.parse(payload), null, 2); } catch { return payload; } }

function showTopic(m) {
  const box = $("#topic-detail");
  if (!m) { box.replaceChildren(el("p", { class: "off", text: "No longer kept: pick another topic." })); return; }
  const props = [["retained", m.retained ? "yes (the sidecar keeps this topic retained)" : "no"],
    ["QoS", "0 (as the sidecar's own subscription received it)"],
    ["size", m.bytes + " bytes"], ["last update", new Date(m.at).toLocaleString()]];
  if (m.responseTopic) props.push(["response topic (MQTT 5)", m.responseTopic]);
  if (m.correlationData) props.push(["correlation data (MQTT 5)", m.correlationData]);
  if (m.traceparent) props.push(["traceparent (MQTT 5 user property)", m.traceparent]);
  if (m.publisher) props.push(["publisher", m.publisher]);
  const dl = el("dl", {}); for (const [k, v] of props) dl.append(el("dt", { text: k }), el("dd", { text: v }));
  box.replaceChildren(el("p", {}, topicName(m.topic)), dl, el("pre", { class: "payload", "data-payload": m.topic, text: pretty(m.payload) }));
}

// Publishing: the sidecar checks the principal's MQTT rights for the topic.
async function publish(ev) {
  ev.preventDefault();
  const f = ev.target.elements, out = $("#publish-result");
  const body = { topic: f.topic.value, payload: f.payload.value, qos: Number(f.qos.value), retain: f.retain.checked };
  out.className = "result"; out.textContent = "publishing…";
  try {
    const r = await fetch(here("/console/publish"), { method: "POST", credentials: "same-origin", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
    if (r.ok) { out.className = "result ok"; out.dataset.outcome = "published"; out.textContent = new Date().toLocaleTimeString() + " published to " + body.topic; return; }
    let why = r.status + ""; try { const j = await r.json(); why += " " + (j.error || j.detail || ""); } catch { /* not JSON */ }
    out.className = "result error"; out.dataset.outcome = "refused"; out.textContent = "Refused: " + why;
  } catch (e) { out.className = "result error"; out.dataset.outcome = "refused"; out.textContent = "Cannot publish: " + e.message; }
}

// The recent messages: the sidecar searches them (topic or payload).
async function pollRecent() {
  const q = $("#recent-q").value;
  try {
    const r = await fetch(here("/console/recent?q=" + encodeURIComponent(q)), { credentials: "same-origin", cache: "no-store" });
    if (!r.ok) throw new Error(r.status);
    const found = await r.json();
    $("#recent").replaceChildren(...found.map((m) => el("li", { "data-topic": m.topic },
      el("span", { class: "off", text: new Date(m.at).toLocaleTimeString() + " " }), topicName(m.topic), " ", el("code", { text: preview(m.payload) }))));
    if (!found.length) $("#recent").append(el("li", { class: "off", text: q ? "Nothing recent matches." : "No message you may read yet." }));
  } catch (e) { $("#recent").replaceChildren(el("li", { class: "error", text: "Cannot search: " + e.message })); }
}

function expandAll(open) {
  for (const d of document.querySelectorAll("#tree details")) d.open = open;
  if (!open) bus.open.clear();
}

$("#tree-expand").addEventListener("click", () => expandAll(true));
$("#tree-collapse").addEventListener("click", () => expandAll(false));
$("#publish").addEventListener("submit", publish);
$("#recent-q").addEventListener("input", pollRecent);
pollTree(); pollRecent();
setInterval(pollTree, 2000);
setInterval(pollRecent, 2000);

// ---- clients and sessions -------------------------------------------------
// The sidecar lists everyone's to administrators (console.administrators)
// and the caller's own to everyone else; it refuses others' disconnects.
async function pollClients() {
  const q = $("#clients-q").value;
  try {
    const r = await fetch(here("/console/clients?q=" + encodeURIComponent(q)), { credentials: "same-origin", cache: "no-store" });
    if (!r.ok) throw new Error(r.status);
    renderClients(await r.json());
  } catch (e) { $("#clients-note").textContent = "Cannot list the clients: " + e.message; }
}

function renderClients(c) {
  $("#clients-note").textContent = c.administer
    ? "You administer: every client and session is listed, and you may disconnect MQTT clients."
    : "Your own clients and sessions (only principals in console.administrators see everyone's and may disconnect).";
  $("#clients-note").dataset.administer = c.administer ? "yes" : "no";
  const rows = c.mqtt.map((s) => {
    const state = s.connected ? el("span", { class: "on", text: "connected" }) : el("span", { class: "off", text: "kept" + (s.expiresInS != null ? " (expires in " + s.expiresInS + " s)" : " (never expires)") });
    const action = el("td", {});
    if (s.connected && c.administer) action.append(el("button", { type: "button", "data-disconnect": s.clientId, onclick: () => disconnect(s.clientId) }, "Disconnect"));
    return el("tr", { "data-client": s.clientId, "data-connected": s.connected ? "yes" : "no", "data-kept": s.kept ? "yes" : "no" },
      el("td", {}, el("code", { text: s.clientId })), el("td", { text: s.owner || "" }), el("td", {}, state),
      el("td", {}, ...s.subscriptions.map((f) => el("div", {}, topicName(f)))), action);
  });
  $("#mqtt-clients tbody").replaceChildren(...rows);
  if (!rows.length) $("#mqtt-clients tbody").append(el("tr", {}, el("td", { colspan: 5, class: "off", text: "No MQTT session matches." })));
  if (c.mqttMatched > c.mqtt.length) $("#mqtt-clients tbody").append(el("tr", {}, el("td", { colspan: 5, class: "off", text: (c.mqttMatched - c.mqtt.length) + " more: narrow the search." })));
  $("#ws-clients").replaceChildren(...c.websocket.map((w) => el("li", { "data-principal": w.principal, text: w.principal + ": " + w.connections + " WebSocket connection" + (w.connections === 1 ? "" : "s") })));
}

async function disconnect(clientId) {
  const out = $("#disconnect-result");
  const r = await fetch(here("/console/disconnect"), { method: "POST", credentials: "same-origin", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ clientId }) });
  let why = ""; try { why = (await r.json()).error || ""; } catch { /* 204 */ }
  out.className = r.ok ? "result ok" : "result error";
  out.dataset.outcome = r.ok ? "disconnected" : "refused";
  out.textContent = r.ok ? new Date().toLocaleTimeString() + " disconnected " + clientId : "Refused: " + r.status + " " + why;
  pollClients();
}

$("#clients-q").addEventListener("input", pollClients);
pollClients();
setInterval(pollClients, 2000);
