import { test } from "node:test";
import assert from "node:assert/strict";
import { columnsFor, visibleWindow } from "../src/lib/vlist";

test("a list of 10,000 rows renders only the rows on screen plus overscan", () => {
  const w = visibleWindow(10000, 1, 40, 0, 400, 3);
  assert.deepEqual(w, { start: 0, end: 13, offset: 0, total: 400000 });
  const mid = visibleWindow(10000, 1, 40, 4000, 400, 3);
  assert.deepEqual(mid, { start: 97, end: 113, offset: 3880, total: 400000 });
});

test("the end of the list clamps to the last item", () => {
  const w = visibleWindow(10000, 1, 40, 10_000_000, 400, 3);
  assert.equal(w.end, 10000);
  assert.equal(w.start, 10000 - 10 - 3);
});

test("tiles: whole rows of `columns` items", () => {
  const w = visibleWindow(10000, 4, 176, 176 * 10, 600, 2);
  assert.equal(w.start % 4, 0);
  assert.equal(w.start, 8 * 4);
  assert.equal(w.end, 16 * 4);
  assert.equal(w.offset, 8 * 176);
  assert.equal(w.total, 2500 * 176);
  // A partial last row.
  const tail = visibleWindow(10, 4, 100, 0, 1000, 0);
  assert.deepEqual(tail, { start: 0, end: 10, offset: 0, total: 300 });
});

test("empty and degenerate inputs", () => {
  assert.deepEqual(visibleWindow(0, 3, 40, 100, 400), { start: 0, end: 0, offset: 0, total: 0 });
  assert.equal(visibleWindow(5, 0, 40, 0, 400).end, 5, "columns below 1 count as 1");
  assert.equal(visibleWindow(5, 1, 40, -50, 400).start, 0);
});

test("columns that fit a width", () => {
  assert.equal(columnsFor(1000, 300, 12), 3);
  assert.equal(columnsFor(924, 300, 12), 3);
  assert.equal(columnsFor(923, 300, 12), 2);
  assert.equal(columnsFor(100, 300, 12), 1);
});
