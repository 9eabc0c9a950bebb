// A virtualised list/grid: only the rows on screen (plus a few) are in the DOM, so 10,000
// applications scroll smoothly. Rows have a fixed height; tiles flow into as many columns as fit.
import type { ComponentChildren } from "preact";
import { useEffect, useLayoutEffect, useRef, useState } from "preact/hooks";
import { columnsFor, visibleWindow } from "../lib/vlist";

export function VirtualGrid<T>(props: {
  items: T[];
  rowHeight: number;
  /** Tiles: minimum tile width; rows: undefined (one column). */
  minTileWidth?: number;
  gap?: number;
  itemKey: (item: T) => string;
  render: (item: T, index: number) => ComponentChildren;
  label: string;
  header?: ComponentChildren;
  /** Called when the window reaches the last rows (to load the next page). */
  onNearEnd?: () => void;
  /** A change of it scrolls back to the top (another filter or order). */
  resetKey?: string;
}) {
  const scroller = useRef<HTMLDivElement>(null);
  const [size, setSize] = useState({ width: 800, height: 600 });
  const [scrollTop, setScrollTop] = useState(0);
  const frame = useRef(0);

  useLayoutEffect(() => {
    const el = scroller.current;
    if (!el) return;
    const measure = () => setSize({ width: el.clientWidth, height: el.clientHeight });
    measure();
    const ro = new ResizeObserver(measure);
    ro.observe(el);
    return () => ro.disconnect();
  }, []);

  useEffect(() => () => cancelAnimationFrame(frame.current), []);

  useEffect(() => {
    if (scroller.current) scroller.current.scrollTop = 0;
    setScrollTop(0);
  }, [props.resetKey]);

  const onScroll = () => {
    if (frame.current) return;
    frame.current = requestAnimationFrame(() => {
      frame.current = 0;
      setScrollTop(scroller.current?.scrollTop ?? 0);
    });
  };

  const gap = props.gap ?? 0;
  const columns = props.minTileWidth ? columnsFor(size.width - gap, props.minTileWidth, gap) : 1;
  const win = visibleWindow(props.items.length, columns, props.rowHeight, scrollTop, size.height);
  const visible = props.items.slice(win.start, win.end);
  const nearEnd = props.items.length > 0 && win.end >= props.items.length - columns * 4;
  useEffect(() => {
    if (nearEnd) props.onNearEnd?.();
  }, [nearEnd, props.items.length]);

  return (
    <div class="vscroll" ref={scroller} onScroll={onScroll} role="region" aria-label={props.label} tabIndex={0}>
      {props.header}
      <div class="vspacer" style={{ height: `${win.total}px` }}>
        <div
          class={props.minTileWidth ? "vtiles" : "vrows"}
          style={{
            transform: `translateY(${win.offset}px)`,
            gridTemplateColumns: props.minTileWidth ? `repeat(${columns}, minmax(0, 1fr))` : undefined,
            gap: gap ? `${gap}px` : undefined,
            gridAutoRows: `${props.rowHeight - gap}px`,
          }}
        >
          {visible.map((item, i) => (
            <div key={props.itemKey(item)} class="vcell">
              {props.render(item, win.start + i)}
            </div>
          ))}
        </div>
      </div>
    </div>
  );
}
