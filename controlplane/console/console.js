// The edgeplane console: reads the hub's API with the user's bearer token and renders tables.
//
// Security rules this file keeps (the page's CSP forbids inline script, so they live here):
// - the token lives in sessionStorage only (gone with the tab; never a cookie, so no CSRF, and
//   never in a URL, so no history or Referer leak), and is sent only to this origin's API;
// - everything from the API becomes text nodes (textContent / append of strings): no innerHTML,
//   so a node label or workload name cannot inject markup.
"use strict";

const TOKEN_KEY = "edgeplane.console.token";
const REFRESH_MS = 5000;
const MAX_BACKOFF_MS = 60000;
const WORKLOADS_SHOWN = 50;
const EVENTS_SHOWN = 50;
const LOG_LINES_SHOWN = 100;

const $ = (id) => document.getElementById(id);

// ---- DOM helpers: every string ends up as a text node ---------------------------------------

// Children may be nodes, strings, numbers, arrays of those, or null/undefined (left out).
function nodes(children) {
  return children
    .flat(Infinity)
    .filter((child) => child !== null && child !== undefined)
    .map((child) => (child instanceof Node ? child : String(child)));
}

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "class") node.className = value;
    else if (key === "data") Object.assign(node.dataset, value);
    else node.setAttribute(key, String(value));
  }
  node.append(...nodes(children));
  return node;
}

function fill(node, ...children) {
  node.replaceChildren(...nodes(children));
}

function badge(text) {
  return el("span", { class: "badge", data: { value: String(text ?? "") } }, text ?? "?");
}

// Fill a table: columns are [title, row => cell content]; rows get data-key for tests and clicks.
function fillTable(table, columns, rows, keyOf, empty) {
  const head = el("tr", {}, columns.map(([title]) => el("th", { scope: "col" }, title)));
  table.tHead.replaceChildren(head);
  const body = rows.map((row) =>
    el("tr", { data: { key: keyOf(row) } }, columns.map(([, cell]) => el("td", {}, cell(row)))),
  );
  if (body.length === 0) {
    body.push(el("tr", { class: "empty" }, el("td", { colspan: columns.length }, empty)));
  }
  table.tBodies[0].replaceChildren(...body);
}

// ---- formatting -------------------------------------------------------------------------------

function bytes(n) {
  if (typeof n !== "number") return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i += 1;
  }
  return `${n >= 10 || i === 0 ? n.toFixed(0) : n.toFixed(1)} ${units[i]}`;
}

function num(n, digits = 2) {
  return typeof n === "number" && Number.isFinite(n) ? String(Number(n.toFixed(digits))) : "–";
}

// The node's own measurement (telemetry: the machine's CPU busy share), not the requests.
function percentUsed(value) {
  return typeof value === "number" && Number.isFinite(value) ? `${num(value, 0)} %` : "–";
}

function ago(iso) {
  if (!iso) return "–";
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return `${s.toFixed(0)} s ago`;
  if (s < 3600) return `${(s / 60).toFixed(0)} min ago`;
  return `${(s / 3600).toFixed(1)} h ago`;
}

function percent(fraction) {
  return typeof fraction === "number" ? `${num(fraction * 100, 1)} %` : "–";
}

function p50p99(q) {
  return q && typeof q.p50 === "number" ? `${num(q.p50, 1)} / ${num(q.p99, 1)} ms` : "–";
}

function clock(iso) {
  return iso ? new Date(iso).toLocaleTimeString() : "–";
}

function shortId(id) {
  return el("code", { title: id }, String(id ?? "").slice(0, 8));
}

// ---- the API ------------------------------------------------------------------------------------

class Rejected extends Error {}

class NotFound extends Error {}

class RateLimited extends Error {
  constructor(message, retryAfterS) {
    super(message);
    this.retryAfterS = retryAfterS;
  }
}

