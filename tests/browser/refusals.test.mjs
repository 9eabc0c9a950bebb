// Refusals sent before the request body is read reach the browser's fetch, repeated (the loss
// was a race): a large unauthenticated POST (401), the CSRF content-type rule (415) and an
// oversized body (413), over HTTP/2 (TLS, the server's generated certificate) and HTTP/1.1.
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { launch, newPage, startServer, token } from "./harness.mjs";

const ROUNDS = 20;
const MiB = 1 << 20;

describe("refusals in the browser", () => {
  const cleanup = [];
  after(async () => {
    for (const c of cleanup.reverse()) await c();
  });

  for (const tls of [true, false]) {
    it(`every refusal arrives over ${tls ? "HTTP/2 (TLS)" : "HTTP/1.1"}`, async () => {
      const server = await startServer({ tls });
      cleanup.push(() => server.stop());
      const browser = await launch();
      cleanup.push(() => browser.close());
      const page = await newPage(browser, { ignoreHTTPSErrors: true });
      await page.goto(`${server.url}login`);
      const adminToken = tls ? null : await token(server);
      const bearer = adminToken ?? (await page.evaluate(async () => {
        const r = await fetch("/api/v1/session", {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ username: "admin", password: "admin-password-1" }),
        });
        return (await r.json()).token;
      }));
      const cases = [
        { name: "unauthenticated 3 MiB", headers: { "Content-Type": "application/json" }, size: 3 * MiB, status: 401, message: /without a valid session/ },
        { name: "CSRF content type", headers: { "Content-Type": "text/plain" }, size: MiB, status: 415, message: /unsupported content type/, cookie: true },
        { name: "over --max-body-bytes", headers: { "Content-Type": "application/json", Authorization: `Bearer ${bearer}` }, size: 3 * MiB, status: 413, message: /larger than/ },
      ];
      const results = await page.evaluate(
        async ({ cases, rounds }) => {
          const out = [];
          for (const c of cases) {
            for (let i = 0; i < rounds; i++) {
              try {
                const r = await fetch("/api/v1/applications", {
                  method: "POST",
                  headers: c.headers,
                  body: "x".repeat(c.size),
                  credentials: c.cookie ? "include" : "omit",
                });
                const text = await r.text();
                const entry = performance.getEntriesByType("resource").at(-1);
                out.push({ name: c.name, status: r.status, text, protocol: entry?.nextHopProtocol });
              } catch (err) {
                out.push({ name: c.name, error: String(err) });
              }
            }
          }
          return out;
        },
        { cases: cases.map(({ message, status, ...c }) => c), rounds: ROUNDS },
      );
      assert.equal(results.length, cases.length * ROUNDS);
      for (const c of cases) {
        const mine = results.filter((r) => r.name === c.name);
        for (const r of mine) {
          assert.equal(r.error, undefined, `${c.name}: ${r.error}`);
          assert.equal(r.status, c.status, `${c.name}: ${JSON.stringify(r)}`);
          assert.match(JSON.parse(r.text).message, c.message, c.name);
        }
        if (tls) assert.ok(mine.some((r) => r.protocol === "h2"), `${c.name} went over HTTP/2: ${mine[0].protocol}`);
      }
      assert.deepEqual(page.problems.filter((p) => !/status of 41[35]/.test(p)), []);
    });
  }
});
