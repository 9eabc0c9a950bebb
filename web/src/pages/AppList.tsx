// Applications: search, filters (kept in the URL), tiles or a table, live updates.
import { useMemo, useState } from "preact/hooks";
import type { Application } from "../api/types";
import { activeFilterCount, appCluster, appRepos, distinct, filtersFromQuery, filtersToQuery, type AppFilters } from "../lib/apps";
import { pagePath } from "../lib/routes";
import { navigate } from "../router";
import { useCan } from "../components/hooks";
import { VirtualGrid } from "../components/VirtualGrid";
import { Badge, ErrorBox, Link, Loading } from "../components/ui";
import { FilterPanel } from "./AppFilters";
import { useAppList } from "./useAppList";

type View = "tiles" | "table";
const VIEW_KEY = "tiphys.appsView";
/** The server's sorts (`sort=`), as the menu offers them. */
const SORTS: [string, string][] = [
  ["name", "Name"],
  ["-created", "Newest"],
  ["created", "Oldest"],
  ["sync", "Out of sync first"],
  ["health", "Least healthy first"],
];

export function appPath(app: Application): string {
  return `applications/${pagePath(app.metadata.namespace ?? "", app.metadata.name)}`;
}

export function AppList({ search }: { search: URLSearchParams }) {
  const filters = filtersFromQuery(search);
  const sort = SORTS.some(([v]) => v === search.get("sort")) ? (search.get("sort") as string) : "name";
  const filterKey = `${filtersToQuery(filters).toString()}&sort=${sort}`;
  const { apps, loading, error, live, version, matching, total, facets: counted, loadMore } = useAppList(filters, sort, filterKey);
  const [view, setView] = useState<View>(() => (search.get("view") as View) || (localStorage.getItem(VIEW_KEY) as View) || "tiles");
  const canCreate = useCan("applications", "create", "*/*");

  const setFilters = (f: AppFilters) => {
    const q = filtersToQuery(f, new URLSearchParams(search));
    const s = q.toString();
    navigate(`applications${s ? `?${s}` : ""}`, true);
  };
  const chooseSort = (v: string) => {
    const q = new URLSearchParams(search);
    if (v === "name") q.delete("sort");
    else q.set("sort", v);
    const s = q.toString();
    navigate(`applications${s ? `?${s}` : ""}`, true);
  };
  const chooseView = (v: View) => {
    localStorage.setItem(VIEW_KEY, v);
    setView(v);
  };

  // The server counts each filter's values under the caller's RBAC; the label suggestions come
  // from what is loaded.
  const { facets, counts } = useMemo(() => {
    const values = (field: string) => (counted.find((f) => f.field === field)?.values ?? []).map((v) => v.value).sort();
    const counts: Record<string, number> = {};
    for (const f of counted) for (const v of f.values ?? []) counts[`${f.field}/${v.value}`] = v.count;
    return {
      facets: {
        projects: values("project"),
        sync: ["Synced", "OutOfSync", "Unknown"],
        health: ["Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"],
        clusters: values("cluster"),
        namespaces: values("namespace"),
        labels: distinct(apps, (a) => Object.entries(a.metadata.labels ?? {}).map(([k, v]) => `${k}=${v}`)),
      },
      counts,
    };
  }, [version]);

  return (
    <section class="apps-page">
      <div class="toolbar">
        <h1>Applications</h1>
        <input
          type="search"
          aria-label="Search applications"
          placeholder="Search applications"
          value={filters.search}
          onInput={(e) => setFilters({ ...filters, search: e.currentTarget.value })}
        />
        <select aria-label="Sort applications" value={sort} onChange={(e) => chooseSort(e.currentTarget.value)}>
          {SORTS.map(([value, label]) => (
            <option key={value} value={value}>
              {label}
            </option>
          ))}
        </select>
        <div class="segmented" role="group" aria-label="View">
          <button type="button" aria-pressed={view === "tiles"} onClick={() => chooseView("tiles")}>
            Tiles
          </button>
          <button type="button" aria-pressed={view === "table"} onClick={() => chooseView("table")}>
            Table
          </button>
        </div>
        <button type="button" class="primary" disabled={canCreate !== true} onClick={() => navigate("applications/new")} data-testid="new-app">
          New application
        </button>
        <span class={live ? "live on" : "live"} title={live ? "Live updates connected" : "Reconnecting"} data-testid="live">
          {live ? "Live" : "Offline"}
        </span>
      </div>
      <div class="apps-body">
        <FilterPanel filters={filters} facets={facets} counts={counts} onChange={setFilters} />
        <div class="apps-main">
          <ErrorBox error={error} />
          <p class="muted" aria-live="polite" data-testid="app-count">
            {loading ? "Loading…" : `${matching} of ${total} applications`}
            {activeFilterCount(filters) > 0 && (
              <>
                {" · "}
                <button type="button" class="link" onClick={() => setFilters({ ...filters, projects: [], sync: [], health: [], labels: [], clusters: [], namespaces: [], search: "" })}>
                  Clear filters
                </button>
              </>
            )}
          </p>
          {loading ? <Loading /> : view === "tiles" ? <Tiles apps={apps} onNearEnd={loadMore} resetKey={filterKey} /> : <Table apps={apps} onNearEnd={loadMore} resetKey={filterKey} />}
        </div>
      </div>
    </section>
  );
}

