// funnel's web page: ask with streamed answers and clickable citations, upload and list documents,
// incidents. Plain DOM and ES modules, no framework, no build step. Every server string reaches the page
// as text (the `h` helper, textContent), never through innerHTML.
import { api, apiJson, apiKey, describeDetail, sseEvents } from "./api.js";
import { formatBytes, formatTime, h, where } from "./dom.js";
import { initChats } from "./chats.js";
import { markAbstention } from "./abstain.js";
import { refreshCalibration, startCalibration } from "./calibration.js";
import { chosenDocuments, clearChoice, keepListed, pickCell, startPicker } from "./picker.js";
import { covers, may, startKeys } from "./keys.js";

const POLL_MS = [700, 1000, 1500, 2500];  // back off while documents stay queued/ingesting
const FLAG_HELP = {
  uncited: "the answer cites no passage: check it against the documents",
  unknown_citation: "the answer cites a number no passage has",
  no_context: "no passage matched the question",
  interrupted: "the answer stream broke before the end",
  no_memory: "the conversation's memory was unavailable: answered without earlier questions, not remembered",
  abstained: "the documents do not support an answer: the passages listed are the closest ones",
};

const $ = (id) => document.getElementById(id);

const state = {
  collection: "default",  // null: the key sees no collection
  conversationId: null,
  asking: null,        // AbortController of the answer being streamed
  pollTimer: null,
  pollStep: 0,
  lastFocus: null,     // the citation button that opened the passage panel
  features: {},        // what this server serves beyond search and ask (/health): triage
};

function colUrl(path = "") {
  return `/v1/collections/${encodeURIComponent(state.collection)}${path}`;
}

function notice(message) {
  const el = $("notice");
  el.textContent = message || "";
  el.hidden = !message;
}


// --- asking ---------------------------------------------------------------------------------------------

function renderAnswerText(container, text, citations) {
  // "[1]" or "[1, 2]" become buttons for the numbers a citation exists for; everything else stays text.
  const byNumber = new Map((citations || []).map((c) => [Number(c.number), c]));
  container.replaceChildren();
  const pattern = /\[(\d+(?:\s*,\s*\d+)*)\]/g;
  let last = 0;
  for (const match of text.matchAll(pattern)) {
    const numbers = match[1].split(",").map((s) => Number(s.trim()));
    if (!numbers.some((n) => byNumber.has(n))) continue;
    container.append(text.slice(last, match.index));
    numbers.forEach((n) => {
      const c = byNumber.get(n);
      if (!c) { container.append(`[${n}]`); return; }
      const label = [`citation ${n}`, c.title || c.path, where(c)].filter(Boolean).join(", ");
      container.append(h("button", {
        type: "button", class: "cite", "aria-label": label, title: label, "data-number": n,
        onclick: (event) => showPassage(c, event.currentTarget),
      }, `[${n}]`));
    });
    last = match.index + match[0].length;
  }
  container.append(text.slice(last));
}

function renderSources(list, citations) {
  list.replaceChildren(...citations.map((c) => h("li", {},
    h("button", { type: "button", class: "link", onclick: (e) => showPassage(c, e.currentTarget) },
      `[${c.number}] ${c.title || c.path || c.chunk_id}`),
    where(c) ? h("span", { class: "muted" }, ` — ${where(c)}`) : null)));
  list.hidden = citations.length === 0;
}

function renderInfo(info, done) {
  const parts = [];
  if (done.generator) parts.push(h("span", {}, "answered by ", h("strong", { class: "generator" }, done.generator)));
  if (done.fallback_reason) parts.push(h("span", { class: "warn fallback" }, `fallback: ${done.fallback_reason}`));
  for (const flag of done.flags || []) {
    parts.push(h("span", { class: "flag", title: FLAG_HELP[flag] || flag }, flag,
      FLAG_HELP[flag] ? h("span", { class: "visually-hidden" }, ` (${FLAG_HELP[flag]})`) : null));
  }
  if (done.rerank_status) {
    const reason = done.rerank_reason ? ` (${done.rerank_reason})` : "";
    parts.push(h("span", { class: "muted" }, `rerank: ${done.rerank_status}${reason}`));
  }
  if (done.search_query && done.search_query !== info.dataset.question) {
    parts.push(h("span", { class: "muted" }, `searched for: ${done.search_query}`));
  }
  info.replaceChildren(...parts);
}

