// tamp console: one page, routes in the URL's fragment, data from /tamp/ui/api/.
//
// Everything a client sent (thread names, models, message text) reaches the page as JSON
// and is put in as text (text nodes, textContent): never as markup. Control and bidi
// formatting characters in it are shown as their code points. The one piece of markup taken
// from the server is the timeline's SVG, which the server writes and escapes.
"use strict";

const API = "/tamp/ui/api";
const view = () => document.getElementById("view");
let timer = null;
let generation = 0;

// An element: attributes set one by one, children strings added as text nodes.
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : shown(String(child)));
  }
  return node;
}

// Formatting characters a reader cannot see (controls, bidi overrides and isolates, zero
// width) made visible: a fragment of text nodes, each such character as ⟨U+XXXX⟩.
const HIDDEN = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]/g;
function shown(text) {
  const fragment = document.createDocumentFragment();
  let last = 0;
  for (const m of text.matchAll(HIDDEN)) {
    fragment.append(document.createTextNode(text.slice(last, m.index)));
    const code = m[0].codePointAt(0).toString(16).toUpperCase().padStart(4, "0");
    fragment.append(el("span", { class: "ctl" }, document.createTextNode("⟨U+" + code + "⟩")));
    last = m.index + m[0].length;
  }
  fragment.append(document.createTextNode(text.slice(last)));
  return fragment;
}

function link(hash, ...children) {
  return el("a", { href: hash }, ...children);
}

function fmt(n) {
  if (n === null || n === undefined) return "–";
  return Number(n).toLocaleString("en-US");
}

function pct(part, whole) {
  return whole > 0 ? (100 * part / whole).toFixed(1) + "%" : "–";
}

function usd(v) {
  if (v === null || v === undefined) return "not priced";
  const sign = v < 0 ? "-" : "";
  return sign + "$" + Math.abs(v).toFixed(Math.abs(v) < 1 ? 4 : 2);
}

function ago(secs, now) {
  const d = Math.max(0, now - secs);
  if (d < 60) return d + " s ago";
  if (d < 3600) return Math.floor(d / 60) + " min ago";
  if (d < 86400) return Math.floor(d / 3600) + " h ago";
  return Math.floor(d / 86400) + " d ago";
}

function when(secs) {
  return new Date(secs * 1000).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}

async function get(path) {
  const answer = await fetch(API + path, { cache: "no-store", credentials: "same-origin" });
  const body = await answer.json().catch(() => ({}));
  if (!answer.ok) {
    const message = body.error ? body.error.message : answer.status + " " + answer.statusText;
    throw new Error(message);
  }
  return body;
}

function status(text, live) {
  const node = document.getElementById("status");
  node.replaceChildren();
  if (live) node.append(el("span", { class: "live" }));
  node.append(document.createTextNode(text));
}

function card(label, value, title) {
  return el("div", { class: "card", title }, el("div", { class: "k" }, label), el("div", { class: "v" }, value));
}

function table(headers, rows) {
  const head = el("tr", {}, headers.map((h) => el("th", { class: h.n ? "n" : null }, h.t || h)));
  return el("table", {}, el("thead", {}, head), el("tbody", {}, rows));
}

function td(value, numeric) {
  return el("td", { class: numeric ? "n" : null }, value);
}

// Re-runs `render` every `ms` while its route is shown.
function every(ms, render) {
  const mine = generation;
  const tick = async () => {
    if (mine !== generation) return;
    try {
      await render();
      status("updated " + new Date().toLocaleTimeString(), true);
    } catch (e) {
      status("update failed: " + e.message, false);
    }
    if (mine === generation) timer = setTimeout(tick, ms);
  };
  return tick();
}

// Threads.

