// The application list's own logic: keys, merging watch events, filters and their URL form.
import type { Application, WatchEvent } from "../api/types";

export function appKey(app: Application): string {
  return `${app.metadata.namespace ?? ""}/${app.metadata.name}`;
}

/**
 * Applies watch events to the list in place. Returns whether anything changed.
 * `DELETED` removes; `ADDED`/`MODIFIED` insert or replace, unless the event carries an
 * older resourceVersion than what we hold (a resumed stream may repeat one).
 */
export function applyEvents(apps: Map<string, Application>, events: WatchEvent[]): boolean {
  let changed = false;
  for (const ev of events) {
    const app = ev.application;
    if (!app?.metadata?.name) continue;
    const key = appKey(app);
    if (ev.type === "DELETED") {
      changed = apps.delete(key) || changed;
      continue;
    }
    const held = apps.get(key);
    const rvNew = Number(app.metadata.resourceVersion);
    const rvOld = Number(held?.metadata.resourceVersion);
    if (held && Number.isFinite(rvNew) && Number.isFinite(rvOld) && rvNew < rvOld) continue;
    apps.set(key, app);
    changed = true;
  }
  return changed;
}

export interface AppFilters {
  search: string;
  projects: string[];
  sync: string[];
  health: string[];
  /** `key=value` or `key` (label present). */
  labels: string[];
  clusters: string[];
  namespaces: string[];
}

export const emptyFilters = (): AppFilters => ({
  search: "",
  projects: [],
  sync: [],
  health: [],
  labels: [],
  clusters: [],
  namespaces: [],
});

const LIST_KEYS = ["projects", "sync", "health", "labels", "clusters", "namespaces"] as const;

/** Filters from the page's query string (`?proj=a&proj=b&sync=Synced&search=x`). */
export function filtersFromQuery(params: URLSearchParams): AppFilters {
  const f = emptyFilters();
  f.search = params.get("search") ?? "";
  for (const key of LIST_KEYS) f[key] = params.getAll(key).filter(Boolean);
  return f;
}

export function filtersToQuery(f: AppFilters, into = new URLSearchParams()): URLSearchParams {
  into.delete("search");
  if (f.search) into.set("search", f.search);
  for (const key of LIST_KEYS) {
    into.delete(key);
    for (const v of f[key]) into.append(key, v);
  }
  return into;
}

export function activeFilterCount(f: AppFilters): number {
  return LIST_KEYS.reduce((n, k) => n + f[k].length, 0) + (f.search ? 1 : 0);
}

/** The destination cluster an application names: its server URL, or its cluster name. */
export function appCluster(app: Application): string {
  const d = app.spec?.destination ?? {};
  return d.server || d.name || "";
}

function labelMatches(labels: Record<string, string> | undefined, want: string): boolean {
  const eq = want.indexOf("=");
  if (eq < 0) return labels !== undefined && want.trim() in labels;
  const key = want.slice(0, eq).trim();
  const value = want.slice(eq + 1).trim();
  return labels?.[key] === value;
}

/** A predicate for the filters; the search matches name, namespace, project and repository. */
export function appMatcher(f: AppFilters): (app: Application) => boolean {
  const search = f.search.trim().toLowerCase();
  const inList = (list: string[], v: string) => list.length === 0 || list.includes(v);
  return (app) => {
    const spec = app.spec ?? {};
    const status = app.status ?? {};
    if (!inList(f.projects, spec.project || "default")) return false;
    if (!inList(f.sync, status.sync?.status || "Unknown")) return false;
    if (!inList(f.health, status.health?.status || "Unknown")) return false;
    if (f.clusters.length > 0) {
      const d = spec.destination ?? {};
      if (!f.clusters.some((c) => c === d.server || c === d.name)) return false;
    }
    if (!inList(f.namespaces, spec.destination?.namespace ?? "")) return false;
    if (!f.labels.every((l) => labelMatches(app.metadata.labels, l))) return false;
    if (search) {
      const hay = [app.metadata.name, app.metadata.namespace, spec.project, ...appRepos(app)]
        .filter(Boolean)
        .join(" ")
        .toLowerCase();
      if (!hay.includes(search)) return false;
    }
    return true;
  };
}

export function appRepos(app: Application): string[] {
  const spec = app.spec ?? {};
  const sources = spec.sources?.length ? spec.sources : spec.source ? [spec.source] : [];
  return sources.map((s) => s.repoURL ?? "").filter(Boolean);
}

/** Sorted distinct values, for the filter menus. */
export function distinct(apps: Iterable<Application>, pick: (a: Application) => string[]): string[] {
  const seen = new Set<string>();
  for (const a of apps) for (const v of pick(a)) if (v) seen.add(v);
  return [...seen].sort();
}
