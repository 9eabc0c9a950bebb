// A minimal `text/event-stream` parser (only `data:` lines matter for the watch API).

/** Feeds chunks of text; calls `onData` with the joined data of each complete event. */
export class SseParser {
  private buffer = "";
  private data: string[] = [];

  constructor(private readonly onData: (data: string) => void) {}

  push(chunk: string): void {
    this.buffer += chunk;
    let nl: number;
    while ((nl = this.buffer.indexOf("\n")) >= 0) {
      let line = this.buffer.slice(0, nl);
      this.buffer = this.buffer.slice(nl + 1);
      if (line.endsWith("\r")) line = line.slice(0, -1);
      this.line(line);
    }
  }

  private line(line: string): void {
    if (line === "") {
      if (this.data.length > 0) {
        const joined = this.data.join("\n");
        this.data = [];
        this.onData(joined);
      }
      return;
    }
    if (line.startsWith(":")) return; // keepalive comment
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") this.data.push(value);
  }
}

/** Reconnect delays: exponential from 500 ms, capped at 15 s, with up to 20% jitter. */
export function backoffDelay(attempt: number, random: () => number = Math.random): number {
  const base = Math.min(15000, 500 * 2 ** Math.max(0, attempt));
  return Math.round(base * (1 - 0.2 * random()));
}
