// A UI served with --staticassets (Argo CD's own, in practice): its bundle injects <style>
// elements, which the default Content-Security-Policy lets through in that mode only. Scripts
// stay same-origin: an injected inline script still does not run. With the embedded dashboard's
// strict policy given explicitly, the same page is unstyled, so the test can tell the two apart.
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { launch, newPage, startServer, waitFor } from "./harness.mjs";

const STRICT = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'self'";

/** A directory with a page whose script injects a style and an inline script, as bundles do. */
function assets() {
  const dir = mkdtempSync(join(tmpdir(), "tiphys-assets-"));
  writeFileSync(
    join(dir, "index.html"),
    '<!doctype html><html><head><base href="/"><title>ui</title></head><body><p id="p">styled?</p><script src="app.js"></script></body></html>',
  );
  writeFileSync(
    join(dir, "app.js"),
    [
      'const style = document.createElement("style");',
      'style.textContent = "#p { color: rgb(1, 2, 3); }";',
      "document.head.appendChild(style);",
      'const inline = document.createElement("script");',
      'inline.textContent = "window.inlineRan = true;";',
      "document.head.appendChild(inline);",
      "window.loaded = true;",
    ].join("\n"),
  );
  return dir;
}

/** The paragraph's colour and whether the inline script ran, on `server`'s page. */
async function render(browser, server) {
  const page = await newPage(browser);
  const response = await page.goto(server.url);
  await waitFor("the page's script", () => page.evaluate(() => window.loaded === true));
  const color = await page.evaluate(() => getComputedStyle(document.getElementById("p")).color);
  const inlineRan = await page.evaluate(() => window.inlineRan === true);
  await page.close();
  return { csp: response.headers()["content-security-policy"], color, inlineRan };
}

describe("--staticassets and the Content-Security-Policy", () => {
  const cleanup = [];
  after(async () => {
    for (const c of cleanup.reverse()) await c();
  });

  it("lets the bundle's injected styles apply by default, never inline scripts", async () => {
    const dir = assets();
    cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
    const browser = await launch();
    cleanup.push(() => browser.close());

    const relaxed = await startServer({ staticassets: dir });
    cleanup.push(() => relaxed.stop());
    const byDefault = await render(browser, relaxed);
    assert.match(byDefault.csp, /style-src 'self' 'unsafe-inline'/);
    assert.match(byDefault.csp, /script-src 'self';/);
    assert.equal(byDefault.color, "rgb(1, 2, 3)", "the injected style applies");
    assert.equal(byDefault.inlineRan, false, "an injected inline script is still refused");

    const strict = await startServer({ staticassets: dir, args: ["--content-security-policy", STRICT] });
    cleanup.push(() => strict.stop());
    const given = await render(browser, strict);
    assert.equal(given.csp, STRICT, "a policy given on the command line wins");
    assert.notEqual(given.color, "rgb(1, 2, 3)", "under the strict policy the style is refused");
  });
});
