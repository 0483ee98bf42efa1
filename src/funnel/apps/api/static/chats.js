// Past chats: the collection's conversations, most recently updated first, a page at a time. One reopens (its
// turns are shown and the next question continues it), is renamed or deleted. app.js hands in what it owns
// (the collection's URL, the conversation on screen, how a reopened one is shown), so this module never
// reaches into its state. Server text stays text (`h`).
import { api, apiJson } from "./api.js";
import { formatTime, h } from "./dom.js";

const PAGE = 20;
const $ = (id) => document.getElementById(id);

/**
 * @param {object} hooks
 * @param {(path: string) => string} hooks.url  the current collection's URL + path
 * @param {() => string|null} hooks.current  the id of the conversation on screen
 * @param {(id: string, turns: object[]) => void} hooks.reopen  show these turns and continue that conversation
 * @param {() => void} hooks.forget  the conversation on screen was deleted: start afresh
 */
export function initChats({ url, current, reopen, forget }) {
  const list = $("chats-list");
  const status = $("chats-status");
  const more = $("chats-more");
  let loaded = 0;
  let generation = 0;  // a reply for a collection no longer shown is dropped

  const chatUrl = (id) => url(`/conversations/${encodeURIComponent(id)}`);

  function item(chat) {
    const open = h("button", {
      type: "button", class: "link chat-open", "aria-current": chat.id === current() ? "true" : null,
      onclick: () => openChat(chat),
    }, chat.title || chat.id);
    const turns = `${chat.turns} question${chat.turns === 1 ? "" : "s"}`;
    return h("li", { class: "chat", "data-id": chat.id },
      open,
      h("span", { class: "muted small" }, ` ${formatTime(chat.updated_at)} · ${turns} `),
      h("button", { type: "button", class: "chat-rename small needs-write", "aria-label": `Rename ${chat.title}`,
        onclick: () => renameChat(chat) }, "Rename"),
      h("button", { type: "button", class: "delete chat-delete small needs-write", "aria-label": `Delete ${chat.title}`,
        onclick: () => deleteChat(chat) }, "Delete"));
  }

  async function load(offset, message = "") {
    const mine = ++generation;
    let chats;
    try {
      chats = await apiJson(url(`/conversations?limit=${PAGE}&offset=${offset}`));
    } catch (e) {
      if (mine !== generation) return;
      // 404: a collection that exists only once something is uploaded; 503: the store is down.
      status.textContent = e.status === 404 ? "" : `Cannot list past chats: ${e.message}`;
      if (offset === 0) list.replaceChildren();
      more.hidden = true;
      return;
    }
    if (mine !== generation) return;
    if (offset === 0) list.replaceChildren();
    list.append(...chats.map(item));
    loaded = offset + chats.length;
    more.hidden = chats.length < PAGE;
    status.textContent = message || (loaded === 0 ? "No past chats yet." : "");
  }

  async function openChat(chat) {
    try {
      const found = await apiJson(chatUrl(chat.id));
      reopen(found.id, found.history || []);
      status.textContent = `Reopened "${found.title}"; a question continues it.`;
      for (const button of list.querySelectorAll(".chat-open")) {
        if (button.closest("li").dataset.id === found.id) button.setAttribute("aria-current", "true");
        else button.removeAttribute("aria-current");
      }
    } catch (e) {
      status.textContent = `Cannot open the chat: ${e.message}`;
      if (e.status === 404) load(0);  // deleted meanwhile (or forgotten): the list is stale
    }
  }

  async function renameChat(chat) {
    const title = (window.prompt("New name of the chat:", chat.title) || "").trim();
    if (!title || title === chat.title) return;
    let message = `Renamed to "${title}".`;
    try {
      await apiJson(chatUrl(chat.id), {
        method: "PATCH", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ title }),
      });
    } catch (e) {
      message = `Cannot rename the chat: ${e.message}`;
    }
    await load(0, message);
  }

  async function deleteChat(chat) {
    if (!window.confirm(`Delete the chat "${chat.title}"?`)) return;
    let message = `Deleted "${chat.title}".`;
    try {
      await api(chatUrl(chat.id), { method: "DELETE" });
      if (chat.id === current()) forget();
    } catch (e) {
      message = `Cannot delete the chat: ${e.message}`;
    }
    await load(0, message);
  }

  more.addEventListener("click", () => load(loaded));
  return { refresh: () => load(0) };
}