function renderQuote(box, quote) {
  // Beside a reader model's answer: the picker's sentences, verbatim, each opening its passage. Sent first
  // (the `quote` event, well before the model's first word) and again with the finished answer.
  box.replaceChildren(...(quote.length ? [h("p", { class: "quote-label muted small" }, "From the page")] : []),
    ...quote.map((c) => h("blockquote", { class: "quote small" }, `“${c.text}” `,
      h("button", { type: "button", class: "link", onclick: (e) => showPassage(c, e.currentTarget, "Quoted passage") },
        [c.title || c.path, where(c)].filter(Boolean).join(", ")))));
  box.hidden = quote.length === 0;
}

function setAsking(controller) {
  state.asking = controller;
  $("ask").disabled = !!controller;
  $("stop").hidden = !controller;
  $("conversation").setAttribute("aria-busy", controller ? "true" : "false");
}

async function ask(question) {
  const turn = h("article", { class: "turn" });
  const answer = h("div", { class: "answer", "aria-label": "answer" });
  const status = h("p", { class: "muted small progress" }, "searching…");
  const info = h("p", { class: "info small" });
  info.dataset.question = question;
  const sources = h("ol", { class: "sources small", hidden: true, "aria-label": "sources" });
  const quote = h("div", { class: "quotes", hidden: true, "aria-label": "from the page" });
  turn.append(h("p", { class: "question" }, h("span", { class: "visually-hidden" }, "Question: "), question),
    answer, quote, status, info, sources);
  $("conversation").append(turn);
  turn.scrollIntoView({ block: "nearest" });

  const controller = new AbortController();
  setAsking(controller);
  let text = "";
  let finished = false;
  const fail = (message) => {
    status.replaceChildren(h("span", { class: "error", role: "alert" }, message));
    finished = true;
  };
  try {
    const body = { question, stream: true };
    if (state.conversationId) body.conversation_id = state.conversationId;
    const only = chosenDocuments();
    if (only.length) body.documents = only;
    const response = await api(colUrl("/ask"), {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
      body: JSON.stringify(body),
      signal: controller.signal,
    });
    for await (const { event, data } of sseEvents(response)) {
      let payload;
      try { payload = JSON.parse(data); } catch { payload = { text: data, detail: data }; }
      if (event === "meta") {
        if (payload.conversation_id) state.conversationId = payload.conversation_id;
        status.textContent = "answering…";
      } else if (event === "quote") {
        renderQuote(quote, payload.citations || []);
        status.textContent = "reading the passages…";
      } else if (event === "delta") {
        text += payload.text ?? "";
        answer.textContent = text;
      } else if (event === "done") {
        if (payload.conversation_id) state.conversationId = payload.conversation_id;
        text = payload.answer ?? text;
        renderSources(sources, payload.citations || []);
        renderQuote(quote, payload.quote || []);
        if (payload.abstained) markAbstention(turn, answer, sources, text);
        else renderAnswerText(answer, text, payload.citations);
        renderInfo(info, payload);
        status.remove();
        finished = true;
      } else if (event === "error") {
        fail(`Error: ${describeDetail(payload.detail) || "the server could not answer"}`);
      }
    }
    if (!finished) fail("The answer stream ended early; the answer above may be incomplete.");
  } catch (e) {
    if (e.name === "AbortError") fail("Stopped.");
    else fail(`Error: ${e.message}`);
  } finally {
    setAsking(null);
  }
}

let chats = { refresh() {} };  // past chats (chats.js), once the page has started

function reopenConversation(id, turns) {
  // A past chat from the server: its turns as asked and answered; the next question continues it.
  newConversation();
  state.conversationId = id;
  for (const t of turns) {
    const answer = h("div", { class: "answer", "aria-label": "answer" });
    const sources = h("ol", { class: "sources small", hidden: true, "aria-label": "sources" });
    renderAnswerText(answer, t.answer || "", t.citations);
    renderSources(sources, t.citations || []);
    $("conversation").append(h("article", { class: "turn reopened" },
      h("p", { class: "question" }, h("span", { class: "visually-hidden" }, "Question: "), t.question),
      answer, sources));
  }
}

function clearConversation() {
  if (state.asking) state.asking.abort();
  state.conversationId = null;
  $("conversation").replaceChildren();
  hidePassage();
}

function newConversation() {
  clearConversation();
  $("question").focus();
}

// --- the cited passage ----------------------------------------------------------------------------------

function fileUrl(documentId) {
  return colUrl(`/documents/${encodeURIComponent(documentId)}/file`);
}

