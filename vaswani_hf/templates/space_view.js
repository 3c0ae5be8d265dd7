// The attention viewer of vaswani_hf.space, run by the page (Gradio's gr.HTML js_on_load): it draws the weights the
// server sent once per translation (space_logic.attention_payload), so that a change of view asks the server nothing.
// Head view: one layer's map (one head, or the mean of its heads), the weight, query and key under the pointer, the
// query's weights over the key tokens; model view: every layer and head at once, any of them opened large by a click.
const state = {data: null, kind: "encoder", layer: 1, head: "all", query: null, mode: "head"};
const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
const box = () => element.querySelector(".vz");

function values(kind) {  // base64 little-endian uint16 -> Float32Array (L*H*Q*K), decoded once per translation
  const k = state.data.kinds[kind];
  if (!k.values) {
    const bin = atob(k.data), bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    k.values = Float32Array.from(new Uint16Array(bytes.buffer), (v) => v / 65535);
  }
  return k.values;
}
function weight(kind, layer, head, q, c) {  // 0-based layer, head (or "all": the mean of the heads), query, key
  const [, H, Q, K] = state.data.kinds[kind].shape, v = values(kind);
  const at = (h) => v[((layer * H + h) * Q + q) * K + c];
  if (head !== "all") return at(head);
  let sum = 0;
  for (let h = 0; h < H; h++) sum += at(h);
  return sum / H;
}
const colour = (w, top) => `rgba(30, 90, 200, ${Math.min(1, w / (top || 1)).toFixed(3)})`;  // darkest: the map's top
const headIndex = () => (state.head === "all" ? "all" : Number(state.head) - 1);

function controls() {
  const k = state.data.kinds[state.kind], [L, H] = k.shape;
  const option = (v, label, chosen) => `<option value="${v}"${String(v) === String(chosen) ? " selected" : ""}>${label}</option>`;
  const kinds = Object.entries(state.data.kinds).map(([n, x]) => option(n, x.title, state.kind)).join("");
  const layers = Array.from({length: L}, (_, i) => option(i + 1, `layer ${i + 1} of ${L}`, state.layer)).join("");
  const heads = option("all", "all heads (mean)", state.head) +
    Array.from({length: H}, (_, i) => option(i + 1, `head ${i + 1}`, state.head)).join("");
  return `<div class="vz-controls"><select id="vz-kind">${kinds}</select><select id="vz-layer">${layers}</select>` +
    `<select id="vz-head">${heads}</select>` +
    `<button id="vz-mode-head" class="${state.mode === "head" ? "on" : ""}">head view</button>` +
    `<button id="vz-mode-model" class="${state.mode === "model" ? "on" : ""}">model view (every layer and head)</button>` +
    `<button id="vz-json">download all weights (JSON)</button><button id="vz-csv">download this kind (CSV)</button></div>`;
}

function headView() {
  const k = state.data.kinds[state.kind], [, , Q, K] = k.shape, layer = state.layer - 1, head = headIndex();
  const size = Math.max(10, Math.min(26, Math.floor(620 / Math.max(Q, K)))), left = 110, top = 90;
  const w = [];
  for (let q = 0; q < Q; q++) for (let c = 0; c < K; c++) w.push(weight(state.kind, layer, head, q, c));
  const most = Math.max(...w);
  let cells = "";
  for (let q = 0; q < Q; q++) for (let c = 0; c < K; c++) {
    cells += `<rect class="vz-cell" data-q="${q}" data-k="${c}" x="${left + c * size}" y="${top + q * size}" ` +
      `width="${size - 1}" height="${size - 1}" fill="${colour(w[q * K + c], most)}"/>`;
  }
  const rows = k.queries.map((t, q) => `<text class="vz-q${q === state.query ? " on" : ""}" data-q="${q}" ` +
    `x="${left - 4}" y="${top + q * size + size * 0.7}" text-anchor="end">${esc(t)}</text>`).join("");
  const cols = k.keys.map((t, c) => `<text class="vz-k" data-k="${c}" transform="translate(${left + c * size + size * 0.7},` +
    `${top - 4}) rotate(-60)">${esc(t)}</text>`).join("");
  const svg = `<svg class="vz-map" width="${left + K * size + 10}" height="${top + Q * size + 10}">${cols}${rows}${cells}</svg>`;
  return `<div class="vz-caption">${esc(k.title)}, layer ${state.layer}, ${head === "all" ? "mean of all heads" : "head " + state.head}` +
    `: rows are queries, columns keys (darkest: ${most.toFixed(3)}); click a query token to follow its weights.</div>${strip()}<div class="vz-scroll">${svg}</div>`;
}

function strip() {  // the query's weights over the key tokens, as bertviz links a token to what it attends to
  const k = state.data.kinds[state.kind];
  if (state.query === null || state.query >= k.queries.length) return "";
  const w = k.keys.map((_, c) => weight(state.kind, state.layer - 1, headIndex(), state.query, c)), most = Math.max(...w);
  const chips = k.keys.map((t, c) => `<span class="vz-chip" title="${w[c].toFixed(3)}" ` +
    `style="background:${colour(w[c], most)}">${esc(t)}</span>`).join("");
  return `<div class="vz-strip" id="vz-strip"><b>${esc(k.queries[state.query])}</b> attends to: ${chips}</div>`;
}

function modelView() {
  const [L, H] = state.data.kinds[state.kind].shape;
  let grid = `<div class="vz-grid" style="grid-template-columns: repeat(${H}, 80px)">`;
  for (let l = 0; l < L; l++) for (let h = 0; h < H; h++) {
    grid += `<figure class="vz-thumb" data-layer="${l + 1}" data-head="${h + 1}"><canvas width="72" height="72"></canvas>` +
      `<figcaption>L${l + 1} H${h + 1}</figcaption></figure>`;
  }
  return `<div class="vz-caption">${esc(state.data.kinds[state.kind].title)}: every layer (rows) and head (columns); ` +
    `click one to open it large.</div>${grid}</div>`;
}

