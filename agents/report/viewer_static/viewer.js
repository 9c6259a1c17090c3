"use strict";
// hopgym's run viewer. Episode content is model and tool output, so it only ever reaches the page as text
// nodes (el() appends strings as text; nothing here assigns innerHTML), and the server's
// Content-Security-Policy runs no inline script besides.

const STATE_KEYS = ["run", "compare", "outcome", "error", "hops", "task", "sample"];
// The server answers only requests that carry the token of the URL it printed (as Jupyter's does).
const TOKEN = new URLSearchParams(location.search).get("token") || "";
const NO_ERROR = "(none)";
let runs = [];
let state = {};
let renders = 0;

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (key === "class") node.className = value;
    else if (key.startsWith("data-")) node.setAttribute(key, value);
    else node[key] = value;
  }
  for (const child of children.flat(Infinity)) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function readHash() {
  const params = new URLSearchParams(location.hash.slice(1));
  state = Object.fromEntries(STATE_KEYS.map((key) => [key, params.get(key) || ""]));
  if (!runs[Number(state.run)]) state.run = "0";
  if (state.compare === state.run || !runs[Number(state.compare)]) state.compare = "";
}

// The page's address for the current state with some keys changed ("" drops a key).
function hashOf(changes) {
  const next = { ...state, ...changes };
  const params = new URLSearchParams();
  for (const key of STATE_KEYS) if (next[key] !== "") params.set(key, next[key]);
  return "#" + params.toString();
}

// A server path with the token added to its query.
function withToken(path) {
  const url = new URL(path, location.origin);
  url.searchParams.set("token", TOKEN);
  return url.pathname + url.search;
}

function go(changes) {
  location.hash = hashOf(changes);
}

function percent(value) {
  return value === null || value === undefined ? "–" : (100 * value).toFixed(1) + "%";
}

function textOf(content) {
  if (content === null || content === undefined) return "";
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((part) => (part && part.text) || JSON.stringify(part)).join("\n");
  return JSON.stringify(content, null, 2);
}

function setOptions(select, options, value) {
  select.replaceChildren(...options.map(([v, label]) => el("option", { value: v }, label)));
  select.value = options.some(([v]) => v === value) ? value : "";
}

function badge(outcome) {
  return el("span", { class: "badge " + outcome }, outcome);
}

function keyOf(outline) {
  return outline.task_id + "#" + outline.sample;
}

function matches(outline) {
  if (state.outcome && outline.outcome !== state.outcome) return false;
  if (state.hops && String(outline.hops) !== state.hops) return false;
  if (state.error === NO_ERROR) return outline.error_types.length === 0;
  return !state.error || outline.error_types.includes(state.error);
}

function renderHeader(run) {
  setOptions(document.getElementById("run"), runs.map((r, i) => [String(i), r.name]), state.run);
  const others = runs.map((r, i) => [String(i), r.name]).filter(([i]) => i !== state.run);
  setOptions(document.getElementById("compare"), [["", "—"], ...others], state.compare);
  const files = run.files.map((name) => el("a", { href: withToken("/runs/" + state.run + "/" + name) }, name));
  const info = el(
    "span",
    {},
    el("span", { class: "title" }, run.title),
    ` · ${percent(run.answer_correctness)} correct · ${run.episodes} episodes · ${run.errors} errored`,
    run.incomplete ? el("span", { class: "incomplete" }, " · incomplete: " + run.incomplete) : null,
    run.error ? el("span", { class: "incomplete" }, " · unreadable: " + run.error) : null,
    run.skipped.length ? el("span", { class: "incomplete" }, " · malformed records skipped: " + run.skipped.join("; ")) : null,
    " · ",
    files.flatMap((link, i) => (i ? [" ", link] : [link])),
  );
  document.getElementById("run-info").replaceChildren(info);
  const errors = [...new Set(run.outlines.flatMap((o) => o.error_types))].sort();
  setOptions(
    document.getElementById("error"),
    [["", "any"], [NO_ERROR, NO_ERROR], ...errors.map((e) => [e, e])],
    state.error,
  );
  const hops = [...new Set(run.outlines.map((o) => o.hops).filter((h) => h !== null))].sort((a, b) => a - b);
  setOptions(document.getElementById("hops"), [["", "any"], ...hops.map((h) => [String(h), String(h)])], state.hops);
  document.getElementById("outcome").value = state.outcome;
}

