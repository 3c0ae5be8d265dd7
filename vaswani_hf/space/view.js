// The attention viewer of vaswani_hf.space, run by the page (Gradio's gr.HTML js_on_load, with `element`, `props`,
// `watch` and `server`). A translation brings each kind's tokens and the blocks of weights its first view needs,
// and that layer of the other kinds (vaswani_hf/space/payload.py: one byte a weight, (c / 255)^2); a view that needs a block the payload lacked asks
// the server for it once (server.attention_blocks), and every other change of view is drawn here, on canvases.
// Head view: one layer's map (one head, or the mean of its heads) whose labels stay in place while it scrolls and
// are thinned so that they never overlap; the weight, query and key under the pointer or the keyboard's cell are
// written in the tip (a live region: a screen reader says it); a followed query's weights over the keys. Model
// view: every layer and head as thumbnails, each opened large by a click or Enter. Downloads: the weights to 16
// bits, written a slice at a time so that the page never freezes.
const LUT = Float32Array.from({length: 256}, (_, c) => (c / 255) ** 2);
const LABEL_PITCH = 13;  // px between labels: 11 px text in 12 px lines, never overlapping
const TOP = 90;  // the column labels' height, in px
const left = () => (box().clientWidth < 520 ? 64 : 110);  // the row labels' width: narrower on a phone
const state = {data: null, kind: "encoder", layer: 1, head: "all", query: null, mode: "head", cell: null, thumb: [0, 0],
  note: null, busy: null};
const blocks = new Map();  // block name -> base64 text, decoded to a Uint8Array on first use
const inflight = new Map();  // block name -> the request that brings it
const sprites = new Map();  // kind -> its thumbnails' picture (sprite)
let map = null, draws = 0;  // the head view on screen: {kind, layer, head, Q, K, size, values, top}
const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
const $ = (css) => element.querySelector(css);
const box = () => element.querySelector(".vz");
const tick = () => new Promise((resolve) => setTimeout(resolve, 0));
const shape = (kind) => state.data.kinds[kind].shape;
const headIndex = () => (state.head === "all" ? "all" : Number(state.head) - 1);
const headName = (head) => (head === "all" ? "mean of all heads" : `head ${head + 1}`);

function bytes(text) {  // base64 -> Uint8Array
  const bin = atob(text), out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}
function block(name) {
  let b = blocks.get(name);
  if (typeof b === "string") { b = bytes(b); blocks.set(name, b); }
  return b;
}
const headBlocks = (kind, layer, head) => (head === "all" ? [...Array(shape(kind)[1]).keys()] : [head])
  .map((h) => `${kind}:${layer}:${h}`);

async function ensure(names) {  // the blocks a view needs: those the translation did not bring are asked for once
  const data = state.data, missing = names.filter((n) => !blocks.has(n) && !inflight.has(n));
  if (missing.length) {
    const request = server.attention_blocks({key: data.key, blocks: missing, bits: 8}).then((answer) => {
      if (state.data !== data) return;
      if (!answer || answer.error) throw new Error(answer ? answer.error : "the server did not answer");
      for (const [n, b] of Object.entries(answer.blocks)) blocks.set(n, b);
    }).finally(() => { if (state.data === data) missing.forEach((n) => inflight.delete(n)); });
    missing.forEach((n) => inflight.set(n, request));
  }
  await Promise.all(new Set(names.map((n) => inflight.get(n)).filter(Boolean)));
  return state.data === data;
}

function prefetch() {  // after the visitor opened a layer, fetched while they read it: this layer and head of the
  // other kinds (a change of kind keeps them, as the translation's blocks do: space/payload.py's view_order), the
  // kind's thumbnails (the model view), and the layers next to it
  if (state.mode !== "head" || !state.data) return;
  const L = shape(state.kind)[0], next = [state.layer - 2, state.layer].filter((l) => l >= 0 && l < L);
  const others = Object.keys(state.data.kinds).filter((k) => k !== state.kind)
    .flatMap((k) => headBlocks(k, Math.min(state.layer, shape(k)[0]) - 1, headIndex()));
  const names = [...others, `${state.kind}:thumbs`, ...next.flatMap((l) => headBlocks(state.kind, l, "all"))]
    .filter((n) => !blocks.has(n));
  if (names.length) ensure(names).catch(() => {});  // a failure shows when that layer is opened
}

