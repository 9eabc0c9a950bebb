// The live list survives a server restart: the stream drops, the page shows it is offline,
// reconnects with backoff when the server is back, and shows changes made after the restart;
// a session revoked meanwhile sends the page to the login.
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { api, cli, launch, login, newPage, shot, startServer, token } from "./harness.mjs";

const REPO = "https://github.com/argoproj/argocd-example-apps.git";

describe("the live list across a server restart", () => {
  const cleanup = [];
  after(async () => {
    for (const c of cleanup.reverse()) await c();
  });

  it("reconnects and resumes", async () => {
    let server = await startServer();
    cleanup.push(() => server.stop());
    const adminToken = await token(server);
    await api(server, adminToken, "POST", "api/v1/applications", {
      metadata: { name: "survivor" },
      spec: { destination: { server: "https://kubernetes.default.svc", namespace: "default" }, source: { repoURL: REPO, path: "before" } },
    });
    const browser = await launch();
    cleanup.push(() => browser.close());
    const page = await newPage(browser);
    await login(page, server);
    const tile = page.locator('[data-app="survivor"]');
    await tile.waitFor();
    await page.getByTestId("live").filter({ hasText: "Live" }).waitFor();

    const { port, dir } = server;
    await server.stop({ keep: true });
    await page.getByTestId("live").filter({ hasText: "Offline" }).waitFor();
    await shot(page, "40-offline");
    server = await startServer({ port, dir });
    // The session survives the restart (same key), so the CLI token still works.
    await cli(server, adminToken, "app", "set", "survivor", "--path", "after-restart");
    await page.getByTestId("live").filter({ hasText: "Live" }).waitFor({ timeout: 20000 });
    await tile.locator('[data-field="source"]').filter({ hasText: "after-restart" }).waitFor({ timeout: 20000 });
    assert.equal(page.url(), `${server.url}applications`, "no reload, no login");

    // The session is revoked elsewhere: the stream ends and the page asks for a login.
    const cookies = await page.context().cookies();
    const header = cookies.map((c) => `${c.name}=${c.value}`).join("; ");
    const res = await fetch(`${server.url}auth/logout`, { headers: { Cookie: header }, redirect: "manual" });
    assert.equal(res.status, 303);
    await cli(server, adminToken, "app", "set", "survivor", "--path", "after-logout");
    await page.waitForURL(/\/login\?return_url=/, { timeout: 20000 });
    assert.equal(await tile.count(), 0);
  });
});
