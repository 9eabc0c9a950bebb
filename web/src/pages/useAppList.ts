// The list page's data, cut by the server (tiphys's pages, filters and facets): the first page
// of the applications the filters select, more pages as the user scrolls, the facet counts, and
// a watch with the same filters that keeps what is loaded current. Only what was loaded is in
// memory, so 100,000 applications cost the page no more than a few hundred.
import { useEffect, useRef, useState } from "preact/hooks";
import { listPage, WATCH_FIELDS } from "../api/apps";
import { errorText } from "../api/http";
import type { Application, Facet } from "../api/types";
import { AppWatch } from "../api/watch";
import { appKey, serverQuery, type AppFilters } from "../lib/apps";

/** Applications per page. */
export const PAGE = 200;
/** How long changes gather before what is loaded is read again. */
const SETTLE_MS = 400;

export interface AppListState {
  apps: Application[];
  loading: boolean;
  error?: string;
  live: boolean;
  /** Increases on every change (for memoising derived data). */
  version: number;
  /** How many applications the filters select, and how many the caller may see in all. */
  matching: number;
  total: number;
  facets: Facet[];
  /** More pages follow. */
  more: boolean;
  loadMore: () => void;
}

/** How many applications a reply's facets say the filters select: every application has one sync status. */
function matchingOf(facets: Facet[] | undefined, filters: AppFilters, shown: number): number {
  const sync = facets?.find((f) => f.field === "sync");
  if (!sync) return shown;
  return (sync.values ?? [])
    .filter((v) => filters.sync.length === 0 || filters.sync.includes(v.value))
    .reduce((n, v) => n + v.count, 0);
}

export function useAppList(filters: AppFilters, sort: string, key: string): AppListState {
  const [state, setState] = useState<Omit<AppListState, "loadMore">>({
    apps: [],
    loading: true,
    live: false,
    version: 0,
    matching: 0,
    total: 0,
    facets: [],
    more: false,
  });
  const next = useRef<string | undefined>(undefined);
  const loaded = useRef<Application[]>([]);
  const loadingMore = useRef(false);
  const filterParams = serverQuery(filters);
  const params = { ...filterParams, sort };

  useEffect(() => {
    let watch: AppWatch | undefined;
    let cancelled = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const ctl = new AbortController();
    const filtered = Object.values(filterParams).some((v) => (Array.isArray(v) ? v.length > 0 : Boolean(v)));

    /** Reads the first `size` applications again, with the counts. */
    const load = async (size: number) => {
      const [page, all] = await Promise.all([
        listPage(params, size, { facets: true, signal: ctl.signal }),
        filtered ? listPage({}, 1, { facets: true, signal: ctl.signal }) : undefined,
      ]);
      if (cancelled) return page;
      loaded.current = page.items ?? [];
      next.current = page.metadata?.continue || undefined;
      const matching = matchingOf(page.facets, filters, loaded.current.length);
      setState((s) => ({
        ...s,
        apps: loaded.current,
        loading: false,
        error: undefined,
        matching,
        total: all ? matchingOf(all.facets, { ...filters, sync: [] }, 0) : matching,
        facets: page.facets ?? [],
        more: Boolean(next.current),
        version: s.version + 1,
      }));
      return page;
    };

    const start = async () => {
      try {
        const page = await load(PAGE);
        if (cancelled) return;
        watch = new AppWatch({
          params: { ...filterParams, fields: WATCH_FIELDS.join(",") },
          resourceVersion: page.metadata?.resourceVersion,
          onEvents: (events) => {
            // What is on screen changes at once; membership and counts follow once the
            // changes settle.
            const byKey = new Map(events.filter((e) => e.type === "MODIFIED").map((e) => [appKey(e.application), e.application]));
            if (byKey.size > 0) {
              loaded.current = loaded.current.map((a) => byKey.get(appKey(a)) ?? a);
              setState((s) => ({ ...s, apps: loaded.current, version: s.version + 1 }));
            }
            clearTimeout(timer);
            timer = setTimeout(() => void load(Math.max(PAGE, loaded.current.length)).catch(() => undefined), SETTLE_MS);
          },
          onResync: () => void start(),
          onStatus: (live) => setState((s) => ({ ...s, live })),
        });
      } catch (err) {
        if (!cancelled) setState((s) => ({ ...s, loading: false, error: errorText(err) }));
      }
    };
    setState((s) => ({ ...s, loading: s.version === 0 }));
    void start();
    return () => {
      cancelled = true;
      clearTimeout(timer);
      ctl.abort();
      watch?.stop();
    };
  }, [key]);

  const loadMore = () => {
    const after = next.current;
    if (!after || loadingMore.current) return;
    loadingMore.current = true;
    listPage(params, PAGE, { after })
      .then((page) => {
        if (next.current !== after) return;
        const have = new Set(loaded.current.map(appKey));
        loaded.current = [...loaded.current, ...(page.items ?? []).filter((a) => !have.has(appKey(a)))];
        next.current = page.metadata?.continue || undefined;
        setState((s) => ({ ...s, apps: loaded.current, more: Boolean(next.current), version: s.version + 1 }));
      })
      .catch((err) => setState((s) => ({ ...s, error: errorText(err) })))
      .finally(() => {
        loadingMore.current = false;
      });
  };

  return { ...state, loadMore };
}