function headMap(kind, layer, head) {  // Float32Array Q*K: one head's weights, or the mean of the layer's heads
  const [, H, Q, K] = shape(kind), names = headBlocks(kind, layer, head), values = new Float32Array(Q * K);
  for (const n of names) { const b = block(n); for (let i = 0; i < b.length; i++) values[i] += LUT[b[i]]; }
  if (names.length > 1) for (let i = 0; i < values.length; i++) values[i] /= H;
  let top = 0;
  for (let i = 0; i < values.length; i++) if (values[i] > top) top = values[i];
  return {kind, layer, head, Q, K, values, top: top || 1};
}

function paint(values, rows, cols, top, from = 0) {  // weights -> white-to-blue pixels, darkest at `top`
  const image = new ImageData(cols, rows), px = image.data;
  for (let i = 0; i < rows * cols; i++) {
    const a = Math.min(1, values[from + i] / top), j = 4 * i;
    px[j] = 255 - 225 * a; px[j + 1] = 255 - 165 * a; px[j + 2] = 255 - 55 * a; px[j + 3] = 255;
  }
  return image;
}

function show(canvas, image, width, height) {  // one pixel a cell, drawn at width x height CSS pixels (pixelated)
  Object.assign(canvas, {width: image.width, height: image.height});
  Object.assign(canvas.style, {width: `${width}px`, height: `${height}px`});
  canvas.getContext("2d").putImageData(image, 0, 0);
}

function controls() {  // built once per translation; later views update them in place (focus stays where it is)
  const option = (v, label) => `<option value="${v}">${esc(label)}</option>`;
  const kinds = Object.entries(state.data.kinds).map(([n, k]) => option(n, k.title)).join("");
  return `<div class="vz-controls"><select id="vz-kind" aria-label="attention kind">${kinds}</select>` +
    '<select id="vz-layer" aria-label="layer"></select><select id="vz-head" aria-label="head"></select>' +
    '<button id="vz-mode-head">head view</button><button id="vz-mode-model">model view (every layer and head)</button>' +
    '<button id="vz-json" title="every kind, layer and head, to 16 bits">download all weights (JSON)</button>' +
    '<button id="vz-csv" title="this kind\'s layers and heads, to 16 bits">download this kind (CSV)</button></div>' +
    '<div class="vz-tip" id="vz-tip" role="status" aria-live="polite"></div><div class="vz-view"></div>';
}

function syncControls() {
  const [L, H] = shape(state.kind), model = state.mode === "model";
  const option = (v, label, chosen) => `<option value="${v}"${String(v) === String(chosen) ? " selected" : ""}>${label}</option>`;
  $("#vz-kind").value = state.kind;
  $("#vz-layer").innerHTML = Array.from({length: L}, (_, i) => option(i + 1, `layer ${i + 1} of ${L}`, state.layer)).join("");
  $("#vz-head").innerHTML = option("all", "all heads (mean)", state.head) +
    Array.from({length: H}, (_, i) => option(i + 1, `head ${i + 1}`, state.head)).join("");
  for (const id of ["#vz-layer", "#vz-head"]) {  // the model view shows every layer and head: these choose nothing
    $(id).disabled = model;
    $(id).title = model ? "the model view shows every layer and head; open one to choose" : "";
  }
  $("#vz-mode-head").setAttribute("aria-pressed", String(!model));
  $("#vz-mode-model").setAttribute("aria-pressed", String(model));
}

function labels(tokens, size, axis, width = 0) {  // each `step`-th token's label: as many as fit without overlapping
  const step = Math.max(1, Math.ceil(LABEL_PITCH / size)), off = (size - 12) / 2;
  let out = "";
  for (let i = 0; i < tokens.length; i += step) {
    const where = axis === "row" ? `top:${i * size + off}px;max-width:${width - 6}px` : `left:${i * size + off}px`;
    const on = axis === "row" && i === state.query ? " on" : "";
    const label = esc(tokens[i]);
    out += `<span class="vz-${axis === "row" ? "q" : "k"}${on}" data-i="${i}" style="${where}" title="${label}">` +
      `${label}</span>`;
  }
  return out;
}

