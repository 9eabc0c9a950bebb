// Every API call goes through here: URLs relative to <base href>, JSON with the
// Content-Type the server's CSRF check requires on writes, errors as ApiError,
// and one place that notices a lost session (401).
import { underBase } from "../lib/url";

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

let onUnauthorized: () => void = () => {};

/** Registers what happens on a 401 (the app sends the user to the login page). */
export function setUnauthorizedHandler(handler: () => void): void {
  onUnauthorized = handler;
}

/** Reports a lost session (also used by the watch stream, which does not go through `request`). */
export function notifyUnauthorized(): void {
  onUnauthorized();
}

export function apiUrl(path: string): string {
  return underBase(document.baseURI, path);
}

/** Query strings with repeated keys for arrays; empty values are left out. */
export function query(params: Record<string, string | string[] | undefined>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (Array.isArray(v)) v.forEach((x) => q.append(k, x));
    else if (v) q.set(k, v);
  }
  const s = q.toString();
  return s ? `?${s}` : "";
}

/** A path segment: `/` and the rest escaped (cluster and repository URLs are ids). */
export const seg = (s: string) => encodeURIComponent(s);

async function errorMessage(res: Response): Promise<string> {
  try {
    const body = (await res.json()) as { error?: unknown; message?: unknown };
    const msg = body.error ?? body.message;
    if (typeof msg === "string" && msg) return msg;
  } catch {
    // not JSON: fall through
  }
  return `${res.status} ${res.statusText}`.trim();
}

export async function request<T>(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
  const res = await fetch(apiUrl(path), {
    method,
    credentials: "same-origin",
    signal,
    headers: {
      Accept: "application/json",
      // Sent on every call, writes included: the server refuses cookie-authenticated
      // writes with any other media type (its CSRF defence).
      "Content-Type": "application/json",
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (res.status === 401 && !path.startsWith("api/v1/session")) onUnauthorized();
  if (!res.ok) throw new ApiError(res.status, await errorMessage(res));
  const text = await res.text();
  return (text ? JSON.parse(text) : {}) as T;
}

export const get = <T>(path: string, signal?: AbortSignal) => request<T>("GET", path, undefined, signal);
export const post = <T>(path: string, body: unknown = {}) => request<T>("POST", path, body);
export const put = <T>(path: string, body: unknown) => request<T>("PUT", path, body);
export const del = <T>(path: string) => request<T>("DELETE", path);

export function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