async function api(path) {
  // Relative: the API is wherever this page was served from (a path prefix behind a proxy too).
  const response = await fetch(path, {
    headers: { Authorization: `Bearer ${sessionStorage.getItem(TOKEN_KEY)}`, Accept: "application/json" },
    cache: "no-store",
    credentials: "omit",
  });
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  const message = body?.error?.message ?? `HTTP ${response.status}`;
  if (response.status === 401 || response.status === 403) throw new Rejected(message);
  if (response.status === 404) throw new NotFound(message);
  if (response.status === 429) {
    throw new RateLimited(message, Number(response.headers.get("Retry-After")) || 5);
  }
  if (!response.ok) throw new Error(`${path}: ${message}`);
  return body;
}

// A text answer (logs): the body as text when 2xx; errors as api() throws them (their body is JSON).
async function apiText(path) {
  const response = await fetch(path, {
    headers: { Authorization: `Bearer ${sessionStorage.getItem(TOKEN_KEY)}`, Accept: "text/plain" },
    cache: "no-store",
    credentials: "omit",
  });
  if (response.ok) return response.text();
  let message = `HTTP ${response.status}`;
  try {
    message = (await response.json())?.error?.message ?? message;
  } catch {
    // not JSON: keep the status
  }
  if (response.status === 401 || response.status === 403) throw new Rejected(message);
  throw new Error(message);
}

// ---- the sections -----------------------------------------------------------------------------

function renderClusters(page) {
  fillTable(
    $("clusters"),
    [
      ["Cluster", (c) => c.name],
      ["Region", (c) => c.region || "–"],
      ["Status", (c) => badge(c.status)],
      ["Ready nodes", (c) => `${c.ready_nodes ?? 0} / ${c.nodes ?? 0}`],
    ],
    page.items,
    (c) => c.name,
    "No clusters.",
  );
}

function battery(power) {
  const percent = power?.battery_percent;
  if (typeof percent !== "number") return "–";
  return el("span", { class: "battery" }, el("meter", { min: 0, max: 100, low: 25, optimum: 100, value: percent }), ` ${num(percent, 0)} %`);
}

function gpuSummary(node) {
  const gpus = node.resources?.gpus ?? [];
  if (gpus.length === 0) return "–";
  return el(
    "ul",
    { class: "gpus" },
    gpus.map((g) => {
      const mig = g.mig_enabled ? ` · MIG ${(g.mig_devices ?? []).map((d) => d.profile ?? d.index).join(", ") || "on"}` : "";
      return el("li", {}, `${g.name ?? "GPU"} #${g.index ?? "?"} ${bytes(g.memory_total_bytes)}${mig}`);
    }),
  );
}

function renderNodes(page) {
  fillTable(
    $("nodes"),
    [
      ["Node", (n) => n.name],
      ["Cluster", (n) => n.cluster],
      ["Status", (n) => badge(n.status)],
      ["Type", (n) => n.node_type ?? "–"],
      ["Power", (n) => badge(n.power?.source ?? "unknown")],
      ["Battery", (n) => battery(n.power)],
      ["w3", (n) => num(n.weights?.w3)],
      ["Policy", (n) => (n.policy_version == null ? "shipped" : `v${n.policy_version}`)],
      // What placements requested (the scheduler's ledger), then what the node measured: a
      // workload may use more or less than it asked for.
      ["CPU requested / cap", (n) => `${num(n.allocated?.cpu)} / ${num(n.resources?.cpu)}`],
      ["CPU in use", (n) => percentUsed(n.telemetry?.cpu_percent)],
      ["Memory requested / cap", (n) => `${bytes(n.allocated?.memory)} / ${bytes(n.resources?.memory)}`],
      ["Memory in use", (n) => bytes(n.telemetry?.memory_used_bytes)],
      ["GPU / MIG", gpuSummary],
      ["Heartbeat", (n) => ago(n.last_heartbeat_at)],
    ],
    page.items,
    (n) => n.name,
    "No nodes have registered.",
  );
}

let selectedWorkload = null;
let selectedFunction = null;