function headView() {
  const k = state.data.kinds[state.kind], [, , Q, K] = k.shape, head = headIndex();
  map = headMap(state.kind, state.layer - 1, head);
  const LEFT = left(), room = Math.max(120, box().clientWidth - LEFT - 24);
  const size = Math.max(5, Math.min(26, Math.floor(room / Math.max(K, 1)))), w = K * size, h = Q * size;
  map.size = size;
  const step = Math.ceil(LABEL_PITCH / size), thinned = step > 1 ? ` One label in ${step} tokens fits; point at or ` +
    "focus a cell for its query and key." : "";
  const html = `<div class="vz-caption">${esc(k.title)}, layer ${state.layer}, ${headName(head)}: rows are queries, ` +
    `columns keys (darkest: ${map.top.toFixed(3)}).${thinned}</div>${strip()}` +
    '<div class="vz-scroll"><div class="vz-plot" ' +
    `style="grid-template-columns:${LEFT}px ${w}px;grid-template-rows:${TOP}px ${h}px">` +
    `<div class="vz-corner"></div><div class="vz-cols" style="width:${w}px">${labels(k.keys, size, "col")}</div>` +
    `<div class="vz-rows" style="height:${h}px;width:${LEFT}px">${labels(k.queries, size, "row", LEFT)}</div>` +
    `<div class="vz-cellbox"><canvas class="vz-cells" tabindex="0" role="application" aria-roledescription="attention map" ` +
    `aria-label="${esc(k.title)}, ${Q} queries by ${K} keys. Arrow keys move between cells, Page Up and Page Down by ten rows, ` +
    `Enter follows the query's weights."></canvas><div class="vz-gaps"></div><div class="vz-ring vz-row" hidden></div>` +
    '<div class="vz-ring vz-hover" hidden></div>' +
    `<div class="vz-ring vz-focus" hidden></div></div></div></div>`;
  return html;
}

function paintHead() {
  const {Q, K, size, values, top} = map, grid = $(".vz-gaps");
  show($(".vz-cells"), paint(values, Q, K, top), K * size, Q * size);
  if (size >= 8) grid.style.backgroundSize = `${size}px ${size}px`;  // large cells: white gaps, as a table
  else grid.hidden = true;
  if (state.query !== null && state.query < Q) {
    Object.assign($(".vz-row").style, {top: `${state.query * size - 1}px`, height: `${size + 1}px`, width: `${K * size}px`});
    $(".vz-row").hidden = false;
  }
  if (state.cell) ring(".vz-focus", state.cell[0], state.cell[1], false);
}

function strip() {  // the followed query's weights over the key tokens, as bertviz links a token to what it reads
  const k = state.data.kinds[state.kind];
  if (state.query === null || state.query >= k.queries.length) return "";
  const K = k.keys.length, row = map.values.subarray(state.query * K, (state.query + 1) * K);
  const most = Math.max(...row) || 1;
  const chips = k.keys.map((t, c) => `<span class="vz-chip" title="${esc(t)}: ${row[c].toFixed(3)}" ` +
    `style="background:rgba(30,90,200,${Math.min(1, row[c] / most).toFixed(3)})">${esc(t)}` +
    `<span class="vz-sr"> ${row[c].toFixed(3)}</span></span>`).join("");
  return `<div class="vz-strip" id="vz-strip"><b>${esc(k.queries[state.query])}</b> attends to: ${chips}</div>`;
}

function describe(q, c) {  // the tip for a cell: query, key, weight; per head for the mean
  const k = state.data.kinds[state.kind], {K, head} = map;
  let text = `query ${q + 1} "${k.queries[q]}" → key ${c + 1} "${k.keys[c]}": ${map.values[q * K + c].toFixed(3)} ` +
    `(layer ${state.layer}, ${head === "all" ? "mean of heads" : "head " + (head + 1)})`;
  if (head === "all") {
    const per = headBlocks(state.kind, state.layer - 1, "all").map((n) => LUT[block(n)[q * K + c]].toFixed(2));
    text += `; per head ${per.join(" ")}`;
  }
  return text;
}

