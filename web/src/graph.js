// The application's graph: dagre lays it out left to right, HTML cards are the nodes
// (so they carry text, links and test ids), an SVG underneath draws the edges.
// The layout is computed once per structure; every snapshot after that only changes text.
import dagre from "@dagrejs/dagre";
import { count, h, idOf, rate, setText, shortSchema, svg } from "./dom.js";

const STREAMLET = { width: 220, height: 128 };
const TOPIC = { width: 212, height: 56 };
const LABEL = { width: 96, height: 32 };

export class GraphView {
  constructor(container, { onSelect, onDeadLetters }) {
    this.container = container;
    this.onSelect = onSelect;
    this.onDeadLetters = onDeadLetters;
    this.key = null;
    this.selected = null;
    window.addEventListener("resize", () => this.fit());
  }

  update(snap) {
    const key = structureKey(snap);
    if (key !== this.key) {
      this.build(snap);
      this.key = key; // only once built: a failed build is tried again with the next snapshot
    }
    this.refresh(snap);
  }

  select(name) {
    this.selected = name;
    for (const [streamlet, parts] of this.streamlets) {
      parts.card.classList.toggle("selected", streamlet === name);
    }
  }

  build(snap) {
    const g = new dagre.graphlib.Graph({ multigraph: true });
    g.setGraph({ rankdir: "LR", nodesep: 24, ranksep: 96, edgesep: 12, marginx: 12, marginy: 12 });
    g.setDefaultEdgeLabel(() => ({}));
    for (const s of snap.streamlets) g.setNode(`s:${s.name}`, { ...STREAMLET });
    for (const t of snap.topics) g.setNode(`t:${t.name}`, { ...TOPIC });
    snap.edges.forEach((e, i) => {
      const [from, to] = e.direction === "produce" ? [`s:${e.streamlet}`, `t:${e.topic}`] : [`t:${e.topic}`, `s:${e.streamlet}`];
      g.setEdge(from, to, { index: i }, `e${i}`); // labels go on the line, not in the layout
    });
    dagre.layout(g);
    const { width, height } = g.graph();

    this.stage = h("div", { class: "stage", testid: "graph" });
    this.stage.style.width = `${width}px`;
    this.stage.style.height = `${height}px`;
    const lines = svg("svg", { class: "edges", width, height, viewBox: `0 0 ${width} ${height}` });
    lines.append(
      svg("defs", {},
        svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
          svg("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrowhead" }))));
    this.stage.append(lines);

    this.edges = new Map();
    for (const id of g.edges()) {
      const edge = g.edge(id);
      const data = snap.edges[edge.index];
      lines.append(svg("path", { d: curve(edge.points), class: data.control ? "edge control" : "edge", "marker-end": "url(#arrow)" }));
      const label = h("div", { class: "edge-label", testid: `edge-${idOf(data.streamlet)}-${idOf(data.port)}`, title: `${data.streamlet}.${data.port}: ${data.schema}` },
        h("span", { class: "schema" }, shortSchema(data.schema) || data.port),
        h("span", { class: "edge-rate" }));
      const middle = midpoint(edge.points);
      place(label, middle.x, middle.y, LABEL); // schema above the line, rate below
      this.stage.append(label);
      this.edges.set(edge.index, { label, rate: label.lastChild });
    }

    this.streamlets = new Map();
    for (const s of snap.streamlets) {
      const node = g.node(`s:${s.name}`);
      const parts = streamletCard(s, this);
      place(parts.card, node.x, node.y, STREAMLET);
      this.stage.append(parts.card);
      this.streamlets.set(s.name, parts);
    }
    this.topics = new Map();
    for (const t of snap.topics) {
      const node = g.node(`t:${t.name}`);
      const parts = topicCard(t);
      place(parts.card, node.x, node.y, TOPIC);
      this.stage.append(parts.card);
      this.topics.set(t.name, parts);
    }
    this.frame = h("div", { class: "frame" }, this.stage);
    this.container.replaceChildren(this.frame);
    this.size = { width, height };
    this.fit();
    if (this.selected) this.select(this.selected);
  }

  fit() {
    if (!this.frame) return;
    const available = this.container.clientWidth - 4;
    const scale = Math.max(0.45, Math.min(1, available / this.size.width));
    this.stage.style.transform = `scale(${scale})`;
    this.frame.style.width = `${this.size.width * scale}px`;
    this.frame.style.height = `${this.size.height * scale}px`;
  }

  refresh(snap) {
    snap.edges.forEach((e, i) => {
      const parts = this.edges.get(i);
      if (!parts) return;
      setText(parts.rate, e.rate === null ? "" : rate(e.rate));
      parts.label.classList.toggle("flowing", (e.rate || 0) > 0);
    });
    for (const s of snap.streamlets) this.streamlets.get(s.name)?.refresh(s);
    for (const t of snap.topics) this.topics.get(t.name)?.refresh(t);
  }
}