function renderWorkloads(items) {
  // The API lists newest first, as `controlplane get workloads` shows them.
  fillTable(
    $("workloads"),
    [
      ["Workload", (w) => w.name],
      ["ID", (w) => shortId(w.id)],
      ["Status", (w) => badge(w.status)],
      ["Nodes", (w) => (w.nodes ?? []).join(", ") || "–"],
      ["Replicas", (w) => w.replicas ?? "–"],
      ["Restarts", (w) => w.restarts ?? 0],
      ["Created", (w) => clock(w.created_at)],
      ["Message", (w) => w.message || ""],
    ],
    items,
    (w) => w.id,
    "No workloads yet.",
  );
  markSelected($("workloads"), selectedWorkload);
}

function pluginScores(candidate) {
  const plugins = Object.entries(candidate?.plugins ?? {});
  return plugins.map(([name, s]) => `${name} ${num(s.normalized, 1)}×${num(s.weight, 1)}`).join(" · ");
}

function candidateRow(kind, c) {
  return el(
    "tr",
    {},
    el("td", {}, kind),
    el("td", {}, c.node ?? "–"),
    el("td", {}, num(c.score, 1)),
    el("td", {}, num(c.reward?.w3_effective)),
    el("td", { class: "wrap" }, pluginScores(c)),
  );
}

function renderDecision(d) {
  const x = d.explanation ?? {};
  const facts = [
    `replica ${d.replica}, attempt ${d.attempt} → ${d.node} (${d.cluster})`,
    x.profile ? `profile ${x.profile}` : null,
    x.nodes ? `nodes: ${x.nodes.feasible} feasible of ${x.nodes.total}, ${x.nodes.scored} scored` : null,
    x.bids?.decided_by ? `decided by ${x.bids.decided_by}${x.bids.winner ? ` (winner ${x.bids.winner})` : ""}` : null,
  ].filter(Boolean);
  const masked = Object.entries(x.actions?.masked_by ?? {}).map(([why, n]) => el("li", {}, `${n} × ${why}`));
  const candidates = [
    ...(x.chosen ? [candidateRow("chosen", x.chosen)] : []),
    ...(x.alternatives ?? []).map((c) => candidateRow("alternative", c)),
  ];
  return el(
    "article",
    { class: "decision" },
    el("p", {}, facts.join(" · ")),
    masked.length ? el("div", {}, "Masked: ", el("ul", {}, masked)) : null,
    candidates.length
      ? el(
          "table",
          { class: "candidates" },
          el("thead", {}, el("tr", {}, ["", "Node", "Score", "w3", "Plugins (normalised × weight)"].map((t) => el("th", { scope: "col" }, t)))),
          el("tbody", {}, candidates),
        )
      : el("p", { class: "muted" }, "No explanation recorded for this decision."),
  );
}

// The last lines of each placed replica's output (GET .../logs?tail=N): the node keeps the log, so a
// node that is down (503) or a replica not placed yet (404) is said in the panel, not as an error.
async function replicaLogs(id, decisions) {
  const replicas = [...new Set(decisions.map((d) => d.replica))].sort((a, b) => a - b);
  return Promise.all(
    replicas.map(async (replica) => {
      const path = `v1/workloads/${encodeURIComponent(id)}/logs?replica=${replica}&tail=${LOG_LINES_SHOWN}`;
      let body;
      try {
        const text = await apiText(path);
        body = el("pre", { class: "log", data: { replica: String(replica) } }, text || "(no output yet)");
      } catch (error) {
        if (error instanceof Rejected) throw error;
        body = el("p", { class: "muted", data: { replica: String(replica) } }, `No log: ${error.message}`);
      }
      return el("div", {}, el("h4", {}, `Replica ${replica}: last ${LOG_LINES_SHOWN} lines`), body);
    }),
  );
}

async function showPlacement(id) {
  const panel = $("placement");
  const placement = await api(`v1/workloads/${encodeURIComponent(id)}/placement`);
  const logs = placement.decisions.length ? await replicaLogs(id, placement.decisions) : [];
  fill(
    panel,
    el("h3", {}, "Placement of ", shortId(placement.workload_id), " ", badge(placement.status)),
    placement.message ? el("p", {}, placement.message) : null,
    placement.decisions.length
      ? placement.decisions.map(renderDecision)
      : el("p", { class: "muted" }, "Not placed yet (Pending)."),
    logs.length ? el("section", { class: "logs" }, el("h3", {}, "Logs"), logs) : null,
  );
  panel.hidden = false;
}