function ring(css, q, c, show = true) {  // outline one cell (the pointer's or the keyboard's)
  const r = $(css);
  if (!r || !map) return;
  Object.assign(r.style, {left: `${c * map.size - 1}px`, top: `${q * map.size - 1}px`,
    width: `${map.size + 1}px`, height: `${map.size + 1}px`});
  r.hidden = false;
  if (!show) return;
  r.scrollIntoView({block: "nearest", inline: "nearest"});
}

function thumbSize() {  // every head of a layer side by side, from 24 to 72 px (a 390 px phone: 8 heads of ~38 px)
  const H = shape(state.kind)[1];
  return Math.max(24, Math.min(72, Math.floor((box().clientWidth - 34 - 4 * H) / H)));
}

function modelView() {
  const [L, H] = shape(state.kind), size = thumbSize();
  let grid = '<div class="vz-grid" role="group" aria-label="every layer and head" ' +
    `style="grid-template-columns:26px repeat(${H},${size}px)"><canvas class="vz-sprite" width="0" height="0"></canvas>` +
    "<span></span>" + Array.from({length: H}, (_, h) => `<span class="vz-hh">H${h + 1}</span>`).join("");
  const [fl, fh] = state.thumb;
  for (let l = 0; l < L; l++) {
    grid += `<span class="vz-lh">L${l + 1}</span>`;
    for (let h = 0; h < H; h++) {
      grid += `<button class="vz-thumb" tabindex="${l === fl && h === fh ? 0 : -1}" data-layer="${l + 1}" ` +
        `data-head="${h + 1}" aria-label="layer ${l + 1}, head ${h + 1}: Enter opens it large" style="width:${size}px;` +
        `height:${size}px"></button>`;
    }
  }
  return `<div class="vz-caption">${esc(state.data.kinds[state.kind].title)}: every layer (rows) and head (columns), ` +
    `each map shrunk to at most ${state.data.kinds[state.kind].thumb.join(" x ")} cells (the largest weight of each ` +
    "patch); click one, or focus it (arrow keys) and press Enter, to open it large.</div>" +
    `<div class="vz-gridbox">${grid}</div></div>`;
}

function sprite(kind) {  // every head's thumbnail of a kind in one picture, one pixel a cell, made once per translation
  if (sprites.has(kind)) return sprites.get(kind);
  const [L, H] = shape(kind), [tq, tk] = state.data.kinds[kind].thumb, b = block(`${kind}:thumbs`);
  const picture = document.createElement("canvas"), image = new ImageData(H * tk, L * tq), px = image.data;
  for (let l = 0; l < L; l++) for (let h = 0; h < H; h++) {
    const from = (l * H + h) * tq * tk;
    let top = 0;
    for (let i = from; i < from + tq * tk; i++) top = Math.max(top, LUT[b[i]]);
    for (let q = 0; q < tq; q++) for (let c = 0; c < tk; c++) {
      const a = Math.min(1, LUT[b[from + q * tk + c]] / (top || 1)), j = 4 * ((l * tq + q) * H * tk + h * tk + c);
      px[j] = 255 - 225 * a; px[j + 1] = 255 - 165 * a; px[j + 2] = 255 - 55 * a; px[j + 3] = 255;
    }
  }
  Object.assign(picture, {width: image.width, height: image.height});
  picture.getContext("2d").putImageData(image, 0, 0);
  sprites.set(kind, picture);
  return picture;
}

function paintThumbs() {  // each head's part of the kind's picture, drawn under its head's button
  const [tq, tk] = state.data.kinds[state.kind].thumb, picture = sprite(state.kind);
  const grid = $(".vz-grid"), canvas = $(".vz-sprite"), ratio = window.devicePixelRatio || 1, size = thumbSize();
  const width = grid.offsetWidth, height = grid.offsetHeight;  // the grid's own box (the canvas is out of its flow)
  Object.assign(canvas, {width: Math.ceil(width * ratio), height: Math.ceil(height * ratio)});
  Object.assign(canvas.style, {width: `${width}px`, height: `${height}px`});
  const ctx = canvas.getContext("2d");
  ctx.imageSmoothingEnabled = false;
  element.querySelectorAll(".vz-thumb").forEach((t) => {
    const l = Number(t.dataset.layer) - 1, h = Number(t.dataset.head) - 1;
    const x = (t.offsetLeft + 1) * ratio, y = (t.offsetTop + 1) * ratio;  // inside the button's 1 px border
    ctx.drawImage(picture, h * tk, l * tq, tk, tq, x, y, size * ratio, size * ratio);
  });
}