function streamletCard(s, view) {
  const id = idOf(s.name);
  const value = (testid) => h("span", { class: "value", testid });
  const rateIn = value(`rate-in-${id}`);
  const rateOut = value(`rate-out-${id}`);
  const replicas = value(`replicas-${id}`);
  const lag = value(`lag-${id}`);
  const restarts = value(`restarts-${id}`);
  const chips = h("div", { class: "chips" });
  const card = h("div", { class: `node streamlet shape-${s.shape}`, testid: `node-streamlet-${id}`, "data-name": s.name, onclick: () => view.onSelect(s.name), title: s.class },
    h("div", { class: "title" }, h("span", { class: "name" }, s.name), h("span", { class: "badge" }, s.shape)),
    h("div", { class: "class" }, s.class),
    h("div", { class: "grid" },
      h("span", { class: "label" }, "in"), rateIn, h("span", { class: "label" }, "out"), rateOut,
      h("span", { class: "label" }, "ready"), replicas, h("span", { class: "label" }, "lag"), lag,
      h("span", { class: "label" }, "restarts"), restarts),
    chips);
  const refresh = (now) => {
    setText(rateIn, s.shape === "ingress" ? "–" : rate(now.rate_in));
    setText(rateOut, s.shape === "egress" ? "–" : rate(now.rate_out));
    // the unrounded numbers, for scripts and tests that watch them move
    rateIn.dataset.rate = now.rate_in ?? "";
    rateOut.dataset.rate = now.rate_out ?? "";
    card.dataset.recordsIn = now.records_in ?? "";
    setText(replicas, `${now.ready}/${now.desired}`);
    replicas.classList.toggle("warn", now.ready < now.desired);
    setText(lag, now.lag === null ? "–" : count(now.lag));
    setText(restarts, String(now.restarts));
    restarts.classList.toggle("warn", now.restarts > 0);
    chips.replaceChildren(...streamletChips(now, view));
  };
  return { card, refresh };
}

