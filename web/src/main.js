// The page: the list of applications at /, one application live at /apps/NAME.
// Snapshots arrive as server-sent events; the page never reloads itself.
import "./style.css";
import { h, setText } from "./dom.js";
import { GraphView } from "./graph.js";
import { DeadLetters, driftPanel, explanationPanel, replicasPanel, rolloutPanel, writerSchemasPanel } from "./panels.js";

const main = document.getElementById("main");
const connection = document.querySelector("[data-testid=connection]");
const match = location.pathname.match(/^\/apps\/([^/]+)\/?$/);

if (match) showApp(decodeURIComponent(match[1]));
else showList();

async function showList() {
  setText(document.querySelector("[data-testid=app-name]"), "applications");
  const list = h("section", { class: "card list", testid: "app-list" }, h("h2", {}, "Applications"));
  main.replaceChildren(list);
  try {
    const response = await fetch("/api/apps");
    const data = await response.json();
    if (!response.ok) throw new Error(data.error);
    setText(connection, `target: ${data.target}`);
    if (!data.apps.length) list.append(h("p", { class: "muted" }, "Nothing is deployed. Deploy one with `streamflow deploy BLUEPRINT`."));
    for (const app of data.apps) {
      list.append(h("a", { class: "app-row", href: `/apps/${encodeURIComponent(app.name)}`, testid: `app-link-${app.name}` },
        h("b", {}, app.name), h("span", { class: `phase ${app.phase.toLowerCase()}` }, app.phase),
        h("span", { class: "muted" }, `${app.streamlets} streamlets · ${app.ready}/${app.desired} replicas ready`)));
    }
  } catch (error) {
    list.append(h("p", { class: "error-text" }, `cannot list the applications: ${error.message}`));
  }
}

function showApp(name) {
  document.title = `${name} · streamflow`;
  setText(document.querySelector("[data-testid=app-name]"), name);
  const graphArea = h("div", { class: "graph-area" });
  const side = h("aside", { class: "side" });
  const problem = h("div", { class: "problem", testid: "problem" });
  main.replaceChildren(h("div", { class: "layout" }, h("div", { class: "left" }, problem, graphArea), side));
  const deadLetters = new DeadLetters(name);
  let selected = null;
  let last = null;
  const graph = new GraphView(graphArea, {
    onSelect: (streamlet) => {
      selected = selected === streamlet ? null : streamlet;
      graph.select(selected);
      if (last) render(last);
    },
    onDeadLetters: (streamlet) => deadLetters.open(streamlet),
  });

  const render = (snap) => {
    last = snap;
    const phase = document.querySelector("[data-testid=phase]");
    if (snap.error) {
      setText(problem, `${snap.error}${snap.hint ? ` (${snap.hint})` : ""}`);
      setText(phase, "unknown");
      return;
    }
    setText(problem, snap.records_problem || (snap.phase !== "Running" && snap.message) || "");
    setText(phase, snap.phase);
    phase.className = `phase ${snap.phase.toLowerCase()}`;
    setText(document.querySelector("[data-testid=where]"), `${snap.target}${snap.kafka ? ` · kafka ${snap.kafka}` : ""}`);
    graph.update(snap);
    const has = (role) => snap.streamlets.some((s) => s.roles.includes(role));
    side.replaceChildren(
      ...(has("rollout") ? [rolloutPanel(snap)] : []),
      ...(has("drift") ? [driftPanel(snap)] : []),
      ...(has("explain") ? [explanationPanel(snap)] : []),
      ...writerSchemasPanel(snap),
      replicasPanel(snap, selected),
      deadLetters.el,
    );
  };

  const events = new EventSource(`/api/apps/${encodeURIComponent(name)}/events`);
  events.addEventListener("snapshot", (event) => {
    setText(connection, "live");
    connection.className = "connection live";
    render(JSON.parse(event.data));
  });
  events.addEventListener("error", async () => {
    setText(connection, "reconnecting…");
    connection.className = "connection down";
    const response = await fetch(`/api/apps/${encodeURIComponent(name)}`).catch(() => null);
    if (response && response.status === 404) {
      events.close();
      const data = await response.json();
      setText(problem, `${data.error}${data.hint ? ` (${data.hint})` : ""}`);
      setText(connection, "not found");
    }
  });
}
