// The application list's own logic: keys, filters, their URL form and the server's form.
import type { Application } from "../api/types";

export function appKey(app: Application): string {
  return `${app.metadata.namespace ?? ""}/${app.metadata.name}`;
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

/**
 * The filters as the server's list takes them: `filter=field=value` per chosen value, the
 * search text (names), and the labels as a label selector.
 */
export function serverQuery(f: AppFilters): Record<string, string | string[] | undefined> {
  const pairs = (field: string, values: string[]) => values.map((v) => `${field}=${v}`);
  return {
    filter: [
      ...pairs("project", f.projects),
      ...pairs("sync", f.sync),
      ...pairs("health", f.health),
      ...pairs("cluster", f.clusters),
      ...pairs("namespace", f.namespaces),
    ],
    search: f.search.trim() || undefined,
    selector: f.labels.map((l) => l.trim()).filter(Boolean).join(",") || undefined,
  };
}

/** The destination cluster an application names: its server URL, or its cluster name. */
export function appCluster(app: Application): string {
  const d = app.spec?.destination ?? {};
  return d.server || d.name || "";
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
