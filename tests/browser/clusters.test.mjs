// The clusters page shows what the server learnt contacting each cluster (issue 39, item 3): its
// state, the reason it failed, when it was checked, and "Check now". The server contacts clusters
// here (--cluster-access on); the cluster is a loopback port: first nobody listens there, then a
// TCP server that closes every connection at once. (Create would refuse such a cluster: it is
// stored by a server started with --cluster-access off, then shown by one with it on.) (A Successful state and the server version
// against a real API server: tests/e2e/test_cluster_state.py.)
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { api, freePort, launch, login, newPage, shot, startServer, token } from "./harness.mjs";

describe("clusters page", () => {
  let server, browser, page, adminToken, port, closer;

  before(async () => {
    // Create asks a cluster its version before it stores it, so the unreachable cluster is
    // stored by a server that contacts none, and the page is shown by one that does, on the
    // same data.
    port = await freePort();
    const storing = await startServer();
    await api(storing, await token(storing), "POST", "api/v1/clusters", {
      name: "nowhere",
      server: `https://127.0.0.1:${port}`,
      config: { bearerToken: "cluster-secret-token", tlsClientConfig: { insecure: true } },
    });
    await storing.stop({ keep: true });
    server = await startServer({ dir: storing.dir, args: ["--cluster-access", "on", "--cluster-timeout", "5s"] });
    adminToken = await token(server);
    browser = await launch();
    page = await newPage(browser);
  });
  after(async () => {
    closer?.close();
    await browser?.close();
    await server?.stop();
  });

  it("shows why a cluster cannot be reached, and checks it again on request", async () => {
    const url = `https://127.0.0.1:${port}`;
    const stored = await api(server, adminToken, "GET", "api/v1/clusters");
    assert.ok(stored.items.some((c) => c.server === url), "the cluster is on the restarted server");
    await login(page, server);
    await page.getByRole("link", { name: "Clusters" }).click();
    const conn = page.getByTestId(`conn-${url}`);
    // A list does not wait for a first check: the page asks again until it is done.
    await conn.getByText("Failed").waitFor();
    await conn.getByText(`Unable to connect to cluster ${url}`).waitFor();
    assert.match(await conn.innerText(), /connection was refused/);
    assert.match(await conn.innerText(), /checked /);
    assert.equal(await page.getByTestId(`version-${url}`).innerText(), "–");
    assert.ok(!(await page.content()).includes("cluster-secret-token"), "the token is never on the page");
    await shot(page, "30-cluster-failed");

    // Something listens now, and closes every connection: "Check now" shows the new reason.
    closer = createServer((socket) => socket.destroy());
    await new Promise((resolve) => closer.listen(port, "127.0.0.1", resolve));
    await page.getByRole("button", { name: "Check cluster nowhere now" }).click();
    await page.waitForFunction(
      (id) => {
        const el = document.querySelector(`[data-testid="${id}"]`);
        return el && !/connection was refused/.test(el.textContent) && /Failed/.test(el.textContent);
      },
      `conn-${url}`,
    );
    assert.doesNotMatch(await conn.innerText(), /connection was refused/);
    assert.deepEqual(page.problems, []);
  });
});
