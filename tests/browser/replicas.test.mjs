// The dashboard through haproxy in round robin over three tiphys replicas on one real etcd (one
// member, started here): haproxy terminates TLS (h2 to the browser) and balances every request
// on its own, with no stickiness, so consecutive requests of one page land on different replicas.
// Login, the application list, a live update made directly on single replicas, an application
// created with the form and synced: all must work as on one server. Then the spread is proven
// twice: from haproxy's log of the server that answered each request, and from each replica's
// own request counter (/metrics).
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { answered, api, launch, login, newPage, shot, startEtcd, startRoundRobin, startServer, token, waitFor } from "./harness.mjs";

const REPO = "https://github.com/argoproj/argocd-example-apps.git";
const REPLICAS = 3;
const DEST = { server: "https://kubernetes.default.svc", namespace: "default" };

describe("the dashboard through haproxy in round robin over replicas on etcd", () => {
  let etcd, lb, browser, page, adminToken;
  const replicas = [];
  let before_; // each replica's answered-request count once the browser starts
  let logged; // how many requests haproxy had logged then (its own readiness check)
  const direct = Array(REPLICAS).fill(0); // requests this test sends to a replica itself since then

  /** REST on one replica directly (not through haproxy), counted. */
  const on = (i, method, path, body) => {
    direct[i]++;
    return api(replicas[i], adminToken, method, path, body);
  };

  before(async () => {
    etcd = await startEtcd();
    // Same configuration (and server key) in every replica's own config dir, one etcd prefix.
    for (let i = 0; i < REPLICAS; i++) replicas.push(await startServer({ args: etcd.flags("/browser-replicas/") }));
    adminToken = await token(replicas[0]);
    await api(replicas[2], adminToken, "POST", "api/v1/applications", {
      metadata: { name: "made-before" },
      spec: { destination: DEST, source: { repoURL: REPO, path: "before" } },
    });
    lb = await startRoundRobin(replicas);
    browser = await launch();
    // haproxy's certificate is self-signed.
    page = await newPage(browser, { ignoreHTTPSErrors: true });
    before_ = await Promise.all(replicas.map(answered));
    logged = lb.requests().length;
  });
  after(async () => {
    await browser?.close();
    await lb?.stop();
    for (const r of replicas) await r.stop();
    await etcd?.stop();
  });

  it("logs in and lists the applications", async () => {
    await login(page, lb);
    assert.equal(await page.getByTestId("current-user").innerText(), "admin");
    await page.locator('[data-app="made-before"]').waitFor();
    await page.getByTestId("app-count").filter({ hasText: "1 of 1" }).waitFor();
    await shot(page, "50-replicas-list");
  });

  it("shows changes made directly on single replicas live", async () => {
    await page.getByTestId("live").filter({ hasText: "Live" }).waitFor();
    // Whichever replica holds the page's stream, the writes below are made on each of the others
    // too: the stream shows changes made anywhere.
    for (let i = 0; i < REPLICAS; i++) {
      const spec = { destination: DEST, source: { repoURL: REPO, path: `r${i}` } };
      await on(i, "POST", "api/v1/applications", { metadata: { name: `made-on-r${i}` }, spec });
      await page.locator(`[data-app="made-on-r${i}"]`).waitFor({ timeout: 5000 });
    }
    await page.getByTestId("app-count").filter({ hasText: `${REPLICAS + 1} of ${REPLICAS + 1}` }).waitFor();
    const app = await on(1, "GET", "api/v1/applications/made-before");
    app.spec.source.path = "changed-on-r1";
    await on(1, "PUT", "api/v1/applications/made-before", app);
    await page.locator('[data-app="made-before"] [data-field="source"]').filter({ hasText: "changed-on-r1" }).waitFor({ timeout: 5000 });
    await on(0, "DELETE", "api/v1/applications/made-on-r0");
    await page.locator('[data-app="made-on-r0"]').waitFor({ state: "detached", timeout: 5000 });
    await shot(page, "51-replicas-live");
  });

  it("creates an application with the form and syncs it", async () => {
    await page.getByTestId("new-app").click();
    await page.waitForURL(/applications\/new$/);
    await page.getByLabel("Name", { exact: true }).fill("made-in-ui");
    await page.getByLabel("Repository URL").fill(REPO);
    await page.getByLabel("Path", { exact: true }).fill("guestbook");
    await page.getByRole("button", { name: "Create" }).click();
    await page.waitForURL(/applications\/argocd\/made-in-ui$/);
    assert.equal(await page.getByTestId("app-name").innerText(), "made-in-ui");
    for (let i = 0; i < REPLICAS; i++) assert.equal((await on(i, "GET", "api/v1/applications/made-in-ui")).spec.source.path, "guestbook", `replica ${i}`);
    await page.getByTestId("sync").click();
    await page.getByTestId("confirm-sync").click();
    await page.getByTestId("operation-requested").getByText(/^Requested operation: admin asked for a sync/).waitFor();
    for (let i = 0; i < REPLICAS; i++) assert.ok((await on(i, "GET", "api/v1/applications/made-in-ui")).operation?.sync, `replica ${i} sees the sync`);
    await shot(page, "52-replicas-synced");
    // Back to the list, which shows the new application among the others.
    await page.goto(`${lb.url}applications`);
    await page.locator('[data-app="made-in-ui"]').waitFor();
    await page.getByTestId("app-count").filter({ hasText: `${REPLICAS + 1} of ${REPLICAS + 1}` }).waitFor();
    assert.deepEqual(page.problems, [], "no console errors or uncaught exceptions");
  });

  it("sent the requests round robin to every replica", async () => {
    // The page goes: its stream ends, and haproxy logs it. Then haproxy's log and the replicas'
    // own counts must agree exactly: each replica answered what haproxy logged for it and the
    // requests this test sent it directly, nothing else.
    await page.context().close();
    const sum = (xs) => xs.reduce((a, b) => a + b, 0);
    let after_, seen;
    await waitFor("haproxy to log every request the replicas answered through it", async () => {
      after_ = await Promise.all(replicas.map(answered));
      seen = lb.requests().slice(logged);
      return seen.length === sum(after_) - sum(before_) - sum(direct);
    }, 15000).catch(() => {}); // asserted below, with the numbers
    const perServer = Array(REPLICAS).fill(0);
    for (const r of seen) perServer[r.server]++;
    const apiCalls = seen.filter((r) => r.uri.includes("/api/v1/"));
    const apiPerServer = Array(REPLICAS).fill(0);
    for (const r of apiCalls) apiPerServer[r.server]++;
    const summary = JSON.stringify({ perServer, apiPerServer, direct, before: before_, after: after_ });
    for (let i = 0; i < REPLICAS; i++) {
      assert.equal(after_[i] - before_[i], perServer[i] + direct[i], `replica ${i}: requests answered vs logged by haproxy + sent directly: ${summary}`);
    }
    // Every replica answered a share of the dashboard's API calls (not just static files) ...
    assert.ok(seen.length >= 20, `too few requests through haproxy to judge: ${summary}`);
    for (let i = 0; i < REPLICAS; i++) assert.ok(apiPerServer[i] >= 3, `replica ${i} got too few API calls: ${summary}`);
    // ... in equal shares, as strict rotation gives (in the order the requests were balanced) ...
    assert.ok(Math.max(...perServer) - Math.min(...perServer) <= 1, `unequal shares: ${summary}`);
    // ... and successive API calls mostly went to different replicas (in the order they ended:
    // calls made at once may end in another order); per-connection stickiness would keep them on one.
    let changes = 0;
    for (let k = 1; k < apiCalls.length; k++) if (apiCalls[k].server !== apiCalls[k - 1].server) changes++;
    assert.ok(changes >= (apiCalls.length - 1) / 2, `API calls stayed on one replica: ${summary} ${JSON.stringify(apiCalls.map((r) => r.server))}`);
    // Nothing failed on the way (a 5xx, or a session haproxy cut: it logs -1 as the status).
    const failed = seen.filter((r) => r.status >= 500 || r.status < 0);
    assert.deepEqual(failed, [], `failed requests: ${summary}`);
  });
});
