// Who the page is for: the API key kept for this tab (api.js), asked for when the server answers 401, and
// what the key's role may do on which collections (GET /v1/keys/me). The page shows only what it may:
// the body's classes hide the controls of the rest (style.css, `.needs-*`); the server enforces it anyway.
import { apiJson, apiKey, setApiKey, whenUnauthorised } from "./api.js";

const $ = (id) => document.getElementById(id);

/** What the key may do; `collections` is "all" or the names it covers. Nothing until the server says. */
export const may = { known: false, role: "", collections: [], write: false, calibrate: false, manage: false };

function allow(me) {
  const open = me.role === "open";
  const all = me.collections === "all";
  Object.assign(may, {
    known: true, role: me.role, collections: me.collections,
    write: open || me.role === "writer" || me.role === "admin",  // uploads, deletes, chat renames
    calibrate: open || me.role === "admin",  // an admin on the collection
    manage: open || (me.role === "admin" && all),  // new collections, incidents: every collection's admin
  });
  const body = document.body;
  body.classList.remove("locked");
  body.classList.toggle("may-write", may.write);
  body.classList.toggle("may-calibrate", may.calibrate);
  body.classList.toggle("may-manage", may.manage);
  const where = all ? "every collection" : me.collections.join(", ") || "no collection";
  $("key-who").textContent = open ? "" : `${me.role} · ${where}`;
  $("key-status").textContent = "";
  $("settings").open = false;
}

function lock(line) {
  Object.assign(may, { known: false, role: "", collections: [], write: false, calibrate: false,
    manage: false });
  document.body.className = "locked";
  $("key-who").textContent = "";
  $("key-status").textContent = line;
  $("settings").open = true;
  $("api-key").focus();
}

/** May the page list this collection? A writer's own collections may not exist yet (an upload makes them). */
export function covers(name) {
  return may.collections === "all" || may.collections.includes(name);
}

/**
 * @param {object} hooks
 * @param {() => void} hooks.known  the key is known (or none is needed): load what it may see
 * @param {() => void} hooks.lost  the key is gone or refused: drop what the page shows
 */
export function startKeys({ known, lost }) {
  const identify = async () => {
    try {
      allow(await apiJson("/v1/keys/me"));
    } catch (e) {
      // A 401 has already locked the page (below); anything else is one line above the page.
      if (e.status !== 401) {
        $("notice").textContent = `Cannot check the API key: ${e.message}`;
        $("notice").hidden = false;
      }
      return;
    }
    known();
  };
  whenUnauthorised((line) => {  // no key, or one refused (wrong, expired, revoked): now or mid-session
    lost();
    lock(apiKey() ? `That key was refused: ${line || "unknown key"}. Enter another.`
      : "This server needs an API key.");
  });
  $("api-key").value = apiKey();
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const key = $("api-key").value.trim();
    if (!key) { $("key-status").textContent = "Enter a key first."; return; }
    setApiKey(key);
    $("key-status").textContent = "checking…";
    lost();  // nothing the previous key saw stays on screen
    identify();
  });
  $("key-clear").addEventListener("click", () => {
    setApiKey("");
    $("api-key").value = "";
    lost();
    identify();  // an open service needs none; otherwise the page asks again
  });
  return identify;
}
