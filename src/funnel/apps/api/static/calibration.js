// The collection's calibration (which ranking suits its documents): a line saying where it stands and a
// Calibrate button. The server calibrates by itself after each batch of uploads; the button queues one now.
import { apiJson } from "./api.js";
import { formatTime } from "./dom.js";

const POLL_MS = 1500;
const $ = (id) => document.getElementById(id);
let collectionUrl = () => "";
let timer = null;
let shown = "";  // the collection whose status is on the page

function show(status, url) {
  if (url !== collectionUrl()) return;  // another collection was chosen meanwhile
  const line = $("calibration-status");
  const when = status.state === "calibrated" && status.created ? ` · ${formatTime(status.created)}` : "";
  line.textContent = (status.message || "") + when;
  line.dataset.state = status.state || "";
  const busy = status.state === "calibrating";
  $("calibrate").disabled = busy || status.state === "empty";
  if (busy) timer = setTimeout(refreshCalibration, POLL_MS);
}

/** Reads the collection's calibration again (after uploads end, on another collection, while calibrating). */
export async function refreshCalibration() {
  clearTimeout(timer);
  const url = collectionUrl();
  if (shown !== url) { $("calibration-status").textContent = ""; shown = url; }
  try {
    show(await apiJson(`${url}/calibration`), url);
  } catch (e) {
    // A collection that exists only once something is uploaded has nothing to calibrate yet.
    if (e.status === 404) show({ state: "empty", message: "calibrates after the first upload" }, url);
    else if (url === collectionUrl()) $("calibration-status").textContent = `Cannot read the calibration: ${e.message}`;
  }
}

async function calibrateNow() {
  const url = collectionUrl();
  $("calibrate").disabled = true;
  $("calibration-status").textContent = "calibrating…";
  try {
    show(await apiJson(`${url}/calibrate`, { method: "POST" }), url);
  } catch (e) {
    $("calibration-status").textContent = `Cannot calibrate: ${e.message}`;
    $("calibrate").disabled = false;
  }
}

/** `urlOf()` is the current collection's API path (/v1/collections/NAME). */
export function startCalibration(urlOf) {
  collectionUrl = urlOf;
  $("calibrate").addEventListener("click", calibrateNow);
}