function needs() {
  return state.mode === "model" ? [`${state.kind}:thumbs`] : headBlocks(state.kind, state.layer - 1, headIndex());
}

async function draw(chosen = false) {  // chosen: the visitor changed the view (not a new translation)
  const root = box();
  if (!root) return;
  if (!state.data) { root.innerHTML = '<p class="vz-empty">Translate a sentence to see its attention.</p>'; return; }
  if (!$(".vz-controls")) root.innerHTML = controls();
  state.layer = Math.min(Math.max(1, state.layer), shape(state.kind)[0]);
  syncControls();
  const view = $(".vz-view"), wanted = JSON.stringify([state.kind, state.layer, state.head, state.mode]);
  state.busy = wanted;
  if (needs().some((n) => !blocks.has(n))) {
    view.innerHTML = `<p class="vz-empty">Loading ${state.mode === "model" ? "the thumbnails" : "layer " + state.layer}…</p>`;
    try { if (!(await ensure(needs()))) return; } catch (error) { tip(error.message); return; }
    if (state.busy !== wanted) return;  // the visitor chose another view meanwhile
  }
  const focused = document.activeElement, had = element.contains(focused) && view.contains(focused);
  const note = state.note && state.mode === "head" ? `<div class="vz-note" role="note">${esc(state.note)}</div>` : "";
  view.innerHTML = note + (state.mode === "model" ? modelView() : headView());
  if (state.mode === "model") paintThumbs(); else paintHead();
  tip(state.mode === "model" ? "Point at a head, or focus one (Tab, then arrow keys): Enter opens it large."
    : "Point at a cell, or focus the map (Tab) and use the arrow keys: its weight, query and key.");
  if (had) (state.mode === "model" ? $('.vz-thumb[tabindex="0"]') : $(".vz-cells")).focus({preventScroll: true});
  width = root.clientWidth;
  root.dataset.drawn = String(++draws);  // for the browser test: this view is on screen
  if (chosen) setTimeout(prefetch, 0);
}

function tip(text) { const t = $("#vz-tip"); if (t) t.textContent = text; }

// --- downloads: every weight to 16 bits, fetched a layer at a time and written a slice at a time ----------------------

async function weights16(kind, progress) {  // Uint16Array per block name of one kind, from the server
  const [L, H] = shape(kind), out = {}, data = state.data;
  for (let l = 0; l < L; l++) {
    const names = headBlocks(kind, l, "all");
    const answer = await server.attention_blocks({key: data.key, blocks: names, bits: 16});
    if (!answer || answer.error) throw new Error(answer ? answer.error : "the server did not answer");
    for (const n of names) out[n] = new Uint16Array(bytes(answer.blocks[n]).buffer);
    progress(`fetching ${kind} layer ${l + 1} of ${L}`);
  }
  return out;
}

async function sliced(rows, emit, parts, progress) {  // parts.push(Blob of emit(i)) for i < rows, ~12 ms a slice
  let since = performance.now(), pending = [];
  for (let i = 0; i < rows; i++) {
    pending.push(emit(i));
    if (performance.now() - since > 12 || i === rows - 1) {
      parts.push(new Blob(pending));  // encoded now, a slice at a time, not all at once at the end
      pending = [];
      progress(i / rows);
      await tick();
      since = performance.now();
    }
  }
}

