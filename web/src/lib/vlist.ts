// Virtual list math: which rows of a fixed-height grid are on screen.

export interface Window {
  /** First item index to render (inclusive). */
  start: number;
  /** Last item index to render (exclusive). */
  end: number;
  /** Pixel offset of the first rendered row. */
  offset: number;
  /** Height of the whole list in pixels. */
  total: number;
}

/**
 * Items are laid out `columns` per row, each row `rowHeight` pixels high. Returns the items
 * visible in [scrollTop, scrollTop + viewport) plus `overscan` rows either side.
 */
export function visibleWindow(
  count: number,
  columns: number,
  rowHeight: number,
  scrollTop: number,
  viewport: number,
  overscan = 3,
): Window {
  const cols = Math.max(1, Math.floor(columns));
  const rows = Math.ceil(count / cols);
  const total = rows * rowHeight;
  if (count === 0 || rowHeight <= 0) return { start: 0, end: 0, offset: 0, total: 0 };
  const top = Math.min(Math.max(0, scrollTop), Math.max(0, total - viewport));
  const firstRow = Math.max(0, Math.floor(top / rowHeight) - overscan);
  const lastRow = Math.min(rows, Math.ceil((top + Math.max(0, viewport)) / rowHeight) + overscan);
  return {
    start: firstRow * cols,
    end: Math.min(count, lastRow * cols),
    offset: firstRow * rowHeight,
    total,
  };
}

/** How many tiles of at least `minWidth` (plus `gap`) fit in `width`. */
export function columnsFor(width: number, minWidth: number, gap: number): number {
  return Math.max(1, Math.floor((width + gap) / (minWidth + gap)));
}