function threadsView() {
  const params = new URLSearchParams(location.hash.split("?")[1] || "");
  const filter = el("input", { type: "search", placeholder: "filter by thread or model", value: params.get("q") || "" });
  const compacted = el("input", { type: "checkbox", id: "compacted-only" });
  compacted.checked = params.get("compacted") === "1";
  const body = el("tbody", {});
  const summary = el("p", { class: "muted" });
  const head = el("tr", {}, ["thread", "model", "last seen", { t: "requests", n: 1 }, { t: "tokens sent → forwarded", n: 1 },
    { t: "compactions", n: 1 }, { t: "pages", n: 1 }, { t: "prefix reuse", n: 1 }]
    .map((h) => el("th", { class: h.n ? "n" : null }, h.t || h)));
  view().replaceChildren(
    el("h1", {}, "Threads"),
    el("div", { class: "toolbar" }, filter, el("label", {}, compacted, " with compactions only")),
    el("table", { id: "threads" }, el("thead", {}, head), body),
    summary);
  const seen = new Map();
  let first = true;
  const render = async () => {
    const q = new URLSearchParams();
    if (filter.value.trim()) q.set("q", filter.value.trim());
    if (compacted.checked) q.set("compacted", "true");
    const data = await get("/threads?" + q.toString());
    const rows = data.threads.map((t) => {
      const row = el("tr", { "data-thread": t.thread },
        el("td", {}, link("#/thread/" + encodeURIComponent(t.thread), el("span", { class: "t" }, t.thread))),
        el("td", { class: "t" }, t.model || "–"),
        el("td", { title: when(t.last_seen) }, ago(t.last_seen, data.now)),
        td(fmt(t.requests), true),
        td(fmt(t.tokens_in) + " → " + fmt(t.tokens_out), true),
        td(fmt(t.compactions), true),
        td(fmt(t.pages), true),
        td(pct(t.out_cached, t.tokens_out), true));
      const key = t.requests + "/" + t.last_seen;
      if (!first && seen.get(t.thread) !== key) row.classList.add("fresh");
      seen.set(t.thread, key);
      return row;
    });
    body.replaceChildren(...rows);
    if (!rows.length) body.append(el("tr", {}, el("td", { colspan: 8, class: "muted" }, "No thread recorded yet.")));
    summary.replaceChildren(document.createTextNode(
      data.threads.length + " thread(s), most recently seen first; every replica sharing the store records here (" + data.store + ")."));
    first = false;
  };
  const again = () => { clearTimeout(timer); generation++; every(2000, render); };
  filter.addEventListener("input", again);
  compacted.addEventListener("change", again);
  return every(2000, render);
}

// A thread.

const drawn = new WeakMap();

// The thread's timeline, drawn by the server; replaced only when it changed, so that a mark
// being clicked stays where it is.
async function loadChart(container, thread) {
  const answer = await fetch(API + "/timeline.svg?thread=" + encodeURIComponent(thread), { cache: "no-store" });
  if (!answer.ok) throw new Error("timeline: " + answer.status);
  const text = await answer.text();
  if (drawn.get(container) === text) return;
  drawn.set(container, text);
  const doc = new DOMParser().parseFromString(text, "image/svg+xml");
  if (doc.documentElement.nodeName !== "svg") throw new Error("timeline: not an SVG");
  container.replaceChildren(document.importNode(doc.documentElement, true));
}

// A cost: dollars where priced, else in input-token prices (what the cost would be in input
// tokens at the model's input price).
function cost(dollars, units) {
  return dollars !== null && dollars !== undefined ? usd(dollars) : fmt(Math.round(units)) + " input tokens";
}

function savingsCards(s) {
  const saved = s.usd_saved !== null && s.usd_saved !== undefined ? usd(s.usd_saved)
    : fmt(Math.round(s.cost_uncompacted - s.cost_forwarded)) + " input tokens";
  return el("div", { class: "cards" },
    card("main model, forwarded", cost(s.usd_forwarded, s.cost_forwarded), "with prompt caching, at the cache's prices"),
    card("main model, uncompacted", cost(s.usd_uncompacted, s.cost_uncompacted), "the history as the agent sent it, with prompt caching"),
    card("summarizer", usd(s.summarizer_usd), fmt(s.summarizer_input_tokens) + " tokens in, " + fmt(s.summarizer_output_tokens) +
      " out; priced by [provider.price]"),
    card(s.usd_saved !== null && s.usd_saved !== undefined ? "saved, summarizer included" : "saved (main model)", saved,
      "uncompacted less forwarded" + (s.usd_saved !== null && s.usd_saved !== undefined ? " less the summarizer" : "; [console.prices] gives dollars")));
}