function renderFunctions(page) {
  fillTable(
    $("functions"),
    [
      ["Function", (f) => f.name],
      ["Version", (f) => f.version],
      ["Runtime", (f) => f.spec?.runtime ?? "–"],
      ["Instances", (f) => (f.instances ?? []).length],
      ["Invocations", (f) => f.stats?.invocations ?? 0],
      ["Cold starts", (f) => f.stats?.cold_starts ?? 0],
      ["Cold-start rate", (f) => percent(f.stats?.cold_start_rate)],
      ["Latency p50 / p99", (f) => p50p99(f.stats?.latency_ms)],
      ["Errors", (f) => f.stats?.errors ?? 0],
      ["Keep-alive", (f) => (f.policy ? `${f.policy.name} ${num(f.policy.keep_alive_s, 0)} s` : "–")],
    ],
    page.items,
    (f) => f.name,
    "No functions registered.",
  );
  markSelected($("functions"), selectedFunction);
}

async function showFunction(name) {
  const panel = $("function");
  const f = await api(`v1/functions/${encodeURIComponent(name)}`);
  const st = f.stats ?? {};
  const perNode = Object.entries(st.per_node ?? {}).map(([node, c]) => `${node} ${c.invocations} (${c.cold_starts} cold)`);
  const stats = [
    `invocations: ${st.invocations ?? 0}`,
    `cold starts: ${st.cold_starts ?? 0} (${percent(st.cold_start_rate)})`,
    `errors: ${st.errors ?? 0}`,
    `timeouts: ${st.timeouts ?? 0}`,
    `latency p50 / p99: ${p50p99(st.latency_ms)}`,
    `cold start p50 / p99: ${p50p99(st.cold_start_ms)}`,
    `per node: ${perNode.join(", ") || "–"}`,
  ].map((text) => el("li", {}, text));
  const table = el("table");
  table.append(el("thead"), el("tbody"));
  fillTable(
    table,
    [
      ["Node", (i) => i.node],
      ["Instance", (i) => shortId(i.instance_id)],
      ["Version", (i) => i.version],
      ["State", (i) => badge(i.state)],
      ["In flight", (i) => i.in_flight],
      ["Age", (i) => (i.age_s == null ? "–" : `${num(i.age_s, 0)} s`)],
      ["Idle", (i) => (i.idle_s == null ? "–" : `${num(i.idle_s, 0)} s`)],
      ["Keep-alive", (i) => (i.keep_alive_s == null ? "–" : `${num(i.keep_alive_s, 0)} s`)],
      ["Cold start", (i) => `${num(i.cold_start_ms, 0)} ms`],
    ],
    f.instances ?? [],
    (i) => i.instance_id,
    "No instances: the next invocation starts cold.",
  );
  fill(panel, el("h3", {}, `Function ${f.name} v${f.version}`), el("ul", { class: "stats" }, stats), table);
  panel.hidden = false;
}

function markSelected(table, key) {
  for (const row of table.tBodies[0].rows) row.classList.toggle("selected", key !== null && row.dataset.key === key);
}

// What one signed-in session has read so far. A new object on every sign-in and sign-out, so a
// refresh still in flight from before sees that it is stale and renders nothing.
function newSession() {
  return { eventCursor: null, events: [] };
}

let session = newSession();

// The event log is oldest first with an `after` cursor and no "newest" order. Rather than page
// through the whole log on the first load, find the newest id by probing "is there an event after
// n?" (about 2·log2(n) one-item calls), then read only the tail.
async function hasEventAfter(id) {
  return (await api(`v1/events?after=${id}&limit=1`)).items.length > 0;
}

