import { test } from "node:test";
import assert from "node:assert/strict";
import { backoffDelay, SseParser } from "../src/lib/sse";

test("SSE frames split anywhere are reassembled; keepalives are skipped", () => {
  const got: string[] = [];
  const p = new SseParser((d) => got.push(d));
  // The server's framing: `data: {...} \n\n` then the gateway's extra `\n`, keepalive `:\n`.
  const stream = ':\ndata: {"result":{"type":"ADDED"}} \n\n\n:\ndata: {"result":{"type":"MODIFIED"}} \n\n\n';
  for (let i = 0; i < stream.length; i += 7) p.push(stream.slice(i, i + 7));
  assert.deepEqual(got.map((d) => JSON.parse(d).result.type), ["ADDED", "MODIFIED"]);
});

test("CRLF line ends and multi-line data", () => {
  const got: string[] = [];
  const p = new SseParser((d) => got.push(d));
  p.push("data: a\r\ndata: b\r\n\r\nevent: x\ndata:c\n\n");
  assert.deepEqual(got, ["a\nb", "c"]);
});

test("an incomplete event is not delivered", () => {
  const got: string[] = [];
  const p = new SseParser((d) => got.push(d));
  p.push('data: {"x":1}\n');
  assert.deepEqual(got, []);
  p.push("\n");
  assert.deepEqual(got, ['{"x":1}']);
});

test("backoff grows exponentially, is capped, and has bounded jitter", () => {
  const none = () => 0;
  assert.deepEqual([0, 1, 2, 3].map((a) => backoffDelay(a, none)), [500, 1000, 2000, 4000]);
  assert.equal(backoffDelay(20, none), 15000);
  assert.equal(backoffDelay(20, () => 1), 12000);
  for (let i = 0; i < 100; i++) {
    const d = backoffDelay(3);
    assert.ok(d >= 3200 && d <= 4000, String(d));
  }
});
