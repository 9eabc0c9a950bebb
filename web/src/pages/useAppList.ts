// The list page's data: every visible application, kept current by the watch stream.
import { useEffect, useRef, useState } from "preact/hooks";
import { listApps, WATCH_FIELDS } from "../api/apps";
import { errorText } from "../api/http";
import type { Application } from "../api/types";
import { AppWatch } from "../api/watch";
import { appKey, applyEvents } from "../lib/apps";

export interface AppListState {
  apps: Application[];
  loading: boolean;
  error?: string;
  live: boolean;
  /** Increases on every change (for memoising derived data). */
  version: number;
}

export function useAppList(): AppListState {
  const map = useRef(new Map<string, Application>());
  const sorted = useRef<Application[]>([]);
  const [state, setState] = useState<AppListState>({ apps: [], loading: true, live: false, version: 0 });

  useEffect(() => {
    let watch: AppWatch | undefined;
    let cancelled = false;
    const ctl = new AbortController();

    const publish = (membershipChanged: boolean) => {
      if (membershipChanged) {
        const keys = [...map.current.keys()].sort();
        sorted.current = keys.map((k) => map.current.get(k)!);
      } else {
        sorted.current = sorted.current.map((a) => map.current.get(appKey(a)) ?? a);
      }
      setState((s) => ({ ...s, apps: sorted.current, loading: false, version: s.version + 1 }));
    };

    const start = async () => {
      try {
        const list = await listApps(ctl.signal);
        if (cancelled) return;
        map.current = new Map((list.items ?? []).map((a) => [appKey(a), a]));
        publish(true);
        setState((s) => ({ ...s, error: undefined }));
        watch = new AppWatch({
          params: { fields: WATCH_FIELDS.join(",") },
          resourceVersion: list.metadata?.resourceVersion,
          onEvents: (events) => {
            const before = map.current.size;
            const keysBefore = events.some((e) => e.type !== "MODIFIED") || !events.every((e) => map.current.has(appKey(e.application)));
            if (applyEvents(map.current, events)) publish(keysBefore || map.current.size !== before);
          },
          onResync: () => void start(),
          onStatus: (live) => setState((s) => ({ ...s, live })),
        });
      } catch (err) {
        if (!cancelled) setState((s) => ({ ...s, loading: false, error: errorText(err) }));
      }
    };
    void start();
    return () => {
      cancelled = true;
      ctl.abort();
      watch?.stop();
    };
  }, []);

  return state;
}