function fileLink(documentId, page, label) {
  const fragment = page !== null && page !== undefined ? `#page=${encodeURIComponent(page)}` : "";
  const href = fileUrl(documentId) + fragment;
  return h("a", {
    href, target: "_blank", rel: "noopener", class: "open-file",
    onclick: async (event) => {
      // With an API key the browser cannot send the header on a plain link: fetch, then open a blob.
      if (!apiKey()) return;
      event.preventDefault();
      const opened = window.open("", "_blank");
      try {
        const blob = await (await api(fileUrl(documentId))).blob();
        const url = URL.createObjectURL(blob) + fragment;
        if (opened) opened.location.href = url; else window.location.href = url;
      } catch (e) {
        if (opened) opened.close();
        notice(`Cannot open the file: ${e.message}`);
      }
    },
  }, label);
}

function markSentence(pre, text, sentence) {
  const at = sentence ? text.indexOf(sentence) : -1;
  if (at < 0) { pre.textContent = text; return; }
  pre.replaceChildren(text.slice(0, at), h("mark", {}, sentence), text.slice(at + sentence.length));
}

async function showPassage(c, opener, heading = `Cited passage [${c.number}]`) {
  state.lastFocus = opener || null;
  const panel = $("passage");
  panel.hidden = false;
  $("passage-heading").textContent = heading;
  panel.dataset.chunk = c.chunk_id || "";
  $("passage-title").textContent = c.title || c.path || "";
  $("passage-where").textContent = [c.path !== c.title ? c.path : "", where(c)].filter(Boolean).join(" — ");
  $("passage-cited").textContent = c.text || "";
  const links = $("passage-links");
  links.replaceChildren();
  if (c.document_id) {
    // A page of a PDF (a slide's number is no page of the original file).
    const isPdf = /\.pdf$/i.test(c.path || "") || (c.page != null && /^p\./.test(c.location || ""));
    links.append(isPdf && c.page
      ? fileLink(c.document_id, c.page, `Open the PDF at page ${c.page}`)
      : fileLink(c.document_id, null, "Open the original file"));
  }
  const box = $("passage-chunk-box");
  box.hidden = true;
  $("passage-heading").focus();
  if (!c.chunk_id) return;
  try {
    const chunk = await apiJson(colUrl(`/chunks/${encodeURIComponent(c.chunk_id)}`));
    if ($("passage-heading").textContent !== heading || panel.dataset.chunk !== c.chunk_id) return;  // another was opened
    if (chunk && chunk.text && chunk.text !== c.text) {
      markSentence($("passage-chunk"), chunk.text, c.text);
      box.hidden = false;
    }
  } catch {
    // The cited text is already shown; the whole chunk is extra (it may be gone after a re-ingest).
  }
}

function hidePassage() {
  $("passage").hidden = true;
  if (state.lastFocus && document.contains(state.lastFocus)) state.lastFocus.focus();
  state.lastFocus = null;
}

// --- collections and documents ----------------------------------------------------------------------

/** The collections the key may use: those the server lists (only the key's), and where it may write, those
 * an upload would make ("default", or its own named ones). Picks one if the current one is not among them. */
async function loadCollections() {
  const select = $("collection");
  let collections = [];
  try {
    collections = await apiJson("/v1/collections");
  } catch (e) {
    if (e.status === 401) return;  // the key is asked for again
    notice(`Cannot list collections: ${e.message}`);
  }
  const names = collections.map((c) => c.name);
  const makeable = !may.write ? [] : may.collections === "all" ? ["default"] : may.collections;
  for (const name of makeable) if (!names.includes(name)) names.push(name);
  if (state.collection && covers(state.collection) && may.write && !names.includes(state.collection)) {
    names.push(state.collection);  // just made: not listed until it holds a document
  }
  select.replaceChildren(...names.map((name) => {
    const c = collections.find((x) => x.name === name);
    const count = c ? ` (${c.documents} document${c.documents === 1 ? "" : "s"})` : "";
    return h("option", { value: name }, name + count);
  }));
  if (!names.includes(state.collection)) useCollection(names.includes("default") ? "default" : names[0] ?? null);
  if (state.collection) select.value = state.collection;
  else notice("This key covers no collection with documents yet: ask an admin to fill one.");
  $("ask").disabled = !state.collection;
}