function threadView(thread) {
  const cards = el("div", { class: "cards" });
  const chart = el("div", { class: "chart", id: "timeline" });
  const compactions = el("tbody", {});
  const requests = el("tbody", {});
  const savings = el("div", {});
  view().replaceChildren(
    el("h1", {}, "Thread ", el("span", { class: "t name" }, thread)),
    cards,
    el("h2", {}, "Context per request"),
    chart,
    el("h2", {}, "Compactions"),
    el("table", { id: "compactions" }, el("thead", {}, el("tr", {},
      ["request", "when", "tokens", "pages", ""].map((h) => el("th", {}, h)))), compactions),
    el("h2", {}, "Savings"),
    savings,
    el("h2", {}, "Latest requests"),
    el("table", {}, el("thead", {}, el("tr", {},
      ["when", "route", "status", "ms", "tokens", "what the chain did"].map((h) => el("th", {}, h)))), requests));
  return every(3000, async () => {
    const data = await get("/thread?id=" + encodeURIComponent(thread));
    const t = data.thread;
    cards.replaceChildren(
      card("model", el("span", { class: "t" }, t.model || "–")),
      card("requests", fmt(t.requests), fmt(t.counted) + " counted"),
      card("tokens sent", fmt(t.tokens_in)),
      card("tokens forwarded", fmt(t.tokens_out)),
      card("compactions", fmt(t.compactions)),
      card("pages", fmt(t.pages)),
      card("prefix reuse", pct(t.out_cached, t.tokens_out), "forwarded tokens a prompt cache could read"),
      card("last seen", ago(t.last_seen, data.now), when(t.last_seen)));
    await loadChart(chart, thread);
    const numbered = data.requests.map((r, i) => [i + 1, r]);
    compactions.replaceChildren(...numbered.filter(([, r]) => r.compacted).map(([n, r]) =>
      el("tr", { "data-compaction": r.seq },
        td(String(n)), td(when(r.at_ms / 1000)),
        td(fmt(r.tokens_in) + " → " + fmt(r.tokens_out)), td(fmt(r.pages)),
        td(link("#/compaction/" + r.seq, "what it did")))));
    if (!compactions.children.length) compactions.append(el("tr", {}, el("td", { colspan: 5, class: "muted" }, "None yet.")));
    savings.replaceChildren(savingsCards(data.savings));
    requests.replaceChildren(...numbered.slice(-50).reverse().map(([, r]) => el("tr", {},
      td(when(r.at_ms / 1000)), td(r.route), td(String(r.status)), td(fmt(r.duration_ms), true),
      td(r.tokens_in !== null ? fmt(r.tokens_in) + " → " + fmt(r.tokens_out)
        : r.tokens_at_most !== null ? "at most " + fmt(r.tokens_at_most) + " (unread)" : "–"),
      td(r.error ? r.error : (r.outcome || "–")))));
  });
}

// Messages.

const FOLD_LINES = 12;
const FOLD_CHARS = 1500;

function folded(text, cls) {
  const body = el("div", { class: cls || "text" }, text);
  const lines = text.split("\n").length;
  if (lines <= FOLD_LINES && text.length <= FOLD_CHARS) return body;
  return el("details", {}, el("summary", {}, lines + " lines, " + fmt(text.length) + " characters"), body);
}

function pageLink(page) {
  return link("#/page/" + encodeURIComponent(page), el("span", { class: "t" }, page));
}

function blockView(b) {
  if (b.type === "text") return el("div", { class: "block" }, folded(b.text));
  if (b.type === "tool_use") {
    return el("div", { class: "block tool-use" },
      el("div", { class: "label" }, "tool call ", el("b", { class: "t" }, b.name), " ", el("span", { class: "t" }, b.id),
        b.cleared_page ? el("span", {}, " · input cleared, kept in ", pageLink(b.cleared_page)) : null),
      folded(b.input, "code"));
  }
  if (b.type === "tool_result") {
    return el("div", { class: "block tool-result" + (b.is_error ? " error" : "") },
      el("div", { class: "label" }, (b.is_error ? "tool error" : "tool result"),
        b.name ? el("span", {}, " of ", el("b", { class: "t" }, b.name)) : null, " ", el("span", { class: "t" }, b.id),
        b.cleared_page ? el("span", {}, " · output cleared, kept in ", pageLink(b.cleared_page)) : null),
      folded(b.text, "code"));
  }
  return el("div", { class: "block opaque" },
    el("div", { class: "label" }, "kept as it came: ", el("span", { class: "t" }, b.kind)),
    folded(b.json + (b.cut ? " …" : ""), "code"));
}

function messageView(m) {
  const role = m.summary ? "summary" : m.role;
  const label = m.summary
    ? el("div", { class: "role" }, "summary (" + m.summary.status + ", " + m.summary.strategy + ") of ", pageLink(m.summary.page))
    : el("div", { class: "role" }, m.role);
  return el("div", { class: "message " + role }, label, m.blocks.map(blockView));
}