function renderList(run) {
  const other = state.compare ? runs[Number(state.compare)] : null;
  const otherOutcomes = new Map((other ? other.outlines : []).map((o) => [keyOf(o), o.outcome]));
  const columns = ["task", "sample", "hops", "outcome", "turns", "calls", "error types", "final answer", "gold answer"];
  if (other) columns.push("outcome in " + other.name);
  document.getElementById("episodes-head").replaceChildren(...columns.map((c) => el("th", {}, c)));
  const shown = run.outlines.filter(matches);
  const rows = shown.map((o) =>
    el(
      "tr",
      { class: "episode-row", "data-task": o.task_id, "data-sample": String(o.sample), "data-outcome": o.outcome },
      el("td", {}, el("a", { href: hashOf({ task: o.task_id, sample: String(o.sample) }) }, o.task_id)),
      el("td", {}, o.sample),
      el("td", {}, o.hops ?? "–"),
      el("td", {}, badge(o.outcome)),
      el("td", {}, o.turns ?? "–"),
      el("td", {}, o.calls),
      el("td", {}, o.error_types.join(", ")),
      el("td", { class: "text" }, o.final_answer ?? ""),
      el("td", { class: "text" }, o.gold_answer ?? ""),
      other ? el("td", {}, otherOutcomes.has(keyOf(o)) ? badge(otherOutcomes.get(keyOf(o))) : "–") : null,
    ),
  );
  document.querySelector("#episodes tbody").replaceChildren(...rows);
  document.getElementById("count").textContent = `${shown.length} of ${run.outlines.length} episodes`;
}

function field(label, value, cls) {
  return [el("dt", {}, label), el("dd", { class: cls || "" }, value ?? "–")];
}

function callCard(call, rawArguments) {
  const args = call && call.arguments !== null && call.arguments !== undefined
    ? JSON.stringify(call.arguments, null, 2)
    : rawArguments;
  if (!call) {
    return el("div", { class: "call" }, el("div", { class: "call-head" }, "no call record"), el("pre", { class: "arguments" }, args ?? ""));
  }
  const extraErrors = (call.errors || []).filter((error) => error !== call.status);
  return el(
    "div",
    { class: "call status-" + (call.status === "ok" ? "ok" : "failed"), "data-call-id": String(call.id) },
    el(
      "div",
      { class: "call-head" },
      el("span", { class: "call-name" }, String(call.name)),
      " ",
      el("span", { class: "call-status" }, String(call.status)),
      extraErrors.length ? el("span", { class: "call-errors" }, " " + extraErrors.join(", ")) : null,
      call.latency_ms !== undefined ? el("span", { class: "latency" }, ` ${call.latency_ms} ms`) : null,
      call.truncated ? el("span", { class: "latency" }, " (output truncated)") : null,
    ),
    el("div", { class: "label" }, "arguments"),
    el("pre", { class: "arguments" }, args ?? ""),
    el("div", { class: "label" }, "feedback"),
    el("pre", { class: "feedback" }, textOf(call.feedback)),
  );
}

