// The application list cut by the server (tiphys's pages, filters and facets): with more
// applications than one page holds, the page loads the first page only, counts every
// application from the server's facets, loads the next page as the list scrolls to its end,
// filters on the server with the counts beside each value, and keeps the loaded pages live.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { api, cli, launch, login, newPage, shot, startServer, token } from "./harness.mjs";

const REPO = "https://github.com/argoproj/argocd-example-apps.git";
const APPS = 450; // more than two pages of 200
const name = (i) => `many-${String(i).padStart(3, "0")}`;

describe("the application list at more than a page", () => {
  let server, browser, page, adminToken;
  const lists = [];

  before(async () => {
    server = await startServer();
    adminToken = await token(server);
    let next = 0;
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        while (next < APPS) {
          const i = next++;
          await api(server, adminToken, "POST", "api/v1/applications", {
            metadata: { name: name(i) },
            spec: {
              destination: { server: "https://kubernetes.default.svc", namespace: i % 3 === 0 ? "blue" : "green" },
              source: { repoURL: REPO, path: "guestbook" },
            },
          });
        }
      }),
    );
    browser = await launch();
    page = await newPage(browser);
    page.on("request", (req) => {
      const url = new URL(req.url());
      if (url.pathname.endsWith("/api/v1/applications")) lists.push(url.searchParams);
    });
    await login(page, server);
  });
  after(async () => {
    await browser?.close();
    await server?.stop();
  });

  it("loads one page, counts them all, and loads the next page at the end", async () => {
    await page.getByTestId("app-count").filter({ hasText: `${APPS} of ${APPS}` }).waitFor();
    await page.getByRole("button", { name: "Table" }).click();
    await page.locator(`[data-app="${name(0)}"]`).waitFor();
    assert.ok(lists.some((q) => q.get("limit") === "200"), "the list asks for a page");
    assert.ok(!lists.some((q) => !q.get("limit")), "and never for the whole list");
    const region = page.getByRole("region", { name: "Application rows" });
    for (let i = 0; i < 40 && (await page.locator(`[data-app="${name(APPS - 1)}"]`).count()) === 0; i++) {
      await region.evaluate((el) => el.scrollBy(0, el.scrollHeight));
      await page.waitForTimeout(150);
    }
    await page.locator(`[data-app="${name(APPS - 1)}"]`).waitFor();
    assert.ok(lists.some((q) => q.get("continue")), "the later pages follow the continue token");
    await shot(page, "pages-01-scrolled");
  });

  it("filters on the server, shows each value's count, and stays live", async () => {
    const blue = Math.ceil(APPS / 3);
    const option = page.getByRole("checkbox", { name: "blue" });
    await option.waitFor();
    const label = page.locator("label.check", { has: option });
    assert.equal((await label.locator(".count").textContent()).trim(), String(blue));
    await option.check();
    await page.getByTestId("app-count").filter({ hasText: `${blue} of ${APPS}` }).waitFor();
    assert.ok(lists.some((q) => q.getAll("filter").includes("namespace=blue")), "the filter goes to the server");
    assert.equal(await page.locator(`[data-app="${name(1)}"]`).count(), 0, "a green one is not shown");
    await cli(server, adminToken, "app", "create", "late-blue", "--repo", REPO, "--path", "guestbook",
      "--dest-server", "https://kubernetes.default.svc", "--dest-namespace", "blue");
    await page.getByTestId("app-count").filter({ hasText: `${blue + 1} of ${APPS + 1}` }).waitFor({ timeout: 5000 });
    await shot(page, "pages-02-filtered");
    // Newest first: the one just created leads.
    await page.getByLabel("Sort applications").selectOption("-created");
    await page.waitForURL(/sort=-created/);
    await page.locator('.trow[data-app]').first().filter({ hasText: "late-blue" }).waitFor({ timeout: 5000 });
    assert.ok(lists.some((q) => q.get("sort") === "-created"), "the sort goes to the server");
  });
});
