// "Ask only these": a checkbox beside each ready document; the chosen ids go with each question as
// `documents` (the ask request's filter). The choice belongs to one collection and outlives the list's
// re-renders while uploads are polled.
import { h } from "./dom.js";

const chosen = new Map();  // document id -> file name, in the order they were ticked
const $ = (id) => document.getElementById(id);

export function chosenDocuments() {
  return [...chosen.keys()];
}

/** The first cell of a document's row: its checkbox (only a ready document can be asked). */
export function pickCell(doc) {
  const name = doc.filename || doc.id;
  return h("td", { class: "pick" }, h("input", {
    type: "checkbox", class: "pick-doc", "aria-label": `Ask only this and the other ticked documents: ${name}`,
    title: "Ask only the ticked documents", checked: chosen.has(doc.id), disabled: doc.status !== "ready",
    onchange: (event) => {
      if (event.currentTarget.checked) chosen.set(doc.id, name); else chosen.delete(doc.id);
      showScope();
    },
  }));
}

/** Forgets ticked documents that are gone or no longer ready (deleted, re-ingesting). */
export function keepListed(docs) {
  const ready = new Set(docs.filter((d) => d.status === "ready").map((d) => d.id));
  for (const id of [...chosen.keys()]) if (!ready.has(id)) chosen.delete(id);
  showScope();
}

export function clearChoice() {
  chosen.clear();
  document.querySelectorAll("input.pick-doc").forEach((box) => { box.checked = false; });
  showScope();
}

function showScope() {
  const names = [...chosen.values()];
  $("scope").hidden = names.length === 0;
  $("scope-text").textContent = names.length === 1
    ? `Asking only ${names[0]}.`
    : `Asking only these ${names.length} documents: ${names.join(", ")}.`;
}

export function startPicker() {
  $("scope-clear").addEventListener("click", clearChoice);
}