// The transcript: the prompt, then one block per assistant turn holding its text and each tool call with
// the env's record of it (arguments as checked, status, feedback). Tool messages that only repeat a
// shown call's feedback are folded into its card; call records no message names (e.g. made from code)
// are listed after the turns.
function transcript(record) {
  const calls = new Map((record.calls || []).map((call) => [String(call.id), call]));
  const shown = new Set();
  const blocks = [];
  let turn = 0;
  for (const message of record.messages || []) {
    const role = String(message.role);
    if (role === "assistant") {
      turn += 1;
      const cards = (message.tool_calls || []).map((toolCall) => {
        const id = String(toolCall.id);
        shown.add(id);
        return callCard(calls.get(id), toolCall.function && textOf(toolCall.function.arguments));
      });
      blocks.push(
        el(
          "div",
          { class: "turn", "data-turn": String(turn) },
          el("div", { class: "role" }, `turn ${turn} · assistant`),
          textOf(message.content) ? el("pre", { class: "content" }, textOf(message.content)) : null,
          cards,
        ),
      );
    } else if (role === "tool" && calls.has(String(message.tool_call_id)) &&
               shown.has(String(message.tool_call_id)) &&
               textOf(message.content) === textOf(calls.get(String(message.tool_call_id)).feedback)) {
      continue;
    } else {
      blocks.push(
        el(
          "div",
          { class: "message role-" + role.replace(/[^a-z]/g, "") },
          el("div", { class: "role" }, role + (message.name ? " · " + message.name : "")),
          el("pre", { class: "content" }, textOf(message.content)),
        ),
      );
    }
  }
  const rest = (record.calls || []).filter((call) => !shown.has(String(call.id)));
  if (rest.length) blocks.push(el("h4", {}, "calls not named by a message"), rest.map((call) => callCard(call)));
  return blocks;
}

function episodeView(runIndex, record) {
  const name = runs[runIndex].name;
  if (!record) return el("div", { class: "episode missing" }, el("h2", {}, name), `no episode of ${state.task} (sample ${state.sample || 0}) in this run`);
  return el(
    "div",
    { class: "episode", "data-run": String(runIndex) },
    el("h2", {}, name, " ", badge(record.outcome)),
    el(
      "dl",
      {},
      field("task", record.task_id),
      field("sample", record.sample),
      field("hops", record.hops),
      field("turns", record.turns),
      field("reward", record.reward),
      field("gold answer", textOf(record.gold_answer), "text gold"),
      field("final answer", textOf(record.final_answer), "text final"),
      record.error ? field("error", record.error, "text error") : null,
    ),
    el("h3", {}, "transcript"),
    el("div", { class: "transcript" }, transcript(record)),
  );
}

async function fetchJson(url) {
  const response = await fetch(withToken(url));
  if (response.status === 404) return null;
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response.json();
}

async function renderDetail() {
  const indices = [Number(state.run)];
  if (state.compare) indices.push(Number(state.compare));
  const query = (i) => `/api/episode?${new URLSearchParams({ run: i, task: state.task, sample: state.sample || "0" })}`;
  const records = await Promise.all(indices.map((i) => fetchJson(query(i))));
  const columns = document.getElementById("columns");
  columns.className = indices.length > 1 ? "side-by-side" : "";
  columns.replaceChildren(...indices.map((i, n) => episodeView(i, records[n])));
  document.getElementById("close").href = hashOf({ task: "", sample: "" });
}

async function render() {
  readHash();
  const run = runs[Number(state.run)];
  renderHeader(run);
  renderList(run);
  const detail = Boolean(state.task);
  document.getElementById("detail").hidden = !detail;
  document.getElementById("list").hidden = detail;
  document.getElementById("filters").hidden = detail;
  if (detail) await renderDetail();
  renders += 1;
  document.body.dataset.rendered = String(renders); // a test waits for this to change after a click
}

function fail(error) {
  const failure = document.getElementById("failure");
  failure.hidden = false;
  failure.textContent = String(error);
}

async function start() {
  runs = await fetchJson("/api/runs");
  for (const id of ["run", "compare", "outcome", "error", "hops"]) {
    document.getElementById(id).addEventListener("change", (event) => {
      const changes = { [id]: event.target.value };
      if (id === "run") Object.assign(changes, { compare: "", error: "", hops: "" });
      go(changes);
    });
  }
  window.addEventListener("hashchange", () => render().catch(fail));
  await render();
}

start().catch(fail);
