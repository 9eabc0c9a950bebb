// The live application stream: `GET api/v1/stream/applications` read with fetch (so the HTTP
// status of a failure is known), reconnecting with backoff and resuming from the last
// resourceVersion seen; a resume the server refuses (too old) starts over with a fresh list.
import type { WatchEvent } from "./types";
import { apiUrl, notifyUnauthorized, query } from "./http";
import { backoffDelay, SseParser } from "../lib/sse";

export interface WatchOptions {
  /** Extra query parameters (name, appNamespace, projects, fields). */
  params: Record<string, string | string[] | undefined>;
  /** Resume point; empty: the server sends ADDED for every application first. */
  resourceVersion?: string;
  onEvents: (events: WatchEvent[]) => void;
  /** The stream cannot resume: reload the list, then call `resume(rv)`. */
  onResync: () => void;
  onStatus?: (connected: boolean) => void;
}

export class AppWatch {
  private abort = new AbortController();
  private stopped = false;
  private attempt = 0;
  private rv: string | undefined;

  constructor(private readonly opts: WatchOptions) {
    this.rv = opts.resourceVersion;
    void this.loop();
  }

  stop(): void {
    this.stopped = true;
    this.abort.abort();
  }

  private async loop(): Promise<void> {
    while (!this.stopped) {
      const outcome = await this.once();
      if (this.stopped) return;
      this.opts.onStatus?.(false);
      if (outcome === "unauthorized") {
        notifyUnauthorized();
        return;
      }
      if (outcome === "resync") {
        this.stop();
        this.opts.onResync();
        return;
      }
      if (outcome === "ok") this.attempt = 0;
      const delay = backoffDelay(this.attempt++);
      await new Promise((r) => setTimeout(r, delay));
    }
  }

  private async once(): Promise<"ok" | "error" | "resync" | "unauthorized"> {
    const url = apiUrl(`api/v1/stream/applications${query({ ...this.opts.params, resourceVersion: this.rv })}`);
    let res: Response;
    try {
      res = await fetch(url, {
        credentials: "same-origin",
        headers: { Accept: "text/event-stream" },
        signal: this.abort.signal,
      });
    } catch {
      return "error";
    }
    if (res.status === 401) return "unauthorized";
    // Aborted (409: too old) or invalid (400: ahead of the server, e.g. after a restore).
    if ((res.status === 409 || res.status === 400) && this.rv) return "resync";
    if (!res.ok || !res.body) return "error";
    this.opts.onStatus?.(true);
    let pending: WatchEvent[] = [];
    let scheduled = false;
    let outcome: "ok" | "resync" | "unauthorized" = "ok";
    const flush = () => {
      scheduled = false;
      const batch = pending;
      pending = [];
      if (batch.length > 0 && !this.stopped) this.opts.onEvents(batch);
    };
    const parser = new SseParser((data) => {
      let msg: { result?: WatchEvent; error?: { http_code?: number } };
      try {
        msg = JSON.parse(data);
      } catch {
        return;
      }
      if (msg.error) {
        if (msg.error.http_code === 401) outcome = "unauthorized";
        else if (msg.error.http_code === 409 || msg.error.http_code === 410) outcome = "resync";
        return;
      }
      const ev = msg.result;
      if (!ev?.application) return;
      const rv = ev.application.metadata?.resourceVersion;
      if (rv && (!this.rv || Number(rv) > Number(this.rv))) this.rv = rv;
      pending.push(ev);
      // One repaint per frame however many events arrive.
      if (!scheduled) {
        scheduled = true;
        requestAnimationFrame(flush);
      }
    });
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        parser.push(value);
        this.attempt = 0;
        if (outcome !== "ok") break;
      }
    } catch {
      // connection dropped or aborted
    } finally {
      flush();
      reader.cancel().catch(() => {});
    }
    return outcome;
  }
}
