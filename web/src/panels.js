// The side panels: the drift verdict, a rollout and its decisions, an explanation sample,
// every replica with its model, dead letters that new writer schemas caused, and the dead
// letters of one streamlet (read when asked for, with their error headers).
import { ago, count, h, rate, setText } from "./dom.js";

export function driftPanel(snap) {
  const drift = snap.drift;
  const body = [];
  if (!drift) {
    const detectors = snap.streamlets.filter((s) => s.roles.includes("drift"));
    body.push(h("p", { class: "muted", testid: "drift-verdict", "data-verdict": "none" },
      detectors.length ? "No drift report yet: the first window is still filling." : "No drift detector in this application."));
  } else {
    const cls = drift.drifted ? "verdict bad" : "verdict good";
    body.push(h("div", { class: cls, testid: "drift-verdict", "data-verdict": drift.drifted ? "drift" : "no-drift" },
      drift.drifted ? `Drift (${drift.severity.toLowerCase()})` : "No drift",
      h("span", { class: "muted small" }, ` · ${drift.streamlet} · ${ago(drift.time, snap.time)}`)));
    for (const r of drift.reports) {
      const what = r.drifted
        ? [...r.features, ...r.signals].slice(0, 6).join(", ") || r.message || "drifted"
        : "within the reference";
      body.push(h("div", { class: "report", testid: `drift-report-${r.source}` },
        h("span", { class: r.drifted ? "dot bad" : "dot good" }),
        h("b", {}, r.source),
        h("span", { class: "muted" }, ` window ${r.window ?? "?"} (${r.records ?? "?"} records), ${r.model}:${r.model_version}`),
        h("div", { class: "small" }, what)));
    }
  }
  return card("Drift", "drift-panel", body);
}

export function rolloutPanel(snap) {
  const r = snap.rollout;
  if (!r) {
    return card("Rollout", "rollout-panel", [
      h("p", { class: "muted", testid: "rollout-verdict", "data-verdict": "none" },
        "No rollout decided yet: start one with `streamflow model rollout start`."),
    ]);
  }
  const where = r.step ? `step ${r.step} of ${r.steps}` : "off the policy's steps";
  const split = r.mode === "shadow" ? "shadow of every record" : `canary ${r.share}% of the keys`;
  const cls = { PROMOTE: "verdict good", ROLLBACK: "verdict bad" }[r.verdict] || "verdict";
  const pct = (v) => (v === null || v === undefined ? "–" : `${(v * 100).toFixed(1)}%`);
  const body = [
    h("div", { class: cls, testid: "rollout-verdict", "data-verdict": r.verdict.toLowerCase() },
      `${r.model}:${r.candidate_version} ${r.verdict.toLowerCase()}`,
      h("span", { class: "muted small" }, ` · ${ago(r.time, snap.time)}`)),
    h("div", { class: "small", testid: "rollout-split" },
      `stable ${r.model}:${r.stable_version}, candidate ${r.model}:${r.candidate_version}: ${r.ended ? "ended at" : ""} ${where}, ${split}, ${r.windows} windows`),
    h("table", { testid: "rollout-evidence" },
      h("thead", {}, h("tr", {}, ...["version", "records", "labelled", "accuracy", "failed", "p99 ms"].map((t) => h("th", {}, t)))),
      h("tbody", {}, ...r.arms.map((a) => h("tr", {},
        h("td", {}, `${a.role} ${a.version}`),
        h("td", { class: "num" }, count(a.records)),
        h("td", { class: "num" }, count(a.labelled)),
        h("td", { class: "num" }, pct(a.accuracy)),
        h("td", { class: "num" }, pct(a.error_rate)),
        h("td", { class: "num" }, a.latency_p99_ms === null ? "–" : a.latency_p99_ms.toFixed(1)))))),
    r.interval ? h("div", { class: "small" }, `candidate − stable accuracy in [${pct(r.interval[0])}, ${pct(r.interval[1])}] (always valid)`) : null,
    r.agreement === null ? null : h("div", { class: "small muted" }, `agreement on shadowed records ${pct(r.agreement)}`),
    h("div", { class: "small" }, r.reason),
    ...r.history.map((d) => h("div", { class: "report", testid: "rollout-decision" },
      h("span", { class: d.verdict === "ROLLBACK" ? "dot bad" : d.verdict === "HOLD" ? "dot" : "dot good" }),
      h("b", {}, d.verdict.toLowerCase()),
      h("span", { class: "muted" }, ` #${d.sequence} step ${d.step} (${d.mode}${d.mode === "shadow" ? "" : ` ${d.share}%`}) · ${ago(d.time, snap.time)}`),
      h("div", { class: "small" }, d.reason))),
  ];
  return card("Rollout", "rollout-panel", body);
}

