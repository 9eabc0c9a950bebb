// The UI shell: shows which server this is. The dashboard replaces it.
import { apiUrl, describeVersion, type VersionMessage } from "./version";

async function render(root: HTMLElement): Promise<void> {
  root.replaceChildren();
  const title = document.createElement("h1");
  title.textContent = "tiphys";
  root.append(title);
  try {
    const response = await fetch(apiUrl(document.baseURI, "api/version"), {
      headers: { Accept: "application/json" },
      credentials: "same-origin",
    });
    if (!response.ok) throw new Error(`GET /api/version answered ${response.status}`);
    const version = (await response.json()) as VersionMessage;
    const list = document.createElement("dl");
    for (const [label, value] of describeVersion(version)) {
      const dt = document.createElement("dt");
      dt.textContent = label;
      const dd = document.createElement("dd");
      dd.textContent = value; // textContent: server values are never parsed as HTML
      dd.dataset.field = label;
      list.append(dt, dd);
    }
    root.append(list);
  } catch (err) {
    const p = document.createElement("p");
    p.className = "error";
    p.textContent = `Cannot reach the API: ${err instanceof Error ? err.message : String(err)}`;
    root.append(p);
  }
}

const root = document.getElementById("app");
if (root) void render(root);