const key = (a: Application) => `${a.metadata.namespace ?? ""}/${a.metadata.name}`;

function source(app: Application): string {
  const s = app.spec?.sources?.[0] ?? app.spec?.source;
  if (!s) return "";
  return [s.path || s.chart, s.targetRevision].filter(Boolean).join(" @ ");
}

interface ListProps {
  apps: Application[];
  onNearEnd: () => void;
  resetKey: string;
}

function Tiles({ apps, onNearEnd, resetKey }: ListProps) {
  return (
    <VirtualGrid
      items={apps}
      onNearEnd={onNearEnd}
      resetKey={resetKey}
      rowHeight={176}
      minTileWidth={300}
      gap={12}
      itemKey={key}
      label="Applications"
      render={(app) => (
        <article class="tile" data-app={app.metadata.name}>
          <h2>
            <Link to={appPath(app)}>{app.metadata.name}</Link>
          </h2>
          <p class="badges">
            <Badge kind="health" value={app.status?.health?.status} />
            <Badge kind="sync" value={app.status?.sync?.status} />
            {app.operation && <span class="badge phase-running">Sync requested</span>}
          </p>
          <dl class="kv compact">
            <dt>Project</dt>
            <dd>{app.spec?.project || "default"}</dd>
            <dt>Repository</dt>
            <dd class="mono ellipsis">{appRepos(app)[0] ?? "–"}</dd>
            <dt>Source</dt>
            <dd class="mono ellipsis" data-field="source">{source(app) || "–"}</dd>
            <dt>Destination</dt>
            <dd class="ellipsis">
              {appCluster(app)} / {app.spec?.destination?.namespace || "–"}
            </dd>
          </dl>
        </article>
      )}
    />
  );
}

function Table({ apps, onNearEnd, resetKey }: ListProps) {
  return (
    <div role="table" aria-label="Applications" aria-rowcount={apps.length + 1} class="apps-table">
      <VirtualGrid
        items={apps}
        onNearEnd={onNearEnd}
        resetKey={resetKey}
        rowHeight={40}
        itemKey={key}
        label="Application rows"
        header={
          <div role="row" class="trow thead">
            <span role="columnheader">Name</span>
            <span role="columnheader">Project</span>
            <span role="columnheader">Health</span>
            <span role="columnheader">Sync</span>
            <span role="columnheader">Source</span>
            <span role="columnheader">Destination</span>
          </div>
        }
        render={(app, i) => (
          <div role="row" class="trow" aria-rowindex={i + 2} data-app={app.metadata.name}>
            <span role="cell" class="ellipsis">
              <Link to={appPath(app)}>{app.metadata.name}</Link>
            </span>
            <span role="cell" class="ellipsis">{app.spec?.project || "default"}</span>
            <span role="cell">
              <Badge kind="health" value={app.status?.health?.status} />
            </span>
            <span role="cell">
              <Badge kind="sync" value={app.status?.sync?.status} />
            </span>
            <span role="cell" class="mono ellipsis" data-field="source">{source(app) || "–"}</span>
            <span role="cell" class="ellipsis">
              {appCluster(app)} / {app.spec?.destination?.namespace || "–"}
            </span>
          </div>
        )}
      />
    </div>
  );
}
