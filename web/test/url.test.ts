import { test } from "node:test";
import assert from "node:assert/strict";
import { basePath, safeHref, safeReturnUrl, underBase } from "../src/lib/url";

test("only http(s) URLs become links", () => {
  assert.equal(safeHref("https://github.com/a/b.git"), "https://github.com/a/b.git");
  assert.equal(safeHref("http://example.test/x"), "http://example.test/x");
  for (const bad of [
    "javascript:alert(1)",
    " JavaScript:alert(1)",
    "java\tscript:alert(1)",
    "data:text/html,<script>alert(1)</script>",
    "vbscript:x",
    "file:///etc/passwd",
    "git@github.com:a/b.git",
    "//evil.test/x",
    "/relative",
    "",
  ]) {
    assert.equal(safeHref(bad), undefined, bad);
  }
  assert.equal(safeHref(42), undefined);
});

test("return_url must stay on this origin and under the base path", () => {
  const base = "https://cd.example.test/tiphys/";
  assert.equal(safeReturnUrl("https://cd.example.test/tiphys/applications?proj=a", base), "https://cd.example.test/tiphys/applications?proj=a");
  assert.equal(safeReturnUrl("/tiphys/settings/projects", base), "https://cd.example.test/tiphys/settings/projects");
  for (const bad of [
    "https://evil.test/tiphys/applications",
    "//evil.test/tiphys/",
    "/\\evil.test/tiphys/",
    "javascript:alert(1)",
    "http://cd.example.test/tiphys/applications", // another origin: the scheme differs
    "https://cd.example.test/other/",
    "https://cd.example.test/tiphys/login",
    "https://cd.example.test/tiphys/auth/logout",
    "https://cd.example.test/tiphys/api/v1/session",
    "https://cd.example.test:444/tiphys/",
    "",
  ]) {
    assert.equal(safeReturnUrl(bad, base), undefined, bad);
  }
  assert.equal(safeReturnUrl(null, base), undefined);
  // A scheme-relative trick resolves on our own origin, so it is harmless.
  assert.equal(safeReturnUrl("https:evil.test", base), "https://cd.example.test/tiphys/evil.test");
});

test("API and page URLs resolve against the base href", () => {
  assert.equal(underBase("http://h/prefix/", "api/v1/applications"), "http://h/prefix/api/v1/applications");
  assert.equal(underBase("http://h/prefix/", "/api/version"), "http://h/prefix/api/version");
  assert.equal(underBase("http://h/", "api/version"), "http://h/api/version");
  assert.equal(basePath("http://h/prefix/"), "/prefix/");
  assert.equal(basePath("http://h/prefix/index.html"), "/prefix/");
});