async function asJson(progress) {  // {code, kinds: {kind: {title, queries, keys, shape, weights[l][h][q][k]}}}
  const parts = [`{"code":"little-endian uint16 c: c / 65535, written to 5 decimals","kinds":{`];
  for (const [i, [kind, k]] of Object.entries(state.data.kinds).entries()) {
    const [L, H, Q, K] = k.shape, w = await weights16(kind, progress);
    parts.push(`${i ? "," : ""}${JSON.stringify(kind)}:{"title":${JSON.stringify(k.title)},"queries":` +
      `${JSON.stringify(k.queries)},"keys":${JSON.stringify(k.keys)},"shape":${JSON.stringify(k.shape)},"weights":[`);
    await sliced(L * H * Q, (r) => {
      const l = Math.floor(r / (H * Q)), h = Math.floor(r / Q) % H, q = r % Q, v = w[`${kind}:${l}:${h}`];
      const row = Array.from(v.subarray(q * K, (q + 1) * K), (x) => (x / 65535).toFixed(5).replace(/0+$/, "").replace(/\.$/, ""));
      return `${q === 0 ? (h === 0 ? (l ? "]],[[" : "[[") : "],[") : ","}[${row.join(",")}]`;
    }, parts, (f) => progress(`writing ${kind}: ${Math.round(100 * f)}%`));
    parts.push("]]]}");
  }
  parts.push("}}");
  return parts;
}

async function asCsv(progress) {
  const k = state.data.kinds[state.kind], [L, H, Q, K] = k.shape, quote = (s) => `"${String(s).replace(/"/g, '""')}"`;
  const w = await weights16(state.kind, progress), parts = ["kind,layer,head,query_index,query,key_index,key,weight\n"];
  const keys = k.keys.map(quote);
  await sliced(L * H * Q, (r) => {
    const l = Math.floor(r / (H * Q)), h = Math.floor(r / Q) % H, q = r % Q, v = w[`${state.kind}:${l}:${h}`];
    const head = `${state.kind},${l + 1},${h + 1},${q},${quote(k.queries[q])},`;
    let text = "";
    for (let c = 0; c < K; c++) text += `${head}${c},${keys[c]},${(v[q * K + c] / 65535).toFixed(5)}\n`;
    return text;
  }, parts, (f) => progress(`writing the CSV: ${Math.round(100 * f)}%`));
  return parts;
}

async function download(button, name, type, build) {
  const label = button.textContent, data = state.data;
  button.disabled = true;
  const progress = (what) => { button.textContent = typeof what === "number" ? label : `${what}…`; };
  try {
    const parts = await build(progress);
    if (state.data !== data) return;
    const a = document.createElement("a");
    a.href = URL.createObjectURL(new Blob(parts, {type}));
    a.download = name;
    a.click();
    setTimeout(() => URL.revokeObjectURL(a.href), 10000);
    tip(`${name} is ready.`);
  } catch (error) { tip(error.message); }
  finally { button.disabled = false; button.textContent = label; }
}

// --- the pointer and the keyboard -------------------------------------------------------------------------------

function cellAt(e) {
  const r = e.target.getBoundingClientRect(), q = Math.floor((e.clientY - r.top) / map.size);
  const c = Math.floor((e.clientX - r.left) / map.size);
  return q >= 0 && q < map.Q && c >= 0 && c < map.K ? [q, c] : null;
}

function follow(q) { state.query = q; draw(); }

function openHead(layer, head) {
  Object.assign(state, {layer, head: String(head), mode: "head", cell: null, thumb: [layer - 1, head - 1]});
  draw(true).then(() => { const c = $(".vz-cells"); if (c) c.focus({preventScroll: true}); });
}

function moveCell(key) {
  const [q, c] = state.cell || [state.query ?? 0, 0], {Q, K} = map;
  const moves = {ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1], PageUp: [-10, 0],
    PageDown: [10, 0], Home: [0, -K], End: [0, K]};
  const [dq, dc] = moves[key];
  state.cell = [Math.min(Q - 1, Math.max(0, q + dq)), Math.min(K - 1, Math.max(0, c + dc))];
  ring(".vz-focus", ...state.cell);
  tip(describe(...state.cell));
}

function moveThumb(key) {
  const [L, H] = shape(state.kind), [l, h] = state.thumb;
  const moves = {ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1], Home: [0, -H], End: [0, H]};
  const [dl, dh] = moves[key] || [0, 0];
  state.thumb = [Math.min(L - 1, Math.max(0, l + dl)), Math.min(H - 1, Math.max(0, h + dh))];
  element.querySelectorAll(".vz-thumb").forEach((t) => {
    const on = Number(t.dataset.layer) === state.thumb[0] + 1 && Number(t.dataset.head) === state.thumb[1] + 1;
    t.tabIndex = on ? 0 : -1;
    if (on) t.focus();
  });
}

