// Swagger UI (/swagger-ui) with the server's default Content-Security-Policy, at the root and
// under --rootpath: the page loads the server's own /swagger.json and lists its operations, with
// no console error (a CSP refusal is one) and no request outside the server's prefix.
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { launch, newPage, shot, startServer } from "./harness.mjs";

for (const rootpath of ["", "/tiphys"]) {
  describe(`Swagger UI ${rootpath ? "under --rootpath" : "at the root"}`, () => {
    const cleanup = [];
    after(async () => {
      for (const c of cleanup.reverse()) await c();
    });

    it("lists the server's operations under the default CSP", async () => {
      const server = await startServer(rootpath ? { rootpath } : {});
      cleanup.push(() => server.stop());
      const browser = await launch();
      cleanup.push(() => browser.close());
      const page = await newPage(browser);
      const outside = [];
      page.on("request", (req) => {
        if (!req.url().startsWith(server.url)) outside.push(req.url());
      });
      const response = await page.goto(`${server.url}swagger-ui`);
      assert.equal(response.status(), 200);
      const csp = response.headers()["content-security-policy"];
      assert.match(csp, /script-src 'self';/, "the default policy, no inline scripts");
      assert.match(csp, /style-src 'self';/, "the default policy, no inline styles");
      await page.locator(".opblock-summary-path", { hasText: "/api/v1/applications/{name}" }).first().waitFor();
      const operations = await page.locator(".opblock").count();
      assert.ok(operations > 40, `${operations} operations listed`);
      // An operation opens and shows its parameters.
      await page.locator("#operations-ApplicationService-ApplicationService_Get .opblock-summary").click();
      await page.locator("#operations-ApplicationService-ApplicationService_Get .parameters").waitFor();
      await shot(page, `swagger-ui${rootpath.replace("/", "-")}`);
      assert.deepEqual(outside, [], "every request stayed under the prefix");
      assert.deepEqual(page.problems, []);
    });
  });
}