function streamletChips(s, view) {
  const id = idOf(s.name);
  const out = [];
  if (s.roles.includes("model") || s.models.length) {
    const models = s.models.length ? s.models.join(", ") : "no model yet";
    out.push(h("span", { class: "chip model", testid: `models-${id}`, title: "the model each replica serves" }, `⬢ ${models}`));
  }
  if (s.dead_letters.count > 0) {
    out.push(h("a", {
      class: "chip dead", testid: `dead-letters-${id}`, href: `#dead-letters/${encodeURIComponent(s.name)}`,
      title: `dead letters on ${s.dead_letters.topic}; click for their last errors`,
      onclick: (event) => { event.preventDefault(); event.stopPropagation(); view.onDeadLetters(s.name); },
    }, `✉ ${count(s.dead_letters.count)} dead letters`));
  }
  // a burst of dead letters a new writer schema caused says so, with the schema (why: on hover)
  for (const w of s.dead_letters.writer_schemas || []) {
    const which = w.schema_id === null ? "other writer schemas"
      : w.version === null ? `schema id ${w.schema_id}` : `v${w.version} of ${w.subject} (id ${w.schema_id})`;
    out.push(h("span", {
      class: "chip bad", testid: `writer-schema-${id}`, title: `${s.name}.${w.port}: ${w.text}`,
      "data-subject": w.subject, "data-version": w.version ?? "", "data-schema-id": w.schema_id ?? "",
    }, `✉ ${count(w.count)} from ${which}`));
  }
  if (s.roles.includes("drift")) {
    const drifted = s.drift.some((r) => r.drifted);
    const text = s.drift.length ? (drifted ? "drift" : "no drift") : "no verdict yet";
    out.push(h("span", { class: `chip ${drifted ? "bad" : s.drift.length ? "good" : ""}`, testid: `drift-${id}` }, `◎ ${text}`));
  }
  if (s.autoscale) {
    const a = s.autoscale;
    out.push(h("span", { class: "chip scale", testid: `autoscale-${id}`, title: `autoscale ${a.min}–${a.max}, target lag ${a.target_lag}: ${a.reason}` },
      `⇅ ${a.replicas} (${a.min}–${a.max}): ${a.reason}`));
  }
  return out;
}

function topicCard(t) {
  const id = idOf(t.name);
  const rateEl = h("span", { class: "value", testid: `topic-rate-${id}` });
  const details = [`${t.partitions} partition${t.partitions === 1 ? "" : "s"}`, t.format];
  if (t.compacted) details.push("compacted");
  if (!t.managed) details.push("external");
  const card = h("div", { class: "node topic", testid: `node-topic-${id}`, "data-name": t.name, title: t.schemas.join(", ") },
    h("div", { class: "name" }, t.name),
    h("div", { class: "details" }, h("span", {}, details.join(" · ")), rateEl));
  const refresh = (now) => {
    setText(rateEl, now.rate_in === null ? "" : rate(now.rate_in));
    rateEl.dataset.rate = now.rate_in ?? "";
  };
  return { card, refresh };
}

function place(el, x, y, size) {
  el.style.left = `${x - size.width / 2}px`;
  el.style.top = `${y - size.height / 2}px`;
  el.style.width = `${size.width}px`;
  el.style.height = `${size.height}px`;
}

function midpoint(points) {
  // halfway along the line, so the label sits on the edge wherever dagre bent it
  const lengths = points.slice(1).map((p, i) => Math.hypot(p.x - points[i].x, p.y - points[i].y));
  let left = lengths.reduce((a, b) => a + b, 0) / 2;
  for (let i = 0; i < lengths.length; i++) {
    if (left <= lengths[i] && lengths[i] > 0) {
      const t = left / lengths[i];
      return { x: points[i].x + t * (points[i + 1].x - points[i].x), y: points[i].y + t * (points[i + 1].y - points[i].y) };
    }
    left -= lengths[i];
  }
  return points[0];
}

function curve(points) {
  // a smooth line through dagre's points: straight ends, quadratic bends in between
  if (points.length < 3) return `M ${points.map((p) => `${p.x} ${p.y}`).join(" L ")}`;
  let d = `M ${points[0].x} ${points[0].y}`;
  for (let i = 1; i < points.length - 1; i++) {
    const mid = { x: (points[i].x + points[i + 1].x) / 2, y: (points[i].y + points[i + 1].y) / 2 };
    d += ` Q ${points[i].x} ${points[i].y} ${mid.x} ${mid.y}`;
  }
  const last = points[points.length - 1];
  return `${d} L ${last.x} ${last.y}`;
}

function structureKey(snap) {
  return JSON.stringify([
    snap.streamlets.map((s) => [s.name, s.shape, s.class]),
    snap.topics.map((t) => [t.name, t.partitions, t.format, t.compacted]),
    snap.edges.map((e) => [e.streamlet, e.port, e.topic, e.direction, e.schema]),
  ]);
}
