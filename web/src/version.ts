export interface VersionMessage {
  Version?: string;
  BuildDate?: string;
  GitCommit?: string;
  Platform?: string;
}

/** Resolves an API path against the page's base href, so the UI works under --basehref. */
export function apiUrl(baseUri: string, path: string): string {
  return new URL(path.replace(/^\/+/, ""), baseUri).toString();
}

/** The rows the shell shows; fields an anonymous caller does not receive are left out. */
export function describeVersion(v: VersionMessage): Array<[string, string]> {
  const rows: Array<[string, string]> = [["Server version", v.Version ?? "unknown"]];
  if (v.BuildDate) rows.push(["Build date", v.BuildDate]);
  if (v.GitCommit) rows.push(["Git commit", v.GitCommit]);
  if (v.Platform) rows.push(["Platform", v.Platform]);
  return rows;
}
