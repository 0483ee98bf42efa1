// An abstention: the documents do not answer the question. The answer's place says so plainly, and the
// citations are listed as the closest passages, not as support for an answer.
import { h } from "./dom.js";

export const NOT_IN_DOCUMENTS = "Not in your documents";
export const CLOSEST = "Closest, not an answer";

/** Turns a finished turn into an abstention: `text` is the server's sentence, `sources` the citations' list. */
export function markAbstention(turn, answer, sources, text) {
  turn.classList.add("abstained");
  answer.replaceChildren(
    h("p", { class: "abstain-title" }, NOT_IN_DOCUMENTS),
    text ? h("p", { class: "abstain-text" }, text) : null,
  );
  if (sources.hidden) return;
  sources.setAttribute("aria-label", "closest passages, not an answer");
  sources.before(h("p", { class: "closest small" }, CLOSEST));
}
