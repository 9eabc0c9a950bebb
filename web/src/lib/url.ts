// URL safety: which strings may become links, and where a login may send the browser back to.

/** Only http(s) URLs ever become links (SEC-25): `javascript:`, `data:` and friends are shown as text. */
export function safeHref(value: unknown): string | undefined {
  if (typeof value !== "string") return undefined;
  const trimmed = value.trim();
  // Parse without a base: relative strings are not links we vouch for.
  let url: URL;
  try {
    url = new URL(trimmed);
  } catch {
    return undefined;
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") return undefined;
  return url.toString();
}

/**
 * The `return_url` a login may go back to: same origin and inside the dashboard's base path,
 * returned as an absolute URL; anything else (other hosts, `//host`, `javascript:`, backslash
 * tricks) gives undefined and the caller falls back to the application list.
 */
export function safeReturnUrl(value: string | null | undefined, baseUri: string): string | undefined {
  if (!value) return undefined;
  // Browsers treat `\` like `/` in special URLs; refuse rather than reason about it.
  if (value.includes("\\") || /[\u0000-\u001f]/.test(value)) return undefined;
  let base: URL;
  let url: URL;
  try {
    base = new URL(baseUri);
    url = new URL(value, base);
  } catch {
    return undefined;
  }
  if (url.origin !== base.origin) return undefined;
  if (!url.pathname.startsWith(base.pathname)) return undefined;
  // Never go back to the login page itself (a loop) or to server endpoints.
  const rest = url.pathname.slice(base.pathname.length);
  if (rest === "login" || rest.startsWith("api/") || rest.startsWith("auth/")) return undefined;
  return url.toString();
}

/** The base path of the dashboard from `<base href>`, always ending in `/`. */
export function basePath(baseUri: string): string {
  const path = new URL(baseUri).pathname;
  return path.endsWith("/") ? path : path.replace(/[^/]*$/, "");
}

/** An API or page URL relative to the base href (`api/v1/...` → `/prefix/api/v1/...`). */
export function underBase(baseUri: string, path: string): string {
  return new URL(path.replace(/^\/+/, ""), baseUri).toString();
}