async function newestEventId() {
  if (!(await hasEventAfter(0))) return 0;
  let low = 0; // there is an event after `low`
  let high = 1; // grows until there is none after `high`
  while (await hasEventAfter(high)) {
    low = high;
    high *= 2;
  }
  while (high - low > 1) {
    const mid = Math.floor((low + high) / 2);
    if (await hasEventAfter(mid)) low = mid;
    else high = mid;
  }
  return high;
}

async function fetchEvents(s) {
  if (s.eventCursor === null) s.eventCursor = Math.max(0, (await newestEventId()) - EVENTS_SHOWN);
  for (let pages = 0; pages < 5; pages += 1) {
    const page = await api(`v1/events?after=${s.eventCursor}&limit=1000`);
    s.events = s.events.concat(page.items).slice(-EVENTS_SHOWN);
    s.eventCursor = page.next_after;
    if (page.items.length < 1000) break;
  }
  return s.events;
}

function renderEvents(events) {
  fillTable(
    $("events"),
    [
      ["#", (e) => e.id],
      ["Time", (e) => clock(e.time)],
      ["Kind", (e) => e.kind],
      ["Object", (e) => `${e.object_kind} ${e.object_id}`],
      ["Message", (e) => e.message],
    ],
    [...events].reverse(),
    (e) => String(e.id),
    "No events.",
  );
}

// A 404 (nothing of the kind on this hub, e.g. no profile canary has run) as null.
function orNull(error) {
  if (error instanceof NotFound) return null;
  throw error;
}

async function fetchRollouts() {
  const [profile, canary, policies] = await Promise.all([
    api("v1/scheduling-profiles/current").catch(orNull),
    api("v1/scheduling-profiles/canary").catch(orNull),
    api("v1/policies"),
  ]);
  return { profile, canary, policies: policies?.items ?? [] };
}

function scores(groups) {
  return groups ? `${num(groups.canary)} / ${num(groups.control)}` : "–";
}

function renderRollouts({ profile, canary, policies }) {
  const rows = [];
  if (profile) {
    rows.push({
      key: "profile",
      what: "Scheduling profile",
      name: profile.name,
      state: profile.origin === "promoted" ? "promoted" : "in force",
      share: profile.canary ? `all but the canary's share (${profile.canary})` : "every new workload",
      detail: profile.origin === "promoted" ? "promoted by a canary; kept across restarts" : "the hub's --scheduler",
    });
  }
  if (canary) {
    rows.push({
      key: "profile-canary",
      what: "Profile canary",
      name: `${canary.profile} (over ${canary.previous})`,
      state: canary.state,
      share: percent(canary.fraction),
      detail:
        `scores canary / control: placement delay ${scores(canary.scores)}, ` +
        `outcomes ${scores(canary.outcome_scores)}` +
        (canary.events.length ? `; last: ${canary.events[canary.events.length - 1].reason}` : ""),
    });
  }
  for (const p of policies) {
    rows.push({
      key: `policy-v${p.version}`,
      what: "Local policy",
      name: `v${p.version}`,
      state: p.state,
      share: `${p.running_on.length} node(s) run it`,
      detail: p.description,
    });
  }
  fillTable(
    $("rollouts"),
    [
      ["What", (r) => r.what],
      ["Name", (r) => r.name],
      ["State", (r) => badge(r.state)],
      ["Share", (r) => r.share],
      ["Detail", (r) => r.detail],
    ],
    rows,
    (r) => r.key,
    "Nothing rolled out.",
  );
}

async function fetchWorkloads() {
  // Newest first: the first page holds the newest.
  const page = await api(`v1/workloads?limit=${WORKLOADS_SHOWN}`);
  return page.items;
}

// ---- refresh loop and state -----------------------------------------------------------------------

let timer = null;
let running = false;
let failures = 0;

function setState(state, text) {
  const node = $("state");
  node.dataset.state = state;
  node.textContent = text;
}

function signedIn() {
  return sessionStorage.getItem(TOKEN_KEY) !== null;
}

function schedule(ms) {
  clearTimeout(timer);
  timer = null;
  // A hidden tab asks nothing: the loop resumes on visibilitychange.
  if (signedIn() && !document.hidden) timer = setTimeout(refresh, ms);
}