function conversationView(messages) {
  return el("div", { class: "conversation" }, messages.map(messageView));
}

// A compaction.

async function compactionView(seq) {
  const data = await get("/compactions/" + encodeURIComponent(seq));
  const r = data.request;
  const stages = data.report.stages || [];
  const parts = [
    el("h1", {}, "Compaction of request " + r.seq),
    el("p", {}, "Thread ", r.thread ? link("#/thread/" + encodeURIComponent(r.thread), el("span", { class: "t" }, r.thread)) : "–",
      " · " + when(r.at_ms / 1000) + " · " + fmt(r.tokens_in) + " → " + fmt(r.tokens_out) + " tokens · " + r.pages + " page(s)"),
    el("h2", {}, "Stages"),
    table(["stage", "plugin", "status", "reason", { t: "tokens", n: 1 }, { t: "ms", n: 1 }, { t: "LLM calls", n: 1 }, "pages", "warnings"],
      stages.map((s) => el("tr", { "data-stage": s.stage },
        td(el("span", { class: "t" }, s.stage)), td(s.plugin + " " + s.plugin_version),
        td(el("span", { class: "pill " + s.status }, s.status)), td(s.reason + (s.error ? " (" + s.error.message + ")" : "")),
        td(fmt(s.tokens_before) + " → " + fmt(s.tokens_after), true), td(s.duration_ms.toFixed(1), true),
        td(fmt(s.llm_calls), true), td(s.pages.map((p) => [pageLink(p), " "])), td(s.warnings.join("; "))))),
  ];
  if (data.report.low_watermark_missed) parts.push(el("p", { class: "error" }, "Low watermark missed: " + data.report.low_watermark_missed));
  parts.push(el("h2", {}, "What it replaced, and what stands for it"));
  for (const p of data.pages) {
    const left = el("section", { class: "replaced", "data-page": p.page },
      el("h3", {}, "Replaced: the messages kept in ", pageLink(p.page), p.strategy ? " (" + p.strategy + ")" : ""),
      p.error ? el("p", { class: "error" }, p.error) : conversationView(p.messages || []));
    const right = el("section", { class: "replacement", "data-page": p.page });
    const rep = p.replacement;
    if (!rep) {
      right.append(el("h3", {}, "Stands for it"), el("p", { class: "muted" }, "No message of the answer names this page: a later stage of the same compaction replaced what did."));
    } else if (rep.kind === "summary") {
      right.append(el("h3", {}, "Summary"), el("div", { class: "text narrative" }, rep.narrative));
      if (rep.ledger) {
        const groups = rep.ledger.groups.map((g) => el("div", {},
          el("div", { class: "label" }, g.page ? ["carried from ", pageLink(g.page)] : "this summary's page"),
          g.entries.map((e) => el("div", { class: "entry" }, el("span", { class: "kind" }, e.kind), " m" + e.message + " ", el("span", { class: "t" }, e.text)))));
        right.append(el("div", { class: "ledger" }, el("h3", {}, "Ledger carried verbatim"), groups,
          rep.ledger.moved ? el("p", { class: "muted" }, rep.ledger.moved + " older entries moved out to the pages") : null));
      }
    } else {
      right.append(el("h3", {}, "Cleared in place"), conversationView([rep.message]));
    }
    parts.push(el("div", { class: "diff", "data-page": p.page }, left, right));
  }
  view().replaceChildren(...parts);
}

// Pages.

async function pageView(id) {
  const data = await get("/pages/" + encodeURIComponent(id));
  const seal = data.seal.verified
    ? el("span", { class: "ok" }, "sealed: its id and seal match its messages")
    : el("span", { class: "error" }, "damaged: " + data.seal.detail);
  const format = el("select", {}, ["anthropic", "openai", "responses", "internal"].map((f) => el("option", { value: f }, f)));
  format.value = data.format || "anthropic";
  const copy = el("button", { type: "button" }, "Copy");
  const download = el("a", { class: "download" }, "Download");
  const note = el("span", { class: "muted" });
  const wire = () => API + "/pages/" + encodeURIComponent(id) + "/wire?format=" + encodeURIComponent(format.value);
  const update = () => {
    download.setAttribute("href", wire() + "&download=true");
    download.replaceChildren(document.createTextNode("Download as " + format.value));
  };
  update();
  format.addEventListener("change", update);
  copy.addEventListener("click", async () => {
    try {
      const text = await (await fetch(wire(), { cache: "no-store" })).text();
      await navigator.clipboard.writeText(text);
      note.replaceChildren(document.createTextNode(" copied"));
    } catch (e) {
      note.replaceChildren(document.createTextNode(" cannot copy: " + e.message));
    }
  });
  view().replaceChildren(
    el("h1", {}, "Page ", el("span", { class: "t name" }, data.id)),
    el("p", {}, "Thread ", data.thread_id ? link("#/thread/" + encodeURIComponent(data.thread_id), el("span", { class: "t" }, data.thread_id)) : "–",
      " · " + (data.strategy || "") + " · " + (data.created_at ? when(data.created_at) : "") + " · came in as " + (data.format || "unknown") + " · ", seal),
    el("div", { class: "toolbar" }, format, copy, download, note),
    data.messages ? conversationView(data.messages) : el("p", { class: "error" }, "The page cannot be shown."));
}

