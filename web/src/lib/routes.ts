// Route matching: page paths are relative to the base href (`applications/argocd/guestbook`).

export type Route =
  | { page: "login" }
  | { page: "apps" }
  | { page: "app-new" }
  | { page: "app"; namespace: string; name: string; tab: string }
  | { page: "projects" }
  | { page: "project"; name: string }
  | { page: "clusters" }
  | { page: "repos" }
  | { page: "account" }
  | { page: "about" }
  | { page: "not-found"; path: string };

/** `path` is the pathname below the base path, without a leading slash. */
export function matchRoute(path: string): Route {
  const parts = path.split("/").filter(Boolean).map(decodeSegment);
  const [a, b, c, d] = parts;
  if (parts.length === 0) return { page: "apps" };
  if (a === "login" && parts.length === 1) return { page: "login" };
  if (a === "applications") {
    if (parts.length === 1) return { page: "apps" };
    if (b === "new" && parts.length === 2) return { page: "app-new" };
    if (parts.length === 3 || parts.length === 4) return { page: "app", namespace: b, name: c, tab: d ?? "summary" };
  }
  if (a === "settings") {
    if (b === "projects" && parts.length === 2) return { page: "projects" };
    if (b === "projects" && parts.length === 3) return { page: "project", name: c };
    if (b === "clusters" && parts.length === 2) return { page: "clusters" };
    if (b === "repos" && parts.length === 2) return { page: "repos" };
  }
  if (a === "user-info" && parts.length === 1) return { page: "account" };
  if (a === "about" && parts.length === 1) return { page: "about" };
  return { page: "not-found", path };
}

function decodeSegment(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

/** Builds a page path from segments, escaping each one. */
export function pagePath(...segments: string[]): string {
  return segments.map((s) => encodeURIComponent(s)).join("/");
}
