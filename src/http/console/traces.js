// The console's traces (after console.js, whose helpers it uses): the
// recent traces the sidecar kept (GET /console/traces) and one trace as a
// waterfall (GET /console/traces/{id}), reached from the list, from an
// invocation or a live message ("trace" links, #trace=<id>), or from a
// trace ID typed into the search. Jaeger links stay when one is set.
"use strict";

const traces = { shown: null, timer: null };

const duration = (us) => us >= 1e6 ? (us / 1e6).toFixed(2) + " s" : us >= 1000 ? (us / 1000).toFixed(1) + " ms" : us + " µs";
const shortId = (id) => id ? id.slice(0, 8) + "…" : "";

// The local link to a trace, and Jaeger's beside it when configured.
function traceLinks(traceId) {
  const links = [el("a", { href: "#trace=" + traceId, "data-link": "trace", "data-trace": traceId }, "trace")];
  if (app.jaeger) links.push(" ", el("a", { href: app.jaeger + "/trace/" + traceId, target: "_blank", rel: "noopener", "data-link": "jaeger" }, "Jaeger"));
  return links;
}

async function loadTraces() {
  const q = $("#traces-q").value.trim();
  try {
    const r = await fetch(here("/console/traces?q=" + encodeURIComponent(q)), { credentials: "same-origin", cache: "no-store" });
    if (!r.ok) throw new Error(r.status + " " + (await r.text()));
    renderTraceList(await r.json());
  } catch (e) {
    $("#traces-note").textContent = "cannot list traces: " + e.message;
  }
}

function renderTraceList(answer) {
  $("#traces-note").textContent = answer.kept
    ? "(kept in memory: " + Math.round(answer.usedBytes / 1024) + " of " + Math.round(answer.budgetBytes / 1024) + " KiB)"
    : "(not kept: tracing.recent_spans_bytes = 0)";
  const rows = answer.traces.map((t) => el("tr", { "data-trace": t.traceId, class: t.errors ? "failed" : "" },
    el("td", { text: new Date(t.startMs).toLocaleTimeString() }),
    el("td", {}, el("a", { href: "#trace=" + t.traceId, "data-link": "trace" }, t.name || "(unnamed)"), " ", el("code", { class: "off", text: shortId(t.traceId) })),
    el("td", { text: duration(t.durationUs) }),
    el("td", { text: t.spans + (t.errors ? " (" + t.errors + " failed)" : "") }),
    el("td", { text: t.things.join(", ") })));
  $("#traces tbody").replaceChildren(...rows);
}

async function openTrace(id) {
  traces.shown = id;
  const view = $("#trace-view");
  view.hidden = false;
  $("#trace-title").textContent = "Trace " + id;
  const r = await fetch(here("/console/traces/" + encodeURIComponent(id)), { credentials: "same-origin", cache: "no-store" });
  if (!r.ok) {
    $("#trace-meta").replaceChildren(el("span", { class: "error", text: r.status + ": " + (await r.text()) }), " ", ...traceLinksJaegerOnly(id));
    $("#waterfall").replaceChildren(); $("#span-detail").replaceChildren();
    view.dataset.state = "missing";
    return;
  }
  renderTrace(await r.json());
  view.dataset.state = "shown";
  view.scrollIntoView({ block: "nearest" });
}

function traceLinksJaegerOnly(id) {
  return app.jaeger ? [el("a", { href: app.jaeger + "/trace/" + id, target: "_blank", rel: "noopener", "data-link": "jaeger" }, "open in Jaeger")] : [];
}

// Depth of each span: its parent's + 1 when the parent is in the trace;
// a span whose parent is another process's (a consumer's, an agent's) sits
// at the top, marked with where it came from.
function depths(spans) {
  const byId = new Map(spans.map((s) => [s.spanId, s]));
  const depth = new Map();
  const of = (s, seen = 0) => {
    if (depth.has(s.spanId)) return depth.get(s.spanId);
    const p = s.parentId && byId.get(s.parentId);
    const d = p && seen < 64 ? of(p, seen + 1) + 1 : 0;
    depth.set(s.spanId, d);
    return d;
  };
  spans.forEach((s) => of(s));
  return (s) => depth.get(s.spanId) || 0;
}

