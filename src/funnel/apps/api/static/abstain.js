// An abstention: the documents do not answer the question. The answer's place says so plainly, and the
// citations are listed as the closest passages, not as support for an answer.
import { h } from "./dom.js";

export const NOT_IN_DOCUMENTS = "Not in your documents";
export const CLOSEST = "Closest, not an answer";

/** Turns a finished turn into an abstention: `text` is the server's answer, `sources` the citations' list.
 * Only its first line is shown: the lines after it list the closest passages in words (for the CLI and
 * JSON readers), which the page lists as buttons instead. */
export function markAbstention(turn, answer, sources, text) {
  turn.classList.add("abstained");
  const sentence = (text || "").trim().split("\n")[0].trim();
  answer.replaceChildren(
    h("p", { class: "abstain-title" }, NOT_IN_DOCUMENTS),
    sentence ? h("p", { class: "abstain-text" }, sentence) : null,
  );
  if (sources.hidden) return;
  sources.setAttribute("aria-label", "closest passages, not an answer");
  sources.before(h("p", { class: "closest small" }, CLOSEST));
}