async function pagesView() {
  const data = await get("/pages?limit=100");
  view().replaceChildren(el("h1", {}, "Pages"),
    el("p", { class: "muted" }, "The newest pages of the store: what compactions took out, verbatim."),
    table(["page", "thread", "strategy", { t: "messages", n: 1 }, "archived"],
      data.pages.map((p) => el("tr", { "data-page": p.id }, td(pageLink(p.id)), td(el("span", { class: "t" }, p.thread_id || "–")),
        td(p.strategy), td(fmt(p.message_count), true), td(when(p.created_at))))));
}

// Savings.

function savingsView() {
  return every(5000, async () => {
    const data = await get("/savings");
    const rows = data.threads.map((t) => el("tr", { "data-thread": t.thread },
      td(link("#/thread/" + encodeURIComponent(t.thread), el("span", { class: "t" }, t.thread))),
      td(el("span", { class: "t" }, t.model || "–")),
      td(fmt(t.savings.tokens_sent) + " → " + fmt(t.savings.tokens_forwarded), true),
      td(cost(t.savings.usd_uncompacted, t.savings.cost_uncompacted), true),
      td(cost(t.savings.usd_forwarded, t.savings.cost_forwarded), true),
      td(usd(t.savings.summarizer_usd), true),
      td(t.savings.usd_saved !== null ? usd(t.savings.usd_saved)
        : fmt(Math.round(t.savings.cost_uncompacted - t.savings.cost_forwarded)) + " input tokens", true)));
    view().replaceChildren(el("h1", {}, "Savings"),
      el("p", { class: "muted" }, "The main model's cost with prompt caching (a request's unchanged prefix of the previous one read at " +
        "the cache's read price, the rest written), of what was forwarded against the history as the agents sent it, beside the summarizer's own calls. " +
        "Dollars where [console.prices] prices the model; input-token prices always."),
      savingsCards(data.total),
      table(["thread", "model", { t: "tokens sent → forwarded", n: 1 }, { t: "uncompacted", n: 1 }, { t: "forwarded", n: 1 }, { t: "summarizer", n: 1 }, { t: "saved", n: 1 }], rows));
  });
}

// The chain.

async function chainView() {
  const c = await get("/chain");
  const reload = c.last_reload_error
    ? el("p", { class: "error" }, "The last reload was refused (" + c.last_reload_error.at + "): " + c.last_reload_error.text)
    : el("p", { class: "ok" }, "No reload refused since this chain was loaded.");
  view().replaceChildren(el("h1", {}, "The chain"),
    el("div", { class: "cards" }, card("file", el("span", { class: "t" }, c.config_path)), card("config hash", c.config_hash),
      card("loaded", c.loaded_at), card("store", el("span", { class: "t" }, c.store)),
      card("reloads", Object.entries(c.reloads || {}).map(([k, v]) => k + " " + v).join(", ") || "–")),
    reload,
    el("h2", {}, "Budget"),
    el("pre", {}, JSON.stringify(c.budget, null, 2)),
    el("h2", {}, "Stages"),
    table(["stage", "plugin", "trigger", "config", "plugin file", "pin"],
      c.stages.map((s) => el("tr", { "data-stage": s.name }, td(el("span", { class: "t" }, s.name)), td(s.plugin + " " + s.version),
        td(s.trigger), td(el("pre", {}, JSON.stringify(s.config, null, 2))),
        td(el("span", { class: "t" }, s.plugin_file + "\n" + s.plugin_identity)),
        td(s.pin ? el("span", { class: "ok" }, "sha256 " + s.pin) : el("span", { class: "muted" }, "not pinned"))))),
    el("h2", {}, "Console"),
    el("pre", {}, JSON.stringify(c.console, null, 2)));
}