function renderTrace(t) {
  const total = Math.max(t.durationUs, 1);
  const depthOf = depths(t.spanList);
  const inTrace = new Set(t.spanList.map((s) => s.spanId));
  const named = new Set();
  $("#trace-meta").replaceChildren(
    new Date(t.startMs).toLocaleString() + " · " + duration(t.durationUs) + " · " + t.spans + " spans" +
      (t.errors ? " · " + t.errors + " failed" : "") + (t.notKept ? " · " + t.notKept + " more not kept" : "") +
      " · Things: " + (t.things.join(", ") || "none") + " ",
    ...traceLinksJaegerOnly(t.traceId));
  const rows = t.spanList.map((s) => {
    // A hop is an instant: a tick wide enough to see, kept on the axis.
    const width = Math.max((s.durationUs / total) * 100, 0.6);
    const left = Math.min((s.offsetUs / total) * 100, 100 - width);
    // Another process's span (the consumer or agent that sent the
    // message), named once: the spans after it with the same parent follow.
    const outside = s.parentId && !inTrace.has(s.parentId) && !named.has(s.parentId);
    if (outside) named.add(s.parentId);
    const from = outside
      ? el("span", { class: "off", text: " ← under span " + shortId(s.parentId) + (s.parentRemote ? " of the process that sent it" : "") }) : "";
    // Positions through the CSSOM: the page's policy refuses style attributes.
    const label = el("div", { class: "span-label" },
      el("button", { type: "button", class: "span-name", "data-span": s.spanId }, s.name), " ",
      el("span", { class: "tag", text: s.kind }), from,
      el("div", { class: "role", text: s.role }));
    label.style.paddingLeft = depthOf(s) + "rem";
    const fill = el("div", { class: "bar" + (s.error ? " failed" : "") });
    fill.style.left = left + "%"; fill.style.width = width + "%";
    const bar = el("div", { class: "bar-track" }, fill,
      el("span", { class: "bar-time", text: "+" + duration(s.offsetUs) + (s.durationUs ? " · " + duration(s.durationUs) : "") }));
    const li = el("li", { "data-span": s.spanId, "data-kind": s.kind, "data-status": s.error ? "error" : "ok" }, label, bar);
    li.querySelector("button").addEventListener("click", () => showSpan(s));
    return li;
  });
  $("#waterfall").replaceChildren(...rows);
  $("#span-detail").replaceChildren(el("p", { class: "off", text: "Pick a span to see its attributes." }));
}

function showSpan(s) {
  const dl = el("dl", {},
    el("dt", { text: "span" }), el("dd", {}, el("code", { text: s.spanId })),
    el("dt", { text: "parent" }), el("dd", {}, el("code", { text: s.parentId || "none (the trace's root)" })),
    el("dt", { text: "status" }), el("dd", { class: s.error ? "error" : "ok", text: s.error ? "error: " + s.error : "ok" }));
  for (const [k, v] of s.attributes) dl.append(el("dt", { text: k }), el("dd", { text: v }));
  $("#span-detail").replaceChildren(el("h4", { text: s.name }), dl);
}

function traceFromHash() {
  const m = /^#trace=([0-9a-fA-F]{32})$/.exec(location.hash);
  if (m) openTrace(m[1].toLowerCase());
}

window.addEventListener("hashchange", traceFromHash);
// A whole trace ID typed opens the trace, whether or not it is listed.
function findTrace() {
  const q = $("#traces-q").value.trim().toLowerCase();
  if (/^[0-9a-f]{32}$/.test(q)) {
    if (location.hash === "#trace=" + q) openTrace(q); else location.hash = "#trace=" + q;
  }
  loadTraces();
}
$("#traces-q").addEventListener("input", () => { clearTimeout(traces.timer); traces.timer = setTimeout(findTrace, 250); });
$("#trace-find").addEventListener("submit", (e) => { e.preventDefault(); findTrace(); });
traceFromHash();
loadTraces();
setInterval(loadTraces, 3000);
