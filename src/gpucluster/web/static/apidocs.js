/* A small offline renderer for /openapi.json (the machine this runs on may have no internet, so no Swagger UI CDN). */
"use strict";
const esc = (v) => String(v === undefined || v === null ? "" : v).replace(/[&<>"']/g,
  (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));

function resolve(doc, schema, depth = 0) {
  if (!schema || depth > 6) return schema;
  if (schema.$ref) return resolve(doc, schema.$ref.split("/").slice(1).reduce((o, k) => o[k], doc), depth + 1);
  if (schema.anyOf) return { anyOf: schema.anyOf.map((s) => resolve(doc, s, depth + 1)), description: schema.description, default: schema.default };
  if (schema.type === "array") return { ...schema, items: resolve(doc, schema.items, depth + 1) };
  if (schema.properties) {
    const props = {};
    for (const [k, v] of Object.entries(schema.properties)) props[k] = resolve(doc, v, depth + 1);
    return { ...schema, properties: props };
  }
  return schema;
}
function typeOf(s) {
  if (!s) return "any";
  if (s.anyOf) return s.anyOf.map(typeOf).join(" | ");
  if (s.enum) return s.enum.map((e) => JSON.stringify(e)).join(" | ");
  if (s.type === "array") return `${typeOf(s.items)}[]`;
  if (s.type === "object" && s.additionalProperties) return `{string: ${typeOf(s.additionalProperties)}}`;
  return s.type || (s.properties ? "object" : "any");
}
function fields(s) {
  if (!s || !s.properties) return `<div class="schema">${esc(typeOf(s))}</div>`;
  const req = new Set(s.required || []);
  const rows = Object.entries(s.properties).map(([k, v]) => {
    const lim = ["minimum", "maximum", "exclusiveMinimum", "minLength", "maxLength", "pattern"].filter((x) => v[x] !== undefined).map((x) => `${x} ${v[x]}`);
    return `<tr><td class="mono">${esc(k)}${req.has(k) ? " *" : ""}</td><td class="mono">${esc(typeOf(v))}</td>
      <td>${esc(v.description || "")}${v.default !== undefined ? ` <span class="muted">(default ${esc(JSON.stringify(v.default))})</span>` : ""}${lim.length ? `<div class="muted small">${esc(lim.join(", "))}</div>` : ""}</td></tr>`;
  }).join("");
  return `<table><thead><tr><th>field</th><th>type</th><th>meaning</th></tr></thead><tbody>${rows}</tbody></table>`;
}

async function main() {
  const doc = await fetch("/openapi.json").then((r) => r.json());
  const byTag = {};
  for (const [path, ops] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(ops)) {
      (byTag[(op.tags || ["other"])[0]] ||= []).push({ path, method, op });
    }
  }
  let html = `<p>${esc(doc.info.title)} · version ${esc(doc.info.version)}</p>`;
  for (const [tag, ops] of Object.entries(byTag)) {
    html += `<div class="tag-title">${esc(tag)}</div>`;
    for (const { path, method, op } of ops) {
      const params = (op.parameters || []).map((p) => `<tr><td class="mono">${esc(p.name)}${p.required ? " *" : ""}</td><td>${esc(p.in)}</td>
        <td class="mono">${esc(typeOf(resolve(doc, p.schema)))}</td><td>${esc(p.description || (p.schema && p.schema.description) || "")}</td></tr>`).join("");
      const body = op.requestBody && op.requestBody.content && op.requestBody.content["application/json"];
      const codes = Object.entries(op.responses || {}).map(([c, r]) => `<code>${esc(c)}</code> ${esc(r.description)}`).join(" · ");
      html += `<details class="op"><summary><span class="method m-${method}">${method.toUpperCase()}</span><span class="path">${esc(path)}</span>
        <span class="sum">${esc(op.summary || "")}</span></summary><div class="body">
        ${op.description ? `<p>${esc(op.description)}</p>` : ""}
        ${params ? `<h4>Parameters</h4><table><thead><tr><th>name</th><th>in</th><th>type</th><th>meaning</th></tr></thead><tbody>${params}</tbody></table>` : ""}
        ${body ? `<h4>Request body</h4>${fields(resolve(doc, body.schema))}` : ""}
        <h4>Responses</h4><div>${codes}</div></div></details>`;
    }
  }
  document.getElementById("docs-body").innerHTML = html;
}
main().catch((e) => { document.getElementById("docs-body").textContent = `Could not load /openapi.json: ${e}`; });