function statusCell(doc) {
  const status = doc.status || "unknown";
  const cell = h("td", {}, h("span", { class: `status status-${status}` }, status));
  if (doc.progress) cell.append(h("span", { class: "muted small doc-progress" }, ` ${doc.progress}`));
  if (doc.error) cell.append(h("span", { class: "error small doc-error" }, ` ${describeDetail(doc.error)}`));
  for (const warning of doc.warnings || []) cell.append(h("span", { class: "small doc-warning" }, ` ${warning}`));
  return cell;
}

function renderDocuments(docs) {
  const body = $("documents").querySelector("tbody");
  keepListed(docs);
  body.replaceChildren(...docs.map((doc) => h("tr", { "data-id": doc.id },
    pickCell(doc),
    h("td", {}, fileLink(doc.id, null, doc.filename || doc.id)),
    statusCell(doc),
    h("td", { class: "num" }, doc.chunks ?? ""),
    h("td", { class: "num" }, formatBytes(doc.bytes)),
    h("td", {}, formatTime(doc.uploaded_at)),
    h("td", {}, h("button", {
      type: "button", class: "delete needs-write", "aria-label": `Delete ${doc.filename || doc.id}`,
      onclick: () => deleteDocument(doc),
    }, "Delete")))));
  $("documents").hidden = docs.length === 0;
  $("documents-empty").hidden = docs.length > 0;
}

async function loadDocuments() {
  clearTimeout(state.pollTimer);
  const collection = state.collection;
  let docs;
  try {
    docs = await apiJson(colUrl("/documents"));
  } catch (e) {
    if (collection !== state.collection) return;
    if (e.status === 404) docs = [];  // a collection that exists only once something is uploaded
    else {
      $("upload-status").textContent = `Cannot list documents: ${e.message}`;
      docs = null;
    }
  }
  if (collection !== state.collection) return;
  if (docs) renderDocuments(docs);
  const pending = docs ? docs.some((d) => d.status === "queued" || d.status === "ingesting") : true;
  if (pending) {
    const delay = POLL_MS[Math.min(state.pollStep++, POLL_MS.length - 1)];
    state.pollTimer = setTimeout(loadDocuments, docs ? delay : 5000);
  } else {
    if (state.pollStep > 0) loadCollections();  // counts changed
    state.pollStep = 0;
    refreshCalibration();  // the server calibrates after a batch of uploads
  }
}

async function upload(files) {
  files = [...files];
  if (!files.length) return;
  const status = $("upload-status");
  const form = new FormData();
  for (const f of files) form.append("file", f, f.name);
  status.textContent = `Uploading ${files.length} file${files.length === 1 ? "" : "s"}…`;
  try {
    const result = await apiJson(colUrl("/documents"), { method: "POST", body: form });
    const docs = Array.isArray(result) ? result : (result && result.documents) || [];
    status.textContent = `Queued ${docs.map((d) => d.filename).join(", ") || "the upload"}; ingest status below.`;
  } catch (e) {
    status.textContent = `Upload failed: ${e.message}`;
  }
  $("file").value = "";
  state.pollStep = 0;
  await loadDocuments();
  loadCollections();
}

async function deleteDocument(doc) {
  if (!window.confirm(`Delete ${doc.filename || doc.id} from ${state.collection}?`)) return;
  try {
    await api(colUrl(`/documents/${encodeURIComponent(doc.id)}`), { method: "DELETE" });
    $("upload-status").textContent = `Deleted ${doc.filename || doc.id}.`;
  } catch (e) {
    $("upload-status").textContent = `Delete failed: ${e.message}`;
  }
  await loadDocuments();
  loadCollections();
}

async function createCollection() {
  const name = (window.prompt("Name of the new collection (a-z, 0-9, - and _):") || "").trim();
  if (!name) return;
  try {
    await apiJson("/v1/collections", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ name }),
    });
    notice("");
  } catch (e) {
    if (e.status !== 409) { notice(`Cannot create the collection: ${e.message}`); return; }  // 409: it exists
  }
  selectCollection(name);
  await loadCollections();
}

function useCollection(name) {
  state.collection = name;
  $("docs-collection").textContent = name ?? "—";
  $("upload-status").textContent = "";
  clearConversation();  // a conversation belongs to one collection
  clearChoice();  // so does a choice of documents
  state.pollStep = 0;
}

function selectCollection(name) {
  if (name === state.collection) return;
  useCollection(name);
  loadDocuments();
  chats.refresh();
}

// --- incidents ------------------------------------------------------------------------------------------

