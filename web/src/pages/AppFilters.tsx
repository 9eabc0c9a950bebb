// The filter panel of the application list: one group of checkboxes per facet, labels by text.
import { useState } from "preact/hooks";
import type { AppFilters } from "../lib/apps";

type ListKey = "projects" | "sync" | "health" | "clusters" | "namespaces";

/** The server's facet field of each group. */
const FIELD: Record<ListKey, string> = {
  projects: "project",
  sync: "sync",
  health: "health",
  clusters: "cluster",
  namespaces: "namespace",
};

export function FilterPanel(props: {
  filters: AppFilters;
  facets: Record<ListKey | "labels", string[]>;
  /** `field/value` → how many applications choosing it would show. */
  counts: Record<string, number>;
  onChange: (f: AppFilters) => void;
}) {
  const { filters, facets, counts, onChange } = props;
  const [label, setLabel] = useState("");
  const toggle = (k: ListKey, v: string) => {
    const cur = filters[k];
    onChange({ ...filters, [k]: cur.includes(v) ? cur.filter((x) => x !== v) : [...cur, v] });
  };
  const group = (k: ListKey, title: string) => {
    const values = [...new Set([...facets[k], ...filters[k]])];
    return (
      <fieldset class="facet" key={k}>
        <legend>{title}</legend>
        {values.length === 0 && <span class="muted">none</span>}
        {values.slice(0, 50).map((v) => (
          <label key={v} class="check">
            <input type="checkbox" name={k} value={v} checked={filters[k].includes(v)} onChange={() => toggle(k, v)} />
            <span class="ellipsis">{v || "(none)"}</span>
            <span class="muted count" aria-hidden="true">
              {counts[`${FIELD[k]}/${v}`] ?? 0}
            </span>
          </label>
        ))}
      </fieldset>
    );
  };
  const addLabel = (e: Event) => {
    e.preventDefault();
    const v = label.trim();
    if (v && !filters.labels.includes(v)) onChange({ ...filters, labels: [...filters.labels, v] });
    setLabel("");
  };
  return (
    <aside class="filters" aria-label="Filters">
      {group("sync", "Sync status")}
      {group("health", "Health")}
      {group("projects", "Projects")}
      <fieldset class="facet">
        <legend>Labels</legend>
        <form onSubmit={addLabel} class="row">
          <input
            aria-label="Label filter (key=value)"
            placeholder="key=value"
            list="label-values"
            value={label}
            onInput={(e) => setLabel(e.currentTarget.value)}
          />
          <button type="submit">Add</button>
        </form>
        <datalist id="label-values">
          {facets.labels.slice(0, 200).map((l) => (
            <option key={l} value={l} />
          ))}
        </datalist>
        {filters.labels.map((l) => (
          <button type="button" class="chip" key={l} aria-label={`Remove label filter ${l}`} onClick={() => onChange({ ...filters, labels: filters.labels.filter((x) => x !== l) })}>
            {l} ×
          </button>
        ))}
      </fieldset>
      {group("clusters", "Clusters")}
      {group("namespaces", "Namespaces")}
    </aside>
  );
}
