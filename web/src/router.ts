// History-API navigation below <base href>. Components read the current location through
// `useLocation` and move with `navigate`; links are real <a href> elements so that opening in a
// new tab and keyboard use work, and clicks on them are intercepted here.
import { useEffect, useState } from "preact/hooks";
import { basePath } from "./lib/url";

export interface Loc {
  /** Path below the base, without a leading slash. */
  path: string;
  search: URLSearchParams;
}

const listeners = new Set<() => void>();

export function base(): string {
  return basePath(document.baseURI);
}

export function currentLocation(): Loc {
  const b = base();
  const p = location.pathname;
  const path = p.startsWith(b) ? p.slice(b.length) : p.replace(/^\/+/, "");
  return { path, search: new URLSearchParams(location.search) };
}

/** The absolute href of a page path (`applications?x=1`). */
export function href(to: string): string {
  return base() + to.replace(/^\/+/, "");
}

export function navigate(to: string, replace = false): void {
  const url = href(to);
  if (url === location.pathname + location.search) return;
  if (replace) history.replaceState(null, "", url);
  else history.pushState(null, "", url);
  listeners.forEach((l) => l());
}

/** Navigates to an absolute same-origin URL (already checked by the caller). */
export function navigateAbsolute(url: string): void {
  const u = new URL(url);
  history.pushState(null, "", u.pathname + u.search + u.hash);
  listeners.forEach((l) => l());
}

export function useLocation(): Loc {
  const [loc, setLoc] = useState(currentLocation);
  useEffect(() => {
    const update = () => setLoc(currentLocation());
    listeners.add(update);
    addEventListener("popstate", update);
    return () => {
      listeners.delete(update);
      removeEventListener("popstate", update);
    };
  }, []);
  return loc;
}

/** Sends in-page link clicks through the router (plain left clicks on same-origin links only). */
export function installLinkInterception(): void {
  document.addEventListener("click", (e) => {
    if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    const a = (e.target as Element | null)?.closest?.("a");
    if (!a || a.target || a.hasAttribute("download") || a.dataset.external !== undefined) return;
    const url = new URL(a.href, document.baseURI);
    if (url.origin !== location.origin || !url.pathname.startsWith(base())) return;
    const rest = url.pathname.slice(base().length);
    if (rest.startsWith("api/") || rest.startsWith("auth/")) return; // server routes: full navigation
    e.preventDefault();
    navigate(rest + url.search);
  });
}