async function loadIncidents() {
  const section = $("incidents-section");
  let incidents;
  try {
    incidents = await apiJson("/v1/incidents");
  } catch (e) {
    // 503: triage is not configured on this server, so there is nothing to show.
    if (e.status === 503 || e.status === 404) { section.hidden = true; return; }
    section.hidden = false;
    $("incidents-empty").textContent = `Cannot list incidents: ${e.message}`;
    $("incidents-empty").hidden = false;
    $("incidents").hidden = true;
    return;
  }
  section.hidden = false;
  $("incidents").querySelector("tbody").replaceChildren(...incidents.map((i) => h("tr", {},
    h("td", {}, formatTime(i.created_at)),
    h("td", {}, i.service ?? ""),
    h("td", {}, i.exception_type ? h("strong", {}, `${i.exception_type}: `) : null, i.message ?? ""),
    h("td", {}, i.analysis_status ?? ""),
    h("td", {}, i.slack_status ?? "—"))));
  $("incidents").hidden = incidents.length === 0;
  $("incidents-empty").textContent = "No incidents.";
  $("incidents-empty").hidden = incidents.length > 0;
}

// --- health and start-up --------------------------------------------------------------------------------

async function loadHealth() {
  try {
    const health = await apiJson("/health");
    state.features = health.features || {};
    const parts = [`funnel ${health.version ?? ""}`.trim(), `status ${health.status ?? "?"}`,
      `reranker ${health.reranker ?? "none"}`];
    if (health.generator) parts.push(`generator ${health.generator}`);
    if (health.llm) parts.push(`llm ${health.llm}`);
    $("health").textContent = parts.join(" · ");
  } catch (e) {
    $("health").textContent = e.status === 401 ? "the server refused the key" : `server unreachable: ${e.message}`;
  }
}

async function refreshAll() {
  notice("");
  await loadCollections();  // which collection is shown depends on the key's
  if (!may.known) return;
  if (state.collection) {
    loadDocuments();
    chats.refresh();
  }
  // Only what this server serves (without a triage repository /v1/incidents answers 503) and the key may read.
  if (state.features.triage && may.manage) loadIncidents(); else $("incidents-section").hidden = true;
}

/** The key is gone or refused: nothing it saw stays on the page. */
function forgetPage() {
  clearTimeout(state.pollTimer);
  state.collection = null;  // a reply still under way for the old key is dropped
  clearConversation();
  $("collection").replaceChildren();
  renderDocuments([]);
  $("chats-list").replaceChildren();
  $("incidents-section").hidden = true;
  $("upload-status").textContent = "";
  $("calibration-status").textContent = "";
  notice("");
}

function start() {
  const identify = startKeys({ known: refreshAll, lost: forgetPage });

  $("collection").addEventListener("change", (e) => selectCollection(e.target.value));
  $("collection-new").addEventListener("click", createCollection);
  $("conversation-new").addEventListener("click", newConversation);

  $("ask-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const question = $("question").value.trim();
    if (!question || state.asking) return;
    $("question").value = "";
    ask(question).then(() => chats.refresh());  // the chat is new, or updated: first in the list
  });
  $("question").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $("ask-form").requestSubmit();
    }
  });
  $("stop").addEventListener("click", () => state.asking && state.asking.abort());

  $("passage-close").addEventListener("click", hidePassage);
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && !$("passage").hidden) hidePassage();
  });

  $("file").addEventListener("change", (e) => upload(e.target.files));
  // The types come from the picker's accept list, which the server fills from its loaders' table.
  const types = $("file").accept.split(",").filter((t) => t.startsWith("."));
  if (types.length) $("upload-types").textContent = `Types: ${types.join(" ")}`;
  const zone = $("dropzone");
  zone.addEventListener("dragover", (e) => { e.preventDefault(); zone.classList.add("over"); });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", (e) => {
    e.preventDefault();
    zone.classList.remove("over");
    if (e.dataTransfer && e.dataTransfer.files.length) upload(e.dataTransfer.files);
  });
  // A file dropped beside the zone must not navigate away from the page.
  window.addEventListener("dragover", (e) => e.preventDefault());
  window.addEventListener("drop", (e) => e.preventDefault());

  $("incidents-refresh").addEventListener("click", loadIncidents);
  chats = initChats({
    url: colUrl, current: () => state.conversationId, reopen: reopenConversation, forget: newConversation,
  });
  startCalibration(() => colUrl());
  startPicker();

  // The features the server reports, then the key's role, decide what the page asks for.
  loadHealth().then(identify);
}

start();  // a module runs after the document is parsed
