// Data hooks: a GET that can be reloaded, and `can-i` answers cached for the page's life.
import { useCallback, useEffect, useState } from "preact/hooks";
import { get, errorText } from "../api/http";

export interface Loaded<T> {
  data?: T;
  error?: string;
  loading: boolean;
  reload: () => void;
}

export function useGet<T>(path: string | undefined): Loaded<T> {
  const [state, setState] = useState<{ data?: T; error?: string; loading: boolean }>({ loading: true });
  const [tick, setTick] = useState(0);
  useEffect(() => {
    if (!path) return;
    const ctl = new AbortController();
    setState((s) => ({ ...s, loading: true }));
    get<T>(path, ctl.signal).then(
      (data) => setState({ data, loading: false }),
      (err) => {
        if (!ctl.signal.aborted) setState({ error: errorText(err), loading: false });
      },
    );
    return () => ctl.abort();
  }, [path, tick]);
  const reload = useCallback(() => setTick((t) => t + 1), []);
  return { ...state, reload };
}

const canCache = new Map<string, Promise<boolean>>();

/** Forgets cached answers (after login/logout). */
export function resetCan(): void {
  canCache.clear();
}

/** `GET api/v1/account/can-i/{resource}/{action}/{subresource}`; undefined while asking. */
export function useCan(resource: string, action: string, subresource: string): boolean | undefined {
  const key = `${resource}/${action}/${subresource}`;
  const [answer, setAnswer] = useState<boolean | undefined>(undefined);
  useEffect(() => {
    let live = true;
    let p = canCache.get(key);
    if (!p) {
      const path = `api/v1/account/can-i/${encodeURIComponent(resource)}/${encodeURIComponent(action)}/${subresource
        .split("/")
        .map(encodeURIComponent)
        .join("/")}`;
      p = get<{ value?: string }>(path).then(
        (r) => r.value === "yes",
        () => false,
      );
      canCache.set(key, p);
    }
    setAnswer(undefined);
    void p.then((v) => live && setAnswer(v));
    return () => {
      live = false;
    };
  }, [key]);
  return answer;
}