function paintThumbs() {
  const [, , Q, K] = state.data.kinds[state.kind].shape;
  element.querySelectorAll(".vz-thumb").forEach((fig) => {
    const ctx = fig.querySelector("canvas").getContext("2d"), w = 72 / K, h = 72 / Q;
    const layer = Number(fig.dataset.layer) - 1, head = Number(fig.dataset.head) - 1;
    let most = 0;
    for (let q = 0; q < Q; q++) for (let c = 0; c < K; c++) most = Math.max(most, weight(state.kind, layer, head, q, c));
    for (let q = 0; q < Q; q++) for (let c = 0; c < K; c++) {
      ctx.fillStyle = colour(weight(state.kind, layer, head, q, c), most);
      ctx.fillRect(c * w, q * h, Math.ceil(w), Math.ceil(h));
    }
  });
}

function draw() {
  const root = box();
  if (!root) return;
  if (!state.data) { root.innerHTML = '<p class="vz-empty">Translate a sentence to see its attention.</p>'; return; }
  const [L] = state.data.kinds[state.kind].shape;
  state.layer = Math.min(Math.max(1, state.layer), L);
  root.innerHTML = controls() + '<div class="vz-tip" id="vz-tip">Point at a cell: its weight, query and key.</div>' +
    (state.mode === "model" ? modelView() : headView());
  if (state.mode === "model") paintThumbs();
}

function tip(text) { const t = element.querySelector("#vz-tip"); if (t) t.textContent = text; }

function describe(q, c) {
  const k = state.data.kinds[state.kind], head = headIndex(), w = weight(state.kind, state.layer - 1, head, q, c);
  let text = `query "${k.queries[q]}" → key "${k.keys[c]}": ${w.toFixed(3)} (layer ${state.layer}, ` +
    `${head === "all" ? "mean of heads" : "head " + state.head})`;
  if (head === "all") {
    const per = Array.from({length: k.shape[1]}, (_, h) => weight(state.kind, state.layer - 1, h, q, c).toFixed(2));
    text += `; per head ${per.join(" ")}`;
  }
  return text;
}

function download(name, text, type) {
  const a = document.createElement("a");
  a.href = URL.createObjectURL(new Blob([text], {type}));
  a.download = name;
  a.click();
  setTimeout(() => URL.revokeObjectURL(a.href), 1000);
}

function asJson() {  // every kind as numbers: weights[layer][head][query][key]
  const out = {};
  for (const [name, k] of Object.entries(state.data.kinds)) {
    const [L, H, Q, K] = k.shape, v = values(name), nest = [];
    for (let l = 0; l < L; l++) { const heads = []; nest.push(heads);
      for (let h = 0; h < H; h++) { const rows = []; heads.push(rows);
        for (let q = 0; q < Q; q++) rows.push(Array.from(v.subarray(((l * H + h) * Q + q) * K, ((l * H + h) * Q + q + 1) * K), (x) => +x.toFixed(5)));
      } }
    out[name] = {title: k.title, queries: k.queries, keys: k.keys, weights: nest};
  }
  return JSON.stringify(out);
}

function asCsv() {
  const k = state.data.kinds[state.kind], [L, H, Q, K] = k.shape, quote = (s) => `"${String(s).replace(/"/g, '""')}"`;
  const lines = ["kind,layer,head,query_index,query,key_index,key,weight"];
  for (let l = 0; l < L; l++) for (let h = 0; h < H; h++) for (let q = 0; q < Q; q++) for (let c = 0; c < K; c++) {
    lines.push([state.kind, l + 1, h + 1, q, quote(k.queries[q]), c, quote(k.keys[c]), weight(state.kind, l, h, q, c).toFixed(5)].join(","));
  }
  return lines.join("\n") + "\n";
}

element.addEventListener("change", (e) => {
  if (e.target.id === "vz-kind") { state.kind = e.target.value; state.query = null; }
  if (e.target.id === "vz-layer") state.layer = Number(e.target.value);
  if (e.target.id === "vz-head") state.head = e.target.value;
  draw();
});
element.addEventListener("click", (e) => {
  const t = e.target.closest("[id], .vz-thumb, .vz-q");
  if (!t || !state.data) return;
  if (t.classList.contains("vz-thumb")) {
    Object.assign(state, {layer: Number(t.dataset.layer), head: t.dataset.head, mode: "head"}); draw();
  } else if (t.classList.contains("vz-q")) { state.query = Number(t.dataset.q); draw(); }
  else if (t.id === "vz-mode-head" || t.id === "vz-mode-model") { state.mode = t.id.slice(8); draw(); }
  else if (t.id === "vz-json") download("attention.json", asJson(), "application/json");
  else if (t.id === "vz-csv") download(`attention_${state.kind}.csv`, asCsv(), "text/csv");
});
element.addEventListener("mouseover", (e) => {
  if (!state.data) return;
  const cell = e.target.closest(".vz-cell"), thumb = e.target.closest(".vz-thumb");
  if (cell) tip(describe(Number(cell.dataset.q), Number(cell.dataset.k)));
  else if (thumb) tip(`layer ${thumb.dataset.layer}, head ${thumb.dataset.head}: click to open it large`);
});

function load() {
  state.data = props.value ? JSON.parse(props.value) : null;
  const view = state.data && state.data.view;
  if (view) Object.assign(state, {kind: view.kind, layer: view.layer, head: String(view.head), query: view.query, mode: "head"});
  else if (state.data) state.query = null;
  draw();
}
watch("value", load);
load();
