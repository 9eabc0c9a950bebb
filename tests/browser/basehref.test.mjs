// The dashboard under a path prefix: `--rootpath` (the server serves under the prefix) and
// `--basehref` (a proxy strips the prefix). Links, API calls, the live stream, login and logout
// all stay under the prefix.
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { api, cli, launch, login, newPage, shot, startPrefixProxy, startServer, token } from "./harness.mjs";

const REPO = "https://github.com/argoproj/argocd-example-apps.git";

for (const mode of ["rootpath", "basehref"]) {
  describe(`the dashboard under --${mode}`, () => {
    const cleanup = [];
    after(async () => {
      for (const c of cleanup.reverse()) await c();
    });

    it("logs in, lists, follows live changes and logs out under the prefix", async () => {
      const backend = await startServer(mode === "rootpath" ? { rootpath: "/tiphys" } : { basehref: "/ui/" });
      cleanup.push(() => backend.stop());
      let server = backend;
      if (mode === "basehref") {
        server = await startPrefixProxy(backend, "/ui/");
        cleanup.push(() => server.stop());
      }
      const adminToken = await token(server);
      await api(server, adminToken, "POST", "api/v1/applications", {
        metadata: { name: "prefixed" },
        spec: { destination: { server: "https://kubernetes.default.svc", namespace: "default" }, source: { repoURL: REPO, path: "guestbook" } },
      });
      const browser = await launch();
      cleanup.push(() => browser.close());
      const page = await newPage(browser);
      const outside = [];
      page.on("request", (req) => {
        if (!req.url().startsWith(server.url)) outside.push(req.url());
      });
      await page.goto(server.url);
      await page.waitForURL(`${server.url}login?**`);
      await login(page, server);
      const tile = page.locator('[data-app="prefixed"]');
      await tile.waitFor();
      await page.getByTestId("live").filter({ hasText: "Live" }).waitFor();
      await cli(backend, adminToken, "app", "set", "prefixed", "--path", "moved");
      await tile.locator('[data-field="source"]').filter({ hasText: "moved" }).waitFor({ timeout: 5000 });
      await tile.getByRole("link", { name: "prefixed" }).click();
      await page.waitForURL(`${server.url}applications/argocd/prefixed`);
      await shot(page, `30-${mode}-details`);
      // A full reload of a deep link works (the SPA fallback under the prefix).
      await page.reload();
      await page.getByTestId("app-name").waitFor();
      await page.getByTestId("logout").click();
      await page.waitForURL(`${server.url}login**`);
      assert.deepEqual(outside, [], "every request stayed under the prefix");
      assert.deepEqual(page.problems, []);
    });
  });
}
