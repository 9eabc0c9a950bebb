import { test } from "node:test";
import assert from "node:assert/strict";
import { activeFilterCount, emptyFilters, filtersFromQuery, filtersToQuery, serverQuery } from "../src/lib/apps";

test("filters become the server's filter, search and selector parameters", () => {
  const q = (query: string) => serverQuery(filtersFromQuery(new URLSearchParams(query)));
  assert.deepEqual(q(""), { filter: [], search: undefined, selector: undefined });
  assert.deepEqual(q("projects=team-a&projects=team-b&sync=OutOfSync").filter, ["project=team-a", "project=team-b", "sync=OutOfSync"]);
  assert.deepEqual(q("health=Healthy&clusters=in-cluster&namespaces=pay").filter, ["health=Healthy", "cluster=in-cluster", "namespace=pay"]);
  assert.equal(q("labels=env%3Dprod&labels=tier").selector, "env=prod,tier");
  assert.equal(q("search=%20bill%20").search, "bill");
});

test("filters round-trip through the query string and keep other parameters", () => {
  const f = { ...emptyFilters(), search: "x", projects: ["a", "b"], labels: ["k=v"] };
  const q = filtersToQuery(f, new URLSearchParams("view=table&sync=Synced"));
  assert.equal(q.get("view"), "table");
  assert.equal(q.get("sync"), null, "sync is a filter key and f has none");
  assert.deepEqual(filtersFromQuery(q), f);
  assert.equal(activeFilterCount(f), 4);
});