// A detail panel whose object was deleted closes; any other error goes on to refresh's handler.
function closeIfGone(panelId, clear) {
  return (error) => {
    if (!(error instanceof NotFound)) throw error;
    clear();
    $(panelId).hidden = true;
  };
}

async function refresh() {
  if (running || !signedIn()) return;
  running = true;
  const s = session;
  let next = REFRESH_MS;
  try {
    const [clusters, nodes, workloads, functions, rollouts, events] = await Promise.all([
      api("v1/clusters"),
      api("v1/nodes?limit=1000"),
      fetchWorkloads(),
      api("v1/functions"),
      fetchRollouts(),
      fetchEvents(s),
    ]);
    if (s === session) {
      renderClusters(clusters);
      renderNodes(nodes);
      renderWorkloads(workloads);
      renderFunctions(functions);
      renderRollouts(rollouts);
      renderEvents(events);
      if (selectedWorkload !== null) {
        await showPlacement(selectedWorkload).catch(closeIfGone("placement", () => (selectedWorkload = null)));
      }
      if (selectedFunction !== null) {
        await showFunction(selectedFunction).catch(closeIfGone("function", () => (selectedFunction = null)));
      }
      failures = 0;
      $("main").hidden = false;
      setState("ok", `Updated ${new Date().toLocaleTimeString()} · every ${REFRESH_MS / 1000} s while this tab is visible`);
    }
  } catch (error) {
    if (s === session && error instanceof Rejected) {
      rejected(error);
    } else if (s === session) {
      failures += 1;
      next = error instanceof RateLimited ? error.retryAfterS * 1000 : Math.min(MAX_BACKOFF_MS, REFRESH_MS * 2 ** failures);
      setState("error", `Cannot refresh (${error.message}); retrying in ${Math.round(next / 1000)} s`);
    }
  } finally {
    running = false;
  }
  // A sign-out or sign-in happened meanwhile (s is stale): a new sign-in's own refresh was turned
  // away while this one ran, so go at once; schedule does nothing when signed out.
  schedule(s === session ? next : 0);
}

function rejected(error) {
  signOut("rejected", `Token rejected: ${error.message}`);
}

function signOut(state, text) {
  session = newSession();
  sessionStorage.removeItem(TOKEN_KEY);
  clearTimeout(timer);
  selectedWorkload = selectedFunction = null;
  $("main").hidden = true;
  $("placement").hidden = $("function").hidden = true;
  $("token-form").hidden = false;
  $("forget").hidden = true;
  setState(state, text);
  $("token").focus();
}

function signIn(token) {
  session = newSession();
  failures = 0;
  sessionStorage.setItem(TOKEN_KEY, token);
  $("token").value = "";
  $("token-form").hidden = true;
  $("forget").hidden = false;
  setState("loading", "Loading…");
  refresh();
}

function onDetailError(error) {
  if (error instanceof Rejected) rejected(error);
  else setState("error", error.message);
}

function onRowClick(tableId, select) {
  $(tableId).addEventListener("click", (event) => {
    const row = event.target.closest("tbody tr");
    if (row?.dataset.key) select(row.dataset.key);
  });
}

function init() {
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    // People paste the header's value as often as the token: take either.
    const token = $("token").value.trim().replace(/^bearer\s+/i, "");
    if (token) signIn(token);
  });
  $("forget").addEventListener("click", () => signOut("signed-out", "Token forgotten. Paste a token to start."));
  onRowClick("workloads", (id) => {
    selectedWorkload = id;
    markSelected($("workloads"), id);
    showPlacement(id).catch(onDetailError);
  });
  onRowClick("functions", (name) => {
    selectedFunction = name;
    markSelected($("functions"), name);
    showFunction(name).catch(onDetailError);
  });
  document.addEventListener("visibilitychange", () => {
    if (document.hidden) clearTimeout(timer);
    else refresh();
  });
  if (signedIn()) {
    $("token-form").hidden = true;
    $("forget").hidden = false;
    refresh();
  }
}

init();