// Health.

function healthView() {
  return every(3000, async () => {
    const h = await get("/health");
    const latency = (v) => v ? "p50 ≤ " + secs(v.p50_at_most_s) + ", p95 ≤ " + secs(v.p95_at_most_s) : "–";
    const upstream = Object.entries(h.upstream_latency || {}).map(([route, v]) => el("tr", {},
      td(route), td(fmt(v.count), true), td(fmt((h.upstream_errors || {})[route] || 0), true), td(latency(v))));
    for (const [route, n] of Object.entries(h.upstream_errors || {})) {
      if (!(route in (h.upstream_latency || {}))) upstream.push(el("tr", {}, td(route), td("0", true), td(fmt(n), true), td("–")));
    }
    const counts = (o) => {
      const rows = Object.entries(o || {}).map(([k, v]) => el("tr", {}, td(el("span", { class: "t" }, k)), td(fmt(v), true)));
      return rows.length ? rows : [el("tr", {}, el("td", { colspan: 2, class: "muted" }, "None."))];
    };
    view().replaceChildren(el("h1", {}, "Health"),
      el("p", { class: "muted" }, "This server's counters since it started (the same as /metrics), and the failed requests every replica recorded."),
      el("div", { class: "cards" },
        card("store", h.store_ok ? el("span", { class: "ok" }, "ok") : el("span", { class: "error" }, h.store_error), h.store),
        card("compaction time", latency(h.compaction_latency)),
        card("compactions in flight", fmt(h.in_flight)),
        card("streams open", fmt(h.streams_open)),
        card("records written", fmt(h.recorder.written), "dropped " + h.recorder.dropped)),
      h.recorder.last_error ? el("p", { class: "error" }, "Recording failed: " + h.recorder.last_error) : "",
      el("h2", {}, "Upstreams"),
      table(["route", { t: "answers", n: 1 }, { t: "errors", n: 1 }, "time to the answer's head"], upstream),
      el("h2", {}, "Overloads (answers 429, 503, 529)"), table(["route and status", { t: "answers", n: 1 }], counts(h.overloads)),
      el("h2", {}, "Stage rollbacks"), table(["stage", { t: "rollbacks", n: 1 }], counts(h.rollbacks)),
      el("h2", {}, "Compactions"), table(["outcome", { t: "count", n: 1 }], counts(Object.assign({}, h.compactions, prefixed("proxy: ", h.proxy_bodies)))),
      el("h2", {}, "Reloads"), table(["result", { t: "count", n: 1 }], counts(h.reloads)),
      el("h2", {}, "Recent failed requests"),
      table(["when", "thread", "route", "status", "error"], (h.failed || []).map((r) => el("tr", {},
        td(when(r.at_ms / 1000)), td(el("span", { class: "t" }, r.thread || "–")), td(r.route), td(String(r.status)), td(r.error || "")))));
  });
}

function prefixed(prefix, o) {
  return Object.fromEntries(Object.entries(o || {}).map(([k, v]) => [prefix + k, v]));
}

function secs(s) {
  if (s === null || s === undefined) return "–";
  return s < 1 ? (s * 1000).toFixed(0) + " ms" : s.toFixed(1) + " s";
}

// The router.

async function route() {
  clearTimeout(timer);
  generation++;
  status("", false);
  const hash = location.hash || "#/threads";
  const [path] = hash.slice(1).split("?");
  const parts = path.split("/").filter(Boolean);
  const section = parts[0] || "threads";
  for (const a of document.querySelectorAll("nav a")) {
    a.classList.toggle("active", a.dataset.nav === section || (section === "thread" && a.dataset.nav === "threads"));
  }
  const arg = parts.slice(1).join("/");
  try {
    if (section === "threads") await threadsView();
    else if (section === "thread") await threadView(decodeURIComponent(arg));
    else if (section === "compaction") await compactionView(decodeURIComponent(arg));
    else if (section === "page") await pageView(decodeURIComponent(arg));
    else if (section === "pages") await pagesView();
    else if (section === "savings") await savingsView();
    else if (section === "chain") await chainView();
    else if (section === "health") await healthView();
    else view().replaceChildren(el("p", {}, "No such view: ", el("span", { class: "t" }, hash)));
  } catch (e) {
    view().replaceChildren(el("p", { class: "error" }, e.message));
  }
}

window.addEventListener("hashchange", route);
route();