element.addEventListener("keydown", (e) => {
  if (!state.data) return;
  if (e.target.classList.contains("vz-cells")) {
    if (["ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight", "PageUp", "PageDown", "Home", "End"].includes(e.key)) {
      e.preventDefault(); moveCell(e.key);
    } else if (e.key === "Enter" || e.key === " ") { e.preventDefault(); follow((state.cell || [0])[0]); }
  } else if (e.target.classList.contains("vz-thumb") && (e.key.startsWith("Arrow") || e.key === "Home" || e.key === "End")) {
    e.preventDefault(); moveThumb(e.key);  // Enter and Space click the focused head's button, which opens it
  }
});
element.addEventListener("focusin", (e) => {
  if (!state.data) return;
  if (e.target.classList.contains("vz-cells")) {
    state.cell = state.cell || [state.query ?? 0, 0];
    ring(".vz-focus", ...state.cell, false);
    tip(describe(...state.cell));
  } else if (e.target.classList.contains("vz-thumb")) {
    state.thumb = [Number(e.target.dataset.layer) - 1, Number(e.target.dataset.head) - 1];
    tip(`layer ${e.target.dataset.layer}, head ${e.target.dataset.head}: Enter opens it large`);
  }
});
element.addEventListener("change", (e) => {
  if (!state.data) return;
  if (e.target.id === "vz-kind") Object.assign(state, {kind: e.target.value, query: null, cell: null, note: null});
  if (e.target.id === "vz-layer") Object.assign(state, {layer: Number(e.target.value), note: null});
  if (e.target.id === "vz-head") state.head = e.target.value;
  draw(true);
});
element.addEventListener("click", (e) => {
  const t = e.target.closest("button, .vz-thumb, .vz-q, .vz-cells");
  if (!t || !state.data) return;
  if (t.classList.contains("vz-thumb")) openHead(Number(t.dataset.layer), t.dataset.head);
  else if (t.classList.contains("vz-q")) follow(Number(t.dataset.i));
  else if (t.classList.contains("vz-cells")) { const at = cellAt(e); if (at) { state.cell = at; follow(at[0]); } }
  else if (t.id === "vz-mode-head" || t.id === "vz-mode-model") { state.mode = t.id.slice(8); draw(true); }
  else if (t.id === "vz-json") download(t, "attention.json", "application/json", asJson);
  else if (t.id === "vz-csv") download(t, `attention_${state.kind}.csv`, "text/csv", asCsv);
});
element.addEventListener("mousemove", (e) => {
  if (!state.data || !map || !e.target.classList.contains("vz-cells")) return;
  const at = cellAt(e);
  if (at) { ring(".vz-hover", ...at, false); tip(describe(...at)); }
});
element.addEventListener("mouseover", (e) => {
  const thumb = state.data && e.target.closest(".vz-thumb");
  if (thumb) tip(`layer ${thumb.dataset.layer}, head ${thumb.dataset.head}: click to open it large`);
});

let width = 0;  // the viewer's width when last drawn: a phone turned or a window resized redraws to fit
new ResizeObserver(() => {
  const now = box() ? box().clientWidth : 0;
  if (state.data && now && now !== width) { width = now; draw(); }
}).observe(element);

function load() {
  state.data = props.value ? JSON.parse(props.value) : null;
  blocks.clear();
  inflight.clear();
  sprites.clear();
  map = null;
  const root = box();
  if (root) root.innerHTML = "";  // new controls for the new translation's shapes
  if (!state.data) { draw(); return; }
  for (const [n, b] of Object.entries(state.data.blocks)) blocks.set(n, b);
  const view = state.data.view;
  Object.assign(state, {cell: null, thumb: [0, 0], note: view ? view.note || null : null, mode: view ? "head" : state.mode});
  if (view) Object.assign(state, {kind: view.kind, layer: view.layer, head: String(view.head), query: view.query});
  else state.query = null;
  if (!state.data.kinds[state.kind]) state.kind = "encoder";
  draw();
}
watch("value", load);
load();