export function explanationPanel(snap) {
  const e = snap.explanation;
  if (!e) {
    const explainers = snap.streamlets.some((s) => s.roles.includes("explain"));
    return card("Explanation sample", "explanation", [
      h("p", { class: "muted" }, explainers ? "No explanation yet." : "No explainer in this application."),
    ]);
  }
  const widest = Math.max(...e.attributions.map((a) => Math.abs(a.attribution || 0)), 1e-9);
  const confidence = e.confidence === null ? "" : ` with ${(e.confidence * 100).toFixed(0)}%`;
  return card("Explanation sample", "explanation", [
    h("div", { class: "small" },
      h("b", {}, `class ${e.target}`), confidence, ` · ${e.model}:${e.model_version} · `,
      h("span", { class: "muted" }, `${e.reason.toLowerCase().replace("_", " ")}, ${e.method.toLowerCase().replaceAll("_", " ")}, key ${e.key ?? "–"}, ${ago(e.time, snap.time)}`)),
    h("div", { class: "bars" }, ...e.attributions.map((a) => {
      const bar = h("span", { class: a.attribution >= 0 ? "bar pos" : "bar neg" });
      bar.style.width = `${(Math.abs(a.attribution) / widest) * 100}%`;
      return h("div", { class: "bar-row", title: `value ${a.value}` },
        h("span", { class: "feature" }, a.feature), h("span", { class: "track" }, bar),
        h("span", { class: "num" }, (a.attribution >= 0 ? "+" : "") + a.attribution.toFixed(3)));
    })),
    e.features > e.attributions.length ? h("div", { class: "muted small" }, `top ${e.attributions.length} of ${e.features} features`) : null,
  ]);
}

export function replicasPanel(snap, selected) {
  const rows = [];
  for (const s of snap.streamlets) {
    if (selected && s.name !== selected) continue;
    for (const r of s.replicas) {
      rows.push(h("tr", { class: r.ready ? "" : "not-ready", title: r.reasons.join("; ") },
        h("td", {}, r.name),
        h("td", { testid: `replica-ready-${r.name}` }, r.ready ? "ready" : r.running ? "starting" : "down"),
        h("td", { testid: `replica-model-${r.name}` }, r.model || ""),
        h("td", { class: "num" }, rate(r.rate_in)),
        h("td", { class: "num" }, r.lag === null ? "–" : count(r.lag)),
        h("td", { class: "num" }, String(r.restarts))));
    }
  }
  const title = selected ? `Replicas of ${selected}` : "Replicas";
  return card(title, "replicas", [
    h("table", {},
      h("thead", {}, h("tr", {}, ...["replica", "state", "model", "in", "lag", "restarts"].map((t) => h("th", {}, t)))),
      h("tbody", {}, ...rows)),
  ]);
}

export function writerSchemasPanel(snap) {
  const rows = snap.streamlets.flatMap((s) => (s.dead_letters.writer_schemas || []).map((w) =>
    h("div", { class: "letter", testid: "writer-schema" },
      h("b", {}, `${s.name}.${w.port}`), h("div", { class: "error-text" }, `dead letters: ${w.text}`))));
  return rows.length ? [card("Unreadable writer schemas", "writer-schemas", rows)] : [];
}

export class DeadLetters {
  constructor(app) {
    this.app = app;
    this.streamlet = null;
    this.el = h("div");
  }

  async open(streamlet) {
    this.streamlet = streamlet;
    const url = `/api/apps/${encodeURIComponent(this.app)}/dead-letters/${encodeURIComponent(streamlet)}?n=20`;
    const list = h("div", { class: "muted small" }, "reading…");
    this.el.replaceChildren(card(`Dead letters of ${streamlet}`, "dead-letter-panel", [
      h("div", { class: "small" }, h("a", { href: url, target: "_blank", rel: "noopener" }, "as JSON"), " · ",
        h("a", { href: "#", onclick: (e) => { e.preventDefault(); this.close(); } }, "close")),
      list,
    ]));
    try {
      const response = await fetch(url);
      const data = await response.json();
      if (!response.ok) throw new Error(data.error || response.statusText);
      if (!data.dead_letters.length) return setText(list, `none on ${data.topic}`);
      list.className = "letters";
      list.replaceChildren(...data.dead_letters.map((d) => h("div", { class: "letter", testid: "dead-letter" },
        h("div", {}, h("b", {}, d.error_type || "error"), h("span", { class: "muted" }, ` ${d.topic}[${d.partition}]@${d.offset} · key ${d.key ?? "–"}`)),
        h("div", { class: "error-text" }, d.error))));
    } catch (error) {
      setText(list, `cannot read them: ${error.message}`);
    }
  }

  close() {
    this.streamlet = null;
    this.el.replaceChildren();
  }
}

function card(title, testid, body) {
  return h("section", { class: "card", testid }, h("h2", {}, title), ...body);
}
